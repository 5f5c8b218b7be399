"""Escape attempts against the bubblewrap sandbox: each is a real attack that
must fail. Where it helps to show the attack itself works, the same attempt
is first made with the unisolated local sandbox (or with the network on) and
must succeed there."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox, ResourceLimits
from sandbox_sdk.providers.local import LocalSandbox
from tests.providers.bwrap.test_jail import commands_in, eventually, processes_in

MiB = 1024 * 1024


@pytest.fixture
def sandbox(provider: BwrapProvider) -> BwrapSandbox:
    return provider.create()


@pytest.fixture
def host_secret() -> Iterator[Path]:
    """A file in the real home directory of the user running the tests."""
    path = Path.home() / f".sandbox-sdk-escape-test-{secrets.token_hex(6)}"
    path.write_text("host-secret-in-home\n")
    path.chmod(0o644)
    yield path
    path.unlink()


def pid_namespaces() -> dict[str, int]:
    """How many live processes each PID namespace on the host has (where
    readable). Zombies are left out: they run nothing, and an orphaned one
    waits for the host's init to reap it."""
    sizes: dict[str, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                namespace = os.readlink(f"/proc/{name}/ns/pid")
                with open(f"/proc/{name}/stat") as stat:
                    state = stat.read().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue  # exited meanwhile, or not ours to inspect
            if state != "Z":
                sizes[namespace] = sizes.get(namespace, 0) + 1
    return sizes


def test_host_home_is_invisible(sandbox: BwrapSandbox, local: LocalSandbox, host_secret: Path) -> None:
    assert "host-secret-in-home" in local.execute(f"cat {host_secret}").output
    for attack in (f"cat {host_secret}", f"cat ~/{host_secret.name}", "cat /root/.bashrc", "ls /home"):
        response = sandbox.execute(attack)
        assert response.exit_code != 0, attack
        assert "host-secret-in-home" not in response.output
    assert host_secret.name not in sandbox.execute(f"ls -a {host_secret.parent} ~ /").output
    with pytest.raises(FileNotFoundError):
        sandbox.read(str(host_secret))


def test_other_sandboxes_and_the_state_dir_are_invisible(provider: BwrapProvider) -> None:
    victim = provider.create()
    victim.write("secret.txt", "victim-secret\n")
    attacker = provider.create()
    victim_dir = provider.store.sandboxes_dir / victim.id
    for attack in (
        f"cat {victim_dir}/workspace/secret.txt",
        f"cat /workspace/../{victim.id}/workspace/secret.txt",
        f"ls {provider.store.state_dir}",
        "grep -rs victim-secret / --exclude-dir=proc --exclude-dir=usr",
    ):
        response = attacker.execute(attack)
        assert response.exit_code != 0, attack
        assert "victim-secret" not in response.output
    assert victim.id not in attacker.execute("ls -a /workspace/.. / /tmp").output


def test_writes_outside_the_workspace_do_not_reach_the_host(sandbox: BwrapSandbox, tmp_path: Path) -> None:
    marker = f"escape-{secrets.token_hex(6)}"
    for target in ("/usr", "/etc", "/", "/proc", "/workspace/..", str(tmp_path)):
        response = sandbox.execute(f"echo pwned > {target}/{marker}")
        assert response.exit_code != 0, target
        assert not os.path.exists(f"{target}/{marker}"), target
    # /tmp is writable, but it is the sandbox's own, not the host's
    assert sandbox.execute(f"echo private > /tmp/{marker}").exit_code == 0
    assert not os.path.exists(f"/tmp/{marker}")
    assert sandbox.execute(f"cat /tmp/{marker}").output == "private\n"
    with pytest.raises(errors.SandboxError):
        sandbox.write(f"/usr/{marker}", "pwned")


def test_host_processes_are_invisible_and_unreachable(sandbox: BwrapSandbox) -> None:
    tag = f"host-process-{secrets.token_hex(6)}"
    host = subprocess.Popen(["bash", "-c", f"exec -a {tag} sleep 60"])
    try:
        response = sandbox.execute(
            f"ps -eo pid,args; cat /proc/[0-9]*/cmdline | tr '\\0' ' '; kill -9 {host.pid}"
        )
        assert tag not in response.output
        pids = sandbox.execute("ls -d /proc/[0-9]*").output.split()
        assert len(pids) < 10, pids
        assert f"/proc/{os.getpid()}" not in pids
        assert host.poll() is None  # the kill did not reach it
    finally:
        host.kill()
        host.wait()


def test_host_loopback_tcp_server_is_unreachable(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"host-loopback-secret")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    connect = f"s = socket.create_connection(('127.0.0.1', {port}), timeout=5); print(s.recv(100).decode())"
    client = f'python3 -c "import socket; {connect}"'
    curl_like = f"exec 3<>/dev/tcp/127.0.0.1/{port} && cat <&3"
    for attack in (client, curl_like):
        response = sandbox.execute(attack, timeout=20)
        assert response.exit_code != 0
        assert "host-loopback-secret" not in response.output
    # the same client with the network explicitly enabled does reach it
    networked = provider.create(network=True)
    assert "host-loopback-secret" in networked.execute(client, timeout=20).output
    stop.set()
    thread.join()
    server.close()


def test_nothing_a_command_left_outlives_its_sandbox(provider: BwrapProvider, sandbox: BwrapSandbox) -> None:
    """A command's own process group ends with it (at its timeout too); what
    left the group (a ``setsid`` daemon) lives in the jail until the sandbox
    is deleted, and no further."""
    tag = f"survivor-{secrets.token_hex(6)}"
    job = f"(bash -c 'exec -a {tag}-job sleep 3'; echo alive > job) & sleep 60"
    response = sandbox.execute(job, timeout=1)
    assert response.timed_out and response.exit_code == 124
    response = sandbox.execute(f"(setsid bash -c 'exec -a {tag} sleep 600' >/dev/null 2>&1 &); true")
    assert response.exit_code == 0
    # the job died with its command, before it could write (one signal killed its whole group)
    eventually(lambda: f"{tag}-job" not in sandbox.execute("ps -eo args").output, "the job still runs")
    assert sandbox.execute("ls").output == ""
    assert tag in sandbox.execute("ps -eo args").output  # the daemon did not
    provider.delete(sandbox_id=sandbox.id)
    host = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True, check=False)
    assert host.stdout == ""


def jail_namespace(provider: BwrapProvider, sandbox: BwrapSandbox) -> str:
    """The PID namespace of the sandbox's jail (its PID 1's, as recorded)."""
    pid = (provider.store.sandboxes_dir / sandbox.id / "jail" / "pid").read_text().split()[0]
    return os.readlink(f"/proc/{pid}/ns/pid")


def test_fork_bomb_is_contained(provider: BwrapProvider) -> None:
    sandbox = provider.create(limits=ResourceLimits(processes=64, timeout=5))
    jail = jail_namespace(provider, sandbox)  # counted alone: other tests' jails may run meanwhile
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, pid_namespaces().get(jail, 0))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        response = sandbox.execute("bomb() { bomb | bomb & }; bomb; sleep 60")
    finally:
        done.set()
        watcher.join()
    assert response.timed_out
    # the bomb never passed the limit (which also counts the server's threads)
    assert 32 < peak <= 64
    # nothing of it is left: the jail's machinery alone (its server, and the
    # operation server with its spares, which outlived a limit they hit too)
    eventually(lambda: commands_in(jail) == [], "the bomb left processes")
    assert sandbox.execute("echo still usable").output == "still usable\n"
    sandbox.write("after-the-bomb.txt", "served\n")
    assert sandbox.read("after-the-bomb.txt").content == "served\n"
    eventually(lambda: len(processes_in(jail)) == 4, "the operation server or its spares are gone")


def test_memory_hog_is_stopped(provider: BwrapProvider) -> None:
    sandbox = provider.create(limits=ResourceLimits(memory_bytes=256 * MiB))
    assert sandbox.execute("python3 -c 'b = bytearray(32 * 1024 * 1024); print(len(b))'").exit_code == 0
    response = sandbox.execute("python3 -c 'b = bytearray(1024 ** 3); print(\"allocated\")'")
    assert response.exit_code != 0
    assert "MemoryError" in response.output
    assert "allocated" not in response.output


def test_file_size_bomb_is_stopped(provider: BwrapProvider) -> None:
    sandbox = provider.create(limits=ResourceLimits(file_size_bytes=MiB))
    response = sandbox.execute("head -c 50M /dev/zero > big; echo exit=$?")
    assert "exit=0" not in response.output
    big = Path(sandbox.workspace, "big")
    assert big.stat().st_size <= MiB
    response = sandbox.execute("python3 -c \"open('big2', 'wb').write(b'x' * (5 * 1024 * 1024))\"")
    assert response.exit_code != 0
    assert Path(sandbox.workspace, "big2").stat().st_size <= MiB


def test_symlinks_to_host_paths_resolve_inside_the_jail(
    provider: BwrapProvider, sandbox: BwrapSandbox, host_secret: Path, tmp_path: Path
) -> None:
    victim = provider.create()
    victim.write("secret.txt", "victim-secret\n")
    victim_file = provider.store.sandboxes_dir / victim.id / "workspace" / "secret.txt"
    outside = tmp_path / "outside"
    outside.mkdir()
    # planted by the sandboxed code itself, and planted from the host side
    assert sandbox.execute(f"ln -s {host_secret} home-link && ln -s {outside} dir-link").exit_code == 0
    os.symlink(victim_file, sandbox.workspace / "victim-link")
    os.symlink("/etc/shadow", sandbox.workspace / "shadow-link")
    for link in ("home-link", "victim-link", "shadow-link"):
        response = sandbox.execute(f"cat {link}")
        assert response.exit_code != 0, link
        assert "secret" not in response.output
        with pytest.raises(FileNotFoundError):
            sandbox.read(link)
        assert sandbox.download_files([link])[0].content is None
    response = sandbox.execute("echo pwned > dir-link/planted")
    assert response.exit_code != 0
    assert not (outside / "planted").exists()
    sandbox.write("dir-link2", "plain file")  # not following anything: a new regular file
    assert list(outside.iterdir()) == []


def test_host_environment_is_not_inherited(sandbox: BwrapSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_ESCAPE_TOKEN", "host-env-secret")
    output = sandbox.execute("env").output
    assert "host-env-secret" not in output
    assert "HOME=/workspace" in output


def test_limits_cannot_be_raised_from_inside(provider: BwrapProvider) -> None:
    sandbox = provider.create(limits=ResourceLimits(processes=64, file_size_bytes=MiB))
    response = sandbox.execute("ulimit -u 100000 || ulimit -f unlimited || prlimit --nproc=100000 --pid $$")
    assert response.exit_code != 0
    assert sandbox.execute("ulimit -u; ulimit -f").output.split() == ["64", "1024"]  # KiB blocks


def test_nested_user_namespaces_do_not_multiply_the_process_limit(provider: BwrapProvider) -> None:
    sandbox = provider.create(limits=ResourceLimits(processes=20, timeout=20))
    response = sandbox.execute(
        "for j in 1 2 3; do unshare --user bash -c 'for i in $(seq 15); do sleep 2 & done; wait' & done; "
        "sleep 1; echo count=$(ls -d /proc/[0-9]* | wc -l)"
    )
    count = int(response.output.rpartition("count=")[2])
    assert count <= 20 + 1  # the limit, plus the ls
