"""Smoke-test a stage after it deploys: its endpoint answers a real prompt in the agreed shape, streams the same
greedy answer token by token (InvokeEndpointWithResponseStream), answers or refuses the OpenAI chat schema as its
engine does, refuses a bad request with a 4xx, and its fine-tuning pipeline exists.

    python scripts/smoke_test.py --endpoint-name llm-platform-staging --region us-east-1 --engine deepspeed \
        [--pipeline-name llm-platform-staging-finetune] [--role-arn arn:aws:iam::...:role/...-smoke-test]
    python scripts/smoke_test.py --url http://127.0.0.1:8080          # the local endpoint (make local-serve)
    python scripts/smoke_test.py --endpoint-name ... --engine vllm --chat   # the model has a chat template
    python scripts/smoke_test.py --endpoint-name llm-platform-dev --engine vllm \
        --component llm-platform-dev-base --component llm-platform-dev-sql  # inference components, adapters too
    python scripts/smoke_test.py --endpoint-name llm-platform-prod ... --expect-digest sha256:3f2a...  # promoted

An endpoint that hosts inference components answers only requests that name one (InvokeEndpoint's
InferenceComponentName): with --component, the request checks run once for each component named, by its name.

With --expect-digest (a stage whose weights are promoted from another stage: the serving stack's ServedWeightsDigest
output), it also follows the endpoint's control plane to the weights prefixes it serves (each model's
ModelDataSource, or each inference component's model and adapter archive) and passes only if one of them holds a
weights record (promotion/weights_record.py) of that digest, and exactly the recorded files, sizes and checksums.

The promotion pipeline runs it after the stages named in `pipeline.smoke_test_after`, assuming the stage's
smoke-test role, naming every component and adapter of the stage. It prints one line per check and exits 1 if any
failed. It needs only boto3 (and nothing at all for a local endpoint), and this repository's promotion/ package
(standard library only).
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# `python3 scripts/smoke_test.py` (as the pipeline's CodeBuild step runs it, from the repository's root) puts scripts/
# on sys.path, not the root: the served-weights check reads weights records with the same code that writes them,
# promotion/weights_record.py, so the root goes on the path here rather than a copy of that code in this script.
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from promotion.weights_record import (  # noqa: E402
    RecordError,
    files_digest,
    parse_prefix,
    read_record,
    stray_files,
    verify_prefix,
)

PROMPT = "The capital of France is"
MAX_NEW_TOKENS = 16
ENGINES = ("deepspeed", "vllm")
# Greedy (do_sample false; vLLM's LMI handler turns it into temperature 0), so that the streamed answer must be the
# same text as the non-streamed one.
GREEDY = {"max_new_tokens": MAX_NEW_TOKENS, "do_sample": False}
# LMI's request schema, which both engines serve (DeepSpeed: our handler; vLLM: LMI's own): a string prompt is
# answered with one object, and `details` carries the token counts.
GOOD_REQUEST = {"inputs": PROMPT, "parameters": {**GREEDY, "details": True}}
# The same prompt streamed: JSON lines, one per token, the last one with the whole generated_text.
STREAM_REQUEST = {"inputs": PROMPT, "parameters": GREEDY, "stream": True}
# The OpenAI chat schema: LMI's vLLM handler answers it (with the tokenizer's chat template); the DeepSpeed handler
# refuses it with a 4xx that says to send `inputs`.
CHAT_REQUEST = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_NEW_TOKENS, "temperature": 0}
# A request every endpoint of this platform must refuse: max_new_tokens is a positive integer.
BAD_REQUEST = {"inputs": PROMPT, "parameters": {"max_new_tokens": "many"}}


@dataclass
class Reply:
    status: int
    body: bytes


@dataclass
class StreamReply:
    """A streamed answer: its status and content type, the body parts as they came, and what broke the stream."""

    status: int
    content_type: str
    parts: list[bytes]
    error: str = ""


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

    def invoke_stream(self, payload: dict) -> StreamReply:
        request = urllib.request.Request(
            f"{self.url}/invocations", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                parts = list(iter(lambda: response.read1(65536), b""))
                return StreamReply(response.status, response.headers.get("Content-Type", ""), parts)
        except urllib.error.HTTPError as error:
            return StreamReply(error.code, error.headers.get("Content-Type", ""), [error.read()])
        except (OSError, http.client.HTTPException) as error:  # the server dropped the connection mid-stream
            return StreamReply(200, "", [], f"{type(error).__name__}: {error}")


class SageMakerEndpoint:
    """A deployed endpoint, through the SageMaker runtime API; with `component`, the requests go to that inference
    component of the endpoint (InferenceComponentName)."""

    def __init__(self, name: str, session: Any, component: str | None = None) -> None:
        self.name = name
        self.component = component
        self.sagemaker = session.client("sagemaker")
        self.runtime = session.client("sagemaker-runtime")
        self.s3 = session.client("s3")  # the served weights' records (--expect-digest)

    def describe(self) -> str:
        return self.sagemaker.describe_endpoint(EndpointName=self.name)["EndpointStatus"]

    def of_component(self, component: str) -> SageMakerEndpoint:
        """The same endpoint and clients, its requests naming `component`."""
        named = copy.copy(self)
        named.component = component
        return named

    def _target(self) -> dict:
        """Which model answers: the endpoint's own, or the named inference component."""
        return {"EndpointName": self.name} | ({"InferenceComponentName": self.component} if self.component else {})

    def invoke(self, payload: dict) -> Reply:
        try:
            response = self.runtime.invoke_endpoint(
                **self._target(), ContentType="application/json", Body=json.dumps(payload).encode()
            )
            return Reply(200, response["Body"].read())
        except self.runtime.exceptions.ModelError as error:  # the container answered with a non-2xx status
            return Reply(
                int(error.response.get("OriginalStatusCode", 500)), error.response.get("OriginalMessage", "").encode()
            )

    def invoke_stream(self, payload: dict) -> StreamReply:
        """InvokeEndpointWithResponseStream: the body comes as PayloadPart events, cut wherever SageMaker cuts it
        (a part may end inside a JSON line, or inside a UTF-8 character); a ModelStreamError or
        InternalStreamFailure event ends the stream (botocore raises it as an EventStreamError)."""
        from botocore.exceptions import EventStreamError

        try:
            response = self.runtime.invoke_endpoint_with_response_stream(
                **self._target(), ContentType="application/json", Body=json.dumps(payload).encode()
            )
        except self.runtime.exceptions.ModelError as error:
            return StreamReply(
                int(error.response.get("OriginalStatusCode", 500)),
                "",
                [error.response.get("OriginalMessage", "").encode()],
            )
        reply = StreamReply(200, response.get("ContentType", ""), [])
        try:
            for event in response["Body"]:
                if "PayloadPart" in event:
                    reply.parts.append(event["PayloadPart"].get("Bytes", b""))
        except EventStreamError as error:
            reply.error = str(error)
        return reply


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


def stream_lines(reply: StreamReply) -> tuple[list[dict], str]:
    """The JSON objects of a JSON-lines stream, and what is wrong with it ('' when nothing). The parts are joined
    before decoding: SageMaker may cut a line, or a UTF-8 character, between two parts."""
    if reply.status != 200:
        return [], f"answered {reply.status}: {b''.join(reply.parts)[:300]!r}"
    if reply.error:
        return [], f"the stream broke off: {reply.error[:300]}"
    try:
        text = b"".join(reply.parts).decode("utf-8")
    except UnicodeDecodeError as error:
        return [], f"the stream is not UTF-8 text ({error})"
    if not text.endswith("\n"):
        # DJL ends a stream whose generator failed with the error as plain text; a cut connection ends anywhere.
        return [], f"the stream does not end with a complete line: {text[-300:]!r}"
    lines = []
    for line in text.split("\n"):
        if not line.strip():
            continue  # LMI's vLLM handler writes an empty line for the usage chunk and for the end
        try:
            item = json.loads(line)
        except ValueError:
            return lines, f"a streamed line is not JSON: {line[:300]!r}"
        if not isinstance(item, dict):
            return lines, f"a streamed line is not a JSON object: {line[:300]!r}"
        if "error" in item:
            return lines, f"the stream ended with an error: {line[:300]}"
        lines.append(item)
    if not lines:
        return lines, "the stream has no lines"
    return lines, ""


def check_stream(reply: StreamReply, expected: str) -> str:
    """Problems with the streamed answer to STREAM_REQUEST, or '': JSON lines whose token texts add up to the last
    line's generated_text and to `expected`, the non-streamed greedy answer."""
    if reply.status == 200 and not reply.content_type.startswith("application/jsonlines"):
        return f"content type {reply.content_type!r}; expected application/jsonlines"
    lines, problem = stream_lines(reply)
    if problem:
        return problem
    texts = [line.get("token", {}).get("text") if isinstance(line.get("token"), dict) else None for line in lines]
    if not all(isinstance(text, str) for text in texts):
        return f"a streamed line has no token text: {str(lines[texts.index(None)])[:300]}"
    streamed = "".join(texts)
    final = lines[-1].get("generated_text")
    if not isinstance(final, str):
        return f"the last streamed line has no generated_text: {str(lines[-1])[:300]}"
    if final != streamed:
        return f"the streamed tokens {streamed[:200]!r} do not add up to the last line's generated_text {final[:200]!r}"
    if streamed != expected:
        return f"the streamed text {streamed[:200]!r} is not the non-streamed greedy answer {expected[:200]!r}"
    return ""


def chat_content(reply: Reply) -> tuple[str, str]:
    """(the assistant's message, what is wrong) for a non-streamed chat completion."""
    if reply.status != 200:
        return "", f"answered {reply.status}: {reply.body[:300]!r}"
    try:
        completion = json.loads(reply.body)
        content = completion["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "", f"not a chat completion (choices[0].message.content): {reply.body[:300]!r}"
    if completion.get("object") != "chat.completion" or not isinstance(content, str) or not content:
        return "", f"not a chat completion with text: {reply.body[:300]!r}"
    return content, ""


def check_chat_stream(reply: StreamReply, expected: str) -> str:
    """Problems with a streamed chat completion: chat.completion.chunk lines whose delta contents add up to
    `expected`, the non-streamed greedy message."""
    lines, problem = stream_lines(reply)
    if problem:
        return problem
    if any(line.get("object") != "chat.completion.chunk" for line in lines):
        return f"a streamed line is not a chat.completion.chunk: {[line.get('object') for line in lines][:8]}"
    streamed = "".join(
        (choice.get("delta") or {}).get("content") or "" for line in lines for choice in line.get("choices") or []
    )
    if streamed != expected:
        return f"the streamed message {streamed[:200]!r} is not the non-streamed greedy one {expected[:200]!r}"
    return ""


def check_chat_refused(reply: Reply) -> str:
    """The DeepSpeed handler refuses the chat schema with a 4xx that tells the client to send `inputs`."""
    if not 400 <= reply.status < 500:
        return f"answered {reply.status}: {reply.body[:200]!r}"
    return "" if b"inputs" in reply.body else f"the refusal does not say to send inputs: {reply.body[:300]!r}"


def served_prefixes(sagemaker: Any, endpoint_name: str) -> list[str]:
    """The weights prefixes (s3://bucket/prefix/) the endpoint serves, in the order its control plane names them:
    each production variant's model's, or, on an endpoint of inference components (whose variants name no model),
    each component's model's and each adapter's (the folder holding its archive)."""
    config_name = sagemaker.describe_endpoint(EndpointName=endpoint_name)["EndpointConfigName"]
    variants = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)["ProductionVariants"]
    models = [variant["ModelName"] for variant in variants if variant.get("ModelName")]
    archives: list[str] = []
    if not models:
        pages = sagemaker.get_paginator("list_inference_components").paginate(EndpointNameEquals=endpoint_name)
        for name in [c["InferenceComponentName"] for page in pages for c in page["InferenceComponents"]]:
            specification = sagemaker.describe_inference_component(InferenceComponentName=name)["Specification"]
            if specification.get("ModelName"):
                models.append(specification["ModelName"])
            if url := specification.get("Container", {}).get("ArtifactUrl"):
                archives.append(url)
    prefixes = [_model_prefix(sagemaker.describe_model(ModelName=model)) for model in models]
    prefixes += [_folder(url) for url in archives]
    return list(dict.fromkeys(prefix for prefix in prefixes if prefix))


def _model_prefix(model: dict) -> str:
    """A model's weights prefix: its container's uncompressed ModelDataSource, or the folder of its archive."""
    container = model.get("PrimaryContainer") or (model.get("Containers") or [{}])[0]
    if uri := container.get("ModelDataSource", {}).get("S3DataSource", {}).get("S3Uri"):
        return uri if uri.endswith("/") else uri + "/"
    return _folder(container["ModelDataUrl"]) if container.get("ModelDataUrl") else ""


def _folder(archive_url: str) -> str:
    """s3://bucket/adapters/sql/adapter.tar.gz -> s3://bucket/adapters/sql/: an archive's weights prefix."""
    return archive_url.rpartition("/")[0] + "/"


def check_served_weights(sagemaker: Any, s3: Any, endpoint_name: str, expected: str) -> str:
    """Problems with what the endpoint serves, or '' when one of its weights prefixes holds a record of the
    `expected` digest and exactly the recorded files (sizes, ChecksumSHA256, nothing else beside them)."""
    from botocore.exceptions import ClientError

    try:
        prefixes = served_prefixes(sagemaker, endpoint_name)
    except ClientError as error:  # the smoke-test role may not describe what it must (IAM)
        return f"could not follow the endpoint to its weights: {error}"
    if not prefixes:
        return "the endpoint names no weights prefix (a model's ModelDataSource, or an adapter's ArtifactUrl)"
    found = []
    for uri in prefixes:
        try:
            digest, problems = _served_prefix(s3, uri)
        except RecordError as error:
            found.append(f"no record at {uri}: {error}")
            continue
        except ClientError as error:  # the role may not read the record or head the files (IAM, KMS)
            found.append(f"could not read {uri}: {error}")
            continue
        if digest == expected and not problems:
            return ""
        found.append(f"{uri} holds {digest}" + (f" but {'; '.join(problems)}" if problems else ""))
    return f"expected {expected}; " + "; ".join(found)


def _served_prefix(s3: Any, uri: str) -> tuple[str, list[str]]:
    """The digest of the prefix's record, and every way the prefix differs from it: a recorded file missing, of
    another size or SHA-256, a weights file the record does not list, a promoted record's digest that its files do
    not make."""
    bucket, prefix = parse_prefix(uri)
    record = read_record(s3, bucket, prefix)
    digest = files_digest(record["files"])
    problems = verify_prefix(s3, bucket, prefix, record)
    problems += [
        f"s3://{bucket}/{prefix}{relative} is not in the record" for relative in stray_files(s3, bucket, prefix, record)
    ]
    if record.get("digest") not in (None, digest):
        problems.insert(0, f"the record says {record['digest']}, its files make {digest}")
    return digest, problems


Report = Callable[[str, str], None]


def run_checks(
    endpoint: HttpEndpoint | SageMakerEndpoint,
    pipeline: tuple[Any, str] | None = None,
    *,
    engine: str = "deepspeed",
    chat: bool = False,
    components: Sequence[str] = (),
    expect_digest: str | None = None,
) -> list[str]:
    """Run every check; return the failures (each line is also printed). `engine` says which response formats to
    expect; `chat` (vLLM) also checks the chat schema, for models with a chat template; `components` (a SageMaker
    endpoint only): the inference components to check, each by name, in place of the endpoint's own model;
    `expect_digest` (a SageMaker endpoint only): the weights digest the endpoint must serve (a promoted version's)."""
    failures: list[str] = []

    def report(name: str, problem: str) -> None:
        print(f"{'FAIL' if problem else 'ok  '} {name}{': ' + problem if problem else ''}", flush=True)
        if problem:
            failures.append(f"{name}: {problem}")

    status = endpoint.describe()
    report("endpoint is in service", "" if status == "InService" else f"status {status}")
    if components and not isinstance(endpoint, SageMakerEndpoint):
        raise ValueError(f"components {list(components)}: only a SageMaker endpoint hosts inference components")
    if expect_digest and not isinstance(endpoint, SageMakerEndpoint):
        raise ValueError(f"expect_digest {expect_digest}: only a SageMaker endpoint's served weights can be followed")
    for target, label in _targets(endpoint, components):
        check_requests(target, lambda name, problem, label=label: report(label + name, problem), engine, chat)
    if expect_digest and isinstance(endpoint, SageMakerEndpoint):
        report(
            "serves the promoted version",
            check_served_weights(endpoint.sagemaker, endpoint.s3, endpoint.name, expect_digest),
        )
    if pipeline:
        client, name = pipeline
        try:
            client.describe_pipeline(PipelineName=name)
            report(f"training pipeline {name} exists", "")
        except client.exceptions.ResourceNotFound:
            report(f"training pipeline {name} exists", "not found")
    return failures


def _targets(endpoint: HttpEndpoint | SageMakerEndpoint, components: Sequence[str]) -> list[tuple[Any, str]]:
    """What the request checks run against, and the prefix of their names: the endpoint itself, or each component
    (an endpoint of components refuses a request that names none)."""
    if not components:
        return [(endpoint, "")]
    return [(endpoint.of_component(name), f"{name}: ") for name in components]


def check_requests(endpoint: HttpEndpoint | SageMakerEndpoint, report: Report, engine: str, chat: bool) -> None:
    """The checks of what one model answers: a prompt, the same streamed, the chat schema, a malformed request."""
    reply = endpoint.invoke(GOOD_REQUEST)
    problem = check_generation(reply)
    report("a prompt gets generated text with token counts", problem)
    expected = "" if problem else json.loads(reply.body)["generated_text"]
    report(
        "the same prompt streamed gives the same text, token by token",
        check_stream(endpoint.invoke_stream(STREAM_REQUEST), expected) if not problem else "no answer to compare with",
    )
    if engine == "deepspeed":
        report(
            "the chat schema is refused with a 4xx that says to send inputs",
            check_chat_refused(endpoint.invoke(CHAT_REQUEST)),
        )
    elif chat:
        content, problem = chat_content(endpoint.invoke(CHAT_REQUEST))
        report("a chat request gets a chat completion", problem)
        report(
            "the same chat request streamed gives the same message",
            check_chat_stream(endpoint.invoke_stream({**CHAT_REQUEST, "stream": True}), content)
            if not problem
            else "no answer to compare with",
        )
    bad = endpoint.invoke(BAD_REQUEST)
    report(
        "a malformed request is refused with a 4xx",
        "" if 400 <= bad.status < 500 else f"answered {bad.status}: {bad.body[:200]!r}",
    )


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
    parser.add_argument(
        "--engine", choices=ENGINES, default="deepspeed", help="the stage's serving engine (default: deepspeed)"
    )
    parser.add_argument(
        "--chat", action="store_true", help="vllm: also check the chat schema (the model has a chat template)"
    )
    parser.add_argument(
        "--component",
        action="append",
        default=[],
        help="an inference component of the endpoint to check by name (InferenceComponentName); repeat for each "
        "component and adapter",
    )
    parser.add_argument(
        "--expect-digest",
        metavar="sha256:HEX",
        help="also check that the endpoint serves weights of this digest (a promoted stage's ServedWeightsDigest "
        "output): a prefix it serves holds a record of it, and exactly the recorded files",
    )
    args = parser.parse_args(argv)
    if args.chat and args.engine != "vllm":
        parser.error("--chat checks LMI's vLLM handler; the deepspeed engine's refusal of chat is always checked")
    if args.component and args.url:
        parser.error(
            f"--component {args.component[0]}: a local endpoint serves one model; name components only with "
            "--endpoint-name"
        )
    if args.expect_digest and args.url:
        parser.error("--expect-digest follows a SageMaker endpoint to its weights; use it with --endpoint-name")
    if args.expect_digest and not args.expect_digest.startswith("sha256:"):
        parser.error(f"--expect-digest {args.expect_digest}: expected sha256:<hex>, as ServedWeightsDigest gives it")

    if args.url:
        failures = run_checks(HttpEndpoint(args.url), engine=args.engine, chat=args.chat)
    else:
        session = aws_session(args.region, args.role_arn)
        endpoint = SageMakerEndpoint(args.endpoint_name, session)
        pipeline = (endpoint.sagemaker, args.pipeline_name) if args.pipeline_name else None
        failures = run_checks(
            endpoint,
            pipeline,
            engine=args.engine,
            chat=args.chat,
            components=args.component,
            expect_digest=args.expect_digest,
        )
    if failures:
        print(f"smoke test failed: {len(failures)} check(s)", file=sys.stderr)
        return 1
    print("smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
