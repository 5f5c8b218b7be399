"""Configurations of the ``sandbox_sdk`` inspect sandbox type for each provider;
the cloud ones point at the providers' fake services
(tests/providers/<name>/fake_server.py), each started on first use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="the inspect extra is not installed: pip install -e '.[inspect]'")

from sandbox_sdk.integrations.inspect import SandboxSDKConfig


@pytest.fixture
def local_config(tmp_path: Path) -> SandboxSDKConfig:
    return SandboxSDKConfig(provider="local", provider_config={"state_dir": str(tmp_path / "state")})


@pytest.fixture
def bwrap_config(tmp_path: Path) -> SandboxSDKConfig:
    return SandboxSDKConfig(provider="bwrap", provider_config={"state_dir": str(tmp_path / "state")})


@pytest.fixture(scope="session")
def e2b_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxSDKConfig]:
    pytest.importorskip("e2b")
    from tests.providers.e2b.fake_server import FakeE2BServer

    fake = FakeE2BServer(api_key="e2b_fake_test_key", base_dir=tmp_path_factory.mktemp("fake-e2b"))
    fake.start()
    yield SandboxSDKConfig(
        provider="e2b",
        provider_config={"api_key": fake.api_key, "api_url": fake.url, "sandbox_url": fake.url},
    )
    fake.stop()


@pytest.fixture(scope="session")
def daytona_config() -> Iterator[SandboxSDKConfig]:
    pytest.importorskip("daytona")
    from tests.providers.daytona.fake_server import running_fake_daytona

    with running_fake_daytona() as fake:
        yield SandboxSDKConfig(
            provider="daytona", provider_config={"api_key": fake.api_key, "api_url": fake.api_url}
        )


@pytest.fixture(scope="session")
def modal_config() -> Iterator[SandboxSDKConfig]:
    pytest.importorskip("modal")
    from tests.providers.modal.fake_server import FakeModalServer

    with FakeModalServer().running() as fake, pytest.MonkeyPatch.context() as patch:
        # The modal SDK reads its server's URL from the environment.
        patch.setenv("MODAL_SERVER_URL", fake.url)
        yield SandboxSDKConfig(
            provider="modal",
            provider_config={
                "token_id": fake.token_id,
                "token_secret": fake.token_secret,
                "app_name": "sandbox-sdk-inspect-tests",
            },
        )
