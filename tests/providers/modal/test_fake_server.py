"""The fake Modal backend, driven by the real modal SDK (blocking and ``.aio`` APIs).

These pin down the behaviour the provider relies on, so a fake that drifts from
the SDK shows up here first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import modal
import modal.exception
import pytest
from grpclib import Status

from tests.providers.modal.fake_server import FakeModalServer


@pytest.fixture
def sandbox(modal_env: FakeModalServer) -> Iterator[modal.Sandbox]:
    app = modal.App.lookup("fake-server-tests", create_if_missing=True)
    sb = modal.Sandbox.create(app=app, tags={"suite": "fake"}, env={"GREETING": "hello"}, timeout=120)
    yield sb
    sb.terminate()


def test_exec_streams_exit_code_env_and_cwd(sandbox: modal.Sandbox, modal_env: FakeModalServer) -> None:
    script = 'echo "$GREETING $EXTRA"; echo oops >&2; pwd; exit 3'
    proc = sandbox.exec("bash", "-c", script, env={"EXTRA": "x"})
    assert proc.stdout.read() == f"hello x\n{modal_env.sandbox_directory(sandbox.object_id)}\n"
    assert proc.stderr.read() == "oops\n"
    assert proc.wait() == 3


def test_exec_workdir_and_stdin(sandbox: modal.Sandbox, tmp_path: Path) -> None:
    proc = sandbox.exec("bash", "-c", "pwd; cat", workdir=str(tmp_path))
    proc.stdin.write(b"from stdin")
    proc.stdin.write_eof()
    proc.stdin.drain()
    assert proc.stdout.read() == f"{tmp_path}\nfrom stdin"
    assert proc.wait() == 0


def test_exec_timeout_is_a_worker_side_sigkill(
    sandbox: modal.Sandbox, modal_env: FakeModalServer, tmp_path: Path
) -> None:
    """The worker kills the exec at ``timeout_secs`` and reports the signal: ``wait()``
    reads 128 + 9 without raising when that report beats the SDK's own deadline (-1),
    as it does for certain when the start reply is slow."""
    marker = tmp_path / "survived"
    modal_env.exec_start_delay = 0.5
    try:
        proc = sandbox.exec("bash", "-c", f"echo started; sleep 3; touch {marker}", timeout=1)
    finally:
        modal_env.exec_start_delay = 0.0
    assert proc.stdout.read() == "started\n"
    assert proc.wait() == 137
    assert not marker.exists()


def test_filesystem_round_trip_and_errors(sandbox: modal.Sandbox, modal_env: FakeModalServer) -> None:
    root = modal_env.sandbox_directory(sandbox.object_id)
    payload = bytes(range(256)) * 1000
    sandbox.filesystem.write_bytes(payload, f"{root}/deep/er/blob.bin")
    assert (root / "deep/er/blob.bin").read_bytes() == payload
    assert sandbox.filesystem.read_bytes(f"{root}/deep/er/blob.bin") == payload
    with pytest.raises(modal.exception.SandboxFilesystemNotFoundError):
        sandbox.filesystem.read_bytes(f"{root}/missing")
    with pytest.raises(modal.exception.SandboxFilesystemIsADirectoryError):
        sandbox.filesystem.read_bytes(f"{root}/deep")
    with pytest.raises(modal.exception.SandboxFilesystemIsADirectoryError):
        sandbox.filesystem.write_bytes(b"x", f"{root}/deep")
    with pytest.raises(modal.exception.SandboxFilesystemNotADirectoryError):
        sandbox.filesystem.write_bytes(b"x", f"{root}/deep/er/blob.bin/child")


def test_stdin_stream_resumes_after_a_dropped_stream(
    sandbox: modal.Sandbox, modal_env: FakeModalServer
) -> None:
    root = modal_env.sandbox_directory(sandbox.object_id)
    modal_env.fail("TaskExecStdinWriteStream", Status.UNAVAILABLE)
    sandbox.filesystem.write_bytes(b"resumed", f"{root}/resumed.txt")  # via TaskExecStdinStatus
    assert (root / "resumed.txt").read_bytes() == b"resumed"


@pytest.mark.usefixtures("calm_listing")
def test_tags_list_from_id_and_terminate(modal_env: FakeModalServer) -> None:
    app = modal.App.lookup("fake-server-list", create_if_missing=True)
    modal_env.page_size = 2
    created = [modal.Sandbox.create(app=app, tags={"batch": "b1", "n": str(i)}) for i in range(5)]
    other = modal.Sandbox.create(app=app, tags={"batch": "b2"})
    try:
        listed = [sb.object_id for sb in modal.Sandbox.list(app_id=app.app_id, tags={"batch": "b1"})]
        assert listed == [sb.object_id for sb in reversed(created)]  # newest first, across 3 pages
        again = modal.Sandbox.from_id(created[0].object_id)
        assert again.get_tags() == {"batch": "b1", "n": "0"}
        again.set_tags({"batch": "b1", "n": "zero"})
        assert created[0].get_tags()["n"] == "zero"
        created[0].terminate()
        assert created[0].poll() == 137
        listed = [sb.object_id for sb in modal.Sandbox.list(app_id=app.app_id, tags={"batch": "b1"})]
        assert created[0].object_id not in listed
        with pytest.raises(modal.exception.ConflictError, match="terminated"):
            again.exec("true").wait()  # a handle without a cached task id asks the control plane
    finally:
        modal_env.page_size = 3
        for sb in [*created, other]:
            sb.terminate()


def test_bad_token_and_unknown_ids(modal_env: FakeModalServer) -> None:
    with pytest.raises(modal.exception.NotFoundError):
        modal.Sandbox.from_id("sb-doesnotexist00000000000V")
    client = modal.Client.from_credentials(modal_env.token_id, "as-wrong")
    with pytest.raises(modal.exception.AuthError):
        modal.App.lookup("fake-server-auth", create_if_missing=True, client=client)


def test_unimplemented_rpcs_fail_loudly(sandbox: modal.Sandbox) -> None:
    with pytest.raises(modal.exception.UnimplementedError, match="does not implement"):
        sandbox.snapshot_filesystem()


async def test_async_api(modal_env: FakeModalServer) -> None:
    app = await modal.App.lookup.aio("fake-server-aio", create_if_missing=True)
    sb = await modal.Sandbox.create.aio(app=app, timeout=60)
    try:
        root = modal_env.sandbox_directory(sb.object_id)
        proc = await sb.exec.aio("bash", "-c", "printf async; exit 7")
        assert await proc.stdout.read.aio() == "async"
        assert await proc.wait.aio() == 7
        await sb.filesystem.write_bytes.aio(b"\x00\xff", f"{root}/a.bin")
        assert await sb.filesystem.read_bytes.aio(f"{root}/a.bin") == b"\x00\xff"
        slow = await sb.exec.aio("sleep", "5", timeout=1)
        assert await slow.wait.aio() in (137, -1)  # the worker's kill or the SDK's deadline
    finally:
        await sb.terminate.aio()
