"""The long-lived jail of a bubblewrap sandbox: what a command leaves running
outlives ``execute`` (if it left the command's process group), every client
process reaches the same jail, commands run concurrently, a dead jail is
started again, and delete, reap and expiry end it with everything in it.
Real jails, real processes, observed from the host through the jail's PID
namespace."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox, _jail

#: Generous: the machine running the tests is shared and loaded.
PATIENCE = 20.0
#: Prints the page the sandbox's own HTTP server (on its loopback) serves.
HTTP = (
    'python3 -c "import urllib.request as r; '
    "print(r.urlopen('http://127.0.0.1:8765/page.txt').read().decode(), end='')\""
)


def jail_pid(provider: BwrapProvider, sandbox: BwrapSandbox) -> int:
    """Host pid of the sandbox's jail's PID 1, as the provider recorded it."""
    record = provider.store.sandboxes_dir / sandbox.id / "jail" / "pid"
    return int(record.read_text().split()[0])


def namespace_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def processes_in(namespace: str) -> list[int]:
    """Host pids of the live (not zombie) processes of a PID namespace."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") != namespace:
                    continue
                with open(f"/proc/{name}/stat") as stat:
                    state = stat.read().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue  # exited meanwhile
            if state != "Z":
                found.append(int(name))
    return found


def commands_in(namespace: str) -> list[int]:
    """Host pids of the live processes of a jail's PID namespace but its
    machinery: PID 1 and the operation server's processes it forked, which
    share its command line."""
    processes = processes_in(namespace)
    lines = {}
    for pid in processes:
        with contextlib.suppress(OSError):
            lines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
    server = next((line for line in lines.values() if b"/dev/fd/" in line.partition(b"\0")[2]), None)
    return [pid for pid in processes if lines.get(pid) != server]


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (state first), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()
    except OSError:
        return None


def starts(pids: list[int]) -> list[tuple[int, str]]:
    """Each process with its start time: a namespace's number is reused once
    it is gone (by a jail of a test running beside this one, say); a process
    that ran in it is known by these two."""
    return [(pid, fields[19]) for pid in pids if (fields := stat_fields(pid)) is not None]


def still_running(processes: list[tuple[int, str]]) -> list[int]:
    """Those of ``processes`` (see ``starts``) that still run (zombies do not)."""
    return [
        pid
        for pid, start in processes
        if (fields := stat_fields(pid)) is not None and fields[19] == start and fields[0] != "Z"
    ]


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def shell(sandbox: BwrapSandbox, command: str) -> str:
    result = sandbox.execute(command, timeout=PATIENCE)
    assert result.exit_code == 0, result
    return result.output


@pytest.fixture
def sandbox(provider: BwrapProvider) -> BwrapSandbox:
    return provider.create()


def start_http_server(sandbox: BwrapSandbox) -> None:
    shell(sandbox, "echo served > page.txt")
    shell(sandbox, "setsid nohup python3 -m http.server 8765 --bind 127.0.0.1 >/tmp/http.log 2>&1 &")


def test_a_background_server_outlives_execute_and_answers_later(sandbox: BwrapSandbox) -> None:
    start_http_server(sandbox)
    eventually(lambda: sandbox.execute(HTTP).output == "served\n", "the server never answered")
    shell(sandbox, "echo changed > page.txt")  # a later command's files are the server's too
    assert sandbox.execute(HTTP).output == "changed\n"


#: What a command leaves behind, each known by its ``argv[0]`` (``exec -a``):
#: two stay in the command's process group, two leave it with ``setsid``.
LEFT_BEHIND = {
    "job": "(exec -a {tag}-job sleep 600) >/dev/null 2>&1 &",
    "double-fork": "( (exec -a {tag}-double-fork sleep 600) >/dev/null 2>&1 & )",
    "daemon": "setsid bash -c 'exec -a {tag}-daemon sleep 600' >/dev/null 2>&1 &",
    "double-daemon": "( setsid bash -c 'exec -a {tag}-double-daemon sleep 600' >/dev/null 2>&1 & )",
}
#: What outlives the command, however it ends.
LEFT_THE_GROUP = {"daemon", "double-daemon"}
#: How the command goes on once all of ``LEFT_BEHIND`` runs.
ENDINGS = {"exit": "", "timeout": "; sleep 600", "cancel": "; sleep 600"}
#: Long enough for the command to start what it leaves behind on a loaded machine.
TIMEOUT = PATIENCE / 4


def left_running(namespace: str, tag: str) -> set[str]:
    """Which of ``LEFT_BEHIND`` (by the names ``tag`` starts) run in the namespace."""
    names = set()
    for pid in processes_in(namespace):
        with contextlib.suppress(OSError):
            name = Path(f"/proc/{pid}/cmdline").read_bytes().partition(b"\0")[0].decode()
            if name.startswith(f"{tag}-"):
                names.add(name.removeprefix(f"{tag}-"))
    return names


async def cancel_once_ready(sandbox: BwrapSandbox, command: str) -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(sandbox.aexecute, command, timeout=PATIENCE * 3))
        deadline = time.monotonic() + PATIENCE
        while not (sandbox.workspace / "ready").exists():
            assert time.monotonic() < deadline, "the command never got ready"
            await anyio.sleep(0.05)
        group.cancel_scope.cancel()


@pytest.mark.parametrize("ending", ENDINGS)
def test_what_a_command_leaves_follows_one_rule_however_it_ends(
    provider: BwrapProvider, sandbox: BwrapSandbox, ending: str
) -> None:
    """Whether the command exits, times out or is cancelled, what is in its
    process group then (a background job, a double fork) is killed, and what
    left the group (``setsid``, once or after a double fork) runs on, as does
    a process of ``start()``."""
    tag = f"left-{secrets.token_hex(4)}"
    started = sandbox.start("sleep 600")
    setup = "".join(f"{line.format(tag=tag)}\n" for line in LEFT_BEHIND.values())
    wait = f"until [ \"$(pgrep -c -f '^{tag}-')\" = {len(LEFT_BEHIND)} ]; do sleep 0.05; done"
    command = f"{setup}{wait}; echo ready; touch ready{ENDINGS[ending]}"
    namespace = namespace_of(jail_pid(provider, sandbox))
    if ending == "cancel":
        anyio.run(cancel_once_ready, sandbox, command)
    else:
        response = sandbox.execute(command, timeout=TIMEOUT)
        expected = ("ready\n", 0, False) if ending == "exit" else ("ready\n", 124, True)
        assert (response.output, response.exit_code, response.timed_out) == expected
    eventually(
        lambda: left_running(namespace, tag) == LEFT_THE_GROUP, "the group ran on, or what left it did not"
    )
    assert started.poll() is None


def test_exit_statuses(sandbox: BwrapSandbox) -> None:
    statuses = {"exit 3": 3, "kill -TERM $$": 128 + 15, "kill -KILL $$": 128 + 9, "true": 0}
    for command, status in statuses.items():
        assert sandbox.execute(command).exit_code == status, command


def test_another_process_reaches_the_same_jail(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    start_http_server(sandbox)
    eventually(lambda: sandbox.execute(HTTP).output == "served\n", "the server never answered")
    own_namespace = shell(sandbox, "readlink /proc/self/ns/pid")
    code = f"""
        from sandbox_sdk.providers.bwrap import BwrapProvider
        sandbox = BwrapProvider({str(provider.store.state_dir)!r}).get({sandbox.id!r})
        print(sandbox.execute("readlink /proc/self/ns/pid").output, end="")
        print(sandbox.execute({HTTP!r}).output, end="")
    """
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout == own_namespace + "served\n"


def test_concurrent_commands_run_at_once(sandbox: BwrapSandbox) -> None:
    """Each waits (inside the sandbox) until all have started: that ends only
    if they run at the same time."""
    count = 8
    barrier = (
        f"touch started.$0; n=0; while [ $(ls started.* | wc -l) -lt {count} ] && [ $n -lt 400 ]; "
        "do sleep 0.05; n=$((n+1)); done; echo $0 $(ls started.* | wc -l)"
    )

    def run(index: int) -> str:
        return sandbox.execute(f"bash -c '{barrier}' {index}", timeout=60).output

    with ThreadPoolExecutor(count) as pool:
        outputs = list(pool.map(run, range(count)))
    assert outputs == [f"{index} {count}\n" for index in range(count)]


def test_a_killed_jail_is_started_again(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    shell(sandbox, "setsid sleep 600 &")
    first = jail_pid(provider, sandbox)
    namespace = namespace_of(first)
    os.kill(first, signal.SIGKILL)
    eventually(lambda: processes_in(namespace) == [], "the killed jail left processes")
    assert shell(sandbox, "echo again") == "again\n"
    assert jail_pid(provider, sandbox) != first
    assert shell(sandbox, "pgrep -c sleep || true") == "0\n"


def test_a_jail_whose_server_dies_mid_command_fails_that_command_only(
    provider: BwrapProvider, sandbox: BwrapSandbox
) -> None:
    shell(sandbox, "true")  # the jail runs: its pid is recorded
    server = jail_pid(provider, sandbox)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sandbox.execute, "touch started; sleep 60", timeout=PATIENCE * 3)
        eventually((sandbox.workspace / "started").exists, "the command never started")
        os.kill(server, signal.SIGKILL)  # from the host: nothing inside can (below)
        with pytest.raises(errors.SandboxRuntimeError, match="jail ended"):
            running.result()
    assert shell(sandbox, "echo recovered") == "recovered\n"


def test_no_command_can_kill_the_jails_server(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    """The server is the jail's PID 1, which the kernel shields from every
    signal sent inside its namespace: ``kill -9 -1`` kills all the rest, and
    the command's status still comes back (0 from bash's own ``kill``, which
    spares its caller; 137 for a bash that a child's ``kill`` killed)."""
    shell(sandbox, "true")
    server = jail_pid(provider, sandbox)
    daemon = shell(sandbox, "setsid sleep 600 >/dev/null 2>&1 & echo $!").strip()
    response = sandbox.execute("kill -9 -1; echo survived")
    assert (response.output, response.exit_code) == ("survived\n", 0)
    # killed with everything else: gone once the server has reaped it (a zombie still answers kill -0)
    eventually(lambda: sandbox.execute(f"kill -0 {daemon}").exit_code != 0, "the daemon outlived kill -9 -1")
    response = sandbox.execute("sh -c 'kill -9 -1'; echo unreachable")
    assert (response.output, response.exit_code, response.timed_out) == ("", 137, False)
    for attempt in ("kill -9 1", "kill -9 $PPID", "kill -STOP 1", "kill -INT 1", "kill -TERM 1"):
        assert sandbox.execute(attempt).exit_code == 0, attempt  # sent, and dropped by the kernel
    assert shell(sandbox, "echo ok") == "ok\n"
    assert jail_pid(provider, sandbox) == server  # the same jail, never restarted


def test_orphans_are_reaped(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    """The server, as PID 1, inherits what outlives its parent and reaps it:
    no zombie is left to count towards the process limit."""
    orphan = int(shell(sandbox, "setsid sleep 600 >/dev/null 2>&1 & echo $!"))
    namespace = namespace_of(jail_pid(provider, sandbox))
    assert shell(sandbox, f"cat /proc/{orphan}/status | grep PPid").split() == ["PPid:", "1"]
    shell(sandbox, f"kill -9 {orphan}")
    eventually(lambda: commands_in(namespace) == [], "the orphan was not reaped")
    assert shell(sandbox, "ps -eo stat= | grep -c Z || true") == "0\n"


def test_delete_ends_the_jail_and_everything_in_it(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    shell(sandbox, "setsid sh -c 'while :; do sleep 0.1; done' >/dev/null 2>&1 &")
    namespace = namespace_of(jail_pid(provider, sandbox))
    assert len(processes_in(namespace)) >= 2
    provider.delete(sandbox_id=sandbox.id)
    assert processes_in(namespace) == []  # delete waited for the jail to end
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")


def test_reap_and_expiry_end_the_jail(provider: BwrapProvider) -> None:
    reaped = provider.create(ttl=60)
    expiring = provider.create(idle_timeout=2)
    for sandbox in (reaped, expiring):
        shell(sandbox, "setsid sleep 600 >/dev/null 2>&1 &")
    reaped_namespace = namespace_of(jail_pid(provider, reaped))
    expiring_namespace = namespace_of(jail_pid(provider, expiring))
    # reaping: the record says it expired (created an hour ago)
    meta = provider.store.sandboxes_dir / reaped.id / "meta.json"
    meta.write_text(meta.read_text().replace('"ttl": 60.0', '"ttl": 0.001'))
    assert reaped.id in provider.reap()
    assert processes_in(reaped_namespace) == []
    # expiry: nobody reaps, the jail ends by itself once idle for 2 s
    eventually(lambda: processes_in(expiring_namespace) == [], "the expired jail still runs")


def test_an_expired_jail_that_runs_nothing_but_its_server_ends(provider: BwrapProvider) -> None:
    """An expired jail with nothing left in it but its server ends too."""
    expiring = provider.create(idle_timeout=2)
    shell(expiring, "true")
    namespace = namespace_of(jail_pid(provider, expiring))
    eventually(lambda: processes_in(namespace) == [], "the expired idle jail still runs")


async def test_a_cancelled_command_is_killed_before_the_cancellation_returns(sandbox: BwrapSandbox) -> None:
    with anyio.move_on_after(1) as scope:
        await sandbox.aexecute("echo $$ > pid; sleep 30; echo late > late", timeout=60)
    assert scope.cancelled_caught
    pid = shell(sandbox, "cat pid").strip()
    assert sandbox.execute(f"kill -0 {pid}").exit_code != 0  # already gone
    assert sandbox.execute("ls late").exit_code != 0


def test_ctrl_c_kills_the_command_before_execute_raises(
    provider: BwrapProvider, sandbox: BwrapSandbox
) -> None:
    code = f"""
        from sandbox_sdk.providers.bwrap import BwrapProvider
        sandbox = BwrapProvider({str(provider.store.state_dir)!r}).get({sandbox.id!r})
        try:
            sandbox.execute("echo $$ > pid; sleep 30; echo late > late", timeout=60)
        except KeyboardInterrupt:
            print("interrupted")
    """
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
    eventually((sandbox.workspace / "pid").exists, "the command never started")
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert out == "interrupted\n"
    pid = shell(sandbox, "cat pid").strip()
    assert sandbox.execute(f"kill -0 {pid}").exit_code != 0
    assert sandbox.execute("ls late").exit_code != 0


def test_a_sandbox_made_without_a_provider_ends_its_jail_when_collected(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(workspace, 0o777)
    sandbox = BwrapSandbox(workspace, tmp_dir=workspace)
    shell(sandbox, "setsid sleep 600 >/dev/null 2>&1 &")
    jail_dir = sandbox.jail.directory
    namespace = namespace_of(int((jail_dir / "pid").read_text().split()[0]))
    jailed = starts(processes_in(namespace))
    assert len(jailed) >= 2  # the jail's server (its PID 1), the sleep
    del sandbox
    gc.collect()
    assert not jail_dir.exists()
    # its PID 1 is gone; the kernel may still be tearing down the rest of its namespace
    eventually(lambda: still_running(jailed) == [], "the collected sandbox's jail still runs")


def test_an_idle_empty_jail_ends_and_the_next_command_starts_another(
    provider: BwrapProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_jail, "IDLE_EXIT_SECONDS", 1.0)
    empty, busy = provider.create(), provider.create()
    shell(busy, "setsid sleep 600 >/dev/null 2>&1 &")
    first = jail_pid(provider, empty)
    empty_namespace, busy_namespace = namespace_of(first), namespace_of(jail_pid(provider, busy))
    empty_jail = starts(processes_in(empty_namespace))
    eventually(lambda: still_running(empty_jail) == [], "the idle jail still runs")
    assert len(commands_in(busy_namespace)) == 1  # kept: a process runs in it
    assert shell(empty, "echo again") == "again\n"
    assert jail_pid(provider, empty) != first


def test_a_connection_broken_before_the_start_is_sent_again(tmp_path: Path) -> None:
    """A jail that breaks the connection before it says it started the command (it
    ended meanwhile): the client sends it again, and it runs once."""
    directory = tmp_path / "jail"
    directory.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(directory / _jail.SOCKET_FILE))
    listener.listen(8)
    commands: list[str] = []

    def serve() -> None:
        for number in range(_jail.SEND_ATTEMPTS):
            conn, _ = listener.accept()
            with conn:
                if number < _jail.SEND_ATTEMPTS - 1:
                    continue  # closed before the request is read
                (length,) = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))
                commands.append(json.loads(conn.recv(length, socket.MSG_WAITALL))["command"])
                for kind, payload in (
                    (b"s", b""),
                    (b"o", b"ran\n"),
                    (b"x", b'{"exit_code": 0, "timed_out": false, "truncated": false}'),
                ):
                    conn.sendall(struct.pack(">cI", kind, len(payload)) + payload)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client = _jail.JailClient(None, None, directory, _jail.Expiry())  # type: ignore[arg-type]  # never starts a jail here
    response = client.run("echo ran", (), env={}, timeout=PATIENCE, max_output_bytes=1024)
    server.join(PATIENCE)
    listener.close()
    assert (response.output, response.exit_code) == ("ran\n", 0)
    assert commands == ["echo ran"]


def test_a_request_answered_before_its_send_returns_is_sent_once() -> None:
    """Under load the jail's server may read a request, run the command, answer and
    hang up before the client's ``sendmsg`` returns. The client then sent the empty
    rest of it, which fails with ``EPIPE`` once the peer has hung up: taken for a
    connection broken before the start, the command was sent, and run, again (the
    "refusals" of a live jail: up to one sandbox in 12 at 6-12 processes x 8 threads)."""
    client_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    class AnsweredAtOnce(socket.socket):
        def sendmsg(self, *args: Any) -> int:
            sent = super().sendmsg(*args)
            with server_end:  # the whole exchange, before the client's send returns
                assert server_end.recv(100) == b"request"
                server_end.sendall(b"reply")
            return sent

    with AnsweredAtOnce(fileno=client_end.detach()) as conn:
        _jail._send_request(conn, b"request", ())
        assert conn.recv(100) == b"reply"
