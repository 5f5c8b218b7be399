"""The local shell provider: commands run with ``bash`` on this machine.

.. warning::
   **No isolation.** A command can read, change and delete anything the
   current user can, reach the network, and leave processes behind. Use it for
   tests and trusted code; use :mod:`sandbox_sdk.providers.bwrap` for anything
   an agent writes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from sandbox_sdk._local_state import WORKSPACE_DIR, LocalStateProvider, SandboxRecord, mark_used
from sandbox_sdk._process import LARGE_COMMAND_BYTES, bash_script, run_process
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_OUTPUT_BYTES = 8 * 1024 * 1024
#: The environment of a command when the host's is not inherited.
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}


class LocalSandbox(BaseSandbox):
    """Runs each command as ``bash -c`` in ``root_dir`` on the host. **Not isolated.**

    On timeout the command's whole process group is killed (background
    children included) and exit code 124 is returned with ``timed_out=True``.
    Output past ``max_output_bytes`` is discarded as it arrives and the
    response is marked ``truncated``.

    A command too long for one argument is written to an anonymous in-memory
    file that bash sources (and closes before running anything), so commands
    up to ``max_command_bytes`` work and large transfers need few round trips.
    """

    max_command_bytes = LARGE_COMMAND_BYTES

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        *,
        sandbox_id: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = False,
    ) -> None:
        self.root_dir = Path(root_dir).resolve()
        if not self.root_dir.is_dir():
            raise NotADirectoryError(f"sandbox root is not a directory: {self.root_dir}")
        self._id = sandbox_id or "local-" + hashlib.sha256(os.fsencode(self.root_dir)).hexdigest()[:16]
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        base = dict(os.environ) if inherit_env else {**BASE_ENV, "HOME": str(self.root_dir)}
        self.env = {**base, **(env or {})}

    @property
    def id(self) -> str:
        return self._id

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        with bash_script(command) as (script, pass_fds):
            return run_process(
                ["bash", "-c", script],
                cwd=self.root_dir,
                env=self.env,
                timeout=self.timeout if timeout is None else timeout,
                max_output_bytes=self.max_output_bytes,
                pass_fds=pass_fds,
            )

    def __repr__(self) -> str:
        return f"LocalSandbox({str(self.root_dir)!r}, id={self.id!r})"


class TrackedLocalSandbox(LocalSandbox):
    """A :class:`LocalSandbox` handed out by :class:`LocalProvider`; each
    ``execute`` counts as a use for the idle timeout."""

    #: The sandbox's directory in the provider's state (set by the provider).
    sandbox_dir: Path

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        mark_used(self.sandbox_dir)
        return super().execute(command, timeout=timeout)


class LocalProvider(LocalStateProvider[TrackedLocalSandbox]):
    """Hands out :class:`LocalSandbox` es, each a directory under ``state_dir``.

    **Not isolated** (see the module warning): choose it explicitly, for tests
    and trusted code. ``create`` options: ``ttl``, ``idle_timeout``, ``setup``
    (see docs/lifecycle.md)."""

    name = "local"

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(state_dir)
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.env = dict(env or {})

    def _open(self, record: SandboxRecord, directory: Path) -> TrackedLocalSandbox:
        sandbox = TrackedLocalSandbox(
            directory / WORKSPACE_DIR,
            sandbox_id=record.id,
            timeout=self.timeout,
            max_output_bytes=self.max_output_bytes,
            env=self.env,
        )
        sandbox.sandbox_dir = directory
        return sandbox
