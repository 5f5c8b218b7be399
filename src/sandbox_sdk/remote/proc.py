"""Detached commands: started in one round trip, followed, signalled and
listed in later ones, from any client.

- ``spawn``: the command in a session of its own, watched by a supervisor
  that outlives the round trip. The supervisor copies the command's stdout
  and stderr into files of the process's record
  (``<scratch>/.sbx-processes-<euid>/<owner>/<handle>/``, ``owner`` a digest
  of the sandbox's id, ``handle`` 128 random bits), notes each switch
  between the two streams, kills the group at its timeout, and writes the
  exit status when the command ends.
- ``follow``: a long poll of a record: it returns as soon as there is new
  output (after a short linger that gathers more) or the exit, or after
  ``wait`` seconds, with the output since a position of the merged stream.
- ``signal``: a signal to the process's group; SIGTERM is followed by
  SIGKILL after ``grace`` seconds if the group still lives.
- ``processes``: the records (one, with ``handle``, or those of a ``pid``);
  ``forget`` removes one.

Records are trusted only as far as the directories holding them: each
directory is one this user made, checked with ``lstat`` on every use (a
directory, not a symlink, owned by the effective uid, no permission for
group or others), so another user of a shared scratch directory can neither
make one in advance nor plant anything in it; one that fails the check is
refused, never followed. Files in them are opened with ``O_NOFOLLOW``, new
ones with ``O_EXCL``. A signal goes only to a process the record vouches
for now (see ``vouched``).
"""

from __future__ import annotations

import os
import time

from sandbox_sdk.remote._runtime import (
    EXIT,
    ORDER_ENTRY_BYTES,
    STALE_SECONDS,
    TYPE_CHECKING,
    Fail,
    Pumps,
    b64,
    child_wakeups,
    deadline_of,
    json_dumps,
    json_loads,
    kill_group,
    launch,
    prepare,
    shown,
    to_null,
    unb64,
    write_all,
)

if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs, Empty, Program
    from sandbox_sdk.remote.run import Order

    class SpawnReply(TypedDict):
        pid: int
        handle: str  # the record's name: 128 random bits, in hex

    class FollowReply(TypedDict):
        next: int  # position in the merged output after what this reply carries
        order: Order
        more: bool  # more output is there already, past the budget
        exit_code: Optional[int]  # set once the process ended and all of its output is read
        timed_out: bool

    class ProcessEntry(TypedDict):
        pid: int
        handle: str
        command: str  # base64 of the command's bytes
        started: float
        running: bool  # false once it ended, or if it is lost (no exit and no supervisor)
        exit_code: Optional[int]
        timed_out: bool

    class ProcessesReply(TypedDict):
        processes: List[ProcessEntry]

    class SignalReply(TypedDict):
        exit_code: Optional[int]

    class FeedReply(TypedDict):
        written: int  # bytes appended to the process's stdin: all of the data, or 0 if it had no room yet


SIGKILL = 9
SIGTERM = 15
#: Where detached processes keep their records, in the scratch directory: a
#: directory per user (``%d``: the effective uid), as a shared ``/tmp`` has
#: several users and each one's directory is private.
RECORDS = b".sbx-processes-%d"
#: A record's name, its handle: 128 random bits in lowercase hex.
HANDLE_DIGITS = 32
HEX_DIGITS = b"0123456789abcdef"
#: A private directory's ``st_mode`` under this mask: a directory (``S_IFDIR``
#: of the type bits ``S_IFMT``), no permission for group or others.
PRIVATE_MASK = 0o170077
PRIVATE_DIRECTORY = 0o040000
#: Added to the flags of every open of a record's files: never through a symlink.
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
#: Where ``/proc/<pid>/stat``'s fields 4 (the parent) and 22 (the start
#: time) are among the fields after the command's name.
PARENT_FIELD = 1
START_FIELD = 19
#: Seconds a record whose process has just ended is given for its
#: supervisor to record the exit (it does so as soon as it reaps the process).
ENDING_SECONDS = 5.0
#: A switch between the streams in a record's ``order`` file: the stream
#: that starts, and how many bytes each stream had before it.
SWITCH = b"%d %015d %015d\n"
SWITCH_BYTES = 34
#: How often ``follow`` and ``signal`` look at a record while they wait.
TICK = 0.01


def private(path: bytes, make: bool = False) -> bytes:
    """``path``, once ``lstat`` shows a directory of this user's that no one
    else may enter (made first, mode 0700, if ``make``). Anything else there
    (a symlink, a directory another user made in advance, one others may
    write in) is refused and never used: what another user controls could
    redirect the records' writes or stand in for their contents."""
    if make:
        try:  # noqa: SIM105 - contextlib would cost every round trip an import
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    st = os.lstat(path)
    euid = os.geteuid()
    if st.st_mode & PRIVATE_MASK != PRIVATE_DIRECTORY or st.st_uid != euid:
        raise Fail(
            "PERMISSION_DENIED",
            "%s is not a private directory of uid %d (owner %d, mode %o), so it is not used: remove it"
            % (os.fsdecode(path), euid, st.st_uid, st.st_mode),
            path,
        )
    return path


def records(args: Args) -> bytes:
    """The sandbox's records: one directory per sandbox id (``owner``), as
    sandboxes may share a scratch directory (the local provider's ``/tmp``)."""
    owner = str(args["owner"])
    if not owner.isalnum():
        raise Fail("INVALID_ARGUMENT", "malformed owner %r" % owner)
    scratch = os.path.abspath(unb64(args["scratch"]))
    root = private(os.path.join(scratch, RECORDS % os.geteuid()), make=True)
    return private(os.path.join(root, owner.encode("ascii")), make=True)


def is_handle(name: bytes) -> bool:
    return len(name) == HANDLE_DIGITS and not name.strip(HEX_DIGITS)


def record(args: Args) -> bytes:
    """The record of ``args``' ``handle``, checked (see ``private``)."""
    handle = str(args["handle"]).encode("ascii", "replace")
    if not is_handle(handle):
        raise Fail("INVALID_ARGUMENT", "malformed process handle %r" % args["handle"])
    try:
        return private(os.path.join(records(args), handle))
    except FileNotFoundError:
        raise unknown(int(args["pid"])) from None


def unknown(pid: int) -> Fail:
    return Fail("NO_PROCESS", "no process %d started through this API is known in this sandbox" % pid)


def open_in(path: bytes, name: bytes, flags: int = os.O_RDONLY) -> int:
    """A file of record ``path``, never through a symlink (new files: mode 0600)."""
    return os.open(os.path.join(path, name), flags | NOFOLLOW, 0o600)


def write_atomically(path: bytes, name: bytes, data: bytes) -> None:
    """File ``name`` of record ``path`` with ``data``: a new file (``O_EXCL``:
    nothing already there is reused) renamed into place, all of it or none."""
    temporary = name + b".new"
    fd = open_in(path, temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    os.rename(os.path.join(path, temporary), os.path.join(path, name))


def read_json(path: bytes, name: bytes) -> Any:
    """The JSON in file ``name`` of record ``path``, or ``None`` if there is no such file."""
    try:
        fd = open_in(path, name)
    except FileNotFoundError:
        return None
    with open(fd, "rb") as f:
        return json_loads(f.read())


def meta_of(path: bytes, pid: int) -> Any:
    """Record ``path``'s ``meta``, which its supervisor wrote before the
    client heard of the record; it must be of process ``pid``."""
    meta = read_json(path, b"meta")
    if not isinstance(meta, dict) or meta.get("pid") != pid:
        raise unknown(pid)
    return meta


def remove_record(path: bytes) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)  # removes no symlink's target


def sweep(root: bytes) -> None:
    """Remove the records of processes that ended more than a day ago."""
    cutoff = time.time() - STALE_SECONDS
    for name in os.listdir(root):
        if not is_handle(name):
            continue
        try:
            ended = os.lstat(os.path.join(root, name, b"status")).st_mtime
        except OSError:
            continue
        if ended < cutoff:
            remove_record(os.path.join(root, name))


def spawn(args: Args, blobs: Blobs) -> Tuple[SpawnReply, Blobs]:
    root = records(args)
    sweep(root)
    handle = os.urandom(HANDLE_DIGITS // 2).hex()
    path = os.path.join(root, handle.encode("ascii"))
    os.mkdir(path, 0o700)
    try:
        pid = start_supervisor(path, args, blobs)
    except BaseException:
        remove_record(path)
        raise
    return {"pid": pid, "handle": handle}, []


def start_supervisor(path: bytes, args: Args, blobs: Blobs) -> int:
    """Start the supervisor of record ``path``; the command's pid once it runs."""
    program, env, stdin = prepare(args, blobs)
    ready_r, ready_w = os.pipe()
    supervisor = os.fork()
    if supervisor == 0:
        try:
            os.close(ready_r)
            os.setsid()
            to_null(0, 1, 2)
            supervise(path, program, env, stdin, ready_w, args)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(stdin)
    answer = b""
    while True:
        data = os.read(ready_r, 4096)
        if not data:
            break
        answer += data
    if not answer.isdigit():
        code, _, message = answer.decode("utf-8", "replace").partition(" ")
        raise Fail(code, message) if code in EXIT else Fail("NOT_FOUND", "the supervisor did not start")
    return int(answer)


def supervise(
    path: bytes, program: Program, env: Dict[bytes, bytes], stdin: int, ready: int, args: Args
) -> None:
    """The supervisor of a detached command (see the module docstring). Its
    record's ``meta`` says which process it started: the pid and start time
    of the command and of the supervisor (see ``vouched``), and its
    ``input``: ``"pipe"`` (stdin fed from the record, see ``Feeder``),
    ``"pty"`` (a terminal whose master the supervisor holds) or ``None``."""
    try:
        hold_lock(path)
        files = [open_in(path, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL) for name in FILES]
        mode = args.get("input")
        wake = child_wakeups()
        if mode == "pty":
            master, slave = os.openpty()
            set_window(master, int(args["rows"]), int(args["cols"]))
            os.close(stdin)
            child = [slave, slave, slave]
            pipes = [master]
            target = os.dup(master)  # polled for writing apart from the master's reads
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            if mode == "pipe":
                os.close(stdin)
                stdin, target = os.pipe()
            child = [stdin, out_w, err_w]
            pipes = [out_r, err_r]
        feeder = None if mode is None else Feeder(path, target, mode == "pty")
        pid = launch(program, env, child, 0, terminal=mode == "pty")
        for fd in set(child):
            os.close(fd)
        meta = {
            "command": b64(shown(program)),
            "started": time.time(),
            "pid": pid,
            "start": start_time(pid),
            "supervisor": os.getpid(),
            "supervisor_start": start_time(os.getpid()),
            "input": mode,
        }
        write_atomically(path, b"meta", json_dumps(meta).encode("ascii"))
    except Fail as exc:  # told to the client as its code, which the client raises
        os.write(ready, ("%s %s" % (exc.code, exc.message)).encode("utf-8", "replace"))
        return
    except Exception as exc:  # noqa: BLE001 - told to the client, which raises it
        os.write(ready, ("NOT_FOUND cannot start the process: %s" % exc).encode("utf-8", "replace"))
        return
    os.write(ready, b"%d" % pid)
    os.close(ready)
    pumps = Pumps(pid, pipes, wake, deadline_of(args), feeder)
    totals = [0, 0]
    last = -1
    for stream, data in pumps.pieces():
        if stream != last:
            os.write(files[2], SWITCH % (stream, totals[0], totals[1]))
            last = stream
        write_all(files[stream], data)
        totals[stream] += len(data)
    code = pumps.finish(pid)
    status = {"exit_code": code, "timed_out": pumps.timed_out}
    write_atomically(path, b"status", json_dumps(status).encode("ascii"))


#: The files of a record that the supervisor writes as output arrives.
FILES = (b"out", b"err", b"order")
#: The files of a record whose process's stdin is fed: the spool the
#: writers append to (``stdin``), the lock they append under (which the
#: supervisor takes to empty the spool once it has fed all of it), the FIFO
#: that wakes the supervisor (``wake``: a line per message, see ``Feeder``)
#: and the mark of a closed stdin (``stdin.closed``, made by ``close``).
SPOOL = b"stdin"
SPOOL_LOCK = b"stdin.lock"
WAKE = b"wake"
CLOSED = b"stdin.closed"
#: Bytes the spool may hold before a writer waits for the process to read
#: them: a process that does not read its stdin holds back its writers, as
#: a full pipe does, instead of filling the sandbox's disk.
SPOOL_LIMIT = 16 << 20
#: A terminal's end-of-file character (Ctrl-D): what closing a terminal's input sends.
EOF_CHARACTER = b"\x04"
#: ``st_mode``'s file type bits (``S_IFMT``), and those of a FIFO and of a regular file.
S_IFMT = 0o170000
S_IFIFO = 0o010000
S_IFREG = 0o100000


def set_window(fd: int, rows: int, cols: int) -> None:
    """The window size of the terminal whose master is ``fd`` (its foreground group gets SIGWINCH)."""
    import array
    import fcntl
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, array.array("H", [rows, cols, 0, 0]).tobytes())


class Feeder:
    """Feeds a detached command's stdin from its record, in the supervisor's
    loop. Writers (``feed``) append to the spool under its lock and then
    write a line to the ``wake`` FIFO; the supervisor copies the spool into
    the command's stdin as fast as the command reads it (never blocking:
    the pipe or terminal is written only when ``poll`` says there is room),
    empties the spool once it has fed all of it, and closes the command's
    stdin (a terminal: sends Ctrl-D) once ``stdin.closed`` is there and all
    is fed. A ``w <rows> <cols>`` line resizes the terminal. The FIFO and
    spool live in the record's private directory, so no other user can
    write to or read another's stdin."""

    def __init__(self, path: bytes, target: int, terminal: bool) -> None:
        import select

        self.path = path
        self.target = target
        self.accepting = True  # until the command's stdin is closed
        self.terminal = terminal
        self.pollout = select.POLLOUT
        self.spool = open_in(path, SPOOL, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        os.close(open_in(path, SPOOL_LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL))
        os.mkfifo(os.path.join(path, WAKE), 0o600)
        self.wake = open_in(path, WAKE, os.O_RDWR | os.O_NONBLOCK)  # read-write: never an end of file
        os.set_blocking(target, False)
        self.fed = 0
        self.pending = b""
        self.partial = b""
        self.waiting = False  # whether the target is registered for POLLOUT

    def attach(self, poller: Any) -> None:
        self.poller = poller
        poller.register(self.wake, poller_in())

    def ready(self, fd: int, events: int) -> None:
        if fd == self.wake:
            self.messages()
        self.pump()

    def messages(self) -> None:
        data = self.partial
        try:
            while True:
                piece = os.read(self.wake, 4096)
                if not piece:
                    break
                data += piece
        except BlockingIOError:
            pass
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            words = line.split()
            if (
                self.terminal
                and len(words) == 3
                and words[0] == b"w"
                and words[1].isdigit()
                and words[2].isdigit()
            ):
                try:  # noqa: SIM105 - as elsewhere, no contextlib
                    set_window(self.target, int(words[1]), int(words[2]))
                except (OSError, ValueError):
                    pass  # the terminal is gone, or a size it refuses

    def pump(self) -> None:
        while self.accepting:
            if not self.pending:
                self.pending = os.pread(self.spool, 1 << 16, self.fed)
                if not self.pending:
                    self.caught_up()
                    break
            try:
                written = os.write(self.target, self.pending)
            except BlockingIOError:
                self.want_room(True)
                return
            except OSError:  # the command closed its stdin (or ended): what is left is dropped
                self.close_target()
                return
            self.fed += written
            self.pending = self.pending[written:]
        self.want_room(False)

    def want_room(self, wanted: bool) -> None:
        if wanted == self.waiting:
            return
        if wanted:
            self.poller.register(self.target, self.pollout)
        else:
            self.poller.unregister(self.target)
        self.waiting = wanted

    def caught_up(self) -> None:
        """All of the spool is fed: empty it, under the writers' lock (if a
        writer holds it, its line in ``wake`` brings this back), and close
        the command's stdin if that was asked for."""
        import fcntl

        lock = open_in(self.path, SPOOL_LOCK, os.O_RDWR)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            return
        try:
            if os.fstat(self.spool).st_size == self.fed:
                os.ftruncate(self.spool, 0)
                self.fed = 0
                if os.path.lexists(os.path.join(self.path, CLOSED)):
                    if self.terminal:
                        try:  # noqa: SIM105 - as above
                            os.write(self.target, EOF_CHARACTER)
                        except OSError:
                            pass
                    self.close_target()
        finally:
            os.close(lock)

    def close_target(self) -> None:
        """No more input; a pipe is closed (its reader gets an end of file), a
        terminal's master kept for resizes."""
        self.want_room(False)
        self.accepting = False
        if not self.terminal:
            os.close(self.target)


def poller_in() -> int:
    import select

    return select.POLLIN


class Output:
    """A snapshot of a record's output: the switches, and how far each stream got."""

    def __init__(self, path: bytes) -> None:
        self.fds = [open_in(path, name) for name in FILES]
        self.switches = os.fstat(self.fds[2]).st_size // SWITCH_BYTES
        sizes = [os.fstat(fd).st_size for fd in self.fds[:2]]
        if self.switches:
            stream, before = self.switch(self.switches - 1)
            ends = list(before)
            ends[stream] = max(sizes[stream], before[stream])  # the other stream: up to its next switch
            self.end = ends[0] + ends[1]
        else:
            self.end = 0

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)

    def switch(self, index: int) -> Tuple[int, List[int]]:
        """Switch ``index``: the stream that starts, and each stream's bytes before it."""
        line = os.pread(self.fds[2], SWITCH_BYTES, index * SWITCH_BYTES).split()
        return int(line[0]), [int(line[1]), int(line[2])]

    def start(self, index: int) -> int:
        _, before = self.switch(index)
        return before[0] + before[1]

    def read(self, since: int, budget: int) -> Tuple[Order, Blobs, int]:
        """The runs and bytes of each stream from merged position ``since``,
        at most ``budget`` bytes; and the position after them."""
        low, high = 0, self.switches - 1
        while low < high:  # the last switch at or before ``since``
            middle = (low + high + 1) // 2
            if self.start(middle) <= since:
                low = middle
            else:
                high = middle - 1
        kept = [bytearray(), bytearray()]
        order = []  # type: Order
        at = since
        index = low
        while at < self.end and index < self.switches and budget > ORDER_ENTRY_BYTES:
            stream, before = self.switch(index)
            stop = self.start(index + 1) if index + 1 < self.switches else self.end
            if at < stop:
                take = min(stop - at, budget - ORDER_ENTRY_BYTES)
                offset = before[stream] + at - (before[0] + before[1])
                data = os.pread(self.fds[stream], take, offset)
                kept[stream] += data
                order.append([stream, len(data)])
                at += len(data)
                budget -= ORDER_ENTRY_BYTES + len(data)
                if len(data) < take:
                    break  # the file is shorter than its switches say: a record cut short
            index += 1
        return order, [bytes(kept[0]), bytes(kept[1])], at


def hold_lock(path: bytes) -> None:
    """Lock the record's ``lock`` file for as long as this supervisor lives
    (the descriptor stays open until it exits): while it is held, the
    process is supervised, and a record whose lock is free and that has no
    status has lost its supervisor (killed, or the sandbox ended it)."""
    import fcntl

    fcntl.flock(open_in(path, b"lock", os.O_RDWR | os.O_CREAT | os.O_EXCL), fcntl.LOCK_EX)


def supervised(path: bytes) -> bool:
    import fcntl

    try:
        fd = open_in(path, b"lock")
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def stat_fields(pid: int) -> Optional[List[bytes]]:
    """The fields of ``/proc/<pid>/stat`` after the command's name (which
    may hold anything), or ``None`` if no such process is to be seen."""
    try:
        fd = os.open(b"/proc/%d/stat" % pid, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).rpartition(b")")[2].split()
    finally:
        os.close(fd)


def start_time(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks since boot: with the pid,
    it names one process, where a pid alone may be reused."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[START_FIELD])


def vouched(path: bytes, meta: Any) -> bool:
    """Whether record ``path`` is, now, of the process its ``meta`` names:
    that pid has the recorded start time (it was not reused), its parent is
    the recorded supervisor (pid and start time), and that supervisor holds
    this record's lock. Only the process that starts another is its parent,
    so a record planted for a process started in some other way names a
    parent that does not hold the record's lock (unless the planter made it
    so, and then the planter started the process itself): nothing is
    signalled through such a record, and it is not reattached to."""
    try:
        command = stat_fields(int(meta["pid"]))
        supervisor = stat_fields(int(meta["supervisor"]))
        return not (
            command is None
            or supervisor is None
            or int(command[START_FIELD]) != meta["start"]
            or int(command[PARENT_FIELD]) != meta["supervisor"]
            or int(supervisor[START_FIELD]) != meta["supervisor_start"]
            or int(meta["supervisor"]) not in lock_holders(path)
        )
    except (OSError, LookupError, TypeError, ValueError):
        return False


def lock_holders(path: bytes) -> List[int]:
    """The pids holding record ``path``'s lock, as ``/proc/locks`` shows them
    (``<n>: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> ...``; a
    waiter's line has ``->`` after the number). Anyone may read it, where a
    look at another process's descriptors (``/proc/<pid>/fd``) needs ptrace
    access, which a command in another user namespace lacks."""
    fd = open_in(path, b"lock")
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    lock = b"%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    with open(b"/proc/locks", "rb") as locks:
        lines = locks.read().splitlines()
    return [int(f[4]) for f in (line.split() for line in lines) if f[1:2] == [b"FLOCK"] and f[5:6] == [lock]]


def status_of(path: bytes) -> Tuple[Any, bool]:
    """The recorded exit (``None`` while running) and whether the process is
    lost: no exit recorded and no supervisor left to record one."""
    status = read_json(path, b"status")
    if status is not None or supervised(path):
        return status, False
    status = read_json(path, b"status")  # it may have ended just now
    return status, status is None


def state_of(path: bytes, meta: Any) -> Tuple[Any, bool]:
    """``status_of`` for a record that vouches for its process while it runs
    (see ``vouched`` and ``ended``)."""
    status, gone = status_of(path)
    if status is None and not gone and not vouched(path, meta):
        return unvouched(path, meta)
    return status, gone


def unvouched(path: bytes, meta: Any) -> Tuple[Any, bool]:
    """``status_of`` for a supervised record that has just stopped vouching
    for its process, looked at again: a supervisor killed since it was seen
    holding the lock frees it before its child gets another parent (lost,
    then); else the process has just ended, or is not the record's (see
    ``ended``)."""
    status, gone = status_of(path)
    if status is None and not gone:
        status = ended(path, meta)
    return status, gone


def ended(path: bytes, meta: Any) -> Any:
    """The exit of a supervised record that no longer vouches for its process
    because the process has just ended (its pid is gone or another's), once
    the supervisor records it; a refusal if the process still runs but not as
    the record says, or if no exit comes."""
    pid = int(meta["pid"])
    if start_time(pid) != meta.get("start") or meta.get("start") is None:
        status = wait_for(path, ENDING_SECONDS)
        if status is not None:
            return status
    raise Fail(
        "NO_PROCESS",
        "process %d was not started through this API (its record does not match it): "
        "nothing is signalled or read" % pid,
    )


def lost(pid: int) -> Fail:
    return Fail(
        "NO_PROCESS",
        "process %d is lost: its supervisor ended without recording an exit "
        "(does this sandbox keep processes running after a command returns?)" % pid,
    )


def follow(args: Args, blobs: Blobs) -> Tuple[FollowReply, Blobs]:
    path = record(args)
    pid = int(args["pid"])
    state_of(path, meta_of(path, pid))  # a record that does not vouch for its process is not read
    since = int(args["since"])
    now = time.monotonic()
    deadline = now + float(args["wait"])
    linger = float(args["linger"])
    budget = int(args["budget"])
    first_seen = None  # type: Optional[float]
    while True:
        status, gone = status_of(path)  # before the output: all of it is in by then
        if gone:
            raise lost(pid)
        output = Output(path)
        now = time.monotonic()
        new = output.end - since
        if new > 0 and first_seen is None:
            first_seen = now
        if (
            status is not None
            or now >= deadline
            or new >= budget
            or (first_seen is not None and now >= first_seen + linger)
        ):
            break
        output.close()
        time.sleep(TICK)
    try:
        order, kept, at = output.read(since, budget)
    finally:
        output.close()
    done = status is not None and at >= output.end
    reply = {
        "next": at,
        "order": order,
        "more": at < output.end,
        "exit_code": status["exit_code"] if done else None,
        "timed_out": bool(done and status["timed_out"]),
    }  # type: FollowReply
    return reply, kept


def entry_of(path: bytes, meta: Any) -> ProcessEntry:
    status, gone = state_of(path, meta)
    status = status or {"exit_code": None, "timed_out": False}
    found = {
        "pid": int(meta["pid"]),
        "handle": os.path.basename(path).decode("ascii"),
        "command": meta["command"],
        "started": float(meta["started"]),
        "running": status["exit_code"] is None and not gone,
        "exit_code": status["exit_code"],
        "timed_out": status["timed_out"],
    }  # type: ProcessEntry
    return found


def processes(args: Args, blobs: Blobs) -> Tuple[ProcessesReply, Blobs]:
    """The record of ``handle``; else the records (of ``pid`` only, if given),
    oldest first, leaving out those still being set up and those that do
    not vouch for the process they name."""
    if args.get("handle") is not None:
        path = record(args)
        return {"processes": [entry_of(path, meta_of(path, int(args["pid"])))]}, []
    root = records(args)
    wanted = args.get("pid")
    found_all = []
    for name in os.listdir(root):
        if not is_handle(name):
            continue
        path = os.path.join(root, name)
        try:
            meta = read_json(private(path), b"meta")
            if isinstance(meta, dict) and wanted in (None, meta.get("pid")):
                found_all.append(entry_of(path, meta))
        except (Fail, OSError, LookupError, TypeError, ValueError):
            continue  # not this user's own, removed meanwhile, or not vouched for
    found_all.sort(key=lambda entry: (entry["started"], entry["pid"]))
    if wanted is not None and not found_all:
        raise unknown(int(wanted))
    return {"processes": found_all}, []


def wait_for(path: bytes, seconds: float) -> Any:
    """The status once the supervisor wrote it and the group is gone, or ``None`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        status = read_json(path, b"status")
        if status is not None or time.monotonic() >= deadline:
            return status
        time.sleep(TICK)


def deliver(path: bytes, meta: Any, number: int) -> Any:
    """Send ``number`` to the record's group if the record vouches for its
    process; if it has just ended instead, its exit (see ``unvouched``)."""
    if vouched(path, meta):
        kill_group(int(meta["pid"]), number)
        return None
    status, gone = unvouched(path, meta)
    if gone:
        raise lost(int(meta["pid"]))
    return status


def send_signal(args: Args, blobs: Blobs) -> Tuple[SignalReply, Blobs]:
    path = record(args)
    pid = int(args["pid"])
    meta = meta_of(path, pid)
    number = int(args["signal"])
    status, gone = status_of(path)
    if gone:
        raise lost(pid)  # its pid may be anyone's by now: nothing is signalled
    if status is None:
        status = deliver(path, meta, number)
    if status is None:
        grace = float(args["grace"])
        if grace > 0:
            status = wait_for(path, grace)
            if status is None:
                status = deliver(path, meta, SIGKILL)
        if status is None:  # a SIGKILL too waits for the supervisor to record the exit
            status = wait_for(path, float(args["settle"]))
    return {"exit_code": None if status is None else status["exit_code"]}, []


def fed_record(args: Args, terminal: bool = False) -> bytes:
    """The record of a running process whose input the caller may feed
    (``terminal``: a process with a terminal, to resize); refused with
    ``NO_STDIN`` if it has no such input or has ended."""
    path = record(args)
    pid = int(args["pid"])
    meta = meta_of(path, pid)
    status, gone = state_of(path, meta)  # a record that does not vouch for its process is not fed
    if gone:
        raise lost(pid)
    if terminal and meta.get("input") != "pty":
        raise Fail("INVALID_ARGUMENT", "process %d has no terminal (start it with pty=...)" % pid)
    if meta.get("input") not in ("pipe", "pty"):
        raise Fail("NO_STDIN", "process %d was started without stdin=PIPE: its stdin cannot be written" % pid)
    if status is not None:
        raise Fail("NO_STDIN", "process %d has ended: its stdin cannot be written" % pid)
    return path


def open_checked(path: bytes, name: bytes, flags: int, kind: int) -> int:
    """File ``name`` of record ``path`` (never through a symlink), if it is
    of type ``kind`` and this user's: the supervisor made it so."""
    fd = open_in(path, name, flags)
    st = os.fstat(fd)
    if st.st_mode & S_IFMT != kind or st.st_uid != os.geteuid():
        os.close(fd)
        raise Fail("PERMISSION_DENIED", "%s is not the record's own: not used" % os.fsdecode(name), path)
    return fd


def tell(path: bytes, message: bytes, wait: float) -> None:
    """Write a line to the supervisor's ``wake`` FIFO (never blocking: a
    full FIFO is retried until ``wait`` has passed; a line of a poke is
    dropped then, as the supervisor has lines to read anyway). Nobody
    reading it means the supervisor has gone, which the status tells."""
    try:
        fd = open_checked(path, WAKE, os.O_WRONLY | os.O_NONBLOCK, S_IFIFO)
    except OSError:  # ENXIO: no reader
        return
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                os.write(fd, message)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(TICK)
            except OSError:
                return
    finally:
        os.close(fd)


def feed(args: Args, blobs: Blobs) -> Tuple[FeedReply, Blobs]:
    """Append ``blobs[0]`` to a process's stdin (and close it, with
    ``close``), once the spool has room: a process that does not read holds
    its writer back up to ``wait`` seconds, after which nothing is written
    (``written``: 0) and the client asks again."""
    import fcntl

    path = fed_record(args)
    data = blobs[0] if blobs else b""
    close = bool(args.get("close"))
    deadline = time.monotonic() + float(args["wait"])
    while True:
        lock = open_checked(path, SPOOL_LOCK, os.O_RDWR, S_IFREG)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.lexists(os.path.join(path, CLOSED)):
                raise Fail("NO_STDIN", "the stdin of process %d was closed" % int(args["pid"]))
            spool = open_checked(path, SPOOL, os.O_WRONLY | os.O_APPEND, S_IFREG)
            try:
                size = os.fstat(spool).st_size
                room = size == 0 or size + len(data) <= SPOOL_LIMIT
                if room:
                    write_all(spool, data)
                    if close:
                        os.close(open_in(path, CLOSED, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            finally:
                os.close(spool)
        finally:
            os.close(lock)  # releases the lock
        tell(path, b"\n", 0.0)
        if room or time.monotonic() >= deadline:
            return {"written": len(data) if room else 0}, []
        time.sleep(TICK)


def resize(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    path = fed_record(args, terminal=True)
    tell(path, b"w %d %d\n" % (int(args["rows"]), int(args["cols"])), float(args["wait"]))
    return {}, []


def forget(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    path = record(args)
    meta_of(path, int(args["pid"]))
    status, gone = status_of(path)
    if status is None and not gone:
        raise Fail("INVALID_ARGUMENT", "process %d is still running" % int(args["pid"]))
    remove_record(path)
    return {}, []


OPS = {
    "spawn": spawn,
    "follow": follow,
    "signal": send_signal,
    "processes": processes,
    "forget": forget,
    "feed": feed,
    "resize": resize,
}
