"""One client connection on the runner: authenticated by its first frame,
then its requests, run concurrently in worker processes and answered as
they finish. A ``cancel`` cancels its request (which kills the command,
see :mod:`~sandbox_sdk.runner.workers`); a closed connection cancels all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from sandbox_sdk import errors
from sandbox_sdk.runner import wire
from sandbox_sdk.runner.wire import CloseCode

if TYPE_CHECKING:
    from sandbox_sdk.runner.service import Runner

log = logging.getLogger("sandbox_sdk.runner")

Fields = dict[str, Any]


class Session:
    """Serves one connection until it closes."""

    def __init__(self, runner: Runner, connection: Connection, name: str) -> None:
        self._runner = runner
        self._ws = connection
        self._name = name
        self._bodies = wire.Bodies()
        self._waiting: dict[int, asyncio.Future[bytearray | None]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._cancelled: set[int] = set()

    async def run(self) -> None:
        if not await self._authenticate():
            return
        log.info("%s: opened", self._name)
        try:
            problem = await wire.read_frames(self._ws, self._receive)
            if problem is not None:
                log.warning("%s: protocol error: %s", self._name, problem)
        finally:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            log.info("%s: closed (%s)", self._name, self._ws.close_code)

    async def _authenticate(self) -> bool:
        """Nothing but a ``hello`` with the runner's token opens a session."""
        try:
            hello = wire.decode(await asyncio.wait_for(self._ws.recv(), wire.HELLO_TIMEOUT))
        except wire.ProtocolError as exc:
            await self._ws.close(CloseCode.PROTOCOL_ERROR, str(exc)[:120])
            return False
        except (TimeoutError, ConnectionClosed):
            hello = {"type": "nothing"}
        if hello["type"] != "hello" or not self._runner.accepts(hello.get("token")):
            log.warning("%s: refused: no valid token", self._name)
            await self._ws.close(CloseCode.UNAUTHORIZED, "unauthorized")
            return False
        await self._ws.send(self._runner.welcome())
        return True

    def _receive(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            done = self._bodies.feed(message)
            if done is not None:
                request_id, body = done
                waiter = self._waiting.pop(request_id)
                if not waiter.done():
                    waiter.set_result(body)
            return
        frame = wire.decode(message)
        if frame["type"] == "request":
            self._start(frame)
        elif frame["type"] == "cancel":
            request_id = wire.field(frame, "id", int)
            if request_id in self._tasks:
                self._cancelled.add(request_id)
                self._tasks[request_id].cancel()
        else:
            raise wire.ProtocolError(f"unexpected {frame['type']} frame")

    def _start(self, frame: Fields) -> None:
        request_id = wire.field(frame, "id", int)
        size = wire.field(frame, "size", int)
        if request_id in self._tasks or request_id in self._bodies:
            raise wire.ProtocolError(f"request id {request_id} is in use")
        if not 0 <= size <= self._runner.limits.max_command_bytes:
            raise wire.ProtocolError(f"a body of {size} bytes is over max_command_bytes")
        refused = len(self._tasks) >= self._runner.limits.max_concurrent
        body: asyncio.Future[bytearray | None] = asyncio.get_running_loop().create_future()
        if size:
            self._bodies.expect(request_id, size, keep=not refused)
            self._waiting[request_id] = body
        else:
            body.set_result(bytearray())
        self._tasks[request_id] = asyncio.create_task(self._answer(request_id, frame, body, refused))

    async def _answer(
        self, request_id: int, frame: Fields, body: asyncio.Future[bytearray | None], refused: bool
    ) -> None:
        started = time.monotonic()
        try:
            fields, output = await self._perform(request_id, frame, body, refused)
        finally:
            self._tasks.pop(request_id, None)
            self._cancelled.discard(request_id)
        self._log(request_id, frame, fields, len(output), time.monotonic() - started)
        header = wire.encode("response", id=request_id, size=len(output), **fields)
        with contextlib.suppress(ConnectionClosed):
            await wire.send(self._ws, header, request_id, output)

    async def _perform(
        self, request_id: int, frame: Fields, body: asyncio.Future[bytearray | None], refused: bool
    ) -> tuple[Fields, bytes]:
        """The response's fields and body."""
        try:
            if refused:
                limit = self._runner.limits.max_concurrent
                raise errors.RateLimitedError(f"more than {limit} requests in flight on one connection")
            op, args = wire.field(frame, "op", str), wire.field(frame, "args", dict)
            command = await body
            return await self._runner.workers.run(op, args, command or b"")
        except asyncio.CancelledError:
            if request_id not in self._cancelled:
                raise  # the session is closing: no one to answer
            return {"ok": False, "error": {"type": wire.CANCELLED, "message": "cancelled by the client"}}, b""
        except Exception as exc:  # noqa: BLE001 - any failure is the request's answer
            return {"ok": False, "error": wire.error_fields(exc)}, b""

    def _log(self, request_id: int, frame: Fields, fields: Fields, output_bytes: int, seconds: float) -> None:
        """One line per request; the command itself is never logged (it may
        hold secrets, and uploads travel inside commands), only its size."""
        args = frame.get("args")
        sandbox = args.get("sandbox", "-") if isinstance(args, dict) else "-"
        if not fields["ok"]:
            outcome = f"error={fields['error']['type']}"
        elif frame.get("op") == "execute":
            result = fields["result"]
            outcome = (
                f"exit={result['exit_code']} timed_out={result['timed_out']} truncated={result['truncated']}"
            )
        else:
            outcome = "ok"
        log.info(
            "%s: request=%d op=%s sandbox=%s command_bytes=%s %s output_bytes=%d seconds=%.3f",
            self._name,
            request_id,
            frame.get("op"),
            sandbox,
            frame.get("size"),
            outcome,
            output_bytes,
            seconds,
        )
