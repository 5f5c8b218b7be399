"""LocalSandbox's path for commands too long for one ``bash -c`` argument keeps
``execute()``'s semantics: exit codes, timeouts that kill the whole group,
the output cap, stdin at /dev/null, and no leaked descriptor."""

from __future__ import annotations

import time
from pathlib import Path

from sandbox_sdk.providers.local import ARGV_COMMAND_BYTES, LocalSandbox

PADDING = "x=" + "a" * (2 * ARGV_COMMAND_BYTES) + "\n"  # forces the in-memory file


def test_large_command_runs_like_a_small_one(local: LocalSandbox) -> None:
    response = local.execute(PADDING + "echo \"${#x} $0\"; cat <<'E'\nheredoc\nE\nexit 7")
    assert response.output == f"{2 * ARGV_COMMAND_BYTES} bash\nheredoc\n"
    assert response.exit_code == 7


def test_large_command_has_no_stdin_and_no_extra_descriptor(local: LocalSandbox) -> None:
    response = local.execute(PADDING + 'read line; echo "read=$?"; ls /proc/self/fd | sort -n | tr "\\n" " "')
    assert response.output.splitlines()[0] == "read=1"
    # ls's own: 0, 1, 2 and the one it opened to list the directory
    assert response.output.splitlines()[1].split() == ["0", "1", "2", "3"]


def test_large_command_timeout_kills_the_group(local: LocalSandbox, root: Path) -> None:
    started = time.monotonic()
    response = local.execute(PADDING + "(sleep 1.5; touch survivor) & sleep 30", timeout=0.5)
    assert response.timed_out
    assert response.exit_code == 124
    assert time.monotonic() - started < 10
    time.sleep(2)
    assert not (root / "survivor").exists()


def test_large_command_output_is_capped(root: Path) -> None:
    sandbox = LocalSandbox(root, max_output_bytes=10_000)
    response = sandbox.execute(PADDING + "head -c 50000 /dev/zero | tr '\\0' z")
    assert response.truncated
    assert response.output == "z" * 10_000


def test_command_at_max_command_bytes(local: LocalSandbox) -> None:
    tail = "; echo at-the-limit"
    command = ":" + " y" * ((local.max_command_bytes - len(tail) - 1) // 2) + tail
    assert len(command) <= local.max_command_bytes
    assert local.execute(command).output == "at-the-limit\n"
