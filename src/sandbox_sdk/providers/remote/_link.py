"""The client's end of the wire: one WebSocket to a runner (directly, or
through a coordinator), living on an event loop thread of its own.

Why a thread of its own: the sync API (``execute`` from any thread, the
core's worker threads during a transfer) and the async API (``aexecute`` on
whatever asyncio loop the caller runs, a new one per test under pytest)
share one connection, so it lives on a loop that neither owns. A sync call
waits on a :class:`concurrent.futures.Future`; an async call awaits the same
future through :func:`asyncio.wrap_future` (no worker thread per call), and
cancelling the awaiting task cancels the request, which sends ``cancel``.

A request's timeout bounds the wait for its response to *start* (the runner
answers once the command has finished); the body that follows is bounded
only by the connection's heartbeats, so a slow link never turns a finished
command into a timeout. A lost connection fails every request in flight
with ``ProviderUnavailableError``; the next request dials again.

What a runner announces is taken only up to this client's own bounds
(:data:`MAX_OUTPUT_BYTES`, :data:`MAX_CONCURRENT`, and the frame limit of
:func:`~sandbox_sdk.wire.dial`), and a response body is a buffer that
grows as its chunks come: a runner that lies about its limits or announces
a huge body gets the connection closed, never this process's memory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import ssl
import threading
import weakref
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection

from sandbox_sdk import errors, wire
from sandbox_sdk.providers.remote._errors import broken, closed, from_response, translate_errors

#: Seconds ``close`` waits for the connection and the loop thread to end.
CLOSE_TIMEOUT = 5.0
#: The most output per command this client takes, whatever the runner announces.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
#: The most requests this client keeps in flight on one connection, likewise.
MAX_CONCURRENT = 256


class Request(NamedTuple):
    op: str
    args: dict[str, Any]
    body: bytes = b""
    #: Seconds until the response must start; ``None``: no limit.
    timeout: float | None = None


class Reply(NamedTuple):
    result: dict[str, Any]
    body: bytearray


class Link:
    """Sends requests to one runner; shared by a provider and its sandboxes.
    Closed by :meth:`close`, or when the last of them is garbage."""

    def __init__(self, url: str, token: str, *, tls: ssl.SSLContext | None, connect_timeout: float) -> None:
        self._channel = _Channel(url, token, tls, connect_timeout)
        self._finalizer = weakref.finalize(self, self._channel.shutdown)

    @property
    def limits(self) -> wire.Limits:
        if self._channel.limits is None:
            raise errors.ProviderUnavailableError("not connected to a runner yet")
        return self._channel.limits

    def call(self, request: Request) -> Reply:
        future = self._channel.submit(request)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C: the request is cancelled on the runner too
            raise

    async def acall(self, request: Request) -> Reply:
        return await asyncio.wrap_future(self._channel.submit(request))

    def close(self) -> None:
        self._finalizer()


class _Channel:
    """The loop thread, and the connection on it (dialled again once lost)."""

    def __init__(self, url: str, token: str, tls: ssl.SSLContext | None, connect_timeout: float) -> None:
        self._url = url
        self._token = token
        self._tls = tls
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._connection: _Connection | None = None
        self._dialing: asyncio.Lock | None = None
        self.limits: wire.Limits | None = None

    def submit(self, request: Request) -> concurrent.futures.Future[Reply]:
        return self._run(self._request(request))

    def _run(self, coroutine: Coroutine[Any, Any, Reply]) -> concurrent.futures.Future[Reply]:
        with self._lock:
            if self._closed:
                coroutine.close()
                raise errors.ProviderUnavailableError("the remote provider is closed")
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="sandbox-remote", daemon=True
                )
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    async def _request(self, request: Request) -> Reply:
        if self._dialing is None:
            self._dialing = asyncio.Lock()
        async with self._dialing:
            if self._connection is None or self._connection.lost:
                self._connection = await _Connection.open(
                    self._url, self._token, self._tls, self._connect_timeout
                )
                self.limits = self._connection.limits
            connection = self._connection
        return await connection.request(request)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            loop, thread, self._loop = self._loop, self._thread, None
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:  # collected on the loop itself: it cannot wait for itself
            loop.stop()
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close_connection(), loop).result(CLOSE_TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_TIMEOUT)
        if not thread.is_alive():
            loop.close()

    async def _close_connection(self) -> None:
        if self._connection is not None:
            await self._connection.close()


@dataclass
class _Pending:
    """A request awaiting its response."""

    what: str
    started: asyncio.Event = field(default_factory=asyncio.Event)  # the response header is in
    reply: asyncio.Future[Reply] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    header: dict[str, Any] | None = None
    abandoned: bool = False  # its caller is gone: the response is read and dropped

    def fail(self, error: errors.SandboxError) -> None:
        if not self.abandoned and not self.reply.done():
            self.reply.set_exception(error)
        self.started.set()


class _Connection:
    """One open WebSocket: requests out by id, responses in as they come."""

    def __init__(self, websocket: ClientConnection, limits: wire.Limits) -> None:
        self._ws = websocket
        self.limits = limits
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._bodies = wire.Bodies()
        self._slots = asyncio.Semaphore(limits.max_concurrent)
        self._sending_chunked = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self.lost: errors.SandboxError | None = None
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, token: str, tls: ssl.SSLContext | None, timeout: float) -> _Connection:
        """Dial, authenticate, and learn the runner's limits from its welcome."""
        with translate_errors(f"connect to {url}"):
            websocket = await wire.dial(url, tls, timeout)
            try:
                await websocket.send(wire.encode("hello", token=token))
                welcome = wire.decode(await asyncio.wait_for(websocket.recv(), timeout))
                if welcome["type"] != "welcome":
                    raise wire.ProtocolError(f"expected welcome, got {welcome['type']}")
                limits = own_bounds(wire.Limits.model_validate(welcome.get("limits")))
            except ValidationError as exc:
                await websocket.close()
                raise wire.ProtocolError(f"a welcome with invalid limits: {exc}") from None
            except BaseException:
                await websocket.close()
                raise
        return cls(websocket, limits)

    async def request(self, request: Request) -> Reply:
        if self.lost is not None:
            raise self.lost
        request_id = next(self._ids)
        try:
            header = wire.encode(
                "request", id=request_id, op=request.op, args=request.args, size=len(request.body)
            )
        except (TypeError, ValueError) as exc:
            raise errors.InvalidArgumentError(f"{request.op}: arguments must be JSON: {exc}") from None
        await self._slots.acquire()  # released when the response is in (or the connection lost)
        pending = self._pending[request_id] = _Pending(request.op)
        sending = self._spawn(self._send(header, request_id, request.body))
        try:
            return await self._exchange(request, pending, sending)
        except BaseException:
            self._abandon(request_id, pending, sending)
            raise

    async def _send(self, header: str, request_id: int, body: bytes) -> None:
        """A request; those whose body takes several chunks go one at a time,
        as the runner holds at most two commands' worth of bodies under way
        (one chunk is a whole body, so small requests never wait for them)."""
        if len(body) <= wire.CHUNK_BYTES:
            await wire.send(self._ws, header, request_id, body)
            return
        async with self._sending_chunked:
            await wire.send(self._ws, header, request_id, body)

    async def _exchange(self, request: Request, pending: _Pending, sending: asyncio.Task[None]) -> Reply:
        with translate_errors(request.op):
            await asyncio.shield(sending)  # a body is sent whole, even for a cancelled caller
        try:
            async with asyncio.timeout(request.timeout):
                await pending.started.wait()
        except TimeoutError:
            raise errors.SandboxTimeoutError(
                f"{request.op}: no answer from the runner within {request.timeout:.0f} s"
            ) from None
        return await asyncio.shield(pending.reply)

    def _abandon(self, request_id: int, pending: _Pending, sending: asyncio.Task[None]) -> None:
        """The caller is gone (cancelled, timed out): the runner is told to
        cancel unless the command has already finished."""
        pending.abandoned = True
        if pending.reply.done():
            pending.reply.exception()  # retrieved: it is the caller's error, already raised
        elif not pending.started.is_set() and self._pending.get(request_id) is pending:
            self._spawn(self._cancel(request_id, sending))

    async def _cancel(self, request_id: int, sending: asyncio.Task[None]) -> None:
        with contextlib.suppress(Exception):
            await sending  # the cancel must follow the request's last chunk
            await self._ws.send(wire.encode("cancel", id=request_id))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _read(self) -> None:
        problem: wire.ProtocolError | None = None
        try:
            problem = await wire.read_frames(self._ws, self._receive)
        finally:
            self._lose(problem)

    def _receive(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            done = self._bodies.feed(message)
            if done is not None:
                self._settle(done[0], done[1] or bytearray())
            return
        frame = wire.decode(message)
        request_id = wire.field(frame, "id", int) if frame["type"] == "response" else -1
        pending = self._pending.get(request_id)
        if pending is None or pending.header is not None:
            raise wire.ProtocolError(f"unexpected {frame['type']} frame (request {request_id})")
        size = wire.field(frame, "size", int)
        if not 0 <= size <= 3 * self.limits.max_output_bytes:  # UTF-8 of the capped output
            raise wire.ProtocolError(
                f"a response body of {size} bytes, over 3 x max_output_bytes={self.limits.max_output_bytes}"
            )
        pending.header = frame
        pending.started.set()
        if size:
            self._bodies.expect(request_id, size, keep=not pending.abandoned)
        else:
            self._settle(request_id, bytearray())

    def _settle(self, request_id: int, body: bytearray) -> None:
        pending = self._pending.pop(request_id)
        self._slots.release()
        header = pending.header or {}
        if pending.abandoned:
            return
        if header.get("ok") is True:
            pending.reply.set_result(Reply(header.get("result") or {}, body))
        else:
            pending.reply.set_exception(from_response(header.get("error") or {}, pending.what))

    def _lose(self, problem: wire.ProtocolError | None) -> None:
        """Fail every request in flight: the runner broke the protocol
        (``problem``; this side closed the connection), or the connection closed."""
        close = self._ws.protocol.close_rcvd

        def error(what: str) -> errors.SandboxError:
            return broken(problem, what) if problem is not None else closed(close, what)

        self.lost = error("request")
        for pending in self._pending.values():
            pending.fail(error(pending.what))
            self._slots.release()
        self._pending.clear()

    async def close(self) -> None:
        await self._ws.close()
        await self._reader


def own_bounds(limits: wire.Limits) -> wire.Limits:
    """``limits`` as announced, but no larger than this client's own bounds."""
    return limits.model_copy(
        update={
            "max_output_bytes": min(limits.max_output_bytes, MAX_OUTPUT_BYTES),
            "max_concurrent": min(limits.max_concurrent, MAX_CONCURRENT),
        }
    )
