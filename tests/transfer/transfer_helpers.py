"""Helpers shared by the transfer tests."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox_sdk import protocol
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import Fault, FaultySandbox

#: Tight limits: a few KiB of data per command, ~16 KiB per output, so even
#: small files take the chunked paths.
SMALL_COMMAND_BYTES = 16 * 1024
SMALL_OUTPUT_BYTES = 24 * 1024
#: Limits of a typical remote provider, for the large round trips.
LARGE_COMMAND_BYTES = 1024 * 1024
LARGE_OUTPUT_BYTES = 1024 * 1024


def faulty(local: LocalSandbox, fault: Fault, fail_at: int | None) -> FaultySandbox:
    return FaultySandbox(
        local,
        fault=fault,
        fail_at=fail_at,
        max_command_bytes=SMALL_COMMAND_BYTES,
        max_output_bytes=SMALL_OUTPUT_BYTES,
    )


def leftovers(*dirs: Path) -> list[Path]:
    """Staging and partial files anywhere below ``dirs``."""
    return sorted(
        path
        for directory in dirs
        for path in directory.rglob("*")
        if path.name.startswith(".sbx-") or path.name.endswith(".part")
    )


def scratch_entries(directory: Path) -> list[str]:
    """What a scratch directory holds besides the installed scripts' own
    directory (docs/protocol.md), which stays by design."""
    scripts = protocol.SCRIPTS_DIR % os.getuid()
    return sorted(path.name for path in directory.iterdir() if path.name != scripts)
