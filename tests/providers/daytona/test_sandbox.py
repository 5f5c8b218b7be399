"""DaytonaSandbox: the conformance kit (with recent and legacy daemons) and the
execute / aexecute specifics, through the real SDK and the fake server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import anyio.to_thread
import pytest

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.daytona import DaytonaProvider, DaytonaSandbox
from sandbox_sdk.testing import provided_sandbox
from tests.providers.cloud_fake import CloudFakeConformance
from tests.providers.daytona.conftest import make_provider
from tests.providers.daytona.fake_server import FakeDaytonaServer


class DaytonaConformance(CloudFakeConformance):
    """``SandboxConformanceTests``; subclasses supply the ``sandbox`` fixture (the live tests too)."""

    async def test_async_twins(self, sandbox: BaseSandbox, workdir: str) -> None:
        """The kit's async test, then closing the loop's AsyncDaytona client (its aiohttp session)."""
        assert isinstance(sandbox, DaytonaSandbox)
        try:
            await super().test_async_twins(sandbox, workdir)
        finally:
            await sandbox.aclose()


class TestDaytonaSandbox(DaytonaConformance):
    """Recent daemons: the command text reaches a shell on stdin."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, daytona_server: FakeDaytonaServer) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(make_provider(daytona_server), "conformance")


@pytest.mark.slow
class TestDaytonaSandboxLegacyDaemon(DaytonaConformance):
    """Older daemons: the command is split on spaces and run without a shell. The whole kit
    again, because every operation depends on the command wrapping surviving that split."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, legacy_daytona_server: FakeDaytonaServer) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(make_provider(legacy_daytona_server), "conformance")


@pytest.fixture
def sandbox(provider: DaytonaProvider) -> Iterator[DaytonaSandbox]:
    sandbox = provider.create(labels={"suite": "sandbox"})
    yield sandbox
    provider.delete(sandbox_id=sandbox.id)


def test_commands_run_in_a_shell_with_stdin_closed(sandbox: DaytonaSandbox) -> None:
    """The daemon feeds the command to a shell on stdin; the wrapper keeps that away from it."""
    # Unwrapped, `read` would consume the next line of the script itself from the shell's stdin.
    response = sandbox.execute("read line\necho \"read=[$line] status=$?\"\necho 'a  b' | wc -w")
    assert response.output == "read=[] status=1\n2\n"
    assert response.exit_code == 0


def test_fractional_timeouts_round_up_to_whole_seconds(sandbox: DaytonaSandbox) -> None:
    response = sandbox.execute("sleep 0.3; echo done", timeout=0.2)
    assert (response.output, response.exit_code, response.timed_out) == ("done\n", 0, False)


def test_timeout_is_reported_not_raised(sandbox: DaytonaSandbox) -> None:
    started = time.monotonic()
    response = sandbox.execute("echo partial; sleep 30", timeout=1)
    assert time.monotonic() - started < 10
    assert response.timed_out
    assert response.exit_code == 124


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), True])  # 0: the default (the kit)
def test_invalid_timeouts_are_rejected(sandbox: DaytonaSandbox, timeout: float) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        sandbox.execute("true", timeout=timeout)


def test_output_cap_cuts_on_a_character_boundary(provider: DaytonaProvider) -> None:
    sandbox = provider.create()
    sandbox.limits = replace(sandbox.limits, max_output_bytes=5)
    response = sandbox.execute("printf 'ab\\303\\251\\303\\251'")  # "abéé": 6 bytes
    assert (response.output, response.truncated) == ("abé", True)
    provider.delete(sandbox_id=sandbox.id)


def test_execute_in_a_deleted_sandbox(provider: DaytonaProvider) -> None:
    sandbox = provider.create()
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.write("f.txt", "x")


def test_a_sandbox_is_usable_from_its_id_alone(provider: DaytonaProvider, sandbox: DaytonaSandbox) -> None:
    """A handle from ``get`` (no SDK object yet on the async side) fetches what it needs."""
    again = provider.get(sandbox.id)
    assert again.execute("echo $HOME").output.strip().endswith(sandbox.id)


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker thread was used")

    monkeypatch.setattr(anyio.to_thread, "run_sync", refuse)


async def test_async_operations_use_the_native_async_client(
    aprovider: DaytonaProvider, daytona_server: FakeDaytonaServer, no_threads: None
) -> None:
    sandbox = await aprovider.acreate(labels={"suite": "native-async"})
    await sandbox.awrite("a/f.txt", "one\ntwo\n")
    await sandbox.aedit("a/f.txt", "two", "three")
    assert (await sandbox.aread("a/f.txt")).content == "one\nthree\n"
    assert (await sandbox.arun("cat", stdin=b"piped")).output == "piped"
    response = await sandbox.aexecute("sleep 30", timeout=1)
    assert response.timed_out
    assert [i.id for i in (await aprovider.alist(labels={"suite": "native-async"})).items] == [sandbox.id]
    await aprovider.adelete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.aexecute("true")


STATUS_COMMANDS = {"exit 3": 3, "kill -TERM $$": 143, "kill -KILL $$": 137, "sleep 1 & kill -TERM $$": 143}


@pytest.mark.parametrize("server", ["daytona_server", "legacy_daytona_server"])
async def test_exit_status_is_128_plus_the_signal_on_both_daemons(
    request: pytest.FixtureRequest, server: str
) -> None:
    """Older daemons exec the command themselves and report -1 for a signal death (Go's
    ``ExitCode()``); the wrapper's extra shell turns it into 128+N on both, sync and async."""
    provider = make_provider(request.getfixturevalue(server))
    try:
        sandbox = await provider.acreate()
        for command, status in STATUS_COMMANDS.items():
            assert sandbox.execute(command).exit_code == status, command
            assert (await sandbox.aexecute(command)).exit_code == status, command
        timed_out = await sandbox.aexecute("sleep 30", timeout=1)
        assert (timed_out.exit_code, timed_out.timed_out) == (124, True)
        await provider.adelete(sandbox.id)
    finally:
        await provider.aclose()
