"""Modal's native streaming (``ModalSandbox._stream_command``): ``run`` with
callbacks and ``stream`` are one exec whose stdout and stderr the SDK streams,
with no polling, and an interrupted one kills its command's group with one
more exec. Through the real SDK and the fake backend, whose RPC counts pin
the round trips. (The conformance kit's process tests run the same path.)"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from sandbox_sdk.providers.modal import ModalSandbox
from tests.providers.modal.fake_server import FakeModalServer

#: The router RPCs of one streamed exec: its start, a read of each stream, its wait.
ONE_EXEC = Counter({"TaskExecStart": 1, "TaskExecStdioRead": 2, "TaskExecWait": 1})


def exec_calls(server: FakeModalServer, before: Counter[str]) -> Counter[str]:
    """The exec RPCs received since ``before``."""
    return Counter({name: n for name, n in (server.calls() - before).items() if name.startswith("TaskExec")})


def test_run_with_callbacks_is_one_streamed_exec(
    modal_server: FakeModalServer, sandbox: ModalSandbox
) -> None:
    """The first line arrives while the command still sleeps (its later file
    does not exist yet); no poll, no second exec."""
    later = modal_server.sandbox_directory(sandbox.id) / "later"
    seen: list[tuple[str, bool]] = []
    before = modal_server.calls()
    result = sandbox.run(
        "echo first; echo err >&2; sleep 3; touch later; echo last; exit 3",
        on_stdout=lambda text: seen.append((text, later.exists())),
        on_stderr=lambda text: seen.append((text, later.exists())),
    )
    assert exec_calls(modal_server, before) == ONE_EXEC
    assert seen[0][1] is False and ("last\n", True) in seen
    assert (result.stdout, result.stderr, result.exit_code) == ("first\nlast\n", "err\n", 3)


def test_stream_is_one_streamed_exec(modal_server: FakeModalServer, sandbox: ModalSandbox) -> None:
    later = modal_server.sandbox_directory(sandbox.id) / "later"
    seen: list[tuple[str, bool]] = []
    before = modal_server.calls()
    for event in sandbox.stream("echo first; sleep 3; touch later"):
        seen.append((event.kind, later.exists()))
    assert exec_calls(modal_server, before) == ONE_EXEC
    assert seen == [("stdout", False), ("exit", True)]


@pytest.mark.asyncio
async def test_async_run_is_one_streamed_exec(modal_server: FakeModalServer, sandbox: ModalSandbox) -> None:
    later = modal_server.sandbox_directory(sandbox.id) / "later"
    seen: list[tuple[str, bool]] = []
    before = modal_server.calls()
    result = await sandbox.arun(
        "echo first; sleep 3; touch later; echo last >&2",
        on_stdout=lambda text: seen.append((text, later.exists())),
        on_stderr=lambda text: seen.append((text, later.exists())),
    )
    assert exec_calls(modal_server, before) == ONE_EXEC
    assert seen == [("first\n", False), ("last\n", True)]
    assert (result.stdout, result.stderr, result.exit_code) == ("first\n", "last\n", 0)


def test_a_callback_raising_kills_the_group(modal_server: FakeModalServer, sandbox: ModalSandbox) -> None:
    """The kill is one more exec (``kill`` of the group whose id the command
    reported); its child, in the same group, never writes its file."""
    home = modal_server.sandbox_directory(sandbox.id)

    def stop(text: str) -> None:
        raise RuntimeError("enough")

    before = modal_server.calls()
    with pytest.raises(RuntimeError, match="enough"):
        sandbox.run("(sleep 2; touch late) & echo go; wait", on_stdout=stop)
    assert exec_calls(modal_server, before)["TaskExecStart"] == 2
    time.sleep(3)
    assert not (home / "late").exists()


@pytest.mark.asyncio
async def test_cancelling_kills_the_group(modal_server: FakeModalServer, sandbox: ModalSandbox) -> None:
    home = modal_server.sandbox_directory(sandbox.id)
    before = modal_server.calls()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(sandbox.arun("(sleep 2; touch late) & echo go; wait", on_stdout=print), 1)
    assert exec_calls(modal_server, before)["TaskExecStart"] == 2
    await asyncio.sleep(3)
    assert not (home / "late").exists()


def test_cwd_and_env_reach_the_command(modal_server: FakeModalServer, sandbox: ModalSandbox) -> None:
    sub = modal_server.sandbox_directory(sandbox.id) / "sub"
    sub.mkdir()
    result = sandbox.run('printf "%s|%s" "${PWD##*/}" "$X"', cwd=str(sub), env={"X": "a b"}, on_stdout=print)
    assert result.stdout == "sub|a b"
