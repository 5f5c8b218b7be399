"""The sans-IO kernel, h11-style: operations fed scripted replies, no I/O, no sleep."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

import anyio
import pytest

from sandbox_sdk import _kernel as kernel
from sandbox_sdk._kernel import can_clean_up


class Script:
    """Answers requests from a list (an exception in it is raised) and records them."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.requests: list[Any] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def acall(self, request: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        return self(request)


def copy_with_cleanup() -> Generator[str, Any, str]:
    """Two requests; a failure of the second yields a clean-up request, then re-raises."""
    first = yield "open"
    try:
        second = yield f"write {first}"
    except BaseException as exc:
        if can_clean_up(exc):
            yield "remove"
        raise
    return f"{first}+{second}"


def test_replies_are_sent_back_and_the_return_value_is_the_result() -> None:
    script = Script("a", "b")
    assert kernel.run(copy_with_cleanup(), script) == "a+b"
    assert script.requests == ["open", "write a"]


def test_a_failure_is_thrown_in_at_the_yield_and_clean_up_requests_are_performed() -> None:
    script = Script("a", OSError("disk full"), None)
    with pytest.raises(OSError, match="disk full"):
        kernel.run(copy_with_cleanup(), script)
    assert script.requests == ["open", "write a", "remove"]


def test_an_operation_may_handle_a_failure_and_go_on() -> None:
    def tolerant() -> Generator[str, Any, list[str]]:
        seen = []
        for name in ("x", "y"):
            try:
                seen.append((yield name))
            except KeyError:
                seen.append("missing")
        return seen

    assert kernel.run(tolerant(), Script(KeyError("x"), "Y")) == ["missing", "Y"]


def test_ctrl_c_reaches_the_operation_which_cleans_up() -> None:
    script = Script("a", KeyboardInterrupt(), None)
    with pytest.raises(KeyboardInterrupt):
        kernel.run(copy_with_cleanup(), script)
    assert script.requests[-1] == "remove"


def test_an_operation_without_requests_returns_at_once() -> None:
    def nothing() -> Generator[str, Any, int]:
        return 7
        yield "never"

    assert kernel.run(nothing(), Script()) == 7


async def test_async_driver_follows_the_same_protocol() -> None:
    script = Script("a", "b")
    assert await kernel.arun(copy_with_cleanup(), script.acall) == "a+b"
    failing = Script("a", ValueError("bad"), None)
    with pytest.raises(ValueError, match="bad"):
        await kernel.arun(copy_with_cleanup(), failing.acall)
    assert failing.requests == ["open", "write a", "remove"]


async def test_clean_up_after_a_cancellation_runs_shielded() -> None:
    performed: list[str] = []
    started = anyio.Event()

    async def perform(request: str) -> str:
        performed.append(request)
        if request.startswith("write"):
            started.set()
            await anyio.sleep_forever()
        await anyio.lowlevel.checkpoint()  # would raise if the clean-up were not shielded
        performed.append(f"done {request}")
        return "a"

    async with anyio.create_task_group() as group:
        group.start_soon(kernel.arun, copy_with_cleanup(), perform)
        await started.wait()
        group.cancel_scope.cancel()
    assert performed == ["open", "done open", "write a", "remove", "done remove"]


def counting(events: deque[int]) -> Generator[str, Any, None]:
    """Three polls, an event per reply; interrupted, it yields a kill first."""
    try:
        for n in range(3):
            events.append((yield f"poll {n}"))
    except BaseException as exc:
        if can_clean_up(exc):
            yield "kill"
        raise


def test_iterate_hands_over_events_as_the_operation_goes() -> None:
    events: deque[int] = deque()
    script = Script(10, 11, 12)
    seen = []
    for event in kernel.iterate(counting(events), script, events):
        seen.append((event, len(script.requests)))
    assert seen == [(10, 1), (11, 2), (12, 3)]  # each before the next request was performed


def test_closing_an_iteration_early_performs_the_clean_up() -> None:
    events: deque[int] = deque()
    script = Script(10, 11, "killed")
    iterator = kernel.iterate(counting(events), script, events)
    assert next(iterator) == 10
    iterator.close()
    assert script.requests == ["poll 0", "kill"]  # poll 1 was never performed


async def test_closing_an_async_iteration_early_performs_the_clean_up_shielded() -> None:
    events: deque[int] = deque()
    script = Script(10, "killed")
    iterator = kernel.aiterate(counting(events), script.acall, events)
    with anyio.CancelScope() as scope:
        assert await iterator.__anext__() == 10
        scope.cancel()
        await iterator.aclose()  # in a cancelled scope: the kill still runs
    assert script.requests == ["poll 0", "kill"]


async def test_a_cancelled_async_iteration_cleans_up_shielded() -> None:
    events: deque[int] = deque()

    async def perform(request: str) -> Any:
        performed.append(request)
        if request == "poll 1":
            await anyio.sleep(10)
        await anyio.sleep(0)
        return 1

    performed: list[str] = []
    with anyio.move_on_after(0.1):
        async for _ in kernel.aiterate(counting(events), perform, events):
            pass
    assert performed == ["poll 0", "poll 1", "kill"]
