"""Shared fixtures: real sandboxes on real directories."""

from __future__ import annotations

import signal
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

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


#: The tests that start no process (no sandbox, no interpreter, no tool), which
#: ``scripts/test --fast`` runs alone (``-m "not processes"``) as the fast lane: test files
#: (from the repository's root), each with the tests in it that do start one (their names,
#: ``Class::test`` in a class, parameters left out). Every other test is marked
#: ``processes``. That a test here really starts none is checked, not trusted: in a run of
#: these tests alone, a process start fails the test that made it (see
#: :func:`pytest_collection_finish`), and tests/test_fast_lane.py makes that run in CI.
NO_PROCESS_TESTS: dict[str, tuple[str, ...]] = {
    "tests/test_calls.py": (),
    "tests/test_glob_walk.py": (),
    "tests/test_hardening_inputs.py": ("test_bytes_that_are_not_text_still_pass",),
    "tests/test_kernel.py": (),
    "tests/test_limits.py": (),
    "tests/test_network_policy.py": (),
    "tests/test_known_gaps.py": (),
    "tests/test_lifetime.py": (
        "test_with_provider_closes_it",
        "test_async_with_provider_closes_it",
        "test_closing_a_provider_without_clients_is_harmless",
    ),
    "tests/test_protocol.py": (
        "test_frame_survives_noise_around_it",
        "test_missing_python3_is_said_in_those_words",
        "test_script_crash_is_an_error_not_data",
        "test_unknown_operation_is_rejected",
        "test_a_round_trip_imports_neither_json_nor_re_nor_os",
        "test_a_grep_regardless_of_case_imports_no_re_for_ascii_text",
    ),
    "tests/test_provider_flows.py": (),
    "tests/test_registry.py": (),
    "tests/test_release.py": (
        "test_a_tag_that_is_not_the_version_builds_nothing",
        "test_a_version_without_its_changelog_section_builds_nothing",
        "test_a_release_builds_both_files_and_twine_passes_them",
        "test_twine_check_fails_a_description_the_index_cannot_render",
    ),
    "tests/test_remote_units.py": ("test_a_kill_returns_the_exit_its_supervisor_records",),
    "tests/test_twins.py": (
        "test_the_generator_handles_generic_bases_and_every_kind_of_parameter",
        "test_the_committed_twins_are_up_to_date",
    ),
    "tests/providers/kubernetes/test_exec_protocol.py": (),
    "tests/providers/kubernetes/test_manifest.py": (),
    "tests/providers/remote/test_hostile_runner.py": (),
    "tests/providers/remote/test_wire.py": (),
}
#: Audit events of a process start (``subprocess``, ``asyncio``'s subprocesses, forks,
#: ``posix_spawn``, ``exec*``, ``system``).
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system"}
)


def starts_no_process(item: pytest.Item) -> bool:
    """Whether ``item`` is one of :data:`NO_PROCESS_TESTS`."""
    path, _, name = item.nodeid.partition("::")
    return path in NO_PROCESS_TESTS and name.partition("[")[0] not in NO_PROCESS_TESTS[path]


class ProcessGuard:
    """Fails a test that starts a process: an audit hook (process-wide, and not removable,
    so it is installed only in a run of :data:`NO_PROCESS_TESTS` alone) raises at the
    start and records it, and the test's report turns failed even if the test caught the
    error."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.started: dict[str, str] = {}

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event in PROCESS_EVENTS and self.current is not None:
            message = (
                f"{self.current} started a process ({event}) but is listed in tests/conftest.py's "
                "NO_PROCESS_TESTS, the fast lane: take it off the list"
            )
            self.started.setdefault(self.current, message)
            raise RuntimeError(message)


GUARD = pytest.StashKey[ProcessGuard]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """A run of :data:`NO_PROCESS_TESTS` alone (``scripts/test --fast``) checks that
    they start no process. (The xdist controller collects nothing: each worker guards
    its own tests.)"""
    if session.items and all(starts_no_process(item) for item in session.items):
        guard = ProcessGuard()
        session.config.stash[GUARD] = guard
        sys.addaudithook(guard.audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    guard = item.config.stash.get(GUARD, None)
    if guard is not None:
        guard.current = item.nodeid
    try:
        return (yield)
    finally:
        if guard is not None:
            guard.current = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """The phase (setup, call or teardown) in which a listed test started a process fails."""
    report: pytest.TestReport = yield
    guard = item.config.stash.get(GUARD, None)
    message = None if guard is None else guard.started.pop(item.nodeid, None)
    if message is not None:
        report.outcome = "failed"
        report.longrepr = message
    return report


@pytest.hookimpl(tryfirst=True)  # before the ``-m`` selection, which reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test but :data:`NO_PROCESS_TESTS` is marked ``processes``. On a pytest-xdist
    worker (``scripts/test`` runs 4, with ``--dist loadfile --no-loadscope-reorder``: a
    file's tests stay on one worker, so its module fixtures are set up once, and files go
    to idle workers in collection order), order the files: mostly
    ``slow`` ones first (the packaging test builds wheels and venvs for minutes; started
    last, it alone would be the tail), then by number of tests, most first (the conformance
    suites: the longest). A run in one process keeps pytest's order."""
    for item in items:
        if not starts_no_process(item):
            item.add_marker(pytest.mark.processes)
    if not hasattr(config, "workerinput"):
        return
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.partition("::")[0], []).append(item)

    def cost(tests: list[pytest.Item]) -> tuple[bool, int]:
        slow = sum(1 for test in tests if test.get_closest_marker("slow"))
        return (2 * slow <= len(tests), -len(tests))

    items[:] = [item for tests in sorted(files.values(), key=cost) for item in tests]
