"""Running a fake cloud service's commands without root's bypass of file permissions.

The services run a sandbox's commands as an ordinary user (E2B's ``user``,
Daytona's ``daytona``), for whom a file's mode bits hold, while the tests
run as whoever runs them: root in CI. A fake told to (its
``unprivileged_commands``, Modal's ``unprivileged_execs``) runs each command
under ``setpriv`` with ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH``
dropped from its bounding set (as tests/test_grep_paths.py does) when this
process is root: it and everything it starts keep root's uid, so they may
still write what root owns, but a mode that refuses its owner refuses them,
and ``permission_denied`` is really tested. ``setpriv`` execs the command,
so its pid is the one the fake reports. A fake whose service does file
operations as that user too (Daytona's daemon) checks them with
:func:`check_as_owner` first.

Not by default: the operation server (remote/server.py) is one per user of
the machine, shared by every sandbox whose commands run as that user, and it
declines a command with fewer capabilities than its own (and a server
started by such a command declines the others' with more). Commands without
the bypass in one test would have every other test's sandboxes, on any
provider run alongside, declined by the server they started, or decline
theirs. So a test turns it on for a sandbox of its own whose
``operation_server`` is off.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

#: util-linux's setpriv (an essential package on Debian and Ubuntu).
SETPRIV = shutil.which("setpriv")


def without_root_bypass(argv: Sequence[str]) -> list[str]:
    """``argv`` as a fake runs it: unchanged for a user other than root,
    else under ``setpriv`` without root's bypass of file permissions."""
    if os.geteuid() != 0:
        return list(argv)
    if SETPRIV is None:
        raise RuntimeError("the fake services run commands through setpriv (util-linux) when run as root")
    return [SETPRIV, "--bounding-set", "-dac_override,-dac_read_search", "--", *argv]


def check_as_owner(path: Path, *, write: bool) -> None:
    """Raise ``PermissionError`` where the mode bits refuse the file's owner what
    root's bypass would allow: searching each directory on the way, reading
    ``path`` (or, with ``write``, writing it, or creating it and any missing
    parents in the nearest directory that exists). The fakes' files are all
    the tests' user's, so the owner's bits are the ones that hold; run as
    another user than root, the system checks them itself and this does nothing."""
    if os.geteuid() != 0:
        return
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    for directory in reversed(existing.parents):
        _need(directory, stat.S_IXUSR)
    if existing == path:
        _need(path, stat.S_IWUSR if write else stat.S_IRUSR)
    elif write:
        _need(existing, stat.S_IWUSR | stat.S_IXUSR)


def _need(path: Path, bits: int) -> None:
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # the operation itself reports it
    if mode & bits != bits:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


__all__ = ["SETPRIV", "check_as_owner", "without_root_bypass"]
