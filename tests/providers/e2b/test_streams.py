"""E2B's native streaming (``E2BSandbox._stream_command``): ``run`` with
callbacks and ``stream`` are one ``commands.run`` whose output envd streams,
with no polling, and an interrupted one kills its command's group. Through
the real SDK and the fake service, whose request log counts the round trips.
(The conformance kit's process tests run the same path on every E2B sandbox.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from sandbox_sdk.providers.e2b import E2BSandbox
from tests.providers.e2b.conftest import home_of
from tests.providers.e2b.fake_server import FakeE2BServer

START = ("POST", "/process.Process/Start")


def requests_during(fake: FakeE2BServer, call: Callable[[], object]) -> list[tuple[str, str]]:
    """The requests the fake received while ``call`` ran."""
    before = len(fake.requests)
    call()
    return fake.requests[before:]


def test_run_with_callbacks_is_one_streamed_command(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    """The first line arrives while the command still sleeps (its later file
    does not exist yet), and the whole run is one Start: no poll."""
    later = home_of(fake_e2b, e2b_sandbox) / "later"
    seen: list[tuple[str, bool]] = []

    def on_stdout(text: str) -> None:
        seen.append((text, later.exists()))

    results = []
    sent = requests_during(
        fake_e2b,
        lambda: results.append(
            e2b_sandbox.run(
                "echo first; echo err >&2; sleep 3; touch later; echo last; exit 3",
                on_stdout=on_stdout,
                on_stderr=lambda text: seen.append((text, later.exists())),
            )
        ),
    )
    (result,) = results
    assert sent == [START]
    assert seen[0] == ("first\n", False)
    assert ("last\n", True) in seen
    assert (result.stdout, result.stderr, result.exit_code) == ("first\nlast\n", "err\n", 3)


def test_stream_is_one_streamed_command(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    later = home_of(fake_e2b, e2b_sandbox) / "later"
    seen: list[tuple[str, bool]] = []
    before = len(fake_e2b.requests)
    for event in e2b_sandbox.stream("echo first; sleep 3; touch later"):
        seen.append((event.kind, later.exists()))
    assert fake_e2b.requests[before:] == [START]
    assert seen == [("stdout", False), ("exit", True)]


@pytest.mark.asyncio
async def test_async_run_is_one_streamed_command(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    later = home_of(fake_e2b, e2b_sandbox) / "later"
    seen: list[tuple[str, bool]] = []
    before = len(fake_e2b.requests)
    result = await e2b_sandbox.arun(
        "echo first; sleep 3; touch later; echo last >&2",
        on_stdout=lambda text: seen.append((text, later.exists())),
        on_stderr=lambda text: seen.append((text, later.exists())),
    )
    assert fake_e2b.requests[before:] == [START]
    assert seen == [("first\n", False), ("last\n", True)]
    assert (result.stdout, result.stderr, result.exit_code) == ("first\n", "last\n", 0)
    events = [event async for event in e2b_sandbox.astream("printf x; exit 2")]
    assert [(event.kind, event.text, event.exit_code) for event in events] == [
        ("stdout", "x", None),
        ("exit", "", 2),
    ]


def test_a_callback_raising_kills_the_group_at_once(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    """The kill is one more command (``kill`` of the group), not a record to
    clean up; the command's child, in the same group, never writes its file."""
    home = home_of(fake_e2b, e2b_sandbox)

    def stop(text: str) -> None:
        raise RuntimeError("enough")

    before = len(fake_e2b.requests)
    with pytest.raises(RuntimeError, match="enough"):
        e2b_sandbox.run("(sleep 2; touch late) & echo go; wait", on_stdout=stop)
    assert fake_e2b.requests[before:] == [START, START]
    time.sleep(3)
    assert not (home / "late").exists()


@pytest.mark.asyncio
async def test_cancelling_kills_the_group(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    before = len(fake_e2b.requests)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(
            e2b_sandbox.arun("(sleep 2; touch late) & echo go; wait", on_stdout=lambda text: None), 1
        )
    assert fake_e2b.requests[before:] == [START, START]
    await asyncio.sleep(3)
    assert not (home / "late").exists()


def test_timeout_kills_the_group(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    pieces: list[str] = []
    result = e2b_sandbox.run("(sleep 3; touch late) & echo go; wait", timeout=1, on_stdout=pieces.append)
    assert (pieces, result.exit_code, result.timed_out) == (["go\n"], 124, True)
    time.sleep(3)
    assert not (home / "late").exists()


def test_stdin_takes_the_derived_path(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    """envd takes stdin through separate calls the fake does not serve: the
    derived path (a detached command and long polls) runs it instead."""
    pieces: list[str] = []
    before = len(fake_e2b.requests)
    result = e2b_sandbox.run("cat", stdin=b"fed\n", on_stdout=pieces.append)
    assert (pieces, result.stdout) == (["fed\n"], "fed\n")
    assert fake_e2b.requests[before:].count(START) > 1


@pytest.mark.asyncio
async def test_a_missing_cwd_is_file_not_found(e2b_sandbox: E2BSandbox) -> None:
    """envd refuses it at the start, as an invalid argument; ``run`` says what it is."""
    with pytest.raises(FileNotFoundError, match="does not exist"):
        e2b_sandbox.run("true", cwd="missing", on_stdout=print)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        await e2b_sandbox.arun("true", cwd="missing", on_stdout=print)


def test_cwd_and_env_reach_the_command(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    (home_of(fake_e2b, e2b_sandbox) / "sub").mkdir()
    before = len(fake_e2b.requests)
    result = e2b_sandbox.run('printf "%s|%s" "${PWD##*/}" "$X"', cwd="sub", env={"X": "a b"}, on_stdout=print)
    assert fake_e2b.requests[before:] == [START]
    assert result.stdout == "sub|a b"
