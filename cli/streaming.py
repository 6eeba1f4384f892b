"""A streamed answer of InvokeEndpointWithResponseStream, decoded as it arrives.

The response body is an event stream of PayloadPart events whose bytes are pieces of what the container writes, cut
wherever SageMaker cuts them: a JSON line, even a UTF-8 character, may span two parts (SageMaker Runtime API
reference, PayloadPart: "the payload might be split"; the AWS streaming example buffers bytes until a newline).
The endpoints here write LMI's `jsonlines` stream (model_artifacts/deepspeed/lmi_streaming.py, LMI's vLLM handler):

    {"token": {"id": [464], "text": " Paris"}}
    {"token": {"id": [13], "text": "."}, "generated_text": " Paris.", "details": {...}}

and end a stream that failed after it started with an error line {"code": ..., "message": ..., "error": ...}. An
error of SageMaker's own in the middle (ModelStreamError, InternalStreamFailure) arrives as an event, which botocore
raises while the stream is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import EventStreamError

from cli.errors import CliError, Exit


@dataclass
class StreamedAnswer:
    """What the stream said, once it has ended."""

    text: str = ""
    tokens: int = 0
    final: dict[str, Any] = field(default_factory=dict)  # the last line: generated_text, details


def lines(events: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """Whole lines from PayloadPart events, however the bytes were cut."""
    buffer = b""
    try:
        for event in events:
            buffer += event.get("PayloadPart", {}).get("Bytes", b"")
            *complete, buffer = buffer.split(b"\n")
            yield from (line for line in complete if line.strip())
    except EventStreamError as error:
        # ModelStreamError (the container failed mid-stream) or InternalStreamFailure.
        raise CliError(f"the stream broke off: {error}", Exit.FAILED) from None
    if buffer.strip():
        yield buffer


def tokens(events: Iterable[dict[str, Any]], answer: StreamedAnswer) -> Iterator[str]:
    """Each token's text as it arrives; `answer` holds the whole text and the last line when the stream ends."""
    for raw in lines(events):
        try:
            line = json.loads(raw)
        except ValueError:
            raise CliError(f"the endpoint streamed a line that is not JSON: {raw[:200]!r}", Exit.FAILED) from None
        if not isinstance(line, dict):
            raise CliError(f"the endpoint streamed {str(line)[:200]}, not a JSON object", Exit.FAILED)
        if "error" in line or ("code" in line and "token" not in line):
            message = line.get("message") or line.get("error")
            raise CliError(f"the endpoint failed while answering ({line.get('code')}): {message}", Exit.FAILED)
        token = line.get("token")
        if not isinstance(token, dict) or not isinstance(token.get("text"), str):
            raise CliError(f"the endpoint streamed a line without token.text: {str(line)[:200]}", Exit.FAILED)
        answer.tokens += 1
        answer.text += token["text"]
        if "generated_text" in line or "details" in line:
            answer.final = {k: v for k, v in line.items() if k != "token"}
        yield token["text"]
