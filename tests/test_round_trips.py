"""Every file operation costs exactly one execute() round trip; an idle
follower (a terminal, a watch) one per long-poll wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandbox_sdk import PtySize
from sandbox_sdk._session import MAX_FAILED_LAUNCHES, session_of
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.recording import RecordingSandbox


@pytest.fixture
def sandbox(local: LocalSandbox) -> RecordingSandbox:
    """A sandbox whose operation server runs: the commands measured are the
    steady state's, not the one that starts a server (the command after the
    first to find none carries the launch). Without this, what is measured
    depends on whether an earlier test left a server in the user's scripts
    directory that has not idled out yet."""
    recording = RecordingSandbox(local)
    recording.write("dir/file.txt", "alpha\nbeta\n")
    session = session_of(recording)
    for _ in range(MAX_FAILED_LAUNCHES + 1):
        if not session.server_wanted:
            break
        recording.ls(".")  # carries the launch
    recording.reset()
    return recording


OPERATIONS: dict[str, Callable[[RecordingSandbox], Any]] = {
    "ls": lambda s: s.ls("dir"),
    "stat": lambda s: s.stat("dir/file.txt"),
    "read": lambda s: s.read("dir/file.txt"),
    "read_bytes": lambda s: s.read_bytes("dir/file.txt"),
    "write (new)": lambda s: s.write("dir/new.txt", "x"),
    "write (overwrite)": lambda s: s.write("dir/file.txt", "y", overwrite=True),
    "edit": lambda s: s.edit("dir/file.txt", "beta", "gamma"),
    "glob": lambda s: s.glob("**/*.txt"),
    "grep": lambda s: s.grep("alpha"),
    "delete": lambda s: s.delete("dir/file.txt"),
    "delete (recursive)": lambda s: s.delete("dir", recursive=True),
    "mkdir": lambda s: s.mkdir("a/b/c"),
    "run (cwd, env, stdin)": lambda s: s.run("cat", cwd="dir", env={"A": "1"}, stdin=b"in"),
    "upload_files (3 small)": lambda s: s.upload_files([(f"u{i}", b"1") for i in range(3)]),
    "download_files (2 small)": lambda s: s.download_files(["dir/file.txt", "dir/file.txt"]),
}


@pytest.mark.parametrize("name", OPERATIONS)
def test_one_round_trip(sandbox: RecordingSandbox, name: str) -> None:
    OPERATIONS[name](sandbox)
    trips = sandbox.reset()
    assert len(trips) == 1
    # small operations send small commands: the script (up to 7.5 KB packed)
    # and its bootstrap; grep's also carries GNU grep's command and the
    # script that takes over in the same round trip (never installed, since
    # the shell path answers without it: ~10 KB in all)
    assert trips[0].command_bytes < (11 if name == "grep" else 9) * 1024


def test_a_failing_operation_is_still_one_round_trip(sandbox: RecordingSandbox) -> None:
    with pytest.raises(FileNotFoundError):
        sandbox.read("missing")
    assert len(sandbox.reset()) == 1


def test_hundred_small_files_pack_into_few_round_trips(sandbox: RecordingSandbox) -> None:
    files = [(f"many/{i}.bin", bytes([i]) * 1024) for i in range(100)]
    assert all(r.error is None for r in sandbox.upload_files(files))
    assert len(sandbox.reset()) <= 2
    downloaded = sandbox.download_files([path for path, _ in files])
    assert [r.content for r in downloaded] == [data for _, data in files]
    assert len(sandbox.reset()) <= 2


#: Seconds an idle follower is watched for in the idle tests below.
IDLE_WINDOW = 6.0


def idle_round_trips(sandbox: RecordingSandbox, events: Iterator[Any], wake: Callable[[], Any]) -> float:
    """Round trips per long-poll wait while ``events`` (past its first item)
    waits on an idle process, over :data:`IDLE_WINDOW`; ``wake`` then makes
    the next item come, so the follower's thread ends."""
    next(events)
    sandbox.reset()
    follower = threading.Thread(target=lambda: next(events), daemon=True)
    follower.start()
    started = time.monotonic()
    time.sleep(IDLE_WINDOW)  # the window measured, not a wait for a condition
    trips = len(sandbox.reset())
    elapsed = time.monotonic() - started
    wake()
    follower.join(timeout=60)
    return trips / (elapsed / sandbox.limits.process_poll_wait)


def test_an_idle_terminal_costs_a_round_trip_per_poll_wait(sandbox: RecordingSandbox) -> None:
    process = sandbox.start("cat", pty=PtySize())
    try:
        process.write_stdin("first\n")
        assert idle_round_trips(sandbox, process.stream(), lambda: process.write_stdin("wake\n")) <= 1.5
    finally:
        process.kill()


def test_an_idle_watch_costs_a_round_trip_per_poll_wait(sandbox: RecordingSandbox) -> None:
    events = sandbox.watch("dir")
    try:
        assert idle_round_trips(sandbox, events, lambda: sandbox.write("dir/wake", "x")) <= 1.5
    finally:
        events.close()
