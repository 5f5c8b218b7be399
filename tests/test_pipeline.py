"""Pipelined transfers: a window of calls in flight, replies taken in call
order, failures raised only once the calls in flight are done, and a window
of one that runs without threads."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import pytest

from sandbox_sdk import _core
from sandbox_sdk._calls import Call
from sandbox_sdk._session import Session
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import InjectedFault, LimitedSandbox
from tests.transfer.transfer_helpers import SMALL_COMMAND_BYTES, SMALL_OUTPUT_BYTES, leftovers

DATA = os.urandom(200_000)  # about 12 chunks each way behind the small limits


@dataclass(frozen=True)
class Raw(Call[ExecuteResponse]):
    """A command sent as it is, its response the reply: what the pipeline
    drives needs only to be a call."""

    text: str
    timeout: float | None = None
    what: str = "raw"

    def command(self, limits: Limits, scripts: Session) -> tuple[str, str]:
        return self.text, ""

    def decode(self, response: ExecuteResponse, nonce: str) -> ExecuteResponse:
        return response


#: Longest a delayed call waits for the window to fill (see ``TimedSandbox``).
FILL_SECONDS = 5.0
#: Longest a delayed call is held by ``TimedSandbox.hold`` (a bound, never reached when the test passes).
HOLD_SECONDS = 30.0


class TimedSandbox(LimitedSandbox):
    """Small limits; call ``n`` (1-based) sleeps ``delays[n]`` before it runs,
    or raises if ``n`` is in ``failures``; every call's span is recorded.

    ``calls_in_flight`` counts ``execute`` calls begun and not returned. A
    delayed call first waits (up to ``FILL_SECONDS``) until as many calls as
    the window holds are in flight: a pipeline that keeps its window full gets
    there as soon as its threads start, however loaded the machine, and one
    that does not never does, so ``max_calls_in_flight`` falls short. With
    ``hold`` set to an event, a delayed call in a worker thread (a pipeline's)
    then waits for it too."""

    def __init__(self, local: LocalSandbox, delays: dict[int, float], failures: frozenset[int] = frozenset()):
        super().__init__(local, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES)
        self.delays = delays
        self.failures = failures
        self.spans: dict[int, tuple[float, float]] = {}
        self.calls_in_flight = 0
        self.max_calls_in_flight = 0
        self.window_filled = threading.Event()
        self.hold: threading.Event | None = None

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        number = self._count()
        with self._lock:
            self.calls_in_flight += 1
            self.max_calls_in_flight = max(self.max_calls_in_flight, self.calls_in_flight)
            if self.calls_in_flight >= self.limits.transfer_concurrency:
                self.window_filled.set()
        started = time.monotonic()
        try:
            if number in self.delays:
                self.window_filled.wait(FILL_SECONDS)
                if self.hold is not None and threading.current_thread() is not threading.main_thread():
                    self.hold.wait(HOLD_SECONDS)
            time.sleep(self.delays.get(number, 0.0))
            if number in self.failures:
                raise InjectedFault(f"call {number} failed")
            return self._run(command, timeout)
        finally:
            self.spans[number] = (started, time.monotonic())
            with self._lock:
                self.calls_in_flight -= 1


def slow_early_calls(count: int = 12) -> dict[int, float]:
    """Earlier calls take longer, so replies arrive out of call order."""
    return {n: 0.02 * (count - n) for n in range(2, count)}


def test_sync_download_keeps_the_window_full_and_reassembles_in_order(local: LocalSandbox) -> None:
    (local.root_dir / "big.bin").write_bytes(DATA)
    sandbox = TimedSandbox(local, slow_early_calls())
    assert sandbox.read_bytes("big.bin") == DATA
    assert sandbox.max_calls_in_flight == sandbox.limits.transfer_concurrency


def test_sync_upload_keeps_the_window_full_and_commits_last(local: LocalSandbox) -> None:
    sandbox = TimedSandbox(local, slow_early_calls())
    assert sandbox.upload_files([("big.bin", DATA)])[0].error is None
    assert (local.root_dir / "big.bin").read_bytes() == DATA
    assert sandbox.max_calls_in_flight == sandbox.limits.transfer_concurrency
    last = max(sandbox.spans)
    assert all(end <= sandbox.spans[last][0] for n, (_, end) in sandbox.spans.items() if n != last)


async def test_async_download_reassembles_in_order(local: LocalSandbox) -> None:
    (local.root_dir / "big.bin").write_bytes(DATA)
    sandbox = TimedSandbox(local, slow_early_calls())
    assert await sandbox.aread_bytes("big.bin") == DATA
    assert sandbox.max_calls_in_flight == sandbox.limits.transfer_concurrency


def test_a_window_of_one_runs_calls_one_by_one_without_threads(
    local: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_threads(*args: object, **kwargs: object) -> None:
        raise AssertionError("a window of one must not start threads")

    monkeypatch.setattr(_core, "ThreadPoolExecutor", no_threads)
    (local.root_dir / "big.bin").write_bytes(DATA)
    sandbox = TimedSandbox(local, {})
    sandbox.limits = replace(sandbox.limits, transfer_concurrency=1)
    assert sandbox.read_bytes("big.bin") == DATA
    assert sandbox.upload_files([("up.bin", DATA)])[0].error is None
    assert sandbox.max_in_flight == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failed_call_is_raised_after_the_calls_in_flight_finish(local: LocalSandbox, mode: str) -> None:
    """The abort must not race a chunk still being written: call 3 fails at
    once while call 2 is still running; the clean-up starts after call 2 ends."""
    (local.root_dir / "dest.bin").write_bytes(b"old")
    sandbox = TimedSandbox(local, {2: 0.5}, failures=frozenset({3}))
    sandbox.limits = replace(sandbox.limits, transfer_concurrency=2)
    if mode == "sync":
        [response] = sandbox.upload_files([("dest.bin", DATA)])
    else:
        [response] = anyio.run(sandbox.aupload_files, [("dest.bin", DATA)])
    assert response.error is not None
    assert "call 3 failed" in response.error
    clean_up = max(sandbox.spans)  # the abort
    assert sandbox.spans[clean_up][0] >= sandbox.spans[2][1]
    assert clean_up == 4  # nothing was sent after the failure but the abort
    assert (local.root_dir / "dest.bin").read_bytes() == b"old"
    assert leftovers(local.root_dir) == []


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_during_a_sync_pipeline_cleans_up_without_waiting(local: LocalSandbox) -> None:
    """A real SIGINT once the window is full of calls the test holds: the upload
    is aborted while they are still held (it did not wait for them, nor sit out
    the upload), and once they are let go and end, nothing is left."""
    (local.root_dir / "dest.bin").write_bytes(b"old")
    sandbox = TimedSandbox(local, {n: 0.0 for n in range(2, 20)})
    sandbox.hold = threading.Event()

    def interrupt_when_full() -> None:
        if sandbox.window_filled.wait(FILL_SECONDS):
            os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt_when_full, daemon=True)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sandbox.upload_files([("dest.bin", DATA)])
        assert sandbox.calls_in_flight == sandbox.limits.transfer_concurrency  # all still held
    finally:
        sandbox.hold.set()
        interrupter.join()
    deadline = time.monotonic() + 5
    while sandbox.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (local.root_dir / "dest.bin").read_bytes() == b"old"
    assert leftovers(local.root_dir) == []


def test_pipeline_threads_are_released(local: LocalSandbox) -> None:
    """No thread the reads started outlives them (threads of earlier tests
    may end meanwhile: they are not counted)."""
    (local.root_dir / "big.bin").write_bytes(DATA)
    before = set(threading.enumerate())
    sandbox = TimedSandbox(local, {})
    for _ in range(3):
        assert sandbox.read_bytes("big.bin") == DATA
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(threading.enumerate()) - before == set()


def test_replies_are_consumed_in_call_order_whatever_order_they_finish_in() -> None:
    """The driver itself, on calls that finish in reverse order."""

    class Echo(_core.SandboxCore):
        limits = Limits(transfer_concurrency=4)

        @property
        def id(self) -> str:
            return "echo"

        def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
            number = int(command)
            time.sleep(0.01 * (10 - number))
            return ExecuteResponse(output=command, exit_code=0)

    seen: list[str] = []
    calls = (Raw(str(n)) for n in range(10))

    def operation() -> _core.Operation[None]:
        yield _core.Pipeline(calls, lambda reply: seen.append(reply.output), window=4)

    Echo()._drive(operation())
    assert seen == [str(n) for n in range(10)]
    seen.clear()
    calls = (Raw(str(n)) for n in range(10))
    anyio.run(Echo()._adrive, operation())
    assert seen == [str(n) for n in range(10)]


def test_local_sandbox_execute_is_thread_safe(tmp_path: Path) -> None:
    """The sync pipeline calls ``execute()`` from several threads at once."""
    sandbox = LocalSandbox(tmp_path)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(lambda n: sandbox.execute(f"echo {n}").output, range(16)))
    assert outputs == [f"{n}\n" for n in range(16)]
