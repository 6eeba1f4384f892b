"""deepspeed_standin against the installed DeepSpeed's own DeepSpeedInferenceConfig, so that the stand-in is checked
against DeepSpeed itself, not only against our reading of it. The stand-in's keys are DeepSpeed 0.12.6's (the LMI
0.27.0 image's); this file runs in the dev venv (DeepSpeed 0.19.8) and in `make test-containers`' lmi-0.27 venv
(0.12.6), and must pass under both."""

from __future__ import annotations

import importlib.metadata
import json

import deepspeed_standin
import lmi_loading
import pytest
from lmi_config import HandlerConfig

# What DeepSpeedInferenceConfig's keys (field names and aliases) gained and lost after 0.12.6, by installed release:
# (added, removed). Read in deepspeed/inference/config.py: deepspeedai/DeepSpeed@v0.12.6 and the dev venv's 0.19.8.
CHANGED_SINCE_IMAGE = {
    "0.12.6": (set(), set()),
    # keep_module_on_host: keep the weights in host memory and move them layer by layer (added in 0.16.3).
    "0.19.8": ({"keep_module_on_host"}, set()),
}


def installed_config_keys() -> set[str]:
    """Every key the installed DeepSpeedInferenceConfig takes: its field names and their aliases."""
    from deepspeed.inference.config import DeepSpeedInferenceConfig

    # Later releases build a pydantic 2 model (model_fields; alias None when there is none); 0.12.6 builds a pydantic
    # 1 model through deepspeed/pydantic_v1.py (__fields__; alias equal to the name when there is none).
    fields = getattr(DeepSpeedInferenceConfig, "model_fields", None) or DeepSpeedInferenceConfig.__fields__
    return {key for name, field in fields.items() for key in (name, field.alias) if key}


def test_the_stand_in_takes_exactly_the_config_keys_of_the_installed_deepspeed():
    version = importlib.metadata.version("deepspeed")
    assert version in CHANGED_SINCE_IMAGE, (
        f"DeepSpeed {version} is installed, and CHANGED_SINCE_IMAGE has no entry for it: read its "
        "deepspeed/inference/config.py and record the DeepSpeedInferenceConfig keys it added and removed since 0.12.6"
    )
    added, removed = CHANGED_SINCE_IMAGE[version]
    expected = (deepspeed_standin.CONFIG_KEYS - removed) | added
    installed = installed_config_keys()
    assert installed == expected, (
        f"DeepSpeed {version}'s DeepSpeedInferenceConfig takes {sorted(installed - expected)} that the stand-in (with "
        f"the changes recorded since 0.12.6) does not, and not {sorted(expected - installed)}: correct "
        "deepspeed_standin.CONFIG_KEYS (0.12.6's keys) or CHANGED_SINCE_IMAGE"
    )


@pytest.mark.parametrize(
    ("settings", "refusal"),
    [
        ({"tensor_paralel": {"tp_size": 2}}, ValueError),  # extra="forbid": pydantic's ValidationError is one
        # config_utils.py, _process_deprecated_field: the deprecated alias and its replacement together.
        ({"mp_size": 2, "tensor_parallel": {"tp_size": 2}}, AssertionError),
    ],
)
def test_the_stand_in_refuses_what_the_installed_deepspeed_refuses(settings, refusal):
    from deepspeed.inference.config import DeepSpeedInferenceConfig

    with pytest.raises(refusal):
        DeepSpeedInferenceConfig(**settings)
    with pytest.raises(refusal):
        deepspeed_standin.init_inference(object(), **settings)


def _ds_checkpoint(folder) -> dict:
    """One int8 shard of a BLOOM DeepSpeed checkpoint, laid out as microsoft/bloom-deepspeed-inference-int8."""
    description = {
        "type": "BLOOM",
        "checkpoints": {"non_tp": ["non-tp.pt"], "tp": ["tp_00_00.pt"]},
        "version": 1.0,
        "parallelization": "tp",
        "tp_size": 1,
        "dtype": "int8",
    }
    for name in ("non-tp.pt", "tp_00_00.pt"):
        (folder / name).write_bytes(b"")
    (folder / "ds_inference_config.json").write_text(json.dumps(description))
    return description


def test_what_the_meta_path_hands_init_inference_is_a_config_the_installed_deepspeed_accepts(
    tmp_path, tiny_model_dir, monkeypatch
):
    """The kernel-injection path (a pre-sharded checkpoint on the meta device) runs only through the stand-in here:
    it needs CUDA kernels. Its arguments are also given to DeepSpeed's own config class, so a key or a value the
    stand-in takes and DeepSpeed does not fails here, not on an endpoint."""
    import shutil

    import deepspeed
    import torch
    from deepspeed.inference.config import DeepSpeedInferenceConfig

    weights = tmp_path / "bloom-ds"
    shutil.copytree(tiny_model_dir("bloom"), weights)
    description = _ds_checkpoint(weights)
    handed = []

    def recorded_init_inference(model, **kwargs):
        handed.append(kwargs)
        return deepspeed_standin.init_inference(model, **kwargs)

    monkeypatch.setattr(deepspeed, "init_inference", recorded_init_inference)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setitem(lmi_loading._LAST_TRANSFORMERS_FOR_INJECTION, "bloom", (99,))  # pretend an older stack
    config = HandlerConfig(weights=str(weights), dtype="int8", tensor_parallel_degree=1)
    _, _, plan = lmi_loading.load_model(str(weights), config, use_cuda=True)

    (kwargs,) = handed
    assert {"checkpoint", "base_dir", "max_out_tokens", "replace_with_kernel_inject"} <= set(kwargs)
    accepted = DeepSpeedInferenceConfig(**kwargs)
    assert accepted.tensor_parallel.tp_size == 1
    assert accepted.replace_with_kernel_inject is True
    assert accepted.max_out_tokens == plan.context_length
    assert accepted.checkpoint == {**description, "base_dir": str(weights)}
    assert accepted.base_dir == str(weights)
