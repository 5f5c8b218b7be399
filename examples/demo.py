"""The main job, end to end: create a sandbox, seed it, run code, edit and
search files, take an artifact out, delete the sandbox, printing each step.

Run it with ``scripts/demo`` (sets the machine up first) or
``.venv/bin/python -m examples.demo [--provider NAME]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sandbox_sdk import get_provider

PROGRAM = """\
import json, statistics
values = [float(line) for line in open("data/values.txt")]
report = {"count": len(values), "mean": statistics.mean(values), "stdev": statistics.stdev(values)}
json.dump(report, open("out/report.json", "w"), indent=2)
print("analysed", len(values), "values")
"""


def step(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--provider", default="bwrap", help="provider name (default: bwrap)")
    args = parser.parse_args()

    provider = get_provider(args.provider)
    sandbox = provider.create(labels={"job": "demo"})
    step(f"created {args.provider} sandbox {sandbox.id}")
    try:
        seeded = sandbox.upload_files(
            [
                ("analyse.py", PROGRAM.encode()),
                ("data/values.txt", b"".join(b"%d\n" % (i * i % 97) for i in range(1000))),
            ]
        )
        step("seeded " + ", ".join(f"{r.path} ({'ok' if r.error is None else r.error})" for r in seeded))

        response = sandbox.execute("mkdir -p out && python3 analyse.py")
        step(f"ran analyse.py: exit {response.exit_code}: {response.output.strip()}")

        sandbox.edit("analyse.py", '"stdev": statistics.stdev(values)', '"max": max(values)')
        step("edited analyse.py to report the maximum instead of the deviation")
        response = sandbox.execute("python3 analyse.py")
        step(f"ran it again: exit {response.exit_code}: {response.output.strip()}")

        hits = sandbox.grep("max", glob="*.py")
        step("grep 'max': " + "; ".join(f"{m.path}:{m.line_number}: {m.line.strip()}" for m in hits.matches))
        step("files: " + ", ".join(m.path for m in sandbox.glob("**/*", include_hidden=False).matches))

        with tempfile.TemporaryDirectory() as local:
            target = Path(local) / "report.json"
            size = sandbox.download_file("out/report.json", target)
            step(f"downloaded out/report.json ({size} bytes): {target.read_text().strip()}")
    finally:
        provider.delete(sandbox_id=sandbox.id)
        step(f"deleted sandbox {sandbox.id}")


if __name__ == "__main__":
    main()
