"""Commands too long for one ``bash -c`` argument (LocalSandbox, and inside
the bubblewrap jail) keep ``execute()``'s semantics: exit codes, timeouts that
kill the whole group, the output cap, stdin at /dev/null, and no leaked
descriptor."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider_kit.host_process import ARGV_COMMAND_BYTES
from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox
from sandbox_sdk.providers.local import LocalSandbox

PADDING = "x=" + "a" * (2 * ARGV_COMMAND_BYTES) + "\n"  # forces the in-memory file


@pytest.fixture(params=["local", "bwrap"])
def shell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[BaseSandbox, Path]]:
    """A sandbox and the host directory its commands start in."""
    if request.param == "local":
        (tmp_path / "root").mkdir()
        yield LocalSandbox(tmp_path / "root"), tmp_path / "root"
        return
    provider = BwrapProvider(tmp_path / "state")
    sandbox: BwrapSandbox = provider.create()
    yield sandbox, sandbox.workspace
    provider.delete(sandbox_id=sandbox.id)


def test_large_command_runs_like_a_small_one(shell: tuple[BaseSandbox, Path]) -> None:
    sandbox, _ = shell
    response = sandbox.execute(PADDING + "echo \"${#x} $0\"; cat <<'E'\nheredoc\nE\nexit 7")
    assert response.output == f"{2 * ARGV_COMMAND_BYTES} bash\nheredoc\n"
    assert response.exit_code == 7


def test_large_command_has_no_stdin_and_no_extra_descriptor(shell: tuple[BaseSandbox, Path]) -> None:
    sandbox, _ = shell
    response = sandbox.execute(
        PADDING + 'read line; echo "read=$?"; ls /proc/self/fd | sort -n | tr "\\n" " "'
    )
    assert response.output.splitlines()[0] == "read=1"
    # ls's own: 0, 1, 2 and the one it opened to list the directory
    assert response.output.splitlines()[1].split() == ["0", "1", "2", "3"]


def test_large_command_timeout_kills_the_group(shell: tuple[BaseSandbox, Path]) -> None:
    sandbox, workdir = shell
    started = time.monotonic()
    response = sandbox.execute(PADDING + "(sleep 1.5; touch survivor) & sleep 30", timeout=0.5)
    assert response.timed_out
    assert response.exit_code == 124
    assert time.monotonic() - started < 10
    time.sleep(2)
    assert not (workdir / "survivor").exists()


def test_large_command_output_is_capped(shell: tuple[BaseSandbox, Path]) -> None:
    sandbox, _ = shell
    sandbox.limits = replace(sandbox.limits, max_output_bytes=10_000)
    response = sandbox.execute(PADDING + "head -c 50000 /dev/zero | tr '\\0' z")
    assert response.truncated
    assert response.output == "z" * 10_000


def test_command_at_max_command_bytes(shell: tuple[BaseSandbox, Path]) -> None:
    sandbox, _ = shell
    tail = "; echo at-the-limit"
    command = ":" + " y" * ((sandbox.limits.max_command_bytes - len(tail) - 1) // 2) + tail
    assert len(command) <= sandbox.limits.max_command_bytes
    assert sandbox.execute(command).output == "at-the-limit\n"
