"""``ModalProvider`` on the fake backend, through the real modal SDK: the lifecycle
contract kit, construction and registration, lifecycle, labels and paging, and the
service's errors."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import pytest
from grpclib import Status

from sandbox_sdk import errors, get_provider
from sandbox_sdk.providers.modal import ModalProvider, ModalSandbox, sandbox_name
from sandbox_sdk.providers.modal.provider import CREATED_TAG, MAX_LIFETIME
from sandbox_sdk.testing import ProviderConformanceTests
from tests.providers.modal.conftest import make_provider
from tests.providers.modal.fake_server import FakeModalServer


class TestModalProviderContract(ProviderConformanceTests):
    @pytest.fixture
    def provider(self, modal_provider: ModalProvider) -> ModalProvider:
        return modal_provider


def test_missing_credentials_fail_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    monkeypatch.setenv("MODAL_PROFILE", "")
    with pytest.raises(errors.AuthenticationError, match="MODAL_TOKEN_ID"):
        ModalProvider(token_id=None, token_secret=None)
    with pytest.raises(errors.AuthenticationError):
        ModalProvider(token_id="ak-only-id")


def test_wrong_credentials_are_an_authentication_error(modal_server: FakeModalServer) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODAL_SERVER_URL", modal_server.url)
        provider = ModalProvider(token_id=modal_server.token_id, token_secret="as-wrong")
    with pytest.raises(errors.AuthenticationError):
        provider.create()


def test_registered_as_entry_point(modal_env: FakeModalServer) -> None:
    provider = get_provider("modal", app_name="entry-point")
    assert isinstance(provider, ModalProvider)


def test_labels_are_tags_and_get_round_trips(provider: ModalProvider, modal_server: FakeModalServer) -> None:
    before = time.time()
    sandbox = provider.create(labels={"thread": "42"})
    tags = sandbox.sandbox.get_tags()
    assert before <= float(tags.pop(CREATED_TAG)) <= time.time()  # when it was created, not a label
    assert tags == {"thread": "42"}
    with pytest.raises(errors.InvalidArgumentError, match="reserved"):
        provider.create(labels={CREATED_TAG: "1"})
    again = provider.get(sandbox.id)
    assert again.id == sandbox.id
    assert again.execute("echo same").output == "same\n"


def test_get_missing_and_finished(provider: ModalProvider, sandbox: ModalSandbox) -> None:
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get("sb-missing0000000000000000V")
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get_or_create(sandbox_id=sandbox.id)


def test_delete_is_idempotent(provider: ModalProvider, sandbox: ModalSandbox) -> None:
    provider.delete(sandbox_id=sandbox.id)
    provider.delete(sandbox_id=sandbox.id)
    provider.delete(sandbox_id="sb-missing0000000000000000V")
    assert sandbox.id not in [info.id for info in provider.iter_sandboxes()]


@pytest.mark.usefixtures("calm_listing")
def test_get_or_create_by_labels_reuses_exact_match(provider: ModalProvider) -> None:
    first = provider.get_or_create(labels={"thread": "7"})
    wider = provider.create(labels={"thread": "7", "extra": "1"})
    assert provider.get_or_create(labels={"thread": "7"}).id == first.id
    other = provider.get_or_create(labels={"thread": "8"})
    assert other.id not in (first.id, wider.id)
    assert provider.get_or_create(sandbox_id=first.id).id == first.id
    unnamed = provider.create(labels={"thread": "9"})  # found by listing: it has no name
    assert provider.get_or_create(labels={"thread": "9"}).id == unnamed.id


def test_get_or_create_names_the_sandbox_after_its_labels(
    provider: ModalProvider, modal_server: FakeModalServer
) -> None:
    sandbox = provider.get_or_create(labels={"thread": "n", "user": "u"})
    name = sandbox_name({"user": "u", "thread": "n"})  # the order of the labels does not matter
    assert modal_server.definition(sandbox.id).name == name
    assert len(name) <= 64 and name != sandbox_name({"thread": "n"})
    with pytest.raises(errors.SandboxRuntimeError, match="already exists"):
        provider.create(name=name)  # the name is held while that sandbox runs
    before = modal_server.calls()
    assert provider.get_or_create(labels={"user": "u", "thread": "n"}).id == sandbox.id
    reuse = modal_server.calls() - before
    assert (reuse["SandboxGetFromNameV2"], reuse["SandboxListV2"], reuse["SandboxCreateV2"]) == (1, 0, 0)


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.usefixtures("calm_listing")
def test_concurrent_get_or_create_by_labels_make_one_sandbox(
    provider: ModalProvider, modal_server: FakeModalServer, api: str
) -> None:
    """Both callers find nothing (the listing answers late), both create: the service
    refuses the second name, and its caller hands out the first caller's sandbox."""
    labels = {"race": api}
    before = modal_server.calls()
    modal_server.list_delay = 1.0
    try:
        if api == "sync":
            with ThreadPoolExecutor(2) as pool:
                ids = list(pool.map(lambda _: provider.get_or_create(labels=labels).id, range(2)))
        else:

            async def both() -> list[str]:
                made = await asyncio.gather(*(provider.aget_or_create(labels=labels) for _ in range(2)))
                return [sandbox.id for sandbox in made]

            ids = anyio.run(both)
    finally:
        modal_server.list_delay = 0.0
    assert ids[0] == ids[1]
    assert [info.id for info in provider.iter_sandboxes(labels=labels)] == [ids[0]]
    assert (modal_server.calls() - before)["SandboxCreateV2"] == 2  # one of them refused


def test_get_or_create_of_an_expired_sandbox_says_so(
    provider: ModalProvider, modal_server: FakeModalServer, caplog: pytest.LogCaptureFixture
) -> None:
    first = provider.get_or_create(labels={"thread": "expiring"})
    modal_server.expire(first.id)
    with caplog.at_level(logging.WARNING, logger="sandbox_sdk"):
        second = provider.get_or_create(labels={"thread": "expiring"})
    assert second.id != first.id
    [record] = [r for r in caplog.records if first.id in r.getMessage()]
    assert "ran out of time" in record.getMessage() and "new, empty" in record.getMessage()
    provider.delete(sandbox_id=second.id)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sandbox_sdk"):
        third = provider.get_or_create(labels={"thread": "expiring"})
    assert [r.getMessage() for r in caplog.records if second.id in r.getMessage()] != []
    assert "was terminated" in caplog.text and third.id not in (first.id, second.id)


@pytest.mark.usefixtures("calm_listing")
def test_iterating_walks_the_public_listing_once(
    provider: ModalProvider, modal_server: FakeModalServer
) -> None:
    """10 sandboxes, 2 to a page of the service's: ``iter_sandboxes`` is one walk
    through ``modal.Sandbox.list`` (a request per page plus the last, empty one)
    and a tag request per sandbox, whatever its ``page_size``."""
    modal_server.page_size = 2
    try:
        made = [provider.create(labels={"cost": "x", "n": str(i)}).id for i in range(10)]
        before = modal_server.calls()
        infos = list(provider.iter_sandboxes(labels={"cost": "x"}, page_size=2))
        cost = modal_server.calls() - before
    finally:
        modal_server.page_size = 3
    assert [info.id for info in infos] == made[::-1]
    assert infos[0].labels == {"cost": "x", "n": "9"}
    assert (cost["SandboxListV2"], cost["SandboxTagsGetV2"], sum(cost.values())) == (6, 10, 16)


@pytest.mark.usefixtures("calm_listing")
def test_list_filters_by_labels_and_pages_with_cursor(
    provider: ModalProvider, modal_server: FakeModalServer
) -> None:
    modal_server.page_size = 2  # several SDK pages per provider page
    try:
        made = [provider.create(labels={"batch": "a", "n": str(i)}) for i in range(5)]
        provider.create(labels={"batch": "b"})
        first = provider.list(labels={"batch": "a"}, limit=3)
        assert [info.id for info in first.items] == [s.id for s in reversed(made)][:3]
        assert first.next_cursor is not None
        second = provider.list(labels={"batch": "a"}, cursor=first.next_cursor, limit=3)
        assert [info.id for info in second.items] == [s.id for s in reversed(made)][3:]
        assert second.next_cursor is None
        info = first.items[0]
        assert info.labels == {"batch": "a", "n": "4"}
        assert info.status == "running"
        assert info.created_at.timestamp() > 0
        ids = [info.id for info in provider.iter_sandboxes(labels={"batch": "a"}, page_size=2)]
        assert ids == [s.id for s in reversed(made)]
        # the cursor's sandbox deleted between pages: the next page still starts right after it
        page = provider.list(labels={"batch": "a"}, limit=2)
        provider.delete(sandbox_id=page.items[-1].id)
        assert page.next_cursor is not None
        rest = provider.list(labels={"batch": "a"}, cursor=page.next_cursor, limit=10)
        assert [info.id for info in rest.items] == [s.id for s in reversed(made)][2:]
        with pytest.raises(errors.InvalidArgumentError):
            provider.list(cursor="not-a-cursor")
    finally:
        modal_server.page_size = 3


def test_create_options_pass_through(provider: ModalProvider) -> None:
    sandbox = provider.create(env={"FROM_CREATE": "yes"})
    assert sandbox.execute("echo $FROM_CREATE").output == "yes\n"
    with pytest.raises(errors.InvalidArgumentError, match="unknown Modal sandbox options"):
        provider.create(ttl_minutes=5)
    with pytest.raises(errors.InvalidArgumentError, match="labels"):
        provider.create(labels={"n": 1})  # type: ignore[dict-item]


def test_lifetime_is_ttl_and_idle_timeout_in_whole_seconds(
    provider: ModalProvider, modal_server: FakeModalServer
) -> None:
    """Without a ttl a sandbox lives Modal's maximum (24 h), not the SDK's five minutes,
    and idles for the shared default hour; given values are rounded up to whole seconds."""
    default = modal_server.definition(provider.create().id)
    assert (default.timeout_secs, default.idle_timeout_secs) == (MAX_LIFETIME, 3600)
    chosen = modal_server.definition(provider.create(ttl=90.5, idle_timeout=30).id)
    assert (chosen.timeout_secs, chosen.idle_timeout_secs) == (91, 30)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl": MAX_LIFETIME + 1}, "over Modal's maximum"),
        ({"idle_timeout": MAX_LIFETIME + 1}, "over Modal's maximum"),
        ({"ttl": 0}, "positive number of seconds"),
        ({"timeout": 600}, "ttl="),
    ],
)
def test_lifetimes_modal_cannot_honour_are_refused_before_creating(
    provider: ModalProvider, modal_server: FakeModalServer, options: dict[str, Any], message: str
) -> None:
    provider.create()  # the app exists: nothing below may reach the service
    before = modal_server.calls()
    with pytest.raises(errors.InvalidArgumentError, match=message):
        provider.create(**options)
    assert modal_server.calls() == before


def test_idle_timeout_ends_an_idle_sandbox_not_a_busy_one(provider: ModalProvider) -> None:
    # 3 s, not 1: the health check right after creation must come within it on a loaded machine
    sandbox = provider.create(idle_timeout=3)
    assert sandbox.execute("sleep 6.5; echo busy").output == "busy\n"  # running: not idle
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            provider.get(sandbox.id)
        except errors.SandboxNotFoundError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the idle sandbox was not ended")
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")


def test_close_releases_the_client_without_resource_warnings(modal_server: FakeModalServer) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with make_provider(modal_server, app_name="close-test") as provider:
            sandbox = provider.create()
            assert sandbox.execute("echo open").output == "open\n"
            provider.delete(sandbox_id=sandbox.id)
        assert provider.client.is_closed()
        provider.close()  # idempotent
        del provider, sandbox
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_aclose_releases_the_client(modal_server: FakeModalServer) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with make_provider(modal_server, app_name="close-test") as provider:
            sandbox = await provider.acreate()
            assert (await sandbox.aexecute("echo open")).output == "open\n"
            await provider.adelete(sandbox_id=sandbox.id)
        assert provider.client.is_closed()
        del provider, sandbox
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_sandbox_lifetime_ends_it(provider: ModalProvider, modal_server: FakeModalServer) -> None:
    sandbox = provider.create()
    modal_server.expire(sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)
    assert sandbox.id not in [info.id for info in provider.iter_sandboxes()]


@pytest.mark.usefixtures("calm_listing")
async def test_async_lifecycle(provider: ModalProvider) -> None:
    sandbox = await provider.acreate(labels={"async": "yes"})
    assert (await sandbox.aexecute("echo hi")).output == "hi\n"
    again = await provider.aget_or_create(labels={"async": "yes"})
    assert again.id == sandbox.id
    page = await provider.alist(labels={"async": "yes"})
    assert [info.id for info in page.items] == [sandbox.id]
    newer = await provider.acreate(labels={"async": "yes", "n": "2"})
    first = await provider.alist(labels={"async": "yes"}, limit=1)
    assert [info.id for info in first.items] == [newer.id]
    assert first.next_cursor is not None
    await provider.adelete(sandbox_id=newer.id)
    rest = await provider.alist(labels={"async": "yes"}, cursor=first.next_cursor)
    assert ([info.id for info in rest.items], rest.next_cursor) == ([sandbox.id], None)
    await provider.adelete(sandbox_id=sandbox.id)
    await provider.adelete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await provider.aget(sandbox.id)


def test_rate_limit_is_rate_limited_error(provider: ModalProvider, modal_server: FakeModalServer) -> None:
    provider.create()  # the app exists; the next create is the one refused
    modal_server.fail("SandboxCreateV2", Status.RESOURCE_EXHAUSTED)
    with pytest.raises(errors.RateLimitedError):
        provider.create()


def test_outage_is_provider_unavailable(
    provider: ModalProvider, sandbox: ModalSandbox, modal_server: FakeModalServer
) -> None:
    modal_server.fail("SandboxWaitV2", Status.UNAVAILABLE, times=100)
    try:
        with pytest.raises(errors.ProviderUnavailableError):
            provider.get(sandbox.id)
    finally:
        modal_server.fail("SandboxWaitV2", Status.UNAVAILABLE, times=0)
    assert provider.get(sandbox.id).id == sandbox.id
