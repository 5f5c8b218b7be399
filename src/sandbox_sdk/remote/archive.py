"""Pack a directory into a tar archive, or unpack one safely.

Extraction checks every member before writing anything: no absolute names,
no ``..``, no hard or symbolic link that points outside the target, no member
below or link through a symlink member, nothing but files, directories and
links. Python's own ``tarfile`` filters check one member at a time and exist
only from 3.8.17 / 3.11.4 on; a sandbox's Python may be older. The client
checks the archives it downloads with the same ``check_members``.
"""

from __future__ import annotations

import os
import tarfile

from sandbox_sdk.remote._runtime import (
    TYPE_CHECKING,
    Fail,
    b64,
    compile_glob,
    file_sha256,
    open_regular,
    path_arg,
    remove_quietly,
    sweep_stale,
    unb64,
)

if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Set, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs
    from sandbox_sdk.remote.write import LandedReply

    class CreateReply(TypedDict):
        size: int  # of the archive
        skipped: List[str]  # symlinks left out (payload-encoded names), see TreeFilter

    class ExtractReply(TypedDict):
        members: int


#: What to do with a symlink that points outside the tree being packed.
SYMLINK_POLICIES = ("skip", "refuse", "copy-inside")


class TreeFilter:
    """Chooses the members of a tree's archive, on either side (the client
    packs an upload with it, the sandbox a download).

    ``exclude``: glob patterns (as ``glob`` reads them: ``*``, ``?`` and
    ``[...]`` never match ``/``), each matched against every name in a
    member's path and against the whole relative path, so ``.git``
    leaves out every ``.git`` directory with its contents and ``build/*.o``
    those object files. ``symlinks`` decides a link that points outside the
    tree (absolute, or leaving it through ``..`` or another link): ``skip``
    leaves it out and lists it in ``skipped``, ``refuse`` fails the whole
    transfer, ``copy-inside`` packs a copy of the regular file it points to
    in its place (one to a directory or to nothing is skipped). Links that
    stay inside the tree are always kept as links."""

    def __init__(self, root: str, exclude: List[str], symlinks: str, leave_out: str = "") -> None:
        if symlinks not in SYMLINK_POLICIES:
            raise Fail("INVALID_ARGUMENT", "symlinks must be one of %s" % ", ".join(SYMLINK_POLICIES))
        self.root = os.path.realpath(root)
        self.exclude = [compile_glob(os.fsencode(pattern)) for pattern in exclude]
        self.symlinks = symlinks
        self.leave_out = leave_out  # a member name never packed (the archive itself)
        self.skipped: List[str] = []
        self.copies: List[str] = []

    def __call__(self, member: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        name = member_name(member)
        if name == self.leave_out or self.excluded(name):
            return None
        if member.issym() and self.escapes(name, member):
            if self.symlinks == "refuse":
                raise Fail(
                    "INVALID_PATH", "symlink points outside the tree: %r -> %r" % (name, member.linkname)
                )
            if self.symlinks == "copy-inside" and os.path.isfile(os.path.join(self.root, name)):
                self.copies.append(name)
            else:
                self.skipped.append(name)
            return None
        return member

    def excluded(self, name: str) -> bool:
        raw = os.fsencode(name)
        candidates = [raw, *raw.split(b"/")]
        return any(pattern.match(candidate) for pattern in self.exclude for candidate in candidates)

    def escapes(self, name: str, member: tarfile.TarInfo) -> bool:
        try:
            resolve_link(self.root, set(), name.split("/")[:-1], member)
        except Fail:
            return True
        return False

    def pack(self, tar: tarfile.TarFile) -> None:
        """Add the tree's entries to ``tar``, then the copies ``copy-inside`` chose."""
        for name in sorted(os.listdir(self.root)):
            tar.add(os.path.join(self.root, name), arcname=name, filter=self)
        for name in self.copies:
            source = os.path.realpath(os.path.join(self.root, name))
            with open(source, "rb") as content:
                tar.addfile(tar.gettarinfo(source, arcname=name, fileobj=content), content)


def tree_filter(args: Args, root: str, leave_out: str = "") -> TreeFilter:
    """The :class:`TreeFilter` a ``create`` call's arguments ask for."""
    exclude = [os.fsdecode(unb64(pattern)) for pattern in args.get("exclude", [])]
    return TreeFilter(root, exclude, args.get("symlinks", "refuse"), leave_out)


def create(args: Args, blobs: Blobs) -> Tuple[CreateReply, Blobs]:
    root = path_arg(args)
    archive = unb64(args["archive"])
    if not os.path.isdir(root):
        os.stat(root)
        raise Fail("NOT_DIRECTORY", "not a directory", root)
    # The archive may lie inside the tree (say, a download of /tmp): never pack it into itself.
    own_name = os.fsdecode(os.path.relpath(os.path.realpath(archive), os.path.realpath(root)))
    select = tree_filter(args, os.fsdecode(root), own_name)
    fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    sweep_stale(os.path.dirname(archive), os.fstat(fd).st_mtime)
    try:
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
            select.pack(tar)
    except BaseException:
        remove_quietly(archive)
        raise
    skipped = [b64(os.fsencode(name)) for name in select.skipped]
    return {"size": os.stat(archive).st_size, "skipped": skipped}, []


def inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_members(root: str, members: List[tarfile.TarInfo]) -> None:
    """Refuse the whole archive unless every member lands inside ``root``.

    Members are checked against each other, not one at a time: a link made by
    one member must not carry a later one outside. So besides absolute names,
    ``..`` and links whose target leaves ``root``, no member may sit below a
    symlink member (``tar`` never makes such archives), and no link target may
    pass through one. Paths are also resolved against what is already on disk,
    so an existing symlink cannot be written through either."""
    links: Set[str] = set()
    for member in members:
        if member.issym():
            links.add(member_name(member))
    for member in members:
        name = member_name(member)
        parts = name.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in links:
                raise Fail("INVALID_PATH", "archive member is below a symlink member: %r" % member.name)
        if not inside(root, os.path.realpath(os.path.join(root, name))):
            raise Fail("INVALID_PATH", "archive member would land outside the target: %r" % member.name)
        if member.issym():
            resolve_link(root, links, parts[:-1], member)
        elif member.islnk():
            resolve_link(root, links, [], member)
        elif not (member.isfile() or member.isdir()):
            raise Fail("INVALID_PATH", "archive member is not a file, directory or link: %r" % member.name)


def member_name(member: tarfile.TarInfo) -> str:
    """The member's name, normalised; absolute names and ``..`` are refused."""
    name = member.name
    if name.startswith("/") or os.path.isabs(name):
        raise Fail("INVALID_PATH", "archive member has an absolute name: %r" % name)
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise Fail("INVALID_PATH", "archive member name contains '..': %r" % name)
    return "/".join(parts) or "."


def resolve_link(root: str, links: Set[str], start: List[str], member: tarfile.TarInfo) -> None:
    """Walk a link target from ``start`` (a symlink's directory; the archive
    root for a hard link): it may not leave ``root``, nor pass through a
    symlink member (whose target is not on disk yet to be checked), nor
    leave through a symlink already on disk (``d/..`` with ``d`` one)."""
    target = member.linkname
    if not target or target.startswith("/") or os.path.isabs(target):
        raise Fail("INVALID_PATH", "link member has an absolute or empty target: %r" % member.name)
    stack = list(start)
    parts = [part for part in target.split("/") if part not in ("", ".")]
    for index, part in enumerate(parts):
        if part == "..":
            if not stack:
                raise Fail("INVALID_PATH", "link member points outside the target: %r" % member.name)
            stack.pop()
            continue
        stack.append(part)
        if index < len(parts) - 1 and "/".join(stack) in links:
            raise Fail("INVALID_PATH", "link member points through a symlink member: %r" % member.name)
    # By name, then as the kernel would follow it: realpath resolves each
    # component in turn, so ``..`` after an existing symlink leaves from its target.
    for path in (os.path.join(root, *stack), os.path.join(root, *start, target)):
        if not inside(root, os.path.realpath(path)):
            raise Fail("INVALID_PATH", "link member points outside the target: %r" % member.name)


def extract(args: Args, blobs: Blobs) -> Tuple[ExtractReply, Blobs]:
    archive = unb64(args["archive"])
    dest = path_arg(args)
    try:
        root = os.path.realpath(os.fsdecode(dest))
        with tarfile.open(os.fsdecode(archive), mode="r:") as tar:
            members = tar.getmembers()
            check_members(root, members)  # before creating anything: a refused tree leaves nothing
            os.makedirs(dest, exist_ok=True)
            directories = []
            for member in members:
                member.mode &= 0o777  # no setuid, setgid or sticky bits
                # Files belong to whoever runs the sandbox, not to the client's uid.
                member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
                if member.isdir():
                    directories.append(member)
                # Directories get their modes last, so a read-only one can still be filled.
                set_attrs = not (member.issym() or member.isdir())
                tar.extract(member, root, set_attrs=set_attrs, **extract_options())
            for member in reversed(directories):
                os.chmod(os.path.join(root, member_name(member)), member.mode)
    finally:
        remove_quietly(archive)
    return {"members": len(members)}, []


def extract_options() -> Dict[str, Any]:
    # check_members vetted the archive as a whole, which no per-member filter
    # can; "fully_trusted" (where filters exist) keeps the permission bits the
    # "tar" filter would mask and silences the 3.12+ deprecation warning.
    return {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


def extracted(args: Args, blobs: Blobs) -> Tuple[LandedReply, Blobs]:
    """Whether an extract whose reply was lost did land: its archive is gone
    and the target holds every member as the archive had it (``members``:
    base64 name, kind, and a file's SHA-256 or a symlink's base64 target)."""
    root = path_arg(args)
    if os.path.lexists(unb64(args["archive"])):
        return {"landed": False}, []
    for name, kind, detail in args["members"]:
        try:
            if not member_landed(os.path.join(root, unb64(name)), kind, detail):
                return {"landed": False}, []
        except (OSError, Fail):
            return {"landed": False}, []
    return {"landed": True}, []


def member_landed(path: bytes, kind: str, detail: str) -> bool:
    if kind == "file":
        with open_regular(path) as f:
            return file_sha256(f) == detail
    if kind == "dir":
        return os.path.isdir(path) and not os.path.islink(path)
    if kind == "symlink":
        return os.readlink(path) == unb64(detail)
    return os.path.lexists(path)


OPS = {"create": create, "extract": extract, "extracted": extracted}
