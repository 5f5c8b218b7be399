"""The provider lifecycle flows, h11-style: scripted replies, the requests
asserted, no subprocess and no sleep. Then the performers, on an in-memory
provider: the same flows run with the sync and the async primitives."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from sandbox_sdk import _kernel as kernel
from sandbox_sdk import errors
from sandbox_sdk._provider_flows import (
    Create,
    Delete,
    Get,
    LifecycleFlows,
    List,
    Listing,
    Lock,
    Probe,
    Request,
    Sleep,
    Unlock,
)
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse, SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider, labels_match
from tests.test_kernel import Script

OK = ExecuteResponse(output="", exit_code=0)
DEAD = ExecuteResponse(output="", exit_code=1)
NO_EXIT = ExecuteResponse(output="", exit_code=None)
LABELS = {"thread": "t1"}
HELD = contextlib.nullcontext()


class StubSandbox(BaseSandbox):
    """A sandbox that answers the probe with ``exit_code`` (0 when alive)."""

    def __init__(self, sandbox_id: str, exit_code: int = 0) -> None:
        self._id = sandbox_id
        self.exit_code = exit_code

    @property
    def id(self) -> str:
        return self._id

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return ExecuteResponse(output="", exit_code=self.exit_code)


NEW = StubSandbox("sb-new")
OLD = StubSandbox("sb-old")


class Flows(LifecycleFlows[StubSandbox]):
    """The flows alone: each test runs one with ``kernel.run`` and its own script."""

    def _perform(self, request: Request) -> Any:
        raise AssertionError(f"{request} performed outside a script")

    async def _aperform(self, request: Request) -> Any:
        raise AssertionError(f"{request} performed outside a script")


flows = Flows()


class LaggingFlows(Flows):
    """Flows of a provider whose listing shows a new sandbox up to a second late."""

    _listing_lag = 1.0


lagging = LaggingFlows()


def info(sandbox_id: str, labels: Mapping[str, str], created_at: datetime | None = None) -> SandboxInfo:
    created = created_at or datetime.now(UTC)
    return SandboxInfo(id=sandbox_id, labels=dict(labels), created_at=created, status="ready")


def page(*items: SandboxInfo, next_cursor: str | None = None) -> SandboxPage:
    return SandboxPage(items=list(items), next_cursor=next_cursor)


# -- is_alive ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "alive"),
    [
        (OK, True),
        (DEAD, False),
        (ExecuteResponse(output="", exit_code=None), False),
        (OSError("gone"), False),
    ],
)
def test_is_alive_is_a_zero_exit_of_the_probe(reply: Any, alive: bool) -> None:
    script = Script(reply)
    assert kernel.run(flows._op_is_alive(NEW), script) is alive
    assert script.requests == [Probe(NEW)]


# -- create -------------------------------------------------------------------------------


def test_create_makes_a_sandbox_and_probes_it() -> None:
    script = Script(NEW, OK)
    assert kernel.run(flows._op_create(labels=LABELS, ttl=5), script) is NEW
    assert script.requests == [Create(LABELS, {"ttl": 5}), Probe(NEW)]


def test_create_without_labels_asks_for_none() -> None:
    script = Script(NEW, OK)
    kernel.run(flows._op_create(), script)
    assert script.requests[0] == Create({}, {})


@pytest.mark.parametrize("probe_reply", [DEAD, TimeoutError("no answer")])
def test_a_sandbox_failing_its_health_check_is_deleted_before_the_error(probe_reply: Any) -> None:
    script = Script(NEW, probe_reply, None)
    with pytest.raises(errors.SandboxRuntimeError, match="sb-new failed its health check"):
        kernel.run(flows._op_create(), script)
    assert script.requests == [Create({}, {}), Probe(NEW), Delete("sb-new")]


def test_a_failed_delete_does_not_hide_the_health_check_failure() -> None:
    script = Script(NEW, DEAD, OSError("delete failed"))
    with pytest.raises(errors.SandboxRuntimeError, match="health check"):
        kernel.run(flows._op_create(), script)
    assert script.requests[-1] == Delete("sb-new")


def test_ctrl_c_during_the_health_check_still_deletes() -> None:
    script = Script(NEW, KeyboardInterrupt(), None)
    with pytest.raises(KeyboardInterrupt):
        kernel.run(flows._op_create(), script)
    assert script.requests == [Create({}, {}), Probe(NEW), Delete("sb-new")]


def test_a_failed_create_has_nothing_to_delete() -> None:
    script = Script(errors.InvalidArgumentError("bad option"))
    with pytest.raises(errors.InvalidArgumentError):
        kernel.run(flows._op_create(**dict[str, Any](colour="blue")), script)  # past mypy, as a mapping
    assert script.requests == [Create({}, {"colour": "blue"})]


async def test_cancellation_during_create_still_deletes_shielded() -> None:
    performed: list[Any] = []
    probing = anyio.Event()

    async def perform(request: Any) -> Any:
        performed.append(request)
        if isinstance(request, Probe):
            probing.set()
            await anyio.sleep_forever()
        await anyio.lowlevel.checkpoint()  # would raise if the delete were not shielded
        performed.append("done")
        return NEW

    async with anyio.create_task_group() as group:
        group.start_soon(kernel.arun, flows._op_create(), perform)
        await probing.wait()
        group.cancel_scope.cancel()
    assert performed == [Create({}, {}), "done", Probe(NEW), Delete("sb-new"), "done"]


# -- get_or_create -------------------------------------------------------------------------


def test_by_id_connects_and_probes() -> None:
    script = Script(OLD, OK)
    assert kernel.run(flows._op_get_or_create(sandbox_id="sb-old"), script) is OLD
    assert script.requests == [Get("sb-old"), Probe(OLD)]


def test_by_id_never_creates() -> None:
    dead = Script(OLD, DEAD)
    with pytest.raises(errors.SandboxNotFoundError, match="sb-old exists but is not running"):
        kernel.run(flows._op_get_or_create(sandbox_id="sb-old", labels=LABELS), dead)
    assert dead.requests == [Get("sb-old"), Probe(OLD)]
    missing = Script(errors.SandboxNotFoundError("no sb-x"))
    with pytest.raises(errors.SandboxNotFoundError, match="no sb-x"):
        kernel.run(flows._op_get_or_create(sandbox_id="sb-x"), missing)
    assert missing.requests == [Get("sb-x")]


def test_without_id_or_labels_creates_without_the_lock() -> None:
    script = Script(NEW, OK)
    assert kernel.run(flows._op_get_or_create(ttl=5), script) is NEW
    assert script.requests == [Create({}, {"ttl": 5}), Probe(NEW)]


def test_by_labels_reuses_a_live_exact_match_under_the_lock() -> None:
    script = Script(HELD, page(info("sb-old", LABELS)), OLD, OK, None)
    assert kernel.run(flows._op_get_or_create(labels=LABELS), script) is OLD
    assert script.requests == [Lock(LABELS), List(LABELS, None, 100), Get("sb-old"), Probe(OLD), Unlock(HELD)]


def test_by_labels_follows_cursors_skips_supersets_missing_and_dead_then_creates() -> None:
    script = Script(
        HELD,
        page(info("sb-super", {**LABELS, "extra": "1"}), info("sb-gone", LABELS), next_cursor="sb-gone"),
        errors.SandboxNotFoundError("deleted meanwhile"),
        page(info("sb-old", LABELS)),
        OLD,
        DEAD,
        NEW,
        OK,
        None,
    )
    assert kernel.run(flows._op_get_or_create(labels=LABELS, ttl=5), script) is NEW
    assert script.requests == [
        Lock(LABELS),
        List(LABELS, None, 100),
        Get("sb-gone"),
        List(LABELS, "sb-gone", 100),
        Get("sb-old"),
        Probe(OLD),
        Create(LABELS, {"ttl": 5}),
        Probe(NEW),
        Unlock(HELD),
    ]


def test_by_labels_releases_the_lock_when_creation_fails() -> None:
    script = Script(HELD, page(), NEW, DEAD, None, None)
    with pytest.raises(errors.SandboxRuntimeError, match="health check"):
        kernel.run(flows._op_get_or_create(labels=LABELS), script)
    assert script.requests == [
        Lock(LABELS),
        List(LABELS, None, 100),
        Create(LABELS, {}),
        Probe(NEW),
        Delete("sb-new"),
        Unlock(HELD),
    ]


EARLY, LATE = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)


def test_a_lagging_listing_waits_for_the_new_sandbox_and_keeps_it_when_oldest() -> None:
    script = Script(HELD, page(), NEW, OK, page(), None, page(info("sb-new", LABELS, EARLY)), None)
    assert kernel.run(lagging._op_get_or_create(labels=LABELS), script) is NEW
    assert script.requests == [
        Lock(LABELS),
        List(LABELS, None, 100),
        Create(LABELS, {}),
        Probe(NEW),
        List(LABELS, None, 100),
        Sleep(0.25),
        List(LABELS, None, 100),
        Unlock(HELD),
    ]


def test_a_concurrent_older_sandbox_wins_and_the_new_one_is_deleted() -> None:
    both = page(
        info("sb-new", LABELS, LATE), info("sb-old", LABELS, EARLY), info("sb-super", {**LABELS, "x": "1"})
    )
    script = Script(HELD, page(), NEW, OK, both, OLD, OK, None, None)
    assert kernel.run(lagging._op_get_or_create(labels=LABELS), script) is OLD
    assert script.requests[4:] == [
        List(LABELS, None, 100),
        Get("sb-old"),
        Probe(OLD),
        Delete("sb-new"),
        Unlock(HELD),
    ]


def test_convergence_keeps_the_new_sandbox_if_the_older_one_is_gone() -> None:
    both = page(info("sb-old", LABELS, EARLY), info("sb-new", LABELS, LATE))
    script = Script(HELD, page(), NEW, OK, both, errors.SandboxNotFoundError("deleted"), None)
    assert kernel.run(lagging._op_get_or_create(labels=LABELS), script) is NEW
    assert script.requests[-2:] == [Get("sb-old"), Unlock(HELD)]


def test_convergence_gives_up_waiting_after_the_lag() -> None:
    script = Script(
        HELD, page(), NEW, OK, *[reply for _ in range(4) for reply in (page(), None)], page(), None
    )
    assert kernel.run(lagging._op_get_or_create(labels=LABELS), script) is NEW
    assert script.requests.count(Sleep(0.25)) == 4  # a second of lag, then the new sandbox is kept


def test_a_lock_that_cannot_be_taken_is_not_released() -> None:
    script = Script(OSError("no lock directory"))
    with pytest.raises(OSError, match="no lock directory"):
        kernel.run(flows._op_get_or_create(labels=LABELS), script)
    assert script.requests == [Lock(LABELS)]


async def test_cancellation_under_the_lock_releases_it_shielded() -> None:
    performed: list[Any] = []
    listing = anyio.Event()

    async def perform(request: Any) -> Any:
        performed.append(request)
        if isinstance(request, List):
            listing.set()
            await anyio.sleep_forever()
        await anyio.lowlevel.checkpoint()  # would raise if the release were not shielded
        performed.append("done")
        return HELD

    async with anyio.create_task_group() as group:
        group.start_soon(kernel.arun, flows._op_get_or_create(labels=LABELS), perform)
        await listing.wait()
        group.cancel_scope.cancel()
    assert performed == [Lock(LABELS), "done", List(LABELS, None, 100), Unlock(HELD), "done"]


def test_a_listing_asks_for_one_page_per_flow() -> None:
    listing = Listing(LABELS, 2)
    first = Script(page(info("a", LABELS), next_cursor="a"))
    assert [item.id for item in kernel.run(listing.next_page(), first)] == ["a"]
    assert (first.requests, listing.done) == ([List(LABELS, None, 2)], False)
    last = Script(page())
    assert kernel.run(listing.next_page(), last) == []
    assert (last.requests, listing.done) == ([List(LABELS, "a", 2)], True)


# -- the performers, on an in-memory provider ---------------------------------------------------


class MemoryProvider(SandboxProvider[StubSandbox]):
    """Sandboxes in a dict; records the ``list`` calls and the threads that
    take the label lock and run the (native) async listing."""

    def __init__(self) -> None:
        self.sandboxes: dict[str, tuple[StubSandbox, dict[str, str]]] = {}
        self.list_calls: list[str | None] = []
        self.threads: dict[str, int] = {}

    def _create(self, *, labels: dict[str, str], **options: Any) -> StubSandbox:
        sandbox = StubSandbox(f"sb-{len(self.sandboxes):04d}", options.get("exit_code", 0))
        self.sandboxes[sandbox.id] = (sandbox, labels)
        return sandbox

    def _get(self, sandbox_id: str) -> StubSandbox:
        if sandbox_id not in self.sandboxes:
            raise errors.SandboxNotFoundError(sandbox_id)
        return self.sandboxes[sandbox_id][0]

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        self.list_calls.append(cursor)
        ids = [key for key, (_, have) in sorted(self.sandboxes.items()) if labels_match(have, labels)]
        start = 0 if cursor is None else ids.index(cursor) + 1
        chosen = ids[start : start + limit]
        more = start + limit < len(ids)
        return page(
            *(info(key, self.sandboxes[key][1]) for key in chosen), next_cursor=chosen[-1] if more else None
        )

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        self.threads["alist"] = threading.get_ident()
        return self.list(labels=labels, cursor=cursor, limit=limit)

    def _delete(self, sandbox_id: str) -> None:
        self.sandboxes.pop(sandbox_id, None)

    @contextlib.contextmanager
    def _label_lock(self, labels: Mapping[str, str]) -> Iterator[None]:
        self.threads["lock"] = threading.get_ident()
        yield


def test_sync_performer_runs_the_flows_with_the_primitives() -> None:
    provider = MemoryProvider()
    first = provider.get_or_create(labels=LABELS)
    assert provider.get_or_create(labels=LABELS) is first
    assert provider.get_or_create(sandbox_id=first.id) is first
    with pytest.raises(errors.SandboxRuntimeError):
        provider.create(**dict[str, Any](exit_code=1))  # the fake provider's own option, as a mapping
    assert list(provider.sandboxes) == [first.id]
    assert provider.is_alive(first)


async def test_async_performer_runs_the_same_flows_on_the_event_loop() -> None:
    provider = MemoryProvider()
    first = await provider.aget_or_create(labels=LABELS)
    assert await provider.aget_or_create(labels=LABELS) is first
    with pytest.raises(errors.SandboxRuntimeError):
        await provider.acreate(**dict[str, Any](exit_code=1))
    assert list(provider.sandboxes) == [first.id]
    assert await provider.ais_alive(first)
    # the (possibly blocking) label lock in a worker thread, the flow itself on the loop
    assert provider.threads["alist"] == threading.get_ident()
    assert provider.threads["lock"] != threading.get_ident()


async def test_iterators_fetch_a_page_when_they_reach_it() -> None:
    provider = MemoryProvider()
    for _ in range(5):
        provider.create(labels=LABELS)
    pages = provider.iter_sandboxes(labels=LABELS, page_size=2)
    assert provider.list_calls == []
    assert next(pages).id == "sb-0000"
    assert provider.list_calls == [None]
    assert [item.id for item in pages] == ["sb-0001", "sb-0002", "sb-0003", "sb-0004"]
    assert provider.list_calls == [None, "sb-0001", "sb-0003"]
    provider.list_calls.clear()
    apages = provider.aiter_sandboxes(labels=LABELS, page_size=2)
    assert (await anext(apages)).id == "sb-0000"
    assert provider.list_calls == [None]
    assert [item.id async for item in apages] == ["sb-0001", "sb-0002", "sb-0003", "sb-0004"]
    assert provider.list_calls == [None, "sb-0001", "sb-0003"]


@pytest.mark.parametrize("labels", [["a"], "a", {"n": 1}, {1: "n"}])
async def test_labels_that_are_not_str_to_str_are_refused_before_anything_is_made(labels: Any) -> None:
    provider = MemoryProvider()
    for call in (
        lambda: provider.create(labels=labels),
        lambda: provider.get_or_create(labels=labels),
        lambda: next(provider.iter_sandboxes(labels=labels)),
    ):
        with pytest.raises(errors.InvalidArgumentError, match="labels must"):
            call()
    with pytest.raises(errors.InvalidArgumentError, match="labels must"):
        await provider.acreate(labels=labels)
    with pytest.raises(errors.InvalidArgumentError, match="labels must"):
        await provider.aget_or_create(labels=labels)
    assert provider.sandboxes == {}
    assert provider.list_calls == []


def test_a_page_iterates_over_its_sandboxes_and_counts_them() -> None:
    provider = MemoryProvider()
    made = [provider.create(labels=LABELS).id for _ in range(3)]
    listed = provider.list(labels=LABELS, limit=2)
    assert [info.id for info in listed] == made[:2]  # not pydantic's (field, value) pairs
    assert len(listed) == 2
    assert all(isinstance(info, SandboxInfo) for info in listed)
    assert len(provider.list(labels={"nobody": "here"})) == 0
