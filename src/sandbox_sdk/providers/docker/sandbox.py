"""``DockerSandbox``: a :class:`~sandbox_sdk.BaseSandbox` on one container, through the exec API."""

from __future__ import annotations

import contextlib
import functools
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from typing import Any

import docker

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import TIMEOUT_EXIT_CODE, ExecuteResponse
from sandbox_sdk.provider_kit import LARGE_COMMAND_BYTES, command_seconds
from sandbox_sdk.provider_kit.exec_runner import reported_status, runner_call
from sandbox_sdk.provider_kit.port_forward import CHUNK, ExposedPorts
from sandbox_sdk.providers.docker._errors import translate_errors

#: Default timeout of one ``execute`` in seconds.
DEFAULT_TIMEOUT = 120.0
#: Default output cap of one ``execute``: twice a command, so whatever one command wrote,
#: one ``read`` returns.
DEFAULT_MAX_OUTPUT_BYTES = 2 * LARGE_COMMAND_BYTES
#: Seconds past a command's timeout after which the client stops waiting for the
#: in-container timer (a frozen container, a pids limit that left no room for the timer)
#: and reports the command timed out.
BACKSTOP_SECONDS = 15.0
#: Seconds an engine may still report a finished exec as running (podman's service
#: records the exit a moment after the stream ends).
EXIT_RECORD_SECONDS = 5.0
#: The most of the runner's report (the exec's stderr) kept: one short line.
REPORT_BYTES = 4096


#: The stream numbers of the exec's multiplexed output.
STDOUT, STDERR = 1, 2


class Frames:
    """The exec's multiplexed output, demultiplexed: with ``Tty`` false the engine
    sends stdout and stderr on the one connection as frames, an 8-byte header (the
    stream, 1 byte; three zero bytes; the payload's size, big-endian 4 bytes) then the
    payload (the Engine API's "Stream format", docs.docker.com/reference/api/engine/
    version/v1.57/operations/ContainerAttach/; docker-py's ``docker/utils/socket.py``
    reads it the same way). Bytes go in as they arrive, cut anywhere."""

    def __init__(self) -> None:
        self._pending = b""
        self._left = 0
        self._stream = STDOUT

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The ``(stream, payload piece)`` pairs ``data`` completes, in order."""
        pieces: list[tuple[int, bytes]] = []
        pending = self._pending + data
        while pending:
            if self._left == 0:
                if len(pending) < 8:
                    break
                self._stream, self._left = struct.unpack(">BxxxL", pending[:8])
                pending = pending[8:]
                continue
            piece, pending = pending[: self._left], pending[self._left :]
            self._left -= len(piece)
            pieces.append((self._stream, piece))
        self._pending = pending
        return pieces


class DockerSandbox(BaseSandbox):
    """One container; each ``execute`` is one exec (``bash -c``) as ``user``, in
    ``workdir``. See the package docstring for what the container is allowed."""

    #: A command up to ``ARGV_COMMAND_BYTES`` is an argument of the exec (Linux caps one at
    #: 128 KiB); a longer one goes over the exec's stdin (``provider_kit.exec_runner``).
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
        self._ports = ExposedPorts(self._connect_port)

    @property
    def id(self) -> str:
        return self._id

    def expose_port(self, port: int, *, host: str = "127.0.0.1") -> str:
        """A URL on the host reaching ``port`` on the container's loopback: a forwarder on
        ``host`` (loopback by default) whose every connection is one exec in the container
        relaying it (``remote/_relay.py``), so it works without a network of the
        container's own (docs/policy.md). Exposing a port again returns the same URL."""
        return self._ports.expose(port, host)

    def unexpose(self, port: int) -> None:
        self._ports.unexpose(port)

    def _connect_port(self, port: int) -> socket.socket:
        """A connection to ``127.0.0.1:port`` in the container: one end of a socket pair
        whose other end threads copy to and from a relay exec's stdin and stdout."""
        with translate_errors(f"reach port {port} in container {self._id[:12]}"):
            exec_id = self.client.exec_create(
                self._id,
                ["python3", "-I", "-S", "-c", _relay_source(), str(port)],
                stdin=True,
                user=self.user,
            )["Id"]
            response = self._start(exec_id)
        ours, theirs = socket.socketpair()
        threading.Thread(
            target=_relay, args=(response, theirs), name=f"docker-port-{port}", daemon=True
        ).start()
        return ours

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        seconds = command_seconds(timeout, self.timeout)
        started = time.monotonic()
        call = runner_call(command, seconds)
        with translate_errors(f"execute in container {self._id[:12]}"):
            exec_id = self.client.exec_create(
                self._id,
                call.argv,
                stdin=call.stdin is not None,
                user=self.user,
                workdir=self.workdir,
                environment=self.env or None,
            )["Id"]
            response = self._start(exec_id)
            try:
                if call.stdin is not None:  # then end the exec's stdin
                    sock = response.raw._fp.fp.raw._sock
                    sock.sendall(call.stdin)
                    sock.shutdown(socket.SHUT_WR)
                output, report, truncated, finished = self._collect(
                    response.raw._fp.fp, started + seconds + BACKSTOP_SECONDS
                )
            finally:
                response.close()
            exit_code = self._exit_code(exec_id) if finished else None
        reported = reported_status(report, call.nonce)
        if exit_code is not None and reported is not None and reported != exit_code:
            # The runner exited with the status it reported: a different one means it was
            # killed after reporting (a memory limit, a signal from the command's user).
            exit_code = reported
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

    def _collect(self, reader: Any, deadline: float) -> tuple[bytes, bytes, bool, bool]:
        """Read the exec's multiplexed stream to its end or to ``deadline``: its output
        (stdout), cut at ``max_output_bytes`` as it arrives (the rest is read and dropped,
        so the command never blocks on a full pipe), the runner's report (stderr), whether
        the output was cut, whether the stream ended. ``reader`` is the response's buffered
        reader; the deadline is its socket's timeout."""
        sock: socket.socket = reader.raw._sock
        kept = bytearray()
        report = bytearray()
        truncated = False
        frames = Frames()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(kept), bytes(report), truncated, False
            sock.settimeout(remaining)
            try:
                data = reader.read1(1 << 20)
            except TimeoutError:
                return bytes(kept), bytes(report), truncated, False
            if not data:
                return bytes(kept), bytes(report), truncated, True
            for stream, piece in frames.feed(data):
                if stream == STDERR:
                    report += piece[: max(REPORT_BYTES - len(report), 0)]
                    continue
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


@functools.cache
def _relay_source() -> str:
    return resources.files("sandbox_sdk.remote").joinpath("_relay.py").read_text("utf-8")


def _relay(response: Any, pair: socket.socket) -> None:
    """Carry one forwarded connection between ``pair`` (the socket pair's end the
    forwarder does not hold) and a relay exec (``response``: its hijacked connection):
    the exec's stdout frames into ``pair``, ``pair``'s bytes into its stdin, each end's
    half-close passed on. When the exec's stream ends (the server closed, or nobody
    listens), ``pair`` ends both ways, so the forwarder closes the connection."""
    reader = response.raw._fp.fp
    engine: socket.socket = reader.raw._sock
    engine.settimeout(None)  # the client's timeout would cut an idle connection
    inbound = threading.Thread(target=_to_stdin, args=(pair, engine), daemon=True)
    inbound.start()
    frames = Frames()
    try:
        while data := reader.read1(CHUNK):
            for stream, piece in frames.feed(data):
                if stream == STDOUT:
                    pair.sendall(piece)
    except OSError:
        pass  # the forwarder closed its end, or the engine went away
    finally:
        with contextlib.suppress(OSError):
            pair.shutdown(socket.SHUT_RDWR)
        inbound.join()
        response.close()
        pair.close()


def _to_stdin(pair: socket.socket, engine: socket.socket) -> None:
    """``pair``'s bytes into the exec's stdin; at their end, the stdin's end. Then wait
    until ``pair`` is closed altogether (not merely half-closed: poll says hang-up) and
    drop the engine connection, so a server that never closes cannot keep this
    connection's threads after the forwarder let it go."""
    try:
        while data := pair.recv(CHUNK):
            engine.sendall(data)
        engine.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    waiting = select.poll()
    waiting.register(pair, 0)  # hang-up and errors are reported whatever the mask
    waiting.poll()
    with contextlib.suppress(OSError):
        engine.shutdown(socket.SHUT_RDWR)
