"""What the fine-tuning pipeline's Register step records: a model package an endpoint runs as it is.

A full fine-tune's package is the Model the serving stack builds (infrastructure/constructs/lmi_endpoint.py
`lmi_model`): the LMI image, the fine-tuned weights as an uncompressed S3Prefix ModelDataSource (SageMaker copies
them to /opt/ml/model), and the engine's serving.properties keys as OPTION_* variables. The DeepSpeed engine names its
handler by path (OPTION_ENTRYPOINT), and a container has one ModelDataSource, so the handler must be inside the
weights prefix: the Evaluate step writes it there (`<weights>inference/<sha256>/`, the folder the serving stack's
CodeFolder writes too), so deploying the package directly finds it. The serving stack reads the weights prefix back
from the package's ModelDataSource (infrastructure/serving_stack.py `_weights_uri`).

An adapter's package (lora, qlora) records the adapter archive (the ArtifactUrl of its inference component) and
names its base in the environment (infrastructure/constructs/adapter_components.py reads ADAPTER_S3_URI).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from core import bucket_layout, serving_properties
from core.config import ServingConfig, TrainingConfig
from core.config.lora_serving import ADAPTER_ARCHIVE
from core.endpoint_settings import MODEL_DIR

# Where the training stack publishes the handler (a CodeFolder: <prefix>inference/<sha256>/), for the Evaluate job.
HANDLER_PREFIX = f"{bucket_layout.CODE}registry-deepspeed/"
# The Evaluate job's copy of the handler: its input and output folders must differ (CreateProcessingJob refuses one
# local path for both), so the job copies one to the other before its script starts.
HANDLER_INPUT = "/opt/ml/processing/handler"
HANDLER_OUTPUT = "/opt/ml/processing/served-handler"


def serves_handler(serving: ServingConfig, training: TrainingConfig) -> bool:
    """Whether the registered weights need the handler beside them: a full fine-tune served by the DeepSpeed engine
    (vLLM runs LMI's own handler; an adapter is served over its base's component)."""
    return training.method == "full" and serving.engine == "deepspeed"


def environment(
    serving: ServingConfig, training: TrainingConfig, *, handler_folder: str
) -> tuple[tuple[str, str], ...]:
    """The OPTION_* environment of a full fine-tune's package, as the serving stack renders it for its Model;
    `handler_folder` is the handler's folder inside the weights prefix (a `${Placeholder}`). Pairs, so the value can
    key the definition's caches; () for adapters, whose environment names the adapter and its base instead."""
    if training.method != "full":
        return ()
    entry_point = f"{MODEL_DIR}/{handler_folder}model.py" if serves_handler(serving, training) else None
    return tuple(sorted(serving_properties.environment(serving, entry_point=entry_point).items()))


def model_data(training: TrainingConfig, trained_weights):
    """The container's model data: the fine-tuned folder as an uncompressed S3Prefix (a full fine-tune), or the
    adapter archive the LoRA job wrote into its folder (ModelDataUrl: a single .tar.gz)."""
    # deferred: the SDK's import is slow, and a synth served from synth_cache never needs it (offline_sdk.sdk_classes)
    from sagemaker.workflow.functions import Join

    if training.method != "full":
        return Join(on="", values=[trained_weights, ADAPTER_ARCHIVE])
    return {"S3DataSource": {"S3Uri": trained_weights, "S3DataType": "S3Prefix", "CompressionType": "None"}}


def adapter_environment(training: TrainingConfig, serving: ServingConfig, trained_weights, staged_commit, staged_uri):
    """An adapter package's environment: the adapter folder and the base it was trained on (the model, the commit
    and the staged copy), with no whole-model weights for a handler to load."""
    return {
        "ADAPTER_S3_URI": trained_weights,
        "ADAPTER_METHOD": training.method,
        "BASE_MODEL": training.model,
        "BASE_MODEL_ID": training.staged_weights.hf_id,
        "BASE_MODEL_COMMIT": staged_commit,
        "BASE_WEIGHTS_S3_URI": staged_uri,
        "TENSOR_PARALLEL_DEGREE": str(serving.tensor_parallel_degree),
    }


class HandlerCopy(NamedTuple):
    """How the Evaluate job copies the handler into the fine-tuned weights."""

    source: Any  # ProcessingInput: the handler published in the artifacts bucket
    target: Any  # ProcessingOutput: the same files at <weights>inference/<sha256>/, uploaded when the job ends
    command: str  # the shell step that copies one to the other before the job's script starts


def handler_copy(handler_uri: str, trained_weights, handler_folder: str) -> HandlerCopy:
    """The Evaluate job's input (`handler_uri`: the handler published in the artifacts bucket), its output (the
    same files at `<weights>inference/<sha256>/`, uploaded when the job ends) and the shell step that copies one to
    the other."""
    # deferred: the SDK's import is slow, and a synth served from synth_cache never needs it (offline_sdk.sdk_classes)
    from sagemaker.processing import ProcessingInput, ProcessingOutput

    # deferred: as above
    from sagemaker.workflow.functions import Join

    source = ProcessingInput(source=handler_uri, destination=HANDLER_INPUT, input_name="handler")
    target = ProcessingOutput(
        output_name="handler",
        source=HANDLER_OUTPUT,
        destination=Join(on="", values=[trained_weights, handler_folder]),
    )
    return HandlerCopy(
        source=source, target=target, command=f"mkdir -p {HANDLER_OUTPUT} && cp -R {HANDLER_INPUT}/. {HANDLER_OUTPUT}/"
    )
