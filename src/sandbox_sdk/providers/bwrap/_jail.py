"""A sandbox's long-lived jail, seen from the host.

One bwrap jail per sandbox runs ``_jail_server.py``; it is started on first
use and reached per command over a unix socket in the sandbox's state
directory (``jail/socket``), so every client process finds the same one. A
connection refused (or no socket) means no jail: the client that sees it
takes ``jail/lock``, checks again, and starts one. ``jail/pid`` records the
host pid and start time of the jail's PID 1, which :func:`stop_jail` kills:
the kernel then kills every process of the jail's PID namespace.

Why a server over a socket: the socket is bound by the host and only its
listening descriptor enters the jail, so nothing inside sees a path to it; a
connection per command lets any number of threads and processes run commands
at once, and a client that goes away (Ctrl-C, a dead process) hangs up,
which kills its command's group.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sandbox_sdk import errors, protocol
from sandbox_sdk.models import TIMEOUT_EXIT_CODE, ExecuteResponse
from sandbox_sdk.network import NetworkPolicy
from sandbox_sdk.provider_kit.egress_proxy import EGRESS_PORT, start_proxy
from sandbox_sdk.provider_kit.host_process import start_time
from sandbox_sdk.providers.bwrap import _scripts

if TYPE_CHECKING:
    from sandbox_sdk.providers.bwrap.sandbox import Jail, JailSettings

SOCKET_FILE = "socket"
#: The pid and start time of the jail's egress proxy (``create(network=NetworkPolicy(...))``).
EGRESS_PID_FILE = "egress-pid"
LOCK_FILE = "lock"
PID_FILE = "pid"
LOG_FILE = "log"
SCRIPTS_DIR = "scripts"
#: The operation server and its two spare workers count towards the jail's
#: process limit: under this limit a jail runs none (its file operations
#: start ``python3`` each), leaving the processes to its commands.
MIN_PROCESSES_FOR_SERVER = 64
LISTEN_BACKLOG = 128
HEADER = struct.Struct(">I")
FRAME = struct.Struct(">cI")
#: How long a new jail may take to report its PID 1.
START_SECONDS = 30.0
#: How long past its own timeout a command's reply may take (the server
#: enforces the timeout; this only guards against a jail that stopped
#: answering).
REPLY_GRACE_SECONDS = 30.0
#: How long the jail's server may take to connect to a port in the jail and answer.
CONNECT_REPLY_SECONDS = 30.0
#: How long a cancelled command's kill may take to be confirmed.
KILL_SECONDS = 5.0
#: How often a blocked client looks at its cancel flag.
CANCEL_POLL_SECONDS = 0.1
LOG_TAIL_BYTES = 2000
#: Tries of a command whose connection broke before the jail said it started
#: it (a resend is safe then): a jail that ended meanwhile (idle, or killed)
#: is started again for the second.
SEND_ATTEMPTS = 2
#: A jail with no command for this long and no process left but its server
#: ends by itself (a sandbox nobody deletes keeps no idle server); the next
#: command starts a new one.
IDLE_EXIT_SECONDS = 60.0


class Expiry(NamedTuple):
    """When the jail's server ends the jail by itself: the sandbox's TTL
    deadline (epoch seconds) and idle timeout, measured against the mtime of
    ``usage_file``."""

    expires_at: float | None = None
    idle_timeout: float | None = None
    usage_file: Path | None = None


def _optional(value: float | None) -> str:
    return "-" if value is None else repr(value)


def _check_env(env: dict[str, str]) -> None:
    if any("\0" in text for item in env.items() for text in item):
        raise errors.InvalidArgumentError("a NUL character in an environment variable")


class JailClient:
    """The jail of the sandbox whose state is in ``directory``."""

    def __init__(self, jail: Jail, settings: JailSettings, directory: Path, expiry: Expiry) -> None:
        self.jail = jail
        self.settings = settings
        self.directory = directory
        self.expiry = expiry

    def run(
        self,
        script: str,
        pass_fds: Sequence[int],
        *,
        channel: bool = False,
        env: dict[str, str],
        timeout: float,
        max_output_bytes: int,
        cancelled: threading.Event | None = None,
    ) -> ExecuteResponse:
        """Run ``bash -c script`` in the jail (started if need be), with a
        connection to the operation server on ``protocol.CHANNEL_FD`` if
        ``channel`` (and the server runs). Ctrl-C, or
        ``cancelled`` being set, kills the command's group before this raises
        (``KeyboardInterrupt``) or returns (``None`` output, exit ``None``)."""
        _check_env(env)
        request = json.dumps(
            {
                "command": script,
                "env": env,
                "timeout": timeout,
                "max_output": max_output_bytes,
                "fds": list(pass_fds),
                **({"channel_fd": protocol.CHANNEL_FD} if channel else {}),
            },
            ensure_ascii=False,
        ).encode("utf-8", "surrogateescape")
        data = HEADER.pack(len(request)) + request
        for _attempt in range(SEND_ATTEMPTS):
            with self._connect() as conn:
                reader = _FrameReader(conn, time.monotonic() + timeout + REPLY_GRACE_SECONDS, cancelled)
                try:
                    try:
                        _send_request(conn, data, pass_fds)
                        first = reader.frame()
                    except (BrokenPipeError, ConnectionResetError, EOFError):
                        continue  # the jail ended before it started the command: send it again
                    return self._reply(reader, first, max_output_bytes)
                except _Cancelled:
                    self._kill(conn, reader)
                    return ExecuteResponse(output="", exit_code=None)
                except (EOFError, ConnectionResetError):
                    if not self.directory.exists():
                        raise errors.SandboxNotFoundError(
                            "the sandbox was deleted during the command"
                        ) from None
                    raise errors.SandboxRuntimeError(
                        f"the sandbox's jail ended during the command: {self.log_tail()}"
                    ) from None
                except TimeoutError:  # the jail stopped answering: the command counts as timed out
                    self._kill(conn, reader)
                    return ExecuteResponse(output="", exit_code=TIMEOUT_EXIT_CODE, timed_out=True)
                except BaseException:
                    self._kill(conn, reader)
                    raise
        raise errors.SandboxRuntimeError(
            f"the sandbox's jail refused the command {SEND_ATTEMPTS} times: {self.log_tail()}"
        )

    def connect_port(self, port: int) -> socket.socket:
        """A TCP connection to ``127.0.0.1:port`` inside the jail (started if
        need be), made by the jail's server in the jail's network namespace
        and handed over as a descriptor; ``ConnectionRefusedError`` (an
        ``OSError``) if nothing there accepts it."""
        with self._connect() as conn:
            return _socket_from_jail(conn, {"connect": port}, f"port {port} in the sandbox")

    @staticmethod
    @staticmethod
    def _reply(reader: _FrameReader, first: tuple[bytes, bytes], max_output_bytes: int) -> ExecuteResponse:
        """The command's output and status, from its first frame on."""
        output = bytearray()
        kind, payload = first
        while True:
            if kind == b"x":
                status = json.loads(payload)
                return ExecuteResponse(
                    output=output.decode("utf-8", "replace"),
                    exit_code=status["exit_code"],
                    timed_out=status["timed_out"],
                    truncated=status["truncated"],
                )
            if kind == b"o":
                output += payload[: max_output_bytes - len(output)]
            kind, payload = reader.frame()

    @staticmethod
    def _kill(conn: socket.socket, reader: _FrameReader) -> None:
        """Ask the server to kill the command's group and wait (bounded) for
        its last frame, which says it is done; a hang-up kills it too."""
        with contextlib.suppress(OSError):
            conn.sendall(b"k")
            reader.deadline = time.monotonic() + KILL_SECONDS
            reader.cancelled = None
            with contextlib.suppress(EOFError, TimeoutError):
                while reader.frame()[0] != b"x":
                    pass

    def _connect(self) -> socket.socket:
        """A connection to the running jail, started first if there is none."""
        try:
            return _connect(self.directory)
        except (FileNotFoundError, ConnectionRefusedError):
            pass
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
        except FileNotFoundError:
            raise errors.SandboxNotFoundError(f"the sandbox of {self.directory.parent} was deleted") from None
        with _locked(self.directory / LOCK_FILE):
            try:
                return _connect(self.directory)
            except (FileNotFoundError, ConnectionRefusedError):
                self._start()
            return _connect(self.directory)

    def _start_egress_proxy(self, policy: NetworkPolicy, jail_pid: int) -> None:
        """The proxy that is the jail's only way out (``provider_kit.egress_proxy``),
        on a listening socket the jail's server makes on the jail's loopback."""
        with _connect(self.directory) as conn:
            listener = _socket_from_jail(conn, {"listen": EGRESS_PORT}, "the egress proxy's port")
        with listener, open(self.directory / LOG_FILE, "ab") as log:
            pid = start_proxy(listener.fileno(), policy, jail_pid, log.fileno())
        (self.directory / EGRESS_PID_FILE).write_text(f"{pid} {start_time(pid)}\n")

    def _start(self) -> None:
        """Start a jail over a new listening socket (what is left of an old
        one killed first); called holding the lock. Its server inherits the
        socket, so connections queue until it accepts them."""
        stop_jail(self.directory)
        address = self.directory / SOCKET_FILE
        with contextlib.suppress(FileNotFoundError):
            address.unlink()
        with contextlib.ExitStack() as stack:
            listener = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            with _directory_fd(self.directory) as dir_fd:
                listener.bind(f"/proc/self/fd/{dir_fd}/{SOCKET_FILE}")
            listener.listen(LISTEN_BACKLOG)
            usage_fd = -1
            if self.expiry.usage_file is not None:
                usage_fd = os.open(self.expiry.usage_file, os.O_RDONLY | os.O_CLOEXEC)
                stack.callback(os.close, usage_fd)
            scripts = self.directory / SCRIPTS_DIR
            _scripts.install(scripts)
            self.jail.own(scripts)
            server_args = [
                str(listener.fileno()),
                _optional(self.settings.limits.cpu_seconds),
                _optional(self.expiry.expires_at),
                _optional(self.expiry.idle_timeout),
                "-" if usage_fd < 0 else str(usage_fd),
                repr(IDLE_EXIT_SECONDS),
                _scripts.JAIL_PATH,
                _scripts.server_name() if self._keeps_a_server() else "-",
            ]
            info_read, info_write = os.pipe()
            stack.callback(os.close, info_read)
            try:
                log = stack.enter_context(open(self.directory / LOG_FILE, "wb"))
                inherited = (listener.fileno(), info_write, *([usage_fd] if usage_fd >= 0 else []))
                self.jail.start(self.settings, scripts, server_args, info_write, inherited, log.fileno())
            finally:
                os.close(info_write)
            info = _read_info(info_read)
        if info is None:
            raise errors.SandboxRuntimeError(f"the bwrap jail did not start: {self.log_tail()}")
        pid = int(info["child-pid"])
        (self.directory / PID_FILE).write_text(f"{pid} {start_time(pid)}\n")
        if isinstance(self.settings.network, NetworkPolicy):
            try:
                self._start_egress_proxy(self.settings.network, pid)
            except OSError as exc:  # the jail runs with no way out (its proxy's port is closed)
                raise errors.SandboxRuntimeError(f"the sandbox's egress proxy did not start: {exc}") from exc

    def _keeps_a_server(self) -> bool:
        processes = self.settings.limits.processes
        return processes is None or processes >= MIN_PROCESSES_FOR_SERVER

    def log_tail(self) -> str:
        """The end of what the jail's bwrap and server wrote to stderr."""
        try:
            with open(self.directory / LOG_FILE, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
                return log.read().decode("utf-8", "replace").strip() or "(no message)"
        except FileNotFoundError:
            return "(no log)"


class _Cancelled(Exception):
    """The caller cancelled the command."""


class _FrameReader:
    """Reads the server's frames; ``deadline`` bounds the wait for each,
    ``cancelled`` interrupts it."""

    def __init__(self, conn: socket.socket, deadline: float, cancelled: threading.Event | None) -> None:
        self.conn = conn
        self.deadline = deadline
        self.cancelled = cancelled

    def frame(self) -> tuple[bytes, bytes]:
        kind, length = FRAME.unpack(self._exactly(FRAME.size))
        return kind, self._exactly(length)

    def _exactly(self, size: int) -> bytes:
        buffer = bytearray(size)
        view = memoryview(buffer)
        filled = 0
        while filled < size:
            self._wait_readable()
            count = self.conn.recv_into(view[filled:])
            if count == 0:
                raise EOFError("the jail hung up")
            filled += count
        return bytes(buffer)

    def _wait_readable(self) -> None:
        while True:
            if self.cancelled is not None and self.cancelled.is_set():
                raise _Cancelled
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the jail did not answer")
            ready, _, _ = select.select([self.conn], [], [], min(left, CANCEL_POLL_SECONDS))
            if ready:
                return


def _receive_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _send_request(conn: socket.socket, data: bytes, pass_fds: Sequence[int]) -> None:
    """Send the whole request, and nothing once it is sent: the server may have read
    it, run the command, answered and hung up by then (under load), and even an empty
    send to a peer that has hung up fails with ``EPIPE``, which would pass for a
    connection broken before the start, and the command would be sent again."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", pass_fds))] if pass_fds else []
    sent = conn.sendmsg([data], ancillary)
    if sent < len(data):
        conn.sendall(data[sent:])


def _socket_from_jail(conn: socket.socket, request: dict[str, int], what: str) -> socket.socket:
    """A socket the jail's server made for ``request`` (a connection to, or a
    listener on, a port of the jail's loopback), passed over ``conn``;
    ``ConnectionRefusedError`` with the server's reason if it could not."""
    data = json.dumps(request).encode()
    conn.settimeout(CONNECT_REPLY_SECONDS)
    _send_request(conn, HEADER.pack(len(data)) + data, ())
    header, ancillary, _flags, _address = conn.recvmsg(FRAME.size, socket.CMSG_SPACE(4))
    if len(header) < FRAME.size:
        raise ConnectionResetError(f"the jail did not answer for {what}")
    kind, length = FRAME.unpack(header)
    if kind == b"c":
        for level, message_type, payload in ancillary:
            if level == socket.SOL_SOCKET and message_type == socket.SCM_RIGHTS and len(payload) >= 4:
                made = socket.socket(fileno=array.array("i", payload[:4])[0])
                made.setblocking(True)
                return made
        raise ConnectionResetError(f"the jail sent no socket for {what}")
    reason = _receive_exactly(conn, length).decode("utf-8", "replace")
    raise ConnectionRefusedError(f"{what}: {reason}")


def _connect(directory: Path) -> socket.socket:
    """A connection to the jail's socket (through a descriptor of its
    directory: a socket path may not exceed 107 bytes)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _directory_fd(directory) as dir_fd:
            conn.connect(f"/proc/self/fd/{dir_fd}/{SOCKET_FILE}")
    except BaseException:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def _directory_fd(directory: Path) -> Iterator[int]:
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _read_info(fd: int) -> dict[str, Any] | None:
    """What bwrap writes to ``--info-fd`` (its PID 1's host pid), or None if
    it ended without (it then closes the pipe)."""
    data = b""
    deadline = time.monotonic() + START_SECONDS
    while (left := deadline - time.monotonic()) > 0 and select.select([fd], [], [], left)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        info: dict[str, Any] = json.loads(data)
    except ValueError:
        return None
    return info


def stop_jail(directory: Path) -> None:
    """Kill the jail recorded in ``directory`` with everything in it, and its
    egress proxy, if they still run, and wait until they have ended."""
    _kill_recorded(directory / PID_FILE)  # PID 1 exits after every other process of its namespace
    _kill_recorded(directory / EGRESS_PID_FILE)
    for name in (PID_FILE, EGRESS_PID_FILE, SOCKET_FILE):
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()


def _kill_recorded(record: Path) -> None:
    """Kill the process ``record`` names (its pid and start time), if that
    process still runs, and wait (bounded) until it has exited."""
    try:
        pid_text, _, started = record.read_text().strip().partition(" ")
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        pidfd = os.pidfd_open(int(pid_text))
    except ProcessLookupError:
        return
    try:
        if start_time(int(pid_text)) == started:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            select.select([pidfd], [], [], START_SECONDS)  # readable once it has exited
    finally:
        os.close(pidfd)
