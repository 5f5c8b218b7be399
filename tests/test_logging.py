"""The ``sandbox_sdk`` logger: each round trip of an operation at DEBUG
(a direct ``sandbox.execute()`` is the provider's own call), the provider
lifecycle at INFO, and never a file's content, a payload or an env value."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

from sandbox_sdk.providers.local import LocalProvider

SECRET = "s3cr3t-7f2a9c-do-not-log"
#: One round trip's DEBUG record.
ROUND_TRIP = re.compile(r"^(\w+): sent \d+ bytes, received \d+ bytes, exit -?\d+, \d+\.\d{3} s$")


def test_round_trips_at_debug_and_lifecycle_at_info_without_secrets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = LocalProvider(tmp_path / "state")
    with caplog.at_level(logging.DEBUG, logger="sandbox_sdk"):
        sandbox = provider.create(labels={"thread": "t1"})
        sandbox.write("secret.txt", f"token={SECRET}\n")
        assert SECRET in sandbox.read("secret.txt").content
        assert sandbox.run("printenv TOKEN", env={"TOKEN": SECRET}).output == f"{SECRET}\n"
        assert sandbox.upload_files([("up.bin", SECRET.encode() * 100)]).raise_for_errors()
        with pytest.raises(FileNotFoundError):
            sandbox.read("missing.txt")
        provider.get(sandbox.id)
        provider.delete(sandbox.id)
        expiring = provider.create(ttl=0.1)
        time.sleep(0.3)
        assert provider.reap() == [expiring.id]

    assert all(SECRET not in record.getMessage() for record in caplog.records)
    assert all(SECRET not in repr(record.args) for record in caplog.records)
    trips = [r.getMessage() for r in caplog.records if r.name == "sandbox_sdk.round_trips"]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "sandbox_sdk.round_trips")
    operations = [ROUND_TRIP.match(message).group(1) for message in trips]  # type: ignore[union-attr]
    assert operations[:3] == ["write", "read", "run"]
    assert "put_many" in operations
    # The round trip's own exit code: the script's, here its "not found" code.
    assert re.match(r"read: .*, exit [1-9]\d*, ", trips[operations.index("put_many") + 1])
    lifecycle = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "sandbox_sdk.lifecycle"]
    assert (logging.INFO, f"local: created sandbox {sandbox.id} labels={{'thread': 't1'}}") in lifecycle
    assert (logging.INFO, f"local: got sandbox {sandbox.id}") in lifecycle
    assert (logging.INFO, f"local: deleted sandbox {sandbox.id}") in lifecycle
    assert (logging.INFO, f"local: reaped sandbox {expiring.id}") in lifecycle


async def test_async_round_trips_are_logged_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    provider = LocalProvider(tmp_path / "state")
    with caplog.at_level(logging.DEBUG, logger="sandbox_sdk"):
        async with await provider.acreate() as sandbox:
            await sandbox.awrite("a.txt", SECRET)
    trips = [r.getMessage() for r in caplog.records if r.name == "sandbox_sdk.round_trips"]
    assert [ROUND_TRIP.match(m).group(1) for m in trips] == ["write"]  # type: ignore[union-attr]
    assert all(SECRET not in record.getMessage() for record in caplog.records)
    assert f"local: deleted sandbox {sandbox.id}" in [r.getMessage() for r in caplog.records]


def test_nothing_is_formatted_when_debug_is_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    provider = LocalProvider(tmp_path / "state")
    with caplog.at_level(logging.INFO, logger="sandbox_sdk"), provider.create() as sandbox:
        sandbox.write("a.txt", "x")
    assert [r.name for r in caplog.records] == ["sandbox_sdk.lifecycle"] * 2  # created, deleted
