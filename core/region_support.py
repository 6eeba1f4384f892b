"""Which regions a stage can live in: the container images it runs, known offline (the CloudFormation resource types
its stacks use are checked when the app synthesizes: infrastructure/region_checks.py).

Images: the lookup of core/catalog/images.py for each image the stage needs: its SMP version's training image and
the processing image of each processing instance type (the SageMaker SDK's own lookup), and its engine's LMI image
(the DLC registry table generated from the SDK's tables, core/catalog/dlc.py). Some of them are missing from some
regions the CDK knows (SMP v2's from 29 of them, every DLC from eusc-de-east-1), where synth used to stop with the
SDK's traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.catalog import images

Lookup = Callable[[str], str]


def stage_images(stage: Any) -> list[tuple[str, str, Lookup]]:
    """(the image, the config field that chooses it, its lookup by region) for each image `stage` runs."""
    training, serving = stage.training, stage.serving
    version, engine = training.smp.version, serving.engine
    needs: list[tuple[str, str, Lookup]] = [
        (f"SMP v{version} training image", "training.smp.version", lambda r: images.training_image(r, version)),
        (f"LMI image for engine {engine}", "serving.engine", lambda r: images.serving_image(r, engine)),
    ]
    for field in ("processing_instance_type", "evaluate_instance_type"):
        instance_type = getattr(training, field)
        needs.append(
            (
                f"PyTorch {images.SMP_V1_PYTORCH_VERSION} image for {instance_type}",
                f"training.{field}",
                lambda r, t=instance_type: images.processing_image(r, t),
            )
        )
    return needs


def image_problems(config: Any, regions: list[str]) -> list[str]:
    """`stages.<name>.region: ...` for each stage whose region lacks an image it needs; `regions`: the candidates
    to suggest (the regions the config accepts)."""
    problems = []
    for name, stage in config.stages.items():
        needs = stage_images(stage)
        missing = [
            (what, field) for what, field, lookup in needs if not images.supported_regions(lookup, [stage.region])
        ]
        if not missing:
            continue
        import sagemaker  # deferred: a synth whose image lookups are all cached never imports the SDK (2 s)

        working = set(regions)
        for _, _, lookup in needs:
            working &= set(images.supported_regions(lookup, regions))
        fields = ", ".join(sorted({field for _, field in missing}))
        lacking = " and no ".join(what for what, _ in missing)
        problems.append(
            f"stages.{name}.region: {stage.region} has no {lacking} (chosen by {fields}; image tables of the "
            f"SageMaker SDK {sagemaker.__version__} pinned here); regions with every image this stage needs: "
            f"{', '.join(sorted(working)) or 'none'}"
        )
    return problems
