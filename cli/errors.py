"""What can go wrong, as one line a person can act on, and the exit status a script can branch on."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator

from botocore import exceptions as botocore_errors


class Exit(enum.IntEnum):
    """The exit statuses of every command (`llmp --help` shows this table, docs/operations.md too)."""

    OK = 0  # done; for a followed run: it succeeded
    FAILED = 1  # the thing run failed: a pipeline run failed or stopped, the endpoint answered with an error
    USAGE = 2  # a wrong option or argument, or a config file that does not load
    AWS_STATE = 3  # AWS is not in the state the command needs: a stack not deployed, no such model package or run
    ACCESS = 4  # no or expired credentials, the credentials of another account than the stage's, access denied
    DETACHED = 130  # Ctrl-C while following a run: the run goes on (128 + SIGINT, as shells report it)


EXIT_TABLE = """\
exit status: 0 done (a followed run succeeded); 1 the thing run failed (a pipeline run failed or stopped, the endpoint
answered with an error); 2 usage or config error; 3 AWS is not in the state needed (stack not deployed, no such
package or run, endpoint not in service); 4 credentials: none, expired, another account than the stage's, or access
denied; 130 Ctrl-C while following a run (the run goes on)."""


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
}
_DENIED_CODES = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError"}
SIGN_IN = "sign in again (aws sso login, or new keys in AWS_PROFILE's profile)"


@contextlib.contextmanager
def aws_errors() -> Iterator[None]:
    """Turn what botocore raises into a CliError: credentials and access are exit 4, anything else AWS refused 1."""
    try:
        yield
    except (botocore_errors.NoCredentialsError, botocore_errors.PartialCredentialsError):
        raise CliError(
            "no AWS credentials found: run `aws configure sso` (or `aws sso login`), or set AWS_PROFILE to a "
            "configured profile",
            Exit.ACCESS,
        ) from None
    except botocore_errors.ProfileNotFound as error:
        raise CliError(f"{error}: set AWS_PROFILE to a profile of `aws configure list-profiles`", Exit.ACCESS) from None
    except (botocore_errors.TokenRetrievalError, botocore_errors.SSOTokenLoadError, botocore_errors.SSOError):
        raise CliError(f"your AWS SSO session has expired or never started: {SIGN_IN}", Exit.ACCESS) from None
    except botocore_errors.EndpointConnectionError as error:
        raise CliError(f"cannot reach AWS ({error.kwargs.get('endpoint_url')}): check the network") from None
    except botocore_errors.ClientError as error:
        raise from_client_error(error) from None


def from_client_error(error: botocore_errors.ClientError) -> CliError:
    code = error.response.get("Error", {}).get("Code", "")
    message = error.response.get("Error", {}).get("Message", "")
    operation = error.operation_name
    if code in _CREDENTIAL_CODES:
        return CliError(f"{_CREDENTIAL_CODES[code]} ({operation}: {code}): {SIGN_IN}", Exit.ACCESS)
    if code in _DENIED_CODES:
        return CliError(
            f"access denied to {operation}: {message} Ask for the permission, or use credentials that have it",
            Exit.ACCESS,
        )
    return CliError(f"AWS refused {operation}: {code}: {message}", Exit.FAILED)
