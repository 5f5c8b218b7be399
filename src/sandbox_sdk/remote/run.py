"""Run a shell command with a working directory, extra environment and stdin.

On success this script *becomes* ``bash -c command`` (``execve``), so the
command's output and exit status are the operation's own and no frame is
printed; a frame appears only when the set-up fails (say, a missing ``cwd``).
"""

from __future__ import annotations

import os

from sandbox_sdk.remote._runtime import TYPE_CHECKING, Fail, check_path, unb64

if TYPE_CHECKING:
    from typing import Tuple

    from sandbox_sdk.remote._runtime import Args, Blobs


def run(args: Args, blobs: Blobs) -> Tuple[None, Blobs]:
    if args.get("cwd") is not None:
        cwd = unb64(args["cwd"])
        check_path(cwd)
        os.chdir(cwd)
    env = dict(os.environb)
    for key, value in args.get("env", {}).items():
        env[unb64(key)] = unb64(value)
    stdin = args.get("stdin")
    if isinstance(stdin, int):
        fd = os.memfd_create("stdin") if hasattr(os, "memfd_create") else anonymous_file()
        data = memoryview(blobs[stdin])
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
    elif isinstance(stdin, str):  # staged earlier because it was too large for the command
        path = unb64(stdin)
        fd = os.open(path, os.O_RDONLY)
        os.unlink(path)
    else:
        fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    if fd != 0:
        os.close(fd)
    try:
        os.execvpe(b"bash", [b"bash", b"-c", unb64(args["command"])], env)
    except OSError as exc:
        raise Fail("NOT_FOUND", "cannot start bash: %s" % exc) from None
    return None, []  # not reached: execvpe replaces this process


def anonymous_file() -> int:
    import tempfile

    fd, path = tempfile.mkstemp()
    os.unlink(path)
    return fd


OPS = {"run": run}
