"""The layers of docs/README.md hold: the core loads every config without the CDK, every layer imports only the
layers below it, no product module is part of an import circle, and an import written inside a function says why.

Imports are read from the source (ast), so a layer that imports upward fails here even where no test runs that code.
Imports under `if TYPE_CHECKING:` are annotations only and never run: they are not counted.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CDK = ("aws_cdk", "constructs", "jsii", "cdk_nag")
# Each layer and what it may import of the project (its own modules always). training/ and model_artifacts/ run inside
# SageMaker's containers, where nothing else of the repository exists.
LAYERS = {
    "core": {"training"},
    "infrastructure": {"core", "training"},
    "generators": {"core", "infrastructure", "model_artifacts", "training"},
    # training: upload-data checks files with the pipeline's own reader (training/prepare_data.py), not a copy.
    "cli": {"core", "generators", "promotion", "training"},
    "app": {"core", "infrastructure"},
    "training": set(),
    "model_artifacts": set(),
    "promotion": set(),  # runs in AWS Lambda, where nothing else of the repository exists
}
# The platform side, where an import inside a function needs its reason (`# deferred: ...`). The container code
# defers imports by design (each backend imports only what its image has): see training/finetune/backends.
EXPLAINED_DEFERRALS = ("core", "infrastructure", "generators", "cli", "app")


@dataclass
class Module:
    name: str
    path: Path
    imports: set[str] = field(default_factory=set)
    unexplained: list[str] = field(default_factory=list)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _product_modules() -> dict[str, Module]:
    paths = [REPO / "app.py"] + [p for layer in LAYERS if layer != "app" for p in sorted((REPO / layer).rglob("*.py"))]
    return {_module_name(p): Module(_module_name(p), p) for p in paths}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    return {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }


def _imported(node: ast.Import | ast.ImportFrom, module: Module, known: dict[str, Module]) -> list[str]:
    """The modules an import statement loads: `from a import b` is a.b where b is a module, else a."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.name.split(".") if module.path.name == "__init__.py" else module.name.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
    return submodules if len(submodules) == len(node.names) else [base, *submodules]


def _explained(lines: list[str], node: ast.stmt) -> bool:
    """A `# deferred:` comment at the end of the import or on the lines of comment just above it."""
    if "# deferred:" in lines[node.lineno - 1]:
        return True
    above = node.lineno - 2
    while above >= 0 and lines[above].strip().startswith("#"):
        if "# deferred:" in lines[above]:
            return True
        above -= 1
    return False


def _read_imports(modules: dict[str, Module]) -> None:
    for module in modules.values():
        source = module.path.read_text()
        tree, lines = ast.parse(source), source.splitlines()
        annotations_only = _type_checking_nodes(tree)
        in_functions = {
            id(node): function
            for function in ast.walk(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)
        }
        explained_block = False
        for node in sorted(
            (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))), key=lambda n: n.lineno
        ):
            if id(node) in annotations_only:
                continue
            module.imports.update(_imported(node, module, modules))
            if id(node) in in_functions:
                explained_block = _explained(lines, node) or (explained_block and _follows_import(lines, node))
                if not explained_block:
                    module.unexplained.append(f"{_shown(module.path)}:{node.lineno} {ast.unparse(node)}")
            else:
                explained_block = False


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def _follows_import(lines: list[str], node: ast.stmt) -> bool:
    """The statement just above (blank lines skipped) is an import: one comment explains a block of them."""
    above = node.lineno - 2
    while above > 0 and not lines[above].strip():
        above -= 1
    text = lines[above].strip()
    return text.startswith(("from ", "import ", ")")) or text.endswith(",")


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    found = _product_modules()
    _read_imports(found)
    return found


def _layer(name: str) -> str:
    return name.split(".")[0]


def _upward(modules: dict[str, Module]) -> list[str]:
    return sorted(
        f"{module.name} imports {target}"
        for module in modules.values()
        for target in module.imports
        if _layer(target) in LAYERS
        and _layer(target) != _layer(module.name)
        and _layer(target) not in LAYERS[_layer(module.name)]
    )


def test_every_layer_imports_only_the_layers_below_it(modules):
    assert _upward(modules) == []


def test_nothing_in_the_core_imports_the_cdk(modules):
    cdk = sorted(
        f"{m.name} imports {t}"
        for m in modules.values()
        if _layer(m.name) == "core"
        for t in m.imports
        if _layer(t) in CDK
    )
    assert cdk == []


def test_no_product_module_is_part_of_an_import_circle(modules):
    graph = {name: {t for t in m.imports if t in modules and t != name} for name, m in modules.items()}
    assert _circles(graph) == []


def test_an_import_inside_a_function_on_the_platform_side_says_why_it_is_deferred(modules):
    unexplained = [line for m in modules.values() if _layer(m.name) in EXPLAINED_DEFERRALS for line in m.unexplained]
    assert unexplained == [], "say why with a `# deferred:` comment, or import at the top of the module"


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


CONFIGS = sorted(
    str(p.relative_to(REPO)) for p in [REPO / "config" / "default.yaml", *(REPO / "config").glob("examples/*.yaml")]
)


def test_the_core_loads_every_example_config_without_the_cdk():
    """In a fresh interpreter: every module of core/ imported, every example config loaded, and still not one module of
    the CDK, jsii or the infrastructure layer in sys.modules."""
    script = (
        "import importlib, json, pkgutil, sys, core\n"
        "from core.config import load_config\n"
        "for info in pkgutil.walk_packages(core.__path__, 'core.'):\n"
        "    importlib.import_module(info.name)\n"
        f"for path in {CONFIGS!r}:\n"
        "    load_config(path)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {(*CDK, 'infrastructure')!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert len(CONFIGS) > 5


def test_an_upward_import_would_be_found(tmp_path):
    module = Module("core.example", tmp_path / "example.py")
    module.path.write_text("from infrastructure import stage\nimport training.finetune\n")
    _read_imports({module.name: module})
    assert _upward({module.name: module}) == ["core.example imports infrastructure"]


def test_an_unexplained_deferred_import_would_be_found(tmp_path):
    module = Module("core.example", tmp_path / "example.py")
    module.path.write_text(
        "def f():\n"
        "    import json\n"
        "    return json\n\n\n"
        "def g():\n"
        "    # deferred: the SDK takes seconds to import\n"
        "    import sagemaker\n"
        "    from sagemaker import utils\n"
        "    return sagemaker, utils\n"
    )
    _read_imports({module.name: module})
    assert module.unexplained == ["example.py:2 import json"]
