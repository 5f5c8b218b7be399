"""``ModalProvider`` / ``ModalSandbox`` specifics on the fake backend: lifecycle, errors,
execute edge cases and native transfers, through the real modal SDK."""

from __future__ import annotations

import io
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib import Status

from sandbox_sdk import errors
from sandbox_sdk.provider import get_provider
from sandbox_sdk.providers.modal import CREATED_AT_TAG, ModalProvider, ModalSandbox
from tests.fakes.modal_server import FakeModalServer

from .conftest import make_provider


@pytest.fixture
def provider(modal_server: FakeModalServer) -> Iterator[ModalProvider]:
    """A provider on an app of its own, so listings only see this test's sandboxes."""
    provider = make_provider(modal_server, app_name=f"test-{secrets.token_hex(6)}")
    yield provider
    for info in provider.iter_sandboxes():
        provider.delete(sandbox_id=info.id)


@pytest.fixture
def sandbox(provider: ModalProvider) -> ModalSandbox:
    return provider.create(labels={"role": "test"})


# -- construction and registration --------------------------------------------------------------


def test_missing_credentials_fail_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    monkeypatch.setenv("MODAL_PROFILE", "")
    with pytest.raises(errors.AuthenticationError, match="MODAL_TOKEN_ID"):
        ModalProvider(token_id=None, token_secret=None)
    with pytest.raises(errors.AuthenticationError):
        ModalProvider(token_id="ak-only-id")


def test_wrong_credentials_are_an_authentication_error(modal_server: FakeModalServer) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODAL_SERVER_URL", modal_server.url)
        provider = ModalProvider(token_id=modal_server.token_id, token_secret="as-wrong")
    with pytest.raises(errors.AuthenticationError):
        provider.create()


def test_registered_as_entry_point(modal_env: FakeModalServer) -> None:
    provider = get_provider("modal", app_name="entry-point")
    assert isinstance(provider, ModalProvider)


# -- execute -----------------------------------------------------------------------------------


def test_timeout_reports_timed_out_with_exit_code_124(sandbox: ModalSandbox) -> None:
    response = sandbox.execute("echo before; sleep 20", timeout=1)
    assert response.timed_out
    assert response.exit_code == 124
    assert response.output == "before\n"


def test_fractional_timeouts_round_up_and_bad_ones_are_refused(sandbox: ModalSandbox) -> None:
    assert sandbox.execute("sleep 0.3; echo done", timeout=0.1).output == "done\n"
    with pytest.raises(errors.InvalidArgumentError):
        sandbox.execute("true", timeout=0)


def test_output_cap_and_order_of_merged_streams(provider: ModalProvider) -> None:
    sandbox = provider.create()
    sandbox.max_output_bytes = 1000
    response = sandbox.execute("for i in 1 2 3; do echo out$i; echo err$i >&2; done; head -c 5000 /dev/zero")
    assert response.truncated
    assert response.output.startswith("out1\nerr1\nout2\nerr2\nout3\nerr3\n")
    assert len(response.output) == 1000


def test_commands_get_empty_stdin(sandbox: ModalSandbox) -> None:
    response = sandbox.execute("cat; echo end", timeout=10)
    assert response == response.model_copy(update={"output": "end\n", "exit_code": 0})


def test_command_over_modal_argument_cap_is_refused_before_sending(sandbox: ModalSandbox) -> None:
    assert sandbox.max_command_bytes < 64 * 1024
    with pytest.raises(errors.InvalidArgumentError, match="64 KiB"):
        sandbox.execute(": " + "x" * sandbox.max_command_bytes)


async def test_aexecute_uses_native_async(sandbox: ModalSandbox) -> None:
    response = await sandbox.aexecute("echo $((6 * 7)) >&2; exit 4")
    assert (response.output, response.exit_code) == ("42\n", 4)
    slow = await sandbox.aexecute("sleep 20", timeout=1)
    assert slow.timed_out and slow.exit_code == 124


def test_terminated_sandbox_raises_not_found(provider: ModalProvider, sandbox: ModalSandbox) -> None:
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")


# -- lifecycle ---------------------------------------------------------------------------------


def test_labels_are_tags_and_get_round_trips(provider: ModalProvider, modal_server: FakeModalServer) -> None:
    sandbox = provider.create(labels={"thread": "42"})
    tags = sandbox.sandbox.get_tags()
    assert tags["thread"] == "42"
    assert CREATED_AT_TAG in tags
    again = provider.get(sandbox.id)
    assert again.id == sandbox.id
    assert again.execute("echo same").output == "same\n"


def test_get_missing_and_finished(provider: ModalProvider, sandbox: ModalSandbox) -> None:
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get("sb-missing0000000000000000V")
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get_or_create(sandbox_id=sandbox.id)


def test_delete_is_idempotent(provider: ModalProvider, sandbox: ModalSandbox) -> None:
    provider.delete(sandbox_id=sandbox.id)
    provider.delete(sandbox_id=sandbox.id)
    provider.delete(sandbox_id="sb-missing0000000000000000V")
    assert sandbox.id not in [info.id for info in provider.iter_sandboxes()]


def test_get_or_create_by_labels_reuses_exact_match(provider: ModalProvider) -> None:
    first = provider.get_or_create(labels={"thread": "7"})
    wider = provider.create(labels={"thread": "7", "extra": "1"})
    assert provider.get_or_create(labels={"thread": "7"}).id == first.id
    other = provider.get_or_create(labels={"thread": "8"})
    assert other.id not in (first.id, wider.id)
    assert provider.get_or_create(sandbox_id=first.id).id == first.id


def test_list_filters_by_labels_and_pages_with_cursor(
    provider: ModalProvider, modal_server: FakeModalServer
) -> None:
    modal_server.page_size = 2  # several SDK pages per provider page
    try:
        made = [provider.create(labels={"batch": "a", "n": str(i)}) for i in range(5)]
        provider.create(labels={"batch": "b"})
        first = provider.list(labels={"batch": "a"}, limit=3)
        assert [info.id for info in first.items] == [s.id for s in reversed(made)][:3]
        assert first.next_cursor is not None
        second = provider.list(labels={"batch": "a"}, cursor=first.next_cursor, limit=3)
        assert [info.id for info in second.items] == [s.id for s in reversed(made)][3:]
        assert second.next_cursor is None
        info = first.items[0]
        assert info.labels == {"batch": "a", "n": "4"}
        assert info.status == "running"
        assert info.created_at.timestamp() > 0
        ids = [info.id for info in provider.iter_sandboxes(labels={"batch": "a"}, page_size=2)]
        assert ids == [s.id for s in reversed(made)]
        # the cursor's sandbox deleted between pages: the next page still starts right after it
        page = provider.list(labels={"batch": "a"}, limit=2)
        provider.delete(sandbox_id=page.items[-1].id)
        assert page.next_cursor is not None
        rest = provider.list(labels={"batch": "a"}, cursor=page.next_cursor, limit=10)
        assert [info.id for info in rest.items] == [s.id for s in reversed(made)][2:]
        with pytest.raises(errors.InvalidArgumentError):
            provider.list(cursor="not-a-cursor")
    finally:
        modal_server.page_size = 3


def test_create_options_pass_through_in_modal_units(provider: ModalProvider) -> None:
    sandbox = provider.create(timeout=2, env={"FROM_CREATE": "yes"})
    assert sandbox.execute("echo $FROM_CREATE").output == "yes\n"
    with pytest.raises(errors.InvalidArgumentError, match="unknown Modal sandbox options"):
        provider.create(ttl_minutes=5)
    with pytest.raises(errors.InvalidArgumentError):
        provider.create(labels={CREATED_AT_TAG: "1"})


def test_sandbox_lifetime_ends_it(provider: ModalProvider, modal_server: FakeModalServer) -> None:
    sandbox = provider.create()
    modal_server.expire(sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(sandbox.id)
    assert sandbox.id not in [info.id for info in provider.iter_sandboxes()]


async def test_async_lifecycle(provider: ModalProvider) -> None:
    sandbox = await provider.acreate(labels={"async": "yes"})
    assert (await sandbox.aexecute("echo hi")).output == "hi\n"
    again = await provider.aget_or_create(labels={"async": "yes"})
    assert again.id == sandbox.id
    page = await provider.alist(labels={"async": "yes"})
    assert [info.id for info in page.items] == [sandbox.id]
    newer = await provider.acreate(labels={"async": "yes", "n": "2"})
    first = await provider.alist(labels={"async": "yes"}, limit=1)
    assert [info.id for info in first.items] == [newer.id]
    assert first.next_cursor is not None
    await provider.adelete(sandbox_id=newer.id)
    rest = await provider.alist(labels={"async": "yes"}, cursor=first.next_cursor)
    assert ([info.id for info in rest.items], rest.next_cursor) == ([sandbox.id], None)
    await provider.adelete(sandbox_id=sandbox.id)
    await provider.adelete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await provider.aget(sandbox.id)


# -- native transfers --------------------------------------------------------------------------


def _root(modal_server: FakeModalServer, sandbox: ModalSandbox) -> Path:
    return modal_server.sandbox_directory(sandbox.id)


def test_upload_files_order_parents_and_per_file_errors(
    sandbox: ModalSandbox, modal_server: FakeModalServer, tmp_path: Path
) -> None:
    root = _root(modal_server, sandbox)
    (root / "adir").mkdir()
    (root / "afile").write_text("x")
    local = tmp_path / "local.bin"
    local.write_bytes(b"from disk")
    results = sandbox.upload_files(
        [
            ("new/deep/one.txt", b"one"),
            (str(root / "abs.txt"), local),
            ("adir", b"onto a directory"),
            ("afile/child", b"under a file"),
            ("", b"empty path"),
            ("nul\0name", b"nul"),
            ("missing-local", tmp_path / "does-not-exist"),
        ]
    )
    assert [r.path for r in results] == [
        "new/deep/one.txt",
        str(root / "abs.txt"),
        "adir",
        "afile/child",
        "",
        "nul\0name",
        "missing-local",
    ]
    assert [r.error for r in results[:3]] == [None, None, "is_directory"]
    assert results[3].error is not None
    assert [r.error for r in results[4:6]] == ["invalid_path", "invalid_path"]
    assert results[6].error is not None and "cannot read local source" in results[6].error
    assert (root / "new/deep/one.txt").read_bytes() == b"one"
    assert (root / "abs.txt").read_bytes() == b"from disk"
    assert (root / "adir").is_dir() and (root / "afile").read_text() == "x"
    leftovers = [p.name for p in root.rglob("*") if ".sbx-" in p.name]
    assert leftovers == []


def test_upload_replaces_whole_file_via_rename(sandbox: ModalSandbox, modal_server: FakeModalServer) -> None:
    root = _root(modal_server, sandbox)
    target = root / "replace.txt"
    target.write_bytes(b"old content that is longer")
    inode = target.stat().st_ino
    progress: list[tuple[int, int]] = []
    [result] = sandbox.upload_files([("replace.txt", b"new")], progress=lambda d, t: progress.append((d, t)))
    assert result.error is None
    assert target.read_bytes() == b"new"
    assert target.stat().st_ino != inode  # a new file renamed over the old one, never rewritten in place
    assert progress[-1] == (3, 3)


def test_large_path_and_file_object_sources(
    sandbox: ModalSandbox, modal_server: FakeModalServer, tmp_path: Path
) -> None:
    root = _root(modal_server, sandbox)
    big = os.urandom(3 * 1024 * 1024 + 7)  # several of the SDK's 256 KiB stdin chunks
    (tmp_path / "big.bin").write_bytes(big)
    stream = io.BytesIO(b"skipped" + big[:1000])
    stream.seek(7)  # a file object is read from its position
    sync = sandbox.upload_files([("big.bin", tmp_path / "big.bin"), ("part.bin", stream)])
    assert [r.error for r in sync] == [None, None]
    assert (root / "big.bin").read_bytes() == big
    assert (root / "part.bin").read_bytes() == big[:1000]


async def test_large_path_source_async(
    sandbox: ModalSandbox, modal_server: FakeModalServer, tmp_path: Path
) -> None:
    big = os.urandom(1024 * 1024 + 3)
    (tmp_path / "big.bin").write_bytes(big)
    results = await sandbox.aupload_files([("abig.bin", str(tmp_path / "big.bin"))])
    assert results[0].error is None
    assert (_root(modal_server, sandbox) / "abig.bin").read_bytes() == big


def test_upload_keeps_mode_and_writes_through_symlinks(
    sandbox: ModalSandbox, modal_server: FakeModalServer
) -> None:
    root = _root(modal_server, sandbox)
    (root / "script.sh").write_text("old")
    (root / "script.sh").chmod(0o751)
    (root / "real").mkdir()
    (root / "real/target.txt").write_text("old")
    (root / "link.txt").symlink_to(root / "real/target.txt")
    results = sandbox.upload_files([("script.sh", b"new"), ("link.txt", b"through")])
    assert [r.error for r in results] == [None, None]
    assert (root / "script.sh").stat().st_mode & 0o777 == 0o751
    assert (root / "link.txt").is_symlink()
    assert (root / "real/target.txt").read_bytes() == b"through"


def test_download_files_order_and_errors(sandbox: ModalSandbox, modal_server: FakeModalServer) -> None:
    root = _root(modal_server, sandbox)
    (root / "d").mkdir()
    (root / "d/a.bin").write_bytes(bytes(range(256)))
    (root / "locked").write_bytes(b"secret")
    (root / "locked").chmod(0)
    results = sandbox.download_files(["d/a.bin", "missing", "d", "", str(root / "d/a.bin"), "locked"])
    assert [r.path for r in results] == ["d/a.bin", "missing", "d", "", str(root / "d/a.bin"), "locked"]
    assert results[0].content == bytes(range(256)) and results[0].error is None
    assert [r.error for r in results[1:4]] == ["file_not_found", "is_directory", "invalid_path"]
    assert results[4].content == bytes(range(256))
    if os.geteuid() != 0:  # root reads anything
        assert results[5].error == "permission_denied"


async def test_async_transfers(sandbox: ModalSandbox, modal_server: FakeModalServer) -> None:
    root = _root(modal_server, sandbox)
    files = [(f"many/{i:02d}.txt", f"file {i}".encode()) for i in range(12)]
    results = await sandbox.aupload_files([*files, ("many", b"x")])
    assert [r.error for r in results] == [None] * 12 + ["is_directory"]
    downloads = await sandbox.adownload_files([path for path, _ in files] + ["many/nope"])
    assert [d.content for d in downloads[:12]] == [data for _, data in files]
    assert downloads[12].error == "file_not_found"
    assert sorted(p.name for p in (root / "many").iterdir()) == [f"{i:02d}.txt" for i in range(12)]


def test_transfers_on_a_terminated_sandbox_raise(provider: ModalProvider, sandbox: ModalSandbox) -> None:
    sandbox.working_directory()
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.download_files(["anything"])
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.upload_files([("anything", b"x")])


async def test_async_transfers_on_a_terminated_sandbox_raise(
    provider: ModalProvider, sandbox: ModalSandbox
) -> None:
    await sandbox.aworking_directory()
    await provider.adelete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.adownload_files(["a", "b", "c"])
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.aupload_files([("a", b"x"), ("b", b"y")])


# -- service errors ----------------------------------------------------------------------------


def test_rate_limit_is_rate_limited_error(provider: ModalProvider, modal_server: FakeModalServer) -> None:
    provider.create()  # the app exists; the next create is the one refused
    modal_server.fail("SandboxCreateV2", Status.RESOURCE_EXHAUSTED)
    with pytest.raises(errors.RateLimitedError):
        provider.create()


def test_outage_is_provider_unavailable(
    provider: ModalProvider, sandbox: ModalSandbox, modal_server: FakeModalServer
) -> None:
    modal_server.fail("SandboxWaitV2", Status.UNAVAILABLE, times=100)
    try:
        with pytest.raises(errors.ProviderUnavailableError):
            provider.get(sandbox.id)
    finally:
        modal_server.fail("SandboxWaitV2", Status.UNAVAILABLE, times=0)
    assert provider.get(sandbox.id).id == sandbox.id


@pytest.mark.parametrize("rpc", ["TaskExecWait", "TaskExecStdioRead"])
async def test_errors_while_a_command_runs_are_typed(
    sandbox: ModalSandbox, modal_server: FakeModalServer, rpc: str
) -> None:
    modal_server.fail(rpc, Status.NOT_FOUND)
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.aexecute("sleep 0.2")
    modal_server.fail(rpc, Status.PERMISSION_DENIED)
    with pytest.raises(errors.AuthenticationError):
        sandbox.execute("sleep 0.2")


def test_unexpected_service_error_is_runtime_error(
    sandbox: ModalSandbox, modal_server: FakeModalServer
) -> None:
    modal_server.fail("TaskExecStart", Status.DATA_LOSS)
    with pytest.raises(errors.SandboxRuntimeError):
        sandbox.execute("true")
    assert sandbox.execute("echo fine").output == "fine\n"


def test_background_process_holding_output_does_not_block(sandbox: ModalSandbox) -> None:
    started = time.monotonic()
    response = sandbox.execute("sleep 30 & echo started", timeout=20)
    assert time.monotonic() - started < 5
    assert (response.output, response.exit_code, response.timed_out) == ("started\n", 0, False)


async def test_background_process_holding_output_does_not_block_async(sandbox: ModalSandbox) -> None:
    started = time.monotonic()
    response = await sandbox.aexecute("sleep 30 & echo started", timeout=20)
    assert time.monotonic() - started < 5
    assert (response.output, response.exit_code, response.timed_out) == ("started\n", 0, False)


def test_all_output_arrives_after_the_command_exits(sandbox: ModalSandbox) -> None:
    response = sandbox.execute("head -c 3000000 /dev/zero | tr '\\0' z")
    assert response.output == "z" * 3_000_000
