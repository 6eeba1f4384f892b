"""ArtifactsStack: the stage's training and inference code, packaged into its artifacts bucket at deploy time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks import layout
from stacks.constructs.code_package import CodePackage

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAINING_SOURCE = REPO_ROOT / "training"
INFERENCE_SOURCES = REPO_ROOT / "model_artifacts"
# What each engine's archive cannot start without.
ENGINE_FILES = {"deepspeed": ["model.py", "serving.properties"], "vllm": ["serving.properties"]}


class ArtifactsStack(Stack):
    """Code archives SageMaker reads: the training toolkit's sourcedir and the LMI container's model.tar.gz.

    Args:
        bucket: the stage's artifacts bucket.
        encryption_key: the stage's KMS key.
        engine: which folder of model_artifacts/ is served (e.g. "deepspeed").
        serving_properties: the rendered serving.properties for that engine; None keeps the folder's own.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        encryption_key: kms.IKey,
        engine: str,
        serving_properties: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)

        # The training toolkit extracts this at the top of /opt/ml/code and runs train.py from there.
        self.training_code = CodePackage(
            self,
            "TrainingCode",
            source=TRAINING_SOURCE,
            bucket=bucket,
            encryption_key=encryption_key,
            prefix=f"{layout.CODE}training/",
            archive_name="sourcedir.tar.gz",
            required_files=["train.py", "prepare_data.py", "evaluate.py"],
        )

        # LMI expects one directory (named code/ in the LMI examples) holding serving.properties and its code.
        self.inference_code = CodePackage(
            self,
            "InferenceCode",
            source=INFERENCE_SOURCES / engine,
            bucket=bucket,
            encryption_key=encryption_key,
            prefix=f"{layout.CODE}inference-{engine}/",
            archive_name="model.tar.gz",
            top_level_dir="code",
            rendered_files={"serving.properties": serving_properties} if serving_properties else None,
            required_files=ENGINE_FILES[engine],
        )

        CfnOutput(self, "TrainingCodeUri", value=self.training_code.s3_uri)
        CfnOutput(self, "InferenceCodeUri", value=self.inference_code.s3_uri)
