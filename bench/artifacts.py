"""Artifacts: build time and bytes of each code archive, built twice to show identical SHA-256, and whether two
syntheses give byte-identical templates (so a redeploy with no change is an empty `cdk diff`).

The archives are built exactly as the code-package handler builds them at deploy time, with the deterministic
archive module (members_from_directory + write_archive): training/ with files at the top (sourcedir.tar.gz), and
model_artifacts/deepspeed/ with the serving.properties rendered for the default config's first stage, under code/
(model.tar.gz).
"""

from __future__ import annotations

import hashlib
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import Sample

REPO_ROOT = Path(__file__).resolve().parent.parent
# The handler tests that show an unchanged archive makes no new object (tests/infrastructure/constructs/).
NO_NEW_OBJECT_TESTS = (
    "tests/infrastructure/constructs/test_code_package_handler.py::"
    "test_repeating_an_event_gives_the_same_answer_and_uploads_nothing_new",
    "tests/infrastructure/constructs/test_code_package_handler.py::"
    "test_same_content_from_another_asset_key_gives_the_same_archive",
    "tests/infrastructure/constructs/test_code_package.py::test_unchanged_inputs_give_identical_properties",
    "tests/infrastructure/constructs/test_deterministic_archive.py::"
    "test_same_files_with_different_mtimes_and_modes_give_identical_bytes",
)


@dataclass
class Archive:
    name: str
    source: str
    files: int
    source_bytes: int
    build_seconds: Sample
    archive_bytes: int
    sha256: set[str]  # one value when every build gave the same bytes


@dataclass
class ArtifactsResult:
    archives: list[Archive]
    templates_compared: int | None  # files compared between two CLI syntheses (None: not run)
    template_differences: list[str]
    assembly_files: int


def _archive_definitions() -> list[tuple[str, str, Any, str]]:
    """(name, source description, members factory, top-level directory) for each code archive. The inference handler
    is no archive any more: it is written as plain files beside the served weights (infrastructure/code_archives.py)."""
    from infrastructure.constructs.code_package.runtime import deterministic_archive as archive

    def training() -> list[Any]:
        return archive.members_from_directory(REPO_ROOT / "training")

    return [("training sourcedir.tar.gz", "training/", training, "")]


def build(members_factory: Any, top_level_dir: str) -> tuple[float, str, int, int, int]:
    """(seconds, sha256, archive bytes, files, source bytes) of one build, listing the folder included."""
    from infrastructure.constructs.code_package.runtime import deterministic_archive as archive

    out = io.BytesIO()
    started = time.perf_counter()
    members = members_factory()
    sha256, size = archive.write_archive(members, out, top_level_dir=top_level_dir)
    elapsed = time.perf_counter() - started
    if hashlib.sha256(out.getvalue()).hexdigest() != sha256 or len(out.getvalue()) != size:
        raise RuntimeError("write_archive's reported SHA-256 or size does not match the bytes it wrote")
    return elapsed, sha256, size, len(members), sum(member.size for member in members)


def run(*, builds: int = 5, cli_assembly: Path | None = None, cli_differences: list[str] | None = None):
    archives = []
    for name, source, factory, top_level in _archive_definitions():
        timings, hashes = [], set()
        for _ in range(builds):
            seconds, sha256, size, files, source_bytes = build(factory, top_level)
            timings.append(seconds)
            hashes.add(sha256)
        archives.append(Archive(name, source, files, source_bytes, Sample.of(timings), size, hashes))
    compared = None
    assembly_files = 0
    if cli_assembly is not None and cli_differences is not None:
        compared = sum(1 for path in cli_assembly.rglob("*.template.json"))
        assembly_files = sum(1 for path in cli_assembly.rglob("*") if path.is_file())
    return ArtifactsResult(archives, compared, cli_differences or [], assembly_files)


def _test_exists(node_id: str) -> bool:
    path, _, name = node_id.partition("::")
    file = REPO_ROOT / path
    return file.is_file() and f"def {name}(" in file.read_text()


def markdown(result: ArtifactsResult) -> str:
    lines = [
        "## Artifacts: code archives and a redeploy with no change",
        "",
        "Each archive built as the code-package handler builds it at deploy time "
        "(`infrastructure/constructs/code_package/runtime/deterministic_archive.py`: sorted entries, zeroed times and "
        "owners, gzip level 9 without name or time), from the working tree, in memory.",
        "",
        "| archive | from | files | source bytes | archive bytes | build time: runs, median (lowest-highest) | "
        "SHA-256 of every build |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for archive in result.archives:
        build_time = archive.build_seconds
        identical = (
            f"identical: `{next(iter(archive.sha256))[:16]}...`"
            if len(archive.sha256) == 1
            else f"**{len(archive.sha256)} different**"
        )
        lines.append(
            f"| {archive.name} | `{archive.source}` | {archive.files} | {archive.source_bytes:,} | "
            f"{archive.archive_bytes:,} | {build_time.runs}, {build_time.median * 1000:.1f} ms "
            f"({build_time.low * 1000:.1f}-{build_time.high * 1000:.1f} ms) | {identical} |"
        )
    lines += ["", "**A redeploy with no change.**"]
    if result.templates_compared is None:
        lines.append("Not measured in this run (the synth benchmark did not run).")
    elif result.template_differences:
        lines.append(
            f"Two `cdk synth` runs of the same tree DIFFER in {len(result.template_differences)} files, e.g. "
            f"{result.template_differences[:5]}: a redeploy would not be an empty diff."
        )
    else:
        lines.append(
            f"Two `cdk synth` runs of the same tree (the synth benchmark's first two, separate processes) give "
            f"byte-identical cloud assemblies: all {result.assembly_files} files, {result.templates_compared} "
            "templates among them. Identical templates and asset hashes are an empty `cdk diff`; and with the "
            "source asset hash and the rendered files unchanged, the CodePackage custom resource's properties are "
            "unchanged, so CloudFormation does not call its handler. Were it called again, it builds the same bytes "
            "and uploads nothing new; these tests show it:"
        )
        lines += [f"- `{test}`{'' if _test_exists(test) else ' (NOT FOUND: renamed?)'}" for test in NO_NEW_OBJECT_TESTS]
    return "\n".join(lines) + "\n"
