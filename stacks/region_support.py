"""Which regions a stage can live in: the container images it runs, and the CloudFormation resource types its stacks
use, both known offline.

Images: the lookup of stacks/catalog/images.py for each image the stage needs: its SMP version's training image and
the processing image of each processing instance type (the SageMaker SDK's own lookup), and its engine's LMI image
(the DLC registry table generated from the SDK's tables, stacks/catalog/dlc.py). Some of them are missing from some
regions the CDK knows (SMP v2's from 29 of them, every DLC from eusc-de-east-1), where synth used to stop with the
SDK's traceback.

Resource types: every CloudFormation resource of every stack, against that region's list in the committed table of
stacks/catalog/aws_limits.py (from cfn-lint's per-region schemas). AWS::SageMaker::ModelPackageGroup, for one, does
not exist in the China regions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsii
from aws_cdk import Token
from constructs import IConstruct, IValidation

from stacks import construct_reads
from stacks.catalog import aws_limits, images

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
        import sagemaker  # only here: a synth whose image lookups are all cached never imports the SDK (2 s)

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


def resource_type_problems(root: IConstruct) -> list[str]:
    """One line per stack under `root` that uses a resource type its region's CloudFormation does not offer."""
    used: dict[tuple[str, str], set[str]] = {}
    for stack, resources in construct_reads.resources_by_stack(root):
        if resources:
            used.setdefault((stack.stack_name, stack.region), set()).update(map(construct_reads.cfn_type, resources))
    problems = []
    published = aws_limits.published_regions()
    for (stack_name, region), types in sorted(used.items()):
        if Token.is_unresolved(region):
            continue  # an environment-agnostic stack: its region is chosen at deploy time
        if region not in published:
            problems.append(
                f"{stack_name}: the CloudFormation resource types of {region} are not published "
                f"({aws_limits.resource_types_source()} has no list of its own for it), so synth cannot check this "
                "stack there; deploy it to another region"
            )
            continue
        try:
            missing = aws_limits.missing_resource_types(region, types)
        except ValueError as error:  # a type outside the table: the table needs regenerating, not the config
            problems.append(f"{stack_name}: {error}")
            continue
        if missing:
            offered = sorted(r for r in published if not aws_limits.missing_resource_types(r, types))
            problems.append(
                f"{stack_name}: CloudFormation in {region} has no {', '.join(missing)} "
                f"({aws_limits.resource_types_source()}); regions with every resource type of this stack: "
                f"{', '.join(offered) or 'none'}"
            )
    return problems


@jsii.implements(IValidation)
class ResourceTypesInRegion:
    """Added to the app: when it synthesizes, every stack's resource types are checked against its region."""

    def __init__(self, root: IConstruct) -> None:
        self.root = root

    def validate(self) -> list[str]:
        return resource_type_problems(self.root)
