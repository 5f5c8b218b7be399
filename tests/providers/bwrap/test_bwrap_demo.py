"""The main job (``scripts/demo``) runs end to end on the bubblewrap provider."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_main_job_runs_and_leaves_only_the_artifact(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "examples.main_job", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "report.txt").read_text() == "rows: 3\nmax: 10.00\nmean: 6.00\n"
    assert "host home: ls: cannot access" in done.stdout
    assert "Network is unreachable" in done.stdout
    assert "sandboxes left: 0" in done.stdout
