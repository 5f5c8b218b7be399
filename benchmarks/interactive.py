"""What driving a process while it runs costs, against ``execute("true")`` in the same run.

Run: ``.venv/bin/python -m benchmarks.interactive [rounds] [--providers local bwrap e2b-fake modal-fake]``
(the providers of benchmarks/processes.py; the fakes measure the SDK's paths
and the SDKs' own cost, not the services' network). Rounds alternate between
providers so drift in machine load hits both alike:

- a keystroke's echo: ``write_stdin("x")`` to ``cat`` on a terminal
  (``start(pty=...)``), until the terminal's echo of it is read back
  (``Process.stream`` from the offset before it), over the baseline;
- a line through a pipe: ``write_stdin`` of one line to ``cat``
  (``start(stdin=PIPE)``): the write's own time, over the baseline;
- round trips per second while nothing happens, of a follower waiting on an
  idle terminal and of a watch on an idle directory, against the one per
  ``Limits.process_poll_wait`` that the long-poll rule allows (both are
  ``execute()`` calls counted over a quiet window, then woken).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.processes import (
    BASELINE,
    PROVIDERS,
    Counted,
    baseline,
    ms,
    parse_options,
    print_ratios,
    sample_rounds,
)
from sandbox_sdk import PIPE, PtySize
from sandbox_sdk.base import BaseSandbox

#: Seconds an idle follower or watch is counted for.
IDLE_WINDOW = 6.0


def echo_ms(sandbox: BaseSandbox) -> float:
    """Milliseconds from a key written to a terminal to its echo read back."""
    process = sandbox.start("cat", pty=PtySize())
    try:
        at = len(process.read().stdout)
        started = time.perf_counter()
        process.write_stdin("x")
        for event in process.stream(since=at):
            if "x" in event.text:
                return ms(time.perf_counter() - started)
        raise RuntimeError("the terminal ended before its echo")
    finally:
        process.kill()


def pipe_write_ms(sandbox: BaseSandbox) -> float:
    """Milliseconds of one ``write_stdin`` of a line to ``cat`` on a pipe."""
    process = sandbox.start("cat > /dev/null", stdin=PIPE)
    try:
        started = time.perf_counter()
        process.write_stdin(b"a line\n")
        return ms(time.perf_counter() - started)
    finally:
        process.kill()


def idle_rate(sandbox: BaseSandbox, events: Iterator[Any], wake: Callable[[], object]) -> float:
    """``execute()`` calls per second while ``events`` (past its first item) waits
    on nothing for :data:`IDLE_WINDOW`; ``wake`` then makes its next item come."""
    next(events)
    counter = Counted(sandbox)
    follower = threading.Thread(target=lambda: next(events), daemon=True)
    follower.start()
    started = time.perf_counter()
    time.sleep(IDLE_WINDOW)  # the window measured
    calls, elapsed = counter.calls, time.perf_counter() - started
    wake()
    follower.join(60)
    del sandbox.execute
    return calls / elapsed


def idle_terminal_rate(sandbox: BaseSandbox) -> float:
    process = sandbox.start("cat", pty=PtySize())
    try:
        process.write_stdin("first\n")
        return idle_rate(sandbox, process.stream(), lambda: process.write_stdin("wake\n"))
    finally:
        process.kill()


def idle_watch_rate(sandbox: BaseSandbox) -> float:
    directory = f"idle-watch-{time.monotonic_ns()}"
    sandbox.mkdir(directory)
    events = sandbox.watch(directory)
    try:
        return idle_rate(sandbox, events, lambda: sandbox.write(f"{directory}/wake", "x"))
    finally:
        events.close()
        sandbox.delete(directory, recursive=True)


def main() -> None:
    options = parse_options(__doc__)
    measures: dict[str, Callable[[BaseSandbox], float]] = {
        BASELINE: baseline,
        "a keystroke's echo (terminal)": echo_ms,
        "write_stdin of a line (pipe)": pipe_write_ms,
    }
    rates: dict[tuple[str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as state, ExitStack() as stack:
        sandboxes = {name: PROVIDERS[name](Path(state), stack) for name in options.providers}
        samples = sample_rounds(sandboxes, measures, options.rounds)
        for name, sandbox in sandboxes.items():
            allowed = 1 / sandbox.limits.process_poll_wait
            rates[("idle terminal (a follower waiting)", name)] = (idle_terminal_rate(sandbox), allowed)
            rates[("idle watch", name)] = (idle_watch_rate(sandbox), allowed)
    print_ratios(samples, options.rounds)
    print("\n| round trips per second while idle | provider | measured | one per poll wait |")
    print("|---|---|---:|---:|")
    for (label, name), (rate, allowed) in rates.items():
        print(f"| {label} | {name} | {rate:.2f} | {allowed:.2f} |")


if __name__ == "__main__":
    main()
