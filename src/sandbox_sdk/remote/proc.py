"""Detached commands: started in one round trip, followed, signalled and
listed in later ones, from any client.

- ``spawn``: the command in a session of its own, watched by a supervisor
  that outlives the round trip. The supervisor copies the command's stdout
  and stderr into files of the process's record
  (``<scratch>/.sbx-processes/<owner>/<pid>/``, ``owner`` a digest of the
  sandbox's id), notes each switch between the two streams, kills the
  group at its timeout, and writes the exit status when the command ends.
- ``follow``: a long poll of a record: it returns as soon as there is new
  output (after a short linger that gathers more) or the exit, or after
  ``wait`` seconds, with the output since a position of the merged stream.
- ``signal``: a signal to the process's group; SIGTERM is followed by
  SIGKILL after ``grace`` seconds if the group still lives.
- ``processes``: the records (one, with ``pid``); ``forget`` removes one.
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

    class FollowReply(TypedDict):
        next: int  # position in the merged output after what this reply carries
        order: Order
        more: bool  # more output is there already, past the budget
        exit_code: Optional[int]  # set once the process ended and all of its output is read
        timed_out: bool

    class ProcessEntry(TypedDict):
        pid: int
        command: str  # base64 of the command's bytes
        started: float
        running: bool  # false once it ended, or if it is lost (no exit and no supervisor)
        exit_code: Optional[int]
        timed_out: bool

    class ProcessesReply(TypedDict):
        processes: List[ProcessEntry]

    class SignalReply(TypedDict):
        exit_code: Optional[int]


SIGKILL = 9
SIGTERM = 15
#: Where detached processes keep their records, in the scratch directory.
RECORDS = b".sbx-processes"
#: A switch between the streams in a record's ``order`` file: the stream
#: that starts, and how many bytes each stream had before it.
SWITCH = b"%d %015d %015d\n"
SWITCH_BYTES = 34
#: How often ``follow`` and ``signal`` look at a record while they wait.
TICK = 0.01


def records(args: Args) -> bytes:
    """The sandbox's records: one directory per sandbox id (``owner``), as
    sandboxes may share a scratch directory (the local provider's ``/tmp``)."""
    owner = str(args["owner"])
    if not owner.isalnum():
        raise Fail("INVALID_ARGUMENT", "malformed owner %r" % owner)
    root = os.path.join(os.path.abspath(unb64(args["scratch"])), RECORDS, owner.encode("ascii"))
    os.makedirs(root, 0o700, exist_ok=True)
    return root


def record(args: Args) -> bytes:
    path = os.path.join(records(args), b"%d" % int(args["pid"]))
    if not os.path.isdir(path):
        raise Fail("NO_PROCESS", "no process %d is known in this sandbox" % int(args["pid"]))
    return path


def write_atomically(path: bytes, data: bytes) -> None:
    temporary = path + b".new"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(temporary, path)


def read_json(path: bytes) -> Any:
    """The JSON in ``path``, or ``None`` if there is no such file."""
    try:
        with open(path, "rb") as f:
            return json_loads(f.read())
    except FileNotFoundError:
        return None


def remove_record(path: bytes) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def sweep(root: bytes) -> None:
    """Remove the records of processes that ended more than a day ago."""
    cutoff = time.time() - STALE_SECONDS
    for name in os.listdir(root):
        try:
            ended = os.stat(os.path.join(root, name, b"status")).st_mtime
        except OSError:
            continue
        if ended < cutoff:
            remove_record(os.path.join(root, name))


def spawn(args: Args, blobs: Blobs) -> Tuple[SpawnReply, Blobs]:
    root = records(args)
    sweep(root)
    program, env, stdin = prepare(args, blobs)
    ready_r, ready_w = os.pipe()
    supervisor = os.fork()
    if supervisor == 0:
        try:
            os.close(ready_r)
            os.setsid()
            to_null(0, 1, 2)
            supervise(root, program, env, stdin, ready_w, args)
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
    return {"pid": int(answer)}, []


def supervise(
    root: bytes, program: Program, env: Dict[bytes, bytes], stdin: int, ready: int, args: Args
) -> None:
    """The supervisor of a detached command (see the module docstring)."""
    try:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        wake = child_wakeups()
        pid = launch(program, env, [stdin, out_w, err_w], 0)
        for fd in (stdin, out_w, err_w):
            os.close(fd)
        path = os.path.join(root, b"%d" % pid)
        remove_record(path)  # a record of an earlier process that had this pid
        os.mkdir(path, 0o700)
        hold_lock(path)
        meta = {"command": b64(shown(program)), "started": time.time()}
        write_atomically(os.path.join(path, b"meta"), json_dumps(meta).encode("ascii"))
        files = [os.open(os.path.join(path, name), os.O_WRONLY | os.O_CREAT, 0o600) for name in FILES]
    except Fail as exc:  # told to the client as its code, which the client raises
        os.write(ready, ("%s %s" % (exc.code, exc.message)).encode("utf-8", "replace"))
        return
    except Exception as exc:  # noqa: BLE001 - told to the client, which raises it
        os.write(ready, ("NOT_FOUND cannot start the process: %s" % exc).encode("utf-8", "replace"))
        return
    os.write(ready, b"%d" % pid)
    os.close(ready)
    pumps = Pumps(pid, [out_r, err_r], wake, deadline_of(args))
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
    write_atomically(os.path.join(path, b"status"), json_dumps(status).encode("ascii"))


#: The files of a record that the supervisor writes as output arrives.
FILES = (b"out", b"err", b"order")


class Output:
    """A snapshot of a record's output: the switches, and how far each stream got."""

    def __init__(self, path: bytes) -> None:
        self.fds = [os.open(os.path.join(path, name), os.O_RDONLY) for name in FILES]
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

    fcntl.flock(os.open(os.path.join(path, b"lock"), os.O_RDWR | os.O_CREAT, 0o600), fcntl.LOCK_EX)


def supervised(path: bytes) -> bool:
    import fcntl

    try:
        fd = os.open(os.path.join(path, b"lock"), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def status_of(path: bytes) -> Tuple[Any, bool]:
    """The recorded exit (``None`` while running) and whether the process is
    lost: no exit recorded and no supervisor left to record one."""
    status = read_json(os.path.join(path, b"status"))
    if status is not None or supervised(path):
        return status, False
    status = read_json(os.path.join(path, b"status"))  # it may have ended just now
    return status, status is None


def lost(pid: int) -> Fail:
    return Fail(
        "NO_PROCESS",
        "process %d is lost: its supervisor ended without recording an exit "
        "(does this sandbox keep processes running after a command returns?)" % pid,
    )


def follow(args: Args, blobs: Blobs) -> Tuple[FollowReply, Blobs]:
    path = record(args)
    since = int(args["since"])
    now = time.monotonic()
    deadline = now + float(args["wait"])
    linger = float(args["linger"])
    budget = int(args["budget"])
    first_seen = None  # type: Optional[float]
    while True:
        status, gone = status_of(path)  # before the output: all of it is in by then
        if gone:
            raise lost(int(args["pid"]))
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


def entry_of(path: bytes, pid: int) -> Optional[ProcessEntry]:
    meta = read_json(os.path.join(path, b"meta"))
    if meta is None:
        return None  # still being set up
    status, gone = status_of(path)
    status = status or {"exit_code": None, "timed_out": False}
    found = {
        "pid": pid,
        "command": meta["command"],
        "started": meta["started"],
        "running": status["exit_code"] is None and not gone,
        "exit_code": status["exit_code"],
        "timed_out": status["timed_out"],
    }  # type: ProcessEntry
    return found


def processes(args: Args, blobs: Blobs) -> Tuple[ProcessesReply, Blobs]:
    if args.get("pid") is not None:
        found = entry_of(record(args), int(args["pid"]))
        if found is None:
            raise Fail("NO_PROCESS", "no process %d is known in this sandbox" % int(args["pid"]))
        return {"processes": [found]}, []
    root = records(args)
    found_all = []
    for name in sorted(os.listdir(root), key=lambda n: int(n) if n.isdigit() else -1):
        if name.isdigit():
            item = entry_of(os.path.join(root, name), int(name))
            if item is not None:
                found_all.append(item)
    return {"processes": found_all}, []


def wait_for(path: bytes, seconds: float) -> Any:
    """The status once the supervisor wrote it and the group is gone, or ``None`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        status = read_json(os.path.join(path, b"status"))
        if status is not None or time.monotonic() >= deadline:
            return status
        time.sleep(TICK)


def send_signal(args: Args, blobs: Blobs) -> Tuple[SignalReply, Blobs]:
    path = record(args)
    pid = int(args["pid"])
    number = int(args["signal"])
    status, gone = status_of(path)
    if gone:
        raise lost(pid)  # its pid may be anyone's by now: nothing is signalled
    if status is None:  # the group is still the process's: the supervisor kills it before the status
        kill_group(pid, number)
        grace = float(args["grace"])
        if grace > 0:
            status = wait_for(path, grace)
            if status is None:
                kill_group(pid, SIGKILL)
        if status is None:  # a SIGKILL too waits for the supervisor to record the exit
            status = wait_for(path, float(args["settle"]))
    return {"exit_code": None if status is None else status["exit_code"]}, []


def forget(args: Args, blobs: Blobs) -> Tuple[Empty, Blobs]:
    path = record(args)
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
}
