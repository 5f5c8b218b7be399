"""Call types: one ``execute()`` round trip each (see the package docstring)."""

from __future__ import annotations

import binascii
import secrets
import shlex
from abc import ABC, abstractmethod
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar, cast

from sandbox_sdk import errors, protocol
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.protocol import Blob, LazyBlob

if TYPE_CHECKING:
    from sandbox_sdk._session import Session
    from sandbox_sdk.limits import Limits
    from sandbox_sdk.remote._runtime import Empty, Entry
    from sandbox_sdk.remote.archive import CreateReply, ExtractReply
    from sandbox_sdk.remote.edit import EditedReply, EditReply
    from sandbox_sdk.remote.get import ChunkReply, GetManyReply
    from sandbox_sdk.remote.glob import GlobReply
    from sandbox_sdk.remote.grep import GrepReply
    from sandbox_sdk.remote.ls import LsReply
    from sandbox_sdk.remote.proc import FeedReply, FollowReply, ProcessesReply, SignalReply, SpawnReply
    from sandbox_sdk.remote.read import ReadReply
    from sandbox_sdk.remote.run import RunReply
    from sandbox_sdk.remote.write import LandedReply, PutManyReply, SettledReply, SizeReply, StageReply


R = TypeVar("R")

V = TypeVar("V")

#: A script's decoded reply: its value and its blobs.
Reply: TypeAlias = tuple[V, list[Blob]]


def check_command(command: object) -> bytes:
    """A user's command in UTF-8. A command must be text a shell can be given:
    not a NUL (no argument can hold one), nor a lone surrogate (no encoding
    can); either is an :class:`~sandbox_sdk.errors.InvalidArgumentError`
    before any round trip (``run`` checks it, and so does the provider kit's
    ``bash_script`` for every ``execute`` built on it)."""
    if not isinstance(command, str):
        raise errors.InvalidArgumentError(f"command must be a str, not {type(command).__name__}")
    if "\0" in command:
        raise errors.InvalidArgumentError("command contains a NUL character")
    try:
        return command.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.InvalidArgumentError(
            f"command is not valid Unicode text: {exc.reason} at {exc.start}"
        ) from None


class Call(ABC, Generic[R]):
    """One ``execute()`` round trip whose decoded reply is an ``R``."""

    what: str
    timeout: float | None
    #: The call only reads, so a cancelled async caller need not wait for it
    #: to finish (a poll of a process: its clean-up, the kill, goes at once).
    interruptible: bool = False

    @abstractmethod
    def command(self, limits: Limits, scripts: Session) -> tuple[str, str]:
        """The command to run and the nonce its result must carry; a script
        command over ``limits.max_command_bytes`` is refused before it is sent. A script is
        installed in (and run from) the sandbox's scratch directory, and left
        out of the command once ``scripts`` knows it is there."""

    def resend(self, scripts: Session, response: ExecuteResponse, nonce: str) -> bool:
        """Whether the command must be sent again, in full: it left out a
        script whose installed copy was missing (the script never started)."""
        return False

    @abstractmethod
    def decode(self, response: ExecuteResponse, nonce: str) -> R:
        """The reply, from the command's response; or the error it reports."""

    def timeout_or(self, default: float) -> float | None:
        """This call's timeout: its own, else ``default`` (``limits.operation_timeout``)."""
        return default if self.timeout is None else self.timeout

    def __iter__(self) -> Generator[Call[R], Any, R]:
        """``reply = yield from call``: the driver performs the call, and the
        reply comes back typed."""
        return cast(R, (yield self))


#: Block size of a chunk appended by the shell: offsets are multiples of it.
APPEND_BLOCK = 4096

#: Printed with the nonce by an append that wrote its chunk.
APPENDED_MARKER = f"{protocol.FRAME_MARKER}_APPENDED"


@dataclass(frozen=True)
class AppendCall(Call[None]):
    """A chunk of a staged upload written at ``offset`` (a multiple of
    :data:`APPEND_BLOCK`) by ``base64 -d [| gzip -dc] | dd`` through
    ``link``, the symlink the first chunk made to the staging file: no
    interpreter start. ``data`` is gzip-compressed if ``packed``.
    The command holds only the link (in the scratch directory, named by our
    random token), numbers and base64; an append cut short is caught by the
    SHA-256 check at the commit."""

    link: str
    offset: int
    data: bytes
    packed: bool
    what: str
    timeout: float | None = None

    def command(self, limits: Limits, scripts: Session) -> tuple[str, str]:
        nonce = secrets.token_hex(16)
        delimiter = f"SBX_{nonce}"
        seek = self.offset // APPEND_BLOCK
        dd = f"dd of={shlex.quote(self.link)} bs={APPEND_BLOCK} seek={seek} conv=notrunc"
        text = binascii.b2a_base64(self.data, newline=False).decode("ascii")
        command = (
            f"base64 -d <<'{delimiter}' | {'gzip -dc | ' if self.packed else ''}{dd} 2>/dev/null"
            f" && echo {APPENDED_MARKER} {nonce}\n"
            f"{text}\n{delimiter}\n"
        )
        if len(command) > limits.max_command_bytes:
            raise errors.SandboxRuntimeError(
                f"{self.what}: append of {len(command)} bytes > {limits.max_command_bytes}"
            )
        return command, nonce

    def decode(self, response: ExecuteResponse, nonce: str) -> None:
        if response.timed_out:
            raise errors.SandboxTimeoutError(f"{self.what} timed out")
        if response.exit_code != 0 or f"{APPENDED_MARKER} {nonce}" not in response.output:
            raise errors.SandboxRuntimeError(
                f"{self.what}: appending a chunk failed (exit code {response.exit_code}): "
                f"{response.output[-300:]!r}"
            )


@dataclass(frozen=True)
class _ScriptedCall(Call[R]):
    """A call of the in-sandbox script that has operation ``op``."""

    op: str
    args: Mapping[str, Any] = field(default_factory=dict)
    blobs: Sequence[bytes] = ()
    what: str = "operation"
    timeout: float | None = None
    interruptible: bool = False

    @property
    def payload(self) -> dict[str, Any]:
        """The arguments as the script reads them."""
        return {"op": self.op, **self.args}

    def command(self, limits: Limits, scripts: Session, *, seldom_run: bool = False) -> tuple[str, str]:
        """The command and its nonce; ``seldom_run``: the command runs the
        script only now and then (a shell grep's fallback), so it leaves the
        script out until it is known missing (see ``Session.plan``)."""
        module = protocol.module_of(self.op)
        plan = scripts.plan(module, seldom_run=seldom_run)
        build = partial(
            protocol.build_command,
            module,
            self.payload,
            self.blobs,
            scripts_dir=plan.scripts_dir,
            omit_script=plan.omit_script,
            served=plan.served,
            channel=plan.channel,
            installed=plan.installed,
        )
        command, nonce = build(launch=plan.launch)
        if plan.launch is not None:
            if protocol.command_bytes(command) <= limits.max_command_bytes:
                scripts.launching(nonce)
            else:  # left to a later command with room for it
                scripts.launch_dropped()
                command, nonce = build()
        size = protocol.command_bytes(command)
        if size > limits.max_command_bytes:
            raise errors.SandboxRuntimeError(
                f"{self.what}: command of {size} bytes exceeds max_command_bytes="
                f"{limits.max_command_bytes} (please report: operations should stage large data)"
            )
        return command, nonce

    def resend(self, scripts: Session, response: ExecuteResponse, nonce: str) -> bool:
        return scripts.learn(protocol.module_of(self.op), response, nonce)


@dataclass(frozen=True)
class ScriptCall(_ScriptedCall[Reply[V]]):
    """A script operation; the reply is its value (a ``V``) and its blobs."""

    def decode(self, response: ExecuteResponse, nonce: str) -> Reply[V]:
        value, blobs = protocol.parse_result(response, nonce, self.what)
        return cast(V, value), blobs


@dataclass(frozen=True)
class LazyScriptCall(_ScriptedCall[tuple[V, list[LazyBlob]]]):
    """A script operation whose blobs stay base64 in the output until decoded."""

    def decode(self, response: ExecuteResponse, nonce: str) -> tuple[V, list[LazyBlob]]:
        value, blobs = protocol.parse_result(response, nonce, self.what, lazy_blobs=True)
        return cast(V, value), blobs


@dataclass(frozen=True)
class CommandCall(_ScriptedCall["Reply[V] | None"]):
    """A script that runs the user's command: without a timeout it gets the
    provider's default, and a response the provider cut at its timeout (the
    script killed before it could report) is ``None``."""

    def decode(self, response: ExecuteResponse, nonce: str) -> Reply[V] | None:
        if response.timed_out:
            return None
        value, blobs = protocol.parse_result(response, nonce, self.what)
        return cast(V, value), blobs

    def timeout_or(self, default: float) -> float | None:
        return self.timeout


class Script(Generic[V]):
    """An operation of an in-sandbox script whose reply value is a ``V``."""

    def __init__(self, op: str) -> None:
        protocol.module_of(op)  # an unknown name fails at import
        self.op = op

    def __call__(
        self,
        args: Mapping[str, Any],
        blobs: Sequence[bytes] = (),
        *,
        what: str,
        timeout: float | None = None,
        interruptible: bool = False,
    ) -> ScriptCall[V]:
        return ScriptCall(self.op, args, blobs, what, timeout, interruptible)

    def command(
        self, args: Mapping[str, Any], blobs: Sequence[bytes] = (), *, what: str, timeout: float | None
    ) -> CommandCall[V]:
        """The call that runs a user's command (see :class:`CommandCall`)."""
        return CommandCall(self.op, args, blobs, what, timeout)

    def lazy(self, args: Mapping[str, Any], *, what: str) -> LazyScriptCall[V]:
        """The call with its blobs left undecoded (see :class:`LazyScriptCall`)."""
        return LazyScriptCall(self.op, args, (), what)


# The operations of remote/ls.py, read.py, get.py, write.py, edit.py, fs.py,
# glob.py, grep.py, archive.py, run.py and proc.py, each typed by its reply.
LS: Script[LsReply] = Script("ls")

STAT: Script[Entry] = Script("stat")

READ: Script[ReadReply] = Script("read")

READ_CHUNK: Script[ChunkReply] = Script("read_chunk")

GET_MANY: Script[GetManyReply] = Script("get_many")

WRITE: Script[SizeReply] = Script("write")

PUT_MANY: Script[PutManyReply] = Script("put_many")

SETTLE_MANY: Script[SettledReply] = Script("settle_many")

STAGE: Script[StageReply] = Script("stage")

LANDED: Script[LandedReply] = Script("landed")

ABORT: Script[Empty] = Script("abort")

EDIT: Script[EditReply] = Script("edit")

EDITED: Script[EditedReply] = Script("edited")

DELETE: Script[Empty] = Script("delete")

MKDIR: Script[Empty] = Script("mkdir")

REPLACE_TREE: Script[Empty] = Script("replace_tree")

GLOB: Script[GlobReply] = Script("glob")

GREP: Script[GrepReply] = Script("grep")

CREATE_ARCHIVE: Script[CreateReply] = Script("create")

EXTRACT_ARCHIVE: Script[ExtractReply] = Script("extract")

ARCHIVE_EXTRACTED: Script[LandedReply] = Script("extracted")

RUN: Script[RunReply] = Script("run")

SPAWN: Script[SpawnReply] = Script("spawn")

FOLLOW: Script[FollowReply] = Script("follow")

SIGNAL: Script[SignalReply] = Script("signal")

PROCESSES: Script[ProcessesReply] = Script("processes")

FORGET: Script[Empty] = Script("forget")

FEED: Script[FeedReply] = Script("feed")

RESIZE: Script[Empty] = Script("resize")
