"""Reads of the construct tree that the checks make over every resource, with as few jsii round trips as the
answer allows.

Each property read of a construct from Python is a round trip to the jsii node process. Over the ~170 resources of
the default config, `Stack.of(resource)`, its stack's name and region and the resource's type cost four each; the
checks read them at synth (infrastructure/region_checks.py) and before it (infrastructure/compliance.py). A resource's
type is its L1 class's constant (read once per class), and its stack is the innermost stack whose `find_all()` holds
it (one read per stack).

Python proxies of objects node created are not unique (each read makes a new one), so nodes are told apart by
their jsii reference, never by `id()` or `is`.
"""

from __future__ import annotations

from aws_cdk import CfnResource, Stack
from constructs import IConstruct

_TYPE_BY_CLASS: dict[type, str | None] = {}
_ID_BY_REF: dict[str, str] = {}


def ref(node: IConstruct) -> str:
    """The node's identity in the jsii node process (the same node read twice gives two proxies, one reference)."""
    return node.__jsii_ref__.ref


def construct_id(node: IConstruct) -> str:
    """`node.node.id` (two reads), read once per construct: a construct's id never changes."""
    key = ref(node)
    if key not in _ID_BY_REF:
        _ID_BY_REF[key] = node.node.id
    return _ID_BY_REF[key]


def cfn_type(resource: CfnResource) -> str:
    """The CloudFormation type of `resource`: its L1 class's CFN_RESOURCE_TYPE_NAME, which the class passes to
    CfnResource, read once per class; a resource of no L1 class (a custom resource's CfnResource) is asked."""
    cls = type(resource)
    if cls not in _TYPE_BY_CLASS:
        # Only a class below CfnResource that declares the constant; CfnResource itself has none.
        declares = any("CFN_RESOURCE_TYPE_NAME" in vars(base) for base in cls.__mro__ if base is not CfnResource)
        _TYPE_BY_CLASS[cls] = cls.CFN_RESOURCE_TYPE_NAME if declares else None  # type: ignore[attr-defined]
    return _TYPE_BY_CLASS[cls] or resource.cfn_resource_type


def resources_by_stack(root: IConstruct) -> list[tuple[Stack, list[CfnResource]]]:
    """Each stack under `root` (itself included) with its own CloudFormation resources, as `Stack.of` assigns them:
    a nested stack's resources go to it, not to its parent."""
    stacks = [node for node in root.node.find_all() if isinstance(node, Stack)]
    members = [(stack, [n for n in stack.node.find_all() if isinstance(n, CfnResource)]) for stack in stacks]
    owner: dict[str, int] = {}
    # A nested stack's tree is part of its parent's: the smaller tree, assigned last, is the resource's own stack.
    for index in sorted(range(len(members)), key=lambda i: -len(members[i][1])):
        for resource in members[index][1]:
            owner[ref(resource)] = index
    return [
        (stack, [r for r in resources if owner[ref(r)] == index]) for index, (stack, resources) in enumerate(members)
    ]
