"""Modal SDK exceptions translated to :mod:`sandbox_sdk.errors`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import modal.exception as mx

from sandbox_sdk import errors

# Most specific first: several Modal errors subclass others (ConflictError is an InvalidError,
# the filesystem and timeout errors share bases).
_TRANSLATIONS: list[tuple[type[BaseException], type[errors.SandboxError]]] = [
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


def translate(exc: BaseException, what: str, *, path: str | None = None) -> errors.SandboxError | None:
    """Our error for a Modal one (``None`` if ``exc`` is not from Modal)."""
    for modal_type, ours in _TRANSLATIONS:
        if isinstance(exc, modal_type):
            return ours(f"{what}: {exc or type(exc).__name__}", path=path)
    return None


@contextmanager
def modal_errors(what: str, *, path: str | None = None) -> Iterator[None]:
    """Re-raise Modal SDK exceptions inside the block as our typed errors."""
    try:
        yield
    except mx.Error as exc:
        translated = translate(exc, what, path=path)
        assert translated is not None
        raise translated from exc
