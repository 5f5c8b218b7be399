"""What a bubblewrap jail offers its command and what it shows of the host:
a usable private ``/dev/shm``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox, ResourceLimits

MiB = 1024 * 1024


@pytest.fixture
def jails(tmp_path: Path) -> BwrapProvider:
    return BwrapProvider(tmp_path / "state")


def test_shared_memory_is_usable_and_private(jails: BwrapProvider) -> None:
    sandbox, other = jails.create(), jails.create()
    lock = "python3 -c 'import multiprocessing as m; m.Lock(); m.Semaphore(2); print(\"locked\")'"
    assert sandbox.execute(lock).output == "locked\n"
    assert (
        sandbox.execute("stat -c %a /dev/shm; echo x > /dev/shm/mine && cat /dev/shm/mine").output
        == "1777\nx\n"
    )
    assert other.execute("ls -A /dev/shm").output == ""  # each jail's own, gone with it
    assert sandbox.execute("ls -A /dev/shm").output == ""
    assert not Path("/dev/shm/mine").exists()


def test_shared_memory_is_bounded_by_the_memory_limit(jails: BwrapProvider) -> None:
    sandbox: BwrapSandbox = jails.create(limits=ResourceLimits(memory_bytes=64 * MiB))
    response = sandbox.execute("head -c 100M /dev/zero > /dev/shm/big; stat -c %s /dev/shm/big")
    assert "No space left on device" in response.output
    assert int(response.output.split()[-1]) <= 64 * MiB
