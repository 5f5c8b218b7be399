"""``remote/_watcher.py`` run on this machine, as a sandbox runs it: its
inotify events and its polling fallback (taken where ``ctypes`` cannot be
imported), on real files."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

#: Runs the watcher's source with ``ctypes`` unimportable when ``argv[1]`` is ``polling``.
LAUNCH = """import sys
method = sys.argv.pop(1)
if method == "polling":
    sys.modules["ctypes"] = None
exec(compile(sys.argv.pop(1), "_watcher.py", "exec"), {"__name__": "__main__"})
"""
SOURCE = resources.files("sandbox_sdk.remote").joinpath("_watcher.py").read_text("utf-8")


#: How long a test waits for an event it is owed.
EVENT_SECONDS = 60.0


class Watcher:
    """The watcher in a process of its own; its events read by a thread, so
    that waiting for one has a deadline (a watcher says nothing while
    nothing changes: a missed event must fail the test, not hang it)."""

    def __init__(self, directory: Path, method: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, method, SOURCE, str(directory), "1", "0.1"],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")  # its end

    def events(self) -> Iterator[dict[str, str]]:
        """Its events as they come, each waited for :data:`EVENT_SECONDS` at most."""
        while line := self.lines.get(timeout=EVENT_SECONDS):
            yield json.loads(line)

    def until(self, wanted: set[tuple[str, str]]) -> list[dict[str, str]]:
        """Events until each ``(kind, path)`` of ``wanted`` was seen; all of them."""
        seen: list[dict[str, str]] = []
        try:
            for event in self.events():
                seen.append(event)
                if wanted <= {(e["kind"], e["path"]) for e in seen}:
                    return seen
        except queue.Empty:
            raise AssertionError(f"no event for {EVENT_SECONDS} s, before {wanted}: {seen}") from None
        raise AssertionError(f"the watcher ended before {wanted}: {seen}")


@pytest.mark.parametrize("method", ["inotify", "polling"])
def test_the_watcher_reports_changes_by_either_method(tmp_path: Path, method: str) -> None:
    watched = tmp_path / "watched"
    (watched / "sub").mkdir(parents=True)
    watcher = Watcher(watched, method)
    try:
        first = next(watcher.events())
        assert (first["kind"], first["path"], first["method"]) == ("watching", str(watched), method)
        (watched / "sub" / "a").write_text("one")
        watcher.until({("created", str(watched / "sub" / "a"))})
        (watched / "sub" / "a").write_text("two, longer")  # (polling sees the size change)
        watcher.until({("modified", str(watched / "sub" / "a"))})
        (watched / "sub" / "a").unlink()
        watcher.until({("deleted", str(watched / "sub" / "a"))})
        (watched / "new").mkdir()
        (watched / "new" / "b").write_text("in a new directory")
        watcher.until({("created", str(watched / "new" / "b"))})
    finally:
        watcher.process.kill()
        watcher.process.wait()


def test_a_temporary_file_is_coalesced_away(tmp_path: Path) -> None:
    """Created and deleted within the debounce: nothing is reported of it."""
    watcher = Watcher(tmp_path, "inotify")
    try:
        assert next(watcher.events())["method"] == "inotify"
        (tmp_path / "gone").write_text("x")
        (tmp_path / "gone").unlink()
        (tmp_path / "kept").write_text("y")
        seen = watcher.until({("created", str(tmp_path / "kept"))})
        assert all(event["path"] != str(tmp_path / "gone") for event in seen)
    finally:
        watcher.process.kill()
        watcher.process.wait()
