"""Pack a directory into a tar archive, or unpack one safely.

Extraction checks every member before writing anything: no absolute names,
no ``..``, no hard or symbolic link that points outside the target, nothing
but files, directories and links. Python's own ``tarfile`` filters exist only
from 3.8.17 / 3.11.4 on, and a sandbox's Python may be older.
"""

from __future__ import annotations

import os
import tarfile
from typing import Any, Dict

from sandbox_sdk.remote._runtime import Args, Blobs, Fail, Result, path_arg, remove_quietly, unb64


def create(args: Args, blobs: Blobs) -> Result:
    root = path_arg(args)
    archive = unb64(args["archive"])
    if not os.path.isdir(root):
        os.stat(root)
        raise Fail("NOT_DIRECTORY", "not a directory", root)
    fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(os.listdir(root)):
                tar.add(os.fsdecode(os.path.join(root, name)), arcname=os.fsdecode(name))
    except BaseException:
        remove_quietly(archive)
        raise
    return {"size": os.stat(archive).st_size}, []


def member_target(root: str, member: tarfile.TarInfo) -> str:
    name = member.name
    if name.startswith("/") or os.path.isabs(name):
        raise Fail("INVALID_PATH", "archive member has an absolute name: %r" % name)
    if ".." in name.split("/"):
        raise Fail("INVALID_PATH", "archive member name contains '..': %r" % name)
    target = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, target]) != root:
        raise Fail("INVALID_PATH", "archive member would land outside the target: %r" % name)
    if member.issym():
        link = os.path.realpath(os.path.join(os.path.dirname(target), member.linkname))
        if os.path.isabs(member.linkname) or os.path.commonpath([root, link]) != root:
            raise Fail("INVALID_PATH", "symlink member points outside the target: %r" % name)
    elif member.islnk():
        link = os.path.realpath(os.path.join(root, member.linkname))
        if os.path.commonpath([root, link]) != root:
            raise Fail("INVALID_PATH", "hard link member points outside the target: %r" % name)
    elif not (member.isfile() or member.isdir()):
        raise Fail("INVALID_PATH", "archive member is not a file, directory or link: %r" % name)
    return target


def extract(args: Args, blobs: Blobs) -> Result:
    archive = unb64(args["archive"])
    dest = path_arg(args)
    try:
        os.makedirs(dest, exist_ok=True)
        root = os.path.realpath(os.fsdecode(dest))
        with tarfile.open(os.fsdecode(archive), mode="r:") as tar:
            members = tar.getmembers()
            for member in members:
                member_target(root, member)
                member.mode &= 0o777  # no setuid, setgid or sticky bits
            for member in members:
                tar.extract(member, root, set_attrs=not member.issym(), **extract_options())
    finally:
        remove_quietly(archive)
    return {"members": len(members)}, []


def extract_options() -> Dict[str, Any]:
    # Every member was checked above; the "tar" filter (where it exists) only
    # silences the 3.12+ deprecation warning and re-checks the same things.
    return {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}


OPS = {"create": create, "extract": extract}
