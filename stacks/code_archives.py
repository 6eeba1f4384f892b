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

from stacks import layout
from stacks.constructs.code_package import CodePackage
from stacks.training_job import check_hash_locked

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAINING_SOURCE = REPO_ROOT / "training"
INFERENCE_SOURCES = REPO_ROOT / "model_artifacts"
# What each engine's archive cannot start without.
ENGINE_FILES = {"deepspeed": ["model.py", "serving.properties"], "vllm": ["serving.properties"]}


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
        prefix=f"{layout.CODE}training/",
        archive_name="sourcedir.tar.gz",
        required_files=["train.py", "prepare_data.py", "evaluate.py", "stage_model.py", "requirements.txt"],
    )


def inference_code(
    scope: Construct,
    construct_id: str,
    *,
    bucket: s3.IBucket,
    encryption_key: kms.IKey,
    engine: str,
    serving_properties: str,
    use: str,
) -> CodePackage:
    """model_artifacts/<engine>/ as LMI's model.tar.gz: one top-level directory (code/, as in the LMI examples)
    holding serving.properties (rendered for the stage) and the handler. `use` names the prefix: code/<use>-<engine>/.
    """
    return CodePackage(
        scope,
        construct_id,
        source=INFERENCE_SOURCES / engine,
        bucket=bucket,
        encryption_key=encryption_key,
        prefix=f"{layout.CODE}{use}-{engine}/",
        archive_name="model.tar.gz",
        top_level_dir="code",
        rendered_files={"serving.properties": serving_properties},
        required_files=ENGINE_FILES[engine],
    )
