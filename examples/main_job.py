"""The main job, end to end, in a bubblewrap sandbox, printing what happens.

Set up a provider, create a sandbox, seed it with a small project, run code
in it, edit and search its files, download the artifact it made, and delete
it. Run: ``scripts/demo`` (or ``.venv/bin/python -m examples.main_job
[output-dir]``). Nothing is left behind but the downloaded artifact.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from sandbox_sdk import get_provider
from sandbox_sdk.providers.bwrap import BwrapProvider

STATS_PY = b"""\
import csv, statistics, sys

rows = list(csv.DictReader(open(sys.argv[1])))
values = [float(row["value"]) for row in rows]
print(f"rows: {len(values)}")
print(f"mean: {statistics.mean(values):.2f}")
"""
NUMBERS_CSV = b"name,value\nalpha,3\nbeta,5\ngamma,10\n"


def step(title: str) -> None:
    print(f"\n== {title}")


def main(output_dir: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="sandbox-sdk-demo-") as state_dir:
        step("set up: the bubblewrap provider (fails loudly if it cannot isolate)")
        provider = get_provider("bwrap", state_dir=state_dir)
        assert isinstance(provider, BwrapProvider)
        print(f"state directory: {state_dir}")

        step("create a sandbox for one conversation thread")
        sandbox = provider.get_or_create(labels={"thread": "demo"})
        again = provider.get_or_create(labels={"thread": "demo"})
        print(f"sandbox {sandbox.id}; asking again by label gives {again.id}")
        try:
            step("seed it with files")
            seeds = [("app/stats.py", STATS_PY), ("data/numbers.csv", NUMBERS_CSV)]
            for response in sandbox.upload_files(seeds):
                print(f"uploaded {response.path}: {'ok' if response.error is None else response.error}")

            step("run code in it")
            result = sandbox.execute(
                "mkdir -p out && python3 app/stats.py data/numbers.csv | tee out/report.txt"
            )
            print(result.output.rstrip(), f"\n(exit {result.exit_code})")

            step("edit a file and run again")
            sandbox.edit("app/stats.py", 'print(f"mean:', 'print(f"max: {max(values):.2f}")\nprint(f"mean:')
            result = sandbox.execute("python3 app/stats.py data/numbers.csv | tee out/report.txt")
            print(result.output.rstrip())

            step("search its files")
            print("glob **/*.py:", [info.path for info in sandbox.glob("**/*.py").matches])
            for match in sandbox.grep("values", glob="*.py").matches:
                print(f"grep values: {match.path}:{match.line_number}: {match.line.strip()}")

            step("what it cannot do")
            print("host home:", sandbox.execute(f"ls {Path.home()}").output.strip())
            connect = "import socket; socket.create_connection(('1.1.1.1', 53), 2)"
            print("network:", sandbox.execute(f'python3 -c "{connect}" 2>&1 | tail -1').output.strip())
            print("processes it sees:", sandbox.execute("ps -e --no-headers | wc -l").output.strip())

            step("download the artifact")
            output_dir.mkdir(parents=True, exist_ok=True)
            size = sandbox.download_file("out/report.txt", output_dir / "report.txt")
            print(f"{output_dir / 'report.txt'} ({size} bytes):")
            print((output_dir / "report.txt").read_text().rstrip())
        finally:
            step("delete it")
            provider.delete(sandbox_id=sandbox.id)
            print(f"deleted {sandbox.id}; sandboxes left: {len(provider.list().items)}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "demo-output"))
