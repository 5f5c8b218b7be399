"""Workspace snapshots: a sandbox's files kept past the sandbox.

A :class:`Snapshot` is a manifest (every file, directory and symlink under
a root, with modes, sizes, SHA-256 digests and hard links) whose contents
live in a :class:`SnapshotStore` by digest, so unchanged files are stored
once across snapshots. Taking one is derived from ``execute()`` like every
other operation: the tree comes over in one verified ``download_dir``, is
hashed into the store, and the manifest is written last, so a snapshot
interrupted at any point leaves nothing visible but blobs a later snapshot
may reuse. Restoring builds the tree from the store (each blob checked
against its digest first), stages it beside the target with
``upload_dir`` and puts it in place in one step (docs/state.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import shutil
import stat
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import DELETE, REPLACE_TREE
from sandbox_sdk._core import CLEANUP_TIMEOUT, Operation, SandboxCore, new_token
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk.transfer._directories import download_dir, upload_dir

#: What names a snapshot and a blob: a SHA-256 in hex.
DIGEST = re.compile(r"[0-9a-f]{64}")
CHUNK = 1024 * 1024


class SnapshotEntry(BaseModel):
    """One entry of a snapshot, its ``path`` relative to the snapshot's root
    (names that are not UTF-8 kept as ``os.fsdecode`` gives them)."""

    model_config = ConfigDict(frozen=True)

    path: str
    kind: Literal["file", "dir", "symlink"]
    #: Permission bits (``stat.S_IMODE``).
    mode: int = 0
    size: int = 0
    sha256: str | None = None
    #: A symlink's target, as it was.
    target: str | None = None
    #: An earlier file entry this one is a hard link of (its content stored once).
    hardlink_of: str | None = None


class Snapshot(BaseModel):
    """Files of a sandbox captured: ``paths`` are the workspace paths taken
    (``"."``: the whole working directory), ``entries`` what was under
    them. ``id`` is the SHA-256 of both, so the same files make the same
    id; ``size`` counts each file once."""

    model_config = ConfigDict(frozen=True)

    id: str
    paths: tuple[str, ...]
    entries: tuple[SnapshotEntry, ...]
    size: int
    created: float

    @property
    def files(self) -> int:
        """How many files it holds (a hard link counted as a file)."""
        return sum(1 for entry in self.entries if entry.kind == "file")


class SnapshotStore(ABC):
    """Where snapshots live: blobs by digest, and manifests by snapshot id.

    A store implements six primitives; :meth:`save`, :meth:`load` and
    :meth:`ids` are derived from them. A manifest is put only after every
    blob it names, and each put must be all or nothing (a rename, or an
    object store's single PUT), so a store never shows half a snapshot."""

    @abstractmethod
    def has_blob(self, digest: str) -> bool:
        """Whether the blob is stored (then a snapshot does not store it again)."""

    @abstractmethod
    def add_blob(self, digest: str, source: Path) -> None:
        """Keep the file ``source`` (already hashed to ``digest``) as that blob."""

    @abstractmethod
    def open_blob(self, digest: str) -> BinaryIO:
        """The blob's bytes; :class:`~sandbox_sdk.errors.SnapshotDamagedError` if it is missing."""

    @abstractmethod
    def put_manifest(self, snapshot_id: str, data: bytes) -> None:
        """Keep a manifest, whole or not at all."""

    @abstractmethod
    def get_manifest(self, snapshot_id: str) -> bytes | None:
        """A manifest's bytes; ``None`` if there is none."""

    @abstractmethod
    def manifest_ids(self) -> list[str]:
        """The ids of the manifests kept (as named; :meth:`ids` checks them)."""

    def save(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot``'s manifest (called once its blobs are in)."""
        self.put_manifest(snapshot.id, json.dumps(snapshot.model_dump(mode="python")).encode("utf-8"))

    def load(self, snapshot_id: str) -> Snapshot:
        """The snapshot ``snapshot_id``, its manifest checked against its id:
        :class:`~sandbox_sdk.errors.SnapshotNotFoundError` if there is none,
        :class:`~sandbox_sdk.errors.SnapshotDamagedError` if it was changed."""
        if not isinstance(snapshot_id, str) or not DIGEST.fullmatch(snapshot_id):
            raise errors.SnapshotNotFoundError(f"not a snapshot id: {snapshot_id!r}")
        data = self.get_manifest(snapshot_id)
        if data is None:
            raise errors.SnapshotNotFoundError(f"no snapshot {snapshot_id} in {self!r}")
        try:
            snapshot = Snapshot.model_validate(json.loads(data))
        except ValueError as exc:
            raise errors.SnapshotDamagedError(f"snapshot {snapshot_id}: unreadable manifest: {exc}") from None
        if snapshot.id != snapshot_id or manifest_id(snapshot.paths, snapshot.entries) != snapshot_id:
            raise errors.SnapshotDamagedError(f"snapshot {snapshot_id}: the manifest does not match its id")
        return snapshot

    def ids(self) -> list[str]:
        """The ids of the snapshots kept, sorted."""
        return sorted(name for name in self.manifest_ids() if DIGEST.fullmatch(name))


def blob_key(digest: str) -> str:
    """Where a store keeps a blob, relative to its root: ``blobs/<2 hex>/<digest>``."""
    if not DIGEST.fullmatch(digest):
        raise errors.SnapshotDamagedError(f"not a blob digest: {digest!r}")
    return f"blobs/{digest[:2]}/{digest}"


class DirectorySnapshotStore(SnapshotStore):
    """A store in a local directory (default ``$SANDBOX_SDK_HOME/snapshots``):
    ``blobs/<2 hex>/<digest>`` and ``snapshots/<id>.json``, created private
    (0700) and refused if another user owns it or it is a symlink."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        if root is None:
            from sandbox_sdk.provider_kit.host_state import default_state_dir  # not on import's path

            root = default_state_dir("snapshots")
        self.root = Path(root).expanduser()
        for directory in (self.root, self.root / "blobs", self.root / "snapshots"):
            _private_dir(directory)

    def has_blob(self, digest: str) -> bool:
        return (self.root / blob_key(digest)).is_file()

    def add_blob(self, digest: str, source: Path) -> None:
        blob = self.root / blob_key(digest)
        _private_dir(blob.parent)
        with _temporary_beside(blob) as temporary:
            shutil.copyfile(source, temporary)
            os.replace(temporary, blob)

    def open_blob(self, digest: str) -> BinaryIO:
        try:
            return (self.root / blob_key(digest)).open("rb")
        except FileNotFoundError:
            raise errors.SnapshotDamagedError(f"the store has no blob {digest}") from None

    def put_manifest(self, snapshot_id: str, data: bytes) -> None:
        manifest = self.root / "snapshots" / f"{snapshot_id}.json"
        with _temporary_beside(manifest) as temporary:
            temporary.write_bytes(data)
            os.replace(temporary, manifest)

    def get_manifest(self, snapshot_id: str) -> bytes | None:
        try:
            return (self.root / "snapshots" / f"{snapshot_id}.json").read_bytes()
        except FileNotFoundError:
            return None

    def manifest_ids(self) -> list[str]:
        return [path.stem for path in (self.root / "snapshots").glob("*.json")]

    def __repr__(self) -> str:
        return f"DirectorySnapshotStore({str(self.root)!r})"


class FsspecSnapshotStore(SnapshotStore):
    """A store at any fsspec URL (``file://``, ``memory://``, ``s3://bucket/prefix``
    with s3fs, ...), laid out as :class:`DirectorySnapshotStore`;
    ``storage_options`` go to the file system (credentials, an endpoint).
    Each blob and manifest is written under a temporary name and moved into
    place, so a reader never sees part of one (on an object store the move
    is a server-side copy: the object appears whole)."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        try:
            import fsspec
        except ImportError:
            raise errors.ProviderUnavailableError(
                "FsspecSnapshotStore needs fsspec: pip install 'sandbox-sdk-py[fsspec]'"
            ) from None
        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        self.root = str(root).rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _put(self, key: str, write: Callable[[str], object]) -> None:
        temporary, final = self._path(f"tmp/{new_token()}"), self._path(key)
        for parent in (posixpath.dirname(temporary), posixpath.dirname(final)):
            self.fs.makedirs(parent, exist_ok=True)  # a local file system's; nothing on an object store
        write(temporary)
        try:
            self.fs.mv(temporary, final)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm(temporary)
            raise

    def has_blob(self, digest: str) -> bool:
        return bool(self.fs.exists(self._path(blob_key(digest))))

    def add_blob(self, digest: str, source: Path) -> None:
        self._put(blob_key(digest), lambda temporary: self.fs.put_file(os.fspath(source), temporary))

    def open_blob(self, digest: str) -> BinaryIO:
        try:
            opened: BinaryIO = self.fs.open(self._path(blob_key(digest)), "rb")
        except FileNotFoundError:
            raise errors.SnapshotDamagedError(f"the store has no blob {digest}") from None
        return opened

    def put_manifest(self, snapshot_id: str, data: bytes) -> None:
        self._put(f"snapshots/{snapshot_id}.json", lambda temporary: self.fs.pipe_file(temporary, data))

    def get_manifest(self, snapshot_id: str) -> bytes | None:
        try:
            data: bytes = self.fs.cat_file(self._path(f"snapshots/{snapshot_id}.json"))
        except FileNotFoundError:
            return None
        return data

    def manifest_ids(self) -> list[str]:
        try:
            names = self.fs.ls(self._path("snapshots"), detail=False)
        except FileNotFoundError:
            return []
        return [posixpath.basename(name).removesuffix(".json") for name in names if name.endswith(".json")]

    def __repr__(self) -> str:
        return f"FsspecSnapshotStore({self.url!r})"


def _private_dir(path: Path) -> None:
    """``path`` as a directory of this user's, 0700, not a symlink."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise errors.SandboxPermissionError(
            f"snapshot store {path} is not a directory of this user's", path=str(path)
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)


@contextmanager
def _temporary_beside(path: Path) -> Iterator[Path]:
    """A fresh name in ``path``'s directory, removed unless renamed away."""
    fd, name = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


@contextmanager
def snapshot_store_for(store: SnapshotStore | None) -> Iterator[SnapshotStore]:
    """``store``, or a store in a temporary directory removed on leaving."""
    if store is not None:
        yield store
        return
    with tempfile.TemporaryDirectory(prefix="sbx-fork-") as work:
        yield DirectorySnapshotStore(work)


# -- capture: a local copy of the tree into the store ------------------------------------


def manifest_id(paths: tuple[str, ...], entries: tuple[SnapshotEntry, ...]) -> str:
    body = json.dumps([paths, [entry.model_dump(mode="python") for entry in entries]], sort_keys=True)
    return hashlib.sha256(body.encode("utf-8", "surrogateescape")).hexdigest()


def capture(tree: Path, paths: tuple[str, ...], store: SnapshotStore) -> Snapshot:
    """The snapshot of ``paths`` in ``tree``, a local copy of the workspace,
    its blobs added to ``store`` and its manifest saved last."""
    entries: list[SnapshotEntry] = []
    first_of: dict[tuple[int, int], str] = {}
    size = 0
    for path in _walk(tree, paths):
        name = os.fsdecode(os.path.relpath(path, tree))
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            entries.append(SnapshotEntry(path=name, kind="dir", mode=mode))
        elif stat.S_ISLNK(st.st_mode):
            entries.append(SnapshotEntry(path=name, kind="symlink", target=os.fsdecode(os.readlink(path))))
        elif stat.S_ISREG(st.st_mode):
            earlier = first_of.setdefault((st.st_dev, st.st_ino), name)
            if earlier != name:
                entries.append(SnapshotEntry(path=name, kind="file", mode=mode, hardlink_of=earlier))
                continue
            digest = _sha256(path)
            if not store.has_blob(digest):
                store.add_blob(digest, path)
            entries.append(SnapshotEntry(path=name, kind="file", mode=mode, size=st.st_size, sha256=digest))
            size += st.st_size
    frozen = tuple(entries)
    snapshot = Snapshot(
        id=manifest_id(paths, frozen), paths=paths, entries=frozen, size=size, created=time.time()
    )
    store.save(snapshot)
    return snapshot


def _walk(tree: Path, paths: tuple[str, ...]) -> Iterator[Path]:
    """Each of ``paths`` in ``tree`` and every entry under it, parents
    before children, in name order (bytes names: any a file system holds)."""
    for path in paths:
        top = os.fsencode(tree / path)
        if path != ".":
            yield Path(os.fsdecode(top))
        for directory, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(dirs + files):
                yield Path(os.fsdecode(os.path.join(directory, name)))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


# -- materialize: the tree built back from the store, verified ---------------------------


def materialize(snapshot: Snapshot, store: SnapshotStore, tree: Path) -> None:
    """Build ``snapshot``'s files in the empty directory ``tree``: each blob
    checked against its digest as it is copied, modes set last (a read-only
    directory would refuse its own entries otherwise).
    :class:`~sandbox_sdk.errors.SnapshotDamagedError` on any mismatch."""
    modes: list[tuple[Path, int]] = []
    for entry in snapshot.entries:
        path = _inside(tree, entry.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry.kind == "dir":
            path.mkdir(exist_ok=True)
            modes.append((path, entry.mode))
        elif entry.kind == "symlink":
            os.symlink(os.fsencode(entry.target or ""), path)
        elif entry.hardlink_of is not None:
            os.link(_inside(tree, entry.hardlink_of), path)
        else:
            _copy_blob(store, entry, path)
            modes.append((path, entry.mode))
    for path, mode in reversed(modes):
        os.chmod(path, mode)


def _inside(tree: Path, name: str) -> Path:
    path = Path(os.path.normpath(tree / name))
    if not name or os.path.isabs(name) or tree not in path.parents:
        raise errors.SnapshotDamagedError(f"snapshot entry {name!r} is outside its root")
    return path


def _copy_blob(store: SnapshotStore, entry: SnapshotEntry, path: Path) -> None:
    if entry.sha256 is None:
        raise errors.SnapshotDamagedError(f"snapshot entry {entry.path!r} has no digest")
    digest, size = hashlib.sha256(), 0
    with store.open_blob(entry.sha256) as blob, path.open("xb") as out:
        while block := blob.read(CHUNK):
            digest.update(block)
            size += len(block)
            out.write(block)
    if digest.hexdigest() != entry.sha256 or size != entry.size:
        raise errors.SnapshotDamagedError(
            f"blob {entry.sha256} of {entry.path!r} is damaged ({size} bytes, digest {digest.hexdigest()})"
        )


# -- the operations: snapshot and restore, derived from execute() ------------------------


def check_paths(paths: Sequence[str] | None) -> tuple[str, ...]:
    """The workspace paths a snapshot covers: relative, inside, none within another."""
    if paths is None:
        return (".",)
    if isinstance(paths, str) or not paths:
        raise errors.InvalidArgumentError("paths must be a non-empty list of paths in the workspace, or None")
    chosen = []
    for path in paths:
        if not isinstance(path, str) or not path or "\0" in path:
            raise errors.InvalidPathError(f"a snapshot path must be a non-empty str: {path!r}")
        name = posixpath.normpath(path)
        if posixpath.isabs(name) or name == ".." or name.startswith("../"):
            raise errors.InvalidPathError(
                f"a snapshot path must be inside the workspace: {path!r}", path=path
            )
        chosen.append(name)
    for a in chosen:
        for b in chosen:
            if a != b and (a == "." or b.startswith(a + "/")):
                raise errors.InvalidArgumentError(f"snapshot paths {a!r} and {b!r} overlap")
    if len(set(chosen)) != len(chosen):
        raise errors.InvalidArgumentError(f"a snapshot path is given twice: {paths!r}")
    return tuple(chosen)


def take_snapshot(
    sandbox: SandboxCore, paths: Sequence[str] | None, exclude: Sequence[str], store: SnapshotStore | None
) -> Operation[Snapshot]:
    """Each of ``paths`` downloaded (one ``download_dir`` each), then hashed into the store."""
    chosen, store = check_paths(paths), store if store is not None else DirectorySnapshotStore()
    with tempfile.TemporaryDirectory(prefix="sbx-snapshot-") as work:
        tree = Path(work, "tree")
        for path in chosen:
            yield from download_dir(sandbox, path, tree / path, None, exclude=exclude, symlinks="skip")
        return capture(tree, chosen, store)


def restore_snapshot(
    sandbox: SandboxCore, snapshot: Snapshot | str, store: SnapshotStore | None
) -> Operation[Snapshot]:
    """The snapshot built here and checked against its manifest, then each
    of its paths staged in the sandbox and put in place in one step."""
    store = store if store is not None else DirectorySnapshotStore()
    found = store.load(snapshot if isinstance(snapshot, str) else snapshot.id)
    with tempfile.TemporaryDirectory(prefix="sbx-restore-") as work:
        tree = Path(work, "tree")
        tree.mkdir()
        materialize(found, store, tree)
        for path in found.paths:
            (tree / path).mkdir(parents=True, exist_ok=True)  # a path that was an empty directory
            yield from _replace(sandbox, tree / path, path)
    return found


def _replace(sandbox: SandboxCore, local: Path, path: str) -> Operation[None]:
    """Put the local tree ``local`` at the sandbox's ``path``: uploaded beside
    it (inside it when it is the workspace itself), then swapped in."""
    name = f".sbx-restore-{new_token()}"
    inside = posixpath.basename(path) in ("", ".")
    staged = posixpath.join(path if inside else posixpath.dirname(path), name)
    try:
        yield from upload_dir(sandbox, local, staged, None, exclude=(), symlinks="refuse")
        args = {"path": protocol.encode_path(path), "staged": protocol.encode_path(staged), "inside": inside}
        yield from REPLACE_TREE(args, what=f"restore {path!r}")
    except BaseException as exc:
        if can_clean_up(exc):
            with contextlib.suppress(errors.SandboxError):
                yield from DELETE(
                    {"path": protocol.encode_path(staged), "recursive": True},
                    what="remove a staged restore",
                    timeout=CLEANUP_TIMEOUT,
                )
        raise
