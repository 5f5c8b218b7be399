"""The remote runner's wire protocol, version 1: JSON frames and binary chunks
over one WebSocket (docs/remote.md has the whole picture). It lies below
both ends, the runner and coordinator (:mod:`sandbox_sdk.runner`) and the
client (:mod:`sandbox_sdk.providers.remote`), with their tokens and TLS
(:mod:`sandbox_sdk.wire.security`), so neither borrows from the other.

Text frames are JSON objects ``{"v": 1, "type": ..., ...}``; a frame of
another version is refused, so a future version can change anything else:

============  ============  ================================================
type          sent by       fields
============  ============  ================================================
``hello``     client        ``token``: the first frame of every connection
``welcome``   runner        ``runner``, ``backend``, ``limits``
``request``   client        ``id``, ``op``, ``args``, ``size``
``response``  runner        ``id``, ``ok``, ``result`` or ``error``, ``size``
``cancel``    client        ``id``: kill the request's command
``open``      coordinator   ``session``: dial a session connection for it
============  ============  ================================================

A ``request`` or ``response`` whose ``size`` is not 0 is followed by that
many bytes of body (a command, a command's output) in binary frames of at
most :data:`CHUNK_BYTES`, each prefixed with the request id: bytes travel as
they are (no base64, no JSON escaping), and the chunks of concurrent
requests interleave, so a large transfer never holds up a small command.
Every request gets exactly one response, a cancelled one too, so both sides
always know which chunks to expect. Ids are the client's, unique per
connection, from 0 to :data:`MAX_REQUEST_ID` (what the 4-byte prefix holds).
Connection-level failures are close codes (:class:`CloseCode`).
"""

from __future__ import annotations

import json
import ssl
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from websockets.asyncio.client import connect
from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from sandbox_sdk import errors

VERSION = 1
#: Largest body piece in one binary frame.
CHUNK_BYTES = 512 * 1024
#: Largest frame either side accepts; a bigger one closes the connection (1009).
MAX_FRAME_BYTES = 1024 * 1024
#: Seconds a new connection has to send its ``hello``.
HELLO_TIMEOUT = 10.0
#: WebSocket pings, on every hop: a peer silent for both is dropped.
PING_INTERVAL = 20.0
PING_TIMEOUT = 20.0
#: The error ``type`` of the response to a cancelled request.
CANCELLED = "Cancelled"

_ID = struct.Struct(">I")
#: The largest request id: a chunk's prefix holds no larger.
MAX_REQUEST_ID = 2**32 - 1
T = TypeVar("T")


class CloseCode(IntEnum):
    """Why a connection was closed (RFC 6455 codes, and 4xxx for ours)."""

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    MESSAGE_TOO_BIG = 1009
    TRY_AGAIN_LATER = 1013
    UNAUTHORIZED = 4401
    RUNNER_OFFLINE = 4404
    RUNNER_ID_IN_USE = 4409


class ProtocolError(Exception):
    """The peer sent something this version does not allow."""


class Limits(BaseModel):
    """What a runner accepts, sent in its ``welcome``: a client sizes its
    commands and outputs (``max_command_bytes``, ``max_output_bytes``) and
    keeps at most ``max_concurrent`` requests in flight by them."""

    model_config = ConfigDict(frozen=True)

    max_command_bytes: int = Field(gt=0)
    max_output_bytes: int = Field(gt=0)
    max_concurrent: int = Field(gt=0)
    default_timeout: float = Field(gt=0)


def encode(kind: str, **fields: Any) -> str:
    return json.dumps({"v": VERSION, "type": kind, **fields}, separators=(",", ":"))


def decode(message: str | bytes) -> dict[str, Any]:
    """A text frame as a dict with a known version and a ``type``."""
    if not isinstance(message, str):
        raise ProtocolError("expected a text frame")
    try:
        frame = json.loads(message)
    except ValueError as exc:
        raise ProtocolError(f"a text frame is not JSON: {exc}") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise ProtocolError("a frame must be a JSON object with a type")
    if frame.get("v") != VERSION:
        raise ProtocolError(f"unsupported protocol version {frame.get('v')!r} (this side speaks {VERSION})")
    return frame


def field(frame: dict[str, Any], name: str, kind: type[T]) -> T:
    """``frame[name]``, checked to be a ``kind``."""
    value = frame.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError(f"{frame['type']} frame: {name} must be {kind.__name__}")
    return value


def error_fields(exc: BaseException) -> dict[str, Any]:
    """How an exception travels in a response: a :mod:`sandbox_sdk.errors`
    class by name (anything else as ``SandboxRuntimeError``) and its message."""
    kind = type(exc).__name__
    if isinstance(exc, errors.SandboxError) and getattr(errors, kind, None) is type(exc):
        return {"type": kind, "message": str(exc), "path": exc.path}
    return {"type": "SandboxRuntimeError", "message": f"{kind}: {exc}", "path": None}


def chunks(request_id: int, body: bytes) -> Iterator[bytes]:
    if not body:
        return  # none, and no prefix: a response to an id out of range has no body
    prefix = _ID.pack(request_id)
    view = memoryview(body)
    for start in range(0, len(view), CHUNK_BYTES):
        yield prefix + view[start : start + CHUNK_BYTES]


def dial(url: str, tls: ssl.SSLContext | None, open_timeout: float = HELLO_TIMEOUT) -> connect:
    """A client connection with this protocol's settings: frame limit, pings,
    and no compression (it would cost CPU on data that is mostly base64, and
    compressing secrets beside attacker-chosen data invites CRIME-like attacks)."""
    return connect(
        url,
        ssl=tls,
        open_timeout=open_timeout,
        max_size=MAX_FRAME_BYTES,
        ping_interval=PING_INTERVAL,
        ping_timeout=PING_TIMEOUT,
        compression=None,
    )


async def read_frames(connection: Connection, receive: Callable[[str | bytes], None]) -> ProtocolError | None:
    """Hand each frame to ``receive`` until the connection closes; if it
    raises :class:`ProtocolError`, close the connection (1002) and return it."""
    try:
        async for message in connection:
            receive(message)
    except ConnectionClosed:
        pass
    except ProtocolError as exc:
        await connection.close(CloseCode.PROTOCOL_ERROR, str(exc)[:120])
        return exc
    return None


async def send(connection: Connection, header: str, request_id: int, body: bytes) -> None:
    """A request or response: its header frame, then its body in chunks."""
    await connection.send(header)
    for chunk in chunks(request_id, body):
        await connection.send(chunk)


class Bodies:
    """Bodies arriving in chunks, by request id; each is kept (or, for a
    refused or cancelled request, counted and dropped) until its announced
    size is in.

    An announced size is only a ceiling: a buffer grows as its chunks come,
    so announcing costs the peer nothing it could make this side hold. What
    the peer can make it hold is bounded too: at most ``max_open`` bodies
    under way and ``max_buffered`` bytes of them kept (``None``: no bound);
    past either, :class:`ProtocolError`."""

    def __init__(self, *, max_open: int | None = None, max_buffered: int | None = None) -> None:
        self._open: dict[int, _Body] = {}
        self._max_open = max_open
        self._max_buffered = max_buffered
        #: Bytes of unfinished bodies held.
        self.buffered = 0

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._open

    def expect(self, request_id: int, size: int, *, keep: bool = True) -> None:
        if request_id in self._open:
            raise ProtocolError(f"request {request_id} already has a body under way")
        if self._max_open is not None and len(self._open) >= self._max_open:
            raise ProtocolError(f"more than {self._max_open} bodies under way")
        self._open[request_id] = _Body(bytearray() if keep else None, size)

    def drop(self, request_id: int) -> None:
        """Free what ``request_id``'s body holds; the rest of it is counted and dropped."""
        body = self._open.get(request_id)
        if body is not None and body.buffer is not None:
            self.buffered -= len(body.buffer)
            body.buffer = None

    def feed(self, frame: bytes) -> tuple[int, bytearray | None] | None:
        """Take one binary frame; a body it completes is returned with its id
        (``None`` as the body when it was dropped)."""
        if len(frame) <= _ID.size:
            raise ProtocolError("a binary frame holds a request id and at least one byte")
        (request_id,) = _ID.unpack_from(frame)
        body = self._open.get(request_id)
        if body is None:
            raise ProtocolError(f"no body expected for request {request_id}")
        piece = len(frame) - _ID.size
        end = body.filled + piece
        if end > body.size:
            raise ProtocolError(f"request {request_id}: more body than announced")
        if body.buffer is not None:
            if self._max_buffered is not None and self.buffered + piece > self._max_buffered:
                raise ProtocolError(f"more than {self._max_buffered} bytes of bodies under way")
            body.buffer += memoryview(frame)[_ID.size :]
            self.buffered += piece
        body.filled = end
        if end < body.size:
            return None
        del self._open[request_id]
        if body.buffer is not None:
            self.buffered -= body.size
        return request_id, body.buffer


@dataclass
class _Body:
    buffer: bytearray | None  # None: counted and dropped
    size: int
    filled: int = 0
