"""``E2BProvider``: lifecycle, labels, pagination and error mapping, sync and
async, through the real SDK and the fake service."""

from __future__ import annotations

import datetime as dt
import secrets
import socket
import time
from typing import Any

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from sandbox_sdk import errors
from sandbox_sdk.provider import get_provider
from sandbox_sdk.providers.e2b import E2BProvider, E2BSandbox
from sandbox_sdk.testing import ProviderConformanceTests
from tests.providers.e2b.conftest import API_KEY, make_provider
from tests.providers.e2b.fake_server import FakeE2BServer


class TestE2BProviderContract(ProviderConformanceTests):
    """Uses the ``provider`` fixture of conftest.py."""


def unique_labels(**extra: str) -> dict[str, str]:
    return {"run": secrets.token_hex(4), **extra}


def test_missing_credentials_fail_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(errors.AuthenticationError, match="E2B_API_KEY"):
        E2BProvider()
    monkeypatch.setenv("E2B_API_KEY", "e2b_from_env")
    assert isinstance(E2BProvider(), E2BProvider)


@pytest.mark.parametrize("options", [{"sandbox_timeout": 0}, {"command_timeout": -1}])
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


def test_create_passes_labels_and_time_to_live(fake_e2b: FakeE2BServer, provider: E2BProvider) -> None:
    labels = unique_labels(team="core")
    sandbox = provider.create(labels=labels, timeout=1234, template="base")
    try:
        stored = fake_e2b.sandbox(sandbox.id)
        assert stored.metadata == labels
        assert stored.template_id == "base"
        assert abs((stored.end_at - stored.started_at).total_seconds() - 1234) < 1
    finally:
        provider.delete(sandbox_id=sandbox.id)


def test_default_time_to_live(fake_e2b: FakeE2BServer, provider: E2BProvider) -> None:
    sandbox = provider.create()
    try:
        stored = fake_e2b.sandbox(sandbox.id)
        assert abs((stored.end_at - stored.started_at).total_seconds() - provider.sandbox_timeout) < 1
    finally:
        provider.delete(sandbox_id=sandbox.id)


@pytest.mark.parametrize("options", [{"timeout": 0}, {"timeout": 2.5}, {"cpu": 4}, {"metadata": {}}])
def test_bad_create_options_fail_before_any_request(
    fake_e2b: FakeE2BServer, provider: E2BProvider, options: dict[str, Any]
) -> None:
    before = len(fake_e2b.requests)
    with pytest.raises(errors.InvalidArgumentError):
        provider.create(**options)
    assert len(fake_e2b.requests) == before


def test_sandbox_expires_after_its_time_to_live(provider: E2BProvider) -> None:
    labels = unique_labels()
    sandbox = provider.create(labels=labels, timeout=1)
    assert sandbox.execute("echo alive").output == "alive\n"
    time.sleep(1.3)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")
    assert provider.list(labels=labels).items == []


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
    sandbox = await provider.acreate(labels=labels, timeout=600)
    try:
        assert fake_e2b.sandbox(sandbox.id).metadata == labels
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
            await provider.acreate(flavour="large")
    finally:
        for sandbox in made:
            await provider.adelete(sandbox_id=sandbox.id)
