"""Smoke-test a stage after it deploys: its endpoint answers a real prompt in the agreed shape, refuses a bad request
with a 4xx, and its fine-tuning pipeline exists.

    python scripts/smoke_test.py --endpoint-name llm-platform-staging --region us-east-1 \
        [--pipeline-name llm-platform-staging-finetune] [--role-arn arn:aws:iam::...:role/...-smoke-test]
    python scripts/smoke_test.py --url http://127.0.0.1:8080          # the local endpoint (make local-serve)

The promotion pipeline runs it after the stages named in `pipeline.smoke_test_after`, assuming the stage's
smoke-test role. It prints one line per check and exits 1 if any failed. It needs only boto3 (and nothing at all
for a local endpoint).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

PROMPT = "The capital of France is"
MAX_NEW_TOKENS = 16
# LMI's request schema, which both engines serve (DeepSpeed: our handler; vLLM: LMI's own): a string prompt is
# answered with one object, and `details` carries the token counts.
GOOD_REQUEST = {"inputs": PROMPT, "parameters": {"max_new_tokens": MAX_NEW_TOKENS, "seed": 0, "details": True}}
# A request every endpoint of this platform must refuse: max_new_tokens is a positive integer.
BAD_REQUEST = {"inputs": PROMPT, "parameters": {"max_new_tokens": "many"}}


@dataclass
class Reply:
    status: int
    body: bytes


class HttpEndpoint:
    """SageMaker's container contract over plain HTTP: POST /invocations, GET /ping."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def describe(self) -> str:
        with urllib.request.urlopen(f"{self.url}/ping", timeout=30) as response:
            return "InService" if response.status == 200 else f"ping answered {response.status}"

    def invoke(self, payload: dict) -> Reply:
        request = urllib.request.Request(
            f"{self.url}/invocations", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                return Reply(response.status, response.read())
        except urllib.error.HTTPError as error:
            return Reply(error.code, error.read())


class SageMakerEndpoint:
    """A deployed endpoint, through the SageMaker runtime API."""

    def __init__(self, name: str, session: Any) -> None:
        self.name = name
        self.sagemaker = session.client("sagemaker")
        self.runtime = session.client("sagemaker-runtime")

    def describe(self) -> str:
        return self.sagemaker.describe_endpoint(EndpointName=self.name)["EndpointStatus"]

    def invoke(self, payload: dict) -> Reply:
        try:
            response = self.runtime.invoke_endpoint(
                EndpointName=self.name, ContentType="application/json", Body=json.dumps(payload).encode()
            )
            return Reply(200, response["Body"].read())
        except self.runtime.exceptions.ModelError as error:  # the container answered with a non-2xx status
            return Reply(
                int(error.response.get("OriginalStatusCode", 500)), error.response.get("OriginalMessage", "").encode()
            )


def check_generation(reply: Reply) -> str:
    """Problems with the answer to GOOD_REQUEST, or '' when it has the agreed shape."""
    if reply.status != 200:
        return f"answered {reply.status}: {reply.body[:300]!r}"
    try:
        item = json.loads(reply.body)
    except ValueError:
        return f"answer is not JSON: {reply.body[:300]!r}"
    if not isinstance(item, dict):
        return f"expected one object for a string prompt (LMI's shape), got {str(item)[:300]}"
    if "error" in item:  # how DJL answers a request it refused inside a dynamic batch: 200 and an error body
        return f"answered with an error: {str(item)[:300]}"
    if not isinstance(item.get("generated_text"), str):
        return f"generated_text is missing or not a string: {str(item)[:300]}"
    details = item.get("details")
    if not isinstance(details, dict):
        return f"details are missing although the request asked for them: {str(item)[:300]}"
    if not (isinstance(details.get("generated_tokens"), int) and 1 <= details["generated_tokens"] <= MAX_NEW_TOKENS):
        return f"details.generated_tokens should be 1..{MAX_NEW_TOKENS}: {details}"
    # Only the DeepSpeed engine reports prompt tokens; where it does, they must be real.
    if "prompt_tokens" in details and not (isinstance(details["prompt_tokens"], int) and details["prompt_tokens"] > 0):
        return f"details.prompt_tokens should be a positive integer: {details}"
    return ""


def run_checks(endpoint: HttpEndpoint | SageMakerEndpoint, pipeline: tuple[Any, str] | None = None) -> list[str]:
    """Run every check; return the failures (each line is also printed)."""
    failures: list[str] = []

    def report(name: str, problem: str) -> None:
        print(f"{'FAIL' if problem else 'ok  '} {name}{': ' + problem if problem else ''}", flush=True)
        if problem:
            failures.append(f"{name}: {problem}")

    status = endpoint.describe()
    report("endpoint is in service", "" if status == "InService" else f"status {status}")
    reply = endpoint.invoke(GOOD_REQUEST)
    report("a prompt gets generated text with token counts", check_generation(reply))
    bad = endpoint.invoke(BAD_REQUEST)
    report(
        "a malformed request is refused with a 4xx",
        "" if 400 <= bad.status < 500 else f"answered {bad.status}: {bad.body[:200]!r}",
    )
    if pipeline:
        client, name = pipeline
        try:
            client.describe_pipeline(PipelineName=name)
            report(f"training pipeline {name} exists", "")
        except client.exceptions.ResourceNotFound:
            report(f"training pipeline {name} exists", "not found")
    return failures


def aws_session(region: str, role_arn: str | None):
    import boto3

    session = boto3.Session(region_name=region)
    if not role_arn:
        return session
    credentials = session.client("sts").assume_role(RoleArn=role_arn, RoleSessionName="smoke-test")["Credentials"]
    return boto3.Session(
        region_name=region,
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--endpoint-name", help="a deployed SageMaker endpoint")
    target.add_argument("--url", help="a local endpoint, e.g. http://127.0.0.1:8080")
    parser.add_argument("--region", help="the endpoint's region (default: the AWS configuration's)")
    parser.add_argument("--pipeline-name", help="also check that this SageMaker pipeline exists")
    parser.add_argument("--role-arn", help="assume this role first (the stage's smoke-test role)")
    args = parser.parse_args(argv)

    if args.url:
        failures = run_checks(HttpEndpoint(args.url))
    else:
        session = aws_session(args.region, args.role_arn)
        endpoint = SageMakerEndpoint(args.endpoint_name, session)
        pipeline = (endpoint.sagemaker, args.pipeline_name) if args.pipeline_name else None
        failures = run_checks(endpoint, pipeline)
    if failures:
        print(f"smoke test failed: {len(failures)} check(s)", file=sys.stderr)
        return 1
    print("smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
