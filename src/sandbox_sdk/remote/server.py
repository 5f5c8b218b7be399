"""The operation server: one long-lived ``python3`` per user, scratch
directory and SDK version, that runs the other scripts without starting an
interpreter for each (docs/protocol.md, "The operation server").

``serve`` starts it: it takes a lock (one server at a time), listens on a
loopback port, writes ``<port> <token> <pid> <proof>`` to a file only its
user can read, and forks the server, which outlives the command. A served
command asks it from bash, before it would start ``python3``
(``protocol.server_request``):

1. bash connects to the port; the worker that accepts sends the proof
   first, and bash goes on only if it is the one in the file (a listener
   that took a stale port learns nothing);
2. bash sends ``<token> <pid> <script> <crc>``:
   its own pid (``$BASHPID``: the process that holds the descriptors), and
   the installed script and CRC-32 it would run;
3. a worker the server forked ahead (``Server``) takes the connection and
   answers ``+`` if the token is right, the process ``pid`` shares the
   server's namespaces, root and rights (``Credentials``), the script is
   the installed one it has compiled, and the command's standard input,
   output and error (which bash keeps on fds 5, 4 and 6) open through
   ``/proc/<pid>/fd``; otherwise ``-``, and the command starts ``python3``
   as it always did;
4. bash answers ``+`` within ten seconds (else it goes on alone, and the
   worker, which has taken nothing yet, gives up): the worker enters the
   command's directory, umask and environment, runs the script on the
   command's descriptors and sends its exit status, which bash exits with.

The worker dies with the command: a ``SIGIO`` when bash's end of the
connection closes (bash killed at a timeout, say) kills the worker's
process group. The server exits when it has had no request for ``idle``
seconds, or when its file no longer names it.
"""

from __future__ import annotations

import posix
import sys

from sandbox_sdk.remote._runtime import TYPE_CHECKING, Fail, path_arg

if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Set, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs

    class Served(TypedDict):
        """``started``: ``False`` if a server of this version was running already."""

        started: bool


#: How long a worker waits for each of bash's two lines.
HANDSHAKE_SECONDS = 10.0
#: How often the idle server looks at the clock and at its file.
TICK_SECONDS = 1.0
#: Workers forked ahead of the connections they will serve.
SPARES = 2
#: The bash side's copies of its standard input, output and error.
STDIN_FD, STDOUT_FD, STDERR_FD = 5, 4, 6
#: What the scripts and the workers import, loaded once by the server rather than by each worker.
PRELOAD = (
    *("_json", "binascii", "errno", "fcntl", "hashlib", "hmac", "json", "re", "select", "shutil"),
    *("signal", "stat", "tarfile", "tempfile", "time", "traceback", "zlib"),
)
#: The namespaces a command's bash must share with the server (its pid is
#: the server's pid for it, its paths and its loopback are the server's).
NAMESPACES = (b"mnt", b"pid", b"net", b"user")
#: The lines of ``/proc/<pid>/status`` that a command must share with the server.
STATUS_RIGHTS = (
    *(b"Uid", b"Gid", b"Groups", b"NoNewPrivs", b"Seccomp", b"Seccomp_filters"),
    *(b"CapInh", b"CapPrm", b"CapEff", b"CapBnd", b"CapAmb"),
)
#: ``O_APPEND`` in ``/proc/<pid>/fdinfo``'s octal ``flags``.
O_APPEND_FLAG = 0o2000


def serve(args: Args, blobs: Blobs) -> Tuple[Served, Blobs]:
    import fcntl
    import socket

    scripts = path_arg(args, "dir")
    if scripts.endswith(b"%d"):  # as the bootstrap's (protocol.scripts_dir_in)
        scripts = scripts[:-2] + b"%d" % posix.getuid()
    base = scripts + b"/" + path_arg(args, "name")
    if not users_own(posix.lstat(scripts)):
        raise Fail("PERMISSION_DENIED", "the scripts directory is not the user's own", scripts)
    lock = posix.open(
        base + b".lock", posix.O_RDWR | posix.O_CREAT | posix.O_CLOEXEC | posix.O_NOFOLLOW, 0o600
    )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        posix.close(lock)
        return {"started": False}, []
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    token = posix.urandom(16).hex()
    proof = posix.urandom(16).hex()
    port_file = base + b".port"
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = posix.pipe()
    if posix.fork():  # the port file is written once the server's pid is known
        posix.close(write_end)
        posix.read(read_end, 1)
        return {"started": True}, []
    try:  # the server: never back into main(), whose frame is the parent's
        posix.setsid()
        port = listener.getsockname()[1]
        replace_file(
            port_file, b"%d %s %d %s\n" % (port, token.encode("ascii"), posix.getpid(), proof.encode("ascii"))
        )
        posix.close(write_end)
        detach(keep=(lock, listener.fileno()))
        Server(scripts, port_file, (token, proof), (listener, lock), float(args["idle"])).run()
    finally:
        posix._exit(0)


def serve_channel(control: int, scripts: bytes, cpu_seconds: Optional[int]) -> None:
    """The server of a provider's operation channel (bwrap's jail: its
    PID 1 forks this, the jail's first process after it): it runs until its
    provider's end of ``control`` closes, and takes connections the provider
    made and sends over ``control`` (``SCM_RIGHTS``), one a message, rather
    than from a listener anyone can reach: no port file, no token. Scripts
    come from ``scripts``, the provider's read-only directory. Each worker
    takes the CPU limit each command gets (``cpu_seconds``), so that it has
    the rights of the command it serves, as ``Credentials`` requires."""
    import socket

    try:
        posix.setsid()
        detach(keep=(control,))
        channel = socket.socket(fileno=control)
        Server(scripts, None, (None, posix.urandom(16).hex()), (channel, -1), float("inf"), cpu_seconds).run()
    finally:
        posix._exit(0)


#: Keeps :func:`serve_channel`, which no script's ``OPS`` names, in the shipped script.
CHANNEL_SERVER = serve_channel


def users_own(st: posix.stat_result) -> bool:
    """A directory (``lstat``) the user owns and no one else may write: the
    bootstrap's ``own()`` (protocol.BOOTSTRAP), the only directory scripts
    are run from."""
    return st.st_mode & 0o170022 == 0o40000 and st.st_uid == posix.getuid()


def replace_file(path: bytes, data: bytes) -> None:
    """``path`` holds ``data``, whole, for every reader (a temporary file renamed over it)."""
    tmp = b"%s.%s" % (path, posix.urandom(8).hex().encode("ascii"))
    fd = posix.open(tmp, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC, 0o600)
    try:
        posix.write(fd, data)
    finally:
        posix.close(fd)
    posix.replace(tmp, path)


def detach(keep: Tuple[int, ...]) -> None:
    """Standard input, output and error on ``/dev/null``, every other
    descriptor but ``keep`` closed: nothing of the command that started the
    server (its output pipe above all, which its provider reads to the end)
    stays open in it."""
    null = posix.open(b"/dev/null", posix.O_RDWR)
    for fd in (0, 1, 2):
        posix.dup2(null, fd)
    for name in posix.listdir(b"/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:  # noqa: SIM105 - contextlib would cost the server an import
                posix.close(fd)
            except OSError:  # the listing's own descriptor, closed already
                pass


class Server:
    """Keeps ``SPARES`` workers forked ahead, each waiting in ``accept``: a
    connection finds a process ready (a fork's cost is mostly in the pages
    the new process then copies), and the server forks the next while
    that one works."""

    def __init__(
        self,
        scripts: bytes,
        port_file: Optional[bytes],
        secrets: Tuple[Optional[str], str],
        held: Tuple[Any, int],
        idle: float,
        cpu_seconds: Optional[int] = None,
    ) -> None:
        self.scripts = scripts
        self.port_file = port_file  # None: connections come over a provider's channel (serve_channel)
        # What bash sends (no token on a channel), and what the server sends first.
        self.token, self.proof = secrets
        # The listening socket (or the channel), and the lock that makes it the one server (-1: none).
        self.listener, self.lock = held
        self.idle = idle
        self.cpu_seconds = cpu_seconds
        self.compiled: Dict[bytes, Script] = {}  # by installed script name
        self.scanned: Optional[Tuple[int, int]] = None  # the scripts directory's (inode, mtime) when read
        self.own: Credentials  # each spare's, with its CPU limit: made by the spare (fork_spare)
        self.spares: Set[int] = set()
        self.lifeline = self.lifeline_write = -1  # the pipe the spares watch (see run)

    def run(self) -> None:
        import gc
        import time

        for module in PRELOAD:
            __import__(module)
        taken, told = posix.pipe()  # a spare that took a connection writes its pid here
        # Only the server holds the write end: a spare sees the read end's EOF
        # once the server is gone (killed, even), and leaves too.
        self.lifeline, self.lifeline_write = posix.pipe()
        last = time.monotonic()
        held = True  # the server holds objects (the preloaded modules) not yet frozen
        try:
            while True:
                self.spares -= reap()  # a spare killed before it took a connection, say
                held = self.scan() or held
                if held and len(self.spares) < SPARES:
                    # What the server holds stays out of the collector's reach: a worker's
                    # collection would touch (and so copy) every page it shares with the server.
                    # Only a scan that compiled something adds to it.
                    gc.collect()
                    gc.freeze()
                    held = False
                while len(self.spares) < SPARES:
                    try:
                        self.spares.add(self.fork_spare(taken, told))
                    except OSError:  # no process to be had (the sandbox's limit): the next tick tries again
                        break
                if self.took(taken, TICK_SECONDS):
                    last = time.monotonic()
                elif time.monotonic() - last > self.idle or not self.named():
                    break
        finally:  # the spares leave with the server (the lifeline's end)
            if self.port_file is not None and self.named():
                try:  # noqa: SIM105 - as above
                    posix.unlink(self.port_file)
                except OSError:
                    pass

    def took(self, taken: int, wait: float) -> bool:
        """Whether a spare took a connection within ``wait`` seconds (it is
        a spare no more)."""
        import select

        if not select.select([taken], [], [], wait)[0]:
            return False
        self.spares.difference_update(int(pid) for pid in posix.read(taken, 4096).split())
        return True

    def fork_spare(self, taken: int, told: int) -> int:
        pid = posix.fork()
        if pid:
            return pid
        try:  # a spare: one connection, then it ends
            posix.close(taken)
            if self.lock >= 0:
                posix.close(self.lock)  # a worker that outlives the server holds no lock
            posix.close(self.lifeline_write)
            if self.cpu_seconds is not None:
                import resource

                resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds))
            # The checks a request makes, made once on this process: the pages
            # they write are copied from the server's now, not while bash waits.
            self.own = Credentials(b"/proc/self")
            read_or_empty(b"/proc/self/environ")
            conn = self.accept()
            if conn is not None:
                posix.write(told, b"%d\n" % posix.getpid())
                posix.close(told)
                self.listener.close()
                Worker(self, conn).run()
        finally:
            posix._exit(0)

    def accept(self) -> Any:
        """The next connection, from the listener or the channel; ``None``
        once the server is gone. (Non-blocking: another spare may take a
        connection both were woken for.)"""
        import select

        self.listener.setblocking(False)
        while True:
            ready = select.select([self.listener, self.lifeline], [], [])[0]
            if self.lifeline in ready:
                return None
            try:
                conn = self.listener.accept()[0] if self.port_file is not None else self.handed_over()
            except BlockingIOError:
                continue
            if conn is None:  # the provider's end of the channel closed
                return None
            conn.setblocking(True)
            return conn

    def handed_over(self) -> Any:
        """A connection the provider sent over the channel; ``None`` once it closed."""
        import array
        import socket

        data, ancdata, _flags, _addr = self.listener.recvmsg(1, socket.CMSG_SPACE(4))
        if not data:
            return None
        fds = array.array("i")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % 4])
        return socket.socket(fileno=fds[0]) if fds else self.handed_over()

    def named(self) -> bool:
        """Whether the port file still names this server (else another one
        replaced it, or the directory is gone). Opened without following a
        link or blocking: a FIFO put in its place is not this server's. A
        channel's server has no file."""
        if self.port_file is None or self.token is None:
            return True
        try:
            fd = posix.open(self.port_file, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK)
        except OSError:
            return False
        try:
            if posix.fstat(fd).st_mode & 0o170000 != 0o100000:
                return False
            return posix.read(fd, 512).split()[1:2] == [self.token.encode("ascii")]
        except OSError:
            return False
        finally:
            posix.close(fd)

    def scan(self) -> bool:
        """Compile the installed scripts new or changed since the scripts
        directory was last read, when it has changed (and is still the
        user's own, as the bootstrap requires); whether any was compiled."""
        try:
            st = posix.lstat(self.scripts)
        except OSError:
            self.compiled = {}
            return False
        if (st.st_ino, st.st_mtime_ns) == self.scanned:
            return False
        if not users_own(st):
            self.compiled = {}
            return False
        self.scanned = (st.st_ino, st.st_mtime_ns)
        compiled = False
        for name in posix.listdir(self.scripts):
            if name.startswith(b"sbx_") and name.endswith(b".py"):
                script = self.script(name[:-3])
                if script is not None and script is not self.compiled.get(name[:-3]):
                    self.compiled[name[:-3]] = script
                    compiled = True
        return compiled

    def script(self, name: bytes) -> Optional[Script]:
        """Installed script ``name`` as it is now: compiled again if the file
        changed since it was compiled (a damaged copy is never run from a
        cache: its CRC-32 is checked, and the command then replaces it)."""
        path = self.scripts + b"/" + name + b".py"
        try:
            st = posix.lstat(path)
        except OSError:
            return None
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self.compiled.get(name)
        if cached is not None and cached.identity == identity:
            return cached
        import binascii

        try:
            with open(path, "rb") as f:
                source = f.read()
            code = compile(source, path.decode("utf-8", "replace"), "exec")
        except (OSError, SyntaxError, ValueError):
            return None
        return Script(binascii.crc32(source), code, identity, prepared(source, path))


class Script:
    """An installed script compiled: its CRC-32, its code, the file's (inode,
    size, mtime) then, and the namespace its body made (``None`` if it did
    not end in ``main(OPS)``, as a shipped script does)."""

    def __init__(
        self, crc: int, code: Any, identity: Tuple[int, int, int], namespace: Optional[Dict[str, Any]]
    ) -> None:
        self.crc = crc
        self.code = code
        self.identity = identity
        self.namespace = namespace

    def run(self) -> None:
        """What ``python3`` would do with the script: its body (made once, by
        the server, where it can be) and ``main(OPS)``."""
        if self.namespace is None:
            exec(self.code, {"__name__": "__main__"})
        else:
            self.namespace["main"](self.namespace["OPS"])


def prepared(source: bytes, path: bytes) -> Optional[Dict[str, Any]]:
    """The namespace of a shipped script's body, all of it but its last
    statement, ``main(OPS)``: definitions, imports and constants, made once
    instead of by every worker; ``None`` for any other script, or one whose
    body fails."""
    import ast

    tree = ast.parse(source)
    last = tree.body[-1] if tree.body else None
    call = last.value if isinstance(last, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "main"
        and [arg.id for arg in call.args if isinstance(arg, ast.Name)] == ["OPS"]
        and len(call.args) == 1
    ):
        return None
    namespace: Dict[str, Any] = {"__name__": "__main__"}
    body = ast.Module(body=tree.body[:-1], type_ignores=[])
    try:
        exec(compile(body, path.decode("utf-8", "replace"), "exec"), namespace)
    except Exception:  # noqa: BLE001 - run as a whole by each worker then, which reports it
        return None
    return namespace


def reap() -> Set[int]:
    """Wait for the workers that ended (so their CPU time is the server's
    children's, as a command's interpreter is its shell's:
    benchmarks/execute_overhead); their pids."""
    ended: Set[int] = set()
    while True:
        try:
            pid, _ = posix.waitpid(-1, posix.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.add(pid)


class Credentials:
    """What of a process a worker must share with the command it serves: a
    command with fewer rights than the server (capabilities dropped, a
    seccomp filter or resource limit more, another cgroup or security
    label) is not served with the server's."""

    def __init__(self, proc: bytes) -> None:
        with open(proc + b"/status", "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        self.rights = [b" ".join(fields.get(key, b"").split()) for key in STATUS_RIGHTS]
        self.rights.extend(read_or_empty(proc + name) for name in (b"/limits", b"/cgroup", b"/attr/current"))
        self.umask = int(fields[b"Umask"], 8) if b"Umask" in fields else None
        self.namespaces = [identity(proc + b"/ns/" + ns) for ns in NAMESPACES]
        self.root = identity(proc + b"/root")

    def same_as(self, other: Credentials) -> bool:
        return (self.rights, self.namespaces, self.root) == (other.rights, other.namespaces, other.root)


def read_or_empty(path: bytes) -> bytes:
    """``path``'s content; empty where there is none to read (no LSM: ``EINVAL``)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def identity(path: bytes) -> Tuple[int, int]:
    st = posix.stat(path)
    return st.st_dev, st.st_ino


class Worker:
    """One served command (see the module's docstring)."""

    def __init__(self, server: Server, conn: Any) -> None:
        self.server = server
        self.conn = conn
        self.reader = conn.makefile("rb")

    def run(self) -> None:
        self.conn.settimeout(HANDSHAKE_SECONDS)
        try:
            self.conn.sendall(self.server.proof.encode("ascii") + b"\n")
        except OSError:
            return
        request = self.line().split()
        if self.server.token is not None and not (request and self.authentic(request.pop(0))):
            return
        if len(request) != 3:
            return
        admitted = self.admit(int(request[0]), request[1], int(request[2]))
        if admitted is None:
            self.conn.sendall(b"-\n")
            return
        self.conn.sendall(b"+\n")
        if self.line() != b"+":  # bash went on without the server
            return
        self.conn.settimeout(None)
        self.die_with_command()
        script, fds, credentials, environ = admitted
        if credentials.umask is not None:
            posix.umask(credentials.umask)
        replace_environ(environ)
        for fd, target in zip(fds, (0, 1, 2)):  # noqa: B905 - Python 3.8 has no strict
            posix.dup2(fd, target)
            posix.close(fd)
        status = run_script(script)
        detach(keep=(self.conn.fileno(),))  # the command's output ends with bash, not later
        self.conn.sendall(b"%d\n" % status)

    def line(self) -> bytes:
        try:
            line: bytes = self.reader.readline(512)
            return line.rstrip(b"\n")
        except OSError:
            return b""

    def authentic(self, token: bytes) -> bool:
        import hmac

        assert self.server.token is not None
        return hmac.compare_digest(token, self.server.token.encode("ascii"))

    def admit(
        self, pid: int, name: bytes, crc: int
    ) -> Optional[Tuple[Script, List[int], Credentials, bytes]]:
        """What the worker needs to serve the command of process ``pid``
        (and the worker in that process's directory), or ``None`` if it
        cannot be served here."""
        script = self.server.script(name)
        if script is None or script.crc != crc:
            return None
        proc = b"/proc/%d" % pid
        fds: List[int] = []
        try:
            credentials = Credentials(proc)
            if not credentials.same_as(self.server.own):
                return None
            if not posix.readlink(proc + b"/fd/3").startswith(b"socket:"):
                return None  # not a bash talking to a server on fd 3
            for fd, flags in (
                (STDIN_FD, posix.O_RDONLY),
                (STDOUT_FD, posix.O_WRONLY),
                (STDERR_FD, posix.O_WRONLY),
            ):
                opened = reopen(proc, fd, flags)
                if opened is None:
                    raise ValueError(fd)
                fds.append(opened)
            with open(proc + b"/environ", "rb") as f:
                environ = f.read()
            posix.chdir(proc + b"/cwd")  # the directory itself, even if renamed or removed
        except (OSError, ValueError):
            for fd in fds:
                posix.close(fd)
            return None
        return script, fds, credentials, environ

    def die_with_command(self) -> None:
        """A ``SIGIO`` when bash's end closes kills this worker and what it
        started (its own process group). Bash sends nothing after its ``+``,
        so input on the connection can only be its end."""
        import fcntl
        import signal
        import socket

        posix.setpgid(0, 0)
        signal.signal(signal.SIGIO, lambda number, frame: posix.killpg(0, signal.SIGKILL))
        fd = self.conn.fileno()
        fcntl.fcntl(fd, fcntl.F_SETOWN, posix.getpid())
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | posix.O_ASYNC)
        try:  # bash's end closed before SIGIO was armed
            closed = self.conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            closed = False
        if closed:
            posix.killpg(0, signal.SIGKILL)


def reopen(proc: bytes, fd: int, flags: int) -> Optional[int]:
    """Descriptor ``fd`` of process ``proc`` opened anew: a pipe, a FIFO or a
    device, or an output file opened for appending (a new description of a
    file of another mode would write from its start); ``None`` otherwise."""
    import stat

    path = b"%s/fd/%d" % (proc, fd)
    opened = posix.open(path, flags | posix.O_CLOEXEC | posix.O_NOCTTY)
    mode = posix.fstat(opened).st_mode
    if stat.S_ISREG(mode) and flags != posix.O_RDONLY:
        with open(b"%s/fdinfo/%d" % (proc, fd), "rb") as f:
            info = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        if not int(info[b"flags"], 8) & O_APPEND_FLAG:
            posix.close(opened)
            return None
        posix.close(opened)
        opened = posix.open(path, flags | posix.O_APPEND | posix.O_CLOEXEC | posix.O_NOCTTY)
    elif not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
        posix.close(opened)
        return None
    return opened


def replace_environ(environ: bytes) -> None:
    """The process's environment (``os.environ``, ``posix.environ`` and the
    C library's) becomes ``environ``, ``/proc/<pid>/environ``'s content."""
    import os

    pairs = dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
    os.environb.clear()
    os.environb.update(pairs)


def run_script(script: Script) -> int:
    """Run an installed script as ``python3`` would run it; its exit status."""
    try:
        script.run()
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported as the interpreter would
        import traceback

        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return status


OPS = {"serve": serve}
