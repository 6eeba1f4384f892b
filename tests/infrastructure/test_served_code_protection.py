"""Issue 26, finding 1: no job can put code into a served weights prefix, nor choose the weights a deploy serves.

The endpoint runs `<served weights>inference/<sha256>/model.py` (OPTION_ENTRYPOINT) with every prompt, and a staged
record (pretrained/<name>/<commit>.json, main.json) chooses the commit the next deploy serves. The models bucket's
policy denies those writes to every principal but the code-packaging functions (handler folders) and the staging role
(pretrained/): an explicit deny no IAM allow overrides, whatever a role's own policy grows to. The tests read the
synthesized templates, and evaluate the denies the way S3 does for the writers that matter.
"""

from __future__ import annotations

import fnmatch
import json

import pytest

from core import bucket_layout
from core.naming import StageNames
from tests.cdk_assembly import Assembly, render, short_id

STAGES = ["dev", "staging", "prod"]
PROJECT = "llm-platform"
ACCOUNT = "<AWS::AccountId>"


def models_policy(assembly: Assembly, stage: str) -> dict[str, dict]:
    (policy,) = [
        p
        for p in assembly.resources(stage, "Storage", "AWS::S3::BucketPolicy").values()
        if render(p["Properties"]["Bucket"]) == "<Models>"
    ]
    return {s.get("Sid", ""): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def packaging_roles(assembly: Assembly, stage: str) -> dict[str, dict]:
    return {
        f"{stack}/{short_id(k)}": v
        for stack in ("Training", "Serving")
        for k, v in assembly.resources(stage, stack, "AWS::IAM::Role").items()
        if short_id(k) == "CodePackagingHandlerRole"
    }


def role_path(assembly: Assembly, stage: str) -> str:
    return StageNames(PROJECT, stage).role_path  # config/default.yaml's project


def denied(policy: dict[str, dict], principal: str, key: str, action: str = "s3:PutObject") -> list[str]:
    """The deny statements of `policy` that refuse `action` on `key` to the role `principal` (an ARN, rendered as
    the templates render it): Resource by S3's wildcard match, ArnNotLike by IAM's."""
    hits = []
    for sid, s in policy.items():
        if s["Effect"] != "Deny" or action not in _list(s["Action"]):
            continue
        if not any(fnmatch.fnmatchcase(f"<Models.Arn>/{key}", r) for r in _list(render(s["Resource"]))):
            continue
        condition = render(s.get("Condition", {}))
        if set(condition) - {"ArnNotLike"}:
            continue  # a statement on other conditions (TLS): not what these tests look at
        writers = _list(condition["ArnNotLike"]["aws:PrincipalArn"])
        if not any(fnmatch.fnmatchcase(principal, w) for w in writers):
            hits.append(sid)
    return hits


def _list(value) -> list:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("stage", STAGES)
def test_only_the_code_packaging_functions_write_a_handler_folder_of_served_weights(assembly, stage):
    statement = models_policy(assembly, stage)["OnlyCodePackagingWritesHandlers"]
    path = role_path(assembly, stage).strip("/")
    assert statement["Effect"] == "Deny" and statement["Principal"] == {"AWS": "*"}
    assert statement["Action"] == "s3:PutObject"
    assert sorted(render(statement["Resource"])) == [
        "<Models.Arn>/pretrained/*/inference/*",
        "<Models.Arn>/promoted/*/inference/*",
        "<Models.Arn>/registered/*/inference/*",
        "<Models.Arn>/trained/*/inference/*",
    ]
    assert render(statement["Condition"]) == {
        "ArnNotLike": {"aws:PrincipalArn": [f"arn:aws:iam::{ACCOUNT}:role/{path}/code-packaging/*"]}
    }
    assert bucket_layout.HANDLER_SUBFOLDER == "inference/"
    assert bucket_layout.SERVED_WEIGHTS == (
        bucket_layout.PRETRAINED,
        bucket_layout.TRAINED,
        bucket_layout.REGISTERED,
        bucket_layout.PROMOTED,
    )


@pytest.mark.parametrize("stage", STAGES)
def test_only_the_staging_role_writes_staged_weights_and_their_records(assembly, stage):
    statement = models_policy(assembly, stage)["OnlyStagingWritesPretrained"]
    path = role_path(assembly, stage).strip("/")
    assert statement["Effect"] == "Deny" and statement["Principal"] == {"AWS": "*"}
    assert statement["Action"] == "s3:PutObject"
    assert render(statement["Resource"]) == "<Models.Arn>/pretrained/*"
    assert render(statement["Condition"]) == {
        "ArnNotLike": {
            "aws:PrincipalArn": [
                "<StagingRole.Arn>",
                f"arn:aws:iam::{ACCOUNT}:role/{path}/code-packaging/*",
            ]
        }
    }


@pytest.mark.parametrize("stage", STAGES)
def test_only_the_registry_role_writes_what_a_model_package_names(assembly, stage):
    statement = models_policy(assembly, stage)["OnlyTheRegistryWritesRegistered"]
    path = role_path(assembly, stage).strip("/")
    assert statement["Effect"] == "Deny" and statement["Principal"] == {"AWS": "*"}
    assert statement["Action"] == "s3:PutObject"
    assert render(statement["Resource"]) == "<Models.Arn>/registered/*"
    assert render(statement["Condition"]) == {
        "ArnNotLike": {
            "aws:PrincipalArn": [
                "<RegistryRole.Arn>",
                f"arn:aws:iam::{ACCOUNT}:role/{path}/code-packaging/*",
            ]
        }
    }


@pytest.mark.parametrize("stage", STAGES)
def test_the_code_packaging_roles_and_only_they_are_under_the_trusted_folder(assembly, stage):
    """The deny names the packaging functions' roles by path: every stack's packaging role is there, and no other
    role of the stage is (the pipelines' role, the lookups' function, the SageMaker roles)."""
    path = role_path(assembly, stage)
    roles = {
        f"{stack}/{short_id(k)}": v["Properties"].get("Path", "/")
        for stack in ("Storage", "Training", "Serving")
        for k, v in assembly.resources(stage, stack, "AWS::IAM::Role").items()
    }
    trusted = {name for name, where in roles.items() if where.startswith(f"{path}code-packaging/")}
    assert trusted == {"Training/CodePackagingHandlerRole", "Serving/CodePackagingHandlerRole"}
    assert {p["Properties"]["Path"] for p in packaging_roles(assembly, stage).values()} == {f"{path}code-packaging/"}
    # The stage key still trusts them: they are under the stage's role path.
    assert all(where.startswith(path) for name, where in roles.items() if not name.startswith("Storage/"))


# The keys a job could use to choose what the endpoint runs: a handler file inside staged and fine-tuned weights, a
# staged commit's record, main's record and a staged weights file.
HANDLER_KEYS = [
    "pretrained/gpt-j-6b/0123456789abcdef0123456789abcdef01234567/inference/abc/model.py",
    "trained/pipelines-x-Train-y/output/model/inference/abc/model.py",
    "trained/pipelines-x-Train-y/output/model/inference/abc/lmi_loading.py",
    "registered/execution-1/inference/abc/model.py",
]
REGISTERED_KEYS = [
    "registered/execution-1/model-00001-of-00002.safetensors",
    "registered/execution-1/.registered.json",
    "registered/execution-1/adapter.tar.gz",
]
STAGED_KEYS = [
    "pretrained/gpt-j-6b/main.json",
    "pretrained/gpt-j-6b/0123456789abcdef0123456789abcdef01234567.json",
    "pretrained/gpt-j-6b/0123456789abcdef0123456789abcdef01234567/model-00001-of-00002.safetensors",
]


def roles(assembly: Assembly, stage: str) -> dict[str, str]:
    """Each writer's role ARN as aws:PrincipalArn carries it (rendered as the templates render it)."""
    path = role_path(assembly, stage).strip("/")
    return {
        "training": "<TrainingRole.Arn>",
        "hosting": "<HostingRole.Arn>",
        "staging": "<StagingRole.Arn>",
        "registry": "<RegistryRole.Arn>",
        "packaging": f"arn:aws:iam::{ACCOUNT}:role/{path}/code-packaging/llm-dev-serving-CodePackaging-X",
        "pipelines": f"arn:aws:iam::{ACCOUNT}:role/{path}/llm-dev-training-PipelinesPipelineRole-X",
        "administrator": f"arn:aws:iam::{ACCOUNT}:role/Admin",
    }


@pytest.mark.parametrize("key", HANDLER_KEYS)
def test_no_role_but_the_packaging_function_can_put_a_handler_file(assembly, key):
    policy, who = models_policy(assembly, "prod"), roles(assembly, "prod")
    assert denied(policy, who["packaging"], key) == []
    for role in ("training", "staging", "registry", "hosting", "pipelines", "administrator"):
        assert denied(policy, who[role], key), role


@pytest.mark.parametrize("key", STAGED_KEYS)
def test_no_role_but_the_staging_role_can_put_staged_weights_or_a_record(assembly, key):
    policy, who = models_policy(assembly, "prod"), roles(assembly, "prod")
    assert denied(policy, who["staging"], key) == []
    for role in ("training", "registry", "hosting", "pipelines", "administrator"):
        assert denied(policy, who[role], key), role


@pytest.mark.parametrize("key", REGISTERED_KEYS)
def test_no_role_but_the_registry_role_can_change_a_registered_version(assembly, key):
    """The training role writes trained/ and can change it after a version is approved: a package names the
    registry's copy, which no job that trains can touch."""
    policy, who = models_policy(assembly, "prod"), roles(assembly, "prod")
    assert denied(policy, who["registry"], key) == []
    for role in ("training", "staging", "hosting", "pipelines", "administrator"):
        assert denied(policy, who[role], key), role


def test_the_training_role_still_writes_fine_tuned_weights_and_checkpoints(assembly):
    policy, who = models_policy(assembly, "prod"), roles(assembly, "prod")
    for key in ("trained/pipelines-x-Train-y/output/model/model.safetensors", "checkpoints/run/step-10/x.pt"):
        assert denied(policy, who["training"], key) == []


@pytest.mark.parametrize("stage", STAGES)
def test_the_training_role_may_not_write_pretrained_and_the_staging_role_is_always_its_own(assembly, stage):
    """Without a Hugging Face token the training role used to run the staging jobs, and so write pretrained/."""
    storage = assembly.template(stage, "Storage")
    ids = {short_id(k) for k in storage["Resources"]}
    assert {"TrainingRole", "StagingRole"} <= ids
    training = [
        s
        for p in assembly.resources(stage, "Storage", "AWS::IAM::Policy").values()
        if render(p["Properties"]["Roles"]) == ["<TrainingRole>"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    writes = [r for s in training if "s3:PutObject" in _list(s["Action"]) for r in _list(render(s["Resource"]))]
    assert writes and not [r for r in writes if "pretrained/" in r]
    assert "StagingRoleArn" in {short_id(k) for k in storage["Outputs"]}


def test_the_evaluate_job_writes_nothing_into_the_weights(assembly):
    """The handler a registered package needs beside its weights is the serving stack's to write at deploy time;
    the Evaluate job, which runs with the training role, only writes its report."""
    (pipeline,) = [
        p
        for p in assembly.resources("prod", "Training", "AWS::SageMaker::Pipeline").values()
        if p["Properties"]["PipelineName"].endswith("-finetune")
    ]
    body, _ = pipeline["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]["Fn::Sub"]
    definition = json.loads(body)
    (evaluate,) = [s for s in definition["Steps"] if s["Name"] == "Evaluate"]
    outputs = evaluate["Arguments"]["ProcessingOutputConfig"]["Outputs"]
    assert [o["OutputName"] for o in outputs] == ["evaluation"]
    assert [i["InputName"] for i in evaluate["Arguments"]["ProcessingInputs"] if i["InputName"] == "handler"] == []
