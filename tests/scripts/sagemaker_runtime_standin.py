"""SageMaker Runtime's HTTP answers, byte for byte, for a real boto3 client (no AWS call is made).

botocore's Stubber cannot return an event stream (it validates the response with the input validator, which takes
only a dict for InvokeEndpointWithResponseStream's Body: boto/botocore#1621, open), so this stands in one layer
lower: a `before-send` handler answers each request with the status, headers and body SageMaker sends, and botocore
parses them with its own code, event-stream framing and CRCs included.

- InvokeEndpoint: the container's body; a container's non-2xx answer is a 424 ModelError whose OriginalStatusCode
  and OriginalMessage carry the container's (API_runtime_InvokeEndpoint, Errors).
- An endpoint that hosts inference components answers only requests that name one (InvokeEndpoint's
  InferenceComponentName, sent as the X-Amzn-SageMaker-Inference-Component header): any other is a 400
  ValidationError from SageMaker itself, before any container sees it
  (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html, InferenceComponentName).
- InvokeEndpointWithResponseStream: an application/vnd.amazon.eventstream body of PayloadPart events whose Bytes
  are the container's body cut at arbitrary byte boundaries (a part can end inside a JSON line or a UTF-8
  character; https://aws.amazon.com/blogs/machine-learning/elevating-the-generative-ai-experience-introducing-
  streaming-support-in-amazon-sagemaker-hosting/), or ending with a ModelStreamError / InternalStreamFailure event
  (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_ResponseStream.html). The encoding is
  AWS's event stream format: prelude (total and headers length, CRC32), string headers, payload, message CRC32.
"""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Iterator

from botocore.awsrequest import AWSResponse

MODEL_ERROR_TYPE = "ModelError:http://internal.amazon.com/coral/com.amazon.sagemaker/"


class _Raw:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: object) -> Iterator[bytes]:
        for start in range(0, len(self.data), 1024):
            yield self.data[start : start + 1024]

    def read(self, *_: object) -> bytes:
        return self.data

    def close(self) -> None:
        pass


def _header(name: str, value: str) -> bytes:
    name_bytes, value_bytes = name.encode(), value.encode()
    return bytes([len(name_bytes)]) + name_bytes + b"\x07" + struct.pack(">H", len(value_bytes)) + value_bytes


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message))


def payload_part(data: bytes) -> bytes:
    return event_message(
        {":message-type": "event", ":event-type": "PayloadPart", ":content-type": "application/octet-stream"}, data
    )


def stream_error(exception: str, message: str, error_code: str | None = None) -> bytes:
    fields = {"Message": message} | ({"ErrorCode": error_code} if error_code else {})
    headers = {":message-type": "exception", ":exception-type": exception, ":content-type": "application/json"}
    return event_message(headers, json.dumps(fields).encode())


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)] or [b""]


COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"


def validation_error(message: str) -> AWSResponse:
    body = json.dumps({"__type": "ValidationError", "message": message}).encode()
    return AWSResponse(
        "https://x", 400, {"x-amzn-ErrorType": "ValidationError:http://internal.amazon.com/"}, _Raw(body)
    )


class SageMakerRuntime:
    """Queued answers for one sagemaker-runtime client, in call order per operation.

    components: the inference components the endpoint hosts (None: a classic endpoint). Each request must then name
    one of them, as SageMaker requires; `targets` records the component each request named ('' for none)."""

    def __init__(self, client, components: tuple[str, ...] | None = None) -> None:
        self.answers: dict[str, list[AWSResponse]] = {"InvokeEndpoint": [], "InvokeEndpointWithResponseStream": []}
        self.requests: list[tuple[str, dict]] = []
        self.targets: list[str] = []
        self.components = components
        for operation in self.answers:
            client.meta.events.register(f"before-send.sagemaker-runtime.{operation}", self._answer(operation))

    def _answer(self, operation: str):
        def answer(request, **_: object) -> AWSResponse:
            target = request.headers.get(COMPONENT_HEADER, b"")
            target = target.decode() if isinstance(target, bytes) else target
            refusal = self._refusal(target)
            if refusal is not None:
                return refusal
            self.requests.append((operation, json.loads(request.body)))
            self.targets.append(target)
            return self.answers[operation].pop(0)

        return answer

    def _refusal(self, target: str) -> AWSResponse | None:
        if self.components is None:
            return validation_error(f"endpoint hosts no inference component {target}") if target else None
        if not target:
            return validation_error("Inference Component Name header is required for endpoints that host components")
        if target not in self.components:
            return validation_error(f"Inference Component {target} not found")
        return None

    def invoke(self, body: bytes, content_type: str = "application/json") -> None:
        self.answers["InvokeEndpoint"].append(AWSResponse("https://x", 200, {"Content-Type": content_type}, _Raw(body)))

    def model_error(self, status: int, body: bytes, operation: str = "InvokeEndpoint") -> None:
        fields = {
            "ErrorCode": "CLIENT_ERROR_FROM_MODEL",
            "Message": f"Received client error ({status}) from primary with message {body.decode()!r}",
            "OriginalStatusCode": status,
            "OriginalMessage": body.decode(),
        }
        answer = AWSResponse(
            "https://x", 424, {"x-amzn-ErrorType": MODEL_ERROR_TYPE}, _Raw(json.dumps(fields).encode())
        )
        self.answers[operation].append(answer)

    def stream(self, parts: list[bytes], content_type: str = "application/jsonlines", end: bytes = b"") -> None:
        body = b"".join(payload_part(part) for part in parts) + end
        headers = {"Content-Type": "application/vnd.amazon.eventstream", "X-Amzn-SageMaker-Content-Type": content_type}
        self.answers["InvokeEndpointWithResponseStream"].append(AWSResponse("https://x", 200, headers, _Raw(body)))
