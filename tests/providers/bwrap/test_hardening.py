"""Issue 13's data-integrity and permission findings, as an ordinary user.

The tests run as root, whom the kernel lets past every permission check; the
bubblewrap provider runs its commands as ``nobody`` when the host is root, so
its sandbox is the faithful non-root user for them (a LocalSandbox would run
them as root itself)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox_sdk import BaseSandbox, errors
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.testing import provided_sandbox
from sandbox_sdk.testing.faults import LimitedSandbox


@pytest.fixture(scope="module")
def sandbox(module_provider: BwrapProvider) -> Iterator[BaseSandbox]:
    yield from provided_sandbox(module_provider, "hardening")


def shell(sandbox: BaseSandbox, command: str) -> str:
    result = sandbox.execute(command)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_sandbox_user_is_not_root(sandbox: BaseSandbox) -> None:
    assert shell(sandbox, "id -u").strip() != "0"


def test_concurrent_edits_in_an_unreadable_directory_all_land(sandbox: BaseSandbox) -> None:
    """Mode 0333: writable and searchable, not readable, so not lockable itself."""
    count = 60
    sandbox.write("wx/f", "".join(f"<{i}>" for i in range(count)))
    shell(sandbox, "chmod 0333 wx")
    with ThreadPoolExecutor(count) as pool:
        results = list(
            pool.map(lambda i: sandbox.edit("wx/f", f"<{i}>", f"[{i}]").replacements, range(count))
        )
    assert results == [1] * count
    assert sandbox.read_bytes("wx/f") == "".join(f"[{i}]" for i in range(count)).encode()


def test_an_unlockable_directory_fails_typed_instead_of_writing_unlocked(sandbox: BaseSandbox) -> None:
    uid = shell(sandbox, "id -u").strip()
    shell(sandbox, "mkdir -p nolock && echo a > nolock/f && chmod 0333 nolock")
    shell(sandbox, f"rm -rf /tmp/.sbx-locks-{uid} && touch /tmp/.sbx-locks-{uid}")
    try:
        with pytest.raises(errors.SandboxPermissionError, match="cannot lock"):
            sandbox.edit("nolock/f", "a", "b")
        with pytest.raises(errors.SandboxPermissionError, match="cannot lock"):
            sandbox.write("nolock/f", "b", overwrite=True)
    finally:
        shell(sandbox, f"rm -f /tmp/.sbx-locks-{uid}")
    assert sandbox.edit("nolock/f", "a", "b").replacements == 1


@pytest.fixture
def limited(sandbox: BaseSandbox) -> LimitedSandbox:
    """The sandbox with small commands, so a 200 kB file goes staged."""
    return LimitedSandbox(sandbox, max_command_bytes=64 * 1024, max_output_bytes=1 << 20)


STAGED = b"s" * 200_000


@pytest.mark.parametrize("mode", ["444", "000"])
def test_a_file_the_user_may_not_write_is_never_replaced(
    sandbox: BaseSandbox, limited: LimitedSandbox, mode: str
) -> None:
    name = f"ro{mode}"
    shell(sandbox, f"mkdir -p {name} && echo old > {name}/f && chmod {mode} {name}/f")
    with pytest.raises(errors.SandboxPermissionError):
        sandbox.write(f"{name}/f", "new", overwrite=True)
    with pytest.raises(errors.SandboxPermissionError):
        limited.write(f"{name}/f", STAGED, overwrite=True)
    with pytest.raises(errors.SandboxPermissionError):
        sandbox.edit(f"{name}/f", "old", "new")
    packed, staged = limited.upload_files([(f"{name}/f", b"new"), (f"{name}/f", STAGED)])
    assert (packed.error, staged.error) == ("permission_denied", "permission_denied")
    assert shell(sandbox, f"stat -c '%a %s' {name}/f; ls -A {name}") == f"{int(mode, 8):o} 4\nf\n"


def test_glob_reports_a_directory_it_can_list_but_not_search(sandbox: BaseSandbox) -> None:
    """Mode 0666: the names can be read, the entries not reached."""
    shell(sandbox, "mkdir -p rw/noexec/deeper && touch rw/noexec/f.py rw/ok.py && chmod 0666 rw/noexec")
    cases = {
        "noexec/*.py": ([], ["noexec"]),
        "noexec/f.py": ([], ["noexec"]),
        "**/*.py": (["ok.py"], ["noexec", "noexec/deeper"]),  # deeper's name was listed, itself not
    }
    for pattern, (names, unreadable) in cases.items():
        result = sandbox.glob(pattern, "rw")
        assert [m.name for m in result.matches] == names, pattern
        assert [os.path.relpath(p, "rw") for p in result.unreadable] == unreadable, pattern
