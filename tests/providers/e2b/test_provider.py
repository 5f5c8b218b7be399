"""``E2BProvider``: lifecycle, labels, pagination and error mapping, sync and
async, through the real SDK and the fake service."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import logging
import secrets
import socket
import time
import warnings
from typing import Any

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from sandbox_sdk import errors, get_provider
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.providers.e2b import E2BProvider, E2BSandbox
from sandbox_sdk.testing import ProviderConformanceTests
from sandbox_sdk.testing.provider_suite import RACERS
from tests.providers.e2b.conftest import API_KEY, make_provider
from tests.providers.e2b.fake_server import FakeE2BServer


class TestE2BProviderContract(ProviderConformanceTests):
    """Uses the ``provider`` fixture of conftest.py; the race's clients are
    providers of their own, each with its own connections."""

    @pytest.fixture
    def racing_providers(self, fake_e2b: FakeE2BServer) -> list[SandboxProvider[Any]]:
        return [make_provider(fake_e2b) for _ in range(RACERS)]


def unique_labels(**extra: str) -> dict[str, str]:
    return {"run": secrets.token_hex(4), **extra}


def test_missing_credentials_fail_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(errors.AuthenticationError, match="E2B_API_KEY"):
        E2BProvider()
    monkeypatch.setenv("E2B_API_KEY", "e2b_from_env")
    assert isinstance(E2BProvider(), E2BProvider)


@pytest.mark.parametrize(
    "options",
    [{"max_lifetime": 0}, {"max_lifetime": 86_401}, {"max_lifetime": 3600.0}, {"command_timeout": -1}],
)
def test_bad_provider_options(options: dict[str, Any]) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        E2BProvider(api_key=API_KEY, **options)


def test_rejected_credentials(fake_e2b: FakeE2BServer) -> None:
    provider = E2BProvider(api_key="e2b_wrong", api_url=fake_e2b.url, sandbox_url=fake_e2b.url)
    with pytest.raises(errors.AuthenticationError):
        provider.create()
    with pytest.raises(errors.AuthenticationError):
        provider.list()


def test_registered_under_entry_point(fake_e2b: FakeE2BServer) -> None:
    provider = get_provider("e2b", api_key=API_KEY, api_url=fake_e2b.url, sandbox_url=fake_e2b.url)
    assert isinstance(provider, E2BProvider)


def e2b_timeout(fake: FakeE2BServer, sandbox: E2BSandbox) -> float:
    """The sandbox's deadline on the fake, in seconds from now."""
    return (fake.sandbox(sandbox.id).end_at - dt.datetime.now(dt.UTC)).total_seconds()


@pytest.mark.usefixtures("calm_listing")
def test_create_passes_labels_and_idle_timeout(fake_e2b: FakeE2BServer, provider: E2BProvider) -> None:
    """E2B's timeout is the idle timeout plus one keep-alive interval (a tenth of it)."""
    labels = unique_labels(team="core")
    sandbox = provider.create(labels=labels, idle_timeout=1000, template="base")
    try:
        stored = fake_e2b.sandbox(sandbox.id)
        assert stored.template_id == "base"
        assert abs((stored.end_at - stored.started_at).total_seconds() - 1100) < 2
        assert [info.labels for info in provider.list(labels=labels).items] == [labels]
        assert sandbox.lifetime is not None and sandbox.lifetime.idle_timeout == 1000
    finally:
        provider.delete(sandbox_id=sandbox.id)


def test_default_idle_timeout_is_an_hour(fake_e2b: FakeE2BServer, provider: E2BProvider) -> None:
    sandbox = provider.create()
    try:
        stored = fake_e2b.sandbox(sandbox.id)
        assert abs((stored.end_at - stored.started_at).total_seconds() - 3960) < 2
    finally:
        provider.delete(sandbox_id=sandbox.id)


def test_a_hobby_maximum_fits_the_default_and_refuses_more(fake_e2b: FakeE2BServer) -> None:
    hobby = make_provider(fake_e2b, max_lifetime=3600)
    sandbox = hobby.create()
    try:
        assert e2b_timeout(fake_e2b, sandbox) <= 3600
    finally:
        hobby.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.InvalidArgumentError, match="maximum of 3600"):
        hobby.create(idle_timeout=7200)
    with pytest.raises(errors.InvalidArgumentError, match="maximum of 3600"):
        hobby.create(ttl=3601)


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": 600},
        {"ttl": 86_401},
        {"idle_timeout": 86_401},
        {"ttl": 0.5},
        {"idle_timeout": -1},
        {"cpu": 4},
        {"metadata": {}},
    ],
)
def test_bad_create_options_fail_before_any_request(
    fake_e2b: FakeE2BServer, provider: E2BProvider, options: dict[str, Any]
) -> None:
    before = len(fake_e2b.requests)
    with pytest.raises(errors.InvalidArgumentError):
        provider.create(**options)
    assert len(fake_e2b.requests) == before


def test_reserved_label_keys_are_refused(provider: E2BProvider) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="reserved"):
        provider.create(labels={"sandbox_sdk.idle_timeout": "1"})


def test_sandbox_expires_at_its_ttl_however_used(fake_e2b: FakeE2BServer, provider: E2BProvider) -> None:
    """ttl caps the keep-alive: a sandbox used all the time still goes at creation + ttl."""
    labels = unique_labels()
    sandbox = provider.create(labels=labels, ttl=3, idle_timeout=1)
    started = fake_e2b.sandbox(sandbox.id).started_at
    deadline = time.monotonic() + 20
    with pytest.raises(errors.SandboxNotFoundError):
        while time.monotonic() < deadline:
            sandbox.execute("true")
            stored = fake_e2b.sandboxes.get(sandbox.id)  # gone once the fake's timer fired
            assert stored is None or stored.end_at <= started + dt.timedelta(seconds=3)
            time.sleep(0.2)
    assert dt.datetime.now(dt.UTC) >= started + dt.timedelta(seconds=2)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)
    assert provider.list(labels=labels).items == []


def test_use_keeps_a_sandbox_alive_past_its_idle_timeout(
    fake_e2b: FakeE2BServer, provider: E2BProvider
) -> None:
    """E2B's deadline does not move on use; the handle moves it. Unused, it goes."""
    sandbox = provider.create(idle_timeout=2)
    started = time.monotonic()
    while time.monotonic() - started < 5:
        assert sandbox.execute("echo alive").output == "alive\n"
        time.sleep(0.5)
    assert e2b_timeout(fake_e2b, sandbox) > 1
    deadline = time.monotonic() + 20
    while sandbox.id in fake_e2b.sandboxes and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sandbox.id not in fake_e2b.sandboxes, "the fake's timer kills an expired sandbox"
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")


@pytest.mark.parametrize("how", ["execute", "stream"])
def test_a_long_silent_command_keeps_its_sandbox_alive(
    fake_e2b: FakeE2BServer, provider: E2BProvider, how: str
) -> None:
    """E2B's deadline (2 s here) does not move on use, and a command silent for
    longer makes no request: the handle extends it while the command runs."""
    sandbox = provider.create(idle_timeout=1)
    try:
        command = "sleep 4; echo done"
        if how == "execute":
            result = sandbox.execute(command)
        else:
            result = sandbox.run(command, on_stdout=lambda _: None)
        assert (result.output, result.exit_code) == ("done\n", 0)
        assert ("POST", f"/sandboxes/{sandbox.id}/timeout") in fake_e2b.requests
    finally:
        provider.delete(sandbox_id=sandbox.id)


async def test_a_long_silent_async_command_keeps_its_sandbox_alive(
    fake_e2b: FakeE2BServer, provider: E2BProvider
) -> None:
    sandbox = await provider.acreate(idle_timeout=1)
    try:
        result = await sandbox.arun("sleep 4; echo done", on_stdout=lambda _: None)
        assert (result.output, result.exit_code) == ("done\n", 0)
        failed = await sandbox.aexecute("sleep 3; exit 3")  # a non-zero exit comes through as it is
        assert failed.exit_code == 3
    finally:
        await provider.adelete(sandbox_id=sandbox.id)


def test_keep_alive_is_one_request_per_interval(fake_e2b: FakeE2BServer, provider: E2BProvider) -> None:
    """An execute is one request (envd's Start); the keep-alive adds one set_timeout
    per interval (a tenth of the idle timeout), none within it."""
    sandbox = provider.create(idle_timeout=3600)
    try:
        for _ in range(3):
            before = len(fake_e2b.requests)
            sandbox.execute("true")
            assert fake_e2b.requests[before:] == [("POST", "/process.Process/Start")]
    finally:
        provider.delete(sandbox_id=sandbox.id)
    # a 2 s interval: both executes fit in it on a loaded machine too
    short = provider.create(idle_timeout=20)
    try:
        time.sleep(2.1)
        before = len(fake_e2b.requests)
        short.execute("true")
        short.execute("true")
        assert fake_e2b.requests[before:] == [
            ("POST", f"/sandboxes/{short.id}/timeout"),
            ("POST", "/process.Process/Start"),
            ("POST", "/process.Process/Start"),
        ]
    finally:
        provider.delete(sandbox_id=short.id)


async def test_async_operations_keep_alive_too(fake_e2b: FakeE2BServer, provider: E2BProvider) -> None:
    sandbox = await provider.acreate(idle_timeout=20)  # a 2 s interval, as above
    try:
        await asyncio.sleep(2.1)
        before = len(fake_e2b.requests)
        await sandbox.aexecute("true")
        await sandbox.aexecute("true")
        assert fake_e2b.requests[before:] == [
            ("POST", f"/sandboxes/{sandbox.id}/timeout"),
            ("POST", "/process.Process/Start"),
            ("POST", "/process.Process/Start"),
        ]
        assert e2b_timeout(fake_e2b, sandbox) > 20
    finally:
        await provider.adelete(sandbox_id=sandbox.id)


def test_get_reads_the_lifetime_and_extends_by_connecting(
    fake_e2b: FakeE2BServer, provider: E2BProvider
) -> None:
    sandbox = provider.create(idle_timeout=100, ttl=500)
    try:
        fake_e2b.sandbox(sandbox.id)  # alive
        again = provider.get(sandbox.id)
        assert again.lifetime == sandbox.lifetime
        assert 100 < e2b_timeout(fake_e2b, again) <= 110
    finally:
        provider.delete(sandbox_id=sandbox.id)


def test_handle_to_a_deleted_sandbox_raises_not_found(provider: E2BProvider) -> None:
    """Also when the first thing the handle does is the keep-alive's set_timeout."""
    sandbox = provider.create(idle_timeout=2)
    provider.delete(sandbox_id=sandbox.id)
    time.sleep(0.3)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")


def test_get_or_create_says_an_expired_sandbox_expired(
    provider: E2BProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """An expired sandbox is gone from E2B without a trace: the lookup finds nothing.
    get_or_create says it creates a new sandbox, and, when this provider handed out
    the expired one, warns that it expired and that the new one starts empty."""
    labels = unique_labels()
    first = provider.get_or_create(labels=labels, ttl=1)
    deadline = time.monotonic() + 20
    while provider.list(labels=labels).items and time.monotonic() < deadline:
        time.sleep(0.2)
    with caplog.at_level(logging.INFO, logger="sandbox_sdk"):
        second = provider.get_or_create(labels=labels)
    try:
        assert second.id != first.id
        messages = [record.getMessage() for record in caplog.records]
        assert any("creating a new sandbox" in message for message in messages)
        expired = [r for r in caplog.records if r.levelno == logging.WARNING and first.id in r.getMessage()]
        assert len(expired) == 1 and "starts empty" in expired[0].getMessage()
    finally:
        provider.delete(sandbox_id=second.id)


def test_no_expiry_warning_for_a_live_or_deleted_sandbox(
    provider: E2BProvider, caplog: pytest.LogCaptureFixture
) -> None:
    labels = unique_labels()
    with caplog.at_level(logging.INFO, logger="sandbox_sdk"):
        first = provider.create(labels=labels)
        second = provider.create(labels=labels)  # the first is alive
        provider.delete(sandbox_id=second.id)
        third = provider.get_or_create(labels=labels)
        assert third.id == first.id
        provider.delete(sandbox_id=first.id)
        fourth = provider.get_or_create(labels=labels)  # the third was deleted, not expired
        provider.delete(sandbox_id=fourth.id)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_get_by_id(provider: E2BProvider) -> None:
    sandbox = provider.create()
    try:
        sandbox.write("mark.txt", "same sandbox")
        again = provider.get(sandbox.id)
        assert isinstance(again, E2BSandbox)
        assert again.read("mark.txt").content == "same sandbox"
    finally:
        provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)


def test_list_filters_by_labels_and_follows_cursors(provider: E2BProvider) -> None:
    labels = unique_labels(role="worker")
    mine = [provider.create(labels=labels) for _ in range(5)]
    other = provider.create(labels={**labels, "role": "other"})
    try:
        pages = []
        cursor = None
        while True:
            page = provider.list(labels=labels, cursor=cursor, limit=2)
            pages.append([info.id for info in page.items])
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert pages == [[s.id for s in mine[i : i + 2]] for i in (0, 2, 4)]
        infos = list(provider.iter_sandboxes(labels=labels, page_size=3))
        assert [info.id for info in infos] == [s.id for s in mine]
        assert all(info.labels == labels and info.status == "running" for info in infos)
        assert all(isinstance(info.created_at, dt.datetime) for info in infos)
        assert other.id in {info.id for info in provider.iter_sandboxes(labels={"run": labels["run"]})}
    finally:
        for sandbox in [*mine, other]:
            provider.delete(sandbox_id=sandbox.id)


def test_list_refuses_bad_limit(provider: E2BProvider) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        provider.list(limit=0)


def test_get_or_create_by_labels_and_id(provider: E2BProvider) -> None:
    labels = unique_labels()
    first = provider.get_or_create(labels=labels)
    try:
        assert provider.get_or_create(labels=labels).id == first.id
        assert provider.get_or_create(sandbox_id=first.id).id == first.id
        provider.delete(sandbox_id=first.id)
        second = provider.get_or_create(labels=labels)
        assert second.id != first.id
        provider.delete(sandbox_id=second.id)
        with pytest.raises(errors.SandboxNotFoundError):
            provider.get_or_create(sandbox_id=first.id)
    finally:
        provider.delete(sandbox_id=first.id)


def test_delete_is_idempotent(fake_e2b: FakeE2BServer, provider: E2BProvider) -> None:
    sandbox = provider.create()
    home = fake_e2b.sandbox(sandbox.id).home
    provider.delete(sandbox_id=sandbox.id)
    provider.delete(sandbox_id=sandbox.id)
    provider.delete(sandbox_id="i-never-existed")
    assert not home.exists()


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (429, errors.RateLimitedError),
        (503, errors.ProviderUnavailableError),
        (500, errors.SandboxRuntimeError),
    ],
)
def test_service_errors_are_typed(
    fake_e2b: FakeE2BServer, provider: E2BProvider, status: int, expected: type[errors.SandboxError]
) -> None:
    fake_e2b.fail_next(status, "injected by the test")
    with pytest.raises(expected, match="injected by the test"):
        provider.list()
    fake_e2b.fail_next(status, "injected by the test")
    with pytest.raises(expected):
        provider.create()
    fake_e2b.fail_next(status, "injected by the test")
    with pytest.raises(expected):
        provider.delete(sandbox_id="i-anything")


def test_unreachable_service_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    provider = E2BProvider(api_key=API_KEY, api_url=url, sandbox_url=url, request_timeout=5)
    started = time.monotonic()
    with pytest.raises(errors.ProviderUnavailableError):
        provider.list()
    assert time.monotonic() - started < 30


# -- async twins -------------------------------------------------------------------------------


async def test_async_lifecycle(fake_e2b: FakeE2BServer) -> None:
    provider = make_provider(fake_e2b)
    labels = unique_labels()
    sandbox = await provider.acreate(labels=labels, idle_timeout=600)
    try:
        assert labels.items() <= fake_e2b.sandbox(sandbox.id).metadata.items()
        assert (await sandbox.aexecute("echo hi")).output == "hi\n"
        again = await provider.aget(sandbox.id)
        assert again.id == sandbox.id
        page = await provider.alist(labels=labels)
        assert [info.id for info in page.items] == [sandbox.id]
        assert (await provider.aget_or_create(labels=labels)).id == sandbox.id
    finally:
        await provider.adelete(sandbox_id=sandbox.id)
    await provider.adelete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await provider.aget(sandbox.id)
    assert (await provider.alist(labels=labels)).items == []


@pytest.mark.usefixtures("calm_listing")
async def test_async_pagination_and_errors(fake_e2b: FakeE2BServer) -> None:
    provider = make_provider(fake_e2b)
    labels = unique_labels()
    made = [await provider.acreate(labels=labels) for _ in range(3)]
    try:
        ids = [info.id async for info in provider.aiter_sandboxes(labels=labels, page_size=2)]
        assert ids == [s.id for s in made]
        fake_e2b.fail_next(429, "slow down")
        with pytest.raises(errors.RateLimitedError):
            await provider.alist(labels=labels)
        with pytest.raises(errors.InvalidArgumentError):
            await provider.acreate(
                **dict[str, Any](flavour="large")
            )  # as a mapping: mypy refuses the keyword
    finally:
        for sandbox in made:
            await provider.adelete(sandbox_id=sandbox.id)


async def test_close_leaves_no_unclosed_resources(fake_e2b: FakeE2BServer) -> None:
    """The SDK pools its connections per process; a provider holds no client of its
    own, so closing it (sync or async) leaves nothing for the collector to warn about."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with make_provider(fake_e2b) as provider:
            sandbox = provider.create()
            assert sandbox.execute("echo sync").output == "sync\n"
            provider.delete(sandbox_id=sandbox.id)
        async with make_provider(fake_e2b) as aprovider:
            asandbox = await aprovider.acreate()
            assert (await asandbox.aexecute("echo async")).output == "async\n"
            await aprovider.adelete(sandbox_id=asandbox.id)
        del sandbox, asandbox, provider, aprovider
        gc.collect()
    leaks = [w for w in caught if issubclass(w.category, ResourceWarning) or "Unclosed" in str(w.message)]
    assert leaks == []


def test_a_failed_extension_fails_the_call_and_is_retried_on_the_next(
    fake_e2b: FakeE2BServer, provider: E2BProvider
) -> None:
    sandbox = provider.create(idle_timeout=2)
    try:
        time.sleep(0.3)
        fake_e2b.fail_next(503, "busy extending")
        with pytest.raises(errors.ProviderUnavailableError, match="busy extending") as raised:
            sandbox.execute("touch never-ran")
        assert raised.value.__cause__ is not raised.value
        before = len(fake_e2b.requests)
        assert sandbox.execute("ls").output == ""
        assert fake_e2b.requests[before:] == [
            ("POST", f"/sandboxes/{sandbox.id}/timeout"),
            ("POST", "/process.Process/Start"),
        ]
    finally:
        provider.delete(sandbox_id=sandbox.id)
