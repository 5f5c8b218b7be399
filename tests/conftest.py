"""Shared fixtures: real sandboxes on real directories."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.local import LocalSandbox


def pytest_configure(config: pytest.Config) -> None:
    """Tests make many sandboxes with scratch directories of their own, each
    with an operation server: those leave after 30 s without a request, not
    the default 10 minutes (tests of the idle exit set their own)."""
    BaseSandbox.operation_server_idle = 30.0


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalSandbox]:
    """A fresh local sandbox rooted in a temp directory."""
    root = tmp_path / "sandbox"
    root.mkdir()
    yield LocalSandbox(root)


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt``, as in a program: an earlier test on this
    worker may have left a handler of its own (an event loop's, say), which swallows it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker (``scripts/test`` runs 4, with ``--dist loadfile
    --no-loadscope-reorder``: a file's tests stay on one worker, so its module fixtures are
    set up once, and files go to idle workers in collection order), order the files: mostly
    ``slow`` ones first (the packaging test builds wheels and venvs for minutes; started
    last, it alone would be the tail), then by number of tests, most first (the conformance
    suites: the longest). A run in one process keeps pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.partition("::")[0], []).append(item)

    def cost(tests: list[pytest.Item]) -> tuple[bool, int]:
        slow = sum(1 for test in tests if test.get_closest_marker("slow"))
        return (2 * slow <= len(tests), -len(tests))

    items[:] = [item for tests in sorted(files.values(), key=cost) for item in tests]
