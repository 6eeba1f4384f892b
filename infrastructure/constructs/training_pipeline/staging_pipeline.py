"""The weights-staging pipeline's definition (run once per model and commit): one Stage-<name> processing step per
repository the stage uses (the training model's Hugging Face weights, and the endpoint's when it serves staged
weights: a Hugging Face folder or a pre-sharded DeepSpeed checkpoint), each copied at one commit into
pretrained/<name>/<commit>/, with the commit's record written after the last file (StagedWeights). It has no run
parameters: which repository, which commit (or that main is followed) and whether pickles are accepted all come from
the config, so a run cannot stage anything else, and the definition stays a pure function of the config.
"""

from __future__ import annotations

import functools

from core import sizing, synth_cache
from core.catalog import images
from core.config import ServingConfig, TrainingConfig
from core.naming import PipelineNames
from core.staging import staged_repositories, staging_readers, staging_step_name
from infrastructure.constructs.training_pipeline.offline_sdk import (
    code_input,
    offline_session,
    processor,
    s3,
    sdk_classes,
    serialize,
)


@functools.cache
@synth_cache.on_disk
def staging_definition(
    training: TrainingConfig,
    serving: ServingConfig,
    *,
    region: str,
    names: PipelineNames,
    token_secret: str | None = None,
) -> str:
    """The pipeline that copies each repository the stage reads into pretrained/<name>/<commit>/, so no training job
    or endpoint depends on a hub at run time. One step per repository and revision, run in parallel; the repository
    is fixed by the catalog and the revision by the config (a pinned commit, or main resolved when the step runs).
    The step writes to S3 itself, the record after the last file (a ProcessingOutput is uploaded when the job ends,
    in no particular order, so it could not put the record last). The steps run with the staging role; a gated
    repository's step is told the name of the secret holding the Hugging Face token (`token_secret`), which only
    that role can read."""
    sdk = sdk_classes()
    steps = []
    repositories = staged_repositories(training, serving)
    with offline_session(region) as session:
        for model, staged in repositories:
            arguments = [
                "--model_id", staged.hf_id,
                "--revision", staged.staged_revision,
                "--destination", s3("ModelsBucket", staged.prefix),
                "--region", region,
            ]  # fmt: skip
            if staged.allow_pickle:
                arguments.append("--allow_pickle")
            readers = staging_readers(training, serving, staged)
            if readers:
                arguments += ["--readers", readers]
            if staged.deepspeed is not None:
                arguments += [
                    "--deepspeed_tp_size",
                    str(staged.deepspeed.tensor_parallel_degree),
                    "--deepspeed_dtype",
                    staged.deepspeed.dtype,
                ]
            if staged.gated:
                if token_secret is None:
                    raise ValueError(f"{staged.hf_id} is gated: its staging step needs a token secret")
                arguments += ["--hf_token_secret", token_secret]
            step_args = processor(
                session,
                training,
                region=region,
                name="stage-weights",
                instance_type=training.processing_instance_type,
                script="stage_model.py",
                # The PyTorch 1.13.1 image whatever the SMP version: the one the staging role may pull (stage.py).
                image=images.processing_image(region, training.processing_instance_type),
                volume_size_gib=sizing.staging_volume_gib(model, staged),
                role="StagingRoleName",
            ).run(inputs=[code_input()], arguments=arguments)
            name = staging_step_name(staged, [other for _, other in repositories])
            steps.append(sdk.ProcessingStep(name=name, step_args=step_args))
        return serialize(sdk.Pipeline(name=names.staging, parameters=[], steps=steps, sagemaker_session=session))
