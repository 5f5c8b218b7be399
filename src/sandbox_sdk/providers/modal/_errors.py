"""Modal SDK exceptions translated to :mod:`sandbox_sdk.errors`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import modal.exception as mx

from sandbox_sdk import errors


class NameTakenError(errors.SandboxRuntimeError):
    """Creating a sandbox under a name another running sandbox of the app holds
    (Modal's ``AlreadyExistsError``)."""


# Most specific first: several Modal errors subclass others (ConflictError is an InvalidError,
# the filesystem and timeout errors share bases).
_TRANSLATIONS: list[tuple[type[BaseException], type[errors.SandboxError]]] = [
    (mx.AlreadyExistsError, NameTakenError),
    (mx.SandboxFilesystemNotFoundError, errors.SandboxFileNotFoundError),
    (mx.SandboxFilesystemIsADirectoryError, errors.SandboxIsADirectoryError),
    (mx.SandboxFilesystemNotADirectoryError, errors.SandboxNotADirectoryError),
    (mx.SandboxFilesystemPermissionError, errors.SandboxPermissionError),
    (mx.SandboxFilesystemPathAlreadyExistsError, errors.SandboxFileExistsError),
    (mx.SandboxFilesystemDirectoryNotEmptyError, errors.DirectoryNotEmptyError),
    (mx.SandboxFilesystemFileTooLargeError, errors.OutputLimitExceededError),
    (mx.SandboxFilesystemError, errors.SandboxRuntimeError),
    (mx.NotFoundError, errors.SandboxNotFoundError),
    # Operating on a sandbox that has finished: it is gone as far as callers are concerned.
    (mx.ConflictError, errors.SandboxNotFoundError),
    (mx.SandboxTerminatedError, errors.SandboxNotFoundError),
    (mx.AuthError, errors.AuthenticationError),
    (mx.PermissionDeniedError, errors.AuthenticationError),
    (mx.ResourceExhaustedError, errors.RateLimitedError),
    (mx.TimeoutError, errors.SandboxTimeoutError),
    (mx.ServiceError, errors.ProviderUnavailableError),
    (mx.ConnectionError, errors.ProviderUnavailableError),
    (mx.InternalError, errors.ProviderUnavailableError),
    (mx.UnimplementedError, errors.ProviderUnavailableError),
    (mx.InvalidError, errors.InvalidArgumentError),
    (mx.Error, errors.SandboxRuntimeError),
]


def typed_error(exc: BaseException, what: str, *, path: str | None = None) -> errors.SandboxError:
    """The typed error for an exception the SDK raised while doing ``what``."""
    if isinstance(exc, errors.SandboxError):
        return exc
    for modal_type, ours in _TRANSLATIONS:
        if isinstance(exc, modal_type):
            return ours(f"{what}: {exc or type(exc).__name__}", path=path)
    return errors.SandboxRuntimeError(f"{what}: {type(exc).__name__}: {exc}", path=path)


@contextmanager
def translate_errors(what: str, *, path: str | None = None) -> Iterator[None]:
    """Raise what the SDK raises inside the block as its typed error, ``from`` the original."""
    try:
        yield
    except mx.Error as exc:
        raise typed_error(exc, what, path=path) from exc
