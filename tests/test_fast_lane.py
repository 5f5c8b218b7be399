"""The fast lane (``scripts/test --fast``) runs tests/conftest.py's ``NO_PROCESS_TESTS``
alone; in such a run a test that starts a process fails. These tests make that check run
in CI (the full suite runs the listed tests among the others, where nothing is checked),
and show that it catches a process start, even one the test swallows."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import NO_PROCESS_TESTS

ROOT = Path(__file__).resolve().parent.parent
#: Seconds the fast lane's tests may take in one process (they take a few on an idle machine).
LANE_TIMEOUT = 600


def pytest_run(*args: str, cwd: Path, pythonpath: list[str]) -> subprocess.CompletedProcess[str]:
    """``pytest`` in a fresh interpreter, in one process, without this run's own variables."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=LANE_TIMEOUT,
        check=False,
    )


def test_the_fast_lane_starts_no_process() -> None:
    """What ``scripts/test --fast`` runs."""
    result = pytest_run("-q", "-m", "not processes", *NO_PROCESS_TESTS, cwd=ROOT, pythonpath=[])
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout, result.stdout


def test_a_listed_test_that_starts_a_process_fails(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            from tests import conftest
            from tests.conftest import (
                pytest_collection_finish,
                pytest_collection_modifyitems,
                pytest_runtest_makereport,
                pytest_runtest_protocol,
            )

            conftest.NO_PROCESS_TESTS = {"test_listed.py": ("test_not_listed",)}
            """
        )
    )
    (tmp_path / "test_listed.py").write_text(
        textwrap.dedent(
            """
            import os
            import subprocess


            def test_pure():
                assert sum(range(4)) == 6


            def test_runs_a_command():
                subprocess.run(["true"], check=True)


            def test_swallows_the_error():
                try:
                    os.posix_spawn("/bin/true", ["true"], {})
                except Exception:
                    pass


            def test_not_listed():
                subprocess.run(["true"], check=True)
            """
        )
    )
    result = pytest_run("-q", "-m", "not processes", "test_listed.py", cwd=tmp_path, pythonpath=[str(ROOT)])
    assert result.returncode == 1, result.stdout + result.stderr
    assert "test_listed.py::test_runs_a_command started a process (subprocess.Popen)" in result.stdout
    assert "test_listed.py::test_swallows_the_error started a process (os.posix_spawn)" in result.stdout
    assert "2 failed, 1 passed, 1 deselected" in result.stdout, result.stdout
