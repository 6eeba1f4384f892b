"""The handler's typed configuration, parsed once from DJL's model properties and the container environment.

DJL hands model.py the `option.*` keys (from serving.properties, or the Model's OPTION_<KEY> environment, which is how
an endpoint gets them) with the prefix stripped (`option.dtype=fp16` arrives as `properties["dtype"] == "fp16"`), all
as strings, plus keys of its own (`model_dir`, `device_id`, and `tensor_parallel_degree` as an int). This module owns
the keys in OWNED_PROPERTIES. Of DJL's own keys it reads `model_dir`, where SageMaker delivered the weights, and
`model_loading_timeout` (DJL_PROPERTIES_READ), to report how long the start-up may take. Every other key is ignored.

The weights are never downloaded here: SageMaker copies the served S3 prefix to /opt/ml/model (the Model's
ModelDataSource) before the container starts, and DJL passes that folder as `model_dir`.

Stdlib only, so the CDK side can read OWNED_PROPERTY_KEYS without torch:
    runpy.run_path("model_artifacts/deepspeed/lmi_config.py")["OWNED_PROPERTY_KEYS"]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

# The stage keys this handler reads (serving.properties spells them `option.<key>`).
OWNED_PROPERTIES = (
    "tensor_parallel_degree",
    "dtype",
    "max_new_tokens",
    "max_batch_size",
    "max_input_length",
    "context_length",
    "kernel_injection",
    "weights_dir",
)
OWNED_PROPERTY_KEYS = tuple(f"option.{key}" for key in OWNED_PROPERTIES)
# Keys DJL itself acts on that the handler reads too (it never sets them: the CDK side or the base file does).
DJL_PROPERTIES_READ = ("model_loading_timeout",)

# How long DJL 0.27.0 waits for the start-up call (PyProcess.startPythonProcess: predict(init,
# getModelLoadingTimeout())): option.model_loading_timeout if it parses as a non-zero int (PyModel.load), else the
# MODEL_LOADING_TIMEOUT environment variable (the LMI 0.27.0 image sets 1200), else 240 s
# (PyEnv.getModelLoadingTimeout).
MODEL_LOADING_TIMEOUT_ENV = "MODEL_LOADING_TIMEOUT"
DJL_DEFAULT_MODEL_LOADING_TIMEOUT = 240

# What older Models set for the handler to download the weights itself; refused, so that such a Model fails at once
# with the reason rather than serving whatever model_dir holds.
WEIGHTS_S3_URI_ENV = "WEIGHTS_S3_URI"
# DJL's own fallback when option.tensor_parallel_degree is absent (as in the reference notebooks).
TENSOR_PARALLEL_DEGREE_ENV = "TENSOR_PARALLEL_DEGREE"

DTYPES = ("fp16", "bf16", "int8", "fp32")
KERNEL_INJECTION_MODES = ("auto", "true", "false")

DEFAULT_DTYPE = "fp16"
DEFAULT_MAX_NEW_TOKENS = 256
DEFAULT_MAX_BATCH_SIZE = 4
DEFAULT_KERNEL_INJECTION = "auto"


class ConfigError(ValueError):
    """A property or environment variable has a value the handler cannot use."""


@dataclass(frozen=True)
class HandlerConfig:
    """Everything the handler needs to know before it loads a model; built once per worker process."""

    weights: str  # the local folder of the weights: model_dir (delivered by SageMaker) or option.weights_dir
    tensor_parallel_degree: int = 1
    dtype: str = DEFAULT_DTYPE
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # cap per request
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE  # prompts per request
    max_input_length: int | None = None  # prompt tokens; None: the context length minus one new token
    context_length: int | None = None  # prompt + new tokens; None: taken from the model's config
    kernel_injection: str = DEFAULT_KERNEL_INJECTION
    model_loading_timeout: int = DJL_DEFAULT_MODEL_LOADING_TIMEOUT  # seconds; DJL's, see djl_model_loading_timeout

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> HandlerConfig:
        """Parse DJL's properties (prefix-stripped) and the environment; raise ConfigError naming what to fix."""
        env = os.environ if environ is None else environ
        if properties.get("tensor_parallel_degree") is not None:
            tensor_parallel_degree = _integer(
                "option.tensor_parallel_degree", properties["tensor_parallel_degree"], minimum=1
            )
        else:
            tensor_parallel_degree = _integer(
                TENSOR_PARALLEL_DEGREE_ENV, env.get(TENSOR_PARALLEL_DEGREE_ENV, 1), minimum=1
            )
        dtype = _choice("dtype", properties.get("dtype", DEFAULT_DTYPE), DTYPES)
        kernel_injection = _choice(
            "kernel_injection", properties.get("kernel_injection", DEFAULT_KERNEL_INJECTION), KERNEL_INJECTION_MODES
        )
        if dtype == "int8" and kernel_injection == "false":
            raise ConfigError(
                "option.dtype='int8' needs DeepSpeed kernel injection, but option.kernel_injection='false'; "
                "use option.kernel_injection=auto (or true) on a GPU, or option.dtype=fp16/bf16"
            )
        max_input_length = _optional_integer("option.max_input_length", properties.get("max_input_length"), minimum=1)
        context_length = _optional_integer("option.context_length", properties.get("context_length"), minimum=2)
        if max_input_length is not None and context_length is not None and max_input_length >= context_length:
            raise ConfigError(
                f"option.max_input_length={max_input_length} leaves no room for new tokens in "
                f"option.context_length={context_length}; expected max_input_length < context_length"
            )
        return cls(
            weights=_weights_location(properties, env),
            tensor_parallel_degree=tensor_parallel_degree,
            dtype=dtype,
            max_new_tokens=_integer(
                "option.max_new_tokens", properties.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS), minimum=1
            ),
            max_batch_size=_integer(
                "option.max_batch_size", properties.get("max_batch_size", DEFAULT_MAX_BATCH_SIZE), minimum=1
            ),
            max_input_length=max_input_length,
            context_length=context_length,
            kernel_injection=kernel_injection,
            model_loading_timeout=djl_model_loading_timeout(properties, env),
        )

    def describe(self) -> str:
        """One log line with every resolved setting."""
        return " ".join(f"{key}={value}" for key, value in asdict(self).items())


def djl_model_loading_timeout(properties: Mapping[str, Any], environ: Mapping[str, str]) -> int:
    """The seconds DJL 0.27.0 gives the start-up call, resolved as DJL resolves them (see MODEL_LOADING_TIMEOUT_ENV)."""
    for name, value in (
        ("option.model_loading_timeout", properties.get("model_loading_timeout")),
        (MODEL_LOADING_TIMEOUT_ENV, environ.get(MODEL_LOADING_TIMEOUT_ENV)),
    ):
        try:
            seconds = int(str(value).strip())  # Java's Integer.parseInt: no "1e3", no "60.0"
        except ValueError:
            continue  # DJL logs "Invalid ... value" and falls through to the next source; so do we
        if seconds < 0:
            raise ConfigError(
                f"{name}={value!r} is negative; DJL would give up on the start-up at once. Expected the seconds that "
                "download and load may take (the CDK side renders it from the stage's start-up timeout)"
            )
        if seconds:
            return seconds
    return DJL_DEFAULT_MODEL_LOADING_TIMEOUT


def _weights_location(properties: Mapping[str, Any], env: Mapping[str, str]) -> str:
    stale = (env.get(WEIGHTS_S3_URI_ENV) or "").strip()
    if stale:
        raise ConfigError(
            f"{WEIGHTS_S3_URI_ENV}={stale!r} is set, but this handler downloads nothing: SageMaker delivers the "
            "weights to model_dir from the Model's ModelDataSource (S3Prefix, CompressionType None). Deploy the Model "
            "with that prefix as its model data and without the variable"
        )
    local_dir = str(properties.get("weights_dir") or "").strip()
    model_dir = str(properties.get("model_dir") or "").strip()
    where, folder = ("option.weights_dir", local_dir) if local_dir else ("model_dir", model_dir)
    if not folder:
        raise ConfigError(
            "no model weights: DJL gave no model_dir and option.weights_dir is unset; on an endpoint SageMaker "
            "delivers the weights to model_dir (/opt/ml/model), locally set option.weights_dir=/path/to/model"
        )
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise ConfigError(
            f"{where}={folder!r} has no config.json; expected a Hugging Face model folder (config.json, weights, "
            "tokenizer files) or a pre-sharded DeepSpeed checkpoint with its config.json"
            + (": check the Model's ModelDataSource names the prefix that holds them" if where == "model_dir" else "")
        )
    return folder


def _integer(name: str, value: Any, *, minimum: int) -> int:
    # bool is an int subclass in Python; "true" is never a meaningful count.
    if isinstance(value, bool):
        parsed = None
    elif isinstance(value, int):
        parsed = value
    else:
        try:
            parsed = int(str(value).strip())
        except ValueError:
            parsed = None
    if parsed is None or parsed < minimum:
        raise ConfigError(f"{name}={value!r} is not valid; expected an integer >= {minimum}")
    return parsed


def _optional_integer(name: str, value: Any, *, minimum: int) -> int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _integer(name, value, minimum=minimum)


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    normalized = str(value).strip().lower()
    if normalized not in allowed:
        raise ConfigError(f"option.{key}={value!r} is not supported; expected one of {', '.join(allowed)}")
    return normalized
