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
from collections import deque
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import ABORT, DELETE, LANDED, STAGE, ScriptCall
from sandbox_sdk._core import CLEANUP_TIMEOUT, Operation, Pipeline, SandboxCore, new_token
from sandbox_sdk._kernel import can_clean_up
from sandbox_sdk.transfer._sources import Tally, changed_size, read_chunks

if TYPE_CHECKING:
    from sandbox_sdk.remote.write import SizeReply

#: Attempts at removing what a finished transfer staged before its failure is reported.
REMOVE_ATTEMPTS = 3

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

    def __init__(self, dest: str, *, overwrite: bool, size: int | None, tally: Tally | None) -> None:
        self.dest = dest
        self.token = new_token()
        self.overwrite = overwrite
        self.size = size
        self.tally = tally
        self.what = f"upload to {protocol.decode_path(dest)!r}"
        self.sent = 0
        self.digest = hashlib.sha256()
        self.unacknowledged: deque[int] = deque()  # sizes of the chunks sent, in order
        self.last_chunk = b""  # held back from the pipeline: the commit waits for every other chunk

    def chunk_bytes(self, sandbox: SandboxCore) -> int:
        """The largest chunk whose call, the final one included, fits in a command."""
        largest = {**self._args(1 << 60), "final": {"size": 1 << 60, "sha256": "0" * 64}}
        return sandbox._blob_capacity("stage", largest)

    def _args(self, offset: int) -> dict[str, Any]:
        return {"path": self.dest, "token": self.token, "overwrite": self.overwrite, "offset": offset}

    def call(self, data: bytes, *, final: bool = False) -> ScriptCall[SizeReply]:
        """The call that writes ``data`` next; the final one verifies and commits."""
        args = self._args(self.sent)
        self.digest.update(data)
        self.sent += len(data)
        self.unacknowledged.append(len(data))
        if final:
            if self.size is not None and self.sent != self.size:
                raise errors.IntegrityError(f"{self.what}: {changed_size(self.size, self.sent)}")
            args["final"] = {"size": self.sent, "sha256": self.digest.hexdigest()}
        return STAGE(args, [data], what=self.what)

    def calls_before_last(self, chunks: Iterator[tuple[bytes, bool]]) -> Iterator[ScriptCall[SizeReply]]:
        """A call per chunk up to the last one, which is kept in :attr:`last_chunk`."""
        for chunk, is_last in chunks:
            if is_last:
                self.last_chunk = chunk
                return
            yield self.call(chunk)

    def acknowledge(self, reply: object = None) -> None:
        """The oldest chunk not yet acknowledged is written: count it."""
        done = self.unacknowledged.popleft()
        if self.tally:
            self.tally.add(done)

    def commit(self, data: bytes) -> Operation[None]:
        """Send the last chunk, which verifies the whole and commits it; if
        its reply is lost (not necessarily the commit), ask whether it landed."""
        commit = self.call(data, final=True)
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
        return value["landed"] is True

    def abort(self) -> Operation[None]:
        """Remove the staging file, if any; best effort."""
        with contextlib.suppress(Exception):
            args = {"path": self.dest, "token": self.token}
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
    staging = Staging(dest, overwrite=overwrite, size=size, tally=tally)
    chunk_bytes = staging.chunk_bytes(sandbox)
    chunks = read_chunks(source, chunk_bytes)
    try:
        data, last = next(chunks)
        if not last:
            staging.acknowledge((yield from staging.call(data)))  # creates the staging file: alone
            window = sandbox._window(chunk_bytes)
            yield Pipeline(staging.calls_before_last(chunks), staging.acknowledge, window)
            data = staging.last_chunk
        yield from staging.commit(data)
        return staging.sent
    except BaseException as exc:
        if can_clean_up(exc):
            yield from staging.abort()
        raise


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
