"""The CDK's validation report fails synth: any error in it stops `cdk synth`, `make synth` and app.py with exit 2.

While synthesizing, aws-cdk-lib validates every template (its built-in "CloudFormation Validate" plugin checks each
resource against CloudFormation's schema: 51 tags on a role is its rule F3032) and collects the construct
annotations (cdk-nag's findings among them), then writes everything to `validation-report.json` at the top of the
cloud assembly (aws-cdk-lib 2.275.0, core/lib/private/synthesis-validation.js: `pluginReports`, each with a
`conclusion` and `violations` of a `severity`, `ruleName`, `description` and `violatingConstructs`). Run by the CDK
CLI (2.1148.1), the app is told not to fail on that report (context `@aws-cdk/core:failSynthOnValidationErrors`
false) and the CLI then does not read it for `cdk synth`, which exited 0 with errors in it. So app.py synthesizes
through `synthesize` below, which reads the report itself. The CDK's construct checks (node.add_validation, such as
core/region_support.py's) fail `app.synth()` itself, with a summary whose first line says only that validation
failed: `synthesize` lists the errors on the lines after it (construct_errors).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from core.failures import Refused, cut

REPORT = "validation-report.json"
FAIL_SYNTH_CONTEXT = "@aws-cdk/core:failSynthOnValidationErrors"
FAILING_SEVERITIES = ("error", "fatal")
MAX_LISTED = 20
# What app.synth() raises (through jsii, as a RuntimeError) when a check added with node.add_validation fails, such
# as core/region_support.py's: this first line, then `  [construct path] message` per error (aws-cdk-lib 2.275.0,
# core/lib/private/synthesis.js: validateTree).
CONSTRUCT_ERRORS = "ValidationFailedWithErrors: Validation failed with the following errors:"
CONSTRUCT_ERROR = re.compile(r"^\s*\[(?P<path>[^\]]*)\] (?P<message>.*)$")
# Our checks write these messages for a person (a region check lists about 30 regions): cut only what is longer.
CONSTRUCT_ERROR_CHARACTERS = 1000


def synthesize(app: Any) -> None:
    """`app.synth()`, then Refused with the errors of its validation report, if any. A report left by an earlier
    synth in the same folder is removed first (the CDK writes one only when a validation plugin ran)."""
    report = Path(app.outdir) / REPORT
    report.unlink(missing_ok=True)
    try:
        app.synth()
    except RuntimeError as error:  # an app that fails on its own report (the default outside the CLI) raises a summary
        check(Path(app.outdir))
        refused = construct_errors(error)
        if refused:
            raise refused from error
        raise
    check(Path(app.outdir))


def construct_errors(error: Exception) -> Refused | None:
    """Refused listing each error of the CDK's construct validation, when `error` is its summary; None otherwise.
    The summary's first line says only that validation failed: the reasons are on the lines after it."""
    first, _, rest = str(error).partition("\n")
    if first.strip() != CONSTRUCT_ERRORS:
        return None
    listed, count = [], 0
    for line in (line for line in rest.splitlines() if line.strip()):
        found = CONSTRUCT_ERROR.match(line)
        if found:
            count += 1
            path = f"{found['path']}: " if found["path"] else ""  # the app itself has the empty path
            listed.append(f"  - {path}{cut(found['message'], CONSTRUCT_ERROR_CHARACTERS)}")
        else:  # a message of several lines: its next line
            listed.append(f"    {cut(line.strip(), CONSTRUCT_ERROR_CHARACTERS)}")
    if len(listed) > MAX_LISTED:
        listed = [*listed[:MAX_LISTED], f"  ... and {len(listed) - MAX_LISTED} more lines"]
    return Refused(
        f"synth stopped: the CDK's validation of the constructs found {count} error{'s' if count != 1 else ''}:\n"
        + "\n".join(listed)
    )


def check(assembly: Path) -> None:
    """Refused, listing them, when the validation report of the cloud assembly `assembly` has errors."""
    found = errors(assembly)
    if found:
        listed = [f"  - {line}" for line in found[:MAX_LISTED]]
        if len(found) > MAX_LISTED:
            listed.append(f"  ... and {len(found) - MAX_LISTED} more")
        raise Refused(
            f"{assembly / REPORT}: the CDK's validation of the synthesized templates found {len(found)} "
            f"error{'s' if len(found) > 1 else ''}:\n" + "\n".join(listed)
        )


def errors(assembly: Path) -> list[str]:
    """One line per error of the report: `RULE description (plugin): construct paths`."""
    path = assembly / REPORT
    if not path.is_file():
        return []
    lines = []
    for plugin in json.loads(path.read_text()).get("pluginReports", []):
        name = plugin.get("pluginName", "a validation plugin")
        violations = plugin.get("violations", [])
        failing = [v for v in violations if v.get("severity", "error") in FAILING_SEVERITIES]
        if plugin.get("conclusion") == "failure" and not failing:
            failing = violations  # a custom severity the plugin counts as failing
            if not failing:
                reason = (plugin.get("metadata") or {}).get("error", "no reason given")
                lines.append(f"{name} failed: {cut(str(reason))}")
        lines += [f"{_violation(v)} ({name}): {_constructs(v)}" for v in failing]
    return lines


def _violation(violation: dict[str, Any]) -> str:
    return cut(f"{violation.get('ruleName', '?')} {violation.get('description', '')}".strip())


def _constructs(violation: dict[str, Any]) -> str:
    paths = [
        c.get("constructPath") or (c.get("cloudFormationResource") or {}).get("logicalId", "?")
        for c in violation.get("violatingConstructs", [])
    ]
    if not paths:
        return "the whole app"
    shown = ", ".join(paths[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
