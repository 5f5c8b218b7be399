"""The coordinator: an ASGI app (Starlette, served by uvicorn) that pairs
runners with clients by runner id and relays their frames.

- ``/runner/{runner_id}``: a runner's control connection. It registers the
  runner (one connection per id: a second is refused while the first
  lives) and carries only ``open`` frames, one per client session.
- ``/runner/{runner_id}/session/{session_id}``: the connection the runner
  dials for one ``open``; it is paired with the waiting client.
- ``/client/{runner_id}``: a client; once paired, its frames go to the
  runner's session connection and back.

Every connection starts with a ``hello`` carrying a token, which the
coordinator checks: the runner token on the runner's connections, the client
token on a client's (which the runner checks again). So a client cannot
register as the runner, even while the runner is away. That
frame is all it reads: every later frame is forwarded as it came, never
parsed, stored or logged, so file contents and commands pass through it but
are never looked at. TLS protects them on each hop; the coordinator itself
sees them in memory while relaying (see docs/remote.md).

A connection that has not authenticated is on a deadline, as at the
runner: :data:`~sandbox_sdk.wire.HELLO_TIMEOUT` to become a
WebSocket (served by :func:`serve_coordinator`; another ASGI server sets its
own), then as long again for its hello; and at most
:data:`MAX_UNAUTHENTICATED` connections wait in each of the two steps, so
silent or trickling connections cannot pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import socket
import ssl
from collections.abc import Mapping

import h11
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

from sandbox_sdk import wire
from sandbox_sdk.runner.service import Announce
from sandbox_sdk.wire import CloseCode, security

log = logging.getLogger("sandbox_sdk.runner.coordinator")

#: Seconds a runner has to dial the session connection a client waits for.
SESSION_OPEN_TIMEOUT = 10.0
#: Close codes that say "no close frame" and cannot be sent on.
UNSENDABLE_CODES = frozenset({1005, 1006, 1015})
#: Connections waiting to become WebSockets, and WebSockets waiting for
#: their hello: at most this many of each; more are refused at once.
MAX_UNAUTHENTICATED = 128
#: Compared against for unknown runner ids, so they cost what known ones do.
_NO_RUNNER = hashlib.sha256(secrets.token_bytes(32)).digest()

Paired = tuple[WebSocket, asyncio.Event]


class _Registration:
    """A connected runner: its control connection and the sessions it is asked to open."""

    def __init__(self, control: WebSocket) -> None:
        self.control = control
        self.waiting: dict[str, asyncio.Future[Paired]] = {}


class Coordinator:
    """Pairs runners with clients; ``tokens`` maps each runner id to its tokens."""

    def __init__(self, tokens: Mapping[str, security.RunnerTokens]) -> None:
        for pair in tokens.values():
            pair.check()
        self._digests = {
            runner_id: (security.token_digest(pair.runner), security.token_digest(pair.client))
            for runner_id, pair in tokens.items()
        }
        self._runners: dict[str, _Registration] = {}
        self._unauthenticated = 0
        self.app = Starlette(
            routes=[
                WebSocketRoute("/runner/{runner_id}", self._runner),
                WebSocketRoute("/runner/{runner_id}/session/{session_id}", self._session),
                WebSocketRoute("/client/{runner_id}", self._client),
            ]
        )

    async def _hello(
        self, websocket: WebSocket, runner_id: str, who: str, *, client: bool = False
    ) -> str | None:
        """The connection's hello if it carries ``runner_id``'s client token
        (``client``) or runner token; otherwise the connection is closed
        (unknown ids are refused the same way)."""
        if self._unauthenticated >= MAX_UNAUTHENTICATED:
            log.warning(
                "%s %r refused: %d connections await their hello", who, runner_id, MAX_UNAUTHENTICATED
            )
            await _close(websocket, CloseCode.TRY_AGAIN_LATER, "too many connections awaiting their hello")
            return None
        self._unauthenticated += 1
        try:
            await websocket.accept()
            message = await asyncio.wait_for(websocket.receive(), wire.HELLO_TIMEOUT)
            text = message.get("text")
            hello = wire.decode(text if text is not None else message.get("bytes") or b"")
        except (TimeoutError, wire.ProtocolError):
            hello = {"type": "nothing"}
        finally:
            self._unauthenticated -= 1
        runner_digest, client_digest = self._digests.get(runner_id, (_NO_RUNNER, _NO_RUNNER))
        digest = client_digest if client else runner_digest
        if hello["type"] != "hello" or not security.token_matches(hello.get("token"), digest):
            log.warning("%s %r refused: no valid token", who, runner_id)
            await _close(websocket, CloseCode.UNAUTHORIZED, "unauthorized")
            return None
        return text

    async def _runner(self, websocket: WebSocket) -> None:
        runner_id = websocket.path_params["runner_id"]
        if await self._hello(websocket, runner_id, "runner") is None:
            return
        if runner_id in self._runners:
            log.warning("runner %r refused: that id is already connected", runner_id)
            await _close(websocket, CloseCode.RUNNER_ID_IN_USE, "runner id already connected")
            return
        registration = self._runners[runner_id] = _Registration(websocket)
        log.info("runner %r connected", runner_id)
        try:
            await websocket.send_text(wire.encode("welcome", runner=runner_id))
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass  # nothing is expected here; the heartbeats are the server's pings
        except (WebSocketDisconnect, OSError, RuntimeError):
            pass
        finally:
            del self._runners[runner_id]
            for waiter in registration.waiting.values():
                if not waiter.done():
                    waiter.set_exception(ConnectionError(f"runner {runner_id!r} disconnected"))
            log.info("runner %r disconnected", runner_id)

    async def _session(self, websocket: WebSocket) -> None:
        runner_id, session_id = websocket.path_params["runner_id"], websocket.path_params["session_id"]
        if await self._hello(websocket, runner_id, "session of runner") is None:
            return
        registration = self._runners.get(runner_id)
        waiter = registration.waiting.pop(session_id, None) if registration else None
        if waiter is None or waiter.done():
            await _close(websocket, CloseCode.RUNNER_OFFLINE, "no such session")
            return
        relayed = asyncio.Event()
        waiter.set_result((websocket, relayed))
        await relayed.wait()

    async def _client(self, websocket: WebSocket) -> None:
        runner_id = websocket.path_params["runner_id"]
        hello = await self._hello(websocket, runner_id, "client of runner", client=True)
        if hello is None:
            return
        registration = self._runners.get(runner_id)
        if registration is None:
            await _close(websocket, CloseCode.RUNNER_OFFLINE, f"runner {runner_id} is not connected")
            return
        session_id = secrets.token_urlsafe(16)
        waiter: asyncio.Future[Paired] = asyncio.get_running_loop().create_future()
        registration.waiting[session_id] = waiter
        try:
            await registration.control.send_text(wire.encode("open", session=session_id))
            runner_side, relayed = await asyncio.wait_for(waiter, SESSION_OPEN_TIMEOUT)
        except (TimeoutError, ConnectionError, WebSocketDisconnect, RuntimeError) as exc:
            registration.waiting.pop(session_id, None)
            log.warning("client for runner %r: no session: %s", runner_id, exc or type(exc).__name__)
            await _close(websocket, CloseCode.TRY_AGAIN_LATER, "the runner did not open a session")
            return
        try:
            await runner_side.send_text(hello)
            await relay(websocket, runner_side)
        finally:
            relayed.set()


async def relay(one: WebSocket, other: WebSocket) -> None:
    """Forward frames both ways, unread, until a side closes; the other is
    then closed with the same code."""
    pumps = [asyncio.create_task(_pump(one, other)), asyncio.create_task(_pump(other, one))]
    try:
        done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
    finished = done.pop()
    code, reason = (CloseCode.GOING_AWAY, "") if finished.exception() else finished.result()
    if code in UNSENDABLE_CODES:
        code, reason = CloseCode.GOING_AWAY, "the other side went away"
    for side in (one, other):
        await _close(side, code, reason)


async def _pump(source: WebSocket, target: WebSocket) -> tuple[int, str]:
    while True:
        message = await source.receive()
        if message["type"] == "websocket.disconnect":
            return message.get("code", CloseCode.NORMAL), message.get("reason") or ""
        if message.get("bytes") is not None:
            await target.send_bytes(message["bytes"])
        else:
            await target.send_text(message["text"])


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
        await websocket.close(code, reason)


async def serve_coordinator(
    coordinator: Coordinator, host: str, port: int, *, tls: tuple[str, str | None] | None, ready: Announce
) -> None:
    """Serve ``coordinator`` on ``host:port`` (TLS with ``(certfile, keyfile)``) until stopped."""
    security.warn_if_cleartext(log, host, tls is not None)
    if tls is not None:
        security.server_context(*tls)  # fail early, with our message, on a bad certificate
    listener = _listening_socket(host, port)
    config = uvicorn.Config(
        coordinator.app,
        http=_deadline_protocol(MAX_UNAUTHENTICATED, wire.HELLO_TIMEOUT),
        ws="websockets-sansio",
        ws_max_size=wire.MAX_FRAME_BYTES,
        ws_ping_interval=wire.PING_INTERVAL,
        ws_ping_timeout=wire.PING_TIMEOUT,
        ws_per_message_deflate=False,
        ssl_certfile=tls[0] if tls else None,
        ssl_keyfile=tls[1] if tls else None,
        ssl_version=ssl.PROTOCOL_TLS_SERVER,
        lifespan="off",
        log_level="warning",
    )
    ready(f"listening on {'wss' if tls else 'ws'}://{host}:{listener.getsockname()[1]}")
    await uvicorn.Server(config).serve(sockets=[listener])


def _deadline_protocol(limit: int, seconds: float) -> type[H11Protocol]:
    """uvicorn's HTTP protocol, with what ``websockets`` gives the runner
    (its ``open_timeout``): a connection not upgraded to a WebSocket within
    ``seconds`` is dropped (uvicorn itself waits for a request forever), and
    at most ``limit`` connections wait so; more are dropped at once."""
    waiting: set[H11Protocol] = set()

    class DeadlineProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(waiting) >= limit:
                log.warning(
                    "connection from %s dropped: %d connections are in their handshake", self.client, limit
                )
                transport.abort()
                return
            waiting.add(self)
            self._deadline = asyncio.get_running_loop().call_later(seconds, self._expire)

        def _expire(self) -> None:
            if self in waiting:
                log.warning(
                    "connection from %s dropped: no WebSocket handshake within %.0f s", self.client, seconds
                )
                self._settle()
                self.transport.abort()

        def _settle(self) -> None:
            waiting.discard(self)
            if self._deadline is not None:
                self._deadline.cancel()

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            self._settle()
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc: Exception | None) -> None:
            self._settle()
            super().connection_lost(exc)

    return DeadlineProtocol


def _listening_socket(host: str, port: int) -> socket.socket:
    """Bound before serving, so the port is known at once (``port`` may be 0).
    Made with ``IPPROTO_TCP`` explicitly: asyncio disables Nagle's algorithm
    only on connections of such a socket, and with it on, a small frame
    waits for the peer's delayed ACK on every round trip."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(socket.SOMAXCONN)
    return listener
