"""The local shell provider: commands run with ``bash`` on this machine.

.. warning::
   **No isolation.** A command can read, change and delete anything the
   current user can, reach the network, and leave processes behind. Use it for
   tests and trusted code; use :mod:`sandbox_sdk.providers.bwrap` for anything
   an agent writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from sandbox_sdk._local_state import WORKSPACE_DIR, LocalStateProvider, SandboxRecord, mark_used
from sandbox_sdk._process import run_process
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_OUTPUT_BYTES = 8 * 1024 * 1024
#: Commands up to this size go to ``bash -c`` as one argument (Linux caps one
#: argument at 128 KiB); larger ones are handed over in an in-memory file.
ARGV_COMMAND_BYTES = 96 * 1024
WRITE_CHARS = 1 << 20
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

    #: 4 MiB commands carry 3 MiB of upload per round trip, keep the client's
    #: memory per in-flight command bounded, and stay under what one output
    #: (8 MiB) returns (so whatever one command wrote, one ``read`` can return).
    max_command_bytes = 4 * 1024 * 1024

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
        if (len(command) if command.isascii() else len(command.encode("utf-8"))) <= ARGV_COMMAND_BYTES:
            return self._run(["bash", "-c", command], timeout)
        with _command_file(command) as fd:
            # ``.`` reads the whole file before running any of it, so its
            # first statement can close the descriptor: nothing the command
            # starts inherits it.
            return self._run(["bash", "-c", f". /dev/fd/{fd}"], timeout, pass_fds=(fd,))

    def _run(self, argv: list[str], timeout: float | None, pass_fds: tuple[int, ...] = ()) -> ExecuteResponse:
        return run_process(
            argv,
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


@contextlib.contextmanager
def _command_file(command: str) -> Iterator[int]:
    """An unlinked, in-memory file holding ``exec N<&-;`` and then ``command``."""
    fd = os.memfd_create("sandbox-command") if hasattr(os, "memfd_create") else _unlinked_temp_file()
    try:
        _write_all(fd, f"exec {fd}<&-; ".encode("ascii"))
        for start in range(0, len(command), WRITE_CHARS):  # encoded piecewise: no full copy
            _write_all(fd, command[start : start + WRITE_CHARS].encode("utf-8", "surrogateescape"))
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unlinked_temp_file() -> int:
    fd, path = tempfile.mkstemp(prefix="sandbox-command-")
    os.unlink(path)
    return fd
