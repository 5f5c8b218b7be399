"""Issue 13's malformed inputs: each is a typed error raised before any round
trip (counted by LimitedSandbox), never a raw UnicodeEncodeError, subprocess's
ValueError or the sandbox's traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import LimitedSandbox

SURROGATE = "a\ud800b"


@pytest.fixture
def local(tmp_path: Path) -> LocalSandbox:
    return LocalSandbox(tmp_path)


@pytest.fixture
def counted(local: LocalSandbox) -> LimitedSandbox:
    return LimitedSandbox(local, max_command_bytes=local.limits.max_command_bytes, max_output_bytes=1 << 20)


RUNS: list[tuple[str, dict[str, Any]]] = [
    ("cat", {"stdin": SURROGATE}),
    ("true", {"env": {"A": SURROGATE}}),
    ("true", {"env": {SURROGATE: "x"}}),
    ("true", {"env": {"A=B": "x"}}),
    ("true", {"env": {"A\0B": "x"}}),
    ("true", {"env": {"": "x"}}),
    ("true", {"env": {"A": "x\0y"}}),
    ("echo a\0b", {}),
    ("echo a\0b", {"cwd": "."}),
    (f"echo {SURROGATE}", {}),
    (f"echo {SURROGATE}", {"cwd": "."}),
]


@pytest.mark.parametrize(("command", "options"), RUNS)
def test_a_malformed_run_is_an_invalid_argument_before_any_round_trip(
    counted: LimitedSandbox, command: str, options: dict[str, Any]
) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        counted.run(command, **options)
    assert counted.executed == 0


def test_a_cwd_no_encoding_can_hold_is_an_invalid_path(counted: LimitedSandbox) -> None:
    with pytest.raises(errors.InvalidPathError):
        counted.run("true", cwd=SURROGATE)
    assert counted.executed == 0


def test_written_text_with_a_lone_surrogate_is_an_invalid_argument(counted: LimitedSandbox) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="content"):
        counted.write("f", SURROGATE)
    with pytest.raises(errors.InvalidArgumentError, match="new"):
        counted.edit("f", "a", SURROGATE)
    assert counted.executed == 0


@pytest.mark.parametrize("command", ["echo a\0b", f"echo {SURROGATE}", "echo a\0b #" + "x" * 200_000])
def test_the_kits_execute_refuses_what_no_shell_can_be_given(local: LocalSandbox, command: str) -> None:
    """Through ``bash_script``: one argument, or (the last) an in-memory file."""
    with pytest.raises(errors.InvalidArgumentError):
        local.execute(command)


def test_bytes_that_are_not_text_still_pass(local: LocalSandbox) -> None:
    assert local.run("cat", stdin=b"\xff\x00").output == "\ufffd\x00"
