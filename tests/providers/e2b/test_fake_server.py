"""The fake E2B service answers the real SDK the way E2B does, for the SDK
behaviour the provider relies on: both ``Sandbox`` and ``AsyncSandbox``."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from e2b import (
    ApiParams,
    AsyncSandbox,
    CommandExitException,
    FileNotFoundException,
    InvalidArgumentException,
    Sandbox,
    SandboxException,
    SandboxNotRunningException,
    SandboxQuery,
    TimeoutException,
)

from tests.providers.e2b.conftest import API_KEY
from tests.providers.e2b.fake_server import FakeE2BServer


@pytest.fixture
def options(fake_e2b: FakeE2BServer) -> ApiParams:
    return ApiParams(api_key=API_KEY, api_url=fake_e2b.url, sandbox_url=fake_e2b.url)


@pytest.fixture
def sdk_sandbox(options: ApiParams) -> Iterator[Sandbox]:
    sandbox = Sandbox.create(timeout=120, **options)
    yield sandbox
    sandbox.kill()


@pytest.fixture
async def sdk_async_sandbox(options: ApiParams) -> AsyncIterator[AsyncSandbox]:
    sandbox = await AsyncSandbox.create(timeout=120, **options)
    yield sandbox
    await sandbox.kill()


def test_commands_run_like_envd(sdk_sandbox: Sandbox) -> None:
    result = sdk_sandbox.commands.run(
        "echo out; echo err >&2; echo $FOO; pwd", envs={"FOO": "bar"}, cwd="/tmp"
    )
    assert (result.stdout, result.stderr, result.exit_code) == ("out\nbar\n/tmp\n", "err\n", 0)
    with pytest.raises(CommandExitException) as exited:
        sdk_sandbox.commands.run("echo partial; echo oops >&2; exit 3")
    assert (exited.value.exit_code, exited.value.stdout, exited.value.stderr) == (3, "partial\n", "oops\n")
    with pytest.raises(InvalidArgumentException, match="does not exist"):
        sdk_sandbox.commands.run("true", cwd="no/such/dir")


def test_stdin_is_closed_unless_asked(sdk_sandbox: Sandbox) -> None:
    assert sdk_sandbox.commands.run("cat; echo done", timeout=5).stdout == "done\n"


def test_deadline_kills_the_command_but_not_what_it_started(
    fake_e2b: FakeE2BServer, sdk_sandbox: Sandbox
) -> None:
    """envd's deadline reaches the shell alone (the provider kills the rest)."""
    home = fake_e2b.sandbox(sdk_sandbox.sandbox_id).home
    started = time.monotonic()
    with pytest.raises((TimeoutException, CommandExitException)):
        sdk_sandbox.commands.run("(sleep 0.8; touch survivor) & echo $$ > shell.pid; sleep 30", timeout=0.5)
    assert time.monotonic() - started < 5
    shell = int((home / "shell.pid").read_text())
    deadline = time.monotonic() + 5
    while not (home / "survivor").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (home / "survivor").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(shell, 0)


def test_client_going_away_does_not_kill(fake_e2b: FakeE2BServer, sdk_sandbox: Sandbox) -> None:
    home = fake_e2b.sandbox(sdk_sandbox.sandbox_id).home
    handle = sdk_sandbox.commands.run("sleep 0.5; touch finished", background=True, timeout=0)
    handle.disconnect()
    deadline = time.monotonic() + 5
    while not (home / "finished").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (home / "finished").exists()


def test_kill_by_signal(sdk_sandbox: Sandbox) -> None:
    handle = sdk_sandbox.commands.run("sleep 30", background=True, timeout=0)
    assert handle.kill()
    with pytest.raises(CommandExitException) as exited:
        handle.wait()
    assert exited.value.exit_code == -1
    assert exited.value.error == "signal: killed"


def test_files_like_envd(fake_e2b: FakeE2BServer, sdk_sandbox: Sandbox) -> None:
    home = fake_e2b.sandbox(sdk_sandbox.sandbox_id).home
    info = sdk_sandbox.files.write("a/b/c.bin", b"\0\xff")
    assert info.path == str(home / "a/b/c.bin")
    assert sdk_sandbox.files.read("a/b/c.bin", format="bytes") == bytearray(b"\0\xff")
    sdk_sandbox.files.write_files([{"path": "one", "data": b"1"}, {"path": "two", "data": "2"}])
    assert (home / "one").read_bytes() == b"1" and (home / "two").read_bytes() == b"2"
    with pytest.raises(FileNotFoundException):
        sdk_sandbox.files.read("missing")
    with pytest.raises(InvalidArgumentException, match="is a directory"):
        sdk_sandbox.files.read("a")
    assert sdk_sandbox.files.rename("a/b/c.bin", "moved/c.bin").path == str(home / "moved/c.bin")
    assert sdk_sandbox.files.exists("moved/c.bin") and not sdk_sandbox.files.exists("a/b/c.bin")
    assert not sdk_sandbox.files.make_dir("moved")
    assert sorted(e.name for e in sdk_sandbox.files.list(".")) == ["a", "moved", "one", "two"]
    sdk_sandbox.files.remove("moved")
    assert not (home / "moved").exists()


@pytest.mark.usefixtures("calm_listing")
def test_list_filters_and_pages(options: ApiParams) -> None:
    tag = os.urandom(4).hex()
    made = [Sandbox.create(timeout=60, metadata={"tag": tag, "n": str(i)}, **options) for i in range(3)]
    try:
        paginator = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=2, **options)
        first = paginator.next_items()
        assert paginator.has_next
        second = paginator.next_items()
        assert not paginator.has_next
        assert [s.sandbox_id for s in first + second] == [s.sandbox_id for s in made]
        assert first[0].metadata == {"tag": tag, "n": "0"}
        only = Sandbox.list(query=SandboxQuery(metadata={"tag": tag, "n": "1"}), **options).next_items()
        assert [s.sandbox_id for s in only] == [made[1].sandbox_id]
    finally:
        for sandbox in made:
            sandbox.kill()


def test_killed_sandbox_is_gone(options: ApiParams) -> None:
    sandbox = Sandbox.create(timeout=60, **options)
    assert sandbox.kill()
    assert not Sandbox.kill(sandbox.sandbox_id, **options)
    with pytest.raises(SandboxNotRunningException):
        sandbox.commands.run("true")


async def test_async_sdk_against_the_fake(fake_e2b: FakeE2BServer, sdk_async_sandbox: AsyncSandbox) -> None:
    result = await sdk_async_sandbox.commands.run("echo out; echo err >&2")
    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    with pytest.raises(CommandExitException):
        await sdk_async_sandbox.commands.run("exit 4")
    with pytest.raises((TimeoutException, CommandExitException)):
        await sdk_async_sandbox.commands.run("sleep 10", timeout=0.3)
    await sdk_async_sandbox.files.write("x/y.txt", b"async")
    assert await sdk_async_sandbox.files.read("x/y.txt", format="bytes") == bytearray(b"async")
    await sdk_async_sandbox.files.rename("x/y.txt", "x/z.txt")
    home = fake_e2b.sandbox(sdk_async_sandbox.sandbox_id).home
    assert (home / "x/z.txt").read_bytes() == b"async"
    paginator = AsyncSandbox.list(api_key=API_KEY, api_url=fake_e2b.url, sandbox_url=fake_e2b.url)
    assert sdk_async_sandbox.sandbox_id in {s.sandbox_id for s in await paginator.next_items()}


def test_deadline_moves_only_by_connect_and_set_timeout(fake_e2b: FakeE2BServer, options: ApiParams) -> None:
    """set_timeout moves the end either way; connect only lengthens it; use does
    not move it; at the end a timer kills the sandbox with no request needed."""
    sandbox = Sandbox.create(timeout=60, **options)
    stored = fake_e2b.sandbox(sandbox.sandbox_id)
    sandbox.set_timeout(600)
    assert abs((stored.end_at - dt.datetime.now(dt.UTC)).total_seconds() - 600) < 10
    Sandbox.connect(sandbox.sandbox_id, timeout=30, **options)
    assert (stored.end_at - dt.datetime.now(dt.UTC)).total_seconds() > 500
    sandbox.set_timeout(3)
    before = stored.end_at
    sandbox.commands.run("true")
    assert stored.end_at == before
    sandbox.commands.run("sleep 30", background=True, timeout=0)
    deadline = time.monotonic() + 10
    while sandbox.sandbox_id in fake_e2b.sandboxes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox.sandbox_id not in fake_e2b.sandboxes
    assert not stored.home.exists()
    while stored.processes and time.monotonic() < deadline:  # each stream ends once its process died
        time.sleep(0.05)
    assert not stored.processes


def test_maximum_uptime(tmp_path: Path) -> None:
    """Timeouts over the team's maximum are refused on create and connect;
    set_timeout stops at start plus the maximum."""
    fake = FakeE2BServer(api_key=API_KEY, base_dir=tmp_path, max_lifetime=3600)
    fake.start()
    try:
        params = ApiParams(api_key=API_KEY, api_url=fake.url, sandbox_url=fake.url)
        with pytest.raises(SandboxException, match="cannot be greater than 1 hours"):
            Sandbox.create(timeout=3601, **params)
        sandbox = Sandbox.create(timeout=60, **params)
        with pytest.raises(SandboxException, match="cannot be greater than 1 hours"):
            Sandbox.connect(sandbox.sandbox_id, timeout=7200, **params)
        sandbox.set_timeout(86_400)
        stored = fake.sandbox(sandbox.sandbox_id)
        assert (stored.end_at - stored.started_at).total_seconds() <= 3600
    finally:
        fake.stop()


def test_signal_deaths_read_as_go_prints_them(sdk_sandbox: Sandbox) -> None:
    for command, text in [
        ("kill -TERM $$", "signal: terminated"),
        ("kill -SEGV $$", "signal: segmentation fault"),
    ]:
        with pytest.raises(CommandExitException) as exited:
            sdk_sandbox.commands.run(command)
        assert (exited.value.exit_code, exited.value.error) == (-1, text)
