"""The promotion rehearsal's offline half: which promotion of the config it rehearses, its synthesis, and the
grants the source stage's templates give the target's promotion role (rehearsal/promotion.py runs the rest on moto).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from rehearsal import cdk_cli
from rehearsal.assembly import Resolver, StackTemplate, Unresolvable
from rehearsal.deployment import partition_of
from rehearsal.findings import Check, summarize
from rehearsal.rehearse import SetupError
from rehearsal.server import REPO_ROOT

# --- the two stages, as configured and synthesized -------------------------------------------------------------


class Stages:
    """One promotion of the config: source and target stage, accounts, groups and the promotion role."""

    def __init__(self, config_path: str, source: str | None, target: str | None) -> None:
        from core.config import ConfigError, load_config, promotion
        from core.naming import StageNames

        try:
            config = load_config(config_path)
        except ConfigError as err:
            raise SetupError(str(err)) from None
        pairs = [(s.from_stage, s.stage) for s in promotion.promoted_sites(config) if s.adapter is None]
        wanted = [p for p in pairs if source in (None, p[0]) and target in (None, p[1])]
        if not wanted:
            promotions = ", ".join(f"--from-stage {a} --to-stage {b}" for a, b in pairs) or "none"
            raise SetupError(f"{config_path}: no such promotion of whole models; it has: {promotions}")
        (self.source, self.target), names = wanted[0], StageNames(config.project, wanted[0][1])
        self.source_account, self.target_account = map(config.stage_account, wanted[0])
        if not self.source_account or self.source_account == self.target_account:
            raise SetupError(f"{self.source} and {self.target} share an account; the rehearsal needs two")
        self.region, self.target_region = config.stages[self.source].region, config.stages[self.target].region
        self.partition, self.url_suffix = partition_of(self.region)
        self.source_group = StageNames(config.project, self.source).model_package_group
        self.target_group, self.role_arn = (
            names.model_package_group,
            names.promotion_role_arn(self.partition, self.target_account),
        )
        self.root = f"arn:{self.partition}:iam::{self.target_account}:root"
        self.admin = f"arn:{self.partition}:iam::{self.source_account}:role/rehearsal-source-admin"
        self.serving = config.stages[self.source].serving


def synthesize(config_path: str, outdir: Path) -> None:
    """app.py as the CDK CLI runs it (cdk.json's context, nag included), offline, into `outdir`."""
    context = {
        **json.loads((REPO_ROOT / "cdk.json").read_text())["context"],
        "config": str(Path(config_path).resolve()),
    }
    env = cdk_cli.environment(endpoint_url="http://127.0.0.1:9", region="us-east-1", work_dir=outdir.parent)
    env |= {"CDK_OUTDIR": str(outdir), "CDK_CONTEXT_JSON": json.dumps(context)}
    env["PATH"] = os.pathsep.join([str(REPO_ROOT / "node_modules" / ".bin"), env["PATH"]])  # jsii's node, as make's
    done = subprocess.run([sys.executable, "app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SetupError(f"synthesis of {config_path} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")


def stack(stacks: list[StackTemplate], part: str) -> StackTemplate:
    return next(s for s in stacks if s.display_name.endswith(f"/{part}"))


def models_bucket(storage: StackTemplate) -> str:
    return next(lid for lid in storage.of_type("AWS::S3::Bucket") if re.fullmatch(r"Models[0-9A-F]{8}", lid))


def resolver(template: StackTemplate, stages: Stages, account: str, names: dict[str, str] | None = None) -> Resolver:
    """Template values with `names` (logical id -> physical name; other resources keep their logical ids)."""
    arn = f"arn:{stages.partition}"
    arns = {
        "AWS::S3::Bucket": f"{arn}:s3:::{{}}",
        "AWS::KMS::Key": f"{arn}:kms:{stages.region}:{account}:key/{{}}",
        "AWS::IAM::Role": f"{arn}:iam::{account}:role/{{}}",
    }

    def attribute(resource_type: str, physical_id: str, name: str) -> str:
        if name != "Arn" or resource_type not in arns:
            raise Unresolvable(f"{resource_type}.{name}")
        return arns[resource_type].format(physical_id)

    pseudo = {"AWS::Partition": stages.partition, "AWS::AccountId": account, "AWS::Region": stages.region}
    pseudo |= {"AWS::URLSuffix": stages.url_suffix, "AWS::StackName": template.stack_name}
    types = {lid: r["Type"] for lid, r in template.resources.items()}
    return Resolver({lid: lid for lid in types} | (names or {}), types, {}, pseudo, attribute)


def policy_of(template: StackTemplate, resource_type: str, sid: str) -> tuple[str, dict]:
    """(logical id, policy document) of the resource of `resource_type` whose policy has a statement `sid`*."""
    for lid, resource in template.of_type(resource_type).items():
        document = next(v for k, v in resource["Properties"].items() if k.endswith("Policy") or k == "PolicyDocument")
        if any(str(s.get("Sid", "")).startswith(sid) for s in document["Statement"]):
            return lid, document
    raise LookupError(f"no {resource_type} of {template.display_name} has a statement {sid}*")


def grants(template: StackTemplate, stages: Stages, resource_type: str, sid: str) -> list[dict]:
    document = resolver(template, stages, stages.source_account).resolve(policy_of(template, resource_type, sid)[1])
    return [s for s in document["Statement"] if str(s.get("Sid", "")).startswith(sid)]


def listed(value: Any) -> list:
    return value if isinstance(value, list) else [value]


# --- step 1: the grants -----------------------------------------------------------------------------------------


def principal_problems(statements: list[dict], stages: Stages, *, by_role: bool = True) -> list[str]:
    """Each names the target's account as principal (never "*") and, by_role, its promotion role exactly."""
    problems = []
    for s in statements:
        principal = s["Principal"] if s["Principal"] == "*" else listed(s["Principal"].get("AWS"))
        problems += [] if principal == [stages.root] else [f"{s['Sid']}: principal {principal}"]
        named = [listed(s.get("Condition", {}).get(op, {}).get("aws:PrincipalArn")) for op in ("ArnEquals", "ArnLike")]
        problems += [f"{s['Sid']}: aws:PrincipalArn {named}"] if by_role and [stages.role_arn] not in named else []
    return problems


def check_bucket_grant(storage: StackTemplate, stages: Stages) -> Check:
    found = grants(storage, stages, "AWS::S3::BucketPolicy", "PromotionReads")
    problems = principal_problems(found, stages)
    problems += [f"{s['Sid']}: {a}" for s in found for a in listed(s["Action"]) if a != "s3:GetObject"]
    resources = [r for s in found for r in listed(s["Resource"])]
    problems += [
        r
        for r in resources
        if not re.fullmatch(rf"arn:[\w-]+:s3:::{models_bucket(storage)}/(registered|promoted)/\*", r)
    ]
    return summarize("bucket grant", problems, f"{len(found)} PromotionReads: s3:GetObject of the models bucket's "
                     f"registered/* and promoted/* to {stages.root} as aws:PrincipalArn {stages.role_arn}")  # fmt: skip


def check_key_grant(storage: StackTemplate, stages: Stages) -> Check:
    found = grants(storage, stages, "AWS::KMS::Key", "PromotionDecrypts")
    via = f"s3.{stages.region}.{stages.url_suffix}"
    problems = principal_problems(found, stages)
    problems += [f"{s['Sid']}: {s['Action']}" for s in found if listed(s["Action"]) != ["kms:Decrypt"]]
    problems += [
        f"{s['Sid']}: {s['Condition']}" for s in found if s["Condition"].get("StringEquals") != {"kms:ViaService": via}
    ]
    return summarize("key grant", problems, f"{len(found)} PromotionDecrypts: only kms:Decrypt, only through {via}")


def check_group_grant(training: StackTemplate, stages: Stages) -> Check:
    found = grants(training, stages, "AWS::SageMaker::ModelPackageGroup", "")
    problems = principal_problems(found, stages, by_role=False)
    problems += [a for s in found for a in listed(s["Action"]) if not re.fullmatch(r"sagemaker:(Describe|List)\w+", a)]
    return summarize("group grant", problems, f"{stages.source_group}'s policy: {stages.root} may describe and list")


def check_serving_names_no_source(serving: StackTemplate, stages: Stages) -> Check:
    """Only the promotion role's policy and the lookup's input (SourceGroupArn) name the source's account."""
    role = stages.role_arn.rsplit("/", 1)[-1]
    roles = [
        {"Ref": lid} for lid, r in serving.of_type("AWS::IAM::Role").items() if r["Properties"].get("RoleName") == role
    ]
    naming = [(lid, r) for lid, r in serving.resources.items() if stages.source_account in json.dumps(r)]
    problems = [
        f"{lid} ({r['Type']}) names {stages.source_account}"
        for lid, r in naming
        if r["Type"] != "Custom::PromotedWeights" and not any(x in roles for x in r["Properties"].get("Roles", []))
    ]
    only = ", ".join(lid for lid, _ in naming)
    detail = f"no model or endpoint of {serving.display_name} names {stages.source_account}; only {only}"
    return summarize("serving names no source", problems, f"{detail} (the promotion role's policy, the lookup)")
