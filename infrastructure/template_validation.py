"""The CDK's built-in template validation, with its results kept in the synth cache.

aws-cdk-lib validates every synthesized template with its "CloudFormation Validate" plugin (the
@aws/cloudformation-validate engine it bundles: CloudFormation's resource schemas and the CDK's rules). Starting that
engine costs about 2 s of every synth and checking the nine templates of the default config about 1 s more (measured
in bench/synth_phases.py), for a result that is a pure function of the templates' bytes, their accounts and regions,
and the engine, which the aws-cdk-lib version fixes (the engine ships inside it).

So the app is created with the built-in plugin off (`new_app`) and this plugin stands in its place, under the same
name, which is what the CDK's handling of the report keys on (errors downgraded to warnings unless
`@aws-cdk/core:validateAgainstDefaultRules`; acknowledgements; the report file): on a miss it runs the real
plugin and stores its report in the synth cache (core/synth_cache.py, keyed on the templates' contents and on every
installed distribution's version, so an entry can never be stale); on a hit it returns the stored report. Every synth
is validated either way; a report from the cache is the one the engine gave for the same bytes.

`cdk synth --no-validation` (CDK_VALIDATION=false, which the CLI passes to the app) turns it off as it turns off the
built-in one. Registered once, on the app, it is given every stack (the app's assembly, recursively); the engine sees
them in the order the CDK gives its own plugin (core/lib/private/synthesis-validation.js: the stages under the app
in order, then the app's own stacks), so a report lists its violations in the same order.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import (
    App,
    CloudFormationValidatePlugin,
    IPolicyValidationContext,
    IPolicyValidationPlugin,
    PolicyValidationPluginReport,
    PolicyValidationStack,
    PolicyViolatingResource,
    PolicyViolation,
    Stage,
    Validations,
)

from core import synth_cache

# CloudFormationValidatePlugin.PLUGIN_NAME: the CDK treats reports of this name as its built-in validation's.
PLUGIN_NAME = "CloudFormation Validate"


def enabled() -> bool:
    """What the CDK checks before adding its own plugin (defaultValidationEnabled): only an explicit false
    disables it."""
    return os.environ.get("CDK_VALIDATION") != "false"


def new_app(**props: Any) -> App:
    """An App whose templates are validated through the cache: the built-in plugin off, `install` adds this one."""
    return App(builtin_cloud_formation_validation=False, **props)


def install(app: App) -> None:
    """Validate every stack of `app` (made by `new_app`, its stages added) unless validation is turned off."""
    if not enabled():
        return
    # One registration: jsii gives each registration its own object, which the CDK would call separately.
    stages = [child.node.path for child in app.node.children if Stage.is_stage(child)]
    Validations.of(app).add_plugins(CachedTemplateValidation(stages))


@jsii.implements(IPolicyValidationPlugin)
class CachedTemplateValidation:
    """The built-in CloudFormation Validate plugin, its reports kept in the synth cache."""

    def __init__(self, stages: list[str]) -> None:
        self._stages = stages
        self._version: str | None = None

    @property
    def name(self) -> str:
        return PLUGIN_NAME

    @property
    def version(self) -> str | None:
        return self._version

    @property
    def rule_ids(self) -> list[str] | None:
        return None  # listing them would start the engine; the CDK reads them only for version reporting

    def validate(self, context: IPolicyValidationContext) -> PolicyValidationPluginReport:
        stacks = sorted(context.stack_templates, key=self._stage_index)
        paths = [stack.template_path for stack in stacks]
        root = os.path.commonpath([os.path.dirname(path) for path in paths]) if paths else ""
        inputs = [
            {
                "stack": stack.stack_construct_path,
                "template": os.path.relpath(stack.template_path, root),
                "sha256": hashlib.sha256(Path(stack.template_path).read_bytes()).hexdigest(),
                "account": stack.account_id,
                "region": stack.region,
            }
            for stack in stacks
        ]
        result = synth_cache.compute_once(f"{__name__}.engine_report", inputs, lambda: _engine_report(stacks, paths))
        self._version = result["version"]
        return _report(result["report"], paths)

    def _stage_index(self, stack: PolicyValidationStack) -> int:
        path = stack.stack_construct_path
        return next((i for i, stage in enumerate(self._stages) if path.startswith(f"{stage}/")), len(self._stages))


@jsii.implements(IPolicyValidationContext)
class _Stacks:
    """The context the engine is given: the stacks in the CDK's order."""

    def __init__(self, stacks: list[PolicyValidationStack]) -> None:
        self._stacks = stacks

    @property
    def stack_templates(self) -> list[PolicyValidationStack]:
        return self._stacks

    @property
    def template_paths(self) -> list[str]:
        return [stack.template_path for stack in self._stacks]

    @property
    def account_id(self) -> str | None:
        accounts = {stack.account_id for stack in self._stacks}
        return accounts.pop() if len(accounts) == 1 else None

    @property
    def region(self) -> str | None:
        regions = {stack.region for stack in self._stacks}
        return regions.pop() if len(regions) == 1 else None

    @property
    def app_construct(self) -> Any:
        raise NotImplementedError("the CloudFormation Validate engine does not read the app")


def _engine_report(stacks: list[PolicyValidationStack], paths: list[str]) -> dict[str, Any]:
    engine = CloudFormationValidatePlugin()
    report = engine.validate(_Stacks(stacks))
    return {"version": engine.version, "report": _stored(report, paths)}


def _stored(report: Any, paths: list[str]) -> dict[str, Any]:
    """The report as JSON data; a violating resource's template as its index in the validated stacks, since the
    same templates sit in another folder on the next synth."""
    return {
        "success": report.success,
        "metadata": dict(report.metadata) if report.metadata else None,
        "violations": [
            {
                "rule_name": violation.rule_name,
                "description": violation.description,
                "fix": violation.fix,
                "severity": violation.severity,
                "rule_metadata": dict(violation.rule_metadata) if violation.rule_metadata else None,
                "violating_resources": [
                    {
                        "resource_logical_id": resource.resource_logical_id,
                        "template": paths.index(resource.template_path),
                        "locations": list(resource.locations),
                    }
                    for resource in violation.violating_resources
                ],
            }
            for violation in report.violations
        ],
    }


def _report(stored: dict[str, Any], paths: list[str]) -> PolicyValidationPluginReport:
    return PolicyValidationPluginReport(
        success=stored["success"],
        metadata=stored["metadata"],
        violations=[
            PolicyViolation(
                rule_name=violation["rule_name"],
                description=violation["description"],
                fix=violation["fix"],
                severity=violation["severity"],
                rule_metadata=violation["rule_metadata"],
                violating_resources=[
                    PolicyViolatingResource(
                        resource_logical_id=resource["resource_logical_id"],
                        template_path=paths[resource["template"]],
                        locations=resource["locations"],
                    )
                    for resource in violation["violating_resources"]
                ],
            )
            for violation in stored["violations"]
        ],
    )
