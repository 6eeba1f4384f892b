"""The files generated from the architecture and model records (core/catalog/architectures.py, models.py): the JSON
copy of the architecture records each container folder reads (it cannot import core/), and the README's model
table.

    python -m generators.architectures            # print the JSON and the table
    python -m generators.architectures --write    # rewrite the JSON copies and the README's table
    python -m generators.architectures --check    # exit 1 if any of them is not what this renders
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from core.catalog.architectures import ARCHITECTURE_FILES, ARCHITECTURES, OLDEST_TRANSFORMERS
from core.catalog.models import LMI_DEEPSPEED_TRANSFORMERS, MODELS, Model
from generators.generated_files import MarkedSection, command_line

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


def expected_files() -> dict[Path, str]:
    """Each generated file as the records render it: the JSON copies, and the README with its current table."""
    return {
        **dict.fromkeys(ARCHITECTURE_FILES, architectures_json()),
        README: rewritten(README.read_text()),
    }


def main(argv: list[str] | None = None) -> int:
    return command_line(
        argv,
        prog="python -m generators.architectures",
        description=__doc__.split("\n")[0],
        expected=expected_files,
        preview=lambda: architectures_json() + "\n" + model_table(),
        root=REPO,
    )


if __name__ == "__main__":
    sys.exit(main())
