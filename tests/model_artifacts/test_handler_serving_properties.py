"""The base serving.properties files, and a stage-rendered one parsed back the way DJL and the handler read it."""

from __future__ import annotations

from pathlib import Path

from lmi_config import OWNED_PROPERTY_KEYS, HandlerConfig

from local.serve import handler_properties, read_properties_file

ARTIFACTS = Path(__file__).resolve().parents[2] / "model_artifacts"
DEEPSPEED_BASE = ARTIFACTS / "deepspeed" / "serving.properties"
VLLM_BASE = ARTIFACTS / "vllm" / "serving.properties"

STAGE_KEYS = {  # what the CDK side renders for, e.g., GPT-J on ml.g5.12xlarge
    "option.tensor_parallel_degree": "4",
    "option.dtype": "fp16",
    "option.max_new_tokens": "512",
    "option.max_batch_size": "8",
    "option.max_input_length": "1536",
    "option.context_length": "2048",
    "option.kernel_injection": "auto",
}


def test_deepspeed_base_selects_mpi_mode_and_our_model_py():
    base = read_properties_file(DEEPSPEED_BASE)
    assert base["engine"] == "DeepSpeed"
    assert base["option.entryPoint"] == "model.py"
    assert (ARTIFACTS / "deepspeed" / base["option.entryPoint"]).is_file()
    assert int(base["option.model_loading_timeout"]) <= 3600  # SageMaker's health-check ceiling
    assert int(base["option.predict_timeout"]) > 0


def test_base_files_hold_no_stage_keys_and_never_name_a_model():
    for path in (DEEPSPEED_BASE, VLLM_BASE):
        base = read_properties_file(path)
        assert not set(base) & set(OWNED_PROPERTY_KEYS), path
        assert not {"option.model_id", "option.s3url", "option.tensor_parallel_degree"} & set(base), path


def test_a_rendered_stage_file_parses_back_into_the_handlers_config(tmp_path):
    rendered = tmp_path / "serving.properties"
    rendered.write_text(
        DEEPSPEED_BASE.read_text() + "\n# stage: dev\n" + "".join(f"{k}={v}\n" for k, v in STAGE_KEYS.items())
    )
    properties = read_properties_file(rendered)
    assert properties == {**read_properties_file(DEEPSPEED_BASE), **STAGE_KEYS}

    # What DJL hands model.py: option.* without the prefix, plus its own keys (tensor_parallel_degree as an int).
    (tmp_path / "config.json").write_text("{}")  # model_dir: the weights SageMaker delivered
    djl_properties = handler_properties(properties, tmp_path, cuda_devices=4)
    assert djl_properties["tensor_parallel_degree"] == 4
    config = HandlerConfig.from_properties(djl_properties, {})
    assert config == HandlerConfig(
        weights=str(tmp_path),
        tensor_parallel_degree=4,
        dtype="fp16",
        max_new_tokens=512,
        max_batch_size=8,
        max_input_length=1536,
        context_length=2048,
        kernel_injection="auto",
        model_loading_timeout=int(properties["option.model_loading_timeout"]),  # DJL's
    )


def test_vllm_base_uses_lmis_own_async_vllm_handler():
    base = read_properties_file(VLLM_BASE)
    assert base["engine"] == "Python"
    assert base["option.async_mode"] == "true"
    assert base["option.rolling_batch"] == "disable"
    assert base["option.entryPoint"] == "djl_python.lmi_vllm.vllm_async_service"
    assert sorted(path.name for path in (ARTIFACTS / "vllm").iterdir()) == ["serving.properties"]
