"""Host directories mounted into bubblewrap sandboxes (docs/policy.md): real
binds, read-only really read-only, read-write visible both ways, file
operations and transfers on mounted paths, no way out of a source, and
every refusal typed and made before anything is created. Real jails."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import Mount, agent_data_mounts, errors
from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox, _jail
from sandbox_sdk.providers.local import LocalProvider

#: The sandbox's user as bwrap runs it as root (``root_sandbox_user``), who must own what it writes.
SANDBOX_UID = 65534


def writable_by_the_sandbox(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


@pytest.fixture
def host(tmp_path: Path) -> Path:
    (tmp_path / "secret.txt").write_text("the host's own\n")
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "README.md").write_text("how to\n")
    for name in ("workspace", "uploads", "outputs"):
        writable_by_the_sandbox(tmp_path / "data" / name)
    return tmp_path


@pytest.fixture
def sandbox(provider: BwrapProvider, host: Path) -> Iterator[BwrapSandbox]:
    with provider.create(mounts=agent_data_mounts(host / "data", host / "skills")) as sandbox:
        yield sandbox


def shell(sandbox: BwrapSandbox, command: str) -> tuple[int | None, str]:
    response = sandbox.execute(command, timeout=30)
    return response.exit_code, response.output


def test_a_read_only_mount_refuses_every_change(sandbox: BwrapSandbox, host: Path) -> None:
    assert sandbox.read("/mnt/skills/README.md").content == "how to\n"
    for change in [
        "echo x > /mnt/skills/README.md",
        "echo x > /mnt/skills/new.md",
        "mv /mnt/skills/README.md /mnt/skills/moved.md",
        "chmod 777 /mnt/skills/README.md",
        "rm /mnt/skills/README.md",
        "mkdir /mnt/skills/dir",
        "touch /mnt/skills",
    ]:
        code, output = shell(sandbox, change)
        assert code != 0, (change, output)
    with pytest.raises(errors.SandboxError):
        sandbox.write("/mnt/skills/README.md", "changed\n", overwrite=True)
    assert (host / "skills" / "README.md").read_text() == "how to\n"
    assert sorted(p.name for p in (host / "skills").iterdir()) == ["README.md"]


def test_a_read_write_mount_is_shared_both_ways(sandbox: BwrapSandbox, host: Path) -> None:
    uploads = host / "data" / "uploads"
    (uploads / "from-host.txt").write_text("uploaded\n")
    assert sandbox.read("/mnt/user-data/uploads/from-host.txt").content == "uploaded\n"
    assert shell(sandbox, "cat /mnt/user-data/uploads/from-host.txt") == (0, "uploaded\n")
    sandbox.write("/mnt/user-data/outputs/report.md", "# done\n")
    sandbox.upload_files([("/mnt/user-data/outputs/data.bin", bytes(range(256)))]).raise_for_errors()
    assert shell(sandbox, "echo made > /mnt/user-data/workspace/made.txt")[0] == 0
    assert (host / "data" / "outputs" / "report.md").read_text() == "# done\n"
    assert (host / "data" / "outputs" / "data.bin").read_bytes() == bytes(range(256))
    assert (host / "data" / "workspace" / "made.txt").read_text() == "made\n"
    assert [entry.path for entry in sandbox.glob("*.md", path="/mnt/user-data/outputs").matches] == [
        "/mnt/user-data/outputs/report.md"
    ]


def test_a_mount_reaches_nothing_of_the_host_outside_its_source(sandbox: BwrapSandbox, host: Path) -> None:
    """``..`` and symlinks planted in a writable mount resolve in the jail's
    own tree, never in the host's: the host file beside the source stays out of reach."""
    secret = host / "secret.txt"
    plant = (
        f"ln -s ../secret.txt /mnt/user-data/workspace/up && ln -s {shlex.quote(str(secret))} "
        "/mnt/user-data/workspace/abs"
    )
    assert shell(sandbox, plant)[0] == 0
    for attempt in [
        "cat /mnt/user-data/workspace/up",
        "cat /mnt/user-data/workspace/abs",
        "cat /mnt/user-data/workspace/../secret.txt",
        f"cat {shlex.quote(str(secret))}",
    ]:
        code, output = shell(sandbox, attempt)
        assert code != 0 and "the host's own" not in output, attempt
    with pytest.raises(errors.SandboxFileNotFoundError):
        sandbox.read("/mnt/user-data/workspace/abs")


def stop_the_jail(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    _jail.stop_jail(provider.store.sandboxes_dir / sandbox.id / "jail")


def test_mounts_outlive_a_restart_of_the_jail(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    assert sandbox.read("/mnt/skills/README.md").content == "how to\n"
    stop_the_jail(provider, sandbox)
    assert provider.get(sandbox.id).read("/mnt/skills/README.md").content == "how to\n"


def test_a_source_replaced_by_a_symlink_is_refused_at_the_next_start(
    provider: BwrapProvider, host: Path
) -> None:
    source = writable_by_the_sandbox(host / "moving")
    with provider.create(mounts=[Mount(source=str(source), target="/mnt/moving")]) as sandbox:
        assert sandbox.execute("ls /mnt/moving").exit_code == 0
        stop_the_jail(provider, sandbox)
        source.rename(host / "moved")
        source.symlink_to(host)  # would expose secret.txt at /mnt/moving
        with pytest.raises(errors.InvalidPathError, match="replaced by a symlink"):
            sandbox.execute("ls /mnt/moving")


@pytest.mark.parametrize(
    ("mount", "error", "message"),
    [
        (Mount(source="/", target="/etc/x"), errors.InvalidPathError, "would cover /etc"),
        (Mount(source="/", target="/"), errors.InvalidPathError, "would cover /"),
        (Mount(source="/", target="/usr"), errors.InvalidPathError, "would cover /usr"),
        (Mount(source="/", target="/workspace/in"), errors.InvalidPathError, "would cover /workspace"),
        (Mount(source="/", target="/mnt/../proc"), errors.InvalidPathError, "would cover /proc"),
        (Mount(source="/", target="relative"), errors.InvalidPathError, "absolute"),
        (Mount(source="{host}/missing", target="/mnt/a"), errors.SandboxFileNotFoundError, "does not exist"),
        (Mount(source="{host}/link", target="/mnt/a"), errors.InvalidPathError, "through a symlink"),
        (Mount(source="{host}/link/skills", target="/mnt/a"), errors.InvalidPathError, "through a symlink"),
    ],
)
def test_a_mount_is_refused_before_anything_is_made(
    provider: BwrapProvider, host: Path, mount: Mount, error: type[Exception], message: str
) -> None:
    (host / "link").symlink_to(host)
    mount = mount.model_copy(update={"source": mount.source.format(host=host)})
    before = provider.list().items
    with pytest.raises(error, match=message):
        provider.create(mounts=[mount])
    assert provider.list().items == before


def test_overlapping_targets_and_other_providers_are_refused(provider: BwrapProvider, host: Path) -> None:
    overlapping = [Mount(source=str(host / "skills"), target=t) for t in ("/mnt/a", "/mnt/a/b")]
    with pytest.raises(errors.InvalidArgumentError, match="overlap"):
        provider.create(mounts=overlapping)
    with pytest.raises(errors.InvalidArgumentError, match=r"a list of sandbox_sdk\.Mount"):
        provider.create(mounts="/mnt/a")
    with (
        LocalProvider(state_dir=host / "local") as local,
        pytest.raises(errors.InvalidArgumentError, match="local provider cannot mount host paths"),
    ):
        local.create(mounts=[Mount(source=str(host / "skills"), target="/mnt/skills")])
