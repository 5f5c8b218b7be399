"""``ProviderConformanceTests``: the lifecycle contract of a ``SandboxProvider``.

Subclass it in your provider's tests and supply a ``provider`` fixture that
yields a provider whose sandboxes the tests may create and delete (each test
deletes what it made)::

    class TestMyProvider(ProviderConformanceTests):
        @pytest.fixture
        def provider(self):
            yield MyProvider(...)

Every label set the tests use carries a random ``conformance-run`` value, so
sandboxes left by other users of the same account are never touched.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.snapshots import DirectorySnapshotStore

#: Clients racing ``get_or_create`` on one label set in the race test.
RACERS = 4
#: Seconds a listing may take to show what was just created, on a service whose
#: listing is eventually consistent, and how often the tests look meanwhile.
LISTING_WAIT = 30.0
LISTING_POLL = 0.05
#: An id no provider hands out, but shaped like the usual ones.
UNKNOWN_IDS = ("no-such-sandbox", "local-000000000000000000000000", "bwrap-ffffffffffffffffffffffff")


class ProviderConformanceTests:
    """Checks ``get_or_create``, ``get``, ``list``, ``delete`` and their async twins."""

    @pytest.fixture
    def run_labels(self) -> dict[str, str]:
        """Labels unique to one test, so listing sees only its own sandboxes."""
        return {"conformance-run": secrets.token_hex(8)}

    @pytest.fixture
    def made(self, provider: SandboxProvider[Any]) -> Iterator[list[str]]:
        """Ids of sandboxes a test created; deleted afterwards."""
        ids: list[str] = []
        yield ids
        for sandbox_id in ids:
            provider.delete(sandbox_id=sandbox_id)

    @pytest.fixture
    def racing_providers(self, provider: SandboxProvider[Any]) -> list[SandboxProvider[Any]]:
        """The clients of the race test, one a thread: ``provider`` itself unless a
        provider's tests override this with independent clients (their own
        connections, as separate programs would have)."""
        return [provider] * RACERS

    @staticmethod
    def settled_listing(
        provider: SandboxProvider[Any], labels: dict[str, str], expected: list[str]
    ) -> list[str]:
        """The ids ``provider`` lists for ``labels``, once they are ``expected``'s (in
        any order) or :data:`LISTING_WAIT` seconds have passed: a listing may be
        eventually consistent, and the tests that page through one wait for it to
        show what they made before they check how it pages."""
        deadline = time.monotonic() + LISTING_WAIT
        while True:
            listed = [info.id for info in provider.iter_sandboxes(labels=labels)]
            if sorted(listed) == sorted(expected) or time.monotonic() > deadline:
                return listed
            time.sleep(LISTING_POLL)

    def _new(self, provider: SandboxProvider[Any], made: list[str], **kwargs: Any) -> BaseSandbox:
        sandbox: BaseSandbox = provider.get_or_create(**kwargs)
        made.append(sandbox.id)
        return sandbox

    def test_unknown_id_is_not_found(self, provider: SandboxProvider[Any]) -> None:
        for sandbox_id in UNKNOWN_IDS:
            with pytest.raises(errors.SandboxNotFoundError):
                provider.get(sandbox_id)
            with pytest.raises(errors.SandboxNotFoundError):
                provider.get_or_create(sandbox_id=sandbox_id)

    def test_get_or_create_by_id_connects_to_the_same_sandbox(
        self, provider: SandboxProvider[Any], made: list[str]
    ) -> None:
        sandbox = self._new(provider, made)
        sandbox.write("kept.txt", "kept across handles\n")
        again = provider.get_or_create(sandbox_id=sandbox.id)
        assert again.id == sandbox.id
        assert again.read("kept.txt").content == "kept across handles\n"
        assert provider.get(sandbox.id).execute("cat kept.txt").output == "kept across handles\n"

    def test_get_or_create_without_arguments_makes_a_new_sandbox(
        self, provider: SandboxProvider[Any], made: list[str]
    ) -> None:
        first = self._new(provider, made)
        second = self._new(provider, made)
        assert first.id != second.id
        first.write("only-in-first", "x")
        assert second.execute("test -e only-in-first").exit_code != 0

    def test_delete_is_idempotent(self, provider: SandboxProvider[Any], made: list[str]) -> None:
        sandbox = self._new(provider, made)
        provider.delete(sandbox.id)
        provider.delete(sandbox_id=sandbox.id)
        for sandbox_id in UNKNOWN_IDS:
            provider.delete(sandbox_id=sandbox_id)
        with pytest.raises(errors.SandboxNotFoundError):
            provider.get(sandbox.id)
        assert sandbox.id not in [info.id for info in provider.iter_sandboxes()]

    def test_a_handle_deletes_its_sandbox(self, provider: SandboxProvider[Any], made: list[str]) -> None:
        """``with provider.create() as sandbox:`` deletes on leaving, an error
        included; a handle from ``get`` deletes its sandbox too."""
        with provider.create() as sandbox:
            made.append(sandbox.id)
            assert sandbox.execute("echo in").output == "in\n"
        with pytest.raises(errors.SandboxNotFoundError):
            provider.get(sandbox.id)
        with pytest.raises(KeyError), provider.create() as failing:
            made.append(failing.id)
            raise KeyError("the block failed")
        with pytest.raises(errors.SandboxNotFoundError):
            provider.get(failing.id)
        kept = self._new(provider, made)
        provider.get(kept.id).delete_sandbox()
        kept.delete_sandbox()  # idempotent, as provider.delete is
        assert kept.id not in [info.id for info in provider.iter_sandboxes()]

    def test_labels_reuse_exactly_matching_sandbox(
        self, provider: SandboxProvider[Any], made: list[str], run_labels: dict[str, str]
    ) -> None:
        thread_a = {**run_labels, "thread": "a"}
        first = self._new(provider, made, labels=thread_a)
        assert provider.get_or_create(labels=thread_a).id == first.id
        other = self._new(provider, made, labels={**run_labels, "thread": "b"})
        assert other.id != first.id
        superset = self._new(provider, made, labels={**thread_a, "extra": "1"})
        assert superset.id not in (first.id, other.id)
        assert provider.get_or_create(labels=thread_a).id == first.id

    def test_get_or_create_race_on_one_label_set_makes_one_sandbox(
        self,
        provider: SandboxProvider[Any],
        racing_providers: list[SandboxProvider[Any]],
        made: list[str],
        run_labels: dict[str, str],
    ) -> None:
        """Clients calling ``get_or_create`` with the same labels at once all get
        one sandbox, the only one carrying them once the race is over: none of
        them finds one, so each may create, and the provider must make them agree."""
        start = threading.Barrier(len(racing_providers))

        def race(client: SandboxProvider[Any]) -> str:
            start.wait()
            sandbox: BaseSandbox = client.get_or_create(labels=run_labels)
            return sandbox.id

        with ThreadPoolExecutor(len(racing_providers)) as pool:
            futures = [pool.submit(race, client) for client in racing_providers]
        outcomes = [future.exception() or future.result() for future in futures]
        made += [outcome for outcome in outcomes if isinstance(outcome, str)]
        ids = set(outcomes)
        assert all(isinstance(outcome, str) for outcome in outcomes), outcomes
        assert len(ids) == 1, outcomes
        (winner,) = ids
        assert isinstance(winner, str)
        listed = self.settled_listing(provider, run_labels, [winner])
        made += [sandbox_id for sandbox_id in listed if sandbox_id != winner]  # a duplicate left behind
        assert listed == [winner]
        assert provider.get_or_create(labels=run_labels).id == winner
        assert provider.get(winner).execute("echo shared").output == "shared\n"

    def test_labels_after_delete_make_a_new_sandbox(
        self, provider: SandboxProvider[Any], made: list[str], run_labels: dict[str, str]
    ) -> None:
        first = self._new(provider, made, labels=run_labels)
        provider.delete(sandbox_id=first.id)
        second = self._new(provider, made, labels=run_labels)
        assert second.id != first.id

    def test_list_filters_by_labels_and_pages_with_a_cursor(
        self, provider: SandboxProvider[Any], made: list[str], run_labels: dict[str, str]
    ) -> None:
        tagged = [self._new(provider, made, labels={**run_labels, "n": str(n)}).id for n in range(5)]
        self._new(provider, made, labels={"conformance-run": "someone-else"})
        assert sorted(self.settled_listing(provider, run_labels, tagged)) == sorted(tagged)
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = provider.list(labels=run_labels, cursor=cursor, limit=2)
            assert len(page) == len(page.items) <= 2
            assert list(page) == page.items  # a page iterates over its sandboxes
            seen += [info.id for info in page.items]
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert sorted(seen) == sorted(tagged)
        assert len(seen) == len(set(seen))
        assert pages >= 3
        only = provider.list(labels={**run_labels, "n": "3"}).items
        assert [info.id for info in only] == [tagged[3]]
        assert only[0].labels == {**run_labels, "n": "3"}
        assert only[0].created_at.tzinfo is not None
        assert [info.id for info in provider.iter_sandboxes(labels=run_labels, page_size=1)] == seen

    def test_list_order_is_stable(
        self, provider: SandboxProvider[Any], made: list[str], run_labels: dict[str, str]
    ) -> None:
        ids = [self._new(provider, made, labels={**run_labels, "n": str(n)}).id for n in range(3)]
        assert sorted(self.settled_listing(provider, run_labels, ids)) == sorted(ids)
        first = [info.id for info in provider.iter_sandboxes(labels=run_labels)]
        second = [info.id for info in provider.iter_sandboxes(labels=run_labels, page_size=1)]
        assert first == second

    async def test_async_twins(
        self, provider: SandboxProvider[Any], made: list[str], run_labels: dict[str, str]
    ) -> None:
        sandbox = await provider.aget_or_create(labels=run_labels)
        made.append(sandbox.id)
        assert (await provider.aget_or_create(labels=run_labels)).id == sandbox.id
        assert (await provider.aget(sandbox.id)).id == sandbox.id
        assert (await provider.aget_or_create(sandbox_id=sandbox.id)).id == sandbox.id
        await anyio.to_thread.run_sync(self.settled_listing, provider, run_labels, [sandbox.id])
        page = await provider.alist(labels=run_labels)
        assert [info.id for info in page.items] == [sandbox.id]
        assert [info.id async for info in provider.aiter_sandboxes(labels=run_labels)] == [sandbox.id]
        await provider.adelete(sandbox.id)
        await provider.adelete(sandbox_id=sandbox.id)
        with pytest.raises(errors.SandboxNotFoundError):
            await provider.aget(sandbox.id)
        with pytest.raises(errors.SandboxNotFoundError):
            await provider.aget_or_create(sandbox_id=sandbox.id)
        async with await provider.acreate(labels=run_labels) as scoped:
            made.append(scoped.id)
            assert (await scoped.aexecute("echo in")).output == "in\n"
        with pytest.raises(errors.SandboxNotFoundError):
            await provider.aget(scoped.id)
        again = await provider.aget_or_create(labels=run_labels)
        made.append(again.id)
        await (await provider.aget(again.id)).adelete_sandbox()
        with pytest.raises(errors.SandboxNotFoundError):
            await provider.aget(again.id)

    # -- workspace state --------------------------------------------------------------------

    def test_a_sandbox_made_from_a_snapshot_or_forked_has_its_files(
        self, provider: SandboxProvider[Any], made: list[str], tmp_path: Path
    ) -> None:
        """``create(from_snapshot=...)`` and ``fork()`` start a new sandbox with
        the snapshot's files, and the fork's changes are its own."""
        store = DirectorySnapshotStore(tmp_path / "store")
        source = self._new(provider, made)
        source.mkdir("project/src")
        source.write("project/src/main.py", "print('kept')\n")
        snapshot = source.snapshot(["project"], store=store)
        restored = provider.create(from_snapshot=snapshot.id, snapshot_store=store)
        made.append(restored.id)
        assert restored.read("project/src/main.py").content == "print('kept')\n"
        forked = source.fork(labels={"forked-from": source.id})
        made.append(forked.id)
        assert forked.id not in (source.id, restored.id)
        assert forked.read("project/src/main.py").content == "print('kept')\n"
        forked.write("project/src/main.py", "print('changed in the fork')\n", overwrite=True)
        assert source.read("project/src/main.py").content == "print('kept')\n"
        with pytest.raises(errors.SnapshotNotFoundError):
            provider.create(from_snapshot="0" * 64, snapshot_store=store)

    async def test_async_fork(self, provider: SandboxProvider[Any], made: list[str]) -> None:
        source = await provider.acreate()
        made.append(source.id)
        await source.awrite("notes.txt", "async\n")
        forked = await source.afork()
        made.append(forked.id)
        assert (await forked.aread("notes.txt")).content == "async\n"
