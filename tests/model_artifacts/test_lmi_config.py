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
    split_s3_uri,
)

HANDLER_DIR = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed"
S3_ENV = {"WEIGHTS_S3_URI": "s3://my-models/gptj/v3/"}


def test_defaults_with_only_the_weights_location():
    config = HandlerConfig.from_properties({}, S3_ENV)
    assert config == HandlerConfig(weights="s3://my-models/gptj/v3/")
    assert (config.tensor_parallel_degree, config.dtype, config.kernel_injection) == (1, "fp16", "auto")
    assert (config.max_new_tokens, config.max_batch_size, config.download_dir) == (256, 4, "/tmp/weights")
    assert config.max_input_length is None and config.context_length is None
    assert config.model_loading_timeout == 240  # DJL's own default (PyEnv.getModelLoadingTimeout)


def test_parses_string_properties_as_djl_passes_them():
    properties = {
        "tensor_parallel_degree": 8,  # DJL injects this one as an int
        "dtype": "BF16",
        "max_new_tokens": " 512 ",
        "max_batch_size": "16",
        "max_input_length": "1500",
        "context_length": "2048",
        "kernel_injection": "false",
        "download_dir": "/tmp/w",
        "model_dir": "/opt/ml/model",  # DJL's own keys are ignored
        "device_id": "0",
        "entryPoint": "model.py",
    }
    config = HandlerConfig.from_properties(properties, S3_ENV)
    assert config == HandlerConfig(
        weights="s3://my-models/gptj/v3/",
        tensor_parallel_degree=8,
        dtype="bf16",
        max_new_tokens=512,
        max_batch_size=16,
        max_input_length=1500,
        context_length=2048,
        kernel_injection="false",
        download_dir="/tmp/w",
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
    PyEnv.getModelLoadingTimeout falls back to MODEL_LOADING_TIMEOUT, then 240 s); the download wait matches it."""
    assert HandlerConfig.from_properties(properties, {**S3_ENV, **env}).model_loading_timeout == seconds


def test_tensor_parallel_degree_falls_back_to_the_environment():
    assert HandlerConfig.from_properties({}, {**S3_ENV, "TENSOR_PARALLEL_DEGREE": "4"}).tensor_parallel_degree == 4


def test_tensor_parallel_property_wins_over_the_environment():
    config = HandlerConfig.from_properties({"tensor_parallel_degree": "2"}, {**S3_ENV, "TENSOR_PARALLEL_DEGREE": "4"})
    assert config.tensor_parallel_degree == 2


def test_s3_prefix_is_normalized_to_end_with_a_slash():
    config = HandlerConfig.from_properties({}, {"WEIGHTS_S3_URI": "s3://my-models/gptj"})
    assert config.weights == "s3://my-models/gptj/"
    assert config.weights_in_s3
    assert split_s3_uri("s3://bucket.with.dots/") == ("bucket.with.dots", "")


def test_local_weights_dir_is_used_for_local_runs(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    config = HandlerConfig.from_properties({"weights_dir": str(tmp_path)}, {})
    assert config.weights == str(tmp_path)
    assert not config.weights_in_s3


def test_weights_packed_next_to_model_py_are_found_through_model_dir(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert HandlerConfig.from_properties({"model_dir": str(tmp_path)}, {}).weights == str(tmp_path)


@pytest.mark.parametrize(
    ("properties", "env", "message"),
    [
        ({"dtype": "fp8"}, S3_ENV, "option.dtype='fp8' is not supported; expected one of fp16, bf16, int8, fp32"),
        ({"kernel_injection": "yes"}, S3_ENV, "option.kernel_injection='yes' is not supported"),
        ({"max_new_tokens": "0"}, S3_ENV, "option.max_new_tokens='0' is not valid; expected an integer >= 1"),
        ({"max_batch_size": "many"}, S3_ENV, "option.max_batch_size='many' is not valid"),
        ({"tensor_parallel_degree": True}, S3_ENV, "option.tensor_parallel_degree=True is not valid"),
        ({}, {**S3_ENV, "TENSOR_PARALLEL_DEGREE": "max"}, "TENSOR_PARALLEL_DEGREE='max' is not valid"),
        ({"context_length": "1"}, S3_ENV, "option.context_length='1' is not valid; expected an integer >= 2"),
        (
            {"max_input_length": "2048", "context_length": "2048"},
            S3_ENV,
            "option.max_input_length=2048 leaves no room for new tokens in option.context_length=2048",
        ),
        (
            {"dtype": "int8", "kernel_injection": "false"},
            S3_ENV,
            "option.dtype='int8' needs DeepSpeed kernel injection",
        ),
        ({"download_dir": " "}, S3_ENV, "option.download_dir is empty"),
        ({"model_loading_timeout": "-1"}, S3_ENV, "option.model_loading_timeout='-1' is negative"),
        ({}, {"WEIGHTS_S3_URI": "https://bucket/x"}, "WEIGHTS_S3_URI='https://bucket/x' is not an S3 prefix"),
        ({}, {"WEIGHTS_S3_URI": "s3://Upper/x"}, "is not an S3 prefix; expected s3://bucket/prefix/"),
        ({}, {}, "no model weights configured: set the environment variable WEIGHTS_S3_URI"),
        ({"weights_dir": "/nonexistent/model"}, {}, "option.weights_dir='/nonexistent/model' has no config.json"),
        ({"weights_dir": "/some/dir"}, S3_ENV, "both WEIGHTS_S3_URI='s3://my-models/gptj/v3/' and option.weights_dir"),
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
