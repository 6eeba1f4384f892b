"""What can go wrong, as one line a person can act on, and the exit status a script can branch on.

`Exit` is the one table of exit statuses: `llmp --help` prints EXIT_TABLE, and docs/operations.md's table is
generated from it (cli/reference/exit_table.py). `translate` turns whatever botocore raises into a CliError.
"""

from __future__ import annotations

import contextlib
import enum
import html
import os
import re
from collections.abc import Iterator

from botocore import exceptions as botocore_errors
from botocore.parsers import ResponseParserError

# Everything botocore raises: its own errors, AWS's answers, and an answer it could not parse (an HTML page).
BOTOCORE_ERRORS = (botocore_errors.BotoCoreError, botocore_errors.ClientError, ResponseParserError)


class Exit(enum.IntEnum):
    """The exit statuses of every command; each member's meaning is in MEANINGS (`llmp --help`, the docs)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    AWS_STATE = 3
    ACCESS = 4
    UNAVAILABLE = 5
    DETACHED = 130


# What each status means: the short form for `llmp --help`, the long one for docs/operations.md.
MEANINGS: dict[Exit, tuple[str, str]] = {
    Exit.OK: ("done (a followed run succeeded)", "done; for a followed run: it succeeded"),
    Exit.FAILED: (
        "the thing run failed (a pipeline run, the endpoint's answer, a call AWS refused)",
        "the thing run failed: a pipeline run failed, stopped or completed with failures; the endpoint answered with "
        "an error; AWS refused a call for another reason",
    ),
    Exit.USAGE: (
        "usage or config error",
        "usage or config: a wrong option or argument, a config file that does not load, no such stage, a parameter "
        "the pipeline does not take, a value AWS's API does not accept, a cloud assembly synthesized from another "
        "config",
    ),
    Exit.AWS_STATE: (
        "AWS is not in the state needed (stack not deployed, no such package or run, endpoint not in service)",
        "AWS is not in the state needed: a stack not deployed (or failed, or deployed from an older version without "
        "an output), no such model version or run (AWS answered not found), the endpoint not in service",
    ),
    Exit.ACCESS: (
        "credentials: none, expired, another account than the stage's, or access denied",
        "credentials: none, expired, for another account than the stage's, an unknown profile, or access denied",
    ),
    Exit.UNAVAILABLE: (
        "AWS could not be reached or kept failing (network, TLS, timeout, throttling, AWS's 5xx): try again",
        "AWS could not be reached or kept failing after botocore's retries: no network, a TLS or proxy problem, a "
        "timeout, throttling, an HTTP 5xx or an HTML page instead of AWS's answer; running the command again later "
        "may succeed",
    ),
    Exit.DETACHED: (
        "Ctrl-C while following a run (the run goes on)",
        "Ctrl-C while following a run: the run goes on (`llmp follow` re-attaches)",
    ),
}

EXIT_TABLE = "exit status: " + "; ".join(f"{int(code)} {short}" for code, (short, _) in MEANINGS.items()) + "."


def exit_table_markdown() -> str:
    """docs/operations.md's table of exit statuses."""
    rows = [f"| {int(code)} | {long} |" for code, (_, long) in MEANINGS.items()]
    return "\n".join(["| exit status | meaning |", "|---|---|", *rows])


class CliError(Exception):
    """A failure whose message already says what was wrong and what to do."""

    def __init__(self, message: str, code: Exit = Exit.FAILED) -> None:
        super().__init__(message)
        self.code = code


# Error codes AWS answers when the credentials themselves are the problem (STS, IAM and the services' own).
_CREDENTIAL_CODES = {
    "ExpiredToken": "your AWS session has expired",
    "ExpiredTokenException": "your AWS session has expired",
    "RequestExpired": "your AWS session has expired",
    "InvalidClientTokenId": "AWS does not know these credentials",
    "UnrecognizedClientException": "AWS does not know these credentials",
    "SignatureDoesNotMatch": "AWS does not accept these credentials (wrong secret key)",
    "InvalidSignatureException": "AWS does not accept these credentials (wrong secret key)",
}
_DENIED_CODES = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError", "Forbidden"}
# botocore's own list of throttling codes (botocore/retries/standard.py, StandardRetryConditions) and a few more.
_THROTTLING_CODES = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
}
_SERVER_CODES = {
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "InternalServerException",
    "InternalFailureException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "ServiceFailure",
}
_NOT_FOUND_CODES = {"ResourceNotFound", "ResourceNotFoundException", "NotFound", "NoSuchKey", "NoSuchBucket", "404"}
_VALIDATION_CODES = {
    "ValidationError",
    "ValidationException",
    "InvalidParameterValue",
    "InvalidParameterValueException",
    "InvalidParameterException",
    "InvalidParameterCombination",
    "MissingParameter",
    "InvalidInput",
    "InvalidRequest",
    "InvalidArgument",
    "SerializationException",
}
# SageMaker answers ValidationException for a name that does not exist ("... does not exist", "Could not find ...").
_NOT_FOUND_MESSAGE = re.compile(r"does not exist|could not find|not found|cannot be found", re.IGNORECASE)
SIGN_IN = "sign in again (aws sso login, or new keys in AWS_PROFILE's profile)"
TRY_AGAIN = "run the command again in a minute"
MESSAGE_CHARACTERS = 300


def endpoint_overrides() -> str:
    """` (AWS_ENDPOINT_URL=... is set: is that server running?)` when the environment sends calls elsewhere."""
    found = sorted(
        (name, value)
        for name, value in os.environ.items()
        if (name == "AWS_ENDPOINT_URL" or name.startswith("AWS_ENDPOINT_URL_")) and value
    )
    if not found:
        return ""
    names = ", ".join(f"{name}={value}" for name, value in found)
    return f" ({names} is set: is that server running and right? unset it to reach AWS itself)"


def shorten(text: str) -> str:
    """AWS's message as part of one line: no HTML page, no newlines, cut short."""
    if re.search(r"<(!doctype|html|head|body)\b", text, re.IGNORECASE):
        title = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        text = f"an HTML page{f' titled {html.unescape(title.group(1)).strip()!r}' if title else ''}"
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARACTERS else text[: MESSAGE_CHARACTERS - 3] + "..."


def from_client_error(error: botocore_errors.ClientError) -> CliError:
    """An error AWS answered, by its family: credentials and access 4, not found 3, invalid 2, throttling and
    AWS's own failures (HTTP 5xx, an HTML page) 5, anything else 1."""
    response = error.response or {}
    code = str(response.get("Error", {}).get("Code", ""))
    raw = str(response.get("Error", {}).get("Message", "") or "")
    message = shorten(raw)
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    attempts = int(response.get("ResponseMetadata", {}).get("RetryAttempts") or 0)
    retried = f" after {attempts} retries" if attempts else ""
    operation = error.operation_name
    html_page = message.startswith("an HTML page")
    if code in _CREDENTIAL_CODES:
        return CliError(f"{_CREDENTIAL_CODES[code]} ({operation}: {code}): {SIGN_IN}", Exit.ACCESS)
    if code in _DENIED_CODES or (status == 403 and not html_page):
        return CliError(
            f"access denied to {operation}: {message or code} Ask for the permission, or use credentials that have it",
            Exit.ACCESS,
        )
    if code in _THROTTLING_CODES or status == 429:
        return CliError(
            f"AWS is throttling {operation} ({code or status}: {message}){retried}: {TRY_AGAIN}, or ask for a higher "
            "quota (Service Quotas)",
            Exit.UNAVAILABLE,
        )
    if html_page or status >= 500 or code in _SERVER_CODES or (code.isdigit() and int(code) >= 500):
        what = f"HTTP {status or code}" + (f" ({code})" if code and not code.isdigit() else "")
        if html_page:
            return CliError(
                f"{operation} got {message} ({what}) instead of AWS's answer{retried}: a proxy or a wrong endpoint "
                f"is in the way{endpoint_overrides()}; check HTTPS_PROXY, or {TRY_AGAIN}",
                Exit.UNAVAILABLE,
            )
        return CliError(
            f"AWS failed on its side answering {operation} ({what}: {message or 'no message'}){retried}: "
            f"{TRY_AGAIN}; if it persists, see https://health.aws.amazon.com/health/status{endpoint_overrides()}",
            Exit.UNAVAILABLE,
        )
    if code in _NOT_FOUND_CODES or code.endswith(("NotFound", "NotFoundException")) or status == 404:
        return CliError(
            f"AWS has no such resource ({operation}: {message or code}): check the name or ARN; `llmp status` lists "
            "what the stage has",
            Exit.AWS_STATE,
        )
    if code in _VALIDATION_CODES:
        if _NOT_FOUND_MESSAGE.search(raw):
            return CliError(
                f"AWS has no such resource ({operation}: {message}): check the name or ARN; `llmp status` lists "
                "what the stage has",
                Exit.AWS_STATE,
            )
        return CliError(
            f"AWS refused a value of {operation} ({code}: {message}): check the command's arguments", Exit.USAGE
        )
    return CliError(f"AWS refused {operation}: {code}: {message}", Exit.FAILED)


def translate(error: Exception) -> CliError:
    """Any error botocore raises (BOTOCORE_ERRORS), as one line with the fix and its exit status."""
    if isinstance(error, botocore_errors.ClientError):
        return from_client_error(error)
    if isinstance(error, ResponseParserError):
        return _unparsable_answer(error)
    return (
        _credentials_error(error)
        or _request_error(error)
        or _connection_error(error)
        or CliError(f"botocore: {shorten(str(error))}", Exit.FAILED)
    )


def _unparsable_answer(error: ResponseParserError) -> CliError:
    """Something other than AWS answered: botocore takes only a body starting `<html>` for an HTML error."""
    body = shorten(str(error).split("\n", 1)[-1].strip().removeprefix("b'").removeprefix('b"'))
    what = "an HTML page" if body.startswith("an HTML page") else f"something botocore cannot parse ({body})"
    return CliError(
        f"got {what if what != 'an HTML page' else body} instead of AWS's answer: a proxy or a wrong endpoint is "
        f"in the way{endpoint_overrides()}; check HTTPS_PROXY, or {TRY_AGAIN}",
        Exit.UNAVAILABLE,
    )


def _credentials_error(error: Exception) -> CliError | None:
    """No credentials, or ones that cannot be used: what to sign in with. None for any other error."""
    if isinstance(error, (botocore_errors.NoCredentialsError, botocore_errors.PartialCredentialsError)):
        detail = f" ({error})" if isinstance(error, botocore_errors.PartialCredentialsError) else ""
        return CliError(
            "no AWS credentials found: run `aws configure sso` (or `aws sso login`), or set AWS_PROFILE to a "
            f"configured profile{detail}",
            Exit.ACCESS,
        )
    if isinstance(error, botocore_errors.ProfileNotFound):
        return CliError(
            f"{error}: give --profile (or AWS_PROFILE) a profile of `aws configure list-profiles`", Exit.ACCESS
        )
    if isinstance(
        error, (botocore_errors.TokenRetrievalError, botocore_errors.SSOTokenLoadError, botocore_errors.SSOError)
    ):
        return CliError(f"your AWS SSO session has expired or never started: {SIGN_IN}", Exit.ACCESS)
    if isinstance(error, botocore_errors.CredentialRetrievalError):
        return CliError(f"{error}: fix that credential provider, or {SIGN_IN}", Exit.ACCESS)
    return None


def _request_error(error: Exception) -> CliError | None:
    """A request botocore refused to send (no region, a value the API does not take); None for any other error."""
    if isinstance(error, botocore_errors.NoRegionError):
        return CliError("no AWS region: give --region, or set the stage's region in the config", Exit.USAGE)
    if isinstance(error, botocore_errors.ParamValidationError):
        report = " ".join(str(error.kwargs.get("report", error)).split())
        return CliError(f"a value is not one AWS's API accepts: {report}: check the command's arguments", Exit.USAGE)
    return None


def _connection_error(error: Exception) -> CliError | None:
    """A request that did not reach AWS, or got no answer in time; None for any other error. ReadTimeoutError comes
    before HTTPClientError, which it extends."""
    overrides = endpoint_overrides()
    endpoint = getattr(error, "kwargs", {}).get("endpoint_url", "AWS")
    if isinstance(error, botocore_errors.SSLError):
        return CliError(
            f"the TLS connection to {endpoint} failed ({shorten(str(error.kwargs.get('error', error)))}){overrides}: "
            "behind a proxy that inspects TLS, set AWS_CA_BUNDLE to its certificate bundle",
            Exit.UNAVAILABLE,
        )
    if isinstance(error, botocore_errors.ConnectTimeoutError):
        return CliError(
            f"timed out connecting to {endpoint}{overrides}: check the network (and HTTPS_PROXY), or {TRY_AGAIN}",
            Exit.UNAVAILABLE,
        )
    if isinstance(error, botocore_errors.ReadTimeoutError):
        return CliError(
            f"{endpoint} did not answer in time{overrides}: {TRY_AGAIN} (an endpoint's first answer after a scale-out "
            "can take minutes)",
            Exit.UNAVAILABLE,
        )
    if isinstance(error, botocore_errors.EndpointConnectionError):
        return CliError(
            f"cannot reach {endpoint}{overrides}: check the network (and HTTPS_PROXY) and the stage's region, or "
            f"{TRY_AGAIN}",
            Exit.UNAVAILABLE,
        )
    if isinstance(error, botocore_errors.HTTPClientError):  # ConnectionClosedError, ProxyConnectionError, ...
        return CliError(
            f"the connection to {endpoint} failed ({shorten(str(error))}){overrides}: {TRY_AGAIN}", Exit.UNAVAILABLE
        )
    return None


@contextlib.contextmanager
def aws_errors() -> Iterator[None]:
    """Turn what botocore raises into a CliError (`translate`)."""
    try:
        yield
    except BOTOCORE_ERRORS as error:
        raise translate(error) from None
