"""Staged edits (texts too large for one command) from many threads at once,
on one sandbox: every edit lands, and no staging file, staged text or upload
link is left in the sandbox or its scratch directory."""

from __future__ import annotations

import secrets
import threading
from dataclasses import replace
from pathlib import Path

from sandbox_sdk.providers.local import LocalSandbox
from tests.transfer.transfer_helpers import leftovers, scratch_entries

THREADS = 8
EDITS_PER_THREAD = 5
#: Each text is staged in several chunks (the middle ones appended by the
#: shell) within these commands.
COMMAND_BYTES = 16 * 1024
TEXT_BYTES = 30_000  # random: 40,000 characters, which do not compress below two commands


def test_concurrent_staged_edits_all_land_and_leave_nothing(tmp_path: Path) -> None:
    root, scratch = tmp_path / "sandbox", tmp_path / "scratch"
    root.mkdir()
    scratch.mkdir()
    sandbox = LocalSandbox(root)
    sandbox.scratch_dir = str(scratch)
    sandbox.limits = replace(sandbox.limits, max_command_bytes=COMMAND_BYTES)
    old = {
        (t, i): f"<{t}-{i}>{secrets.token_urlsafe(TEXT_BYTES)}\n"
        for t in range(THREADS)
        for i in range(EDITS_PER_THREAD)
    }
    new = {key: f"[{key[0]}-{key[1]}]{secrets.token_urlsafe(TEXT_BYTES)}\n" for key in old}
    assert min(map(len, [*old.values(), *new.values()])) > 2 * COMMAND_BYTES
    (root / "shared.txt").write_text("".join(old.values()))
    start = threading.Barrier(THREADS)
    replacements: list[int] = []
    failures: list[BaseException] = []

    def edits(thread: int) -> None:
        start.wait()
        try:
            for i in range(EDITS_PER_THREAD):
                # Half the threads replace_all: their counts travel in a staged file too.
                key = (thread, i)
                done = sandbox.edit("shared.txt", old[key], new[key], replace_all=thread % 2 == 1)
                replacements.append(done.replacements)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=edits, args=(thread,), daemon=True) for thread in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert replacements == [1] * THREADS * EDITS_PER_THREAD
    assert (root / "shared.txt").read_text() == "".join(new.values())
    assert leftovers(root) == []
    assert scratch_entries(scratch) == []
