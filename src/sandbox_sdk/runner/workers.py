"""Worker processes: each runs one request at a time, so whatever a request
starts is a child of one process.

A backend may start a command from any of its threads, so no thread
bounds what a request started; a process does. Cancelling a request kills
the process group of each child of its worker, as the backend itself does at
a timeout, until the worker answers; the worker then takes the next request.
Children are found in ``/proc/<pid>/task/*/children`` (Linux). A command
that is not the worker's child (a bubblewrap sandbox's jail runs it, the
worker only holds a connection to the jail) and still runs after
``WORKER_KILL_POLLS`` rounds, or one where Linux's list is missing, is ended
by killing the worker itself: the jail sees the connection drop and kills
the command's group (an unisolated local command is a child, killed above).

Workers fork from a fork server that has imported the backend (a few
milliseconds each), wait idle for reuse, and die with the runner, even one
killed with SIGKILL, taking their requests' commands along: each worker
watches a pipe only the runner writes to (the *lifeline*), and when it
reads the end of it, kills the process group of each of its children, as a
cancellation does, and exits (which hangs up on a jail's command).
``PR_SET_PDEATHSIG`` is not enough alone: the fork server, the workers'
parent, lives on while any worker does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from sandbox_sdk import errors, wire
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.provider_kit import kill_group
from sandbox_sdk.runner.operations import Operations

#: How often a cancelled request's worker is checked for children to kill.
KILL_POLL_SECONDS = 0.05
#: Rounds of killing children after which a cancelled request's worker that
#: has not answered is killed itself.
WORKER_KILL_POLLS = 4
PR_SET_PDEATHSIG = 1

#: A response's fields (``ok`` and ``result`` or ``error``) and its body.
Outcome = tuple[dict[str, Any], bytes]


@dataclass(frozen=True)
class Backend:
    """How a worker makes the backend provider: ``factory(**options)``,
    picklable (a provider class or a module-level function)."""

    factory: Callable[..., SandboxProvider[Any]]
    options: dict[str, Any] = field(default_factory=dict)

    def build(self) -> SandboxProvider[Any]:
        return self.factory(**self.options)


class Workers:
    """At most ``size`` workers running requests on ``backend``; a request
    waits for a free one."""

    def __init__(self, backend: Backend, default_timeout: float, size: int) -> None:
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([__name__, backend.factory.__module__])
        self._backend = backend
        self._default_timeout = default_timeout
        self._idle: list[_Worker] = []
        self._slots = asyncio.Semaphore(size)
        self._threads = ThreadPoolExecutor(size, thread_name_prefix="sandbox-runner-call")
        # Only this process holds the writing end: its death closes the pipe.
        self._lifeline, self._lifeline_writer = self._context.Pipe(duplex=False)

    def prestart(self) -> None:
        """Start the fork server and one worker now, not on the first request."""
        self._idle.append(self._start())

    async def run(self, op: str, args: dict[str, Any], body: bytes | bytearray) -> Outcome:
        async with self._slots:
            worker = self._idle.pop() if self._idle else await asyncio.to_thread(self._start)
            try:
                return await self._call(worker, op, args, body)
            finally:
                if worker.broken:
                    worker.stop()
                else:
                    self._idle.append(worker)

    async def _call(self, worker: _Worker, op: str, args: dict[str, Any], body: bytes | bytearray) -> Outcome:
        call = asyncio.get_running_loop().run_in_executor(self._threads, worker.call, op, args, body)
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            polls = 0
            while not call.done():
                worker.kill_children()
                if polls == WORKER_KILL_POLLS:
                    worker.kill()
                polls += 1
                await asyncio.wait([call], timeout=KILL_POLL_SECONDS)
            if not call.cancelled():
                call.exception()  # retrieved: the caller was cancelled, the outcome is moot
            raise

    def _start(self) -> _Worker:
        here, there = self._context.Pipe()
        process = self._context.Process(
            target=serve,
            args=(there, self._lifeline, self._backend, self._default_timeout),
            name="sandbox-runner-worker",
            daemon=True,
        )
        process.start()
        there.close()
        return _Worker(process, here)


class _Worker:
    def __init__(self, process: BaseProcess, connection: Connection) -> None:
        self._process = process
        self._connection = connection
        self.broken = False

    def call(self, op: str, args: dict[str, Any], body: bytes | bytearray) -> Outcome:
        """One request, blocking (in a thread): its outcome from the worker."""
        try:
            self._connection.send((op, args))
            self._connection.send_bytes(body)
            fields = self._connection.recv()
            return fields, self._connection.recv_bytes()
        except (EOFError, OSError) as exc:
            self.broken = True
            raise errors.SandboxRuntimeError(f"{op}: the worker process running it died ({exc!r})") from None

    def kill_children(self) -> None:
        """Kill the process group of each process the worker started."""
        assert self._process.pid is not None
        children = process_children(self._process.pid)
        if children is None:
            self.kill()
            return
        for pid in children:
            kill_group(pid)

    def kill(self) -> None:
        """End the worker (not reused), and with it every connection it holds."""
        self.broken = True
        self._process.kill()

    def stop(self) -> None:
        self._connection.close()
        self._process.kill()
        self._process.join(5)


def process_children(pid: int) -> list[int] | None:
    """Pids of the processes ``pid`` started (from any of its threads);
    ``None`` where Linux's ``/proc/<pid>/task/<tid>/children`` is missing."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return None if not os.path.isdir("/proc/self/task") else []
    children: list[int] = []
    for tid in threads:
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/children") as listing:
            children += [int(child) for child in listing.read().split()]
    return children


def serve(connection: Connection, lifeline: Connection, backend: Backend, default_timeout: float) -> None:
    """A worker's life: requests from ``connection``, one at a time, until it
    closes or the runner dies (``lifeline`` ends)."""
    threading.Thread(
        target=_watch_runner, args=(lifeline,), name="sandbox-runner-lifeline", daemon=True
    ).start()
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the runner's to handle
    operations = Operations(backend.build(), default_timeout)
    while True:
        try:
            op, args = connection.recv()
            body = connection.recv_bytes()
        except EOFError:
            return
        try:
            result, output = operations.perform(op, args, body)
            fields: dict[str, Any] = {"ok": True, "result": result}
        except Exception as exc:  # noqa: BLE001 - any failure is the request's answer
            fields, output = {"ok": False, "error": wire.error_fields(exc)}, b""
        connection.send(fields)
        connection.send_bytes(output)


def _watch_runner(lifeline: Connection) -> None:
    """Wait for the runner's death, then end this worker and what its request started."""
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv_bytes()  # nothing is ever sent: this returns at the runner's death
    for pid in process_children(os.getpid()) or ():
        kill_group(pid)
    os._exit(1)


def _die_with_parent() -> None:
    """SIGKILL when the fork server goes, which it does when the runner goes."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
