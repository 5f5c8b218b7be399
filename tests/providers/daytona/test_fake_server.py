"""The fake Daytona server answers the real SDK (sync and async) the way the service does."""

from __future__ import annotations

import pytest
from daytona import (
    AsyncDaytona,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaConfig,
    DaytonaNotFoundError,
    DaytonaTimeoutError,
    FileDownloadRequest,
    FileUpload,
    ListSandboxesQuery,
    SandboxState,
)

from tests.providers.daytona.fake_server import FakeDaytonaServer, split_command_like_old_daemon


def _client(server: FakeDaytonaServer) -> Daytona:
    return Daytona(DaytonaConfig(api_key=server.api_key, api_url=server.api_url))


@pytest.mark.usefixtures("calm_listing")
def test_sync_sdk_round_trip(daytona_server: FakeDaytonaServer) -> None:
    client = _client(daytona_server)
    sandbox = client.create(CreateSandboxFromSnapshotParams(labels={"suite": "fake-sync"}))
    assert (daytona_server.root / sandbox.id).is_dir()

    result = sandbox.process.exec("echo out; echo err >&2; pwd; exit 3", env={"X": "1"}, timeout=10)
    assert result.exit_code == 3
    assert result.result == f"out\nerr\n{daytona_server.root / sandbox.id}\n"

    sandbox.fs.upload_files([FileUpload(source=b"\x00payload", destination="a/b/c.bin")])
    assert (daytona_server.root / sandbox.id / "a/b/c.bin").read_bytes() == b"\x00payload"
    got = sandbox.fs.download_files(
        [
            FileDownloadRequest(source="a/b/c.bin"),
            FileDownloadRequest(source="missing"),
            FileDownloadRequest(source="a"),
        ]
    )
    assert got[0].result == b"\x00payload"
    assert got[1].error_details is not None and got[1].error_details.code == "FILE_NOT_FOUND"
    assert got[2].error_details is not None and got[2].error_details.code == "INVALID_FILE_PATH"

    listed = [s.id for s in client.list(ListSandboxesQuery(labels={"suite": "fake-sync"}))]
    assert listed == [sandbox.id]
    assert client.get(sandbox.id).labels["suite"] == "fake-sync"
    client.delete(sandbox)
    assert client.get(sandbox.id).state == SandboxState.DESTROYED
    assert not list(client.list(ListSandboxesQuery(labels={"suite": "fake-sync"})))
    with pytest.raises(DaytonaNotFoundError):
        client.delete(sandbox)
    with pytest.raises(DaytonaNotFoundError):
        client.get("no-such-sandbox")


def test_exec_honours_cwd_env_and_timeout(daytona_server: FakeDaytonaServer) -> None:
    sandbox = _client(daytona_server).create()
    (daytona_server.root / sandbox.id / "sub").mkdir()
    result = sandbox.process.exec(
        'echo "$GREETING"; pwd', cwd="sub", env={"GREETING": "hi there"}, timeout=10
    )
    assert result.result == f"hi there\n{daytona_server.root / sandbox.id / 'sub'}\n"
    with pytest.raises(DaytonaTimeoutError):
        sandbox.process.exec("sleep 30", timeout=1)


@pytest.mark.usefixtures("calm_listing")
def test_list_paginates_with_cursor(daytona_server: FakeDaytonaServer) -> None:
    client = _client(daytona_server)
    created = {client.create(CreateSandboxFromSnapshotParams(labels={"suite": "pages"})).id for _ in range(3)}
    listed = [s.id for s in client.list(ListSandboxesQuery(labels={"suite": "pages"}, limit=2))]
    assert sorted(listed) == sorted(created)
    assert sum(1 for m, p in daytona_server.requests if (m, p) == ("GET", "/api/sandbox")) >= 2


def test_sdk_discovers_the_toolbox_proxy_url(daytona_server: FakeDaytonaServer) -> None:
    daytona_server.advertise_toolbox_url = False
    try:
        sandbox = _client(daytona_server).create()
        assert sandbox.process.exec("echo found", timeout=10).result == "found\n"
    finally:
        daytona_server.advertise_toolbox_url = True
    assert ("GET", f"/api/sandbox/{sandbox.id}/toolbox-proxy-url") in daytona_server.requests


def test_wrong_api_key_is_rejected(daytona_server: FakeDaytonaServer) -> None:
    client = Daytona(DaytonaConfig(api_key="wrong", api_url=daytona_server.api_url))
    with pytest.raises(Exception, match="Unauthorized"):
        client.get("anything")


@pytest.mark.usefixtures("calm_listing")
async def test_async_sdk_round_trip(daytona_server: FakeDaytonaServer) -> None:
    async with AsyncDaytona(
        DaytonaConfig(api_key=daytona_server.api_key, api_url=daytona_server.api_url)
    ) as client:
        sandbox = await client.create(CreateSandboxFromSnapshotParams(labels={"suite": "fake-async"}))
        result = await sandbox.process.exec("printf 'a\\nb'; exit 7", timeout=10)
        assert (result.exit_code, result.result) == (7, "a\nb")
        await sandbox.fs.upload_files([FileUpload(source=b"xyz", destination="d/f")])
        (got,) = await sandbox.fs.download_files([FileDownloadRequest(source="d/f")])
        assert got.result == b"xyz"
        assert [s.id async for s in client.list(ListSandboxesQuery(labels={"suite": "fake-async"}))] == [
            sandbox.id
        ]
        await client.delete(sandbox)
        assert (await client.get(sandbox.id)).state == "destroyed"
        with pytest.raises(DaytonaNotFoundError):
            await client.delete(sandbox)


def test_legacy_daemon_splits_on_spaces(legacy_daytona_server: FakeDaytonaServer) -> None:
    assert split_command_like_old_daemon("""sh -c 'echo "a b"'"'"'c' x""") == [
        "sh",
        "-c",
        'echo "a b"\'c',
        "x",
    ]
    sandbox = _client(legacy_daytona_server).create()
    # No shell: the redirect is just an argument to echo.
    assert sandbox.process.exec("echo hi >&2", timeout=10).result == "hi >&2\n"
