"""One client connection on the runner: authenticated by its first frame,
then its requests, run concurrently in worker processes and answered as
they finish. A ``cancel`` cancels its request (which kills the command,
see :mod:`~sandbox_sdk.runner.workers`); a closed connection cancels all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import Any, Protocol

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from sandbox_sdk import errors, wire
from sandbox_sdk.runner.workers import Outcome, Workers
from sandbox_sdk.wire import CloseCode

log = logging.getLogger("sandbox_sdk.runner")

Fields = dict[str, Any]
#: What :func:`loggable` writes as it is; the longest value it writes whole.
PLAIN = re.compile(r"[A-Za-z0-9_.:@/+-]{1,100}")
LOGGED_CHARS = 100


class Host(Protocol):
    """What a session needs of its runner (a :class:`~sandbox_sdk.runner.service.Runner`,
    which imports this module)."""

    limits: wire.Limits
    max_buffered_bytes: int
    workers: Workers

    def accepts(self, token: object) -> bool: ...

    def welcome(self) -> str: ...


class Session:
    """Serves one connection until it closes."""

    def __init__(self, runner: Host, connection: Connection, name: str) -> None:
        self._runner = runner
        self._ws = connection
        self._name = name
        limits = runner.limits
        self._bodies = wire.Bodies(max_open=limits.max_concurrent, max_buffered=runner.max_buffered_bytes)
        self._waiting: dict[int, asyncio.Future[bytearray | None]] = {}
        #: The requests being performed, by id: what ``max_concurrent`` counts.
        self._tasks: dict[int, asyncio.Task[Outcome]] = {}
        #: The tasks sending responses (each awaits its request's task).
        self._answers: set[asyncio.Task[None]] = set()
        self._closing = False

    async def run(self) -> None:
        if not await self._authenticate():
            return
        log.info("%s: opened", self._name)
        try:
            problem = await wire.read_frames(self._ws, self._receive)
            if problem is not None:
                log.warning("%s: protocol error: %s", self._name, loggable(str(problem)))
        finally:
            self._closing = True
            tasks = [*self._tasks.values(), *self._answers]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            log.info("%s: closed (%s)", self._name, self._ws.close_code)

    async def _authenticate(self) -> bool:
        """Nothing but a ``hello`` with the client token opens a session."""
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
                waiter = self._waiting.pop(request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(body)
            return
        frame = wire.decode(message)
        if frame["type"] == "request":
            self._start(frame)
        elif frame["type"] == "cancel":
            self._cancel(wire.field(frame, "id", int))
        else:
            raise wire.ProtocolError(f"unexpected {frame['type']} frame")

    def _start(self, frame: Fields) -> None:
        request_id = wire.field(frame, "id", int)
        size = wire.field(frame, "size", int)
        if request_id in self._tasks or request_id in self._bodies:
            raise wire.ProtocolError(f"request id {request_id} is in use")
        if not 0 <= size <= self._runner.limits.max_command_bytes:
            raise wire.ProtocolError(f"a body of {size} bytes is over max_command_bytes")
        if not 0 <= request_id <= wire.MAX_REQUEST_ID:  # no chunk can carry its body, nor its output
            problem = f"request id {request_id} is out of range (0 to {wire.MAX_REQUEST_ID})"
            self._answer(request_id, frame, errors.InvalidArgumentError(problem))
            return
        if len(self._tasks) >= self._runner.limits.max_concurrent:
            if size:
                self._bodies.expect(request_id, size, keep=False)
            limit = self._runner.limits.max_concurrent
            self._answer(
                request_id,
                frame,
                errors.RateLimitedError(f"more than {limit} requests in flight on one connection"),
            )
            return
        body: asyncio.Future[bytearray | None] = asyncio.get_running_loop().create_future()
        if size:
            self._bodies.expect(request_id, size)
            self._waiting[request_id] = body
        else:
            body.set_result(bytearray())
        task = self._tasks[request_id] = asyncio.create_task(self._perform(frame, body))
        task.add_done_callback(
            lambda _: self._tasks.pop(request_id, None) if self._tasks.get(request_id) is task else None
        )
        self._answer(request_id, frame, task)

    def _cancel(self, request_id: int) -> None:
        """Cancel the request (its response says so) and free its body, whose
        remaining chunks are then counted and dropped."""
        task = self._tasks.pop(request_id, None)  # its slot is free at once
        if task is not None:
            task.cancel()
            self._bodies.drop(request_id)
            self._waiting.pop(request_id, None)

    def _answer(
        self, request_id: int, frame: Fields, outcome: asyncio.Task[Outcome] | errors.SandboxError
    ) -> None:
        """Send the response of ``outcome`` (the request's task, or why it was refused) when it is in."""
        answer = asyncio.create_task(self._respond(request_id, frame, outcome))
        self._answers.add(answer)
        answer.add_done_callback(self._answers.discard)

    async def _respond(
        self, request_id: int, frame: Fields, outcome: asyncio.Task[Outcome] | errors.SandboxError
    ) -> None:
        """Await the request's task rather than run it here: a task cancelled
        before it ever ran raises at once, and its response must still go."""
        started = time.monotonic()
        if isinstance(outcome, errors.SandboxError):
            fields, output = {"ok": False, "error": wire.error_fields(outcome)}, b""
        else:
            try:
                fields, output = await outcome
            except asyncio.CancelledError:
                if self._closing:
                    raise  # no one to answer
                fields, output = (
                    {"ok": False, "error": {"type": wire.CANCELLED, "message": "cancelled by the client"}},
                    b"",
                )
        self._log(request_id, frame, fields, len(output), time.monotonic() - started)
        header = wire.encode("response", id=request_id, size=len(output), **fields)
        with contextlib.suppress(ConnectionClosed):
            await wire.send(self._ws, header, request_id, output)

    async def _perform(self, frame: Fields, body: asyncio.Future[bytearray | None]) -> Outcome:
        """The response's fields and body."""
        try:
            op, args = wire.field(frame, "op", str), wire.field(frame, "args", dict)
            command = await body
            return await self._runner.workers.run(op, args, command or b"")
        except Exception as exc:  # noqa: BLE001 - any failure is the request's answer
            return {"ok": False, "error": wire.error_fields(exc)}, b""

    def _log(self, request_id: int, frame: Fields, fields: Fields, output_bytes: int, seconds: float) -> None:
        """One line per request; the command itself is never logged (it may
        hold secrets, and uploads travel inside commands), only its size.
        What the client chose (the op, the sandbox id) is escaped."""
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
            loggable(frame.get("op")),
            loggable(sandbox),
            loggable(frame.get("size")),
            outcome,
            output_bytes,
            seconds,
        )


def loggable(value: object) -> str:
    """``value`` as one field of a log line that it cannot break: a plain
    word (an id, a number) as it is, anything else (a newline, a space, a
    quote, non-ASCII) escaped and quoted by :func:`ascii`, and cut short."""
    text = value if isinstance(value, str) else repr(value)
    if PLAIN.fullmatch(text):
        return text
    return ascii(text[:LOGGED_CHARS]) + ("..." if len(text) > LOGGED_CHARS else "")
