"""The transport layer of :class:`~sandbox_sdk.BaseSandbox`: ``execute()``
plus the drivers that run operations over it.

Every operation is written once, as a generator that yields calls
(:mod:`sandbox_sdk._calls`: one ``execute()`` round trip each, typed by
their reply) and :class:`Pipeline` s of many calls, kept in flight a few at a
time, and receives each call's decoded reply. :meth:`SandboxCore._drive`
runs such a generator with ``execute`` and :meth:`SandboxCore._adrive` with
``aexecute``, so the sync and async APIs share every line of logic and
differ only in how they wait.
"""

from __future__ import annotations

import logging
import os
import posixpath
import secrets
import time
from abc import abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread

from sandbox_sdk import _kernel as kernel
from sandbox_sdk import errors, protocol
from sandbox_sdk._calls import Call
from sandbox_sdk._handle import SandboxHandle
from sandbox_sdk._session import Session, session_of
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import ExecuteResponse

T = TypeVar("T")
R = TypeVar("R")

PathArg = str | bytes | os.PathLike[str]

#: Timeout of a clean-up round trip (it may run shielded from cancellation).
CLEANUP_TIMEOUT = 30.0
#: Each ``execute()`` round trip at DEBUG: operation, bytes each way, exit
#: code, duration; never the command, its payload or its output.
round_trip_log = logging.getLogger("sandbox_sdk.round_trips")
#: The names of :class:`Limits`' fields, which a sandbox class must not set
#: as attributes of its own (see ``SandboxCore.__init_subclass__``).
LIMIT_NAMES = frozenset(field.name for field in fields(Limits))
#: Output past which a native ``aexecute``'s reply is decoded on a worker
#: thread: below it, decoding takes less than the hop to a thread.
LOOP_DECODE_LIMIT = 256 * 1024


@dataclass(frozen=True)
class Pipeline(Generic[R]):
    """Many calls, up to ``window`` of them in flight at once.

    A call is a script :class:`Call`, a provider's :class:`NativeRequest`, or
    a whole sub-operation (a generator of requests, say one file's transfer),
    driven to its end as one element: its return value is its reply.

    ``calls`` is drawn lazily and each reply is handed to ``consume`` in call
    order as soon as it and every reply before it are in, so an operation
    holds at most ``window`` calls' data however long the transfer, and the
    sandbox works on the next call while the client digests the last. Yielding
    a pipeline returns ``None`` once every reply is consumed. The first failure
    (of a call, of ``consume``, or of drawing the next call) is raised into the
    operation only after the calls still in flight have finished, so its
    clean-up never races them.

    ``meanwhile`` is work the client can do while the first call runs: it is
    called once that call is under way (so its memory adds to one call's, not
    the window's), before any reply is consumed."""

    calls: Iterable[Call[R] | NativeRequest | Generator[Any, Any, R]]
    consume: Callable[[R], None]
    window: int = 1
    meanwhile: Callable[[], None] = lambda: None


class NativeRequest:
    """Base of a provider's own request types (a call on a platform's file API,
    say): an operation a provider overrides may yield them, and the provider's
    :meth:`SandboxCore._perform` / :meth:`SandboxCore._aperform` override
    carries them out, handing every other request to ``super()``."""


#: What an operation yields (a pipeline's elements may also be sub-operations).
Request = Call[Any] | Pipeline[Any] | NativeRequest | Generator[Any, Any, Any]
Operation = Generator[Request, Any, T]


def scratch_path(sandbox: SandboxCore, name: str, suffix: str = "") -> str:
    """A fresh path in the sandbox's ``scratch_dir`` (``.sbx-<name>-<token><suffix>``), payload-encoded."""
    return protocol.encode_path(posixpath.join(sandbox.scratch_dir, f".sbx-{name}-{new_token()}{suffix}"))


def new_token() -> str:
    """A fresh name part for staging files: unguessable, so never in use."""
    return secrets.token_hex(8)


def check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise errors.InvalidArgumentError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def check_timeout(timeout: object) -> float | None:
    """A command's timeout in seconds; ``None`` or ``0`` mean the sandbox's
    default, as deepagents' ``execute(timeout=0)`` does (never "expire at once")."""
    if timeout is None or (not isinstance(timeout, bool) and timeout == 0):
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise errors.InvalidArgumentError(
            f"timeout must be seconds > 0, or None or 0 for the default, not {timeout!r}"
        )
    return float(timeout)


def command_seconds(timeout: object, default: float) -> float:
    """The seconds a command may run on a provider: ``timeout`` as
    :func:`check_timeout` reads it (``None`` or ``0``: ``default``). Every
    provider's ``execute`` reads it so, as ``run`` does: one meaning of 0."""
    seconds = check_timeout(timeout)
    return default if seconds is None else seconds


def check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise errors.InvalidArgumentError(f"{name} must be an int >= {minimum}, not {value!r}")
    return value


def check_path(path: object, name: str = "path") -> str:
    """The payload form of a path; malformed paths fail before any round trip."""
    if not isinstance(path, str | bytes | os.PathLike):
        raise errors.InvalidPathError(f"{name} must be str, bytes or os.PathLike, not {type(path).__name__}")
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError as exc:  # a lone surrogate outside surrogateescape's range
        raise errors.InvalidPathError(f"{name} is not valid Unicode text: {exc.reason}") from None
    shown = os.fsdecode(raw)
    if not raw:
        raise errors.InvalidPathError(f"{name} is empty", path=shown)
    if b"\0" in raw:
        raise errors.InvalidPathError(f"{name} contains a NUL byte", path=shown)
    return protocol.encode_path(raw)


def to_bytes(name: str, value: object) -> bytes:
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: pass bytes for bytes that are not text
            raise errors.InvalidArgumentError(
                f"{name} is not valid Unicode text: {exc.reason} at {exc.start}"
            ) from None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise errors.InvalidArgumentError(f"{name} must be str or bytes, not {type(value).__name__}")


class SandboxCore(SandboxHandle):
    """Limits, round trips and drivers; see :class:`~sandbox_sdk.BaseSandbox`."""

    #: What one round trip may carry and take: command and output caps,
    #: timeouts, the transfer window, process polling. A provider declares
    #: its own (``limits = Limits(max_command_bytes=...)``), or sets
    #: ``self.limits`` in ``__init__`` when they depend on its arguments.
    limits: Limits = Limits()
    #: Directory in the sandbox for scratch files: directory archives, and
    #: ``run`` stdin or ``edit`` texts too large for one command (not beside the
    #: target: staging creates parents, and an edit must not); the in-sandbox
    #: scripts are installed there too (docs/protocol.md).
    scratch_dir: str = "/tmp"
    #: Whether file operations ask the sandbox's operation server first
    #: (docs/protocol.md, "The operation server"): a long-lived ``python3``
    #: that runs their scripts without an interpreter start each.
    operation_server: bool = True
    #: Seconds without a request after which the operation server exits
    #: (the next command that finds none has the one after it start one).
    operation_server_idle: float = 600.0
    #: Whether file operations reuse what earlier ones left in the sandbox:
    #: installed scripts and the operation server. ``False`` ships every
    #: script in its command and runs it with a fresh ``python3``, reading
    #: nothing installed, so that a command running as the same user as the
    #: file operations cannot change what a later one reports
    #: (docs/security.md; its cost: docs/benchmarks.md).
    reuse_sandbox_state: bool = True
    #: A directory in the sandbox where the provider itself installed the
    #: scripts (``protocol.shipped``'s names, each beside its ``.py``),
    #: read-only to every command: then no command of the sandbox can
    #: change the scripts its file operations run (docs/security.md). bwrap
    #: has one; ``None``: the SDK installs them in ``scratch_dir``.
    installed_scripts: str | None = None
    #: Whether the provider runs the sandbox's operation server itself and
    #: gives a command whose first line is ``protocol.CHANNEL_REQUEST`` a
    #: connection to it on descriptor ``protocol.CHANNEL_FD``: a channel no
    #: command can redirect, so no command ever starts a server (bwrap's
    #: jail does; docs/security.md).
    operation_channel: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a class that sets a limit as an attribute of its own, which
        nothing would read: the limits live in :attr:`limits`."""
        super().__init_subclass__(**kwargs)
        moved = sorted(LIMIT_NAMES & vars(cls).keys())
        if moved:
            raise TypeError(
                f"{cls.__name__} sets {', '.join(moved)}: declare them as "
                f"limits = Limits({moved[0]}=...) (sandbox_sdk.Limits, docs/provider-guide.md)"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        """Refuse a limit set on a sandbox object (``sandbox.max_output_bytes
        = ...``), which nothing would read either: replace :attr:`limits`."""
        if name in LIMIT_NAMES:
            raise TypeError(
                f"{type(self).__name__}.{name} is not read: set "
                f"sandbox.limits = dataclasses.replace(sandbox.limits, {name}=...) (docs/provider-guide.md)"
            )
        super().__setattr__(name, value)

    @property
    @abstractmethod
    def id(self) -> str:
        """A stable identifier for this sandbox."""

    @abstractmethod
    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        """Run ``command`` with a POSIX shell inside the sandbox.

        The one method a provider must implement. Contract: stdout and stderr
        merged in ``output``; the command's exit status in ``exit_code``
        (``None`` if it never finished); output past ``limits.max_output_bytes`` cut
        with ``truncated=True``; on ``timeout`` the command and everything it
        started are killed and ``timed_out=True`` is returned (not raised)."""

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        """Async ``execute``: by default the sync one in a worker thread.

        A provider with a native async client overrides this; every async
        operation then goes through it, and a worker thread is used only to
        decode a reply over ``LOOP_DECODE_LIMIT`` (a chunk of a download)."""
        return await anyio.to_thread.run_sync(lambda: self.execute(command, timeout=timeout))

    # -- one round trip ------------------------------------------------------

    @staticmethod
    def _provider_failure(call: Call[Any], exc: Exception) -> errors.SandboxError:
        if isinstance(exc, errors.SandboxError):
            return exc
        if isinstance(exc, TimeoutError):
            return errors.SandboxTimeoutError(f"{call.what} timed out: {exc}")
        return errors.SandboxRuntimeError(f"{call.what}: the provider failed: {type(exc).__name__}: {exc}")

    def _session(self) -> Session:
        """What this client has learned of the sandbox's state in
        ``scratch_dir`` (which must be absolute: ``""`` would install the
        scripts in the root), with the settings each plan reads."""
        if not (isinstance(self.scratch_dir, str) and self.scratch_dir.startswith("/")):
            raise errors.InvalidArgumentError(
                f"{type(self).__name__}.scratch_dir must be an absolute path, not {self.scratch_dir!r}"
            )
        return session_of(self)

    def _invoke(self, call: Call[R]) -> R:
        """One call: a file operation's round trip gets ``operation_timeout``,
        a user's command (``execute``, ``run``) its own or the provider's default.
        A command that left out a script with no installed copy is sent again
        (once: the script is then known to be missing)."""
        scripts = self._session()
        while True:
            command, nonce = call.command(self.limits, scripts)
            started = time.monotonic()
            try:
                response = self.execute(command, timeout=call.timeout_or(self.limits.operation_timeout))
            except Exception as exc:
                _log_round_trip(call, command, started, exc)
                raise self._provider_failure(call, exc) from exc
            _log_round_trip(call, command, started, response)
            if not call.resend(scripts, response, nonce):
                return call.decode(response, nonce)

    async def _ainvoke(self, call: Call[R]) -> R:
        if type(self).aexecute is SandboxCore.aexecute:
            # No native async client: the whole round trip, building the
            # command and decoding the reply included, runs in the worker
            # thread, so megabytes of base64 never stall the event loop.
            # A call that only reads is left to finish alone when cancelled.
            return await anyio.to_thread.run_sync(self._invoke, call, abandon_on_cancel=call.interruptible)
        scripts = self._session()
        while True:
            command, nonce = call.command(self.limits, scripts)
            started = time.monotonic()
            try:
                response = await self.aexecute(
                    command, timeout=call.timeout_or(self.limits.operation_timeout)
                )
            except Exception as exc:
                _log_round_trip(call, command, started, exc)
                raise self._provider_failure(call, exc) from exc
            _log_round_trip(call, command, started, response)
            if not call.resend(scripts, response, nonce):
                break
        if len(response.output) > LOOP_DECODE_LIMIT:
            # A chunk of a download is megabytes of base64: decoded on a worker
            # thread, as the threaded path does, not on the event loop.
            return await anyio.to_thread.run_sync(call.decode, response, nonce)
        return call.decode(response, nonce)

    # -- drivers ---------------------------------------------------------------

    def _perform(self, request: Request) -> Any:
        """One request of an operation, with ``execute``. A provider with
        :class:`NativeRequest` s overrides it (and :meth:`_aperform`)."""
        if isinstance(request, Pipeline):
            return self._run_pipeline(request)
        if isinstance(request, Call):
            return self._invoke(request)
        if isinstance(request, Generator):  # a sub-operation of a pipeline
            return self._drive(request)
        raise TypeError(f"{type(self).__name__} cannot perform a {type(request).__name__}")

    async def _aperform(self, request: Request) -> Any:
        """One request of an operation, with ``aexecute``."""
        if isinstance(request, Pipeline):
            return await self._arun_pipeline(request)
        if isinstance(request, Call):
            return await self._ainvoke(request)
        if isinstance(request, Generator):  # a sub-operation of a pipeline
            return await self._adrive(request)
        raise TypeError(f"{type(self).__name__} cannot perform a {type(request).__name__}")

    def _drive(self, operation: Operation[T]) -> T:
        """Run an operation with ``execute``."""
        return kernel.run(operation, self._perform)

    async def _adrive(self, operation: Operation[T]) -> T:
        """Run an operation with ``aexecute``; clean-up after a cancellation runs shielded."""
        return await kernel.arun(operation, self._aperform)

    def _run_pipeline(self, pipeline: Pipeline[Any]) -> None:
        """Keep the window full with worker threads. ``execute`` must therefore
        be thread-safe, as the default ``aexecute`` already requires; a
        provider that is not declares ``Limits(transfer_concurrency=1)``.

        After Ctrl-C (or any other non-``Exception``), the operation gets the
        interruption at once; calls already running finish in the background."""
        calls = iter(pipeline.calls)
        if pipeline.window <= 1:
            pipeline.meanwhile()
            for call in calls:
                pipeline.consume(self._perform(call))
            return
        pool = ThreadPoolExecutor(pipeline.window, thread_name_prefix="sandbox-sdk")
        in_flight: deque[Future[Any]] = deque()
        meanwhile_done = False  # it is done once the first call is under way
        try:
            for call in calls:
                if len(in_flight) == pipeline.window:
                    pipeline.consume(in_flight.popleft().result())
                if any(future.done() and future.exception() for future in in_flight):
                    break  # send nothing more; the failure is raised in call order below
                in_flight.append(pool.submit(self._perform, call))
                if not meanwhile_done:
                    meanwhile_done = True
                    pipeline.meanwhile()
            if not meanwhile_done:  # there were no calls
                pipeline.meanwhile()
            while in_flight:
                pipeline.consume(in_flight.popleft().result())
        except Exception:
            wait(in_flight)
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    async def _arun_pipeline(self, pipeline: Pipeline[Any]) -> None:
        """Keep the window full with tasks; a cancellation cancels the calls in flight."""
        in_flight: deque[_PendingReply] = deque()
        failure: Exception | None = None
        meanwhile_done = False  # it is done once the first call is under way
        async with anyio.create_task_group() as group:
            try:
                for call in pipeline.calls:
                    if len(in_flight) == max(1, pipeline.window):
                        pipeline.consume(await in_flight.popleft().get())
                    if any(pending.failed for pending in in_flight):
                        break  # send nothing more; the failure is raised in call order below
                    pending = _PendingReply()
                    group.start_soon(pending.fill, self._aperform, call)
                    in_flight.append(pending)
                    if not meanwhile_done:
                        meanwhile_done = True
                        await anyio.sleep(0)  # let the call just started get under way
                        pipeline.meanwhile()
                if not meanwhile_done:  # there were no calls
                    pipeline.meanwhile()
                while in_flight:
                    pipeline.consume(await in_flight.popleft().get())
            except Exception as exc:  # noqa: BLE001 - raised once the calls in flight are done
                failure = exc
        if failure is not None:
            raise failure


def _log_round_trip(
    call: Call[Any], command: str, started: float, outcome: ExecuteResponse | Exception
) -> None:
    """One round trip at DEBUG: its operation (a script's name, or ``execute``
    for a user's command), the bytes sent and received, the exit code and
    the duration; the command and output themselves never."""
    if not round_trip_log.isEnabledFor(logging.DEBUG):
        return
    operation = getattr(call, "op", "execute")
    sent = len(command.encode("utf-8", "surrogateescape"))
    seconds = time.monotonic() - started
    if isinstance(outcome, Exception):
        failure = type(outcome).__name__
        round_trip_log.debug("%s: sent %d bytes, failed after %.3f s: %s", operation, sent, seconds, failure)
        return
    received = len(outcome.output.encode("utf-8", "surrogateescape"))
    timed_out = " (timed out)" if outcome.timed_out else ""
    round_trip_log.debug(
        "%s: sent %d bytes, received %d bytes, exit %s%s, %.3f s",
        *(operation, sent, received, outcome.exit_code, timed_out, seconds),
    )


class _PendingReply:
    """The reply of a call running in a task: its value, or the exception it raised."""

    def __init__(self) -> None:
        self._done = anyio.Event()
        self._value: Any = None
        self._error: Exception | None = None

    async def fill(self, invoke: Callable[[Any], Awaitable[Any]], call: Request) -> None:
        try:
            self._value = await invoke(call)
        except Exception as exc:  # noqa: BLE001 - re-raised by get(), in call order
            self._error = exc
        finally:
            self._done.set()

    @property
    def failed(self) -> bool:
        return self._error is not None

    async def get(self) -> Any:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value
