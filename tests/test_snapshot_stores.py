"""Every snapshot store holds the same contract, real stores only: the local
directory, and fsspec URLs (``memory://``, ``file://``, and ``s3://`` on a
moto S3 server the test starts on 127.0.0.1)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from sandbox_sdk import DirectorySnapshotStore, FsspecSnapshotStore, SnapshotStore, errors
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.snapshots import blob_key

S3_CREDENTIALS = {"key": "testing", "secret": "testing"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def s3_store(endpoint: str) -> FsspecSnapshotStore:
    bucket = f"snapshots-{secrets.token_hex(4)}"
    options = {**S3_CREDENTIALS, "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=S3_CREDENTIALS["key"],
        aws_secret_access_key=S3_CREDENTIALS["secret"],
    ).create_bucket(Bucket=bucket)
    return FsspecSnapshotStore(f"s3://{bucket}/team-a", skip_instance_cache=True, **options)


@pytest.fixture(params=["directory", "memory", "file", "s3"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], SnapshotStore]:
    """A fresh store of one kind (called again: another handle on the same store)."""
    kind = request.param
    if kind == "directory":
        return lambda: DirectorySnapshotStore(tmp_path / "store")
    if kind == "memory":
        url = f"memory://snapshots-{secrets.token_hex(4)}"
        return lambda: FsspecSnapshotStore(url)
    if kind == "file":
        return lambda: FsspecSnapshotStore(f"file://{tmp_path / 'store'}")
    store = s3_store(request.getfixturevalue("s3_endpoint"))
    return lambda: store


def test_a_store_round_trips_a_workspace_and_stores_each_content_once(
    local: LocalSandbox, make_store: Callable[[], SnapshotStore]
) -> None:
    store = make_store()
    work = local.root_dir / "work"
    (work / "sub").mkdir(parents=True)
    for i in range(20):
        (work / f"f{i}").write_bytes(f"{i % 5}\n".encode())  # five contents
    (work / "sub" / "big.bin").write_bytes(secrets.token_bytes(3 * 1024 * 1024))
    first = local.snapshot(["work"], store=store)
    assert first.files == 21
    (work / "f3").write_bytes(b"changed\n")
    second = local.snapshot(["work"], store=store)
    assert sorted(make_store().ids()) == sorted([first.id, second.id])
    blobs = {entry.sha256 for s in (first, second) for entry in s.entries if entry.sha256}
    assert len(blobs) == 7  # five small contents, the big one, the change
    assert all(store.has_blob(digest) for digest in blobs)
    local.restore(first.id, store=make_store())
    assert (work / "f3").read_bytes() == b"3\n"
    assert (work / "sub" / "big.bin").stat().st_size == 3 * 1024 * 1024


def test_a_blob_changed_in_the_store_is_refused_and_nothing_changes(
    local: LocalSandbox, make_store: Callable[[], SnapshotStore], tmp_path: Path
) -> None:
    store = make_store()
    work = local.root_dir / "work"
    work.mkdir()
    (work / "a.txt").write_bytes(b"kept\n")
    snapshot = local.snapshot(["work"], store=store)
    (work / "a.txt").write_bytes(b"current\n")
    [digest] = [entry.sha256 for entry in snapshot.entries if entry.sha256]
    forged = tmp_path / "forged"
    forged.write_bytes(b"forged\n")
    if isinstance(store, FsspecSnapshotStore):
        store.fs.put_file(str(forged), store._path(blob_key(digest)))
    else:
        forged.replace(store.root / blob_key(digest))  # type: ignore[attr-defined]
    with pytest.raises(errors.SnapshotDamagedError, match="damaged"):
        local.restore(snapshot, store=store)
    assert (work / "a.txt").read_bytes() == b"current\n"
    with pytest.raises(errors.SnapshotNotFoundError):
        store.load("a" * 64)
