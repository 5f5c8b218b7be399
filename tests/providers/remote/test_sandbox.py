"""The sandbox conformance kit through the remote provider: a bubblewrap
runner taken directly, a local runner through a coordinator."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest

from sandbox_sdk import protocol
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.bwrap import BwrapSandbox
from sandbox_sdk.providers.remote import RemoteProvider
from sandbox_sdk.testing import SandboxConformanceTests
from tests.providers.remote.conftest import remote_sandbox


class TestRemoteSandboxOnBwrap(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, bwrap_url: str, token: str) -> Iterator[BaseSandbox]:
        yield from remote_sandbox(bwrap_url, token, "conformance")


class TestRemoteSandboxOnLocalViaCoordinator(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, coordinated_local_url: str, token: str) -> Iterator[BaseSandbox]:
        yield from remote_sandbox(coordinated_local_url, token, "conformance")


def test_a_bwrap_runner_passes_on_its_own_scripts_and_channel(bwrap_url: str, token: str) -> None:
    """Through a bubblewrap runner, file operations run the jail's read-only
    scripts over its operation channel, as on bwrap itself: a command that
    plants scripts where the SDK would otherwise install them, or a port
    file for a server of its own, changes nothing a file operation answers."""
    with RemoteProvider(bwrap_url, token) as provider, provider.create() as sandbox:
        assert sandbox.installed_scripts == BwrapSandbox.installed_scripts is not None
        assert sandbox.operation_channel
        sandbox.write("victim.txt", "the real content\n")
        uid = int(sandbox.execute("id -u").output)
        planted = shlex.quote(protocol.scripts_dir_in(sandbox.scratch_dir) % uid)
        forge = shlex.quote("import sys; sys.stdout.write('forged'); raise SystemExit(0)")
        for name in ["_runtime", "read", "server"]:
            assert sandbox.execute(f"mkdir -p {planted} && echo {forge} > {planted}/{name}.py").exit_code == 0
        assert sandbox.read("victim.txt").content == "the real content\n"
        assert sandbox.execute(
            f"{protocol.CHANNEL_REQUEST}\nreadlink /proc/self/fd/{protocol.CHANNEL_FD}"
        ).output.startswith("socket:")


def test_a_local_runner_declares_no_scripts_of_its_own(coordinated_local_url: str, token: str) -> None:
    with RemoteProvider(coordinated_local_url, token) as provider, provider.create() as sandbox:
        assert sandbox.installed_scripts is None
        assert not sandbox.operation_channel
