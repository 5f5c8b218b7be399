"""The operation server (remote/server.py, docs/protocol.md "The operation
server"): real ``bash``, a real server process and real workers throughout.

A sandbox whose ``PATH`` holds ``bash`` alone proves that an operation was
served: without the server, its command would need ``python3``."""

from __future__ import annotations

import binascii
import contextlib
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox_sdk import errors, protocol
from sandbox_sdk._session import MAX_FAILED_LAUNCHES
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox

SERVER = protocol.shipped("server")
#: What only a command that launches a server holds: the server script's
#: name and CRC-32 as the bootstrap's arguments.
LAUNCH = f" {SERVER.name} {SERVER.crc} "
#: How long a test waits for a process to end or a file to appear.
PATIENCE = 15.0


def scripts_dir(scratch: Path) -> Path:
    return scratch / (protocol.SCRIPTS_DIR % os.getuid())


def port_file(scratch: Path) -> Path:
    return scripts_dir(scratch) / f"{SERVER.name}.port"


def server_pid(scratch: Path) -> int:
    return int(port_file(scratch).read_text().split()[2])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(condition: object, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Recorder(LocalSandbox):
    """A local sandbox that keeps every command and response."""

    def __init__(self, root: Path, **options: object) -> None:
        super().__init__(root, **options)  # type: ignore[arg-type]
        self.exchanges: list[tuple[str, ExecuteResponse]] = []

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        response = super().execute(command, timeout=timeout)
        self.exchanges.append((command, response))
        return response

    def unserved(self) -> list[str]:
        """Why each served command of the last operation was not served ("" if it was)."""
        reasons = []
        for command, response in self.exchanges:
            if protocol.UNSERVED_MARKER not in command:
                continue
            _, marker, rest = response.output.partition(protocol.UNSERVED_MARKER + " ")
            reasons.append(rest.split("\n")[0].split(" ")[1] if marker else "")
        self.exchanges.clear()
        return reasons


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory of this test's own (so a server of its own), its server stopped after it."""
    path = tmp_path / "scratch"
    path.mkdir()
    yield path
    if port_file(path).exists():
        with contextlib.suppress(ProcessLookupError, IndexError, ValueError):
            os.kill(server_pid(path), signal.SIGTERM)


def sandbox_in(root: Path, scratch: Path, **options: object) -> Recorder:
    root.mkdir(exist_ok=True)
    sandbox = Recorder(root, **options)
    sandbox.scratch_dir = str(scratch)
    return sandbox


@pytest.fixture
def served(tmp_path: Path, scratch: Path) -> Recorder:
    """A sandbox whose server is up and has every script the tests use installed."""
    sandbox = sandbox_in(tmp_path / "root", scratch)
    sandbox.write("seed.txt", "seed\n")
    assert sandbox.unserved() == ["none"]  # the first command finds no server
    sandbox.write("seed2.txt", "seed\n")
    assert sandbox.unserved() == [""]  # the second launches one first, which serves it
    sandbox.mkdir("made")
    assert sandbox.unserved() == ["declined"]  # a script not installed yet: the command installs it
    sandbox.delete("made")
    sandbox.read("seed.txt")
    sandbox.ls(".")
    sandbox.glob("*.txt")
    sandbox.grep("se+d", fixed_strings=False)
    sandbox.edit("seed.txt", "seed", "seed")
    sandbox.download_files(["seed.txt"])
    sandbox.exchanges.clear()
    return sandbox


def bash_only_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``PATH`` has ``bash`` and nothing else (no ``python3``)."""
    folder = tmp_path / "bash-only"
    folder.mkdir()
    (folder / "bash").symlink_to("/bin/bash")
    return {"PATH": str(folder)}


def test_served_operations_start_no_interpreter(tmp_path: Path, scratch: Path, served: Recorder) -> None:
    sandbox = sandbox_in(tmp_path / "root", scratch, env=bash_only_path(tmp_path))
    assert sandbox.execute("python3 -c pass").exit_code == 127
    sandbox.write("notes/a.txt", "alpha\nbeta\n")
    assert sandbox.read("notes/a.txt").content == "alpha\nbeta\n"
    sandbox.edit("notes/a.txt", "beta", "gamma")
    assert sandbox.read("notes/a.txt", offset=1).content == "gamma\n"
    assert sandbox.stat("notes/a.txt").size == 12
    assert [e.path for e in sandbox.ls("notes")] == ["notes/a.txt"]
    assert [e.path for e in sandbox.glob("**/*.txt").matches] == ["notes/a.txt", "seed.txt", "seed2.txt"]
    assert [(m.path, m.line) for m in sandbox.grep("gam+a", fixed_strings=False).matches] == [
        ("notes/a.txt", "gamma")
    ]
    sandbox.mkdir("made")
    sandbox.delete("made")
    (response,) = sandbox.download_files(["notes/a.txt"])
    assert response.content == b"alpha\ngamma\n"
    with pytest.raises(FileNotFoundError):
        sandbox.read("missing.txt")  # a typed error through the server, as through python3
    assert set(sandbox.unserved()) == {""}


def test_the_command_after_one_that_found_no_server_launches_it(tmp_path: Path, scratch: Path) -> None:
    sandbox = sandbox_in(tmp_path / "root", scratch)
    sandbox.write("a.txt", "a\n")
    ((first, response),) = sandbox.exchanges
    assert LAUNCH not in first and f"{protocol.UNSERVED_MARKER} " in response.output
    sandbox.exchanges.clear()
    assert not port_file(scratch).exists()
    sandbox.write("b.txt", "b\n")
    ((second, _),) = sandbox.exchanges
    assert second.startswith(f"{protocol.PYTHON} -c") and LAUNCH in second
    assert sandbox.unserved() == [""]
    pid = server_pid(scratch)
    assert alive(pid)
    other = sandbox_in(tmp_path / "other", scratch)  # another client of the same sandbox: the same server
    other.write("c.txt", "c\n")
    assert other.unserved() == [""] and server_pid(scratch) == pid
    assert os.stat(port_file(scratch)).st_mode & 0o777 == 0o600


def test_a_sandbox_where_no_server_starts_is_asked_three_times_then_left_alone(tmp_path: Path) -> None:
    """``/proc`` cannot hold the scripts (nor a server's files): every
    operation still works, from its command, and the client stops launching."""
    sandbox = sandbox_in(tmp_path / "root", Path("/proc"))
    for number in range(8):
        sandbox.write(f"{number}.txt", f"{number}\n")
    launches = [command for command, _ in sandbox.exchanges if LAUNCH in command]
    assert len(launches) == MAX_FAILED_LAUNCHES
    assert set(sandbox.unserved()) == {"none"}
    assert sandbox.read("7.txt").content == "7\n"


def test_the_server_serves_concurrent_commands(served: Recorder) -> None:
    def round_trip(number: int) -> str:
        served.write(f"c/{number}.txt", f"{number}\n" * number)
        return served.read(f"c/{number}.txt").content

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(round_trip, range(1, 65)))
    assert results == [f"{number}\n" * number for number in range(1, 65)]
    assert set(served.unserved()) == {""}


def test_a_port_file_naming_no_server_is_replaced(tmp_path: Path, scratch: Path, served: Recorder) -> None:
    os.kill(server_pid(scratch), signal.SIGKILL)
    wait_until(lambda: not alive_listener(scratch), "the killed server's port to close")
    served.write("x.txt", "x\n")
    assert served.unserved() == ["none"]  # the port file is still there: nothing listens
    served.write("y.txt", "y\n")
    assert served.unserved() == [""]
    assert served.read("x.txt").content == "x\n" and alive(server_pid(scratch))


def alive_listener(scratch: Path) -> bool:
    port = int(port_file(scratch).read_text().split()[0])
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_replaced_port_file_ends_the_server(scratch: Path, served: Recorder) -> None:
    pid = server_pid(scratch)
    port_file(scratch).write_text("1 someone-else 1\n")
    wait_until(lambda: not alive(pid), "the server to leave")
    assert port_file(scratch).read_text() == "1 someone-else 1\n"  # not its own to remove


def test_an_idle_server_leaves_and_removes_its_port_file(tmp_path: Path, scratch: Path) -> None:
    sandbox = sandbox_in(tmp_path / "root", scratch)
    sandbox.operation_server_idle = 3.0  # time enough to see its spares on a loaded machine
    sandbox.write("a.txt", "a\n")
    sandbox.write("b.txt", "b\n")
    pid = server_pid(scratch)
    wait_until(lambda: len(living_children(pid)) >= 2, "the spare workers forked ahead of requests")
    spares = living_children(pid)
    wait_until(lambda: not alive(pid), "the idle server to leave")
    wait_until(lambda: not any(map(alive, spares)), "its spare workers to end with it")
    assert not port_file(scratch).exists()
    sandbox.write("c.txt", "c\n")
    assert sandbox.unserved()[-1] == "none"
    sandbox.write("d.txt", "d\n")  # launched again
    assert alive(server_pid(scratch)) and server_pid(scratch) != pid


@pytest.mark.parametrize("answer", [b"HTTP/1.0 400 Bad Request\r\n\r\n", b"-\n", b"+\n", b""])
def test_a_listener_that_is_not_the_server_gets_nothing_and_the_command_runs_alone(
    scratch: Path, served: Recorder, answer: bytes
) -> None:
    """Whatever listens on the port file's port (a stale file, a port taken
    since, by another user or another sandbox on the same loopback) may
    answer anything: only the proof in the port file leads bash on, so it
    hears nothing at all, not the token, and the payload goes to
    ``python3``, whole; the next command starts a server of its own."""
    os.kill(server_pid(scratch), signal.SIGKILL)
    heard: list[bytes] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port_file(scratch).write_text(f"{listener.getsockname()[1]} token 1 proof\n")

        def answer_once() -> None:
            conn, _ = listener.accept()
            with conn:
                if answer:
                    conn.sendall(answer)
                else:  # an end of file, at once
                    conn.shutdown(socket.SHUT_WR)
                conn.settimeout(PATIENCE)
                try:
                    heard.append(conn.recv(4096))
                except ConnectionResetError:  # bash left the rest of the answer unread
                    heard.append(b"")

        thread = threading.Thread(target=answer_once, daemon=True)
        thread.start()
        served.write("payload.txt", "all of it\n" * 1000)
        thread.join(PATIENCE)
    assert heard == [b""]  # bash closed the connection without a word
    assert served.read("payload.txt").content == "all of it\n" * 1000
    assert served.unserved() == ["none", ""]  # the read's command started a server, which served it


def test_a_silent_listener_costs_one_handshake_then_the_server_is_asked_no_more(
    scratch: Path, served: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server stopped (``SIGSTOP``) or a listener that says nothing: bash
    waits out the handshake once, the operation runs from ``python3`` with
    the right answer, and the client asks no server of this sandbox again."""
    monkeypatch.setattr(protocol.command, "SERVER_HANDSHAKE_SECONDS", 1)
    pid = server_pid(scratch)
    stopped = [pid, *living_children(pid)]
    for process in stopped:
        os.kill(process, signal.SIGSTOP)
    try:
        served.write("a.txt", "a\n")
        assert served.unserved() == ["stalled"]
        assert served.read("a.txt").content == "a\n"
        served.ls(".")
        assert served.unserved() == []  # no command asks a server any more
    finally:
        for process in stopped:
            os.kill(process, signal.SIGCONT)


def test_a_fifo_in_place_of_the_port_file_blocks_nothing(scratch: Path, served: Recorder) -> None:
    """A FIFO put where the port file was: bash reads only a regular file,
    and the server, which looks at its file every second, sees it is not its
    own and leaves without blocking on it."""
    pid = server_pid(scratch)
    port_file(scratch).unlink()
    os.mkfifo(port_file(scratch), 0o600)
    served.write("a.txt", "a\n")
    assert served.unserved() == ["none"]
    assert served.read("a.txt").content == "a\n"
    wait_until(lambda: not alive(pid), "the server to leave")
    if stat.S_ISFIFO(os.lstat(port_file(scratch)).st_mode):  # the fixture reads what is left there
        port_file(scratch).unlink()


def install_probe(scratch: Path, script: str) -> protocol.Shipped:
    """``script`` installed as ``sbx_probe_<n>.py``: the server runs any
    installed script it is asked for by name and CRC-32."""
    source = script.encode("utf-8")
    name = f"sbx_probe_{os.urandom(4).hex()}"
    (scripts_dir(scratch) / f"{name}.py").write_bytes(source)
    return protocol.Shipped(name=name, crc=binascii.crc32(source), packed="")


def run_served_command(
    scratch: Path, cwd: Path, script: str, command_prefix: str = ""
) -> subprocess.Popen[str]:
    """A served command of a test's own installed script (``install_probe``),
    started by ``bash`` in ``cwd``."""
    shipped = install_probe(scratch, script)
    nonce = os.urandom(16).hex()
    request = protocol.server_request(protocol.scripts_dir_in(str(scratch)), shipped, nonce)
    command = (
        f"{command_prefix}{{ {request}\n"
        f"echo NOT-SERVED; exit 3; }} <<'SBX_{nonce}'\npayload line\nSBX_{nonce}\n"
    )
    return subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SBX_PROBE": "from the command"},
        start_new_session=True,
    )


def test_a_worker_runs_in_the_commands_directory_umask_environment_and_descriptors(
    tmp_path: Path, scratch: Path, served: Recorder
) -> None:
    probe = (
        "import os, sys\n"
        "print(os.getcwd(), oct(os.umask(0)), os.environ['SBX_PROBE'], sys.stdin.read().strip())\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(42)\n"
    )
    work = tmp_path / "work dir"
    work.mkdir()
    process = run_served_command(scratch, work, probe, command_prefix="umask 027; ")
    out, err = process.communicate(timeout=PATIENCE)
    assert (process.returncode, out, err) == (
        42,
        f"{work} 0o27 from the command payload line\n",
        "to stderr\n",
    )


def test_a_killed_command_takes_its_worker_and_what_the_worker_started(
    tmp_path: Path, scratch: Path, served: Recorder
) -> None:
    pids = tmp_path / "pids"
    probe = (
        "import posix, subprocess\n"
        "child = subprocess.Popen(['sleep', '120'])\n"
        f"open({str(pids)!r}, 'w').write('%d %d' % (posix.getpid(), child.pid))\n"
        "child.wait()\n"
    )
    process = run_served_command(scratch, tmp_path, probe)
    wait_until(lambda: pids.exists() and pids.read_text().count(" ") == 1, "the worker to start")
    worker, child = map(int, pids.read_text().split())
    os.killpg(process.pid, signal.SIGKILL)  # as a provider kills a command at its timeout
    process.wait(PATIENCE)
    wait_until(lambda: not alive(worker) and not alive(child), "the worker and its child to end")
    assert alive(server_pid(scratch))


def test_output_to_a_file_not_opened_for_appending_is_not_served(tmp_path: Path, served: Recorder) -> None:
    """A new description of such a file would write from its start, over
    what the command wrote before: the worker declines, ``python3`` runs."""
    shipped = install_probe(Path(served.scratch_dir), "print('served')\n")
    scripts = protocol.scripts_dir_in(served.scratch_dir)
    for mode, expected in (("w", "declined"), ("a", "")):
        out = tmp_path / f"out-{mode}.txt"
        with open(out, mode) as sink:
            sink.write("before\n")
            sink.flush()
            command = f"{{ {protocol.server_request(scripts, shipped, 'n')}\necho alone; }} </dev/null"
            subprocess.run(["bash", "-c", command], stdout=sink, stderr=subprocess.DEVNULL, check=False)
        text = out.read_text()
        assert text.startswith("before\n")
        assert (f"{protocol.UNSERVED_MARKER} n declined\nalone\n" in text) == (expected == "declined")
        assert ("served\n" in text) == (expected == "")


def test_the_server_is_never_asked_for_a_users_command(served: Recorder) -> None:
    assert served.execute("echo $$").exit_code == 0
    served.run(["true"])
    assert all(protocol.UNSERVED_MARKER not in command for command, _ in served.exchanges)


def test_without_the_operation_server_commands_do_not_ask_for_it(tmp_path: Path, scratch: Path) -> None:
    sandbox = sandbox_in(tmp_path / "root", scratch)
    sandbox.operation_server = False
    for number in range(3):
        sandbox.write(f"{number}.txt", "x\n")
    assert all(protocol.UNSERVED_MARKER not in command for command, _ in sandbox.exchanges)
    assert not port_file(scratch).exists()


def test_a_server_of_another_sandbox_user_or_namespace_declines(tmp_path: Path, served: Recorder) -> None:
    """A command in another mount namespace (its paths are not the server's)
    is declined, and runs ``python3`` as before."""
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("unshare --mount is not permitted here")
    inner = WrappedSandbox(Path(served.root_dir), "unshare --mount")
    inner.scratch_dir = served.scratch_dir
    assert inner.read("seed.txt").content == "seed\n"
    assert "declined" in inner.output


class WrappedSandbox(LocalSandbox):
    """Runs each command under ``wrapper`` (a program and its arguments)."""

    def __init__(self, root: Path, wrapper: str) -> None:
        super().__init__(root)
        self.wrapper = wrapper
        self.output = ""

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        response = super().execute(f"exec {self.wrapper} bash -c {shlex.quote(command)}", timeout=timeout)
        self.output += response.output
        return response


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_command_with_fewer_rights_than_the_server_is_not_served_with_the_servers(
    tmp_path: Path, served: Recorder
) -> None:
    """Root without ``CAP_DAC_OVERRIDE`` (a capability bounding set the
    server does not have) cannot read a file of mode 000: the server, which
    could, declines, and ``python3`` reports what the command may do."""
    locked = Path(served.root_dir, "locked.txt")
    locked.write_text("secret\n")
    locked.chmod(0)
    wrapped = WrappedSandbox(Path(served.root_dir), "setpriv --bounding-set -dac_override,-dac_read_search")
    wrapped.scratch_dir = served.scratch_dir
    with pytest.raises(PermissionError):
        wrapped.read("locked.txt")
    assert "declined" in wrapped.output
    assert served.read("locked.txt").content == "secret\n"  # root with every capability may


def test_an_operation_the_server_was_running_fails_typed_when_the_server_dies(
    tmp_path: Path, scratch: Path, served: Recorder
) -> None:
    """A worker killed mid-operation leaves bash no status: the command
    exits 99 with no frame, a clear error, and nothing half-written."""
    running = tmp_path / "running"
    probe = f"import time\nopen({str(running)!r}, 'w').close()\ntime.sleep(120)\n"
    process = run_served_command(scratch, tmp_path, probe)
    wait_until(running.exists, "the worker to run the script")
    for worker in workers_of(server_pid(scratch)):
        os.kill(worker, signal.SIGKILL)
    out, _ = process.communicate(timeout=PATIENCE)
    assert process.returncode == protocol.ExitCode.INTERNAL and "NOT-SERVED" not in out


def living_children(pid: int) -> list[int]:
    return [child for child in workers_of(pid) if alive(child)]


def workers_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children]


def test_errors_are_typed_through_the_server(served: Recorder) -> None:
    with pytest.raises(errors.SandboxFileExistsError):
        served.write("seed.txt", "again\n")
    with pytest.raises(errors.EditNoMatchError):
        served.edit("seed.txt", "absent", "x")
    assert set(served.unserved()) == {""}


def test_a_subclass_can_turn_the_server_off(tmp_path: Path) -> None:
    class Plain(LocalSandbox):
        operation_server = False

    assert BaseSandbox.operation_server is True
    sandbox = Plain(tmp_path)
    assert not sandbox._session().plan("ls").served


def test_scripts_removed_under_a_running_server_are_installed_again(scratch: Path, served: Recorder) -> None:
    """The server runs an installed script only as it is now: gone (with its
    port file) or changed, the command runs ``python3``, which installs it again."""
    script = scripts_dir(scratch) / f"{protocol.shipped('ls').name}.py"
    script.write_text(script.read_text() + "\n# changed\n")
    assert served.stat("seed.txt").size == 5
    # declined, and left out of the command: sent again in full (declined again), which replaces it
    assert served.unserved() == ["declined", "declined"] and script.read_text() == protocol.shipped_source(
        "ls"
    )
    shutil.rmtree(scripts_dir(scratch))
    assert served.stat("seed.txt").size == 5  # no port file: python3 (the script travels since the resend)
    assert served.unserved() == ["none"]
    assert served.stat("seed.txt").size == 5  # a server started again
    assert served.unserved() == [""]


def test_a_killed_server_takes_its_spare_workers(scratch: Path, served: Recorder) -> None:
    """Its spares wait on its listener: killed (no clean-up of its own), the
    server leaves them a closed pipe, and they leave too; the next command
    finds no server, and the one after starts another."""
    pid = server_pid(scratch)
    wait_until(lambda: len(living_children(pid)) >= 2, "the spare workers")
    spares = living_children(pid)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(map(alive, spares)), "the spares to leave with their server")
    served.write("after.txt", "x\n")
    served.write("after2.txt", "y\n")
    assert served.unserved() == ["none", ""]


@contextlib.contextmanager
def listener_nobody_asks() -> Iterator[int]:
    """A loopback listener, its port for a port file a test plants: no
    command may connect to it (checked when the block ends)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]
        listener.settimeout(0.5)
        with pytest.raises(TimeoutError):
            listener.accept()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user needs root")
def test_a_port_file_of_another_user_is_not_read(tmp_path: Path, scratch: Path) -> None:
    """Another user of a shared ``/tmp`` may make a scripts directory in our
    name, but not a file of ours in it: bash reads no port file it does not own."""
    sandbox = sandbox_in(tmp_path / "root", scratch)
    with listener_nobody_asks() as port:
        scripts_dir(scratch).mkdir(mode=0o700)
        port_file(scratch).write_text(f"{port} token 1 proof\n")
        os.chown(port_file(scratch), 65534, 65534)
        sandbox.write("a.txt", "a\n")
    assert sandbox.unserved() == ["none"] and sandbox.read("a.txt").content == "a\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory of another user's")
def test_a_scripts_directory_another_user_made_is_not_used(tmp_path: Path, scratch: Path) -> None:
    """Another user of a shared ``/tmp`` made the scripts directory in our
    name, with a port file and a module planted in it: nothing there is
    read, imported or run, and every operation runs from its command."""
    sandbox = sandbox_in(tmp_path / "root", scratch)
    with listener_nobody_asks() as port:
        scripts_dir(scratch).mkdir(mode=0o755)
        port_file(scratch).write_text(f"{port} token 1 proof\n")
        (scripts_dir(scratch) / "_json.py").write_text("raise SystemExit('planted')\n")
        for path in (scripts_dir(scratch), port_file(scratch), scripts_dir(scratch) / "_json.py"):
            os.chown(path, 65534, 65534)
        for number in range(3):
            sandbox.write(f"{number}.txt", f"{number}\n")
    assert sorted(os.listdir(scripts_dir(scratch))) == ["_json.py", port_file(scratch).name]
    assert sandbox.read("2.txt").content == "2\n"


def test_modules_planted_beside_the_scripts_are_never_imported(
    tmp_path: Path, scratch: Path, served: Recorder
) -> None:
    """The scripts directory is not on any script's import path: a module
    put there (by a command of the sandbox's own user, say) under the name
    of one a script imports is never imported, served or not."""
    marker = tmp_path / "imported"
    for module in ("_json", "json", "re", "zlib", "errno", "hashlib"):
        (scripts_dir(scratch) / f"{module}.py").write_text(f"open({str(marker)!r}, 'a').write({module!r})\n")
    unserved = sandbox_in(tmp_path / "unserved", scratch)
    unserved.operation_server = False
    for sandbox in (served, unserved):
        sandbox.write("p/a.txt", "needle\n")
        sandbox.ls("p")
        sandbox.grep("ne+dle", "p", fixed_strings=False)
        sandbox.glob("**/*.txt", "p")
        with pytest.raises(errors.SandboxFileNotFoundError):
            sandbox.read("p/absent.txt")
    assert not marker.exists()
