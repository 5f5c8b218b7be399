"""The jail's seccomp filter: what it denies answers EPERM inside (new
namespaces, mounts, keyrings, bpf, ...), foreign system call ABIs kill, and
what ordinary programs need still works."""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox, ResourceLimits, _jail
from sandbox_sdk.providers.bwrap._jail import Expiry, JailClient, stop_jail
from sandbox_sdk.providers.bwrap._seccomp import DENIED_SYSCALLS, denied_numbers, deny_filter, syscall_number
from sandbox_sdk.providers.bwrap.sandbox import BASE_ENV, Jail, JailSettings

CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
AF_ALG, AF_VSOCK, SOCK_STREAM, SOCK_SEQPACKET = 38, 40, 1, 5
SIGSYS_EXIT = 128 + 31
#: Calls each system call by number inside the jail and prints the errno
#: each one failed with (0: it succeeded).
PROBE = textwrap.dedent("""
    import ctypes, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    answers = {}
    for name, (number, *args) in json.loads(sys.argv[1]).items():
        ctypes.set_errno(0)
        result = libc.syscall(number, *(ctypes.c_long(arg) for arg in args))
        if result == 0 and name.startswith("clone"):
            os._exit(0)  # a child that clone made: not ours to report
        answers[name] = 0 if result >= 0 else ctypes.get_errno()
    print(json.dumps(answers))
""")


@pytest.fixture
def jails(tmp_path: Path) -> BwrapProvider:
    return BwrapProvider(tmp_path / "state")


@pytest.fixture
def sandbox(jails: BwrapProvider) -> BwrapSandbox:
    return jails.create()


def probe(sandbox: BwrapSandbox, calls: dict[str, list[int]]) -> dict[str, int]:
    response = sandbox.execute(shlex.join(["python3", "-c", PROBE, json.dumps(calls)]))
    assert response.exit_code == 0, response.output
    answers: dict[str, int] = json.loads(response.output)
    return answers


def test_the_filter_is_built_for_this_machine() -> None:
    program = deny_filter()
    assert program and len(program) % 8 == 0  # whole BPF instructions
    listed = {name for names in DENIED_SYSCALLS.values() for name in names}
    must = {"add_key", "keyctl", "request_key", "unshare", "setns", "mount", "umount2", "pivot_root", "bpf"}
    must |= {
        "perf_event_open",
        "userfaultfd",
        "kexec_load",
        "init_module",
        "finit_module",
        "open_by_handle_at",
    }
    assert must <= set(denied_numbers()) <= listed  # none unknown to this libseccomp


def test_every_denied_call_answers_eperm(sandbox: BwrapSandbox) -> None:
    answers = probe(sandbox, {name: [number] for name, number in denied_numbers().items()})
    assert answers == dict.fromkeys(denied_numbers(), 1)


def test_new_namespaces_and_hypervisor_sockets_are_refused_by_argument(sandbox: BwrapSandbox) -> None:
    socket = syscall_number("socket")
    answers = probe(
        sandbox,
        {
            "clone-newuser": [syscall_number("clone"), CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0],
            "clone3": [syscall_number("clone3"), 0, 0],
            "vsock": [socket, AF_VSOCK, SOCK_STREAM, 0],
            "vsock-upper-half-set": [socket, (1 << 32) | AF_VSOCK, SOCK_STREAM, 0],
            "alg": [socket, AF_ALG, SOCK_SEQPACKET, 0],
            "unix": [socket, 1, SOCK_STREAM, 0],  # AF_UNIX: a descriptor
        },
    )
    assert answers == {
        "clone-newuser": 1,
        "clone3": 38,  # ENOSYS: libc falls back to clone, as under Docker
        "vsock": 1,
        "vsock-upper-half-set": 1,
        "alg": 1,
        "unix": 0,
    }


def test_nested_namespaces_and_mounts_fail_with_eperm(sandbox: BwrapSandbox) -> None:
    for attempt in (
        "unshare -U true",
        "unshare -Urm sh -c 'mount -t tmpfs none /tmp && echo mounted'",
        "unshare -n true",
        "python3 -c 'import ctypes, os; os.sys.exit(ctypes.CDLL(None).unshare(0x10000000))'",
    ):
        response = sandbox.execute(attempt)
        assert response.exit_code != 0, attempt
        assert "mounted" not in response.output
        if attempt.startswith("unshare"):
            assert "Operation not permitted" in response.output, attempt
    nested = sandbox.execute("bwrap --dev-bind / / true")
    assert nested.exit_code != 0
    assert "No permissions to create new namespace" in nested.output  # bwrap's words for EPERM
    mount = sandbox.execute("mkdir -p m && mount -t tmpfs none m")
    assert mount.exit_code != 0


@pytest.mark.skipif(os.geteuid() != 0, reason="as an ordinary user, every jail here is made this way")
def test_an_unprivileged_jail_gets_the_filter_from_bwrap(tmp_path: Path) -> None:
    """As root the filter is loaded after the jail's own ``unshare``; the
    path an ordinary user takes (bwrap --seccomp, for the jail's server,
    its PID 1) is checked here by building that jail as root."""
    jail = Jail()
    jail.as_root = False
    os.chmod(tmp_path, 0o777)
    settings = JailSettings(tmp_path, tmp_path, ResourceLimits(), network=False)
    client = JailClient(jail, settings, tmp_path / "jail", Expiry())
    command = "unshare -U true; grep -h '^Seccomp:' /proc/self/status /proc/1/status"
    try:
        result = client.run(command, (), env=BASE_ENV, timeout=60, max_output_bytes=1 << 20)
    finally:
        stop_jail(client.directory)
    assert "unshare failed: Operation not permitted" in result.output
    assert result.output.count("Seccomp:\t2\n") == 2  # filtered, the command and the server alike


@pytest.mark.skipif(platform.machine() != "x86_64", reason="an x32 call can only be made on x86_64")
def test_a_foreign_abi_call_kills_the_process(sandbox: BwrapSandbox) -> None:
    x32_getpid = 0x40000000 | 39
    response = sandbox.execute(f"python3 -c 'import ctypes; ctypes.CDLL(None).syscall({x32_getpid})'")
    assert response.exit_code == SIGSYS_EXIT, response.output


def test_a_process_may_trace_its_own_children(sandbox: BwrapSandbox) -> None:
    """ptrace stays allowed (debuggers need it); the PID namespace keeps it
    to the jail's own processes."""
    trace = textwrap.dedent("""
        import ctypes, os, signal, time
        libc = ctypes.CDLL(None, use_errno=True)
        child = os.fork()
        if child == 0:
            time.sleep(30)
            os._exit(0)
        attached = libc.ptrace(16, child, 0, 0)  # PTRACE_ATTACH
        os.waitpid(child, 0)
        print(attached, libc.ptrace(17, child, 0, 0))  # PTRACE_DETACH
        os.kill(child, signal.SIGKILL)
    """)
    assert sandbox.execute(shlex.join(["python3", "-c", trace])).output == "0 0\n"


def test_concurrent_jails_each_get_their_whole_process_limit(jails: BwrapProvider) -> None:
    """New user namespaces are refused, so the limit is set inside the jail's
    own namespace and counted there only, also as root: jails running at
    once do not share one budget. (Under ``MIN_PROCESSES_FOR_SERVER`` a jail
    keeps no operation server, whose processes would count too.)"""
    assert _jail.MIN_PROCESSES_FOR_SERVER > 40
    sandboxes = [jails.create(limits=ResourceLimits(processes=40)) for _ in range(2)]
    start = "for i in $(seq 30); do sleep 3 & done; sleep 1; echo started=$(jobs -p | wc -l); wait"
    with ThreadPoolExecutor(len(sandboxes)) as pool:
        outputs = list(pool.map(lambda sandbox: sandbox.execute(start).output, sandboxes))
    assert outputs == ["started=30\n"] * 2


@pytest.mark.slow
def test_ordinary_work_runs_under_the_filter(sandbox: BwrapSandbox, tmp_path: Path) -> None:
    """python (threads, processes), a venv with pip installing a wheel built
    here (no network), git, a C program with threads and fork, node."""
    wheel = shutil.copy(build_wheel(tmp_path), sandbox.workspace)
    python = """python3 -c '
import concurrent.futures as f, multiprocessing as m, subprocess, threading
t = threading.Thread(target=print, args=("thread",)); t.start(); t.join()
with f.ProcessPoolExecutor(2, mp_context=m.get_context("spawn")) as pool: print(sum(pool.map(abs, [-1, -2])))
print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())'"""
    pip = (
        "python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -q --no-index --disable-pip-version-check "
        f"{os.path.basename(wheel)} && /tmp/venv/bin/python -c 'import greeting; print(greeting.hello())'"
    )
    git = (
        "git init -q repo && cd repo && echo text > file && git add file && "
        "git -c user.name=n -c user.email=n@example.com commit -q -m first && git log --format=%s"
    )
    c_program = r"""#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
static void *work(void *arg) { return arg; }
int main(void) {
    pthread_t thread; void *out;
    pthread_create(&thread, NULL, work, "threaded"); pthread_join(thread, &out);
    pid_t pid = fork(); if (pid == 0) _exit(7);
    int status; waitpid(pid, &status, 0);
    printf("%s %d\n", (char *)out, WEXITSTATUS(status)); return 0; }
"""
    sandbox.write("main.c", c_program)
    work = {
        python: "thread\n3\nchild\n",
        pip: "hello from a wheel\n",
        git: "first\n",
        "gcc -O1 -pthread main.c -o main && ./main": "threaded 7\n",
    }
    if shutil.which("node"):
        node = "fs.promises.readFile('main.c').then(b => console.log(b.length > 0, os.cpus().length > 0))"
        work[f"node -e \"const fs = require('fs'), os = require('os'); {node}\""] = "true true\n"
    for command, expected in work.items():
        response = sandbox.execute(command, timeout=300)
        assert (response.exit_code, response.output) == (0, expected), command
    if not shutil.which("node"):
        pytest.skip("node is not installed here: the rest of the workload ran")


def build_wheel(tmp_path: Path) -> Path:
    """A wheel of a one-module package, built here with the test venv's pip."""
    source = tmp_path / "greeting-src"
    source.mkdir()
    (source / "greeting.py").write_text("def hello():\n    return 'hello from a wheel'\n")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "greeting"\nversion = "1.0"\n[tool.setuptools]\npy-modules = ["greeting"]\n'
    )
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, source],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    (wheel,) = dist.glob("greeting-1.0-*.whl")
    return wheel
