"""Watch a directory in the sandbox; print its changes as JSON lines.

Run by ``BaseSandbox.watch`` as a background process (``python3 -c`` this
source, with the directory, ``1`` for a recursive watch and the debounce in
seconds as arguments); the client follows its stdout with the long polls of
any process and kills it when the iterator is closed. Stdlib only, Python 3.8+.

Each line is one JSON object: first ``{"kind": "watching", "path": ...,
"method": "inotify" | "polling"}``, then ``created`` / ``modified`` /
``deleted`` / ``moved`` events (``moved`` with ``dest``), and ``overflow``
when the kernel dropped events. Events are gathered until the tree has been
quiet for the debounce (or for ten debounces at most) and coalesced per
path: created then modified is created, created then deleted is nothing,
deleted then created is modified; a move within the tree is one ``moved``,
out of it ``deleted``, into it ``created``. At most ``PENDING`` paths wait
in a batch (then it is printed early), so memory stays bounded however
busy the tree is.

inotify is reached through ``ctypes`` (libc's ``inotify_init1`` and
``inotify_add_watch``). Where that fails (no ``ctypes``, no inotify, the
watch limit reached), the tree is polled every ``POLL_SECONDS`` instead,
``lstat`` of every entry compared with the previous walk (no ``moved``
then: a move is a deletion and a creation), and the first line says so.
"""

from __future__ import annotations

import json
import os
import select
import struct
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

IN_MODIFY = 0x2
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
MASK = (
    IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
#: ``struct inotify_event``'s fixed part: wd, mask, cookie, len.
HEADER = struct.Struct("iIII")
#: Paths a batch may hold before it is printed without waiting for quiet.
PENDING = 10000
#: Seconds between two walks of a polled tree.
POLL_SECONDS = 1.0


def emit(event: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")


class Batch:
    """Events gathered until the tree is quiet, coalesced per path."""

    def __init__(self) -> None:
        self.kinds = {}  # type: Dict[str, Tuple[str, Optional[str]]]  # in order of first change

    def add(self, kind: str, path: str, dest: Optional[str] = None) -> None:
        before = self.kinds.pop(path, None)
        if before is not None and kind != "moved":
            old = before[0]
            if old == "created" and kind == "modified":
                kind = "created"
            elif old == "created" and kind == "deleted":
                return
            elif old == "deleted" and kind == "created":
                kind = "modified"
        self.kinds[path] = (kind, dest)

    def flush(self) -> None:
        for path, (kind, dest) in self.kinds.items():
            event = {"kind": kind, "path": path}  # type: Dict[str, Any]
            if dest is not None:
                event["dest"] = dest
            emit(event)
        self.kinds = {}
        sys.stdout.flush()


def decoded(path: bytes) -> str:
    return os.fsdecode(path)


class Inotify:
    def __init__(self, root: bytes, recursive: bool) -> None:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.libc = libc
        self.fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.get_errno = ctypes.get_errno
        self.recursive = recursive
        self.paths = {}  # type: Dict[int, bytes]
        self.root = root
        #: cookie -> source of a move whose other half has not been read yet
        #: (the two may come in two reads); dropped with each printed batch.
        self.moves = {}  # type: Dict[int, bytes]
        self.add(root)

    def add(self, directory: bytes, batch: Optional[Batch] = None) -> None:
        """Watch ``directory`` (and, recursively, what is in it); what is in
        it already is reported to ``batch`` as created (it may have appeared
        before the watch did)."""
        wd = self.libc.inotify_add_watch(self.fd, directory, MASK)
        if wd < 0:
            raise OSError(self.get_errno(), "inotify_add_watch")
        self.paths[wd] = directory
        if not self.recursive and batch is None:
            return
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            if batch is not None:
                batch.add("created", decoded(entry.path))
            if self.recursive and entry.is_dir(follow_symlinks=False):
                self.add(entry.path, batch)

    def read(self, batch: Batch) -> bool:
        """Put what the kernel has in ``batch``; False once the root is gone."""
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return True
        offset = 0
        alive = True
        while offset < len(data):
            wd, mask, cookie, length = HEADER.unpack_from(data, offset)
            name = data[offset + HEADER.size : offset + HEADER.size + length].rstrip(b"\0")
            offset += HEADER.size + length
            if mask & IN_Q_OVERFLOW:
                batch.flush()
                emit({"kind": "overflow", "path": decoded(self.root)})
                continue
            directory = self.paths.get(wd)
            if directory is None:
                continue
            if mask & IN_IGNORED:
                del self.paths[wd]
                continue
            if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                if directory == self.root:
                    batch.add("deleted", decoded(directory))
                    alive = False
                continue
            path = os.path.join(directory, name)
            if mask & IN_MOVED_FROM:
                self.moves[cookie] = path
                batch.add("deleted", decoded(path))
            elif mask & IN_MOVED_TO:
                source = self.moves.pop(cookie, None)
                if source is not None:
                    batch.kinds.pop(decoded(source), None)
                    batch.add("moved", decoded(source), decoded(path))
                else:
                    batch.add("created", decoded(path))
                if mask & IN_ISDIR and self.recursive:
                    self.add(path, batch)
            elif mask & IN_CREATE:
                batch.add("created", decoded(path))
                if mask & IN_ISDIR and self.recursive:
                    self.add(path, batch)
            elif mask & IN_DELETE:
                batch.add("deleted", decoded(path))
            elif mask & (IN_MODIFY | IN_CLOSE_WRITE) and not mask & IN_ISDIR:
                batch.add("modified", decoded(path))
        return alive


def snapshot(root: bytes, recursive: bool) -> Dict[bytes, Tuple[int, int, int, int]]:
    """Every entry under ``root`` with what a change alters: type, size, mtime, inode."""
    found = {}  # type: Dict[bytes, Tuple[int, int, int, int]]
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[entry.path] = (st.st_mode >> 12, st.st_size, st.st_mtime_ns, st.st_ino)
            if recursive and entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return found


def poll_forever(root: bytes, recursive: bool) -> None:
    before = snapshot(root, recursive)
    while os.path.isdir(root):
        time.sleep(POLL_SECONDS)
        after = snapshot(root, recursive)
        batch = Batch()
        for path, state in after.items():
            old = before.get(path)
            if old is None:
                batch.add("created", decoded(path))
            elif old != state and state[0] != 4:  # a directory's own mtime is its entries' news
                batch.add("modified", decoded(path))
        for path in before:
            if path not in after:
                batch.add("deleted", decoded(path))
        batch.flush()
        before = after
    emit({"kind": "deleted", "path": decoded(root)})


def main() -> None:
    root = os.fsencode(sys.argv[1])
    recursive = sys.argv[2] == "1"
    debounce = float(sys.argv[3])
    try:
        watcher = Inotify(root, recursive)
    except (ImportError, OSError, AttributeError) as exc:
        emit({"kind": "watching", "path": decoded(root), "method": "polling", "reason": str(exc)})
        sys.stdout.flush()
        poll_forever(root, recursive)
        return
    emit({"kind": "watching", "path": decoded(root), "method": "inotify"})
    sys.stdout.flush()
    batch = Batch()
    poller = select.poll()
    poller.register(watcher.fd, select.POLLIN)
    due = None  # type: Optional[float]  # when a batch must be printed, quiet or not
    alive = True
    while alive:
        wait = None if due is None else int(max(0.0, min(debounce, due - time.monotonic())) * 1000) + 1
        ready = poller.poll(wait)
        if ready:
            alive = watcher.read(batch)
        if not batch.kinds:
            due = None
            continue
        if due is None:
            due = time.monotonic() + 10 * debounce
        if not ready or len(batch.kinds) >= PENDING or time.monotonic() >= due:
            batch.flush()
            watcher.moves.clear()
            due = None
    batch.flush()


if __name__ == "__main__":
    main()
