"""The rendered serving.properties: both sides of the seam agree on the keys, and the handler accepts the result."""

from __future__ import annotations

import runpy

import pytest

from core.config import ServingConfig
from core.serving_properties import MODEL_ARTIFACTS, environment, properties, render, stage_properties
from local.serve import read_properties_file

LMI_CONFIG = runpy.run_path(str(MODEL_ARTIFACTS / "deepspeed" / "lmi_config.py"))


def parse(text: str, tmp_path) -> dict[str, str]:
    path = tmp_path / "serving.properties"
    path.write_text(text)
    return read_properties_file(path)


def test_deepspeed_stage_keys_are_keys_the_handler_owns_plus_djl_timeouts():
    keys = set(stage_properties(ServingConfig(model="gpt-j-6b")))
    assert keys - set(LMI_CONFIG["OWNED_PROPERTY_KEYS"]) == {"option.model_loading_timeout"}


def test_rendered_deepspeed_file_parses_back_to_the_stage_values(tmp_path):
    serving = ServingConfig(
        model="opt-30b", tensor_parallel_degree=4, instance_type="ml.g5.24xlarge", max_new_tokens=128
    )
    properties = parse(render(serving, stage_name="prod"), tmp_path)
    assert properties == {
        "engine": "DeepSpeed",
        "option.entryPoint": "model.py",
        "option.model_loading_timeout": "600",  # the load of 112 GiB from local disk (core/sizing.py)
        "option.predict_timeout": "240",
        "option.tensor_parallel_degree": "4",
        "option.dtype": "fp16",
        "option.context_length": "2048",
        "option.max_new_tokens": "128",
        "option.max_batch_size": "4",
    }


def test_the_handler_accepts_the_rendered_properties(tmp_path):
    serving = ServingConfig(
        model="bloom-176b",
        dtype="int8",
        tensor_parallel_degree=8,
        instance_type="ml.p4d.24xlarge",
        weights={"checkpoint": "deepspeed-int8-tp8", "allow_pickle": True},
    )
    properties = parse(render(serving, stage_name="dev"), tmp_path)
    # DJL strips the option. prefix and passes tensor_parallel_degree as an int.
    djl_view = {k.removeprefix("option."): v for k, v in properties.items() if k.startswith("option.")}
    djl_view["tensor_parallel_degree"] = int(djl_view["tensor_parallel_degree"])
    (tmp_path / "config.json").write_text("{}")  # model_dir: the checkpoint SageMaker delivered
    config = LMI_CONFIG["HandlerConfig"].from_properties({**djl_view, "model_dir": str(tmp_path)}, {})
    assert (config.tensor_parallel_degree, config.dtype, config.max_new_tokens, config.max_batch_size) == (
        8,
        "int8",
        256,
        4,
    )


def test_base_keys_the_stage_sets_are_replaced_in_place_and_comments_kept(tmp_path):
    text = render(ServingConfig(model="gpt-j-6b", startup_timeout_seconds=900), stage_name="dev")
    assert text.count("option.model_loading_timeout=") == 1
    assert "option.model_loading_timeout=900" in text
    assert text.startswith("# Base serving.properties of the DeepSpeed engine")
    assert "# Set for stage dev from its serving config" in text


def test_vllm_file_sizes_rolling_batches_and_context(tmp_path):
    properties = parse(
        render(ServingConfig(engine="vllm", model="gpt-j-6b", max_batch_size=6), stage_name="dev"), tmp_path
    )
    assert properties["engine"] == "Python"
    assert properties["option.rolling_batch"] == "disable"
    assert (properties["option.max_rolling_batch_size"], properties["option.max_model_len"]) == ("6", "2048")
    assert "option.model_id" not in properties  # the Model's OPTION_MODEL_ID env names the weights


@pytest.mark.parametrize("engine", ["deepspeed", "vllm"])
def test_rendering_is_deterministic(engine):
    serving = ServingConfig(engine=engine, model="gpt-j-6b")
    assert render(serving, stage_name="x") == render(serving, stage_name="x")


def djl_0_27_0_properties(env: dict[str, str]) -> dict[str, str]:
    """What DJL 0.27.0 makes of a Model's environment when the model folder has no serving.properties
    (wlm ModelInfo.loadServingProperties): OPTION_ENGINE is `engine`, OPTION_<KEY> is `option.<key>` lower-cased,
    but entrypoint is spelled entryPoint; any other variable is no property."""
    result = {}
    for name, value in env.items():
        if not name.startswith("OPTION_") or not value:
            continue
        key = name[len("OPTION_") :].lower()
        if key == "engine":
            result.setdefault("engine", value)
            continue
        result.setdefault("option." + ("entryPoint" if key == "entrypoint" else key), value)
    return result


@pytest.mark.parametrize("engine", ["deepspeed", "vllm"])
def test_the_models_environment_is_every_property_djl_would_have_read_from_the_file(engine):
    serving = ServingConfig(engine=engine, model="gpt-j-6b", max_batch_size=6)
    entry_point = "/opt/ml/model/inference/abc/model.py" if engine == "deepspeed" else None
    env = environment(serving, entry_point=entry_point)
    expected = properties(serving)
    if entry_point:
        expected["option.entryPoint"] = entry_point
    assert djl_0_27_0_properties(env) == expected
    assert env["TENSOR_PARALLEL_DEGREE"] == "1"  # DJL's fallback, read by the handler too


def test_a_key_djl_cannot_take_from_the_environment_is_refused(tmp_path):
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "serving.properties").write_text("engine=DeepSpeed\njob_queue_size=10\n")
    with pytest.raises(ValueError, match="'job_queue_size' of engine deepspeed cannot travel as an environment"):
        environment(ServingConfig(), base_dir=tmp_path)
