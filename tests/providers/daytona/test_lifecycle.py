"""What the real service does to a sandbox and its handles (issue 12), through the real
SDK and the fake server: states and auto-stop, lifetimes, racing creates, paging,
timeouts that are not ours, request counts, and closing the clients."""

from __future__ import annotations

import asyncio
import gc
import logging
import shutil
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.daytona import DaytonaProvider, DaytonaSandbox
from tests.providers.daytona.conftest import make_provider
from tests.providers.daytona.fake_server import FakeDaytonaServer, FakeSandbox, running_fake_daytona


@pytest.fixture
def server() -> Iterator[FakeDaytonaServer]:
    """A fake of the test's own, whose clock and lags the test sets."""
    with running_fake_daytona() as fresh:
        yield fresh


def traffic(server: FakeDaytonaServer, since: int = 0) -> list[tuple[str, str]]:
    """Requests after the first ``since``, less the SDK's attempts at its event gateway
    (Socket.IO, absent from the fake: the SDK falls back to polling)."""
    return [(method, path) for method, path in server.requests[since:] if "/socket.io" not in path]


def executes(server: FakeDaytonaServer) -> int:
    return sum(path.endswith("/process/execute") for _, path in server.requests)


def starts(server: FakeDaytonaServer) -> int:
    return sum(path.endswith("/start") for _, path in server.requests)


# -- states -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "then"),
    [
        ("stopping", "stopped"),
        ("archiving", "archived"),
        ("pausing", "paused"),
        ("starting", "started"),
        ("resuming", "started"),
        ("paused", None),
        ("archived", None),
    ],
)
def test_get_waits_through_transitions_and_starts_what_is_stopped(
    server: FakeDaytonaServer, state: str, then: str | None
) -> None:
    provider = make_provider(server)
    sandbox = provider.create()
    server.transition_seconds = 0.3
    server.set_state(sandbox.id, state, then=then, after=0.5)
    again = provider.get(sandbox.id)
    assert server.sandboxes[sandbox.id].state == "started"
    assert again.execute("echo up").output == "up\n"
    assert starts(server) == (0 if then == "started" else 1)


async def test_aget_waits_through_a_pause_and_resumes(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    async with provider:
        sandbox = await provider.acreate()
        server.transition_seconds = 0.3
        server.set_state(sandbox.id, "pausing", then="paused", after=0.3)
        again = await provider.aget(sandbox.id)
        assert (await again.aexecute("echo up")).output == "up\n"
        assert starts(server) == 1


def test_a_sandbox_that_does_not_settle_in_time_is_a_timeout(server: FakeDaytonaServer) -> None:
    provider = DaytonaProvider(api_key=server.api_key, api_url=server.api_url, start_timeout=1)
    sandbox = provider.create()
    server.set_state(sandbox.id, "archiving", then="archived", after=30)
    with pytest.raises(errors.SandboxTimeoutError, match="still archiving"):
        provider.get(sandbox.id)


@pytest.mark.parametrize("option", [{"start_timeout": 0}, {"listing_lag": -1}, {"listing_lag": "10s"}])
def test_bad_provider_timings_are_invalid_arguments(
    server: FakeDaytonaServer, option: dict[str, Any]
) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=next(iter(option))):
        DaytonaProvider(api_key=server.api_key, api_url=server.api_url, **option)


def test_a_sandbox_in_error_is_refused(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    sandbox = provider.create()
    server.set_state(sandbox.id, "error")
    with pytest.raises(errors.SandboxNotFoundError, match="state error"):
        provider.get(sandbox.id)


def test_a_handle_recovers_once_from_an_auto_stop(server: FakeDaytonaServer) -> None:
    """Daytona stops a sandbox after ``auto_stop_interval`` idle minutes (fake minutes
    here); the next command is refused with "not running", which proves it never ran."""
    provider = make_provider(server)
    sandbox = provider.create(idle_timeout=60)
    server.minute_seconds = 0.2
    time.sleep(0.5)
    before = executes(server)
    response = sandbox.run("echo $((1+1)) >> runs.txt; cat runs.txt")
    assert (response.output, response.exit_code) == ("2\n", 0)  # ran exactly once
    assert server.sandboxes[sandbox.id].state == "started"
    assert (executes(server) - before, starts(server)) == (2, 1)


async def test_an_async_handle_recovers_once_from_an_auto_stop(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    async with provider:
        sandbox = await provider.acreate(idle_timeout=60)
        server.minute_seconds = 0.2
        await asyncio.sleep(0.5)
        assert (await sandbox.aexecute("echo back")).output == "back\n"
        assert starts(server) == 1


def test_a_handle_retries_once_after_the_proxy_woke_its_sandbox(server: FakeDaytonaServer) -> None:
    """In front of VM runners the proxy starts a stopped sandbox itself and answers 503
    "Sandbox is starting" without forwarding the request: resent once, it runs once."""
    provider = make_provider(server)
    sandbox = provider.create()
    server.wake_on_request = True
    server.set_state(sandbox.id, "stopped")
    before = executes(server)
    assert sandbox.execute("echo x >> once.txt; cat once.txt").output == "x\n"
    assert (executes(server) - before, starts(server)) == (2, 0)


def test_a_plain_503_is_not_retried(server: FakeDaytonaServer) -> None:
    sandbox = make_provider(server).create()
    server.fail_next(503, path_contains="/process/execute")
    with pytest.raises(errors.ProviderUnavailableError):
        sandbox.execute("true")
    assert executes(server) == 2  # the health check's, and this one


@pytest.mark.parametrize("status", [400, 500, 502, 504])
def test_a_command_that_may_have_run_is_never_retried(server: FakeDaytonaServer, status: int) -> None:
    """A 400 from a running sandbox is a real refusal; 5xx may come after the command ran."""
    sandbox = make_provider(server).create()
    before = executes(server)
    server.fail_next(status, path_contains="/process/execute")
    with pytest.raises(errors.SandboxError):
        sandbox.execute("true")
    assert executes(server) - before == 1
    assert starts(server) == 0


def test_a_deleted_sandbox_is_not_found_from_its_handle(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    sandbox = provider.create()
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")
    with pytest.raises(errors.SandboxNotFoundError, match="deleted"):
        provider.get(sandbox.id)


# -- lifetimes --------------------------------------------------------------------------------


def test_lifetime_in_seconds_becomes_daytona_minutes(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    default = server.sandboxes[provider.create().id]
    assert (default.auto_stop_interval, default.ttl_minutes) == (60, None)  # an hour, not 15 minutes
    rounded = server.sandboxes[provider.create(ttl=90, idle_timeout=1).id]
    assert (rounded.auto_stop_interval, rounded.ttl_minutes) == (1, 2)  # up, never 0 ("never")
    native = server.sandboxes[provider.create(auto_stop_interval=5, ttl_minutes=30).id]
    assert (native.auto_stop_interval, native.ttl_minutes) == (5, 30)
    paused = server.sandboxes[provider.create(auto_pause_interval=20).id]
    assert paused.auto_stop_interval is None  # Daytona refuses auto-stop with auto-pause


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl": 60, "ttl_minutes": 1}, "ttl .* or ttl_minutes"),
        ({"idle_timeout": 60, "auto_stop_interval": 1}, "idle_timeout .* or auto_stop_interval"),
        ({"idle_timeout": 60, "auto_pause_interval": 1}, "auto_pause_interval"),
        ({"idle_timeout": 0}, "idle_timeout must be a positive number"),
        ({"ttl": "1h"}, "ttl must be a positive number"),
    ],
)
def test_bad_lifetimes_are_refused_before_anything_is_created(
    server: FakeDaytonaServer, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=message):
        make_provider(server).create(**options)
    assert server.sandboxes == {}


def test_an_expired_sandbox_is_not_found_and_a_dead_one_is_not_reused_silently(
    server: FakeDaytonaServer, caplog: pytest.LogCaptureFixture
) -> None:
    provider = make_provider(server)
    labels = {"job": "expiring"}
    expired = provider.create(labels=labels, ttl=60)
    broken = provider.create(labels=labels)
    server.minute_seconds = 0.2
    time.sleep(0.3)
    server.set_state(broken.id, "error")
    with pytest.raises(errors.SandboxNotFoundError, match="deleted"):
        provider.get(expired.id)
    with caplog.at_level(logging.WARNING, logger="sandbox_sdk"):
        fresh = provider.get_or_create(labels=labels)
    assert fresh.id not in (expired.id, broken.id)
    assert f"sandbox {broken.id} carrying {labels} is gone or not running" in caplog.text


# -- races and listing ----------------------------------------------------------------------------


def test_concurrent_get_or_create_converges_on_one_sandbox(server: FakeDaytonaServer) -> None:
    """Daytona's listing lags and its label lock is a no-op: two clients both create, then
    both keep the older sandbox and the newer one is deleted."""
    server.listing_lag = 1.0
    labels = {"thread": "race"}
    barrier = threading.Barrier(2)
    got: list[DaytonaSandbox] = []

    def client() -> None:
        provider = make_provider(server)
        barrier.wait()
        got.append(provider.get_or_create(labels=labels))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(got) == 2
    assert got[0].id == got[1].id
    assert [s.id for s in server.sandboxes.values() if labels.items() <= s.labels.items()] == [got[0].id]
    assert sum(method == "POST" and path == "/api/sandbox" for method, path in server.requests) == 2
    assert got[1].execute("echo kept").output == "kept\n"


def _add_listed(server: FakeDaytonaServer, tmp_path: Path, count: int, labels: dict[str, str]) -> set[str]:
    """Sandboxes straight into the fake's records (no create requests: only the listing is
    tested), made long enough ago that the listing shows them."""
    for index in range(count):
        sandbox_id = f"many-{index:04d}"
        server.sandboxes[sandbox_id] = FakeSandbox(
            sandbox_id,
            sandbox_id,
            tmp_path,
            dict(labels),
            {},
            "daytona",
            False,
            None,
            None,
            None,
            born=time.monotonic() - server.listing_lag - 1,
        )
    return {f"many-{index:04d}" for index in range(count)}


def test_list_pages_past_daytonas_200_per_request(server: FakeDaytonaServer, tmp_path: Path) -> None:
    labels = {"batch": "large"}
    ids = _add_listed(server, tmp_path, 250, labels)
    provider = make_provider(server)
    before = len(server.requests)
    first = provider.list(labels=labels, limit=201)
    assert len(first.items) == 201
    assert traffic(server, before) == [("GET", "/api/sandbox")] * 2
    rest = provider.list(labels=labels, cursor=first.next_cursor, limit=500)
    assert rest.next_cursor is None
    assert {i.id for i in first.items + rest.items} == ids
    assert {i.id for i in provider.iter_sandboxes(labels=labels, page_size=300)} == ids


async def test_alist_pages_past_daytonas_200_per_request(server: FakeDaytonaServer, tmp_path: Path) -> None:
    ids = _add_listed(server, tmp_path, 210, {"batch": "async"})
    async with make_provider(server) as provider:
        assert {
            i.id async for i in provider.aiter_sandboxes(labels={"batch": "async"}, page_size=1000)
        } == ids


@pytest.mark.parametrize("limit", [0, -1, "10", 2.5, True])
def test_bad_list_limits_are_invalid_arguments(server: FakeDaytonaServer, limit: object) -> None:
    provider = make_provider(server)
    with pytest.raises(errors.InvalidArgumentError, match="limit"):
        provider.list(limit=limit)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError, match="limit"):
        next(provider.iter_sandboxes(page_size=limit))  # type: ignore[arg-type]


# -- timeouts that are not the command's ------------------------------------------------------------


def test_a_gateway_timeout_is_raised_not_reported_as_exit_124(
    server: FakeDaytonaServer, tmp_path: Path
) -> None:
    sandbox = make_provider(server).create()
    marker = tmp_path / "ran"
    server.fail_next(504, path_contains="/process/execute")
    with pytest.raises(errors.ProviderUnavailableError):
        sandbox.execute(f"touch {marker}")
    assert not marker.exists()


async def test_an_async_gateway_timeout_is_raised_not_reported_as_exit_124(
    server: FakeDaytonaServer, tmp_path: Path
) -> None:
    async with make_provider(server) as provider:
        sandbox = await provider.acreate()
        server.fail_next(504, path_contains="/process/execute")
        with pytest.raises(errors.ProviderUnavailableError):
            await sandbox.aexecute(f"touch {tmp_path / 'ran'}")
    assert not (tmp_path / "ran").exists()


@pytest.mark.slow
def test_a_request_that_gets_no_answer_is_unavailable_on_both_paths(server: FakeDaytonaServer) -> None:
    """The SDK gives up 5 s after the command's timeout (``process.exec``: ``timeout + 5``)
    and raises DaytonaConnectionTimeoutError: the command may never have started."""
    provider = make_provider(server)
    sandbox = provider.create()
    server.fail_next(504, path_contains="/process/execute", times=2, stall=8)
    with pytest.raises(errors.ProviderUnavailableError):
        sandbox.execute("true", timeout=1)

    async def attempt() -> None:
        async with provider:
            with pytest.raises(errors.ProviderUnavailableError):
                await sandbox.aexecute("true", timeout=1)

    asyncio.run(attempt())


def test_our_own_timeout_is_still_exit_124(server: FakeDaytonaServer) -> None:
    response = make_provider(server).create().execute("sleep 30", timeout=1)
    assert (response.exit_code, response.timed_out) == (124, True)


# -- cost and clean-up ----------------------------------------------------------------------------------


def test_one_request_per_execute(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    sandbox = provider.get(provider.create().id)
    sandbox.execute("true")
    before = len(server.requests)
    for _ in range(3):
        sandbox.execute("true")
    assert len(traffic(server, before)) == 3

    async def three() -> None:
        async with provider:
            await sandbox.aexecute("true")
            start = len(server.requests)
            for _ in range(3):
                await sandbox.aexecute("true")
            assert len(traffic(server, start)) == 3

    asyncio.run(three())


def test_no_client_session_is_left_unclosed(server: FakeDaytonaServer) -> None:
    """Each loop's AsyncDaytona is closed when ``asyncio.run`` ends its loop, without
    an ``aclose``; dropping the provider afterwards leaves no open aiohttp session."""
    provider = make_provider(server)

    async def use(provider: DaytonaProvider) -> str:
        sandbox = await provider.acreate()
        await sandbox.aexecute("true")
        return sandbox.id

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = [asyncio.run(use(provider)) for _ in range(2)]

        async def with_block() -> None:
            async with make_provider(server) as scoped:
                await (await scoped.aget(ids[0])).aexecute("true")

        asyncio.run(with_block())
        provider.close()
        del provider
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []


async def test_a_handle_outlives_the_providers_aclose(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    sandbox = await provider.acreate()
    await provider.aclose()  # closes this loop's client; the handle gets a new one
    assert (await sandbox.aexecute("echo again")).output == "again\n"
    await provider.aclose()


def test_close_closes_a_client_of_a_loop_running_in_another_thread(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        sandbox = asyncio.run_coroutine_threadsafe(provider.acreate(), loop).result(60)
        asyncio.run_coroutine_threadsafe(sandbox.aexecute("true"), loop).result(60)
        assert server.open_connections() > 0  # the loop's client keeps its connections
        provider.close()  # waits for the loop's thread to close its client
        deadline = time.monotonic() + 10
        while server.open_connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.open_connections() == 0
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_close_closes_a_client_of_an_idle_loop(server: FakeDaytonaServer) -> None:
    provider = make_provider(server)
    loop = asyncio.new_event_loop()
    try:
        sandbox = loop.run_until_complete(provider.acreate())
        loop.run_until_complete(sandbox.aexecute("true"))
        assert server.open_connections() > 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            provider.close()
            del provider, sandbox
            gc.collect()
        assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    finally:
        loop.close()
    shutil.rmtree(server.root, ignore_errors=True)
