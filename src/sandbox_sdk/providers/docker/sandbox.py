"""``DockerSandbox``: a :class:`~sandbox_sdk.BaseSandbox` on one container, through the exec API."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import docker

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import TIMEOUT_EXIT_CODE, ExecuteResponse
from sandbox_sdk.provider_kit import ARGV_COMMAND_BYTES, LARGE_COMMAND_BYTES, command_seconds
from sandbox_sdk.providers.docker._errors import translate_errors

#: Default timeout of one ``execute`` in seconds.
DEFAULT_TIMEOUT = 120.0
#: Default output cap of one ``execute``: twice a command, so whatever one command wrote,
#: one ``read`` returns.
DEFAULT_MAX_OUTPUT_BYTES = 2 * LARGE_COMMAND_BYTES
#: The file each command touches, so :meth:`DockerProvider.reap` can tell how long a
#: sandbox has been idle (Docker keeps no time of a container's last exec).
USED_MARKER = "/tmp/.sandbox-sdk-used"
#: Seconds past a command's timeout after which the client stops waiting for the
#: in-container timer (a frozen container, a pids limit that left no room for the timer)
#: and reports the command timed out.
BACKSTOP_SECONDS = 15.0
#: Seconds an engine may still report a finished exec as running (podman's service
#: records the exit a moment after the stream ends).
EXIT_RECORD_SECONDS = 5.0

#: The program every ``execute`` runs as ``bash -c RUNNER sandbox-sdk SECONDS HOW [COMMAND]``.
#: The engine has no call that kills an exec, so the timeout is enforced inside the
#: container: the command runs as a session and process group of its own (``setsid`` of a
#: background job, which leads no group, does not fork: its pid is the group's id), and a
#: timer in a group of its own kills that whole group with SIGKILL at the deadline, after
#: telling the runner (SIGUSR1), which then exits 124 (the client also checks its own clock:
#: a command that exits 124 by itself before the deadline is not a timeout). A command
#: killed by signal N exits 128+N, as bash reports it. The command's stderr joins its
#: stdout, so the merged output keeps its order; the runner's own (bash's job notices) is
#: dropped. The timer's group is killed once the command ends.
#:
#: ``HOW`` is ``arg`` (the command is ``COMMAND``) or ``stdin``: a command too long for one
#: argument arrives on the exec's stdin, which the command's shell sources as fd 3 (taken
#: before the background job's stdin becomes ``/dev/null``); the client puts ``exec 3<&-``
#: first, so nothing the command starts inherits it (as ``provider_kit.bash_script`` does
#: with its in-memory file).
RUNNER = (
    "{ : >|" + USED_MARKER + "; } 2>/dev/null\n"
    "exec 2>/dev/null\n"
    "timed_out=\n"
    "trap timed_out=1 USR1\n"
    'if [ "$2" = stdin ]; then exec 3<&0; setsid bash -c ". /dev/fd/3" </dev/null 2>&1 &\n'
    'else setsid bash -c "$3" </dev/null 2>&1 & fi\n'
    "pid=$!\n"
    "exec 3<&-\n"
    'setsid bash -c \'sleep "$1"; kill -USR1 "$2"; kill -KILL -- -"$3"\' timer "$1" $$ "$pid"'
    " </dev/null >/dev/null 2>&1 &\n"
    "timer=$!\n"
    'wait "$pid"\n'
    "status=$?\n"
    'while [ -n "$timed_out" ] && kill -0 "$pid" 2>/dev/null; do wait "$pid"; done\n'
    'kill -KILL -- -"$timer" 2>/dev/null\n'
    f'[ -n "$timed_out" ] && exit {TIMEOUT_EXIT_CODE}\n'
    'exit "$status"\n'
)


class DockerSandbox(BaseSandbox):
    """One container; each ``execute`` is one exec (``bash -c``) as ``user``, in
    ``workdir``. See the package docstring for what the container is allowed."""

    #: A command up to ``ARGV_COMMAND_BYTES`` is an argument of the exec (Linux caps one at
    #: 128 KiB); a longer one goes over the exec's stdin (see :data:`RUNNER`).
    limits = Limits(max_command_bytes=LARGE_COMMAND_BYTES)

    def __init__(
        self,
        client: docker.APIClient,
        container_id: str,
        *,
        user: str,
        workdir: str,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self._id = container_id
        self.user = user
        self.workdir = workdir
        self.timeout = timeout
        self.limits = replace(self.limits, max_output_bytes=max_output_bytes)
        self.env = dict(env or {})

    @property
    def id(self) -> str:
        return self._id

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        seconds = command_seconds(timeout, self.timeout)
        started = time.monotonic()
        script = command.encode("utf-8")
        piped = len(script) > ARGV_COMMAND_BYTES
        how = ["stdin"] if piped else ["arg", command]
        with translate_errors(f"execute in container {self._id[:12]}"):
            exec_id = self.client.exec_create(
                self._id,
                ["bash", "-c", RUNNER, "sandbox-sdk", f"{seconds:.3f}", *how],
                stdin=piped,
                user=self.user,
                workdir=self.workdir,
                environment=self.env or None,
            )["Id"]
            response = self._start(exec_id)
            try:
                if piped:  # then end the exec's stdin: the command's shell reads it to the end
                    sock = response.raw._fp.fp.raw._sock
                    sock.sendall(b"exec 3<&-; " + script)
                    sock.shutdown(socket.SHUT_WR)
                output, truncated, finished = self._collect(
                    response.raw._fp.fp, started + seconds + BACKSTOP_SECONDS
                )
            finally:
                response.close()
            exit_code = self._exit_code(exec_id) if finished else None
        text = output.decode("utf-8", "replace")
        elapsed = time.monotonic() - started
        if exit_code is None or (exit_code == TIMEOUT_EXIT_CODE and elapsed >= seconds):
            return ExecuteResponse(
                output=text, exit_code=TIMEOUT_EXIT_CODE, truncated=truncated, timed_out=True
            )
        return ExecuteResponse(output=text, exit_code=exit_code, truncated=truncated)

    def _start(self, exec_id: str) -> Any:
        """Start the exec attached, as ``exec_start`` does; the HTTP response, whose
        connection then carries the exec's multiplexed output.

        Not ``exec_start(socket=True)``: that hands out the raw socket under the response's
        buffered reader, which may already hold the first output (an exec that writes at
        once, its bytes read with the headers): read from there, they would be lost."""
        response = self.client._post_json(
            self.client._url("/exec/{0}/start", exec_id),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            data={"Tty": False, "Detach": False},
            stream=True,
        )
        self.client._raise_for_status(response)
        return response

    def _collect(self, reader: Any, deadline: float) -> tuple[bytes, bool, bool]:
        """Read the exec's multiplexed stream to its end or to ``deadline``: its output,
        cut at ``max_output_bytes`` as it arrives (the rest is read and dropped, so the
        command never blocks on a full pipe), whether it was cut, whether the stream ended.
        ``reader`` is the response's buffered reader; the deadline is its socket's timeout."""
        sock: socket.socket = reader.raw._sock
        kept = bytearray()
        truncated = False
        pending = b""
        frame_left = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(kept), truncated, False
            sock.settimeout(remaining)
            try:
                data = reader.read1(1 << 20)
            except TimeoutError:
                return bytes(kept), truncated, False
            if not data:
                return bytes(kept), truncated, True
            pending += data
            while pending:
                if frame_left == 0:  # a frame header: stream (1 byte), 3 zero bytes, size
                    if len(pending) < 8:
                        break
                    frame_left = struct.unpack(">xxxxL", pending[:8])[0]
                    pending = pending[8:]
                    continue
                piece, pending = pending[:frame_left], pending[frame_left:]
                frame_left -= len(piece)
                room = self.limits.max_output_bytes - len(kept)
                if len(piece) > room:
                    truncated = True
                kept += piece[: max(room, 0)]

    def _exit_code(self, exec_id: str) -> int | None:
        """The exec's exit status, once the engine has recorded it."""
        until = time.monotonic() + EXIT_RECORD_SECONDS
        while True:
            state = self.client.exec_inspect(exec_id)
            if not state.get("Running") and state.get("ExitCode") is not None:
                return int(state["ExitCode"])
            if time.monotonic() >= until:
                return None
            time.sleep(0.01)

    def __repr__(self) -> str:
        return f"DockerSandbox(id={self._id[:12]!r})"
