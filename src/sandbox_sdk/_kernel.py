"""The sans-IO kernel: one place that runs an operation, sync or async.

An *operation* is a generator that yields requests and receives their
replies; it knows nothing of how a request is carried out. :func:`run`
performs each request with a blocking function, :func:`arun` with a
coroutine function, so every operation (a file operation over ``execute()``,
a native transfer over a platform's file API, a deepagents plan, a
provider's lifecycle flow) is written once and serves both APIs.

Protocol, the same for both drivers:

- the reply of a request is sent back into the operation;
- an exception raised while performing it (any ``BaseException``:
  cancellation and Ctrl-C included) is thrown into the operation at the
  ``yield``, which may handle it, re-raise it, or yield clean-up requests
  first;
- the operation's return value is the driver's.

:func:`arun` runs the requests an operation yields after a cancellation
shielded from it, so the clean-up it chose to do is not cancelled in turn.
A test drives an operation with :func:`run` and a function that records each
request and answers from a script: no I/O, no sleep (see tests/test_kernel.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator
from functools import partial
from typing import Any, TypeVar

import anyio

RequestT = TypeVar("RequestT")
T = TypeVar("T")
E = TypeVar("E")

#: An operation yielding requests of type ``RequestT`` and returning ``T``.
Operation = Generator[RequestT, Any, T]


def run(operation: Generator[RequestT, Any, T], perform: Callable[[RequestT], Any]) -> T:
    """Run ``operation`` to its end, performing each request with ``perform``."""
    done, value = _resume(operation.send, None)
    while not done:
        done, value = _step(operation, perform, value)
    return value  # type: ignore[no-any-return]


async def arun(operation: Generator[RequestT, Any, T], perform: Callable[[RequestT], Awaitable[Any]]) -> T:
    """Run ``operation`` to its end, awaiting ``perform`` for each request.

    Once a cancellation (or any other non-``Exception``) has been thrown into
    the operation, the requests it still yields run shielded."""
    steps = _AsyncSteps(operation, perform)
    done, value = _resume(operation.send, None)
    while not done:
        done, value = await steps.step(value)
    return value  # type: ignore[no-any-return]


#: ``(False, the operation's next request)``, or ``(True, its return value)``.
Step = tuple[bool, Any]


def _resume(method: Callable[[Any], Any], argument: Any) -> Step:
    """The operation's ``send`` or ``throw`` with ``argument``, as a :data:`Step`."""
    try:
        return False, method(argument)
    except StopIteration as stop:
        return True, stop.value


def _step(
    operation: Generator[RequestT, Any, Any], perform: Callable[[RequestT], Any], request: RequestT
) -> Step:
    """Perform ``request`` and hand its reply, or what it raised, to the operation."""
    try:
        reply = perform(request)
    except BaseException as exc:  # noqa: BLE001 - handed to the operation, which may clean up
        return _resume(operation.throw, exc)
    return _resume(operation.send, reply)


class _AsyncSteps:
    """:func:`_step` awaited, and shielded once the operation was interrupted."""

    def __init__(
        self, operation: Generator[RequestT, Any, Any], perform: Callable[[RequestT], Awaitable[Any]]
    ) -> None:
        self.operation = operation
        self.perform = perform
        self.interrupted = False

    async def step(self, request: Any) -> Step:
        try:
            with anyio.CancelScope(shield=self.interrupted):
                reply = await self.perform(request)
        except BaseException as exc:  # noqa: BLE001 - handed to the operation, which may clean up
            self.interrupted = self.interrupted or not isinstance(exc, Exception)
            return _resume(self.operation.throw, exc)
        return _resume(self.operation.send, reply)


class Abandoned(BaseException):
    """Thrown into an operation whose consumer stopped iterating (a stream
    closed early), so it can clean up as after any interruption."""


def iterate(
    operation: Generator[RequestT, Any, Any], perform: Callable[[RequestT], Any], pending: deque[E]
) -> Generator[E, None, None]:
    """Run ``operation`` as :func:`run` does, handing the consumer what the
    operation put in ``pending`` as soon as it yields its next request (or
    ends). A consumer that stops early (the iterator closed) throws
    :class:`Abandoned` into the operation, whose clean-up requests are
    performed before the iterator closes."""
    done, request = _resume(operation.send, None)
    while not done:
        yield from _handed_over(pending, partial(_run_abandoned, operation, request, perform))
        done, request = _step(operation, perform, request)
    yield from _handed_over(pending, lambda: None)


def _handed_over(pending: deque[E], abandon: Callable[[], object]) -> Iterator[E]:
    while pending:
        try:
            yield pending.popleft()
        except GeneratorExit:
            abandon()
            raise


def _run_abandoned(
    operation: Generator[RequestT, Any, Any], current: RequestT, perform: Callable[[RequestT], Any]
) -> None:
    run(_abandon(operation, current), perform)


def _abandon(operation: Generator[RequestT, Any, Any], current: RequestT) -> Generator[RequestT, Any, None]:
    """The clean-up the operation does when thrown :class:`Abandoned` at the
    request ``current`` it is waiting on (which is never performed)."""
    try:
        request = operation.throw(Abandoned())
        while True:
            try:
                reply = yield request
            except BaseException as exc:  # noqa: BLE001 - handed to the operation, as run does
                request = operation.throw(exc)
            else:
                request = operation.send(reply)
    except (StopIteration, Abandoned):
        return


async def aiterate(
    operation: Generator[RequestT, Any, Any],
    perform: Callable[[RequestT], Awaitable[Any]],
    pending: deque[E],
) -> AsyncGenerator[E, None]:
    """The async :func:`iterate`: requests after an interruption (a
    cancellation, or the iterator closed early) run shielded, as in :func:`arun`."""
    steps = _AsyncSteps(operation, perform)
    done, request = _resume(operation.send, None)
    while True:
        while pending:
            try:
                yield pending.popleft()
            except GeneratorExit:
                if not done:
                    await arun(_abandon(operation, request), _shielded(perform))
                raise
        if done:
            return
        done, request = await steps.step(request)


def _shielded(perform: Callable[[RequestT], Awaitable[Any]]) -> Callable[[RequestT], Awaitable[Any]]:
    async def shielded(request: RequestT) -> Any:
        with anyio.CancelScope(shield=True):
            return await perform(request)

    return shielded


def can_clean_up(exc: BaseException) -> bool:
    """Whether an operation that failed or was interrupted (an error, a
    cancellation, Ctrl-C) may still yield clean-up requests: not when the
    generator itself is being closed."""
    return not isinstance(exc, GeneratorExit)
