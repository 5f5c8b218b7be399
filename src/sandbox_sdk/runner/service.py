"""The runner: serves the sandboxes of a local backend provider to remote
clients, either listening for them or dialled out to a coordinator.

A connection becomes a :class:`~sandbox_sdk.runner.session.Session` once it
presents the client token; its requests run in worker processes
(:mod:`~sandbox_sdk.runner.workers`) doing :mod:`~sandbox_sdk.runner.operations`
on the backend, whose state directory is the runner's workspace root.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import re
import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

from websockets.asyncio.connection import Connection
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed, WebSocketException

from sandbox_sdk import errors, wire
from sandbox_sdk.provider_kit import LARGE_COMMAND_BYTES
from sandbox_sdk.runner.session import Session
from sandbox_sdk.runner.workers import Backend, Workers
from sandbox_sdk.wire import CloseCode, security

log = logging.getLogger("sandbox_sdk.runner")

DEFAULT_MAX_OUTPUT_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_CONCURRENT = 64
DEFAULT_TIMEOUT = 120.0
DEFAULT_WORKERS = 64
#: Redialling a coordinator: the first wait, doubled after each failure up to the last.
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")

Announce = Callable[[str], None]


class Runner:
    """Runs the requests of authenticated sessions on ``backend``.

    ``client_token`` is the secret clients must present; ``runner_token``,
    which must differ from it, the runner's own at a coordinator (needed
    only to :meth:`connect` to one); ``runner_id`` is the name the runner
    registers under there. ``max_output_bytes`` must be the backend's output cap (the
    clients size file operations by it); ``max_concurrent`` bounds the
    requests in flight on one connection, ``workers`` those of all.
    A connection holds at most :attr:`max_buffered_bytes` of bodies under
    way: two commands' worth, as a client sends one body of several chunks
    at a time (a body of one chunk is whole as it comes)."""

    def __init__(
        self,
        backend: Backend,
        client_token: str,
        *,
        runner_token: str | None = None,
        runner_id: str = "runner",
        max_command_bytes: int = LARGE_COMMAND_BYTES,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        default_timeout: float = DEFAULT_TIMEOUT,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.backend_name = backend.build().name  # built once here too: a broken backend fails now
        self.workers = Workers(backend, default_timeout, workers)
        self.runner_id = runner_id
        self._digest = security.token_digest(client_token)
        if runner_token is not None:
            security.RunnerTokens(runner_token, client_token).check()
        self._runner_token = runner_token
        self.limits = wire.Limits(
            max_command_bytes=max_command_bytes,
            max_output_bytes=max_output_bytes,
            max_concurrent=max_concurrent,
            default_timeout=default_timeout,
        )
        self.max_buffered_bytes = 2 * max_command_bytes
        self._sessions = itertools.count(1)

    # -- sessions ------------------------------------------------------------------

    def accepts(self, token: object) -> bool:
        return security.token_matches(token, self._digest)

    def welcome(self) -> str:
        return wire.encode(
            "welcome", runner=self.runner_id, backend=self.backend_name, limits=self.limits.model_dump()
        )

    async def serve(self, connection: Connection, origin: str) -> None:
        await Session(self, connection, f"session {next(self._sessions)} ({origin})").run()

    # -- listening ---------------------------------------------------------------------

    async def listen(self, host: str, port: int, *, tls: ssl.SSLContext | None, ready: Announce) -> None:
        """Take client connections on ``host:port`` until cancelled."""
        security.warn_if_cleartext(log, host, tls is not None)
        await asyncio.to_thread(self.workers.prestart)

        async def handle(connection: ServerConnection) -> None:
            await self.serve(connection, f"from {connection.remote_address}")

        async with serve(
            handle,
            host,
            port,
            ssl=tls,
            max_size=wire.MAX_FRAME_BYTES,
            ping_interval=wire.PING_INTERVAL,
            ping_timeout=wire.PING_TIMEOUT,
            compression=None,
        ) as server:
            bound = next(iter(server.sockets)).getsockname()[1]
            ready(f"listening on {'wss' if tls else 'ws'}://{host}:{bound}")
            await server.serve_forever()

    # -- dialling a coordinator ------------------------------------------------------------

    async def connect(self, url: str, *, tls: ssl.SSLContext | None, ready: Announce) -> None:
        """Register at the coordinator of ``url`` (``.../runner/<id>``) and take
        the sessions it opens, until cancelled; a lost connection is redialled
        after a jittered backoff (doubling up to :data:`BACKOFF_MAX_SECONDS`).
        Raises ``AuthenticationError`` if the coordinator refuses the runner
        token, ``InvalidArgumentError`` without one."""
        if self._runner_token is None:
            raise errors.InvalidArgumentError(
                f"dialling a coordinator needs the runner token (--runner-token or ${security.TOKEN_ENV})"
            )
        runner_token = self._runner_token
        security.warn_if_cleartext(log, urlsplit(url).hostname or "", tls is not None)
        await asyncio.to_thread(self.workers.prestart)
        sessions: set[asyncio.Task[None]] = set()
        delay = BACKOFF_FIRST_SECONDS
        try:
            while True:
                try:
                    async with wire.dial(url, tls) as control:
                        await self._register(control, runner_token)
                        ready(f"registered at {url}")
                        delay = BACKOFF_FIRST_SECONDS
                        await self._take_sessions(control, url, tls, runner_token, sessions)
                    problem = "connection closed"
                except errors.AuthenticationError:
                    raise  # a PermissionError, hence an OSError: never worth a retry
                except (OSError, TimeoutError, WebSocketException, wire.ProtocolError) as exc:
                    problem = describe(exc)
                log.warning("coordinator %s: %s; redialling in about %.1f s", url, problem, delay)
                await asyncio.sleep(random.uniform(delay / 2, delay))
                delay = min(delay * 2, BACKOFF_MAX_SECONDS)
        finally:
            for task in sessions:
                task.cancel()
            await asyncio.gather(*sessions, return_exceptions=True)

    async def _register(self, control: Connection, runner_token: str) -> None:
        await control.send(wire.encode("hello", token=runner_token))
        try:
            frame = wire.decode(await asyncio.wait_for(control.recv(), wire.HELLO_TIMEOUT))
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code == CloseCode.UNAUTHORIZED:
                raise errors.AuthenticationError("the coordinator refused this runner's token") from exc
            raise
        if frame["type"] != "welcome":
            raise wire.ProtocolError(f"expected welcome, got {frame['type']}")

    async def _take_sessions(
        self,
        control: Connection,
        url: str,
        tls: ssl.SSLContext | None,
        runner_token: str,
        sessions: set[asyncio.Task[None]],
    ) -> None:
        async for message in control:
            frame = wire.decode(message)
            session_id = wire.field(frame, "session", str) if frame["type"] == "open" else ""
            if not SESSION_ID.fullmatch(session_id):
                raise wire.ProtocolError(f"unexpected {frame['type']} frame on the control connection")
            task = asyncio.create_task(
                self._dial_session(f"{url.rstrip('/')}/session/{session_id}", tls, runner_token)
            )
            sessions.add(task)
            task.add_done_callback(sessions.discard)

    async def _dial_session(self, url: str, tls: ssl.SSLContext | None, runner_token: str) -> None:
        """The connection of one client the coordinator relays: the runner's
        own hello to the coordinator, then the client's, checked as any."""
        try:
            async with wire.dial(url, tls) as connection:
                await connection.send(wire.encode("hello", token=runner_token))
                await self.serve(connection, "via the coordinator")
        except (OSError, TimeoutError, WebSocketException) as exc:
            log.warning("session via the coordinator: %s", describe(exc))


def describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
        return f"closed by the coordinator ({exc.rcvd.code} {exc.rcvd.reason})".rstrip()
    return f"{type(exc).__name__}: {exc}"
