"""What a command of the sandbox's own user can do to what the SDK leaves in
the sandbox (docs/security.md): with ``reuse_sandbox_state`` (the default) it
can change an installed script's bytecode, and so a later file operation's
result; with ``reuse_sandbox_state = False`` nothing installed is read, and
it cannot. Real ``python3``, real files."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from sandbox_sdk import protocol
from sandbox_sdk.providers.local import LocalSandbox

#: Compiles forged code into the bytecode cache of an installed script, with
#: the header of its real source (mtime and size), as a command could: run by
#: the sandbox's own ``python3``, whose cache tag and magic number it takes.
FORGE = textwrap.dedent(
    """
    import importlib._bootstrap_external as e, importlib.util, os, sys
    source, marker = sys.argv[1:3]
    st = os.stat(source)
    code = compile("open(%r, 'w').write('forged')" % marker, source, "exec")
    cached = importlib.util.cache_from_source(source)
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    with open(cached, "wb") as f:
        f.write(e._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
    """
)


def sandbox_in(tmp_path: Path, name: str, *, reuse: bool) -> LocalSandbox:
    root = tmp_path / name
    root.mkdir()
    sandbox = LocalSandbox(root)
    sandbox.scratch_dir = str(tmp_path / "scratch")
    sandbox.operation_server = False  # the bytecode cache is what a fresh python3 reads
    sandbox.reuse_sandbox_state = reuse
    return sandbox


def forge_installed_read(scratch: Path, marker: Path) -> None:
    scripts = scratch / (protocol.SCRIPTS_DIR % os.getuid())
    source = scripts / f"{protocol.shipped('read').name}.py"
    assert source.exists()
    subprocess.run(["python3", "-I", "-S", "-c", FORGE, str(source), str(marker)], check=True)


def test_a_sandbox_that_reuses_no_state_runs_only_what_its_commands_carry(tmp_path: Path) -> None:
    (tmp_path / "scratch").mkdir()
    marker = tmp_path / "forged"
    trusting = sandbox_in(tmp_path, "trusting", reuse=True)
    trusting.write("a.txt", "real\n")
    assert trusting.read("a.txt").content == "real\n"  # installs the read script
    forge_installed_read(tmp_path / "scratch", marker)

    strict = sandbox_in(tmp_path, "strict", reuse=False)
    strict.write("a.txt", "real\n")
    assert strict.read("a.txt").content == "real\n"
    assert [entry.path for entry in strict.ls(".")] == ["./a.txt"]
    assert not marker.exists()

    # The documented limit of the default (docs/security.md): the same user
    # can change what a later operation runs (here the forged code only
    # leaves its mark; the command then runs the real script again).
    trusting.read("a.txt")
    assert marker.read_text() == "forged"


def test_a_sandbox_that_reuses_no_state_installs_nothing_and_asks_no_server(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    sandbox = sandbox_in(tmp_path, "strict", reuse=False)
    sandbox.operation_server = True
    for number in range(3):
        sandbox.write(f"{number}.txt", f"{number}\n")
        assert sandbox.read(f"{number}.txt").content == f"{number}\n"
    assert list(scratch.iterdir()) == []
    command, _ = protocol.build_command(
        "read", {"op": "read"}, scripts_dir=protocol.scripts_dir_in(str(scratch)), installed=False
    )
    assert protocol.UNSERVED_MARKER not in command and protocol.SCRIPTS_DIR.partition("%")[0] not in command
