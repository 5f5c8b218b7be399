"""Issue 13's lifecycle findings on the state-directory providers: a damaged
record costs only its own sandbox, a lost usage file hides nothing, and
``reap`` never removes a sandbox a ``get`` is using."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from sandbox_sdk import errors
from sandbox_sdk.provider_kit.host_state import USAGE_FILE, DamagedRecordError, mark_used
from sandbox_sdk.providers.local import LocalProvider


def test_a_damaged_record_is_skipped_reported_and_reaped(
    provider: LocalProvider, caplog: pytest.LogCaptureFixture
) -> None:
    good = provider.create(labels={"kind": "good"})
    bad = provider.create(labels={"kind": "bad"})
    meta = provider.store.directory(bad.id) / "meta.json"
    meta.write_bytes(meta.read_bytes()[:20])
    with caplog.at_level(logging.WARNING):
        assert [info.id for info in provider.list().items] == [good.id]
    assert bad.id in caplog.text
    with pytest.raises(DamagedRecordError):
        provider.get(bad.id)
    assert provider.get_or_create(labels={"kind": "good"}).id == good.id
    assert provider.reap() == [bad.id]
    assert not provider.store.directory(bad.id).exists()
    with pytest.raises(errors.SandboxNotFoundError):
        provider.get(bad.id)


def test_a_sandbox_without_its_usage_file_is_listed_as_get_finds_it(provider: LocalProvider) -> None:
    sandbox = provider.create()
    usage = provider.store.directory(sandbox.id) / USAGE_FILE
    usage.unlink()
    assert [info.id for info in provider.list().items] == [sandbox.id]
    assert provider.get(sandbox.id).id == sandbox.id
    assert usage.exists()


def test_reap_waits_for_a_get_and_sees_its_use(provider: LocalProvider) -> None:
    sandbox = provider.create(idle_timeout=1.0)  # a second's slack for the reaper's re-check
    time.sleep(1.05)  # idle: expired, until a use
    reaped: list[str] = []
    with provider.store.locked(sandbox.id, exclusive=False) as directory:  # what get holds
        reaper = threading.Thread(target=lambda: reaped.extend(provider.reap()), daemon=True)
        reaper.start()
        time.sleep(0.1)
        assert reaper.is_alive(), "reap did not wait for the get"
        mark_used(directory)
    reaper.join(5)
    assert reaped == [] and provider.get(sandbox.id).id == sandbox.id
