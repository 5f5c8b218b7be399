"""grep's two ways of searching give the same result: GNU grep, run by the
script with an argument vector when the sandbox has it (fixed strings), and
the Python walk that stays as the fallback (no grep on ``PATH``, or a grep
that fails). Hostile names, binary files, CRLF and long lines, caps."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox_sdk import GrepResult
from sandbox_sdk.providers.local import LocalSandbox

NEEDLE = "needle"
#: The sandbox's interpreter itself (``python3`` on the host may be a shim that needs more of ``PATH``).
PYTHON3 = subprocess.run(
    ["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=True
).stdout.strip()


def make_tree(root: Path) -> None:
    names = [
        "plain.txt",
        "a\nb.txt",
        "colon:7:x.txt",
        "-e",
        "--",
        "sp ace $(touch pwned).txt",
        "nul\u00e9.py",
        "sub/deeper/z.txt",
        "sub/a.py",
    ]
    for i, name in enumerate(names):
        path = root / "tree" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            b"first line\n"
            + f"{NEEDLE} {i}\r\n".encode()
            + b"no match here\n"
            + f"twice {NEEDLE} and {NEEDLE}:{i}\n".encode()
            + b"x" * 1500
            + NEEDLE.encode()
            + b"\n"
            + f"last {NEEDLE} without newline".encode()
        )
    (root / "tree" / os.fsdecode(b"bad-\xff\xfe.txt")).write_bytes(b"\xff " + NEEDLE.encode() + b" \xfe\n")
    (root / "tree" / "binary.bin").write_bytes(b"\0" + NEEDLE.encode() + b"\n")
    (root / "tree" / "late-nul.txt").write_bytes(b"a" * 9000 + b"\0\n" + NEEDLE.encode() + b"\n")
    (root / "tree" / "cr-only.txt").write_bytes(NEEDLE.encode() + b"\r\r\n" + b"needle\rin the middle\n")
    (root / "tree" / "empty.txt").write_bytes(b"")
    (root / "tree" / "link.txt").symlink_to("plain.txt")
    os.mkfifo(root / "tree" / "fifo")


@pytest.fixture
def sandboxes(tmp_path: Path) -> dict[str, LocalSandbox]:
    """Three sandboxes on one tree: with GNU grep (through a wrapper that
    notes each run), without any grep, and with a grep that always fails."""
    root = tmp_path / "root"
    root.mkdir()
    make_tree(root)
    bins = {}
    for name in ("with", "without", "failing"):
        folder = tmp_path / f"bin-{name}"
        folder.mkdir()
        (folder / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
        (folder / "python3").symlink_to(PYTHON3)
        bins[name] = folder
    real = shutil.which("grep")
    assert real, "these tests need GNU grep on the host"
    wrapper = bins["with"] / "grep"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{tmp_path}/grep-runs"\nexec {real} "$@"\n')
    failing = bins["failing"] / "grep"
    failing.write_text("#!/bin/sh\necho 'grep: unknown option' >&2\nexit 2\n")
    for script in (wrapper, failing):
        script.chmod(0o755)
    return {name: LocalSandbox(root, env={"PATH": str(folder)}) for name, folder in bins.items()}


def runs(tmp_path: Path) -> int:
    log = tmp_path / "grep-runs"
    return len(log.read_text().splitlines()) if log.exists() else 0


CASES = [
    pytest.param(NEEDLE, {}, id="literal"),
    pytest.param(NEEDLE, {"max_matches": 1}, id="cap-1"),
    pytest.param(NEEDLE, {"max_matches": 5}, id="cap-5"),
    pytest.param(NEEDLE, {"max_matches": 17}, id="cap-17"),
    pytest.param(NEEDLE, {"glob": "*.py"}, id="glob-filter"),
    pytest.param(NEEDLE, {"glob": "sub/**"}, id="glob-path-filter"),
    pytest.param(f"{NEEDLE}\r", {}, id="carriage-return"),
    pytest.param("and needle:", {}, id="colon"),
    pytest.param("\xff", {}, id="not-utf8-pattern"),
    pytest.param("$(touch pwned)", {}, id="shell-syntax"),
    pytest.param("-e", {}, id="option-like"),
    pytest.param("x" * 1200, {}, id="long-line"),
    pytest.param(f"first\n{NEEDLE}", {}, id="newline-pattern"),
]


@pytest.mark.parametrize(("pattern", "options"), CASES)
def test_grep_and_the_python_walk_agree(
    sandboxes: dict[str, LocalSandbox], tmp_path: Path, pattern: str, options: dict[str, object]
) -> None:
    pattern = os.fsdecode(pattern.encode("latin-1")) if pattern == "\xff" else pattern
    results: dict[str, GrepResult] = {
        name: sandbox.grep(pattern, "tree", **options)  # type: ignore[arg-type]
        for name, sandbox in sandboxes.items()
    }
    assert results["with"] == results["without"] == results["failing"]
    assert runs(tmp_path) >= 1  # the first sandbox did run grep
    assert not (tmp_path / "root" / "pwned").exists()


def test_the_result_is_what_the_walk_finds(sandboxes: dict[str, LocalSandbox]) -> None:
    """What both ways agree on, spelled out once."""
    result = sandboxes["with"].grep(NEEDLE, "tree")
    assert result.skipped_binary == 1 and not result.truncated and result.unreadable == []
    by_file: dict[str, list[int]] = {}
    for match in result.matches:
        by_file.setdefault(os.path.basename(match.path), []).append(match.line_number)
    assert by_file["plain.txt"] == [2, 4, 5, 6]
    assert by_file["late-nul.txt"] == [2]
    assert by_file["cr-only.txt"] == [1, 2]
    assert "fifo" not in by_file and "binary.bin" not in by_file
    long = [m for m in result.matches if m.path.endswith("plain.txt") and m.line_number == 5]
    assert long[0].line_truncated and len(long[0].line) == 1000


def test_caps_cut_where_the_walk_would(sandboxes: dict[str, LocalSandbox]) -> None:
    full = sandboxes["with"].grep(NEEDLE, "tree").matches
    for cap in (1, 4, len(full) - 1):
        cut = sandboxes["with"].grep(NEEDLE, "tree", max_matches=cap)
        assert cut.truncated and cut.matches == full[:cap]


def test_ignore_case_and_regex_use_the_walk(sandboxes: dict[str, LocalSandbox], tmp_path: Path) -> None:
    sandboxes["with"].grep(NEEDLE.upper(), "tree", ignore_case=True)
    sandboxes["with"].grep("ne+dle", "tree", fixed_strings=False)
    assert runs(tmp_path) == 0


def test_grep_output_is_what_is_taken(sandboxes: dict[str, LocalSandbox], tmp_path: Path) -> None:
    """A grep that adds a line of its own: the line shows up, so the result
    came from grep's output (the Python walk could not have found it)."""
    folder = tmp_path / "bin-lying"
    shutil.copytree(tmp_path / "bin-without", folder, symlinks=True)
    lying = folder / "grep"
    lying.write_text(
        f'#!/bin/sh\n{shutil.which("grep")} "$@"\nfor last; do :; done\n'
        f"printf '%s\\0999:{NEEDLE} from grep\\n' \"$last\"\n"
    )
    lying.chmod(0o755)
    result = LocalSandbox(tmp_path / "root", env={"PATH": str(folder)}).grep(NEEDLE, "tree")
    extra = [m for m in result.matches if m.line_number == 999]
    assert [m.line for m in extra] == [f"{NEEDLE} from grep"]
