"""Typed errors raised by sandbox operations.

Every error derives from :class:`SandboxError` and, where one fits, from the
matching built-in exception, so ``except FileNotFoundError`` works on a
sandbox path exactly as it does on a local one.
"""

from __future__ import annotations

from typing import Any


class SandboxError(Exception):
    """Base class of every error this SDK raises."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message


class SandboxFileNotFoundError(SandboxError, FileNotFoundError):
    """The path (or one of its parents) does not exist."""


class SandboxIsADirectoryError(SandboxError, IsADirectoryError):
    """A file operation was given a directory."""


class SandboxNotADirectoryError(SandboxError, NotADirectoryError):
    """A directory operation was given something else, or a parent is a file."""


class SandboxPermissionError(SandboxError, PermissionError):
    """The sandbox user may not do this."""


class SandboxFileExistsError(SandboxError, FileExistsError):
    """The path exists and the operation was told not to replace it."""


class DirectoryNotEmptyError(SandboxError, OSError):
    """A non-recursive delete was given a directory with entries."""


class InvalidPathError(SandboxError, ValueError):
    """The path is malformed: empty, contains NUL, or a name is too long."""


class InvalidArgumentError(SandboxError, ValueError):
    """An argument has the wrong type or value (checked before anything runs)."""


class NotTextFileError(SandboxError, ValueError):
    """A text operation met binary content (NUL bytes or invalid UTF-8)."""


class EditNoMatchError(SandboxError, ValueError):
    """``edit`` found no occurrence of the old string."""


class EditAmbiguousError(SandboxError, ValueError):
    """``edit`` found several occurrences and ``replace_all`` was not set."""

    def __init__(self, message: str, *, path: str | None = None, count: int = 0) -> None:
        super().__init__(message, path=path)
        self.count = count


class OutputLimitExceededError(SandboxError):
    """A result is larger than the caller's cap (for example ``read_bytes``)."""


class IntegrityError(SandboxError):
    """Transferred bytes did not match the size or SHA-256 reported by the other side."""


class SnapshotDamagedError(IntegrityError):
    """A snapshot's manifest or one of its blobs is missing or does not match
    its digest (docs/state.md); nothing was restored."""


class SnapshotNotFoundError(SandboxError, LookupError):
    """The store has no snapshot with this id."""


class SandboxTimeoutError(SandboxError, TimeoutError):
    """The command or operation ran past its timeout and was killed."""


class SandboxRuntimeError(SandboxError, RuntimeError):
    """The operation could not run at all (no ``python3``, garbled output, a
    provider failure), or failed inside the sandbox in an unexpected way."""


class SandboxNotFoundError(SandboxError, LookupError):
    """No sandbox with this id exists (lifecycle operations)."""


class TransferFailedError(SandboxError):
    """Items of an ``upload_files`` / ``download_files`` batch failed
    (:meth:`~sandbox_sdk.TransferResults.raise_for_errors`); ``failures``
    holds their responses, each with its ``path`` and ``error``."""

    def __init__(self, message: str, failures: list[Any]) -> None:
        super().__init__(message)
        self.failures = failures


class UnmanagedSandboxError(SandboxError, RuntimeError):
    """A sandbox handle built directly, not by a provider, was asked to delete its sandbox."""


class ProcessNotFoundError(SandboxError, LookupError):
    """No process with this pid was started in the sandbox (or its record is gone)."""


class UnsupportedError(SandboxError, NotImplementedError):
    """The provider cannot do this (``expose_port`` where it has no way in,
    say); the message names what and where to look (docs/policy.md)."""


class StdinClosedError(SandboxError, BrokenPipeError):
    """A process's stdin cannot be written: it was started without
    ``stdin=PIPE`` (or a ``pty``), its stdin was closed, or it has ended."""


class ProviderUnavailableError(SandboxError):
    """The provider cannot be used here: a missing tool, SDK or service."""


class AuthenticationError(SandboxError, PermissionError):
    """The provider rejected the credentials, or none were found."""


class RateLimitedError(SandboxError):
    """The provider asked us to slow down."""
