"""Whether each stack's region offers every CloudFormation resource type the stack uses, checked when the app
synthesizes: the committed table of core/api_limits/aws_tables.py (from cfn-lint's per-region schemas) against the
construct tree. AWS::SageMaker::ModelPackageGroup, for one, does not exist in the China regions."""

from __future__ import annotations

import jsii
from aws_cdk import Token
from constructs import IConstruct, IValidation

from core.api_limits import aws_tables
from infrastructure import construct_reads


def resource_type_problems(root: IConstruct) -> list[str]:
    """One line per stack under `root` that uses a resource type its region's CloudFormation does not offer."""
    used: dict[tuple[str, str], set[str]] = {}
    for stack, resources in construct_reads.resources_by_stack(root):
        if resources:
            used.setdefault((stack.stack_name, stack.region), set()).update(map(construct_reads.cfn_type, resources))
    problems = []
    published = aws_tables.published_regions()
    for (stack_name, region), types in sorted(used.items()):
        if Token.is_unresolved(region):
            continue  # an environment-agnostic stack: its region is chosen at deploy time
        if region not in published:
            problems.append(
                f"{stack_name}: the CloudFormation resource types of {region} are not published "
                f"({aws_tables.resource_types_source()} has no list of its own for it), so synth cannot check this "
                "stack there; deploy it to another region"
            )
            continue
        try:
            missing = aws_tables.missing_resource_types(region, types)
        except ValueError as error:  # a type outside the table: the table needs regenerating, not the config
            problems.append(f"{stack_name}: {error}")
            continue
        if missing:
            offered = sorted(r for r in published if not aws_tables.missing_resource_types(r, types))
            problems.append(
                f"{stack_name}: CloudFormation in {region} has no {', '.join(missing)} "
                f"({aws_tables.resource_types_source()}); regions with every resource type of this stack: "
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
