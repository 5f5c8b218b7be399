"""Translate the ``e2b`` SDK's exceptions into :mod:`sandbox_sdk.errors`.

Order matters: the SDK's "sandbox gone" and "sandbox unreachable" errors
subclass its ``TimeoutException``, and ``AuthenticationException`` and
``ServiceBusyException`` do not subclass ``SandboxException`` at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from e2b import exceptions as e2b_errors

from sandbox_sdk import errors

#: Go's errno texts in envd's messages, for file errors that carry no status
#: of their own, and envd's own "path is a file: <ancestor>", its answer when
#: a parent to create is a file (``permissions.EnsureDirs``, e2b-dev/infra
#: packages/envd/internal/permissions/path.go; a 500 on upload, INTERNAL on move).
_ERRNO_TEXTS: tuple[tuple[str, type[errors.SandboxError]], ...] = (
    ("permission denied", errors.SandboxPermissionError),
    ("is a directory", errors.SandboxIsADirectoryError),
    ("not a directory", errors.SandboxNotADirectoryError),
    ("path is a file", errors.SandboxNotADirectoryError),
    ("no such file or directory", errors.SandboxFileNotFoundError),
)


def typed_error(exc: BaseException, what: str, *, path: str | None = None) -> errors.SandboxError:
    """The typed error for an exception the SDK raised while doing ``what``."""
    if isinstance(exc, errors.SandboxError):
        return exc
    message = f"{what}: {exc}"
    if isinstance(exc, e2b_errors.AuthenticationException):
        return errors.AuthenticationError(message)
    if isinstance(exc, e2b_errors.ServiceBusyException):
        return errors.ProviderUnavailableError(message)
    if isinstance(exc, e2b_errors.RateLimitException):
        return errors.RateLimitedError(message)
    if isinstance(exc, e2b_errors.SandboxNotFoundException | e2b_errors.SandboxNotRunningException):
        return errors.SandboxNotFoundError(message)
    if isinstance(exc, e2b_errors.SandboxUnreachableException):
        return errors.ProviderUnavailableError(message)
    if isinstance(exc, e2b_errors.FileNotFoundException):
        return errors.SandboxFileNotFoundError(message, path=path)
    if isinstance(exc, e2b_errors.TimeoutException):
        return errors.SandboxTimeoutError(message)
    if isinstance(exc, e2b_errors.SandboxException):
        lowered = str(exc).lower()
        for text, kind in _ERRNO_TEXTS:
            if text in lowered:
                return kind(message, path=path)
        if isinstance(exc, e2b_errors.InvalidArgumentException):
            return errors.InvalidArgumentError(message, path=path)
        return errors.SandboxRuntimeError(message, path=path)
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return errors.SandboxTimeoutError(message)
    if isinstance(exc, httpx.TransportError | OSError):
        return errors.ProviderUnavailableError(f"{what}: cannot reach E2B: {exc}")
    return errors.SandboxRuntimeError(f"{what}: {type(exc).__name__}: {exc}", path=path)


@contextmanager
def translate_errors(what: str, *, path: str | None = None) -> Iterator[None]:
    """Raise what the SDK raises inside the block (anything but our own errors:
    it also lets httpx and OS errors out) as its typed error, ``from`` the original."""
    try:
        yield
    except errors.SandboxError:
        raise
    except Exception as exc:
        raise typed_error(exc, what, path=path) from exc
