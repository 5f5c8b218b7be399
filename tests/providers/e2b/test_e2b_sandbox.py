"""``E2BSandbox`` beyond the conformance suite: execute details, error mapping
and the native file transfers, through the real SDK and the fake service."""

from __future__ import annotations

import hashlib
import io
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from e2b import CommandExitException, Sandbox
from e2b import exceptions as e2b_errors

from sandbox_sdk import errors
from sandbox_sdk.providers.e2b import E2BProvider, E2BSandbox
from sandbox_sdk.providers.e2b._errors import typed_error
from sandbox_sdk.providers.e2b.sandbox import _CommandRun
from sandbox_sdk.testing import HOSTILE_CONTENTS, HOSTILE_NAMES
from sandbox_sdk.transfer import transfer_error
from tests.fakes.e2b_server import FakeE2BServer
from tests.providers.e2b.support import API_KEY


def home_of(fake: FakeE2BServer, sandbox: E2BSandbox) -> Path:
    return fake.sandbox(sandbox.id).home


# -- execute ---------------------------------------------------------------------------------


def test_stdout_and_stderr_keep_their_order(e2b_sandbox: E2BSandbox) -> None:
    response = e2b_sandbox.execute("echo one; echo two >&2; echo three; echo four >&2")
    assert response.output == "one\ntwo\nthree\nfour\n"
    assert response.exit_code == 0


def test_commands_get_envd_environment_and_home(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    response = e2b_sandbox.execute('printf "%s|%s|%s" "$HOME" "$PWD" "$USER"')
    home = str(home_of(fake_e2b, e2b_sandbox))
    assert response.output == f"{home}|{home}|user"


def test_create_envs_reach_commands(provider: E2BProvider) -> None:
    sandbox = provider.create(envs={"GREETING": "hello from create"})
    try:
        assert sandbox.execute('echo "$GREETING"').output == "hello from create\n"
    finally:
        provider.delete(sandbox_id=sandbox.id)


def test_default_timeout_applies(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    short = E2BSandbox(e2b_sandbox.sdk_sandbox, timeout=0.5)
    response = short.execute("echo started; sleep 5")
    assert response.timed_out
    assert response.exit_code == 124
    deadline = time.monotonic() + 5
    while fake_e2b.sandbox(e2b_sandbox.id).processes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not fake_e2b.sandbox(e2b_sandbox.id).processes, "envd should have killed the command"


async def test_async_timeout_and_exit_codes(e2b_sandbox: E2BSandbox) -> None:
    response = await e2b_sandbox.aexecute("sleep 5", timeout=0.5)
    assert response.timed_out
    failed = await e2b_sandbox.aexecute("echo partial; exit 9")
    assert (failed.output, failed.exit_code, failed.timed_out) == ("partial\n", 9, False)


@pytest.mark.parametrize("timeout", [0, -1, True, "5"])
def test_bad_timeouts_are_refused(e2b_sandbox: E2BSandbox, timeout: object) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        e2b_sandbox.execute("true", timeout=timeout)  # type: ignore[arg-type]


def test_output_cap_cuts_and_flags(e2b_sandbox: E2BSandbox) -> None:
    capped = E2BSandbox(e2b_sandbox.sdk_sandbox, max_output_bytes=10_000)
    response = capped.execute("head -c 50000 /dev/zero | tr '\\0' z; echo; echo tail")
    assert response.truncated
    assert response.output == "z" * 10_000


def test_end_event_that_beats_the_client_deadline_counts_as_timeout() -> None:
    """envd kills at the deadline and its end event (exit -1) can arrive before
    the SDK's own deadline fires; past the deadline that is a timeout too."""
    run = _CommandRun("sleep 9", 0.01, 1000)
    time.sleep(0.02)
    killed = CommandExitException(stdout="", stderr="", exit_code=-1, error="signal: killed")
    response = run.failed(killed)
    assert (response.timed_out, response.exit_code) == (True, 124)


def test_death_by_signal_before_the_deadline_is_an_exit(e2b_sandbox: E2BSandbox) -> None:
    response = e2b_sandbox.execute("echo before; kill -9 $$", timeout=30)
    assert (response.output, response.exit_code, response.timed_out) == ("before\n", -1, False)


def test_killed_sandbox_raises_not_found(provider: E2BProvider) -> None:
    sandbox = provider.create()
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.ls(".")


def test_only_sdk_sandboxes_are_wrapped() -> None:
    with pytest.raises(errors.InvalidArgumentError):
        E2BSandbox("i123")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (e2b_errors.AuthenticationException("401: Unauthorized"), errors.AuthenticationError),
        (e2b_errors.RateLimitException("429: Rate limit exceeded"), errors.RateLimitedError),  # type: ignore[no-untyped-call]
        (e2b_errors.ServiceBusyException("503: busy"), errors.ProviderUnavailableError),
        (e2b_errors.SandboxNotFoundException("Sandbox x not found"), errors.SandboxNotFoundError),
        (e2b_errors.SandboxNotRunningException("was not found"), errors.SandboxNotFoundError),
        (e2b_errors.SandboxUnreachableException("port is not open"), errors.ProviderUnavailableError),
        (e2b_errors.TimeoutException("deadline exceeded"), errors.SandboxTimeoutError),
        (e2b_errors.FileNotFoundException("path '/a' does not exist"), errors.SandboxFileNotFoundError),
        (e2b_errors.InvalidArgumentException("path '/a' is a directory"), errors.SandboxIsADirectoryError),
        (e2b_errors.SandboxException("500: open /a: permission denied"), errors.SandboxPermissionError),
        (e2b_errors.SandboxException("500: mkdir /a/b: not a directory"), errors.SandboxNotADirectoryError),
        (e2b_errors.InvalidArgumentException("bad cwd"), errors.InvalidArgumentError),
        (e2b_errors.NotEnoughSpaceException("507: no space"), errors.SandboxRuntimeError),
        (ConnectionRefusedError("refused"), errors.ProviderUnavailableError),
    ],
)
def test_sdk_errors_map_to_typed_errors(raised: Exception, expected: type[errors.SandboxError]) -> None:
    mapped = typed_error(raised, "doing it")
    assert type(mapped) is expected
    assert str(raised) in str(mapped)


def test_transfer_codes_from_envd_messages() -> None:
    envd_message = "500: error opening file: open /a: permission denied"
    denied = typed_error(e2b_errors.SandboxException(envd_message), "x")
    assert transfer_error(denied) == "permission_denied"
    assert transfer_error(typed_error(e2b_errors.FileNotFoundException("nope"), "x")) == "file_not_found"


# -- native transfers ------------------------------------------------------------------------


def test_upload_download_round_trip_in_order(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    files = [(f"deep/er/file-{i}.bin", content) for i, content in enumerate(HOSTILE_CONTENTS)]
    files.append((str(home / "absolute.txt"), b"absolute path"))
    assert [r.model_dump() for r in e2b_sandbox.upload_files(files)] == [
        {"path": path, "error": None} for path, _ in files
    ]
    for path, content in files:
        assert (home / path).read_bytes() == content
    downloaded = e2b_sandbox.download_files([path for path, _ in reversed(files)])
    assert [(r.path, r.content, r.error) for r in downloaded] == [(p, c, None) for p, c in reversed(files)]


def test_hostile_names_round_trip(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    names = [name for name in HOSTILE_NAMES if isinstance(name, str)]
    files = [(f"hostile/{name}", name.encode()) for name in names]
    assert [r.error for r in e2b_sandbox.upload_files(files)] == [None] * len(files)
    home = home_of(fake_e2b, e2b_sandbox)
    assert sorted(p.name for p in (home / "hostile").iterdir()) == sorted(names)
    downloaded = e2b_sandbox.download_files([path for path, _ in files])
    assert [(r.content, r.error) for r in downloaded] == [(content, None) for _, content in files]


def test_upload_errors_are_per_file(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    (home / "a-dir").mkdir()
    (home / "a-file").write_bytes(b"plain")
    responses = e2b_sandbox.upload_files(
        [
            ("first.txt", b"1"),
            ("a-dir", b"onto a directory"),
            ("", b"empty path"),
            ("nul\0byte", b"x"),
            ("slash/", b"x"),
            ("a-file/child", b"under a file"),
            (str(home / "missing-local"), home / "does-not-exist"),
            ("last.txt", b"2"),
        ]
    )
    codes = [r.error for r in responses]
    assert codes[:5] == [None, "is_directory", "invalid_path", "invalid_path", "is_directory"]
    assert codes[5] is not None and "not a directory" in codes[5]
    assert codes[6] is not None and codes[6].startswith("cannot read local source")
    assert codes[7] is None
    assert (home / "first.txt").read_bytes() == b"1" and (home / "last.txt").read_bytes() == b"2"
    assert (home / "a-dir").is_dir() and (home / "a-file").read_bytes() == b"plain"
    assert not [p for p in home.rglob("*") if ".sbx-" in p.name], "staging files were left behind"


def test_upload_replaces_by_rename(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    """The new content is written beside the target and renamed over it, so a
    reader holding the old file never sees a half-written one."""
    target = home_of(fake_e2b, e2b_sandbox) / "replace-me.txt"
    target.write_bytes(b"old content")
    with open(target, "rb") as reader:
        old_inode = os.fstat(reader.fileno()).st_ino
        assert e2b_sandbox.upload_files([("replace-me.txt", b"new content")])[0].error is None
        assert reader.read() == b"old content"
    assert target.read_bytes() == b"new content"
    assert target.stat().st_ino != old_inode


def test_upload_sources_and_progress(tmp_path: Path, e2b_sandbox: E2BSandbox) -> None:
    local = tmp_path / "local.bin"
    local.write_bytes(b"from a path")
    seen: list[tuple[int, int]] = []
    responses = e2b_sandbox.upload_files(
        [
            ("p.bin", local),
            ("s.bin", str(local)),
            ("f.bin", io.BytesIO(b"file object")),
            ("b.bin", bytearray(b"bytearray")),
            ("m.bin", memoryview(b"memoryview")),
        ],
        progress=lambda done, total: seen.append((done, total)),
    )
    assert all(r.error is None for r in responses)
    got = e2b_sandbox.download_files(["p.bin", "s.bin", "f.bin", "b.bin", "m.bin"])
    expected = [b"from a path", b"from a path", b"file object", b"bytearray", b"memoryview"]
    assert [r.content for r in got] == expected
    assert seen[-1][0] == sum(len(content) for content in expected)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


def test_download_errors_are_per_file(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    (home / "dir").mkdir()
    (home / "ok.txt").write_bytes(b"fine")
    responses = e2b_sandbox.download_files(["missing.txt", "dir", "", "ok.txt"])
    assert [(r.content, r.error) for r in responses] == [
        (None, "file_not_found"),
        (None, "is_directory"),
        (None, "invalid_path"),
        (b"fine", None),
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes through any permission bits")
def test_permission_errors(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    (home / "secret").write_bytes(b"x")
    (home / "secret").chmod(0)
    (home / "locked").mkdir(mode=0o500)
    assert e2b_sandbox.download_files(["secret"])[0].error == "permission_denied"
    assert e2b_sandbox.upload_files([("locked/new", b"x")])[0].error == "permission_denied"


async def test_async_transfers(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    (home / "adir").mkdir()
    uploaded = await e2b_sandbox.aupload_files([("async/one.bin", b"\0\1\2"), ("adir", b"x")])
    assert [r.error for r in uploaded] == [None, "is_directory"]
    downloaded = await e2b_sandbox.adownload_files(["async/one.bin", "async/none"])
    assert [(r.content, r.error) for r in downloaded] == [(b"\0\1\2", None), (None, "file_not_found")]


async def test_sandbox_from_async_sdk_object_works_both_ways(fake_e2b: FakeE2BServer) -> None:
    from e2b import AsyncSandbox

    native = await AsyncSandbox.create(
        timeout=60, api_key=API_KEY, api_url=fake_e2b.url, sandbox_url=fake_e2b.url
    )
    sandbox = E2BSandbox(native)
    try:
        assert (await sandbox.aexecute("echo async")).output == "async\n"
        assert sandbox.execute("echo sync").output == "sync\n"
        assert isinstance(sandbox.sdk_sandbox, Sandbox)
        assert sandbox.sdk_async_sandbox is native
    finally:
        await native.kill()


@pytest.mark.slow
def test_large_file_streams_both_ways(tmp_path: Path, e2b_sandbox: E2BSandbox) -> None:
    local = tmp_path / "big.bin"
    with open(local, "wb") as out:
        for block in range(32):
            out.write(hashlib.sha256(str(block).encode()).digest() * 8192)  # 256 KiB a block
    assert e2b_sandbox.upload_files([("big/big.bin", local)])[0].error is None
    [response] = e2b_sandbox.download_files(["big/big.bin"])
    assert response.content is not None
    assert hashlib.sha256(response.content).digest() == hashlib.sha256(local.read_bytes()).digest()
    assert e2b_sandbox.stat("big/big.bin").size == local.stat().st_size


async def test_async_transfers_run_concurrently_in_order(
    fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox
) -> None:
    files = [(f"many/{i:02}.txt", f"file {i}".encode()) for i in range(12)]
    seen: list[int] = []
    uploaded = await e2b_sandbox.aupload_files(files, progress=lambda done, _: seen.append(done))
    assert [r.path for r in uploaded] == [path for path, _ in files]
    assert all(r.error is None for r in uploaded)
    assert seen[-1] == sum(len(content) for _, content in files)
    downloaded = await e2b_sandbox.adownload_files([path for path, _ in reversed(files)])
    assert [(r.path, r.content) for r in downloaded] == list(reversed(files))


async def test_repeated_paths_keep_the_last_upload(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    versions = [("same.txt", f"version {i}".encode()) for i in range(6)]
    assert all(r.error is None for r in await e2b_sandbox.aupload_files(versions))
    assert (home / "same.txt").read_bytes() == b"version 5"
    assert all(r.error is None for r in e2b_sandbox.upload_files(list(reversed(versions))))
    assert (home / "same.txt").read_bytes() == b"version 0"
