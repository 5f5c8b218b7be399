"""What isolation costs: one ``execute("true")`` under bubblewrap against the
unisolated local provider, measured in the same run on the same machine.

Run: ``.venv/bin/python -m benchmarks.execute_overhead [rounds]``. Each
round runs every operation on both providers in turn, so drift in machine
load hits them all alike. A bwrap command goes to its sandbox's long-lived jail (a connection
to the jail's server, which starts ``bash``); starting the jail, paid once
per sandbox, is timed separately (``create()``, whose health check is the
jail's first command, against the local provider's). Also times every
file operation that runs one ``python3`` script inside (``stat``, ``ls`` of
a directory of a few entries, ``read``, ``write`` and ``edit`` of a small
file, ``glob``, ``grep`` by the script (a fixed string, one regardless of
case, and a regex, which imports ``re``), ``mkdir`` and ``delete``) against a
bare ``python3 -I -S -c pass``, the floor of any such operation, in the
same run (the last column of those rows is their ratio to it), by the time
per call and, on the local provider, by the CPU time the command's
processes took (on a loaded machine the time per call varies with the
load; the CPU time far less: its rows show means, since the operation
server's share, counted in clock ticks, is only exact in sum). File
operations ask the sandbox's operation server first (docs/protocol.md, "The
operation server"): the ``local, no server`` rows are a local sandbox that
starts ``python3`` for each, as every operation did before the server; the
CPU time of a served one is its ``bash``'s and the server's worker's. The
``local, strict`` rows are a local sandbox that reuses no in-sandbox state
(``reuse_sandbox_state = False``, docs/security.md): every command carries
its script, which ``python3`` decompresses and compiles each time.
``grep`` runs the script, which searches
a few small files in Python and more with GNU grep where it finds it (a
second process start): the ``local, no grep`` rows are a local sandbox with
only ``bash`` and ``python3`` on ``PATH``, where the script always searches
with its own Python walk.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox_sdk import protocol
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider_kit import HostStateProvider
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.local import BASE_ENV, LocalProvider, LocalSandbox

WARMUP = 10
#: A bare interpreter start: the floor of a file operation.
FLOOR = "python3 -I -S -c pass"
#: The operations compared with :data:`FLOOR`.
FILE_OPERATIONS = (
    *("stat", "ls", "read", "write", "edit", "glob"),
    *("grep", "grep -i", "grep regex", "mkdir", "delete"),
)
#: The rows of the CPU time a local command took (its processes are children
#: of this one): unlike the time per call, it hardly depends on the load.
CPU = "{}, CPU ms"
#: A local sandbox whose ``PATH`` has ``python3`` only (no GNU grep).
NO_GREP = "local, no grep"
#: A local sandbox without the operation server.
NO_SERVER = "local, no server"
#: A local sandbox that reuses nothing it left in the sandbox (no installed script, no server).
STRICT = "local, strict"
#: The file ``read`` reads and ``edit`` edits (20 short lines), written before the rounds.
SMALL_FILE = "small.txt"
#: A glob that GNU grep's ``--include`` cannot take (a brace), so that
#: ``grep`` runs the script, not the shell's ``grep`` (docs/protocol.md, "grep").
SCRIPT_GREP_GLOB = "*.{txt,md}"


def measure(sandboxes: dict[str, BaseSandbox], rounds: int) -> dict[tuple[str, str], list[float]]:
    operations: dict[str, Callable[[BaseSandbox], object]] = {
        'execute("true")': lambda sandbox: sandbox.execute("true"),
        FLOOR: lambda sandbox: sandbox.execute(FLOOR),
        "stat": lambda sandbox: sandbox.stat("."),
        "ls": lambda sandbox: sandbox.ls("."),
        "read": lambda sandbox: sandbox.read(SMALL_FILE),
        "write": lambda sandbox: sandbox.write("written.txt", "one line\n" * 20, overwrite=True),
        "edit": lambda sandbox: sandbox.edit(SMALL_FILE, "one", "one", replace_all=True),
        "glob": lambda sandbox: sandbox.glob("*.txt"),
        "grep": lambda sandbox: sandbox.grep("line", glob=SCRIPT_GREP_GLOB),
        "grep -i": lambda sandbox: sandbox.grep("LINE", glob=SCRIPT_GREP_GLOB, ignore_case=True),
        "grep regex": lambda sandbox: sandbox.grep("l[i]ne", glob=SCRIPT_GREP_GLOB, fixed_strings=False),
        # In this order in every round: ``delete`` removes what ``mkdir`` made.
        "mkdir": lambda sandbox: sandbox.mkdir("made"),
        "delete": lambda sandbox: sandbox.delete("made"),
    }
    for sandbox in sandboxes.values():
        sandbox.write(SMALL_FILE, "one line\n" * 20)
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(WARMUP):
        for run in operations.values():
            for sandbox in sandboxes.values():
                run(sandbox)
    for _ in range(rounds):  # every round runs every operation: drift in load hits each alike
        for operation, run in operations.items():
            for name, sandbox in sandboxes.items():
                cpu = _children_cpu_ms()
                started = time.perf_counter()
                run(sandbox)
                samples.setdefault((operation, name), []).append((time.perf_counter() - started) * 1000)
                if name != "bwrap":  # a bwrap command runs in the jail, not as our child
                    samples.setdefault((operation, CPU.format(name)), []).append(_children_cpu_ms() - cpu)
    return samples


def _children_cpu_ms() -> float:
    """CPU time (user and system) of this process's ended children (the local
    provider's ``bash`` and what it ran) and of the local operation server's
    (its workers, which it waits for: remote/server.py, ``reap``)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000 + _server_children_cpu_ms()


def _server_children_cpu_ms() -> float:
    """The ended workers' CPU time of the operation server of the local
    sandboxes' scratch directory, in clock ticks (10 ms): exact only in sum."""
    directory = Path(BaseSandbox.scratch_dir, protocol.SCRIPTS_DIR % os.getuid())
    try:
        pid = int((directory / f"{protocol.shipped('server').name}.port").read_text().split()[2])
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, IndexError, ValueError):
        return 0.0
    return (int(fields[13]) + int(fields[14])) * 1000 / os.sysconf("SC_CLK_TCK")  # cutime, cstime


#: Sandboxes created (and deleted) per provider to time ``create()``.
CREATES = 20


def measure_create(providers: dict[str, HostStateProvider[Any]]) -> dict[tuple[str, str], list[float]]:
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(CREATES):
        for name, provider in providers.items():
            started = time.perf_counter()
            sandbox = provider.create()
            samples.setdefault(("create()", name), []).append((time.perf_counter() - started) * 1000)
            provider.delete(sandbox.id)
    return samples


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{when}, load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as state:
        providers: dict[str, HostStateProvider[Any]] = {
            "local": LocalProvider(Path(state, "local")),
            "bwrap": BwrapProvider(Path(state, "bwrap")),
        }
        sandboxes: dict[str, BaseSandbox] = {name: provider.create() for name, provider in providers.items()}
        sandboxes[NO_GREP] = LocalSandbox(_made(Path(state, NO_GREP)), env={"PATH": _python3_only(state)})
        sandboxes[NO_SERVER] = LocalSandbox(_made(Path(state, NO_SERVER)))
        sandboxes[NO_SERVER].operation_server = False
        sandboxes[STRICT] = LocalSandbox(_made(Path(state, STRICT)))
        sandboxes[STRICT].reuse_sandbox_state = False
        try:
            samples = measure(sandboxes, rounds) | measure_create(providers)
        finally:
            for name, provider in providers.items():
                provider.delete(sandboxes[name].id)
    print(f"{rounds} rounds each ({CREATES} for create), milliseconds per call (rows '..., CPU ms': CPU)\n")
    print("| operation | provider | median | mean | p90 | bwrap / local | / python3 (CPU rows: mean) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (operation, name), values in samples.items():
        median, mean = statistics.median(values), statistics.fmean(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        ratio = median / statistics.median(samples[(operation, "local")])
        shown = f"{ratio:.1f}x" if name == "bwrap" else ""
        average = statistics.fmean if name.endswith(CPU.format("")) else statistics.median
        floor = samples.get((FLOOR, name))
        to_floor = (
            f"{average(values) / average(floor):.2f}x" if floor and operation in FILE_OPERATIONS else ""
        )
        print(f"| {operation} | {name} | {median:.2f} | {mean:.2f} | {p90:.2f} | {shown} | {to_floor} |")


def _made(directory: Path) -> Path:
    directory.mkdir(parents=True)
    return directory


def _python3_only(state: str) -> str:
    """A directory holding only links to the local provider's ``bash`` and
    ``python3`` (which the provider and the command need)."""
    only = _made(Path(state, "python3-only"))
    for program in ("bash", "python3"):
        found = shutil.which(program, path=BASE_ENV["PATH"])
        if found is None:
            raise SystemExit(f"no {program} on the local provider's PATH")
        (only / program).symlink_to(found)
    return str(only)


if __name__ == "__main__":
    main()
