"""What the fake cloud services run commands as: never with root's bypass of file permissions.

The services run a sandbox's commands as an ordinary user (E2B's ``user``,
Daytona's ``daytona``), for whom a file's mode bits hold, while the tests
run as whoever runs them: root in CI. So when this process is root, a fake
runs each command under ``setpriv`` with ``CAP_DAC_OVERRIDE`` and
``CAP_DAC_READ_SEARCH`` dropped from its bounding set (as
tests/test_grep_paths.py does): it and everything it starts keep root's
uid, so they may still write what root owns, but a mode that refuses its
owner refuses them, and ``permission_denied`` is really tested. ``setpriv``
execs the command, so its pid is the one the fake reports.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

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


__all__ = ["SETPRIV", "without_root_bypass"]
