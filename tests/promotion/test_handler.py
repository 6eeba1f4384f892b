"""handler: the custom resource's on_event and is_complete, called as aws_cdk.custom_resources.Provider calls them
(is_complete gets the request merged with on_event's answer), with the two moto accounts of test_promote."""

from __future__ import annotations

import pytest

from promotion import handler, promote
from promotion.promote import PromotionError
from tests.promotion.test_promote import (
    PROD,
    PROD_IMAGE,
    ROOT,
    SOURCE_BUCKET,
    SOURCE_GROUP,
    SOURCE_GROUP_ARN,
    SOURCE_REGION,
    TARGET_BUCKET,
    TARGET_GROUP,
    TARGET_REGION,
    WEIGHTS,
    expected_digest,
    full_spec,
    keys,
    world,  # noqa: F401 - the fixture
)

PROPERTIES = {
    "ServiceToken": "arn:aws:lambda:eu-west-1:444444444444:function:provider",
    "SourceGroupArn": SOURCE_GROUP_ARN,
    "SourceStage": "dev",
    "Version": "",
    "TargetGroup": TARGET_GROUP,
    "TargetBucket": TARGET_BUCKET,
    "DestinationRoot": ROOT,
    "ImageUri": PROD_IMAGE,
    "Release": "release-42",
    "SourceRegion": SOURCE_REGION,
    "TargetRegion": TARGET_REGION,
}
WEIGHTS_URI = f"s3://{TARGET_BUCKET}/{ROOT}{SOURCE_GROUP}/1/"


class Context:
    """A Lambda context with `remaining_s` seconds left."""

    def __init__(self, remaining_s: float = 900.0) -> None:
        self.remaining_s = remaining_s

    def get_remaining_time_in_millis(self) -> int:
        return int(self.remaining_s * 1000)


@pytest.fixture
def lambda_clients(world, monkeypatch):  # noqa: F811 - the fixture imported above
    """The handler's clients: the source account's in its region, the target account's in its own."""
    made = []

    def make(properties):
        made.append(properties)
        return handler.Clients(
            source_sagemaker=world.dev["sagemaker"],
            source_s3=world.dev["s3"],
            target_s3=world.prod["s3"],
            target_sagemaker=world.prod["sagemaker"],
        )

    monkeypatch.setattr(handler, "make_clients", make)
    return made


def request(kind: str, **properties) -> dict:
    event = {"RequestType": kind, "RequestId": "r-1", "ResourceProperties": {**PROPERTIES, **properties}}
    if kind != "Create":
        event["PhysicalResourceId"] = WEIGHTS_URI
    return event


def run(event: dict, context=None, *, limit: int = 10) -> tuple[dict, list[dict]]:
    """What the Provider does: on_event, then is_complete with both merged until it is complete."""
    context = context or Context()
    started = handler.on_event(event, context)
    merged = {**event, **started}
    answers = []
    for _ in range(limit):
        answers.append(handler.is_complete(merged, context))
        if answers[-1]["IsComplete"]:
            break
    return started, answers


def test_create_promotes_and_answers_what_the_stack_reads(world, lambda_clients):  # noqa: F811
    arn = world.register("exec-1", WEIGHTS, full_spec)
    started, answers = run(request("Create"))
    assert started == {"PhysicalResourceId": WEIGHTS_URI, "Data": {"SourcePackageArn": arn}}
    assert answers == [
        {
            "IsComplete": True,
            "Data": {
                "PackageArn": f"arn:aws:sagemaker:{TARGET_REGION}:{PROD}:model-package/{TARGET_GROUP}/1",
                "SourcePackageArn": arn,
                "SourceVersion": "1",
                "Digest": expected_digest(WEIGHTS),
                "WeightsUri": WEIGHTS_URI,
            },
        }
    ]
    assert lambda_clients[0]["SourceRegion"] == SOURCE_REGION and lambda_clients[0]["TargetRegion"] == TARGET_REGION


def test_a_deadline_that_passes_after_one_file_resumes_in_the_next_call(world, lambda_clients, monkeypatch, capsys):  # noqa: F811
    world.register("exec-1", WEIGHTS, full_spec)
    monkeypatch.setattr(promote, "COPY_WORKERS", 1)
    # 200 s left: the deadline is 80 s on this clock, which passes once the first copy has started.
    monkeypatch.setattr(handler, "clock", lambda: 1000.0 if world.copies else 0.0)
    started, answers = run(request("Create"), Context(remaining_s=200), limit=1)
    assert answers == [{"IsComplete": False}]  # and no Data: the Provider refuses Data while incomplete
    assert len(world.copies) == 1
    assert f"{ROOT}{SOURCE_GROUP}/1/.promoted.json" not in keys(world.prod["s3"], TARGET_BUCKET)
    assert world.versions(world.prod, TARGET_GROUP) == []
    monkeypatch.setattr(handler, "clock", lambda: 0.0)
    second = handler.is_complete({**request("Create"), **started}, Context(remaining_s=200))
    assert second["IsComplete"] is True and second["Data"]["WeightsUri"] == WEIGHTS_URI
    assert sorted(world.copies) == sorted(f"{ROOT}{SOURCE_GROUP}/1/{name}" for name in WEIGHTS)  # none twice
    out = capsys.readouterr().out
    assert "promote: 1 files copied, 3 remaining" in out and "promote: 3 files copied, 0 remaining" in out
    assert "model-00002-of-00002.safetensors: 5000 bytes" in out


def test_is_complete_copies_the_version_on_event_chose(world, lambda_clients):  # noqa: F811
    first = world.register("exec-1", WEIGHTS, full_spec)
    event = request("Create")
    started = handler.on_event(event, Context())
    world.register("exec-2", {**WEIGHTS, "config.json": b"{}"}, full_spec)  # approved meanwhile
    done = handler.is_complete({**event, **started}, Context())
    assert done["Data"]["SourcePackageArn"] == first and done["Data"]["SourceVersion"] == "1"


def test_an_update_that_finds_the_same_version_keeps_the_resource(world, lambda_clients):  # noqa: F811
    world.register("exec-1", WEIGHTS, full_spec)
    created, _ = run(request("Create"))
    updated, answers = run(request("Update", Release="release-43"))
    assert updated["PhysicalResourceId"] == created["PhysicalResourceId"] == WEIGHTS_URI
    assert answers[-1]["Data"]["PackageArn"].endswith(f"{TARGET_GROUP}/1")
    assert len(world.versions(world.prod, TARGET_GROUP)) == 1


def test_an_update_to_a_newer_version_is_a_new_resource(world, lambda_clients):  # noqa: F811
    world.register("exec-1", WEIGHTS, full_spec)
    run(request("Create"))
    world.register("exec-2", {**WEIGHTS, "config.json": b"{}"}, full_spec)
    updated, answers = run(request("Update"))
    assert updated["PhysicalResourceId"] == f"s3://{TARGET_BUCKET}/{ROOT}{SOURCE_GROUP}/2/"
    assert answers[-1]["Data"]["PackageArn"].endswith(f"{TARGET_GROUP}/2")


def test_delete_touches_nothing(world, lambda_clients):  # noqa: F811
    world.register("exec-1", WEIGHTS, full_spec)
    run(request("Create"))
    before = keys(world.prod["s3"], TARGET_BUCKET), keys(world.dev["s3"], SOURCE_BUCKET)
    calls = len(lambda_clients)
    event = request("Delete")
    assert handler.on_event(event, Context()) == {"PhysicalResourceId": WEIGHTS_URI}
    assert handler.is_complete({**event, "PhysicalResourceId": WEIGHTS_URI}, Context()) == {"IsComplete": True}
    assert len(lambda_clients) == calls  # no client was even made
    assert (keys(world.prod["s3"], TARGET_BUCKET), keys(world.dev["s3"], SOURCE_BUCKET)) == before
    assert len(world.versions(world.prod, TARGET_GROUP)) == 1


def test_a_pinned_version_is_a_property_and_needs_no_release(world, lambda_clients):  # noqa: F811
    first = world.register("exec-1", WEIGHTS, full_spec)
    world.register("exec-2", {**WEIGHTS, "config.json": b"{}"}, full_spec)
    started, answers = run(request("Create", Version="1", Release=""))
    assert started["Data"]["SourcePackageArn"] == first and answers[-1]["Data"]["SourceVersion"] == "1"
    (package,) = world.versions(world.prod, TARGET_GROUP)
    assert package["ModelPackageDescription"] == f"version 1 of {SOURCE_GROUP} promoted"
    assert "release" not in package["CustomerMetadataProperties"]


def test_a_missing_property_is_named(lambda_clients):
    with pytest.raises(PromotionError, match=r"lacks TargetBucket, ImageUri: set them"):
        handler.on_event(request("Create", TargetBucket="", ImageUri=""), Context())


def test_a_refusal_fails_the_create_before_anything_is_copied(world, lambda_clients):  # noqa: F811
    world.register("exec-1", WEIGHTS, full_spec, status="PendingManualApproval")
    with pytest.raises(PromotionError, match=r"llmp approve <version> --stage dev"):
        handler.on_event(request("Create"), Context())
    assert world.copies == [] and keys(world.prod["s3"], TARGET_BUCKET) == set()


def test_clients_are_made_per_region_and_the_copies_by_the_target_regions():
    made = handler.make_clients({"SourceRegion": SOURCE_REGION, "TargetRegion": TARGET_REGION})
    regions = {name: client.meta.region_name for name, client in vars(made).items()}
    assert regions == {
        "source_sagemaker": SOURCE_REGION,
        "source_s3": SOURCE_REGION,
        "target_s3": TARGET_REGION,
        "target_sagemaker": TARGET_REGION,
    }
    assert made.target_s3.meta.config.read_timeout == 300
