"""The client and session against the Agents SDK's own contract, on real
bwrap and local sandboxes: the manifest applied by the SDK's own code, exec,
read and write, persist and hydrate, resume, and each refusal in the SDK's
own error types."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from agents.sandbox import LocalSnapshotSpec, Manifest
from agents.sandbox.entries import (
    Dir,
    File,
    InContainerMountStrategy,
    LocalFile,
    RcloneMountPattern,
    S3Mount,
)
from agents.sandbox.errors import (
    ConfigurationError,
    ExecTimeoutError,
    ExecTransportError,
    ExposedPortUnavailableError,
    InvalidManifestPathError,
    MountConfigError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceRootNotFoundError,
    WorkspaceStartError,
)
from agents.sandbox.manifest import EnvEntry, Environment, StrEnvValue
from agents.sandbox.session import SandboxSession
from agents.sandbox.types import User
from agents.sandbox.workspace_paths import SandboxPathGrant

from sandbox_sdk.integrations.openai_agents import (
    SandboxSDKClient,
    SandboxSDKClientOptions,
    SandboxSDKSessionState,
)
from sandbox_sdk.provider import SandboxProvider
from tests.integrations.openai_agents.conftest import inner, sandbox_id, sandbox_ids
from tests.test_public_api import public_names, undocumented


async def text(session: SandboxSession, path: str) -> str:
    stream = await session.read(Path(path))
    data = stream.read()
    stream.close()
    assert isinstance(data, bytes)
    return data.decode()


async def test_the_manifest_is_applied_and_exec_runs_in_the_workspace_with_its_environment(
    client: SandboxSDKClient, provider: SandboxProvider[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK reads local sources only below the working directory (or a path grant).
    monkeypatch.chdir(tmp_path)
    Path("source.txt").write_text("from the host\n")
    manifest = Manifest(
        entries={
            "notes/hello.txt": File(content=b"hello\n"),
            "empty": Dir(),
            "copied.txt": LocalFile(src=Path("source.txt")),
        },
        environment=Environment(
            value={"GREETING": "bonjour", "TOKEN": EnvEntry(value=StrEnvValue(value="s3cret"))}
        ),
    )
    session = await client.create(manifest=manifest)
    root = session.state.manifest.root
    assert root.startswith("/")
    async with session:
        listing = await session.exec('ls -A; pwd; printf \'%s %s\' "$GREETING" "$TOKEN" >&2')
        assert listing.stdout.decode().splitlines() == ["copied.txt", "empty", "notes", root]
        assert listing.stderr == b"bonjour s3cret"
        assert await text(session, "notes/hello.txt") == "hello\n"
        assert await text(session, f"{root}/copied.txt") == "from the host\n"
        assert (await session.exec("exit 3")).exit_code == 3
        assert (await session.exec("kill -TERM $$")).exit_code == 128 + 15
        missing = await session.exec("no-such-program-here", shell=False)
        assert missing.exit_code == 127
    await client.delete(session)
    assert sandbox_ids(provider) == []


async def test_the_default_root_is_the_sandboxs_working_directory_and_another_root_is_made(
    client: SandboxSDKClient, provider: SandboxProvider[Any]
) -> None:
    first = await client.create()
    async with first:
        workdir = (await first.exec("pwd -P")).stdout.decode().strip()
        assert first.state.manifest.root == workdir
        chosen = f"{workdir}/project/src"
        second = await client.create(manifest=Manifest(root=chosen, entries={"a.txt": File(content=b"a")}))
        async with second:
            assert second.state.manifest.root == chosen
            assert (await second.exec("pwd -P; cat a.txt")).stdout.decode() == f"{chosen}\na"
        await client.delete(second)
    await client.delete(first)
    assert sandbox_ids(provider) == []


async def test_a_root_that_cannot_be_made_or_is_gone_is_said_in_the_sdks_terms(
    client: SandboxSDKClient, provider: SandboxProvider[Any]
) -> None:
    unmakeable = await client.create(manifest=Manifest(root="/proc/no-workspace-here"))
    with pytest.raises(WorkspaceStartError) as refused:
        await unmakeable.start()
    assert refused.value.context["path"] == "/proc/no-workspace-here"
    await client.delete(unmakeable)

    # A root below a sandbox's working directory (on local, another sandbox's: it is the host's).
    base = await client.create()
    session = await client.create(manifest=Manifest(root=f"{base.state.manifest.root}/project"))
    async with session:
        await session.exec("cd .. && rm -r project")
        with pytest.raises(WorkspaceRootNotFoundError):
            await session.exec("true")
    await client.delete(session)
    await client.delete(base)
    assert sandbox_ids(provider) == []


async def test_create_options_reach_the_provider(
    client: SandboxSDKClient, provider: SandboxProvider[Any]
) -> None:
    session = await client.create(options=SandboxSDKClientOptions(create={"labels": {"run": "agents-42"}}))
    assert [info.id for info in provider.iter_sandboxes(labels={"run": "agents-42"})] == [sandbox_id(session)]
    await client.delete(session)


async def test_read_and_write_are_byte_exact_and_map_errors_to_the_sdks_types(
    client: SandboxSDKClient,
) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, not UTF-8: chunked both ways
    session = await client.create()
    async with session:
        await session.write(Path("deep/er/blob.bin"), io.BytesIO(payload))
        stream = await session.read(Path("deep/er/blob.bin"))
        assert stream.read() == payload
        stream.close()
        await session.write(Path("deep/er/blob.bin"), io.BytesIO(b"replaced"))
        assert await text(session, "deep/er/blob.bin") == "replaced"

        with pytest.raises(WorkspaceReadNotFoundError) as missing:
            await session.read(Path("nothing/here.txt"))
        assert isinstance(missing.value.cause, FileNotFoundError)
        with pytest.raises(WorkspaceArchiveReadError):
            await session.read(Path("deep"))  # a directory
        with pytest.raises(WorkspaceArchiveWriteError) as refused:
            await session.write(Path("deep/er"), io.BytesIO(b"x"))  # a directory
        assert "deep/er" in str(refused.value.context)
        with pytest.raises(InvalidManifestPathError):
            await session.write(Path("../escape.txt"), io.BytesIO(b"x"))
        assert (await session.exec("ls deep/er")).stdout == b"blob.bin\n"
    await client.delete(session)


async def test_exec_timeouts_and_cut_output_are_errors_not_results(client: SandboxSDKClient) -> None:
    session = await client.create()
    async with session:
        with pytest.raises(ExecTimeoutError) as late:
            await session.exec("echo started; sleep 30", timeout=1)
        assert late.value.timeout_s == 1
        limit = inner(session).sandbox.limits.max_output_bytes
        with pytest.raises(ExecTransportError) as cut:
            await session.exec(f"head -c {limit + 4096} /dev/zero | tr '\\0' x")
        assert cut.value.context["reason"] == "output_truncated"
    await client.delete(session)


async def test_what_has_no_equivalent_is_refused_before_a_sandbox_is_made(
    client: SandboxSDKClient, provider: SandboxProvider[Any]
) -> None:
    strategy = InContainerMountStrategy(pattern=RcloneMountPattern())
    mounted = Manifest(entries={"data": S3Mount(bucket="b", mount_strategy=strategy)})
    with pytest.raises(MountConfigError) as mount:
        await client.create(manifest=mounted)
    assert "s3_mount at" in str(mount.value) and "data" in str(mount.value)
    with pytest.raises(ConfigurationError, match="alice"):
        await client.create(manifest=Manifest(users=[User(name="alice")]))
    with pytest.raises(ConfigurationError, match="/opt/data"):
        await client.create(
            manifest=Manifest(extra_path_grants=(SandboxPathGrant(path="/opt/data", host_path="/srv/data"),))
        )
    assert sandbox_ids(provider) == []


async def test_users_ports_and_pty_are_refused_in_the_sdks_terms(client: SandboxSDKClient) -> None:
    session = await client.create()
    async with session:
        with pytest.raises(ConfigurationError, match="'bob'") as as_bob:
            await session.exec("id", user="bob")
        assert as_bob.value.op == "exec"
        with pytest.raises(ConfigurationError, match="'bob'") as as_bob:
            await session.read(Path("x"), user=User(name="bob"))
        assert as_bob.value.op == "read"
        with pytest.raises(ExposedPortUnavailableError) as port:
            await session.resolve_exposed_port(8080)
        assert port.value.context["reason"] == "backend_unavailable"
        assert not session.supports_pty()
        with pytest.raises(NotImplementedError):  # the SDK's own default for a backend without PTY
            await session.pty_exec_start("bash", tty=True)
    await client.delete(session)


async def workspace_tree(session: SandboxSession) -> list[str]:
    """Every entry under the root: its type, mode and path (and a link's target)."""
    listing = await session.exec("find . -mindepth 1 -printf '%y %m %p %l\\n' | sort")
    found: str = listing.stdout.decode()
    return found.splitlines()


async def test_persist_and_hydrate_carry_the_tree_and_leave_ephemeral_entries_out(
    client: SandboxSDKClient,
) -> None:
    manifest = Manifest(
        entries={"kept.txt": File(content=b"kept\n"), "scratch": Dir(ephemeral=True)},
    )
    source = await client.create(manifest=manifest)
    async with source:
        await source.exec(
            "mkdir -p src/pkg empty && printf 'x' > src/pkg/mod.py && printf '#!/bin/sh\\n' > run.sh"
            " && chmod 755 run.sh && ln -s src/pkg/mod.py link.py && echo temp > scratch/t.txt"
        )
        expected = [line for line in await workspace_tree(source) if "scratch" not in line]
        archive = await source.persist_workspace()
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            names = sorted(tar.getnames())
        assert "scratch" not in names and "scratch/t.txt" not in names
        assert "src/pkg/mod.py" in names and not any(name.startswith(("/", "./")) for name in names)
        archive.seek(0)
        target = await client.create()
        async with target:
            await target.hydrate_workspace(archive)
            assert await workspace_tree(target) == expected
        await client.delete(target)
    await client.delete(source)


async def test_a_link_leaving_the_workspace_fails_persist_naming_it(client: SandboxSDKClient) -> None:
    session = await client.create()
    async with session:
        await session.exec("ln -s /etc/hostname outside")
        with pytest.raises(WorkspaceArchiveReadError) as refused:
            await session.persist_workspace()
        assert "outside" in str(refused.value.context)
    await client.delete(session)


def archive_of(*members: tuple[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    buffer.seek(0)
    return buffer


async def test_an_unsafe_archive_is_refused_whole(client: SandboxSDKClient) -> None:
    session = await client.create()
    async with session:
        with pytest.raises(WorkspaceArchiveWriteError) as refused:
            await session.hydrate_workspace(archive_of(("fine.txt", b"ok"), ("../escaped.txt", b"no")))
        assert refused.value.context["reason"] == "unsafe_or_unreadable_archive"
        with pytest.raises(WorkspaceArchiveWriteError):
            await session.hydrate_workspace(io.BytesIO(b"not a tar archive at all" * 40))
        assert (await session.exec("ls -A")).stdout == b""  # not even fine.txt
        assert "escaped.txt" not in (await session.exec("ls -A ..")).stdout.decode()
    await client.delete(session)


async def test_resume_reattaches_to_a_live_sandbox(client: SandboxSDKClient) -> None:
    session = await client.create()
    async with session:
        await session.write(Path("state.txt"), io.BytesIO(b"still here"))
    payload = client.serialize_session_state(session.state)
    state = client.deserialize_session_state(payload)
    assert isinstance(state, SandboxSDKSessionState)
    resumed = await client.resume(state)
    async with resumed:
        assert sandbox_id(resumed) == sandbox_id(session)
        assert await text(resumed, "state.txt") == "still here"
    await client.delete(resumed)


async def test_resume_of_a_deleted_sandbox_makes_a_new_one_from_the_snapshot(
    client: SandboxSDKClient, provider: SandboxProvider[Any], tmp_path: Path
) -> None:
    snapshot = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    session = await client.create(snapshot=snapshot, manifest=Manifest(entries={"m.txt": File(content=b"m")}))
    async with session:  # leaving the block persists the workspace into the snapshot
        await session.write(Path("work/notes.txt"), io.BytesIO(b"written by the agent"))
    payload = client.serialize_session_state(session.state)
    await client.delete(session)
    assert sandbox_ids(provider) == []

    resumed = await client.resume(client.deserialize_session_state(payload))
    async with resumed:
        new_id = sandbox_id(resumed)
        assert new_id != sandbox_id(session)
        assert await text(resumed, "work/notes.txt") == "written by the agent"
        assert await text(resumed, "m.txt") == "m"
    assert sandbox_ids(provider) == [new_id]
    await client.delete(resumed)


def test_every_public_name_has_a_docstring() -> None:
    """tests/test_public_api.py's check, here where the module can be imported."""
    import sandbox_sdk.integrations.openai_agents as module

    missing = [name for attr in public_names(module) for name in undocumented(getattr(module, attr))]
    assert missing == []
