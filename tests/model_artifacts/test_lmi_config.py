"""HandlerConfig.from_properties: the typed seam between serving.properties / the Model environment and model.py."""

from __future__ import annotations

import dataclasses
import runpy
from pathlib import Path

import pytest
from lmi_config import (
    DJL_PROPERTIES_READ,
    OWNED_PROPERTIES,
    OWNED_PROPERTY_KEYS,
    ConfigError,
    HandlerConfig,
)

HANDLER_DIR = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed"
ENDPOINT_ENV: dict = {}  # an endpoint's environment names no weights: SageMaker delivered them to model_dir


@pytest.fixture(scope="module")
def delivered(tmp_path_factory) -> str:
    """/opt/ml/model as SageMaker leaves it: the served prefix's files, config.json at the top."""
    folder = tmp_path_factory.mktemp("opt-ml-model")
    (folder / "config.json").write_text("{}")
    return str(folder)


@pytest.fixture(autouse=True)
def _model_dir(delivered, monkeypatch):
    # DJL passes model_dir with every call; every parse below gets it unless a test gives its own.
    original = HandlerConfig.from_properties.__func__

    def with_model_dir(cls, properties, environ=None):
        return original(cls, {"model_dir": delivered, **properties}, environ)

    monkeypatch.setattr(HandlerConfig, "from_properties", classmethod(with_model_dir))


def test_defaults_with_only_the_weights_location(delivered):
    config = HandlerConfig.from_properties({}, ENDPOINT_ENV)
    assert config == HandlerConfig(weights=delivered)
    assert (config.tensor_parallel_degree, config.dtype, config.kernel_injection) == (1, "fp16", "auto")
    assert (config.max_new_tokens, config.max_batch_size) == (256, 4)
    assert config.max_input_length is None and config.context_length is None
    assert config.model_loading_timeout == 240  # DJL's own default (PyEnv.getModelLoadingTimeout)


def test_parses_string_properties_as_djl_passes_them(delivered):
    properties = {
        "tensor_parallel_degree": 8,  # DJL injects this one as an int
        "dtype": "BF16",
        "max_new_tokens": " 512 ",
        "max_batch_size": "16",
        "max_input_length": "1500",
        "context_length": "2048",
        "kernel_injection": "false",
        "device_id": "0",  # DJL's own keys are ignored
        "entryPoint": "model.py",
    }
    config = HandlerConfig.from_properties(properties, ENDPOINT_ENV)
    assert config == HandlerConfig(
        weights=delivered,
        tensor_parallel_degree=8,
        dtype="bf16",
        max_new_tokens=512,
        max_batch_size=16,
        max_input_length=1500,
        context_length=2048,
        kernel_injection="false",
    )


@pytest.mark.parametrize(
    ("properties", "env", "seconds"),
    [
        ({"model_loading_timeout": "2820"}, {"MODEL_LOADING_TIMEOUT": "1200"}, 2820),  # the stage's, rendered
        ({}, {"MODEL_LOADING_TIMEOUT": "1200"}, 1200),  # the LMI 0.27.0 image's ENV
        ({"model_loading_timeout": "0"}, {"MODEL_LOADING_TIMEOUT": "1200"}, 1200),  # 0 means unset to DJL
        ({"model_loading_timeout": "47min"}, {"MODEL_LOADING_TIMEOUT": "1200"}, 1200),  # DJL: "Invalid ... value"
        ({}, {"MODEL_LOADING_TIMEOUT": "soon"}, 240),
        ({}, {}, 240),
    ],
)
def test_the_model_loading_timeout_is_the_one_djl_waits_for(properties, env, seconds):
    """DJL 0.27.0 waits for the start-up call this long (PyModel.load parses option.model_loading_timeout;
    PyEnv.getModelLoadingTimeout falls back to MODEL_LOADING_TIMEOUT, then 240 s)."""
    assert HandlerConfig.from_properties(properties, {**ENDPOINT_ENV, **env}).model_loading_timeout == seconds


def test_tensor_parallel_degree_falls_back_to_the_environment():
    assert (
        HandlerConfig.from_properties({}, {**ENDPOINT_ENV, "TENSOR_PARALLEL_DEGREE": "4"}).tensor_parallel_degree == 4
    )


def test_tensor_parallel_property_wins_over_the_environment():
    config = HandlerConfig.from_properties(
        {"tensor_parallel_degree": "2"}, {**ENDPOINT_ENV, "TENSOR_PARALLEL_DEGREE": "4"}
    )
    assert config.tensor_parallel_degree == 2


def test_the_weights_are_the_folder_sagemaker_delivered_or_a_local_one(tmp_path, delivered):
    assert HandlerConfig.from_properties({}, {}).weights == delivered
    (tmp_path / "config.json").write_text("{}")
    # A local run names its folder; it wins over model_dir (the handler's own folder there).
    assert HandlerConfig.from_properties({"weights_dir": str(tmp_path)}, {}).weights == str(tmp_path)


@pytest.mark.parametrize(
    ("properties", "env", "message"),
    [
        ({"dtype": "fp8"}, ENDPOINT_ENV, "option.dtype='fp8' is not supported; expected one of fp16, bf16, int8, fp32"),
        ({"kernel_injection": "yes"}, ENDPOINT_ENV, "option.kernel_injection='yes' is not supported"),
        ({"max_new_tokens": "0"}, ENDPOINT_ENV, "option.max_new_tokens='0' is not valid; expected an integer >= 1"),
        ({"max_batch_size": "many"}, ENDPOINT_ENV, "option.max_batch_size='many' is not valid"),
        ({"tensor_parallel_degree": True}, ENDPOINT_ENV, "option.tensor_parallel_degree=True is not valid"),
        ({}, {**ENDPOINT_ENV, "TENSOR_PARALLEL_DEGREE": "max"}, "TENSOR_PARALLEL_DEGREE='max' is not valid"),
        ({"context_length": "1"}, ENDPOINT_ENV, "option.context_length='1' is not valid; expected an integer >= 2"),
        (
            {"max_input_length": "2048", "context_length": "2048"},
            ENDPOINT_ENV,
            "option.max_input_length=2048 leaves no room for new tokens in option.context_length=2048",
        ),
        (
            {"dtype": "int8", "kernel_injection": "false"},
            ENDPOINT_ENV,
            "option.dtype='int8' needs DeepSpeed kernel injection",
        ),
        ({"model_loading_timeout": "-1"}, ENDPOINT_ENV, "option.model_loading_timeout='-1' is negative"),
        (
            {},
            {"WEIGHTS_S3_URI": "s3://my-models/gptj/v3/"},
            "WEIGHTS_S3_URI='s3://my-models/gptj/v3/' is set, but this handler downloads nothing",
        ),
        ({"model_dir": ""}, {}, "no model weights: DJL gave no model_dir and option.weights_dir is unset"),
        (
            {"model_dir": "/opt/ml/model-without-weights"},
            {},
            "model_dir='/opt/ml/model-without-weights' has no config.json; expected a Hugging Face model folder",
        ),
        ({"weights_dir": "/nonexistent/model"}, {}, "option.weights_dir='/nonexistent/model' has no config.json"),
    ],
)
def test_rejects_bad_settings_naming_key_value_and_what_is_accepted(properties, env, message):
    with pytest.raises(ConfigError) as error:
        HandlerConfig.from_properties(properties, env)
    assert message in str(error.value)


def test_owned_keys_are_the_option_spelling_of_the_config_fields():
    fields = {field.name for field in dataclasses.fields(HandlerConfig)} - {"weights"}
    # DJL's own keys are read, never owned: the base file and the CDK side set them for DJL.
    assert set(OWNED_PROPERTIES) == fields - set(DJL_PROPERTIES_READ) | {"weights_dir"}
    assert DJL_PROPERTIES_READ == ("model_loading_timeout",)
    assert all(key == f"option.{name}" for key, name in zip(OWNED_PROPERTY_KEYS, OWNED_PROPERTIES, strict=True))


def test_owned_keys_are_readable_without_importing_the_handler():
    # How the CDK side reads the seam: run the module by path, no sys.path or torch needed.
    namespace = runpy.run_path(str(HANDLER_DIR / "lmi_config.py"))
    assert namespace["OWNED_PROPERTY_KEYS"] == OWNED_PROPERTY_KEYS
    assert "option.tensor_parallel_degree" in namespace["OWNED_PROPERTY_KEYS"]
