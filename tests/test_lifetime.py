"""The lifetime model every provider maps onto its platform
(:mod:`sandbox_sdk.provider_kit.lifetime`), and the provider's own context
managers (``with provider:`` closes its clients)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox_sdk import errors
from sandbox_sdk.provider_kit import DEFAULT_IDLE_TIMEOUT, KeepAlive, Lifetime
from sandbox_sdk.providers.local import LocalProvider


def test_options_are_taken_out_and_checked() -> None:
    options: dict[str, Any] = {"ttl": 7200, "idle_timeout": 600, "template": "x"}
    lifetime = Lifetime.from_options(options, platform="Example", max_ttl=86400)
    assert lifetime == Lifetime(ttl=7200.0, idle_timeout=600.0)
    assert options == {"template": "x"}


def test_idle_timeout_defaults_to_an_hour_fitted_to_the_platform() -> None:
    assert Lifetime.from_options({}, platform="Example").idle_timeout == DEFAULT_IDLE_TIMEOUT == 3600
    short = Lifetime.from_options({}, platform="Example", max_idle_timeout=1800)
    assert short == Lifetime(ttl=None, idle_timeout=1800.0)
    assert Lifetime.from_options({}, platform="Example", default_idle_timeout=None).idle_timeout is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl": 90000}, "ttl=90000 s is over Example's maximum of 86400 s"),
        ({"idle_timeout": 7200}, "idle_timeout=7200 s is over Example's maximum of 3600 s"),
        ({"ttl": 0}, "ttl must be a positive number of seconds"),
        ({"idle_timeout": True}, "idle_timeout must be a positive number of seconds"),
        ({"ttl": "1h"}, "ttl must be a positive number of seconds"),
    ],
)
def test_values_a_platform_cannot_honour_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=message):
        Lifetime.from_options(options, platform="Example", max_ttl=86400, max_idle_timeout=3600)


def test_keep_alive_is_due_at_most_once_per_interval() -> None:
    now = [100.0]
    keep_alive = KeepAlive(60, clock=lambda: now[0])
    assert keep_alive.due()
    now[0] = 159.9
    assert not keep_alive.due()
    now[0] = 160.0
    assert keep_alive.due()
    assert not keep_alive.due()


class CountingProvider(LocalProvider):
    """A local provider that counts how often its clients are released."""

    closed = 0

    def close(self) -> None:
        self.closed += 1


def test_with_provider_closes_it(tmp_path: Path) -> None:
    with CountingProvider(tmp_path / "state") as provider:
        sandbox = provider.create()
        assert sandbox.execute("echo hi").output == "hi\n"
        assert provider.closed == 0
    assert provider.closed == 1


async def test_async_with_provider_closes_it(tmp_path: Path) -> None:
    async with CountingProvider(tmp_path / "state") as provider:
        assert (await (await provider.acreate()).aexecute("echo hi")).output == "hi\n"
    assert provider.closed == 1


def test_closing_a_provider_without_clients_is_harmless(tmp_path: Path) -> None:
    provider = LocalProvider(tmp_path / "state")
    provider.close()
    provider.close()
    assert provider.create().execute("true").exit_code == 0
