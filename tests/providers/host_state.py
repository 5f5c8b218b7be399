"""Lifecycle of the providers that keep sandboxes in a state directory
(``HostStateProvider``: ``local`` and ``bwrap``): visibility across processes,
label races, paging through many sandboxes, rollback of failed creates, TTL
and idle reaping. Each provider's tests/providers/<name>/test_provider.py
subclasses :class:`HostStateLifecycleTests`; its conftest imports the
fixtures below and supplies ``provider_class``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from sandbox_sdk import errors, get_provider
from sandbox_sdk.provider_kit.host_state import HostStateProvider, SandboxRecord

#: What a provider's conftest supplies as the ``provider_class`` fixture.
ProviderClass = type[HostStateProvider[Any]]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


ProviderT = TypeVar("ProviderT", bound=HostStateProvider[Any])


def deleting_all(provider: ProviderT) -> Iterator[ProviderT]:
    """The provider, and afterwards every sandbox left in its state deleted
    (which ends what runs in them, such as a bwrap sandbox's jail)."""
    yield provider
    for sandbox_id in provider.store.ids():
        provider.delete(sandbox_id=sandbox_id)


@pytest.fixture
def provider(provider_class: ProviderClass, state_dir: Path) -> Iterator[HostStateProvider[Any]]:
    """A provider over a fresh state directory: a test sees only its own sandboxes."""
    yield from deleting_all(provider_class(state_dir))


@pytest.fixture(scope="module")
def module_provider(
    provider_class: ProviderClass, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostStateProvider[Any]]:
    """One provider for a module's class-scoped sandboxes."""
    yield from deleting_all(provider_class(tmp_path_factory.mktemp(f"{provider_class.name}-state")))


def leftovers(provider: HostStateProvider[Any]) -> list[str]:
    """Every entry of the sandboxes directory, hidden staging ones included."""
    return sorted(os.listdir(provider.store.sandboxes_dir))


def run_python(code: str, *, stdin: bool = False) -> subprocess.Popen[str]:
    """``code`` in a new interpreter, its output read by the caller (and its
    input written by the caller with ``stdin``)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


#: A lifetime that ends within a test, yet outlasts ``create``'s health
#: check (a bwrap jail's first command) on a loaded machine.
SHORT_TTL = 3.0


class HostStateLifecycleTests:
    """The lifecycle of the ``provider_class`` fixture's provider, on real directories and processes."""

    def test_registered_by_name(self, provider_class: ProviderClass, state_dir: Path) -> None:
        provider = get_provider(provider_class.name, state_dir=state_dir)
        assert type(provider) is provider_class
        assert provider.store.state_dir == state_dir.resolve()

    def test_state_dir_defaults_under_sandbox_sdk_home(
        self, provider_class: ProviderClass, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("SANDBOX_SDK_HOME", str(tmp_path / "home"))
        name = provider_class.name
        provider = provider_class()
        sandbox = provider.create()
        assert (tmp_path / "home" / name / "sandboxes" / sandbox.id / "meta.json").is_file()
        provider.delete(sandbox_id=sandbox.id)

    def test_metadata_is_recorded(self, provider: HostStateProvider[Any]) -> None:
        sandbox = provider.create(labels={"thread": "t1"}, ttl=3600, idle_timeout=600)
        meta = json.loads((provider.store.sandboxes_dir / sandbox.id / "meta.json").read_text())
        assert meta["labels"] == {"thread": "t1"}
        assert meta["ttl"] == 3600 and meta["idle_timeout"] == 600
        info = provider.list().items[0]
        assert info.status == "ready"
        assert info.metadata["expires_at"] is not None
        assert Path(info.metadata["workspace"]).is_dir()

    def test_bad_options_are_rejected_before_anything_exists(self, provider: HostStateProvider[Any]) -> None:
        with pytest.raises(errors.InvalidArgumentError, match="unknown option"):
            provider.create(**dict[str, Any](colour="blue"))  # as a mapping: mypy refuses the keyword
        with pytest.raises(errors.InvalidArgumentError, match="ttl"):
            provider.create(ttl=-1)
        with pytest.raises(errors.InvalidArgumentError, match="labels"):
            provider.create(labels={"n": 1})  # type: ignore[dict-item]
        with pytest.raises(errors.InvalidArgumentError, match="mapping of str to str"):
            provider.create(labels=["a"])  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidArgumentError, match="cursor"):
            provider.list(cursor="../../etc")
        assert leftovers(provider) == []

    def test_another_process_sees_what_this_one_created(
        self, provider_class: ProviderClass, state_dir: Path
    ) -> None:
        child = run_python(f"""
            from sandbox_sdk import get_provider
            provider = get_provider({provider_class.name!r}, state_dir={str(state_dir)!r})
            sandbox = provider.create(labels={{"made-by": "child"}})
            sandbox.write("from-child.txt", "hello from another process\\n")
            print(sandbox.id)
        """)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        provider = provider_class(state_dir)
        (info,) = provider.list(labels={"made-by": "child"}).items
        assert info.id == out.strip()
        assert provider.get(info.id).read("from-child.txt").content == "hello from another process\n"
        assert provider.get_or_create(labels={"made-by": "child"}).id == info.id

    def test_two_processes_racing_on_one_label_get_the_same_sandbox(
        self, provider_class: ProviderClass, state_dir: Path
    ) -> None:
        """Each child imports and opens the provider, says so, and waits for the word
        to go, given once every child is ready: they race from the same moment."""
        code = f"""
            import sys
            from sandbox_sdk import get_provider
            provider = get_provider({provider_class.name!r}, state_dir={str(state_dir)!r})
            print("ready", flush=True)
            sys.stdin.readline()
            print(provider.get_or_create(labels={{"thread": "contended"}}).id)
        """
        children = [run_python(code, stdin=True) for _ in range(3)]
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        ids = set()
        for child in children:
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            ids.add(out.strip())
        assert len(ids) == 1
        provider = provider_class(state_dir)
        assert [info.id for info in provider.iter_sandboxes()] == list(ids)

    async def test_async_callers_racing_on_one_label_get_the_same_sandbox(
        self, provider: HostStateProvider[Any]
    ) -> None:
        """The label lock (a blocking flock, entered in worker threads) keeps
        concurrent tasks of one process apart as it does processes."""
        ids: list[str] = []

        async def get_or_create() -> None:
            ids.append((await provider.aget_or_create(labels={"thread": "contended"})).id)

        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(get_or_create)
        assert len(set(ids)) == 1
        assert [info.id for info in provider.iter_sandboxes()] == ids[:1]

    @pytest.mark.slow
    def test_pagination_over_a_thousand_sandboxes(
        self, provider: HostStateProvider[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        made = [provider._create(labels={"batch": "big", "parity": str(n % 2)}).id for n in range(1000)]
        assert made == sorted(made)  # ids sort by creation time: the list order
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = provider.list(labels={"batch": "big"}, cursor=cursor, limit=128)
            assert len(page.items) <= 128
            seen += [info.id for info in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == made
        odd = [info.id for info in provider.iter_sandboxes(labels={"parity": "1"}, page_size=100)]
        assert odd == made[1::2]
        # a page reads only the metadata it returns, so the last page is as cheap as the first
        loaded: list[str] = []
        load = provider.store.load

        def counted(sandbox_id: str) -> SandboxRecord:
            loaded.append(sandbox_id)
            return load(sandbox_id)

        monkeypatch.setattr(provider.store, "load", counted)
        assert [info.id for info in provider.list(cursor=made[-3], limit=10).items] == made[-2:]
        assert loaded == made[-2:]

    def test_failed_setup_rolls_the_sandbox_back(self, provider: HostStateProvider[Any]) -> None:
        with pytest.raises(errors.SandboxRuntimeError, match=r"setup .* failed \(exit 3\).*broken step"):
            provider.get_or_create(labels={"thread": "t"}, setup="echo broken step; exit 3")
        assert leftovers(provider) == []
        assert provider.list().items == []
        sandbox = provider.create(labels={"thread": "t"}, setup="echo prepared > ready.txt")
        assert sandbox.read("ready.txt").content == "prepared\n"

    def test_expired_sandboxes_are_reaped(self, provider: HostStateProvider[Any]) -> None:
        short = provider.create(labels={"kind": "short"}, ttl=0.5)
        idle = provider.create(labels={"kind": "idle"}, idle_timeout=1.0)
        keeper = provider.create(labels={"kind": "keeper"})
        time.sleep(0.6)
        idle.execute("true")  # a use restarts the idle clock
        assert provider.reap() == [short.id]
        with pytest.raises(errors.SandboxNotFoundError):
            provider.get(short.id)
        time.sleep(0.6)
        assert provider.reap() == []  # 1.2 s old, but used 0.6 s ago
        time.sleep(0.6)
        assert provider.list(labels={"kind": "idle"}).items[0].status == "expired"
        with pytest.raises(errors.SandboxNotFoundError, match="expired"):
            provider.get(idle.id)
        assert provider.reap() == [idle.id]
        assert [info.id for info in provider.iter_sandboxes()] == [keeper.id]
        assert provider.get_or_create(labels={"kind": "short"}).id != short.id

    @pytest.mark.asyncio
    async def test_areap_reaps_as_reap_does(self, provider: HostStateProvider[Any]) -> None:
        """``areap``, the async twin of ``reap``: the expired sandbox goes, the others stay."""
        short = await provider.acreate(labels={"kind": "short"}, ttl=SHORT_TTL)
        keeper = await provider.acreate(labels={"kind": "keeper"})
        deadline = time.monotonic() + 30
        while provider.list(labels={"kind": "short"}).items[0].status != "expired":
            assert time.monotonic() < deadline, "the sandbox never expired"
            await anyio.sleep(0.05)
        assert await provider.areap() == [short.id]
        assert [info.id for info in provider.iter_sandboxes()] == [keeper.id]

    def test_a_handle_to_a_deleted_sandbox_raises_not_found(self, provider: HostStateProvider[Any]) -> None:
        sandbox = provider.create()
        sandbox.write("kept.txt", "x")
        provider.delete(sandbox_id=sandbox.id)
        with pytest.raises(errors.SandboxNotFoundError):
            sandbox.execute("true")
        with pytest.raises(errors.SandboxNotFoundError):
            sandbox.read("kept.txt")
        with pytest.raises(errors.SandboxNotFoundError):
            provider.get(sandbox.id)

    def test_delete_removes_what_the_sandbox_made_unwritable(self, provider: HostStateProvider[Any]) -> None:
        sandbox = provider.create()
        assert (
            sandbox.execute(
                "mkdir -p locked/deep && touch locked/deep/f && chmod 0 locked/deep locked"
            ).exit_code
            == 0
        )
        provider.delete(sandbox_id=sandbox.id)
        assert leftovers(provider) == []
