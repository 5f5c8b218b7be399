"""Stand-in for ``/__modal/.bin/modal-sandbox-fs-tools``, the binary Modal's filesystem API execs.

``modal.Sandbox.filesystem`` (modal 1.6) does every operation by exec'ing that
binary with one JSON argument (``{"WriteFile": {"path": ...}}``, ``ReadFile``,
``Stat``, ``ListFiles``, ``MakeDirectory``, ``Remove``), streaming file content
through stdin/stdout and reporting failures as one JSON object on stderr
(``{"error_kind": ..., "message": ...}``) with a non-zero exit code. The
command shapes and error kinds are the ones ``modal/_utils/sandbox_fs_utils.py``
builds and parses. The fake server (``fake_server.py``) runs this script as a
real process in place of the binary, so the SDK's filesystem calls go through
exec, stdin streaming and stdout reads exactly as against the real service.

Writes are deliberately plain (truncate then write, no temp file and rename):
nothing in the SDK promises more, so a provider must not rely on more.
``Watch`` answers ``NotSupported``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import sys
from typing import Any, NoReturn

_ERRNO_KINDS = {
    errno.ENOENT: "NotFound",
    errno.EISDIR: "IsDirectory",
    errno.ENOTDIR: "NotDirectory",
    errno.EACCES: "PermissionDenied",
    errno.EPERM: "PermissionDenied",
    errno.EEXIST: "AlreadyExists",
    errno.ENOTEMPTY: "DirectoryNotEmpty",
}


def _fail(kind: str, message: str) -> NoReturn:
    sys.stderr.write(json.dumps({"error_kind": kind, "message": message}))
    sys.exit(1)


def _fail_os(exc: OSError, *, exists_kind: str = "AlreadyExists") -> NoReturn:
    kind = _ERRNO_KINDS.get(exc.errno or 0, "Other")
    if kind == "AlreadyExists":
        kind = exists_kind
    _fail(kind, exc.strerror or str(exc))


def _file_type(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "Symlink"
    if stat.S_ISDIR(mode):
        return "Directory"
    if stat.S_ISREG(mode):
        return "File"
    return "Unknown"


def _entry(path: str) -> dict[str, Any]:
    st = os.lstat(path)
    return {
        "name": os.path.basename(path.rstrip("/")) or "/",
        "path": path,
        "type": _file_type(st.st_mode),
        "size": st.st_size,
        "mode": st.st_mode,
        "permissions": stat.filemode(st.st_mode),
        "owner": str(st.st_uid),
        "group": str(st.st_gid),
        "modified_time": int(st.st_mtime),
        "symlink_target": os.readlink(path) if stat.S_ISLNK(st.st_mode) else None,
    }


def _write_file(path: str) -> None:
    data = sys.stdin.buffer.read()
    parent = os.path.dirname(path)
    try:
        if os.path.isdir(path):
            _fail("IsDirectory", "Is a directory")
        os.makedirs(parent, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        _fail_os(exc, exists_kind="NotDirectory")


def _read_file(path: str) -> None:
    try:
        with open(path, "rb") as fh:
            shutil.copyfileobj(fh, sys.stdout.buffer)
    except OSError as exc:
        _fail_os(exc)


def _make_directory(path: str, parents: bool) -> None:
    try:
        if parents:
            os.makedirs(path, exist_ok=True)
        else:
            os.mkdir(path)
    except OSError as exc:
        _fail_os(exc, exists_kind="PathAlreadyExists")


def _remove(path: str, recursive: bool) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            if recursive:
                shutil.rmtree(path)
            else:
                os.rmdir(path)
        else:
            os.unlink(path)
    except OSError as exc:
        _fail_os(exc)


def _list_files(path: str) -> None:
    try:
        if not os.path.isdir(path):
            os.lstat(path)  # raises NotFound for a missing path
            _fail("NotDirectory", "Not a directory")
        names = sorted(os.listdir(path))
        entries = [_entry(os.path.join(path, name)) for name in names]
    except OSError as exc:
        _fail_os(exc)
    sys.stdout.write(json.dumps(entries))


def _stat(path: str) -> None:
    try:
        entry = _entry(path)
    except OSError as exc:
        _fail_os(exc)
    sys.stdout.write(json.dumps(entry))


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        _fail("InvalidCommand", "expected exactly one JSON command argument")
    command: dict[str, dict[str, Any]] = json.loads(argv[0])
    ((name, args),) = command.items()
    path = args["path"]
    if name == "WriteFile":
        _write_file(path)
    elif name == "ReadFile":
        _read_file(path)
    elif name == "MakeDirectory":
        _make_directory(path, bool(args.get("parents", True)))
    elif name == "Remove":
        _remove(path, bool(args.get("recursive", False)))
    elif name == "ListFiles":
        _list_files(path)
    elif name == "Stat":
        _stat(path)
    else:
        _fail("NotSupported", f"{name} is not supported by the fake fs tools")


if __name__ == "__main__":
    main(sys.argv[1:])
