"""Every cdk-nag finding acknowledged in synthesized assemblies, as one Markdown page to review.

    python -m generators.acknowledgements ASSEMBLY [ASSEMBLY ...] > docs/acknowledgements.md   (make acknowledgements)

Reads the NagReport CSV files cdk-nag writes next to each assembly, keeps the findings it reports as Suppressed,
and groups them by rule and reason: what is acknowledged, why, on which resource, in which stages, and for granular
rules which exact findings. The page is generated, so it cannot drift from the templates; a test regenerates it.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
from pathlib import Path

HEADER = """# Security acknowledgements

Every finding of cdk-nag's AwsSolutions, NIST 800-53 R5 and HIPAA Security packs that this project acknowledges
rather than fixes, why, and where. Generated from the synthesized default config and the promotion example by
`make acknowledgements` (generators/acknowledgements.py); a test fails when it is out of date. Review changes to it
like code: a new entry is a new exception to a security rule.
"""
STAGE_STACKS = ("Storage", "Training", "Serving")

# rule -> reason -> resource -> (stages, findings)
Found = dict[str, dict[str, dict[str, tuple[set[str], set[str]]]]]


def collect(assemblies: list[Path]) -> Found:
    found: Found = collections.defaultdict(lambda: collections.defaultdict(dict))
    for assembly in assemblies:
        for report in sorted(assembly.glob("*-NagReport.csv")):
            with report.open(newline="") as f:
                for row in csv.DictReader(f):
                    if row["Compliance"] != "Suppressed":
                        continue
                    stage, resource = _split(row["Resource ID"])
                    finding, reason = _split_reason(row["Exception Reason"])
                    stages, findings = found[row["Rule ID"]][reason].setdefault(resource, (set(), set()))
                    stages.add(stage)
                    if finding:
                        findings.add(finding)
    return found


def render(assemblies: list[Path]) -> str:
    found = collect(assemblies)
    count = sum(len(resources) for reasons in found.values() for resources in reasons.values())
    lines = [HEADER, f"{count} acknowledged (rule, resource) pairs under {len(found)} rules.\n"]
    for rule in sorted(found):
        lines.append(f"## {rule}\n")
        for reason in sorted(found[rule]):
            lines.append(f"- **Why:** {reason}")
            for resource, (stages, findings) in sorted(found[rule][reason].items()):
                detail = f": {', '.join(f'`{f}`' for f in sorted(findings))}" if findings else ""
                lines.append(f"  - `{resource}` ({', '.join(sorted(stages))}){detail}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _split(resource_id: str) -> tuple[str, str]:
    """`dev/Storage/Key/Resource` -> ("dev", "Storage/Key"); the pipeline's own stack is filed under "pipeline"."""
    parts = resource_id.removesuffix("/Resource").split("/")
    if len(parts) > 1 and parts[1] in STAGE_STACKS:
        return parts[0], "/".join(parts[1:])
    return "pipeline", "/".join(parts)


def _split_reason(text: str) -> tuple[str, str]:
    """cdk-nag writes `[finding] reason` for granular rules; accounts and regions differ per config, so mask them."""
    match = re.match(r"^\[(.*?)\] (.*)$", text, re.DOTALL)
    finding, reason = (match.group(1), match.group(2)) if match else ("", text)
    finding = re.sub(r"\b\d{12}\b", "<account>", finding)
    finding = re.sub(r":(us|eu|ap|sa|ca|me|af|il|cn|mx)-[a-z]+-\d:", ":<region>:", finding)
    return finding, reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assemblies", nargs="+", type=Path, help="synthesized cloud assembly directories")
    print(render(parser.parse_args().assemblies), end="")


if __name__ == "__main__":
    main()
