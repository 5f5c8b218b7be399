"""A large upload, staged: written in chunks into a hidden file beside the
destination, then verified (size and SHA-256) and renamed in one step.

The first chunk creates the staging file (after checking the destination),
so it runs alone; the middle ones are pipelined; the last one verifies and
commits, once every other chunk is in. A failure anywhere removes the
staging file; a commit whose reply was lost is asked after before the
upload is called failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import ABORT, APPEND_BLOCK, DELETE, LANDED, STAGE, AppendCall, Call, Reply, ScriptCall
from sandbox_sdk._core import CLEANUP_TIMEOUT, Operation, Pipeline, SandboxCore, new_token
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk.transfer._results import malformed_reply
from sandbox_sdk.transfer._sources import Tally, changed_size

if TYPE_CHECKING:
    from sandbox_sdk.remote.write import StageReply

#: Attempts at removing what a finished transfer staged before its failure is reported.
REMOVE_ATTEMPTS = 3
#: Compression pays below this ratio (compressed / raw); the first chunk
#: that does not reach it ends compression for the rest of the upload.
WORTH_COMPRESSING = 0.9
#: Most raw bytes a compressed chunk may stand for, in chunks: bounds what a
#: call holds in memory.
MAX_PACKING = 8

#: One chunk of a staged upload: its bytes, their gzip form if that is what
#: travels, and whether it is the last.
Chunk = tuple[bytes, bytes | None, bool]

#: Errors a staged upload's commit reports when it refused, having changed
#: nothing; after any other failure the client asks whether it landed.
COMMIT_REFUSED = (
    errors.IntegrityError,
    errors.SandboxFileNotFoundError,
    errors.SandboxIsADirectoryError,
    errors.SandboxNotADirectoryError,
    errors.SandboxPermissionError,
    errors.SandboxFileExistsError,
    errors.InvalidPathError,
    errors.InvalidArgumentError,
)


class Staging:
    """One staged upload to ``dest`` (payload-encoded): its staging token,
    the bytes sent and their digest, and the chunks not yet acknowledged.

    A source expected to hold ``size`` bytes that holds more or fewer is
    not committed."""

    def __init__(
        self, dest: str, *, overwrite: bool, size: int | None, tally: Tally | None, scratch_dir: str
    ) -> None:
        self.dest = dest
        self.token = new_token()
        #: A symlink to the staging file, through which the shell appends chunks.
        self.link = posixpath.join(scratch_dir, f".sbx-{self.token}.lnk")
        self.linked = False  # the first chunk made the link
        self.gunzip = False  # and compressed chunks can go through it too
        self.overwrite = overwrite
        self.size = size
        self.tally = tally
        self.what = f"upload to {protocol.decode_path(dest)!r}"
        self.sent = 0
        self.digest = hashlib.sha256()
        self.unacknowledged: deque[int] = deque()  # sizes of the chunks sent, in order
        #: Held back from the pipeline: the commit waits for every other chunk.
        self.last_chunk: Chunk = (b"", None, True)

    def chunk_bytes(self, sandbox: SandboxCore) -> int:
        """The largest chunk whose call, the final one included, fits in a command."""
        link, final = protocol.encode_path(self.link), {"size": 1 << 60, "sha256": "0" * 64}
        largest = {**self._args(1 << 60), "gzip": True, "link": link, "final": final}
        return sandbox.limits.blob_capacity("stage", largest, sandbox.scratch_dir)

    def _args(self, offset: int) -> dict[str, Any]:
        return {"path": self.dest, "token": self.token, "overwrite": self.overwrite, "offset": offset}

    def call(self, data: bytes, packed: bytes | None, *, final: bool = False) -> ScriptCall[StageReply]:
        """The call that writes ``data`` next (sent as ``packed``, its gzip
        form, if given); the first one may make the link, the final one
        verifies and commits, and removes the link whatever the first reply
        said of it (a reply can be malformed, the link made all the same)."""
        args = self._args(self.sent)
        if packed is not None:
            args["gzip"] = True
        if self.sent == 0 or final:
            args["link"] = protocol.encode_path(self.link)
        self._count(data)
        if final:
            if self.size is not None and self.sent != self.size:
                raise errors.IntegrityError(f"{self.what}: {changed_size(self.size, self.sent)}")
            args["final"] = {"size": self.sent, "sha256": self.digest.hexdigest()}
        return STAGE(args, [data if packed is None else packed], what=self.what)

    def _count(self, data: bytes) -> None:
        self.digest.update(data)
        self.sent += len(data)
        self.unacknowledged.append(len(data))

    def started(self, reply: Reply[StageReply]) -> None:
        """The first chunk is written; later ones go through the link if it made one.
        A reply that is not the script's object is a malformed one (the
        staging file is then removed, as after any failure)."""
        value: object = reply[0]
        if not isinstance(value, dict):
            raise malformed_reply(self.what, value)
        self.linked = value.get("append") is True
        self.gunzip = value.get("gunzip") is True
        self.acknowledge()

    def next_call(self, data: bytes, packed: bytes | None) -> Call[Any]:
        """A chunk goes by the shell when it can."""
        if self.linked and (packed is None or self.gunzip) and self.sent % APPEND_BLOCK == 0:
            wire = data if packed is None else packed
            call = AppendCall(self.link, self.sent, wire, packed is not None, self.what)
            self._count(data)
            return call
        return self.call(data, packed)

    def calls_before_last(self, chunks: Iterator[Chunk]) -> Iterator[Call[Any]]:
        """A call per chunk up to the last one, which is kept in :attr:`last_chunk`."""
        for chunk in chunks:
            if chunk[2]:
                self.last_chunk = chunk
                return
            yield self.next_call(chunk[0], chunk[1])

    def acknowledge(self, reply: object = None) -> None:
        """The oldest chunk not yet acknowledged is written: count it."""
        done = self.unacknowledged.popleft()
        if self.tally:
            self.tally.add(done)

    def commit(self, chunk: Chunk) -> Operation[None]:
        """Send the last chunk, which verifies the whole and commits it; if
        its reply is lost (not necessarily the commit), ask whether it landed."""
        commit = self.call(chunk[0], chunk[1], final=True)
        try:
            yield from commit
        except errors.SandboxError as exc:
            if isinstance(exc, COMMIT_REFUSED) or not (yield from self.landed(commit.args["final"])):
                raise
        self.acknowledge()

    def landed(self, final: dict[str, Any]) -> Operation[bool]:
        """Whether the commit of ``final`` (size and SHA-256) took effect;
        ``False`` if that cannot be told."""
        args = {"path": self.dest, "token": self.token, **final}
        try:
            value, _ = yield from LANDED(args, what="check a commit", timeout=CLEANUP_TIMEOUT)
        except errors.SandboxError:
            return False
        return isinstance(value, dict) and value.get("landed") is True

    def abort(self) -> Operation[None]:
        """Remove the staging file, if any; best effort."""
        with contextlib.suppress(Exception):
            args = {"path": self.dest, "token": self.token, "link": protocol.encode_path(self.link)}
            yield from ABORT(args, what="abort upload", timeout=CLEANUP_TIMEOUT)


def stage(
    sandbox: SandboxCore,
    dest: str,
    source: IO[bytes],
    *,
    overwrite: bool = False,
    tally: Tally | None = None,
    size: int | None = None,
) -> Operation[int]:
    """Upload ``source`` to ``dest`` (payload-encoded) in chunks, all or
    nothing; returns the bytes sent. On any failure (or cancellation) the
    staging file is removed and the error re-raised."""
    staging = Staging(dest, overwrite=overwrite, size=size, tally=tally, scratch_dir=sandbox.scratch_dir)
    chunk_bytes = staging.chunk_bytes(sandbox)
    chunks = packed_chunks(source, chunk_bytes)
    try:
        chunk = next(chunks)
        if not chunk[2]:
            # The first chunk creates the staging file: it goes alone.
            staging.started((yield from staging.call(chunk[0], chunk[1])))
            window = sandbox.limits.window(chunk_bytes)
            yield Pipeline(staging.calls_before_last(chunks), staging.acknowledge, window)
            chunk = staging.last_chunk
        yield from staging.commit(chunk)
        return staging.sent
    except BaseException as exc:
        if can_clean_up(exc):
            yield from staging.abort()
        raise


def packed_chunks(source: IO[bytes], capacity: int) -> Iterator[Chunk]:
    """``source`` in chunks whose form on the wire holds at most ``capacity``
    bytes (at least one chunk, empty for an empty stream). Data that
    compresses well travels gzip-compressed (level 1: fast), each chunk as
    much as compresses into ``capacity``, guessed from the last chunk's ratio;
    once a chunk does not compress, the rest travels as it is."""
    # Whole blocks, so that every chunk but the last can be appended by the shell.
    capacity = max(capacity // APPEND_BLOCK * APPEND_BLOCK, min(capacity, APPEND_BLOCK))
    pending = b""
    want = capacity * MAX_PACKING // 2  # a first guess: text compresses about 4:1
    compressing = True
    ended = False
    while True:
        while len(pending) <= want and not ended:  # one byte more tells whether this is the last
            block = source.read(want + 1 - len(pending))
            ended = not block
            pending += block
        data = pending[:want]
        packed = None
        if compressing and data:
            packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # 31: the gzip format, for gzip -d too
            packed = packer.compress(data) + packer.flush()
            if len(packed) > len(data) * WORTH_COMPRESSING:
                compressing, packed, want = False, None, capacity
                data = pending[:want]
            elif len(packed) > capacity:
                want = max(capacity, aligned(want * capacity // len(packed) * 9 // 10))
                continue
            else:
                guess = len(data) * capacity // len(packed) * 9 // 10
                want = min(capacity * MAX_PACKING, max(capacity, aligned(guess)))
        pending = pending[len(data) :]
        last = ended and not pending
        yield data, packed, last
        if last:
            return


def aligned(size: int) -> int:
    return size // APPEND_BLOCK * APPEND_BLOCK


def discard(paths: Sequence[str]) -> Operation[None]:
    """Best-effort removal of staged files (payload-encoded paths) that a
    failed operation may have left; a file already gone is fine."""
    for path in paths:
        with contextlib.suppress(errors.SandboxError):
            args = {"path": path, "recursive": False}
            yield from DELETE(args, what="clean up staged data", timeout=CLEANUP_TIMEOUT)


def remove_staged(path: str, *, what: str) -> Operation[None]:
    """Remove a staged file (payload-encoded path) an operation that succeeded
    is done with: retried, and its failure reported (the last error, noted)
    rather than the file silently left; a file already gone is fine."""
    for attempt in range(1, REMOVE_ATTEMPTS + 1):
        try:
            args = {"path": path, "recursive": False}
            yield from DELETE(args, what="clean up staged data", timeout=CLEANUP_TIMEOUT)
            return
        except errors.SandboxFileNotFoundError:
            return
        except errors.SandboxError as exc:
            if attempt == REMOVE_ATTEMPTS:
                exc.add_note(f"{what} finished, but {protocol.decode_path(path)!r} is left in the sandbox")
                raise
