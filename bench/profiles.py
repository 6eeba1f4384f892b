"""Summaries of the two profiles of one synthesis: Python's (cProfile) and the jsii node process's (V8 --cpu-prof).

Python: self time grouped by where the code lives (a package, the app's own folders, the standard library), the
functions with the most cumulative time, and who calls the SDK's config validation and botocore's model loading.
Node: inclusive time of the CDK's synthesis steps (aspects, cdk-nag rules, the built-in CloudFormation validation,
module loading) and the time node sat waiting for Python (a blocked read on its stdin).
"""

from __future__ import annotations

import json
import pstats
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Builtins whose self time means something more specific than "a builtin".
_BUILTIN_BUCKETS = {
    "<method 'readline' of '_io.BufferedReader' objects>": "waiting for the jsii node process (pipe read)",
    "<method 'flush' of '_io.BufferedWriter' objects>": "sending to the jsii node process (pipe write)",
    "<built-in method marshal.loads>": "imports: loading compiled modules",
    "<built-in method builtins.compile>": "imports: compiling modules without a .pyc",
    "<built-in method posix.stat>": "imports and file checks: stat()",
}


def python_bucket(filename: str, function: str) -> str:
    if filename == "~":
        return _BUILTIN_BUCKETS.get(function, "other builtins")
    match = re.search(r"site-packages/([^/]+)", filename)
    if match:
        return match.group(1)
    if str(REPO_ROOT) in filename:
        relative = filename.split(str(REPO_ROOT) + "/", 1)[1]
        parts = relative.split("/")
        return "app: " + ("/".join(parts[:2]) if len(parts) > 2 else relative)
    if "importlib" in filename:
        return "imports: importlib machinery"
    return "stdlib: " + Path(filename).stem


@dataclass(frozen=True)
class PythonProfile:
    total_seconds: float
    buckets: list[tuple[str, float]]  # (where, self seconds), largest first
    top_cumulative: list[tuple[str, int, float, float]]  # (function, calls, self s, cumulative s)
    callers: dict[str, list[tuple[str, int, float]]]  # function -> (caller, calls, cumulative s)


def _name(key: tuple[str, int, str]) -> str:
    filename, line, function = key
    if filename == "~":
        return function
    short = filename.split("site-packages/", 1)[-1].split(str(REPO_ROOT) + "/", 1)[-1]
    return f"{short}:{line}({function})"


def summarize_python(path: Path, *, interesting: Iterable[str] = (), top: int = 25) -> PythonProfile:
    """`interesting`: substrings of function names whose callers are listed (e.g. 'validate_sagemaker_config')."""
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    buckets: Counter[str] = Counter()
    for (filename, _line, function), (_cc, _nc, self_time, _cum, _callers) in stats.items():
        buckets[python_bucket(filename, function)] += self_time
    total = sum(buckets.values())
    # Cumulative time, without the harness's own frames and the generic wrappers every call goes through.
    skip = re.compile(r"bench/|importlib|contextlib|jsii/_kernel|jsii/_runtime|<built-in method builtins\.(exec|next)")
    ranked = sorted(stats.items(), key=lambda item: item[1][3], reverse=True)
    top_cumulative = [
        (_name(key), value[1], value[2], value[3]) for key, value in ranked if not skip.search(_name(key))
    ][:top]
    callers: dict[str, list[tuple[str, int, float]]] = {}
    for needle in interesting:
        for key, value in stats.items():
            if needle in _name(key):
                callers[_name(key)] = sorted(
                    ((_name(caller), int(info[1]), float(info[3])) for caller, info in value[4].items()),
                    key=lambda row: row[2],
                    reverse=True,
                )
    return PythonProfile(total, buckets.most_common(), top_cumulative, callers)


# Node frames worth naming, as (label, function name, a piece of the script URL). Inclusive time is summed once
# per sample, so nested frames do not double count. bench/synth.py looks steps up by these labels.
NODE_ASPECTS = "aspects (the three cdk-nag packs)"
NODE_NAG_RULES = "cdk-nag rules (NagPack.applyRule)"
NODE_CALLBACKS = "callbacks into Python code (jsii callbackHandler)"
NODE_VALIDATION = "built-in validation: all (validateTemplates)"
NODE_VALIDATION_ENGINE = "built-in validation: engine start (WASM, schemas)"
NODE_VALIDATION_RUN = "built-in validation: validating templates"
NODE_STEPS = (
    ("whole synthesis (App.synth)", "synthesize", "core/lib/private/synthesis.js"),
    (NODE_ASPECTS, "invokeAspectsV2", "core/lib/private/synthesis"),
    (NODE_NAG_RULES, "applyRule", "cdk-nag/lib/nag-pack.js"),
    (NODE_CALLBACKS, "callbackHandler", "program.js"),
    (NODE_VALIDATION, "validateTemplates", "core/lib/private/synthesis-validation"),
    (NODE_VALIDATION_ENGINE, "_singletonInstance", "cloudformation-validate-plugin"),
    (NODE_VALIDATION_RUN, "validate", "cloudformation-validate-plugin"),
    ("templates and assets written (synthNestedAssemblies)", "synthNestedAssemblies", "core/lib/private/synthesis"),
    ("loading JavaScript modules (require)", "Module._load", "node:internal/modules/cjs/loader"),
    ("node idle, waiting for Python (stdin read)", "readSync", "node:fs"),
)


@dataclass(frozen=True)
class NodeProfile:
    total_seconds: float
    steps: list[tuple[str, float]]  # (label, inclusive seconds)
    packages: list[tuple[str, float]]  # (package, self seconds), largest first


def _node_package(url: str, function: str) -> str:
    if not url:
        return f"({function or 'native'})"
    if url.startswith("wasm://"):
        return "WebAssembly (the CloudFormation validation engine)"
    if "program.js" in url or "jsii-runtime" in url:
        return "jsii runtime"
    match = re.search(r"node_modules/((?:@[^/]+/)?[^/]+)/(?:lib/)?([^/]+)?", url)
    if match:
        package, area = match.group(1), match.group(2)
        return f"aws-cdk-lib/{area}" if package == "aws-cdk-lib" and area else package
    return url.split("/")[0] if url.startswith("node:") else Path(url).name


def summarize_node(profile_dir: Path) -> NodeProfile | None:
    """The largest .cpuprofile in the folder is the jsii kernel's (the other is its small launcher)."""
    files = sorted(profile_dir.glob("*.cpuprofile"), key=lambda path: path.stat().st_size)
    if not files:
        return None
    profile = json.loads(files[-1].read_text())
    nodes = {node["id"]: node for node in profile["nodes"]}
    parent = {child: node["id"] for node in profile["nodes"] for child in node.get("children", ())}
    self_us: Counter[int] = Counter()
    for sample, delta in zip(profile["samples"], profile["timeDeltas"], strict=True):
        self_us[sample] += delta
    packages: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    for node_id, micros in self_us.items():
        frame = nodes[node_id]["callFrame"]
        packages[_node_package(frame["url"], frame["functionName"])] += micros
        seen: set[str] = set()
        current: int | None = node_id
        while current is not None:
            frame = nodes[current]["callFrame"]
            for label, function, url_part in NODE_STEPS:
                if label not in seen and frame["functionName"] == function and url_part in frame["url"]:
                    steps[label] += micros
                    seen.add(label)
            current = parent.get(current)
    total = sum(self_us.values()) / 1e6
    return NodeProfile(
        total,
        [(label, steps[label] / 1e6) for label, _, _ in NODE_STEPS],
        [(name, micros / 1e6) for name, micros in packages.most_common(12)],
    )
