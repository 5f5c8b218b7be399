"""Setting up the bubblewrap provider: clear errors when it cannot isolate,
and per-sandbox options that stick."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox_sdk import errors, get_provider
from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox, ResourceLimits


def test_missing_bwrap_says_how_to_install_it_or_opt_out(tmp_path: Path) -> None:
    with pytest.raises(errors.ProviderUnavailableError) as caught:
        BwrapProvider(tmp_path / "state", bwrap=str(tmp_path / "no-such-bwrap"))
    message = str(caught.value)
    assert "apt-get install bubblewrap" in message
    assert 'get_provider("local")' in message
    with pytest.raises(errors.ProviderUnavailableError):
        get_provider("bwrap", state_dir=tmp_path / "state", bwrap=str(tmp_path / "no-such-bwrap"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(errors.ProviderUnavailableError):
        BwrapSandbox(workspace, tmp_dir=workspace, bwrap=str(tmp_path / "no-such-bwrap"))


def test_no_namespaces_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    """In a user namespace that may create no more user namespaces, bwrap cannot
    build its jail: the provider must refuse, not run commands unisolated."""
    code = textwrap.dedent(f"""
        from sandbox_sdk import ProviderUnavailableError
        from sandbox_sdk.providers.bwrap import BwrapProvider
        try:
            BwrapProvider({str(tmp_path / "state")!r})
        except ProviderUnavailableError as exc:
            print("REFUSED:", exc)
        else:
            print("STARTED")
    """)
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -c "$1"'
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", script, sys.executable, code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("REFUSED:"), result.stdout
    assert "could not create its namespaces" in result.stdout
    assert 'get_provider("local")' in result.stdout


def test_per_sandbox_limits_and_network_are_recorded(tmp_path: Path) -> None:
    provider = BwrapProvider(tmp_path / "state", limits=ResourceLimits(processes=100))
    default = provider.create()
    custom = provider.create(limits={"processes": 32, "file_size_bytes": 4096}, network=True)
    again = BwrapProvider(tmp_path / "state").get(custom.id)  # another provider instance
    assert again.execute("ulimit -u; ulimit -f").output.split() == ["32", "4"]
    assert again.network is True
    assert provider.get(default.id).execute("ulimit -u").output.strip() == "100"
    assert provider.get(default.id).network is False
    for sandbox in (default, custom):
        provider.delete(sandbox_id=sandbox.id)


def test_invalid_options_are_typed_errors(tmp_path: Path) -> None:
    provider = BwrapProvider(tmp_path / "state")
    with pytest.raises(errors.InvalidArgumentError, match="limits"):
        provider.create(limits={"processes": 0})
    with pytest.raises(errors.InvalidArgumentError, match="limits"):
        provider.create(limits=42)
    with pytest.raises(errors.InvalidArgumentError, match="network"):
        provider.create(network="yes")
    assert provider.list().items == []
