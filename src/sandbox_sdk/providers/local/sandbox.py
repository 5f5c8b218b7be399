"""The local sandbox; see the package docstring."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.provider_kit import command_seconds
from sandbox_sdk.provider_kit.host_process import LARGE_COMMAND_BYTES, arun_process, bash_script, run_process
from sandbox_sdk.providers.local import _servers

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

    limits = Limits(max_command_bytes=LARGE_COMMAND_BYTES)

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
        self.limits = replace(self.limits, max_output_bytes=max_output_bytes)
        base = dict(os.environ) if inherit_env else {**BASE_ENV, "HOME": str(self.root_dir)}
        self.env = {**base, **(env or {})}
        _servers.watch(self)  # an operation server it starts is stopped at interpreter exit

    @property
    def id(self) -> str:
        return self._id

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        with bash_script(command) as (script, pass_fds):
            return run_process(**self._process_options(script, pass_fds, timeout))

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        """``execute`` in a worker thread; cancelled, it kills the command's
        whole process group before the cancellation goes on."""
        with bash_script(command) as (script, pass_fds):
            return await arun_process(**self._process_options(script, pass_fds, timeout))

    def _process_options(
        self, script: str, pass_fds: tuple[int, ...], timeout: float | None
    ) -> dict[str, Any]:
        return {
            "argv": ["bash", "-c", script],
            "cwd": self.root_dir,
            "env": self.env,
            "timeout": command_seconds(timeout, self.timeout),
            "max_output_bytes": self.limits.max_output_bytes,
            "pass_fds": pass_fds,
        }

    def __repr__(self) -> str:
        return f"LocalSandbox({str(self.root_dir)!r}, id={self.id!r})"
