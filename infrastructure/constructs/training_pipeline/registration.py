"""What the fine-tuning pipeline's Register step records: a model package an endpoint runs as it is.

A full fine-tune's package is the Model the serving stack builds (infrastructure/constructs/lmi_endpoint.py
`lmi_model`): the LMI image, the fine-tuned weights as an uncompressed S3Prefix ModelDataSource (SageMaker copies
them to /opt/ml/model), and the engine's serving.properties keys as OPTION_* variables. The DeepSpeed engine names its
handler by path (OPTION_ENTRYPOINT), and a container has one ModelDataSource, so the handler must be inside the
weights prefix (`<weights>inference/<sha256>/`). No job of the pipeline writes it there: the fine-tuning jobs run
with the training role, and a handler folder is code every prompt runs through, so the models bucket lets only the
code-packaging function write one (infrastructure/storage_stack.py). The serving stack's CodeFolder writes it when it
deploys the package, reading the weights prefix back from the package's ModelDataSource
(infrastructure/serving_stack.py `_weights_uri`): the package is deployed through the serving stack, and the
OPTION_ENTRYPOINT it records names the folder the handler of the same code gets (the training stack's
RegistryHandler computes that name).

An adapter's package (lora, qlora) records the adapter archive (the ArtifactUrl of its inference component) and
names its base in the environment (infrastructure/constructs/adapter_components.py reads ADAPTER_S3_URI).
"""

from __future__ import annotations

from core import bucket_layout, serving_properties
from core.config import ServingConfig, TrainingConfig
from core.config.lora_serving import ADAPTER_ARCHIVE
from core.endpoint_settings import MODEL_DIR

# Where the training stack publishes the handler (a CodeFolder: <prefix>inference/<sha256>/): its folder's name is
# the one the registered package's OPTION_ENTRYPOINT names.
HANDLER_PREFIX = f"{bucket_layout.CODE}registry-deepspeed/"


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
