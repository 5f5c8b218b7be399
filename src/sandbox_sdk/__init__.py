"""sandbox-sdk: a safe place for AI agents and applications to run code.

A provider implements one method, :meth:`BaseSandbox.execute`; everything
else (files, search, transfers, processes) is derived from it.

``import sandbox_sdk`` loads the core, no provider: ``ResourceLimits`` (the
bwrap provider's, which brings ``ctypes`` and the jail) is imported when
first asked for, by the module ``__getattr__`` below; a type checker sees it
imported as usual.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.errors import (
    AuthenticationError,
    DirectoryNotEmptyError,
    EditAmbiguousError,
    EditNoMatchError,
    IntegrityError,
    InvalidArgumentError,
    InvalidPathError,
    NotTextFileError,
    OutputLimitExceededError,
    ProcessNotFoundError,
    ProviderUnavailableError,
    RateLimitedError,
    SandboxError,
    SandboxFileExistsError,
    SandboxFileNotFoundError,
    SandboxIsADirectoryError,
    SandboxNotADirectoryError,
    SandboxNotFoundError,
    SandboxPermissionError,
    SandboxRuntimeError,
    SandboxTimeoutError,
    SnapshotDamagedError,
    SnapshotNotFoundError,
    StdinClosedError,
    TransferFailedError,
    UnmanagedSandboxError,
    UnsupportedError,
)
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import (
    PIPE,
    DirectoryListing,
    DirectoryTransferResult,
    EditResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileEvent,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepMatch,
    GrepResult,
    ProcessInfo,
    ProcessOutput,
    PtySize,
    ReadResult,
    RunResult,
    SandboxInfo,
    SandboxPage,
    StreamEvent,
    WriteResult,
)
from sandbox_sdk.mounts import Mount, agent_data_mounts
from sandbox_sdk.network import NetworkPolicy
from sandbox_sdk.process import Process
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.registry import available_providers, get_provider
from sandbox_sdk.snapshots import (
    DirectorySnapshotStore,
    FsspecSnapshotStore,
    Snapshot,
    SnapshotEntry,
    SnapshotStore,
)
from sandbox_sdk.transfer import TransferResults

if TYPE_CHECKING:
    from sandbox_sdk.providers.bwrap import ResourceLimits

#: The names imported when first asked for, each with the module that holds it.
_LAZY = {"ResourceLimits": "sandbox_sdk.providers.bwrap"}

if not TYPE_CHECKING:  # hidden from a type checker, which would take any name as found

    def __getattr__(name: str) -> Any:
        """A name of ``_LAZY``, imported on first use (and kept in the module)."""
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value


__all__ = [
    "PIPE",
    "AuthenticationError",
    "BaseSandbox",
    "DirectoryListing",
    "DirectoryNotEmptyError",
    "DirectorySnapshotStore",
    "DirectoryTransferResult",
    "EditAmbiguousError",
    "EditNoMatchError",
    "EditResult",
    "ExecuteResponse",
    "FileDownloadResponse",
    "FileEvent",
    "FileInfo",
    "FileUploadResponse",
    "FsspecSnapshotStore",
    "GlobResult",
    "GrepMatch",
    "GrepResult",
    "IntegrityError",
    "InvalidArgumentError",
    "InvalidPathError",
    "Limits",
    "Mount",
    "NetworkPolicy",
    "NotTextFileError",
    "OutputLimitExceededError",
    "Process",
    "ProcessInfo",
    "ProcessNotFoundError",
    "ProcessOutput",
    "ProviderUnavailableError",
    "PtySize",
    "RateLimitedError",
    "ReadResult",
    "ResourceLimits",
    "RunResult",
    "SandboxError",
    "SandboxFileExistsError",
    "SandboxFileNotFoundError",
    "SandboxInfo",
    "SandboxIsADirectoryError",
    "SandboxNotADirectoryError",
    "SandboxNotFoundError",
    "SandboxPage",
    "SandboxPermissionError",
    "SandboxProvider",
    "SandboxRuntimeError",
    "SandboxTimeoutError",
    "Snapshot",
    "SnapshotDamagedError",
    "SnapshotEntry",
    "SnapshotNotFoundError",
    "SnapshotStore",
    "StdinClosedError",
    "StreamEvent",
    "TransferFailedError",
    "TransferResults",
    "UnmanagedSandboxError",
    "UnsupportedError",
    "WriteResult",
    "agent_data_mounts",
    "available_providers",
    "get_provider",
]
