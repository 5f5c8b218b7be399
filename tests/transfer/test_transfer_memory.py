"""Client memory stays bounded by the chunks in flight, not by the file.

The bound is what the transfer may hold by design: ``transfer_concurrency``
commands in flight, each a chunk's bytes and the command carrying them
(two ``max_command_bytes``), and room for the interpreter's own pools. 256
MiB rather than 1 GiB: on the 2-core CI machine execute()-based uploads run
at roughly 10-25 MiB/s, so 1 GiB each way would take minutes; 256 MiB is
already three times the bound, so a client that held the file (or a
fraction of it per chunk list) could not pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalSandbox

PROBE = Path(__file__).with_name("memory_probe.py")
SIZE_MIB = 256
MIB = 1024 * 1024
LIMITS = LocalSandbox.limits
BOUND_MIB = LIMITS.transfer_concurrency * 2 * LIMITS.max_command_bytes / MIB + 16


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_large_transfer_memory_is_bounded(mode: str) -> None:
    done = subprocess.run(
        [sys.executable, str(PROBE), str(SIZE_MIB), mode],
        check=False,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["upload_growth_mib"] < BOUND_MIB, result
    assert result["download_growth_mib"] < BOUND_MIB, result
    assert result["total_growth_mib"] < BOUND_MIB, result
