"""The promotion rehearsal end to end on moto's server (two accounts, the real handler), over the test run's synth
of config/examples/promotion.yaml (about 10 s each, after the synth)."""

from __future__ import annotations

import re

import pytest

from rehearsal import promotion as rehearsal

CHECKS = [
    "bucket grant",
    "key grant",
    "group grant",
    "serving names no source",
    "copy byte-identical",
    "promoted record",
    "target package",
    "new release copies nothing",
    "copy outlives its source",
]


@pytest.fixture(scope="module")
def assembly_dir(promotion_assembly) -> str:
    assert promotion_assembly.error is None, promotion_assembly.error
    return str(promotion_assembly.outdir)


def results(output: str) -> list[tuple[str, str]]:
    return re.findall(r"^  (PASS|FAIL)  ([^:]+):", output, re.MULTILINE)


def test_a_version_approved_in_dev_is_copied_into_staging_and_outlives_dev(assembly_dir, capsys):
    status = rehearsal.main(["--assembly", assembly_dir])
    output = capsys.readouterr().out
    assert results(output) == [("PASS", name) for name in CHECKS], output
    assert f"Result: {len(CHECKS)} checks, {len(CHECKS)} passed, 0 failed" in output
    assert "promoted/llm-platform-dev/1/" in output
    assert "What moto does not represent" in output and "Traceback" not in output
    assert status == 0


def test_a_source_file_changed_after_its_record_is_refused_and_reported(assembly_dir, capsys, monkeypatch, tmp_path):
    seed = rehearsal.seed_weights
    monkeypatch.setattr(rehearsal.tempfile, "tempdir", str(tmp_path))  # a failed run keeps its work directory

    def tampered(s3, bucket, prefix):
        record = seed(s3, bucket, prefix)
        body = rehearsal.WEIGHTS["model.safetensors"][::-1]  # the same size, other bytes: only the SHA-256 tells
        s3.put_object(Bucket=bucket, Key=prefix + "model.safetensors", Body=body, ChecksumAlgorithm="SHA256")
        return record

    monkeypatch.setattr(rehearsal, "seed_weights", tampered)
    status = rehearsal.main(["--assembly", assembly_dir])
    output = capsys.readouterr().out
    assert ("FAIL", "promotion") in results(output), output
    assert "PromotionError" in output and "model.safetensors" in output
    assert "PASS  copy byte-identical" not in output and "Traceback" not in output
    assert status == 1
