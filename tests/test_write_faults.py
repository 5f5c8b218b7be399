"""``write`` and ``edit`` of data larger than one command, with a fault on each
``execute()`` in turn: the old file survives whole, nothing is left behind."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import FAULTS_BEFORE_RUNNING, Fault, LimitedSandbox
from tests.transfer.transfer_helpers import SMALL_COMMAND_BYTES, SMALL_OUTPUT_BYTES, faulty, leftovers

COMMAND_BYTES = SMALL_COMMAND_BYTES
OLD = b"old content that must survive\n"


def test_limited_provider_really_refuses_long_commands(local: LocalSandbox) -> None:
    limited = LimitedSandbox(local, max_command_bytes=COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES)
    with pytest.raises(OSError, match="Argument list too long"):
        limited.execute(": " + "x" * COMMAND_BYTES)
    data = os.urandom(COMMAND_BYTES * 5)
    limited.write("big.bin", data)  # succeeds only by staging within the limit
    assert (local.root_dir / "big.bin").read_bytes() == data


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_fault_on_each_call_of_a_chunked_write(local: LocalSandbox, fault: Fault) -> None:
    root = local.root_dir
    data = os.urandom(COMMAND_BYTES * 3)
    probe = faulty(local, fault, None)
    probe.write("probe.bin", data)
    calls = probe.executed
    assert calls >= 4
    for fail_at in range(1, calls + 1):
        (root / "dest.bin").write_bytes(OLD)
        sandbox = faulty(local, fault, fail_at)
        committed = fail_at == calls and fault not in FAULTS_BEFORE_RUNNING
        if committed:  # the commit ran, its reply was lost: the client asks, and it landed
            sandbox.write("dest.bin", data, overwrite=True)
        else:
            with pytest.raises(errors.SandboxError):
                sandbox.write("dest.bin", data, overwrite=True)
        assert (root / "dest.bin").read_bytes() == (data if committed else OLD), f"call {fail_at}"
        assert leftovers(root) == [], f"call {fail_at}"


@pytest.mark.parametrize("fault", [Fault.RAISE, Fault.TIMEOUT, Fault.GARBAGE])
def test_fault_on_each_call_of_a_staged_edit(local: LocalSandbox, fault: Fault) -> None:
    root = local.root_dir
    old_text = "o" * COMMAND_BYTES
    original = ("head\n" + old_text + "\ntail\n").encode()
    (root / "doc.txt").write_bytes(original)
    probe = faulty(local, fault, None)
    probe.edit("doc.txt", old_text, "n" * COMMAND_BYTES)
    calls = probe.executed
    assert calls >= 3
    for fail_at in range(1, calls + 1):
        (root / "doc.txt").write_bytes(original)
        sandbox = faulty(local, fault, fail_at)
        with pytest.raises(errors.SandboxError):
            sandbox.edit("doc.txt", old_text, "n" * COMMAND_BYTES)
        assert (root / "doc.txt").read_bytes() == original, f"call {fail_at}"
        assert leftovers(root) == [], f"call {fail_at}"


@pytest.mark.parametrize("how", ["write", "edit", "staged write"])
def test_a_refused_write_names_the_path_given_not_the_staging_file(local: LocalSandbox, how: str) -> None:
    """procfs lets no file be made in it: the staging file beside the target
    cannot be created, and the error says so of the path the caller named."""
    small = LimitedSandbox(local, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES)
    calls: dict[str, Callable[[], object]] = {
        "write": lambda: local.write("/proc/sbx-refused.txt", "text"),
        "edit": lambda: local.edit("/proc/version", "Linux", "Linux!"),
        "staged write": lambda: small.write("/proc/sbx-refused.bin", os.urandom(4 * SMALL_COMMAND_BYTES)),
    }
    with pytest.raises(errors.SandboxError) as raised:
        calls[how]()
    path = "/proc/version" if how == "edit" else f"/proc/sbx-refused.{'txt' if how == 'write' else 'bin'}"
    assert raised.value.path == path
    assert str(raised.value).startswith("cannot write the file: ") and ".sbx-" not in str(raised.value)
