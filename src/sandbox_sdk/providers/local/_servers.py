"""Stopping, at interpreter exit, the operation servers this process started for local sandboxes.

A local sandbox's operation server (docs/protocol.md) is a process of this
machine, started by a command of the program and shared by every program of
the same user, scratch directory and SDK version; on its own it exits only
after ``operation_server_idle`` seconds without a request. So that it does not
outlive the program that started it by that long, each scratch directory in
which a local sandbox of this process started a server is remembered, and at
interpreter exit that server is told to stop the way the protocol already has:
its port file is removed, and it exits within a tick of seeing it gone (the
spares waiting for a connection leave with it; a worker serving a request
finishes it). Another program using the same server meanwhile loses nothing:
its next operation finds no server and starts its own.

Not at the close of the process's last sandbox: a program that makes and
deletes sandboxes one after another would stop and restart the server for
each (one operation unserved, then a ``python3`` start, every time), and other
programs share it. Not in a child made by ``fork``, which inherits the record
but did not start the server.
"""

from __future__ import annotations

import atexit
import os
import stat
import threading
import weakref
from typing import Any

from sandbox_sdk import protocol

#: Scratch directories in which a local sandbox of this process started a server.
_started: set[str] = set()
#: The sessions of the local sandboxes alive in this process, by ``id()`` of their dict.
_watched: dict[int, dict[str, Any]] = {}
_lock = threading.Lock()
#: The pid that registered the exit hook (a forked child has another).
_owner = [0]


def watch(sandbox: object) -> None:
    """Remember the servers ``sandbox``'s sessions start, now and after it is gone."""
    sessions: dict[str, Any] = vars(sandbox).setdefault("_sessions", {})
    with _lock:
        _watched[id(sessions)] = sessions
        if _owner[0] != os.getpid():
            _owner[0] = os.getpid()
            atexit.register(stop_started_servers)
    weakref.finalize(sandbox, _forget, sessions)


def _note(sessions: dict[str, Any]) -> None:
    _started.update(scratch for scratch, session in sessions.items() if session.launched)


def _forget(sessions: dict[str, Any]) -> None:
    with _lock:
        _note(sessions)
        _watched.pop(id(sessions), None)


def port_file(scratch_dir: str) -> str:
    """The port file of this user's server in ``scratch_dir`` (``protocol.command``'s ``$F``)."""
    scripts = protocol.scripts_dir_in(scratch_dir) % os.getuid()
    return os.path.join(scripts, protocol.shipped("server").name + ".port")


def stop_started_servers() -> list[str]:
    """Remove the port file of each server this process started (if it is
    still a regular file of this user's, not a link): the servers exit within a
    tick. Returns the files removed. Does nothing in a forked child."""
    if _owner[0] != os.getpid():
        return []
    with _lock:
        for sessions in _watched.values():
            _note(sessions)
        scratch_dirs = sorted(_started)
        _started.clear()
    removed = []
    for scratch_dir in scratch_dirs:
        path = port_file(scratch_dir)
        try:
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
                os.unlink(path)
                removed.append(path)
        except OSError:  # gone already (it stopped when idle), or its directory is
            continue
    return removed
