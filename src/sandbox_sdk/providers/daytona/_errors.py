"""Translate the Daytona SDK's exceptions into :mod:`sandbox_sdk.errors` types."""

from __future__ import annotations

import aiohttp
import httpx
import urllib3.exceptions
from daytona import (
    DaytonaAuthenticationError,
    DaytonaBadGatewayError,
    DaytonaConnectionError,
    DaytonaForbiddenError,
    DaytonaInternalServerError,
    DaytonaNotFoundError,
    DaytonaRateLimitError,
    DaytonaServiceUnavailableError,
    DaytonaTimeoutError,
)

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


def to_sandbox_error(exc: BaseException, what: str) -> errors.SandboxError:
    """The typed error for a failed SDK call; ``what`` says which call, for the message."""
    if isinstance(exc, errors.SandboxError):
        return exc
    status = _status(exc)
    message = f"{what}: {exc}"
    # Connection failures first: DaytonaConnectionTimeoutError is also a DaytonaTimeoutError.
    if isinstance(exc, _UNAVAILABLE) or status in (502, 503) or (status is None and _transport_failure(exc)):
        return errors.ProviderUnavailableError(f"{message} (Daytona is unreachable or unavailable)")
    if isinstance(exc, DaytonaNotFoundError) or status == 404:
        return errors.SandboxNotFoundError(message)
    if isinstance(exc, DaytonaAuthenticationError | DaytonaForbiddenError) or status in (401, 403):
        return errors.AuthenticationError(f"{message} (check DAYTONA_API_KEY)")
    if isinstance(exc, DaytonaRateLimitError) or status == 429:
        return errors.RateLimitedError(message)
    if isinstance(exc, DaytonaTimeoutError) or status in (408, 504):
        return errors.SandboxTimeoutError(message)
    if isinstance(exc, DaytonaInternalServerError) or (status is not None and status >= 500):
        return errors.ProviderUnavailableError(f"{message} (Daytona server error)")
    return errors.SandboxRuntimeError(message)
