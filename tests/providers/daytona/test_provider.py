"""DaytonaProvider lifecycle and error mapping, through the real SDK and the fake server."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from daytona import Daytona, DaytonaConfig

from sandbox_sdk import errors, get_provider
from sandbox_sdk.providers.daytona import DaytonaProvider, DaytonaSandbox
from sandbox_sdk.testing import ProviderConformanceTests
from tests.providers.daytona.fake_server import FakeDaytonaServer


class TestDaytonaProviderContract(ProviderConformanceTests):
    """Uses the ``provider`` fixture of conftest.py."""


@pytest.mark.usefixtures("calm_listing")
def test_create_passes_lifecycle_options_in_minutes(
    provider: DaytonaProvider, daytona_server: FakeDaytonaServer
) -> None:
    sandbox = provider.create(
        labels={"team": "a"}, auto_stop_interval=15, auto_archive_interval=60, env_vars={"GREETING": "hi"}
    )
    stored = daytona_server.sandboxes[sandbox.id]
    assert (stored.auto_stop_interval, stored.auto_archive_interval) == (15, 60)
    assert sandbox.execute('echo "$GREETING"').output == "hi\n"
    info = next(i for i in provider.iter_sandboxes(labels={"team": "a"}) if i.id == sandbox.id)
    assert info.labels == {"team": "a"}  # the SDK's own language label is not ours
    assert info.status == "started"
    assert info.metadata["auto_stop_interval"] == 15
    provider.delete(sandbox_id=sandbox.id)


def test_create_rejects_unknown_and_invalid_options(
    provider: DaytonaProvider, daytona_server: FakeDaytonaServer
) -> None:
    before = set(daytona_server.sandboxes)
    with pytest.raises(errors.InvalidArgumentError, match="auto_stop_minutes"):
        provider.create(**dict[str, Any](auto_stop_minutes=5))  # as a mapping: mypy refuses the keyword
    with pytest.raises(errors.InvalidArgumentError, match="auto_stop_interval"):
        provider.create(auto_stop_interval="soon")
    with pytest.raises(errors.InvalidArgumentError, match="create_timeout"):
        provider.create(create_timeout=-1)
    assert set(daytona_server.sandboxes) == before


def test_create_deletes_a_sandbox_that_fails_its_health_check(
    provider: DaytonaProvider, daytona_server: FakeDaytonaServer
) -> None:
    before = set(daytona_server.sandboxes)
    daytona_server.fail_next(500, path_contains="/process/execute")
    with pytest.raises(errors.SandboxRuntimeError, match="health check"):
        provider.create(labels={"doomed": "yes"})
    assert set(daytona_server.sandboxes) == before


def test_get_existing_and_missing(provider: DaytonaProvider) -> None:
    sandbox = provider.create()
    again = provider.get(sandbox.id)
    assert isinstance(again, DaytonaSandbox)
    assert again.id == sandbox.id
    assert again.execute("echo same").output == "same\n"
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get_or_create(sandbox_id=sandbox.id)
    with pytest.raises(errors.InvalidArgumentError):
        provider.get("")


def test_get_or_create_by_id_and_by_labels(provider: DaytonaProvider) -> None:
    labels = {"purpose": "reuse", "owner": "test_get_or_create"}
    first = provider.get_or_create(labels=labels)
    assert provider.get_or_create(labels=labels).id == first.id
    assert provider.get_or_create(sandbox_id=first.id).id == first.id
    # A superset of the labels is a different sandbox.
    other = provider.get_or_create(labels={**labels, "extra": "1"})
    assert other.id != first.id
    for sandbox in (first, other):
        provider.delete(sandbox_id=sandbox.id)


@pytest.mark.usefixtures("calm_listing")
def test_list_filters_by_labels_and_follows_cursors(provider: DaytonaProvider) -> None:
    created = {provider.create(labels={"batch": "paged"}).id for _ in range(3)}
    unrelated = provider.create(labels={"batch": "other"})
    first = provider.list(labels={"batch": "paged"}, limit=2)
    assert len(first.items) == 2
    assert first.next_cursor is not None
    second = provider.list(labels={"batch": "paged"}, cursor=first.next_cursor, limit=2)
    assert second.next_cursor is None
    assert {i.id for i in first.items + second.items} == created
    assert {i.id for i in provider.iter_sandboxes(labels={"batch": "paged"}, page_size=1)} == created
    with pytest.raises(errors.InvalidArgumentError):
        provider.list(limit=0)
    for sandbox_id in [*created, unrelated.id]:
        provider.delete(sandbox_id=sandbox_id)


def test_delete_is_idempotent(provider: DaytonaProvider, daytona_server: FakeDaytonaServer) -> None:
    sandbox = provider.create()
    provider.delete(sandbox_id=sandbox.id)
    assert sandbox.id not in daytona_server.sandboxes
    provider.delete(sandbox_id=sandbox.id)
    provider.delete(sandbox_id="never-existed")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, errors.AuthenticationError),
        (403, errors.AuthenticationError),
        (429, errors.RateLimitedError),
        (503, errors.ProviderUnavailableError),
        (500, errors.ProviderUnavailableError),
    ],
)
def test_sdk_errors_map_to_typed_errors(
    provider: DaytonaProvider,
    daytona_server: FakeDaytonaServer,
    status: int,
    expected: type[errors.SandboxError],
) -> None:
    sandbox = provider.create()
    daytona_server.fail_next(status, path_contains=f"/api/sandbox/{sandbox.id}")
    with pytest.raises(expected):
        provider.get(sandbox.id)
    daytona_server.fail_next(status, path_contains="/api/sandbox")
    with pytest.raises(expected):
        provider.list()
    daytona_server.fail_next(status, path_contains="/process/execute")
    with pytest.raises(expected):
        sandbox.execute("true")
    provider.delete(sandbox_id=sandbox.id)


def test_wrong_key_is_an_authentication_error(daytona_server: FakeDaytonaServer) -> None:
    provider = DaytonaProvider(api_key="not-the-key", api_url=daytona_server.api_url)
    with pytest.raises(errors.AuthenticationError, match="DAYTONA_API_KEY"):
        provider.create()


def _unreachable_url() -> str:
    with socket.socket() as probe:  # a port with nothing listening on it
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/api"


def test_unreachable_service_is_unavailable() -> None:
    provider = DaytonaProvider(api_key="k", api_url=_unreachable_url())
    with pytest.raises(errors.ProviderUnavailableError):
        provider.get("some-id")
    with pytest.raises(errors.ProviderUnavailableError):
        provider.list()


async def test_unreachable_service_is_unavailable_async() -> None:
    provider = DaytonaProvider(api_key="k", api_url=_unreachable_url())
    try:
        with pytest.raises(errors.ProviderUnavailableError):
            await provider.aget("some-id")
        with pytest.raises(errors.ProviderUnavailableError):
            await provider.alist()
    finally:
        await provider.aclose()


def test_missing_credentials_fail_at_construction(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # the SDK also reads .env files from here
    with pytest.raises(errors.AuthenticationError, match="DAYTONA_API_KEY"):
        DaytonaProvider(api_url="http://127.0.0.1:9/api")


def test_credentials_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, daytona_server: FakeDaytonaServer
) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", daytona_server.api_key)
    monkeypatch.setenv("DAYTONA_API_URL", daytona_server.api_url)
    provider = get_provider("daytona")
    assert isinstance(provider, DaytonaProvider)
    sandbox = provider.create()
    assert sandbox.execute("echo env").output == "env\n"
    provider.delete(sandbox_id=sandbox.id)


async def test_async_lifecycle(aprovider: DaytonaProvider, daytona_server: FakeDaytonaServer) -> None:
    labels = {"flavour": "async"}
    sandbox = await aprovider.aget_or_create(labels=labels, auto_stop_interval=30)
    assert daytona_server.sandboxes[sandbox.id].auto_stop_interval == 30
    assert (await aprovider.aget_or_create(labels=labels)).id == sandbox.id
    assert (await sandbox.aexecute("echo $((6*7))")).output == "42\n"
    page = await aprovider.alist(labels=labels)
    assert [i.id for i in page.items] == [sandbox.id]
    fetched = await aprovider.aget(sandbox.id)
    assert (await fetched.aexecute("pwd")).output.strip().endswith(sandbox.id)
    await aprovider.adelete(sandbox_id=sandbox.id)
    await aprovider.adelete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await aprovider.aget(sandbox.id)
    daytona_server.fail_next(429, path_contains="/api/sandbox")
    with pytest.raises(errors.RateLimitedError):
        await aprovider.alist()


def _stop(server: FakeDaytonaServer, sandbox_id: str) -> None:
    """Stop a sandbox the way Daytona's auto-stop leaves it, through the SDK's own stop()."""
    Daytona(DaytonaConfig(api_key=server.api_key, api_url=server.api_url)).get(sandbox_id).stop()
    assert server.sandboxes[sandbox_id].state == "stopped"


def test_get_starts_a_stopped_sandbox(provider: DaytonaProvider, daytona_server: FakeDaytonaServer) -> None:
    labels = {"purpose": "auto-stopped"}
    sandbox = provider.create(labels=labels)
    _stop(daytona_server, sandbox.id)
    assert provider.get_or_create(labels=labels).id == sandbox.id  # started again, not replaced
    assert daytona_server.sandboxes[sandbox.id].state == "started"
    assert sandbox.execute("echo back").output == "back\n"
    provider.delete(sandbox_id=sandbox.id)


async def test_aget_starts_a_stopped_sandbox(
    aprovider: DaytonaProvider, daytona_server: FakeDaytonaServer
) -> None:
    sandbox = await aprovider.acreate()
    _stop(daytona_server, sandbox.id)
    again = await aprovider.aget(sandbox.id)
    assert (await again.aexecute("echo back")).output == "back\n"
    await aprovider.adelete(sandbox_id=sandbox.id)
