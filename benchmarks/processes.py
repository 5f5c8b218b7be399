"""What the process model costs, against ``execute("true")`` in the same run.

Run: ``.venv/bin/python -m benchmarks.processes [rounds] [--providers local bwrap e2b-fake modal-fake]``.
``e2b-fake`` and ``modal-fake`` are E2B and Modal through the project's fake
services on 127.0.0.1 (tests/providers/<name>/fake_server.py): they measure
the native streaming paths (one ``commands.run`` or one exec whose output
the SDK streams, no polls) and the SDKs' own cost, not the services'
network or workers.
Per provider, rounds alternating between providers so drift in machine load
hits both alike:

- ``execute("true")``: the baseline round trip; ``stat``, a round trip of a
  script, for scale (a poll is one too).
- ``run("echo hi; sleep 2", on_stdout=...)``: time to the first output byte
  (the callback's first call) and to the end, each over the baseline.
- a poll round trip: ``Process.read()`` of a running process (a ``follow``
  that does not wait), over the baseline.
- polls per second of runtime at the default interval, for a quiet command
  (``sleep 6``) and a chatty one (a line every 50 ms for 6 s): ``execute()``
  calls counted during ``run`` with a callback, over its runtime (none on a
  native streaming path).
- ``start`` + ``kill``: the two round trips of a background command started
  and killed, over the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.e2b import E2BProvider
from sandbox_sdk.providers.local import LocalProvider
from tests.providers.e2b.fake_server import FakeE2BServer
from tests.providers.modal.conftest import make_provider as modal_provider
from tests.providers.modal.fake_server import FakeModalServer

#: The only API key the fake E2B service is given.
FAKE_E2B_KEY = "e2b_benchmark_key"


def e2b_fake(state: Path, stack: ExitStack) -> BaseSandbox:
    """A sandbox of the fake E2B service, which ``stack`` stops at the end."""
    (state / "e2b").mkdir()
    fake = FakeE2BServer(api_key=FAKE_E2B_KEY, base_dir=state / "e2b")
    fake.start()
    stack.callback(fake.stop)
    provider = E2BProvider(api_key=FAKE_E2B_KEY, api_url=fake.url, sandbox_url=fake.url)
    sandbox = provider.create()
    stack.callback(provider.delete, sandbox_id=sandbox.id)
    return sandbox


def modal_fake(state: Path, stack: ExitStack) -> BaseSandbox:
    """A sandbox of the fake Modal backend, which ``stack`` stops at the end."""
    server = stack.enter_context(FakeModalServer().running())
    provider = modal_provider(server, app_name="benchmark-processes")
    sandbox = provider.create()
    stack.callback(provider.delete, sandbox_id=sandbox.id)
    return sandbox


PROVIDERS: dict[str, Callable[[Path, ExitStack], BaseSandbox]] = {
    "local": lambda state, stack: LocalProvider(state / "local").create(),
    "bwrap": lambda state, stack: BwrapProvider(state / "bwrap").create(),
    "e2b-fake": e2b_fake,
    "modal-fake": modal_fake,
}
QUIET = "sleep 6"
CHATTY = "for i in $(seq 120); do echo line $i; sleep 0.05; done"


class Counted:
    """Counts a sandbox's ``execute()`` calls while it is in use."""

    def __init__(self, sandbox: BaseSandbox) -> None:
        self.calls = 0
        inner = sandbox.execute

        def counted(command: str, *, timeout: float | None = None) -> ExecuteResponse:
            self.calls += 1
            return inner(command, timeout=timeout)

        sandbox.execute = counted  # type: ignore[method-assign]


def ms(seconds: float) -> float:
    return seconds * 1000


def first_byte(sandbox: BaseSandbox) -> tuple[float, float]:
    """Milliseconds to the first output byte of a followed run, and to its end."""
    first: list[float] = []
    started = time.perf_counter()
    sandbox.run("echo hi; sleep 2", on_stdout=lambda text: first.append(time.perf_counter()))
    return ms(first[0] - started), ms(time.perf_counter() - started)


def poll_trip(sandbox: BaseSandbox) -> float:
    process = sandbox.start("sleep 30")
    try:
        started = time.perf_counter()
        process.read()
        return ms(time.perf_counter() - started)
    finally:
        process.kill()


def start_kill(sandbox: BaseSandbox) -> float:
    started = time.perf_counter()
    sandbox.start("sleep 30").kill()
    return ms(time.perf_counter() - started)


def polls_per_second(sandbox: BaseSandbox, command: str) -> float:
    counter = Counted(sandbox)
    started = time.perf_counter()
    sandbox.run(command, on_stdout=lambda text: None)
    elapsed = time.perf_counter() - started
    del sandbox.execute
    polls = counter.calls - 2 if counter.calls else 0  # less spawn and forget; native: no call
    return polls / elapsed


BASELINE = 'execute("true")'


def parse_options(doc: str | None) -> argparse.Namespace:
    """A benchmark's command line: ``[rounds] [--providers NAME...]`` (of :data:`PROVIDERS`)."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=10)
    parser.add_argument("--providers", nargs="+", default=list(PROVIDERS), choices=list(PROVIDERS))
    return parser.parse_args()


def baseline(sandbox: BaseSandbox) -> float:
    """Milliseconds of ``execute("true")``: the round trip every ratio is against."""
    return ms(timed(lambda: sandbox.execute("true")))


def sample_rounds(
    sandboxes: dict[str, BaseSandbox], measures: dict[str, Callable[[BaseSandbox], float]], rounds: int
) -> dict[tuple[str, str], list[float]]:
    """Each measure of each sandbox ``rounds`` times, rounds alternating between
    the sandboxes so that drift in the machine's load hits them alike."""
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for measure, run in measures.items():
            for name, sandbox in sandboxes.items():
                samples.setdefault((measure, name), []).append(run(sandbox))
    return samples


def print_ratios(samples: dict[tuple[str, str], list[float]], rounds: int) -> None:
    """The medians of ``samples`` (whose measures include :data:`BASELINE`), each
    over its provider's baseline, as a Markdown table."""
    print(f"{rounds} rounds, milliseconds (median), ratio to the provider's {BASELINE}\n")
    print(f"| measure | provider | median ms | / {BASELINE} |")
    print("|---|---|---:|---:|")
    for (measure, name), values in samples.items():
        median = statistics.median(values)
        base = statistics.median(samples[(BASELINE, name)])
        print(f"| {measure} | {name} | {median:.1f} | {median / base:.1f}x |")


def main() -> None:
    options = parse_options(__doc__)
    measures: dict[str, Callable[[BaseSandbox], float]] = {
        BASELINE: baseline,
        "stat (a script round trip, for scale)": lambda sandbox: ms(timed(lambda: sandbox.stat("."))),
        "first output byte": lambda sandbox: first_byte(sandbox)[0],
        "followed run to its end (2 s command)": lambda sandbox: first_byte(sandbox)[1],
        "poll round trip (read)": poll_trip,
        "start + kill": start_kill,
    }
    with tempfile.TemporaryDirectory() as state, ExitStack() as stack:
        sandboxes = {name: PROVIDERS[name](Path(state), stack) for name in options.providers}
        samples = sample_rounds(sandboxes, measures, options.rounds)
        rates = {}
        for name, sandbox in sandboxes.items():
            for label, command in (("quiet", QUIET), ("chatty", CHATTY)):
                rates[(label, name)] = f"{polls_per_second(sandbox, command):.2f}"
    print_ratios(samples, options.rounds)
    print("\n| polls per second of runtime | provider | at the default interval |")
    print("|---|---|---:|")
    for (label, name), rate in rates.items():
        print(f"| {label} ({QUIET if label == 'quiet' else 'a line every 50 ms'}) | {name} | {rate} |")


def timed(call: Callable[[], object]) -> float:
    """Seconds ``call`` takes."""
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
