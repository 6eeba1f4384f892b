"""docs/architecture.md is drawn from the synthesized app and must match it."""

from __future__ import annotations

from generators.diagram import read_stacks, render
from tests.cdk_assembly import REPO


def test_the_architecture_page_is_current(assembly):
    assert (REPO / "docs" / "architecture.md").read_text() == render(assembly.outdir), "run `make diagram`"


def test_overview_draws_every_stack_and_its_deploy_order(assembly):
    page = render(assembly.outdir)
    for stage in ("dev", "staging", "prod"):
        for stack in ("Storage", "Training", "Serving"):
            assert f'{stage}_{stack}["{stack}<br/>' in page
        assert f"{stage}_Serving --> {stage}_Storage" in page
        assert f"{stage}_Training --> {stage}_Storage" in page


def test_detail_follows_references_across_stacks_and_through_policies(assembly):
    stacks = {s.name: s for s in read_stacks(assembly.outdir) if s.stage == "dev"}
    page = render(assembly.outdir)
    detail = page[page.index("## Inside a stage (dev)") :]

    def node(stack: str, path: str) -> str:
        (logical_id,) = [k for k, p in stacks[stack].paths.items() if p == f"dev/{stack}/{path}"]
        return f"dev_{stack}_{logical_id}"

    model, models_bucket = node("Serving", "Endpoint/Model"), node("Storage", "Models/Resource")
    assert f"{model} -.-> {models_bucket}" in detail  # the model's weights location, a cross-stack reference
    # the hosting role's access comes from its policy's statements, drawn as the role's
    assert f"{node('Storage', 'HostingRole/Role/Resource')} --> {models_bucket}" in detail
    # custom-resource plumbing is left out
    assert "Lambda" not in detail and "S3AutoDeleteObjects" not in detail
