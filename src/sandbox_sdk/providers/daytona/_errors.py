"""Translate the Daytona SDK's exceptions into :mod:`sandbox_sdk.errors` types."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import httpx
import urllib3.exceptions
from daytona import (
    DaytonaAuthenticationError,
    DaytonaBadGatewayError,
    DaytonaConnectionError,
    DaytonaError,
    DaytonaForbiddenError,
    DaytonaInternalServerError,
    DaytonaNotFoundError,
    DaytonaRateLimitError,
    DaytonaServiceUnavailableError,
    DaytonaTimeoutError,
)
from daytona_api_client.exceptions import OpenApiException
from daytona_api_client_async.exceptions import OpenApiException as AsyncOpenApiException

from sandbox_sdk import errors

_UNAVAILABLE = (DaytonaConnectionError, DaytonaServiceUnavailableError, DaytonaBadGatewayError)
#: Transport failures, which the SDK does not always translate (urllib3's
#: ``MaxRetryError`` after refused connections becomes a bare ``DaytonaError``).
_TRANSPORT = (
    urllib3.exceptions.MaxRetryError,
    urllib3.exceptions.NewConnectionError,
    urllib3.exceptions.ProtocolError,
    aiohttp.ClientConnectionError,
    httpx.TransportError,
    ConnectionError,
)
#: What the SDK raises: its own errors, and those of the generated REST clients,
#: which the one-page list call meets unwrapped.
_SDK_ERRORS = (
    DaytonaError,
    OpenApiException,
    AsyncOpenApiException,
    urllib3.exceptions.HTTPError,
    aiohttp.ClientError,
    OSError,
)


def _status(exc: BaseException) -> int | None:
    """The HTTP status: ``status_code`` on SDK errors, ``status`` on the generated clients' own."""
    for attribute in ("status_code", "status"):
        value = getattr(exc, attribute, None)
        if isinstance(value, int):
            return value
    return None


def _transport_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, a failure to reach the service."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, _TRANSPORT):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def typed_error(exc: BaseException, what: str, *, path: str | None = None) -> errors.SandboxError:
    """The typed error for a failed SDK call; ``what`` says which call, for the message."""
    if isinstance(exc, errors.SandboxError):
        return exc
    status = _status(exc)
    message = f"{what}: {exc}"
    # Connection failures first: DaytonaConnectionTimeoutError is also a DaytonaTimeoutError.
    # A gateway's 504 too: it gave up waiting, which says nothing of what the sandbox did.
    if (
        isinstance(exc, _UNAVAILABLE)
        or status in (502, 503, 504)
        or (status is None and _transport_failure(exc))
    ):
        return errors.ProviderUnavailableError(
            f"{message} (Daytona is unreachable or unavailable)", path=path
        )
    if isinstance(exc, DaytonaNotFoundError) or status == 404:
        return errors.SandboxNotFoundError(message, path=path)
    if isinstance(exc, DaytonaAuthenticationError | DaytonaForbiddenError) or status in (401, 403):
        return errors.AuthenticationError(f"{message} (check DAYTONA_API_KEY)", path=path)
    if isinstance(exc, DaytonaRateLimitError) or status == 429:
        return errors.RateLimitedError(message, path=path)
    if isinstance(exc, DaytonaTimeoutError) or status == 408:
        return errors.SandboxTimeoutError(message, path=path)
    if isinstance(exc, DaytonaInternalServerError) or (status is not None and status >= 500):
        return errors.ProviderUnavailableError(f"{message} (Daytona server error)", path=path)
    return errors.SandboxRuntimeError(message, path=path)


@contextmanager
def translate_errors(what: str, *, path: str | None = None) -> Iterator[None]:
    """Raise what the SDK raises inside the block as its typed error, ``from`` the original."""
    try:
        yield
    except errors.SandboxError:
        raise
    except _SDK_ERRORS as exc:
        raise typed_error(exc, what, path=path) from exc
