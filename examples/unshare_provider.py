"""A complete provider: each sandbox is a directory on this machine, and each
command runs there with bash as a mapped root user in a network namespace of
its own (``unshare --net --map-root-user``), so it cannot reach the network.

The sandbox implements ``id`` and ``execute`` with the provider kit's host
process runner; :class:`~sandbox_sdk.provider_kit.HostStateProvider` keeps the
sandboxes (ids, labels, ttl and idle timeouts, locking), so the provider only
says how to open one. It imports public names only.
"""

from __future__ import annotations

from pathlib import Path

from sandbox_sdk import BaseSandbox, ExecuteResponse, Limits
from sandbox_sdk.provider_kit import (
    LARGE_COMMAND_BYTES,
    WORKSPACE_DIR,
    HostStateProvider,
    SandboxRecord,
    bash_script,
    command_seconds,
    mark_used,
    run_process,
)

#: Seconds a command may run when ``execute`` is given no timeout.
DEFAULT_TIMEOUT = 120.0


class UnshareSandbox(BaseSandbox):
    """Runs each command in the sandbox's workspace, with no network."""

    #: ``bash_script`` hands a command too long for one argument over in a
    #: file; twice a command for the output: whatever one large command
    #: wrote, one ``read`` returns.
    limits = Limits(max_command_bytes=LARGE_COMMAND_BYTES, max_output_bytes=2 * LARGE_COMMAND_BYTES)
    #: Each command has a network namespace of its own: an operation server
    #: started by one would not be on the next one's loopback.
    operation_server = False

    def __init__(self, sandbox_id: str, directory: Path) -> None:
        self._id = sandbox_id
        self.directory = directory
        self.workspace = directory / WORKSPACE_DIR

    @property
    def id(self) -> str:
        return self._id

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        mark_used(self.directory)  # restarts the idle-timeout clock
        with bash_script(command) as (script, pass_fds):
            return run_process(
                ["unshare", "--net", "--map-root-user", "bash", "-c", script],
                cwd=self.workspace,
                env={"PATH": "/usr/bin:/bin", "HOME": str(self.workspace)},
                timeout=command_seconds(timeout, DEFAULT_TIMEOUT),
                max_output_bytes=self.limits.max_output_bytes,
                pass_fds=pass_fds,
            )


class UnshareProvider(HostStateProvider[UnshareSandbox]):
    """Sandboxes kept under ``state_dir`` (default ``~/.sandbox-sdk/unshare``)."""

    name = "unshare"

    def _open(self, record: SandboxRecord, directory: Path) -> UnshareSandbox:
        return UnshareSandbox(record.id, directory)
