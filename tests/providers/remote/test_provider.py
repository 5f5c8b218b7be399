"""The provider contract through the remote provider (a bubblewrap runner
directly, a local runner through a coordinator), and how it is configured."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from sandbox_sdk import errors, get_provider
from sandbox_sdk.providers.remote import URL_ENV, RemoteProvider
from sandbox_sdk.testing import ProviderConformanceTests
from sandbox_sdk.wire.security import CLIENT_TOKEN_ENV


class TestRemoteProviderOnBwrap(ProviderConformanceTests):
    @pytest.fixture
    def provider(self, bwrap_url: str, token: str) -> Iterator[RemoteProvider]:
        with RemoteProvider(bwrap_url, token) as provider:
            yield provider


class TestRemoteProviderOnLocalViaCoordinator(ProviderConformanceTests):
    @pytest.fixture
    def provider(self, coordinated_local_url: str, token: str) -> Iterator[RemoteProvider]:
        with RemoteProvider(coordinated_local_url, token) as provider:
            yield provider


def test_registered_and_configured_from_the_environment(
    local_url: str, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, local_url)
    monkeypatch.setenv(CLIENT_TOKEN_ENV, token)
    provider = get_provider("remote")
    assert isinstance(provider, RemoteProvider)
    with provider:
        assert provider.list(labels={"no-such": "label"}).items == []


def test_missing_settings_are_typed_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    monkeypatch.delenv(CLIENT_TOKEN_ENV, raising=False)
    with pytest.raises(errors.ProviderUnavailableError, match=URL_ENV):
        RemoteProvider(token="x" * 20)
    with pytest.raises(errors.AuthenticationError, match=CLIENT_TOKEN_ENV):
        RemoteProvider("ws://127.0.0.1:9")
    with pytest.raises(errors.InvalidArgumentError, match="wss"):
        RemoteProvider("ws://127.0.0.1:9", "x" * 20, cafile="ca.pem")


def test_nothing_listening_is_provider_unavailable(token: str) -> None:
    with (
        RemoteProvider("ws://127.0.0.1:9", token, connect_timeout=2) as provider,
        pytest.raises(errors.ProviderUnavailableError, match=r"connect to ws://127\.0\.0\.1:9"),
    ):
        provider.list()


def test_runner_owner_settings_are_refused_and_client_options_pass(local_url: str, token: str) -> None:
    with RemoteProvider(local_url, token) as provider:
        with pytest.raises(errors.InvalidArgumentError, match="runner owner"):
            provider.create(network=True)
        with pytest.raises(errors.InvalidArgumentError, match="JSON"):
            provider.create(ttl=object())  # type: ignore[arg-type]  # a wrong type, refused at run time
        labels = {"test": secrets.token_hex(4)}
        sandbox = provider.create(labels=labels, ttl=600, setup="echo set up > ready.txt")
        try:
            assert sandbox.read("ready.txt").content == "set up\n"
            [info] = provider.list(labels=labels).items
            assert info.metadata["ttl"] == 600
        finally:
            provider.delete(sandbox_id=sandbox.id)


def test_a_closed_provider_refuses_calls(local_url: str, token: str) -> None:
    provider = RemoteProvider(local_url, token)
    sandbox = provider.create()
    provider.delete(sandbox_id=sandbox.id)
    provider.close()
    provider.close()
    with pytest.raises(errors.ProviderUnavailableError, match="closed"):
        sandbox.execute("true")
