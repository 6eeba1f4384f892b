"""An engine's serving.properties for one stage: the folder's base file, with the stage's keys set.

The base file (model_artifacts/<engine>/serving.properties) holds what every stage shares; this adds what the stage
config decides (tensor parallel degree, dtype, limits, start-up timeout). The handler's own list of the keys it reads
(model_artifacts/deepspeed/lmi_config.py, OWNED_PROPERTY_KEYS) is checked against these in the tests.

An endpoint gets them as the Model's environment (`environment`): DJL reads `OPTION_<KEY>` variables as
`option.<key>` and `OPTION_ENGINE` as `engine` (wlm ModelInfo.loadServingProperties, v0.27.0 and the current line),
so the folder SageMaker delivers holds only weights and handler, and a stage's keys never need a copy of either.
`render` writes the same keys as a file, for the code archive a registered model package carries.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.config import ServingConfig

MODEL_ARTIFACTS = Path(__file__).resolve().parent.parent / "model_artifacts"
# DJL 0.27.0 lower-cases what follows OPTION_ and spells only entryPoint otherwise; the current line lower-cases only
# snake-case names. A key outside these forms would arrive under another name, so none may be rendered.
_OPTION_KEY = re.compile(r"^option\.([a-z0-9_]+|entryPoint)$")


def stage_properties(serving: ServingConfig) -> dict[str, str]:
    """The keys a stage's config decides, for its engine."""
    common = {
        "option.tensor_parallel_degree": str(serving.tensor_parallel_degree),
        # DJL gives up on start-up after this; SageMaker's health check waits as long.
        "option.model_loading_timeout": str(serving.startup_timeout),
    }
    if serving.engine == "deepspeed":
        return {
            **common,
            "option.dtype": serving.dtype,
            "option.context_length": str(serving.served_context),
            "option.max_new_tokens": str(serving.max_new_tokens),
            "option.max_batch_size": str(serving.max_batch_size),
        }
    return {
        **common,
        "option.dtype": serving.dtype,
        "option.max_model_len": str(serving.served_context),
        "option.max_rolling_batch_size": str(serving.max_batch_size),
        # A base model with adapter components: vLLM's LoRA slots (core/config/lora_serving.py).
        **(serving.lora.properties() if serving.lora else {}),
    }


_PROPERTY = re.compile(r"^\s*([^#!=:\s][^=:]*?)\s*[=:]\s*(.*?)\s*$")


def _key(line: str) -> str | None:
    match = _PROPERTY.match(line)
    return match.group(1) if match else None


def properties(serving: ServingConfig, *, base_dir: Path = MODEL_ARTIFACTS) -> dict[str, str]:
    """Every key of the stage's serving.properties: the base file's, with the stage's replacing and added."""
    lines = (base_dir / serving.engine / "serving.properties").read_text().splitlines()
    base = dict(match.groups() for match in map(_PROPERTY.match, lines) if match)
    return {**base, **stage_properties(serving)}


def environment(
    serving: ServingConfig, *, entry_point: str | None = None, base_dir: Path = MODEL_ARTIFACTS
) -> dict[str, str]:
    """The stage's serving.properties as the Model's environment: `engine` as OPTION_ENGINE, `option.<key>` as
    OPTION_<KEY>. `entry_point` replaces option.entryPoint (the handler's absolute path in the delivered folder)."""
    values = properties(serving, base_dir=base_dir)
    if entry_point is not None:
        values["option.entryPoint"] = entry_point
    env = {}
    for key, value in values.items():
        if key == "engine":
            env["OPTION_ENGINE"] = value
            continue
        match = _OPTION_KEY.match(key)
        if match is None:
            raise ValueError(
                f"serving.properties key {key!r} of engine {serving.engine} cannot travel as an environment variable: "
                "DJL maps only OPTION_<KEY> (to option.<key>, lower case) and OPTION_ENGINE; set it another way"
            )
        env[f"OPTION_{match.group(1).upper()}"] = value
    # DJL's fallback when option.tensor_parallel_degree is absent, as in the reference notebooks; the handler reads it.
    env["TENSOR_PARALLEL_DEGREE"] = str(serving.tensor_parallel_degree)
    return env


def render(serving: ServingConfig, *, stage_name: str, base_dir: Path = MODEL_ARTIFACTS) -> str:
    """The complete serving.properties for the stage, as a file (comments kept)."""
    base = (base_dir / serving.engine / "serving.properties").read_text()
    wanted = stage_properties(serving)
    lines, seen = [], set()
    for line in base.splitlines():
        key = _key(line)
        if key in wanted:
            lines.append(f"{key}={wanted[key]}")
            seen.add(key)
        else:
            lines.append(line)
    rest = [f"{key}={value}" for key, value in wanted.items() if key not in seen]
    if rest:
        lines += ["", f"# Set for stage {stage_name} from its serving config (core/serving_properties.py)."]
        lines += rest
    return "\n".join(lines).rstrip("\n") + "\n"
