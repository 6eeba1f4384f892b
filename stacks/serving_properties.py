"""Render an engine's serving.properties for one stage: the folder's base file, with the stage's keys set.

The base file (model_artifacts/<engine>/serving.properties) holds what every stage shares; this adds what the stage
config decides (tensor parallel degree, dtype, limits, start-up timeout). Base keys the stage sets are replaced in
place; the rest are appended under a comment. The handler's own list of the keys it reads
(model_artifacts/deepspeed/lmi_config.py, OWNED_PROPERTY_KEYS) is checked against these in the tests.
"""

from __future__ import annotations

import re
from pathlib import Path

from stacks.config import ServingConfig

MODEL_ARTIFACTS = Path(__file__).resolve().parent.parent / "model_artifacts"


def stage_properties(serving: ServingConfig) -> dict[str, str]:
    """The keys a stage's config decides, for its engine."""
    model = serving.catalog_model
    common = {
        "option.tensor_parallel_degree": str(serving.tensor_parallel_degree),
        # DJL gives up on start-up after this; SageMaker's health check waits as long.
        "option.model_loading_timeout": str(serving.startup_timeout),
    }
    if serving.engine == "deepspeed":
        return {
            **common,
            "option.dtype": serving.dtype,
            "option.context_length": str(model.context_tokens),
            "option.max_new_tokens": str(serving.max_new_tokens),
            "option.max_batch_size": str(serving.max_batch_size),
        }
    return {
        **common,
        "option.dtype": serving.dtype,
        "option.max_model_len": str(model.context_tokens),
        "option.max_rolling_batch_size": str(serving.max_batch_size),
    }


def render(serving: ServingConfig, *, stage_name: str, base_dir: Path = MODEL_ARTIFACTS) -> str:
    """The complete serving.properties for the stage."""
    base = (base_dir / serving.engine / "serving.properties").read_text()
    wanted = stage_properties(serving)
    lines, seen = [], set()
    for line in base.splitlines():
        match = re.match(r"^\s*([^#!=:\s][^=:]*?)\s*[=:]", line)
        key = match.group(1) if match else None
        if key in wanted:
            lines.append(f"{key}={wanted[key]}")
            seen.add(key)
        else:
            lines.append(line)
    rest = [f"{key}={value}" for key, value in wanted.items() if key not in seen]
    if rest:
        lines += ["", f"# Set for stage {stage_name} from its serving config (stacks/serving_properties.py)."]
        lines += rest
    return "\n".join(lines).rstrip("\n") + "\n"
