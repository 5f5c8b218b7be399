"""What each operation costs: ``execute()`` round trips, command and output bytes.

Run: ``.venv/bin/python -m benchmarks.round_trips``. Prints a Markdown table
(docs/protocol.md keeps the latest one). Counts are exact, not timings. The
sandbox declares the default budgets of ``BaseSandbox`` (96 KiB commands,
1 MiB outputs), as a typical remote provider would.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from sandbox_sdk.limits import Limits
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.recording import RecordingSandbox

OPERATIONS: list[tuple[str, Callable[[RecordingSandbox], Any]]] = [
    ("ls (2 entries)", lambda s: s.ls("dir")),
    ("stat", lambda s: s.stat("dir/file.txt")),
    ("read (2 lines)", lambda s: s.read("dir/file.txt")),
    ("read_bytes (11 B)", lambda s: s.read_bytes("dir/file.txt")),
    ("write 1 KiB (new)", lambda s: s.write("dir/new.txt", "x" * 1024)),
    ("write 1 KiB (overwrite)", lambda s: s.write("dir/new.txt", "y" * 1024, overwrite=True)),
    ("write 1 MiB (staged)", lambda s: s.write("dir/big.bin", b"z" * (1 << 20))),
    ("edit", lambda s: s.edit("dir/file.txt", "beta", "gamma")),
    ("glob **/*.txt", lambda s: s.glob("**/*.txt")),
    ("grep alpha", lambda s: s.grep("alpha")),
    ("mkdir a/b/c", lambda s: s.mkdir("a/b/c")),
    ("delete file", lambda s: s.delete("dir/new.txt")),
    ("delete -r", lambda s: s.delete("a", recursive=True)),
    ("run (cwd, env, stdin)", lambda s: s.run("cat", cwd="dir", env={"A": "1"}, stdin=b"in")),
    ("run with on_stdout (0.5 s)", lambda s: s.run("sleep 0.5; echo hi", on_stdout=lambda text: None)),
    ("start + kill", lambda s: s.start("sleep 30").kill()),
    ("execute('true')", lambda s: s.execute("true")),
    ("upload_files 100 x 1 KiB", lambda s: s.upload_files([(f"up/{i}", b"u" * 1024) for i in range(100)])),
    ("download_files 100 x 1 KiB", lambda s: s.download_files([f"up/{i}" for i in range(100)])),
]


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        sandbox = RecordingSandbox(LocalSandbox(root))
        sandbox.limits = Limits()  # the defaults a remote provider starts from
        sandbox.write("dir/file.txt", "alpha\nbeta\n")
        sandbox.mkdir("dir/sub")
        sandbox.reset()
        print("| operation | execute() calls | command bytes | output bytes |")
        print("|---|---:|---:|---:|")
        for name, operation in OPERATIONS:
            operation(sandbox)
            trips = sandbox.reset()
            sent = sum(t.command_bytes for t in trips)
            received = sum(t.output_bytes for t in trips)
            print(f"| {name} | {len(trips)} | {sent:,} | {received:,} |")


if __name__ == "__main__":
    main()
