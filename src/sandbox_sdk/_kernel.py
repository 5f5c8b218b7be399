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

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

import anyio

RequestT = TypeVar("RequestT")
T = TypeVar("T")

#: An operation yielding requests of type ``RequestT`` and returning ``T``.
Operation = Generator[RequestT, Any, T]


def run(operation: Generator[RequestT, Any, T], perform: Callable[[RequestT], Any]) -> T:
    """Run ``operation`` to its end, performing each request with ``perform``."""
    try:
        request = next(operation)
        while True:
            try:
                reply = perform(request)
            except BaseException as exc:  # noqa: BLE001 - handed to the operation, which may clean up
                request = operation.throw(exc)
            else:
                request = operation.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def arun(operation: Generator[RequestT, Any, T], perform: Callable[[RequestT], Awaitable[Any]]) -> T:
    """Run ``operation`` to its end, awaiting ``perform`` for each request.

    Once a cancellation (or any other non-``Exception``) has been thrown into
    the operation, the requests it still yields run shielded."""
    interrupted = False
    try:
        request = next(operation)
        while True:
            try:
                with anyio.CancelScope(shield=interrupted):
                    reply = await perform(request)
            except BaseException as exc:  # noqa: BLE001 - handed to the operation, which may clean up
                interrupted = interrupted or not isinstance(exc, Exception)
                request = operation.throw(exc)
            else:
                request = operation.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def can_clean_up(exc: BaseException) -> bool:
    """Whether an operation that failed or was interrupted (an error, a
    cancellation, Ctrl-C) may still yield clean-up requests: not when the
    generator itself is being closed."""
    return not isinstance(exc, GeneratorExit)
