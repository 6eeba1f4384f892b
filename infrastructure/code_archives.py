"""The code archives SageMaker reads, each packaged by the stack that uses it.

Every stack that needs an archive packages its own (CodePackage): an archive's key changes with its content, and
CloudFormation refuses to change an exported value another stack imports, so handing keys between stacks would
block every code change. Each use gets its own prefix, so retiring one never touches an archive another still uses.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from core import bucket_layout
from core.training_job import check_hash_locked
from infrastructure.constructs.code_package import CodeFolder, CodePackage

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAINING_SOURCE = REPO_ROOT / "training"
INFERENCE_SOURCES = REPO_ROOT / "model_artifacts"
# What each engine's archive cannot start without.
ENGINE_FILES = {"deepspeed": ["model.py", "serving.properties"], "vllm": ["serving.properties"]}
# What the DeepSpeed handler cannot start without: its entry point and the modules it imports at load.
HANDLER_FILES = [
    "architectures.json",
    "lmi_config.py",
    "lmi_distributed.py",
    "lmi_generation.py",
    "lmi_loading.py",
    "lmi_requests.py",
    "model.py",
    "request_schema.py",
]


def training_code(scope: Construct, *, bucket: s3.IBucket, encryption_key: kms.IKey) -> CodePackage:
    """training/ as the toolkit's sourcedir.tar.gz: files at the top, train.py run from there.

    Every job that runs it pip-installs its requirements.txt at start, the training toolkit with no options of its
    own: synth refuses a file that would let pip install anything unhashed (ValueError).
    """
    check_hash_locked(TRAINING_SOURCE / "requirements.txt")
    return CodePackage(
        scope,
        "TrainingCode",
        source=TRAINING_SOURCE,
        bucket=bucket,
        encryption_key=encryption_key,
        prefix=f"{bucket_layout.CODE}training/",
        archive_name="sourcedir.tar.gz",
        required_files=["train.py", "prepare_data.py", "evaluate.py", "stage_model.py", "requirements.txt"],
    )


def served_handler(
    scope: Construct,
    construct_id: str,
    *,
    engine: str,
    weights_uri: str,
    log_key: kms.IKey,
    weights_key: kms.IKey | None,
) -> CodeFolder | None:
    """The engine's handler as plain files inside the served weights prefix (`<weights_uri>inference/<sha256>/`), so
    that SageMaker delivers weights and handler together from one uncompressed prefix: AWS::SageMaker::Model's
    container takes one ModelDataSource, has no AdditionalModelDataSources, and refuses ModelDataUrl beside it. None
    for engines LMI serves with its own handler (vllm). serving.properties stays out: its keys travel as the Model's
    OPTION_* environment (core/serving_properties.py), so one handler folder serves every stage config.
    """
    if engine != "deepspeed":
        return None
    return CodeFolder(
        scope,
        construct_id,
        source=INFERENCE_SOURCES / engine,
        target_uri=weights_uri,
        subfolder=bucket_layout.HANDLER_SUBFOLDER,
        encryption_key=log_key,
        target_key=weights_key,
        required_files=HANDLER_FILES,
        exclude=["serving.properties"],
    )
