"""``Limits``: the values it accepts, and its budget arithmetic checked
against real commands built by the protocol (no sandbox, no process)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from typing import Any

import pytest

import sandbox_sdk
from sandbox_sdk import errors, protocol
from sandbox_sdk.limits import IN_FLIGHT_BYTES, PROGRAM_ROOM, Limits, base64_capacity
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.provider_kit import LARGE_COMMAND_BYTES
from sandbox_sdk.providers.local import LocalSandbox

SCRATCH = "/tmp"
WRITE_ARGS = {"path": protocol.encode_path("dir/file.txt"), "overwrite": False, "token": "0" * 16}


def built(op: str, args: dict[str, Any], blob: bytes) -> int:
    """Bytes of the real command for ``op`` with ``args`` and one blob, in
    the largest form a session may send it in (``command_overhead``)."""
    return max(
        protocol.command_bytes(
            protocol.build_command(
                protocol.module_of(op),
                {**args, "op": op},
                [blob],
                scripts_dir=protocol.scripts_dir_in(SCRATCH),
                served=served,
                channel=channel,
            )[0]
        )
        for served, channel in ((False, False), (True, False), (True, True))
    )


def program(size: int) -> dict[str, Any]:
    """``spawn``'s arguments for a shell command of ``size`` bytes."""
    return {"command": protocol.encode_path("x" * size), "cwd": None, "env": {}}


# -- values ----------------------------------------------------------------------


def test_the_defaults_are_those_a_remote_provider_starts_from() -> None:
    limits = Limits()
    assert (limits.max_command_bytes, limits.max_output_bytes) == (96 * 1024, 1024 * 1024)
    assert (limits.operation_timeout, limits.transfer_concurrency) == (120.0, 8)
    assert (limits.process_poll_wait, limits.process_linger_min, limits.process_linger_max) == (
        2.0,
        0.02,
        0.5,
    )
    assert sandbox_sdk.Limits is Limits


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_command_bytes", 0),
        ("max_command_bytes", -1),
        ("max_command_bytes", True),
        ("max_output_bytes", "1024"),
        ("max_output_bytes", 1024.0),
        ("transfer_concurrency", 0),
        ("operation_timeout", 0),
        ("operation_timeout", -1.0),
        ("operation_timeout", math.nan),
        ("operation_timeout", False),
        ("process_poll_wait", "2"),
        ("process_linger_min", 0.0),
    ],
)
def test_a_value_of_the_wrong_type_or_out_of_range_is_refused(field: str, value: object) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=field):
        Limits(**{field: value})  # type: ignore[arg-type]


def test_seconds_may_be_ints_and_a_cap_of_one_byte_is_a_value() -> None:
    limits = Limits(max_command_bytes=1, max_output_bytes=1, operation_timeout=30, process_poll_wait=1)
    assert limits.operation_timeout == 30


def test_the_linger_may_not_shrink_as_it_doubles() -> None:
    with pytest.raises(errors.InvalidArgumentError, match="process_linger_max"):
        Limits(process_linger_min=1.0, process_linger_max=0.5)
    assert Limits(process_linger_min=0.5, process_linger_max=0.5).process_linger_max == 0.5


def test_limits_are_frozen_and_changed_by_replace() -> None:
    limits = Limits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_output_bytes = 5  # type: ignore[misc]
    smaller = dataclasses.replace(limits, max_output_bytes=5)
    assert (smaller.max_output_bytes, limits.max_output_bytes) == (5, 1024 * 1024)
    with pytest.raises(errors.InvalidArgumentError):
        dataclasses.replace(limits, max_output_bytes=0)


# -- the output: a result's budget ---------------------------------------------------


def test_the_result_budget_is_one_output_in_base64_less_headroom_and_the_frame() -> None:
    assert Limits().result_budget == (1024 * 1024 - 8 * 1024) // 4 * 3 - 1024 == 779_264
    assert (
        Limits(max_output_bytes=LARGE_COMMAND_BYTES).result_budget
        == base64_capacity(LARGE_COMMAND_BYTES - 8 * 1024) - 1024
    )


def test_an_output_too_small_for_file_operations_is_refused_at_the_first_byte_short() -> None:
    """15 020 bytes leave a budget of 4 097 after the headroom and the frame
    (whole base64 quanta); one byte fewer, 4 094: under the 4 096 needed."""
    assert Limits(max_output_bytes=15_020).result_budget == 4097
    with pytest.raises(errors.SandboxRuntimeError, match="max_output_bytes=15019 is too small"):
        _ = Limits(max_output_bytes=15_019).result_budget
    with pytest.raises(errors.SandboxRuntimeError, match="too small"):
        _ = Limits(max_output_bytes=1).result_budget


def test_base64_capacity_rounds_down_to_whole_quanta_and_never_goes_negative() -> None:
    assert [base64_capacity(n) for n in (-5, 0, 3, 4, 7, 8)] == [0, 0, 0, 3, 3, 6]


# -- the command: blobs ---------------------------------------------------------------


@pytest.mark.parametrize("max_command_bytes", [16 * 1024, 96 * 1024, 63 * 1024 + 1, LARGE_COMMAND_BYTES])
def test_a_blob_of_the_capacity_fits_the_real_command_and_one_byte_more_does_not(
    max_command_bytes: int,
) -> None:
    limits = Limits(max_command_bytes=max_command_bytes)
    capacity = limits.blob_capacity("write", WRITE_ARGS, SCRATCH)
    assert built("write", WRITE_ARGS, b"x" * capacity) <= max_command_bytes
    assert max_command_bytes - built("write", WRITE_ARGS, b"x" * capacity) < 8  # a base64 quantum and slack
    assert limits.fits(capacity, "write", WRITE_ARGS, SCRATCH)
    assert not limits.fits(capacity + 1, "write", WRITE_ARGS, SCRATCH)


def test_the_room_is_what_the_command_leaves_and_grows_with_the_cap() -> None:
    overhead = protocol.command_overhead("write", WRITE_ARGS, SCRATCH)
    assert Limits().room("write", WRITE_ARGS, SCRATCH) == 96 * 1024 - overhead
    longer = {**WRITE_ARGS, "path": protocol.encode_path("d/" * 500)}
    assert Limits().room("write", longer, SCRATCH) < Limits().room("write", WRITE_ARGS, SCRATCH)


def test_a_command_cap_the_script_alone_fills_leaves_no_room_for_data() -> None:
    """Under 1 KiB left: refused with the script's own size, never a zero-byte chunk loop."""
    overhead = protocol.command_overhead("write", WRITE_ARGS, SCRATCH)
    tiny = Limits(max_command_bytes=overhead + 1023)
    with pytest.raises(errors.SandboxRuntimeError, match=f"the write script alone needs {overhead} bytes"):
        tiny.blob_capacity("write", WRITE_ARGS, SCRATCH)
    with pytest.raises(errors.SandboxRuntimeError, match="leaves no room for data"):
        tiny.fits(0, "write", WRITE_ARGS, SCRATCH)
    assert Limits(max_command_bytes=overhead + 1024).blob_capacity("write", WRITE_ARGS, SCRATCH) == 768


def test_huge_blobs_are_measured_not_overflowed() -> None:
    assert not Limits().fits(10**15, "write", WRITE_ARGS, SCRATCH)
    vast = Limits(max_command_bytes=2**50)
    capacity = vast.blob_capacity("write", WRITE_ARGS, SCRATCH)
    assert capacity == base64_capacity(vast.room("write", WRITE_ARGS, SCRATCH)) > 10**14
    assert vast.fits(10**14, "write", WRITE_ARGS, SCRATCH)


# -- the command: a program -------------------------------------------------------------


def test_a_program_fits_while_it_leaves_program_room() -> None:
    """The one rule for staging a program and for a native stream."""
    overhead = protocol.command_overhead("spawn", program(100), SCRATCH)
    assert Limits(max_command_bytes=overhead + PROGRAM_ROOM).fits_program("spawn", program(100), SCRATCH)
    assert not Limits(max_command_bytes=overhead + PROGRAM_ROOM - 1).fits_program(
        "spawn", program(100), SCRATCH
    )


def test_a_program_over_half_the_cap_still_fits_one_command() -> None:
    """No second threshold: a program of three quarters of the cap streams
    natively and is not staged, as long as ``PROGRAM_ROOM`` is left."""
    limits = Limits()
    size = (
        limits.max_command_bytes * 3 // 4 * 9 // 16
    )  # base64 twice (in the payload, of the payload): 3/4 of the cap
    assert protocol.command_overhead("spawn", program(size), SCRATCH) > limits.max_command_bytes // 2
    assert limits.fits_program("spawn", program(size), SCRATCH)
    assert not limits.fits_program("spawn", program(limits.max_command_bytes), SCRATCH)


# -- the transfer window --------------------------------------------------------------------


@pytest.mark.parametrize(
    "concurrency, chunk, window",
    [
        (8, 64 * 1024, 8),  # small chunks: the whole window
        (8, 1024 * 1024, IN_FLIGHT_BYTES // (1024 * 1024)),  # bounded in bytes
        (8, 50 * 1024 * 1024, 2),  # never below two
        (1, 50 * 1024 * 1024, 1),  # unless the provider allows one
        (1, 1, 1),
        (3, 0, 3),  # a zero-byte chunk is not a division by zero
    ],
)
def test_the_window_is_the_concurrency_bounded_in_bytes(concurrency: int, chunk: int, window: int) -> None:
    assert Limits(transfer_concurrency=concurrency).window(chunk) == window


# -- how a sandbox declares them ------------------------------------------------------------


def test_providers_declare_their_limits_and_constructors_refine_them(tmp_path: Any) -> None:
    sandbox = LocalSandbox(tmp_path, max_output_bytes=64 * 1024)
    assert sandbox.limits == Limits(max_command_bytes=LARGE_COMMAND_BYTES, max_output_bytes=64 * 1024)
    assert LocalSandbox.limits.max_output_bytes == 1024 * 1024  # the class's own is untouched
    assert sandbox_sdk.BaseSandbox.limits == Limits()


@pytest.mark.parametrize(
    "name", ["max_command_bytes", "max_output_bytes", "operation_timeout", "transfer_concurrency"]
)
def test_a_sandbox_class_setting_a_limit_as_an_attribute_is_refused(name: str) -> None:
    """Nothing would read it: the class fails where it is written, not later."""
    with pytest.raises(TypeError, match=f"sets {name}: declare them as limits = Limits"):
        type("Stale", (sandbox_sdk.BaseSandbox,), {name: 1})


@pytest.mark.parametrize("name", ["max_output_bytes", "operation_timeout"])
def test_a_limit_set_on_a_sandbox_object_is_refused(name: str, tmp_path: Any) -> None:
    sandbox = LocalSandbox(tmp_path)
    with pytest.raises(TypeError, match=f"LocalSandbox.{name} is not read: set sandbox.limits"):
        setattr(sandbox, name, 1)
    sandbox.limits = replace(sandbox.limits, **{name: 1})
    assert getattr(sandbox.limits, name) == 1


def test_a_sandbox_class_declaring_limits_is_accepted() -> None:
    class Declared(sandbox_sdk.BaseSandbox):
        limits = Limits(max_command_bytes=4096)

        @property
        def id(self) -> str:
            return "declared"

        def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
            return ExecuteResponse(output="", exit_code=0)

    assert Declared().limits.max_command_bytes == 4096
