"""The bridge's own contract, beyond inspect's ``self_check``: configuration,
the sandbox's lifecycle and labels, cleanup, users, and the errors inspect
defines itself (on the local provider, which is fast)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai.util import (
    OutputLimitExceededError,
    SandboxEnvironmentSpec,
    SandboxUserUnsupportedError,
    override_sandbox_output_limit,
)
from pydantic import ValidationError

from sandbox_sdk import ProviderUnavailableError, get_provider
from sandbox_sdk.integrations import inspect as bridge
from sandbox_sdk.integrations.inspect import LABELS, SandboxSDKConfig, SandboxSDKEnvironment


@pytest.fixture
async def env(local_config: SandboxSDKConfig) -> AsyncIterator[SandboxSDKEnvironment]:
    environments = await SandboxSDKEnvironment.sample_init("test", local_config, {})
    environment = environments["default"].as_type(SandboxSDKEnvironment)
    yield environment
    await SandboxSDKEnvironment.sample_cleanup("test", local_config, environments, False)


# -- configuration -----------------------------------------------------------------------


def test_inspect_finds_the_type_through_the_entry_point(tmp_path: Path) -> None:
    """A fresh interpreter, where nothing imported the bridge: inspect's own CLI
    resolves the type and runs its ``cli_cleanup``."""
    result = subprocess.run(
        [sys.executable, "-m", "inspect_ai", "sandbox", "cleanup", "sandbox_sdk", "local"],
        env={**os.environ, "SANDBOX_SDK_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_dict_config_is_deserialized_into_the_model() -> None:
    spec = SandboxEnvironmentSpec("sandbox_sdk", {"provider": "local"})  # type: ignore[arg-type]
    assert spec.config == SandboxSDKConfig(provider="local")
    assert hash(spec) == hash(SandboxEnvironmentSpec("sandbox_sdk", SandboxSDKConfig(provider="local")))


def test_a_config_file_and_no_config(tmp_path: Path) -> None:
    path = tmp_path / "sandbox.yaml"
    path.write_text("provider: local\noptions:\n  ttl: 60\n")
    assert bridge.load_config(str(path)) == SandboxSDKConfig(provider="local", options={"ttl": 60})
    assert bridge.load_config(None) == SandboxSDKConfig(provider="bwrap")


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError, match="image"):
        SandboxSDKEnvironment.config_deserialize({"provider": "local", "image": "python:3.12"})


async def test_task_init_fails_at_once_for_a_missing_provider() -> None:
    with pytest.raises(ProviderUnavailableError, match="no-such-provider"):
        await SandboxSDKEnvironment.task_init("test", SandboxSDKConfig(provider="no-such-provider"))


# -- lifecycle ----------------------------------------------------------------------------


async def test_each_sample_gets_a_labelled_sandbox_deleted_at_cleanup(local_config: SandboxSDKConfig) -> None:
    provider = get_provider("local", **local_config.provider_config)
    first = await SandboxSDKEnvironment.sample_init("test", local_config, {})
    second = await SandboxSDKEnvironment.sample_init("test", local_config, {})
    ids = {envs["default"].as_type(SandboxSDKEnvironment).sandbox.id for envs in (first, second)}
    assert {info.id for info in provider.list(labels=LABELS).items} == ids
    for environments in (first, second):
        await SandboxSDKEnvironment.sample_cleanup("test", local_config, environments, True)
    assert provider.list().items == []


async def test_cli_cleanup_deletes_only_labelled_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_SDK_HOME", str(tmp_path))  # the providers' default state directories
    monkeypatch.setattr(bridge, "available_providers", lambda: ["local", "bwrap"])
    local, bwrap = get_provider("local"), get_provider("bwrap")
    one, two, mine = local.create(labels=LABELS), local.create(labels=LABELS), local.create()
    jailed = bwrap.create(labels=LABELS)

    await SandboxSDKEnvironment.cli_cleanup(one.id)  # a sandbox id: that one only
    assert {info.id for info in local.list().items} == {two.id, mine.id}
    await SandboxSDKEnvironment.cli_cleanup("bwrap")  # a provider name: its leftovers only
    assert bwrap.list().items == []
    assert {info.id for info in local.list().items} == {two.id, mine.id}
    await SandboxSDKEnvironment.cli_cleanup(None)  # every provider's
    assert [info.id for info in local.list().items] == [mine.id]
    assert jailed.id not in {info.id for info in bwrap.list().items}


# -- operations ---------------------------------------------------------------------------


async def test_a_text_read_of_binary_content_raises_unicode_decode_error(env: SandboxSDKEnvironment) -> None:
    await env.write_file("blob.bin", b"\xff\xfe\x00")
    with pytest.raises(UnicodeDecodeError):
        await env.read_file("blob.bin", text=True)
    assert await env.read_file("blob.bin", text=False) == b"\xff\xfe\x00"


async def test_text_reads_keep_crlf(env: SandboxSDKEnvironment) -> None:
    await env.write_file("dos.txt", "a\r\nb\r\n")
    assert await env.read_file("dos.txt") == "a\r\nb\r\n"


async def test_a_timeout_raises_with_the_output_so_far(env: SandboxSDKEnvironment) -> None:
    with pytest.raises(TimeoutError, match="after 1 seconds") as caught:
        await env.exec(["sh", "-c", "echo started; sleep 10"], timeout=1)
    assert getattr(caught.value, "truncated_output", None) == "started\n"


async def test_output_past_inspects_limit_raises(env: SandboxSDKEnvironment) -> None:
    with override_sandbox_output_limit(1024, "exec"), pytest.raises(OutputLimitExceededError, match="1 KiB"):
        await env.exec(["head", "-c", "2048", "/dev/zero"])


async def test_output_the_sandbox_cut_raises(tmp_path: Path) -> None:
    config = SandboxSDKConfig(
        provider="local", provider_config={"state_dir": str(tmp_path), "max_output_bytes": 64 * 1024}
    )
    environments = await SandboxSDKEnvironment.sample_init("test", config, {})
    try:
        with pytest.raises(OutputLimitExceededError, match="65536 bytes") as caught:
            await environments["default"].exec(["head", "-c", "100000", "/dev/zero"])
        assert caught.value.truncated_output is not None
    finally:
        await SandboxSDKEnvironment.sample_cleanup("test", config, environments, False)


async def test_exec_accepts_the_sandboxs_own_user_only(env: SandboxSDKEnvironment) -> None:
    name = (await env.exec(["id", "-un"])).stdout.strip()
    for user in (name, str(os.geteuid())):
        assert (await env.exec(["id", "-u"], user=user)).stdout.strip() == str(os.geteuid())
    with pytest.raises(SandboxUserUnsupportedError, match="somebody-else"):
        await env.exec(["true"], user="somebody-else")
