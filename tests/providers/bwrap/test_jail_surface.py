"""What a bubblewrap jail offers its command and what it shows of the host:
a usable private ``/dev/shm``; no host path in any process's command line or
environment; in mountinfo, the host paths of the sandbox's own two
directories and nothing else of the state directory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox, ResourceLimits, _jail
from tests.providers.host_state import deleting_all

MiB = 1024 * 1024


@pytest.fixture
def jails(tmp_path: Path) -> Iterator[BwrapProvider]:
    yield from deleting_all(BwrapProvider(tmp_path / "state"))


def test_shared_memory_is_usable_and_private(jails: BwrapProvider) -> None:
    sandbox, other = jails.create(), jails.create()
    lock = "python3 -c 'import multiprocessing as m; m.Lock(); m.Semaphore(2); print(\"locked\")'"
    assert sandbox.execute(lock).output == "locked\n"
    assert (
        sandbox.execute("stat -c %a /dev/shm; echo x > /dev/shm/mine && cat /dev/shm/mine").output
        == "1777\nx\n"
    )
    assert other.execute("ls -A /dev/shm").output == ""  # each jail's own
    assert sandbox.execute("ls -A /dev/shm").output == "mine\n"  # kept while the sandbox's jail runs
    assert not Path("/dev/shm/mine").exists()


def test_shared_memory_is_bounded_by_the_memory_limit(jails: BwrapProvider) -> None:
    sandbox: BwrapSandbox = jails.create(limits=ResourceLimits(memory_bytes=64 * MiB))
    response = sandbox.execute("head -c 100M /dev/zero > /dev/shm/big; stat -c %s /dev/shm/big")
    assert "No space left on device" in response.output
    assert int(response.output.split()[-1]) <= 64 * MiB


def test_no_process_shows_a_host_path(jails: BwrapProvider, tmp_path: Path) -> None:
    sandbox = jails.create()
    listing = sandbox.execute("ps -eo pid,args; cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ | tr '\\0' ' '")
    # PID 1: the jail's server, its source read from a descriptor (bwrap itself is outside the jail)
    assert re.search(r"^ *1 \S*python3 -I -S /dev/fd/\d+ ", listing.output, re.MULTILINE), listing.output
    assert "bwrap" not in listing.output
    assert str(tmp_path) not in listing.output  # neither the workspace's, nor the state directory's


def test_mountinfo_shows_the_sandboxs_own_directories_only(jails: BwrapProvider, tmp_path: Path) -> None:
    """bwrap cannot hide where a bind mount comes from: the host paths of the
    workspace, the tmp directory and the SDK's scripts, which the host
    installs beside the jail's other state, show (docs/bwrap.md says so), no
    other."""
    sandbox = jails.create()
    mounts = sandbox.execute("cat /proc/self/mountinfo").output.splitlines()
    host_paths = {line.split()[3] for line in mounts if str(tmp_path) in line}
    scripts = sandbox.jail.directory / _jail.SCRIPTS_DIR
    assert host_paths == {str(sandbox.workspace), str(sandbox.tmp_dir), str(scripts)}


def test_a_nul_in_the_environment_cannot_smuggle_bwrap_options(tmp_path: Path) -> None:
    sandbox = BwrapSandbox(tmp_path, tmp_dir=tmp_path, env={"NAME": "value\0--bind\0/\0/host"})
    with pytest.raises(errors.InvalidArgumentError):
        sandbox.execute("ls /host")
