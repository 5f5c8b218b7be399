"""The server inside a sandbox's long-lived bubblewrap jail (stdlib only,
Python 3.8+; it runs with the host's ``python3`` as the jail's one command).

It is the jail's PID 1 (bwrap's ``--as-pid-1``): the kernel delivers a
signal from inside a PID namespace to its PID 1 only if that process handles
it, and this one handles none, so no command can kill it, not even with
``kill -9 -1`` or ``kill -9 1``; a command that kills everything else still
gets its exit status back, and the jail serves the next one. Being PID 1, it
inherits every process whose parent ended and reaps them all (``Reaper``).

It accepts connections on a listening unix socket it inherits (the socket
file lives in the sandbox's host state directory, which the jail cannot see;
only this descriptor reaches in), one command per connection, and runs each
as ``bash -c`` in a new session, so in a process group of its own. Wire
format, all integers big-endian:

* request: a 4-byte length and that many bytes of JSON ``{"command",
  "env", "timeout", "max_output", "fds"}`` and optionally ``"channel_fd"``;
  descriptors the command inherits (a long command's in-memory file) travel
  with it as ``SCM_RIGHTS``, and ``fds`` says which number the command
  expects each under; ``channel_fd``: the number under which the command
  gets a connection to the operation server (see below), if it runs.
* reply: frames of a type byte and a 4-byte length: ``s`` just before the
  command starts (a client that sees the connection end before it knows the
  command never ran, and may send it again), ``o`` output (stdout and stderr
  merged, at most ``max_output`` bytes in all), then one ``x`` whose JSON is
  ``{"exit_code", "timed_out", "truncated"}``.
* a ``k`` from the client, or its hang-up, kills the command's group (the
  ``x`` frame then follows a ``k``).
* a request ``{"connect": PORT}`` runs no command: the server connects to
  ``127.0.0.1:PORT`` from inside the jail's network namespace and replies
  one ``c`` frame carrying the connected socket (``SCM_RIGHTS``), or an
  ``e`` frame with the error's text. The host's port forwarder
  (``sandbox.expose_port``) asks this once per forwarded connection.
* a request ``{"listen": PORT}`` runs no command either: the server makes a
  socket listening on the jail's ``127.0.0.1:PORT`` and replies with it in a
  ``c`` frame; a sandbox with a network policy's host-side egress proxy
  serves it.

What a command leaves behind follows one rule, however the command ends
(exit, timeout, cancel, hang-up): whatever is in its process group then is
killed, and a process that left the group (``setsid``, as ``start()``'s
supervisor and the operation server do) keeps running until the jail ends.
At an exit, output is still collected for ``DRAIN_SECONDS`` from what the
command left running, and what is in its group has as long to end or leave
it (``cmd &`` returns before ``cmd`` runs, so a ``setsid`` may be under way);
at the timeout (exit code 124), a cancel or a hang-up the group is killed at
once. A signal death reads 128 + N.

The server also runs the sandbox's operation server (remote/server.py's
``serve_channel``), forked before its first thread, from the SDK's scripts
the host installed read-only (``SCRIPTS_DIR``): a command whose request asks
for the channel gets, on descriptor ``channel_fd``, a connection the server
made and handed to the operation server (``SCM_RIGHTS`` over a socket pair
only the two hold). Like this server, it and its workers cannot be traced
(they inherit ``make_undumpable``), so no command can change what a file
operation runs or answers; a command can kill or stop it (it is not PID 1),
and file operations then run from ``python3`` as they would without it.

A jail that has had no connection for IDLE_EXIT seconds and runs no
process but the server (and the operation server's) ends (so sandboxes nobody deletes do not keep idle
servers); the next command starts it again. The server ends the jail by
exiting (the kernel then kills every other process of its PID namespace):
at the sandbox's expiry, known from its TTL deadline and the host's
last-used file (an inherited read-only descriptor, read with ``fstat``: its
mtime is the last use, and a link count of 0 means the sandbox's directory is
gone). The host ends it by killing the server, from outside the namespace; a
client that finds the server gone does so before it starts a new jail.

Arguments: LISTEN_FD CPU_SECONDS EXPIRES_AT IDLE_TIMEOUT USAGE_FD IDLE_EXIT
SCRIPTS_DIR SERVER_SCRIPT, ``-`` for none. ``CPU_SECONDS`` is set on each command (soft and hard, by bash's
``ulimit -t`` before the command), not on the server, whose CPU time adds up
over the sandbox's life.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

HEADER = struct.Struct(">I")
FRAME = struct.Struct(">cI")
READ_BYTES = 1 << 20
MAX_REQUEST_BYTES = 1 << 20
MAX_FDS = 8
DRAIN_SECONDS = 0.2
POLL_SECONDS = 0.05
SETTLE_POLL_SECONDS = 0.01
TIMEOUT_EXIT_CODE = 124
EXPIRY_CHECK_SECONDS = 2.0
#: How long connecting to a port inside the jail may take.
CONNECT_SECONDS = 10.0
#: Each connection is served by a thread; a small stack keeps the server's
#: address space (under the jail's ``memory_bytes`` limit) small.
THREAD_STACK_BYTES = 256 * 1024
PR_SET_DUMPABLE = 4


def receive_request(conn: socket.socket) -> Tuple[Dict[str, Any], List[int]]:
    """The request and the descriptors sent with it."""
    fds: List[int] = []
    data = b""
    need = HEADER.size
    while len(data) < need:
        chunk, ancdata, _flags, _addr = conn.recvmsg(
            min(need - len(data), READ_BYTES), socket.CMSG_SPACE(MAX_FDS * 4)
        )
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(payload[: len(payload) - len(payload) % 4])
                fds.extend(received)
        if not chunk:
            raise EOFError("the client hung up before its request was complete")
        data += chunk
        if len(data) == HEADER.size and need == HEADER.size:
            (length,) = HEADER.unpack(data)
            if length > MAX_REQUEST_BYTES:
                raise ValueError("request too large")
            need += length
    return json.loads(data[HEADER.size :].decode("utf-8")), fds


def send_frame(conn: socket.socket, kind: bytes, payload: bytes) -> None:
    conn.sendall(FRAME.pack(kind, len(payload)) + payload)


def settle_group(pgid: int, until: float) -> None:
    """Wait (until ``until`` at most) for the rest of a process group to end
    or leave it: ``cmd &`` returns before ``cmd`` is started, so a
    ``setsid`` may be under way when the command itself exits."""
    while time.monotonic() < until:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(SETTLE_POLL_SECONDS)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def exit_code(status: int) -> int:
    """A wait status as a shell reads it: 128 + N for a death by signal N."""
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


class Command:
    """A command the server started, and its exit code once it is reaped."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.ended = threading.Event()
        self.code = 0

    def exited(self, code: int) -> None:
        self.code = code
        self.proc.returncode = code  # reaped: the Popen must never wait for its pid itself
        self.ended.set()


class Reaper:
    """Waits for every child of the server. As the jail's PID 1 the server
    inherits each process whose parent ended (a ``setsid`` daemon, a double
    fork), and must reap them: a zombie counts towards the jail's process
    limit. A command's own status goes to the thread serving it; commands
    are waited for here only, as a ``Popen.wait`` would race with this
    thread for them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.commands: Dict[int, Command] = {}
        self.spawned = threading.Event()

    def start(self, argv: List[str], **options: Any) -> Command:
        # under the lock: a command that ends at once is known before its status is looked up
        with self.lock:
            command = Command(subprocess.Popen(argv, **options))
            self.commands[command.proc.pid] = command
        self.spawned.set()
        return command

    def run(self) -> None:
        while True:
            self.spawned.clear()
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:  # no child at all until the next command
                self.spawned.wait()
                continue
            with self.lock:
                command = self.commands.pop(pid, None)
            if command is not None:
                command.exited(exit_code(status))


class OperationServer:
    """The operation server this one forked, and the end of the socket pair
    it takes connections from."""

    def __init__(self, pid: int, control: socket.socket) -> None:
        self.pid = pid
        self.control: Optional[socket.socket] = control
        self.lock = threading.Lock()

    def connect(self) -> Optional[socket.socket]:
        """A connection to the operation server for one command, or ``None``
        if it is gone or does not keep up (its queue full: stopped, say);
        the command then runs its script with ``python3``."""
        with self.lock:
            control = self.control
        if control is None:
            return None
        ours, theirs = socket.socketpair()
        try:
            control.sendmsg(
                [b"c"],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ours.fileno()]))],
                socket.MSG_DONTWAIT,
            )
        except BlockingIOError:
            theirs.close()
            return None
        except OSError:  # no process holds its end any more: it is gone for good
            with self.lock:
                self.control = None
            control.close()
            theirs.close()
            return None
        finally:
            ours.close()
        return theirs


def start_operation_server(scripts: str, name: str, cpu_seconds: Optional[int]) -> Optional[OperationServer]:
    """Fork the operation server from the installed server script (its body
    without the last statement, ``main(OPS)``), while this process has one
    thread; ``None`` if the script cannot be read."""
    try:
        with open(os.path.join(scripts, name + ".py"), "rb") as f:
            source = f.read()
    except OSError as exc:
        print("jail server: no operation server:", repr(exc), file=sys.stderr, flush=True)
        return None
    body, _, last = source.rstrip().rpartition(b"\n")
    if last != b"main(OPS)":
        print("jail server: no operation server: unexpected script", file=sys.stderr, flush=True)
        return None
    code = compile(body, "sandbox_sdk/remote/server.py", "exec")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            namespace: Dict[str, Any] = {"__name__": "sbx_server"}
            exec(code, namespace)
            namespace["serve_channel"](theirs.detach(), os.fsencode(scripts), cpu_seconds)
        finally:
            os._exit(0)
    theirs.close()
    return OperationServer(pid, ours)


class Server:
    def __init__(
        self, cpu_seconds: Optional[int], idle_exit: float, operations: Optional[OperationServer] = None
    ) -> None:
        self.idle_exit = idle_exit
        self.operations = operations
        self.reaper = Reaper()
        self.lock = threading.Lock()
        self.active = 0  # connections being served
        self.last_active = time.monotonic()
        # bash's own ulimit sets soft and hard limit before the command runs
        # (no extra exec; a preexec_fn would be unsafe with threads)
        self.setup = [] if cpu_seconds is None else ["ulimit -t {}".format(cpu_seconds)]

    def serve(self, conn: socket.socket) -> None:
        with self.lock:
            self.active += 1
        try:
            self.serve_one(conn)
        finally:
            with self.lock:
                self.active -= 1
                self.last_active = time.monotonic()

    def idle_and_empty(self) -> bool:
        """Nothing to keep the jail for: no connection for ``idle_exit``
        seconds and no process in it but this one."""
        with self.lock:
            if self.active or time.monotonic() - self.last_active < self.idle_exit:
                return False
        others = set(int(name) for name in os.listdir("/proc") if name.isdigit()) - {os.getpid()}
        if self.operations is not None:  # the operation server and its spare workers
            others = set(pid for pid in others if self.operations.pid not in (pid, parent_of(pid)))
        return not others

    def serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                request, fds = receive_request(conn)
            except (OSError, EOFError, ValueError) as exc:
                print("jail server: a request was not received:", repr(exc), file=sys.stderr, flush=True)
                return
            if "connect" in request or "listen" in request:
                for fd in fds:
                    os.close(fd)
                if "connect" in request:
                    self.connect_port(conn, int(request["connect"]))
                else:
                    self.listen_port(conn, int(request["listen"]))
                return
            wanted_fds = list(request["fds"])
            channel = request.get("channel_fd")
            if channel is not None and self.operations is not None:
                connection = self.operations.connect()
                if connection is not None:
                    fds.append(connection.detach())
                    wanted_fds.append(channel)
            # each descriptor arrives under a new number: bash moves it to the
            # one the command names before anything else runs (on the same
            # line, so bash's line numbers in messages stay the command's)
            setup = self.setup + [
                "exec {}<&{} {}<&-".format(wanted, got, got)
                for wanted, got in zip(wanted_fds, fds)  # noqa: B905 - strict= needs Python 3.10
                if wanted != got
            ]
            command = "".join(step + "; " for step in setup) + request["command"]
            try:
                send_frame(conn, b"s", b"")  # before the command can run, so the client may count on it
                started = self.reaper.start(
                    ["bash", "-c", command],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=request["env"],
                    start_new_session=True,
                    pass_fds=fds,
                )
            except OSError as exc:
                message = "cannot start bash: {}\n".format(exc).encode()
                self.reply(conn, message, {"exit_code": 127, "timed_out": False, "truncated": False})
                return
            finally:
                for fd in fds:
                    os.close(fd)
            try:
                self.relay(conn, started, float(request["timeout"]), int(request["max_output"]))
            except OSError:
                pass  # the client went away: nothing to answer
            finally:
                kill_group(started.proc.pid)
                if started.proc.stdout is not None:
                    started.proc.stdout.close()
                started.ended.wait()

    def connect_port(self, conn: socket.socket, port: int) -> None:
        """A connection to the jail's ``127.0.0.1:port``, handed to the client."""
        try:
            target = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_SECONDS)
        except OSError as exc:
            send_frame(conn, b"e", str(exc).encode())
            return
        with target:
            target.settimeout(None)
            rights = array.array("i", [target.fileno()])
            conn.sendmsg([FRAME.pack(b"c", 0)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])

    def listen_port(self, conn: socket.socket, port: int) -> None:
        """A socket listening on the jail's ``127.0.0.1:port``, handed to the
        client: the egress proxy, which serves it from the host's network
        namespace. No process of the jail holds it (this server closes its
        copy), so none can take the port or accept on it in the proxy's place."""
        try:
            listener = socket.create_server(("127.0.0.1", port), backlog=128)
        except OSError as exc:
            send_frame(conn, b"e", str(exc).encode())
            return
        with listener:
            rights = array.array("i", [listener.fileno()])
            conn.sendmsg([FRAME.pack(b"c", 0)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])

    def reply(self, conn: socket.socket, output: bytes, status: Dict[str, Any]) -> None:
        try:
            if output:
                send_frame(conn, b"o", output)
            send_frame(conn, b"x", json.dumps(status).encode())
        except OSError:
            pass

    def relay(self, conn: socket.socket, command: Command, timeout: float, max_output: int) -> None:
        """Stream the command's output until it ends, times out or the client
        cancels; then report how it ended."""
        assert command.proc.stdout is not None
        pipe = command.proc.stdout.fileno()
        pgid = command.proc.pid
        room = max_output
        truncated = timed_out = cancelled = False
        deadline = time.monotonic() + timeout
        drain_until: Optional[float] = None
        with selectors.DefaultSelector() as selector:
            selector.register(pipe, selectors.EVENT_READ, "pipe")
            selector.register(conn, selectors.EVENT_READ, "client")
            while True:
                now = time.monotonic()
                if drain_until is None and command.ended.is_set():
                    drain_until = now + DRAIN_SECONDS
                limit = deadline if drain_until is None else min(deadline, drain_until)
                if now >= limit:
                    timed_out = not command.ended.is_set()
                    break
                events = selector.select(min(limit - now, POLL_SECONDS))
                if any(key.data == "client" for key, _ in events):
                    if conn.recv(1) == b"k":
                        cancelled = True
                        break
                    raise ConnectionResetError("the client hung up")
                if not events:
                    continue
                block = os.read(pipe, READ_BYTES)
                if not block:  # every holder of the pipe closed it
                    break
                if len(block) > room:
                    truncated = True
                    block = block[:room]
                if block:
                    room -= len(block)
                    send_frame(conn, b"o", block)
        if not (timed_out or cancelled):
            # the pipe can close long before the command ends (``exec >log``)
            timed_out = not command.ended.wait(max(0.0, deadline - time.monotonic()))
        if timed_out or cancelled:
            kill_group(pgid)
        command.ended.wait()
        settle_group(pgid, min(deadline, time.monotonic() + DRAIN_SECONDS))
        kill_group(pgid)
        code = TIMEOUT_EXIT_CODE if timed_out else command.code
        self.reply(conn, b"", {"exit_code": code, "timed_out": timed_out, "truncated": truncated})


def expired(expires_at: Optional[float], idle_timeout: Optional[float], usage_fd: Optional[int]) -> bool:
    """Past the TTL deadline, idle too long, or removed (the usage file has
    no name left: the sandbox's directory was deleted by whatever means)."""
    now = time.time()
    if expires_at is not None and now >= expires_at:
        return True
    if usage_fd is None:
        return False
    usage = os.fstat(usage_fd)
    return usage.st_nlink == 0 or (idle_timeout is not None and now - usage.st_mtime >= idle_timeout)


def watch(
    server: Server, expires_at: Optional[float], idle_timeout: Optional[float], usage_fd: Optional[int]
) -> None:
    """Ends the jail once the sandbox has expired, or once it has been idle
    and empty for a while (the next command starts it again): the server is
    the PID namespace's first process, whose exit makes the kernel kill every
    other."""
    while not (server.idle_and_empty() or expired(expires_at, idle_timeout, usage_fd)):
        time.sleep(EXPIRY_CHECK_SECONDS)
    os._exit(0)


def parent_of(pid: int) -> int:
    """The parent of process ``pid``; 0 if it is gone."""
    try:
        with open("/proc/{}/stat".format(pid), "rb") as f:
            return int(f.read().rpartition(b")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def make_undumpable() -> None:
    """No process of the jail may trace this one or open its descriptors
    through ``/proc`` (the listening socket, the usage file)."""
    import ctypes

    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def optional(text: str, kind: Any) -> Any:
    return None if text == "-" else kind(text)


def main(argv: List[str]) -> None:
    listen_fd = int(argv[0])
    cpu_seconds = optional(argv[1], int)
    expires_at = optional(argv[2], float)
    idle_timeout = optional(argv[3], float)
    usage_fd = optional(argv[4], int)
    idle_exit = float(argv[5])
    scripts, server_script = optional(argv[6], str), optional(argv[7], str)
    make_undumpable()
    operations = None
    if scripts is not None and server_script is not None:  # before any thread (fork)
        operations = start_operation_server(scripts, server_script, cpu_seconds)
    # Python's one handler (SIGINT's) would let a command raise KeyboardInterrupt in the server:
    # with none, a signal sent from inside the jail to its PID 1 is dropped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    threading.stack_size(THREAD_STACK_BYTES)
    server = Server(cpu_seconds, idle_exit, operations)
    threading.Thread(target=server.reaper.run, daemon=True).start()
    threading.Thread(target=watch, args=(server, expires_at, idle_timeout, usage_fd), daemon=True).start()
    listener = socket.socket(fileno=listen_fd)
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # out of descriptors, say: the next accept may succeed
            time.sleep(POLL_SECONDS)
            continue
        try:
            threading.Thread(target=server.serve, args=(conn,), daemon=True).start()
        except RuntimeError as exc:  # no thread to be had (the process limit): that client is refused
            print("jail server: a client was refused:", repr(exc), file=sys.stderr, flush=True)
            conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
