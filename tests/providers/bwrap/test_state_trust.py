"""What a command of a bubblewrap sandbox can do to the SDK's state in its
jail (docs/security.md): the scripts are the host's, read-only (the
conformance kit's ``test_a_providers_own_scripts_are_out_of_its_commands_reach``),
and the operation server is forked by the jail's PID 1 and reached over a
descriptor the jail server hands each file operation. A command can kill or
stop that server, never trace it, redirect a file operation to a listener of
its own, or change what it answers. Real jails, real processes."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest

from sandbox_sdk import protocol
from sandbox_sdk.providers.bwrap import BwrapProvider, BwrapSandbox

#: The jail's operation server and its workers: forks of PID 1, so processes
#: with its command line (read by any process of the jail) other than PID 1.
MACHINERY = (
    'for p in /proc/[0-9]*; do n=${p#/proc/}; [ "$n" != 1 ] && [ "$n" != $$ ]'
    " && cmp -s $p/cmdline /proc/1/cmdline && echo $n; done; true"
)


@pytest.fixture
def sandbox(provider: BwrapProvider) -> Iterator[BwrapSandbox]:
    sandbox: BwrapSandbox = provider.create()
    sandbox.write("victim.txt", "the real content\n")
    yield sandbox
    provider.delete(sandbox_id=sandbox.id)


def shell(sandbox: BwrapSandbox, command: str) -> str:
    response = sandbox.execute(command, timeout=30)
    assert response.exit_code == 0, response
    return response.output


def machinery(sandbox: BwrapSandbox) -> list[str]:
    return shell(sandbox, MACHINERY).split()


def test_file_operations_are_served_over_the_jails_channel(sandbox: BwrapSandbox) -> None:
    """A served command never reads a port file or opens a socket by name:
    its connection is descriptor ``CHANNEL_FD``, which the jail server gives
    only a command that asks for it."""
    assert len(machinery(sandbox)) == 3  # the server and its two spare workers
    assert shell(sandbox, f"[ -e /proc/self/fd/{protocol.CHANNEL_FD} ] || echo none") == "none\n"
    asked = shell(sandbox, f"{protocol.CHANNEL_REQUEST}\nreadlink /proc/self/fd/{protocol.CHANNEL_FD}")
    assert asked.startswith("socket:")
    assert sandbox.read("victim.txt").content == "the real content\n"


def test_no_command_can_trace_the_operation_server_or_open_its_descriptors(sandbox: BwrapSandbox) -> None:
    """The server and its workers are forks of the jail's undumpable PID 1:
    no process of the jail may attach to them, write their memory or open
    what they hold through ``/proc``, though all run as the same user."""
    attempts = (
        "import ctypes, os, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for pid in map(int, sys.argv[1:]):\n"
        "    print(libc.ptrace(16, pid, 0, 0), ctypes.get_errno() == 1, end=' ')\n"  # PTRACE_ATTACH: EPERM
        "    for path in ('/proc/%d/mem' % pid, '/proc/%d/environ' % pid):\n"
        "        try:\n"
        "            open(path, 'r+b' if path.endswith('mem') else 'rb').read(1)\n"
        "            print('opened', end=' ')\n"
        "        except PermissionError:\n"
        "            print('refused', end=' ')\n"
        "    try:\n"
        "        os.listdir('/proc/%d/fd' % pid)\n"
        "        print('listed')\n"
        "    except PermissionError:\n"
        "        print('refused')\n"
    )
    pids = machinery(sandbox)
    output = shell(sandbox, f"python3 -c {shlex.quote(attempts)} {' '.join(pids)}")
    assert output.splitlines() == ["-1 True refused refused refused"] * len(pids)


def test_a_planted_port_file_and_listener_are_never_asked(sandbox: BwrapSandbox) -> None:
    """What a command plants where the SDK would otherwise look for a server
    (a port file naming its own listener, which answers ``+`` to anything)
    is never read: the read's answer is the file's."""
    listener = (
        "import socket\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True)\n"
        "while True:\n"
        "    c, _ = s.accept(); open('/tmp/asked', 'a').write('asked\\n')\n"
        "    c.sendall(b'+\\n+\\n0\\n'); c.close()\n"
    )
    port_file = f"/tmp/.sbx-scripts-$(id -u)/{protocol.shipped('server').name}.port"
    shell(sandbox, f"setsid python3 -c {shlex.quote(listener)} > /tmp/port 2>/dev/null &")
    shell(sandbox, "while [ ! -s /tmp/port ]; do sleep 0.05; done")
    plant = f'mkdir -p -m 700 "$(dirname {port_file})" && echo "$(cat /tmp/port) token 1 proof" > {port_file}'
    shell(sandbox, plant)
    for _ in range(3):
        assert sandbox.read("victim.txt").content == "the real content\n"
    assert shell(sandbox, "cat /tmp/asked 2>/dev/null || echo never") == "never\n"


def test_a_killed_operation_server_leaves_file_operations_right(sandbox: BwrapSandbox) -> None:
    """Killed (it is not PID 1), the server is not replaced while the jail
    runs: each file operation finds no channel and runs ``python3``, with
    the same answers."""
    pids = machinery(sandbox)
    shell(sandbox, f"kill -9 {' '.join(pids)}")
    assert sandbox.read("victim.txt").content == "the real content\n"
    sandbox.write("after.txt", "written\n")
    assert sandbox.read("after.txt").content == "written\n"
    assert machinery(sandbox) == []


def test_a_stopped_operation_server_costs_one_handshake_then_is_not_asked(sandbox: BwrapSandbox) -> None:
    """Stopped, the server misses its handshake once: that operation runs
    ``python3`` and answers right, and the session asks that server no more
    (a later operation does not wait again)."""
    pids = machinery(sandbox)
    shell(sandbox, f"kill -STOP {' '.join(pids)}")
    assert sandbox.read("victim.txt").content == "the real content\n"
    assert sandbox._session().server_off
    assert sandbox.read("victim.txt").content == "the real content\n"
    shell(sandbox, f"kill -CONT {' '.join(pids)}")
