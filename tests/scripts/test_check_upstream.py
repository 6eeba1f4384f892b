"""make check-upstream: what newer releases would change in the generated tables, apart from make test."""

from __future__ import annotations

from scripts import check_upstream


def test_a_changed_limit_a_new_type_and_a_new_region_are_each_one_line():
    old = {"members": {"sagemaker:X:Name": {"max": 63, "source": "botocore 1.44.8"}}, "types": ["AWS::S3::Bucket"]}
    new = {
        "members": {"sagemaker:X:Name": {"max": 64, "source": "botocore 1.44.18"}, "sagemaker:Y:Z": {"min": 1}},
        "types": ["AWS::S3::Bucket", "AWS::SageMaker::Cluster"],
    }
    assert list(check_upstream.json_changes(old, new)) == [
        "members.sagemaker:X:Name.max: 63 -> 64",
        'members.sagemaker:Y:Z: new: {"min": 1}',
        "types: + AWS::SageMaker::Cluster",
    ]


def test_a_long_list_of_additions_is_counted_past_the_first_few():
    (line,) = check_upstream.json_changes({"r": []}, {"r": [f"region-{i:02}" for i in range(20)]})
    assert line.endswith("region-07 and 12 more")


def test_the_check_exits_0_when_nothing_would_change(monkeypatch, capsys):
    monkeypatch.setattr(check_upstream, "version_changes", lambda: [])
    monkeypatch.setattr(check_upstream, "table_changes", lambda: {"core/catalog/dlc_registries.json": []})
    monkeypatch.setattr(check_upstream, "newer_lmi_images", lambda: [])
    assert check_upstream.main() == 0
    assert "nothing to take" in capsys.readouterr().out


def test_the_check_exits_1_with_the_change_and_the_commands_that_take_it(monkeypatch, capsys):
    monkeypatch.setattr(check_upstream, "version_changes", lambda: ["botocore 1.44.8 -> 1.44.18"])
    monkeypatch.setattr(check_upstream, "table_changes", lambda: {"core/api_limits/aws_api_limits.json": []})
    monkeypatch.setattr(check_upstream, "newer_lmi_images", lambda: [])
    assert check_upstream.main() == 1
    out = capsys.readouterr().out
    assert "botocore 1.44.8 -> 1.44.18" in out and "make lock" in out and "aws_api_limits.json" not in out


def test_the_lock_versions_are_read_from_the_committed_locks():
    assert check_upstream.locked_version("botocore", "synth") == "1.44.8"
    assert check_upstream.locked_version("cfn-lint", "dev") == "1.58.0"


def test_lmi_releases_the_sdk_lists_past_the_vllm_engines_are_listed(monkeypatch):
    import dataclasses

    from core.catalog import images

    older = dataclasses.replace(images.SERVING_IMAGES["vllm"], tag="0.36.0-lmi18.0.0-cu128")
    monkeypatch.setitem(images.SERVING_IMAGES, "vllm", older)
    listed = [line.split(" ")[1] for line in check_upstream.newer_lmi_images()]
    assert listed == ["0.38.0"]  # the pinned SDK has no 0.37.0, and 0.36.0 is the one running
