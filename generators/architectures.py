"""The files generated from the architecture and model records (core/catalog/architectures.py, models.py): the JSON
copy of the architecture records each container folder reads (it cannot import core/), and the README's model
table.

    python -m generators.architectures            # print the JSON and the table
    python -m generators.architectures --write    # rewrite the JSON copies and the README's table
    python -m generators.architectures --check    # exit 1 if any of them is not what this renders
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.catalog.architectures import ARCHITECTURE_FILES, ARCHITECTURES, OLDEST_TRANSFORMERS
from core.catalog.models import LMI_DEEPSPEED_TRANSFORMERS, MODELS, Model
from generators.marked_section import MarkedSection

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BEGIN = "<!-- models:begin -->"
END = "<!-- models:end -->"
SECTION = MarkedSection(BEGIN, END)
NOTICE = (
    "<!-- generated from core/catalog/models.py and architectures.py by `python -m generators.architectures "
    "--write` (make docs); edit the records there, not here -->"
)
COLUMNS = (
    "model",
    "Hugging Face",
    "serve: deepspeed",
    "serve: vllm",
    "fine-tune: SMP v1 (full)",
    "SMP v2 (full)",
    "LoRA / QLoRA",
)
GENERATED_BY = "python -m generators.architectures --write (make docs), from core/catalog/architectures.py"


def architectures_json() -> str:
    """The records as the containers read them: model_type -> its fields."""
    document = {
        "generated_by": GENERATED_BY,
        "architectures": {name: record.as_json() for name, record in ARCHITECTURES.items()},
    }
    return json.dumps(document, indent=2) + "\n"


def model_table() -> str:
    """The README's table, markers included."""
    header = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join([BEGIN, NOTICE, "", *header, *(_row(model) for model in MODELS.values()), END])


def _row(model: Model) -> str:
    gated = " (gated)" if model.gated else ""
    cells = [
        f"`{model.name}`",
        model.hf_id + gated,
        _deepspeed(model),
        "yes, and its adapters" if model.traits.vllm_lora else "yes",
        _smp_v1(model),
        "yes" if model.traits.smp_v2_tensor_parallel else "yes, without tensor parallelism",
        model.adapters_summary,
    ]
    return "| " + " | ".join(cells) + " |"


def _deepspeed(model: Model) -> str:
    if not model.loads_with_transformers(LMI_DEEPSPEED_TRANSFORMERS):
        return f"no: LMI 0.27.0's transformers {LMI_DEEPSPEED_TRANSFORMERS} cannot load it"
    if model.checkpoints:
        dtypes = " or ".join(checkpoint.dtype for checkpoint in model.checkpoints)
        return f"{dtypes} from DeepSpeed's pre-sharded checkpoints"
    return "yes" if model.deepspeed_kernels else "yes, without kernel injection"


def _smp_v1(model: Model) -> str:
    if not model.loads_with_transformers(OLDEST_TRANSFORMERS):
        return f"no: transformers {OLDEST_TRANSFORMERS}"
    return "yes, with tensor parallelism (the reference)" if model.traits.smp_v1_tensor_parallel else "yes"


def generated_part(page_text: str) -> str:
    return SECTION.current(page_text)


def rewritten(page_text: str) -> str:
    return SECTION.rewritten(page_text, model_table())


def stale_files() -> list[Path]:
    """The generated files whose content is not what the records render."""
    stale = [path for path in ARCHITECTURE_FILES if not path.is_file() or path.read_text() != architectures_json()]
    if generated_part(README.read_text()) != model_table():
        stale.append(README)
    return stale


def write(paths: list[Path]) -> None:
    for path in paths:
        path.write_text(rewritten(path.read_text()) if path == README else architectures_json())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generators.architectures", description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the JSON copies and the README's table")
    action.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    arguments = parser.parse_args(argv)
    if not (arguments.write or arguments.check):
        print(architectures_json() + "\n" + model_table())
        return 0
    stale = stale_files()
    if arguments.check:
        for path in stale:
            print(f"{path.relative_to(REPO)} is stale; run {parser.prog} --write", file=sys.stderr)
        return 1 if stale else 0
    write(stale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
