"""Kernel keyrings: a jail holds none of the caller's keys and none of
another jail's. The caller's keys are planted in a subprocess that joins a
session keyring of its own, so the test runner's session is left alone."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox_sdk.providers.bwrap._keyring import in_new_session_keyring
from sandbox_sdk.providers.bwrap._seccomp import syscall_number

KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING = 0, -3
EPERM = 1
#: Inside a jail: look for key ``argv[3]`` in the session keyring
#: (KEYCTL_SEARCH) and read it (KEYCTL_READ), plant a key, and read
#: /proc/keys. Errnos come out as negative numbers.
JAIL = textwrap.dedent("""
    import ctypes, json, sys
    libc = ctypes.CDLL(None, use_errno=True)
    keyctl, add_key, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
    def call(*args):
        result = libc.syscall(*args)
        return result if result >= 0 else -ctypes.get_errno()
    found = call(keyctl, 10, -3, b"user", name, 0)
    buffer = ctypes.create_string_buffer(64)
    read = call(keyctl, 11, found, buffer, 64) if found > 0 else found
    planted = call(add_key, b"user", b"planted", b"jail-secret", 11, -3)
    print(json.dumps([found, read, buffer.value.decode(), planted, open("/proc/keys").read()]))
""")
#: The caller: joins a session keyring of its own (KEYCTL_JOIN_SESSION_KEYRING),
#: adds ``host-key`` to it, runs JAIL in one new jail per name in argv[2],
#: and reads its own key back. The jails are a provider's sandboxes, or (with
#: ``unprivileged``) the jail an ordinary user gets, built as root as in
#: test_seccomp: there the caller's keys are the jail user's own.
HOST = textwrap.dedent("""
    import ctypes, json, shlex, sys
    from pathlib import Path
    from sandbox_sdk.providers.bwrap import BwrapProvider, ResourceLimits
    from sandbox_sdk.providers.bwrap.sandbox import BASE_ENV, Jail, JailSettings
    from sandbox_sdk.providers.bwrap._jail import Expiry, JailClient, stop_jail
    from sandbox_sdk.providers.bwrap._seccomp import syscall_number
    state, names, jail_script, kind = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    libc = ctypes.CDLL(None, use_errno=True)
    keyctl, add_key = syscall_number("keyctl"), syscall_number("add_key")
    assert libc.syscall(keyctl, 1, None) > 0
    key = libc.syscall(add_key, b"user", b"host-key", b"host-secret", 11, -3)
    if kind == "unprivileged":
        jail = Jail()
        jail.as_root = False
        state.mkdir()
        settings = JailSettings(state, state, ResourceLimits(), network=False)
        def run(command, index):
            client = JailClient(jail, settings, state / f"jail-{index}", Expiry())
            try:
                return client.run(command, (), env=BASE_ENV, timeout=60, max_output_bytes=1 << 20).output
            finally:
                stop_jail(client.directory)
    else:
        provider = BwrapProvider(state)
        def run(command, index):
            sandbox = provider.create()
            try:
                return sandbox.execute(command).output
            finally:
                provider.delete(sandbox_id=sandbox.id)
    argv = ["python3", "-c", jail_script, str(keyctl), str(add_key)]
    outputs = [json.loads(run(shlex.join([*argv, name]), index)) for index, name in enumerate(names)]
    buffer = ctypes.create_string_buffer(64)
    libc.syscall(keyctl, 11, key, buffer, 64)
    print(json.dumps({"jails": outputs, "host": buffer.value.decode()}))
""")
JAIL_KINDS = [
    "provider",
    pytest.param(
        "unprivileged",
        marks=pytest.mark.skipif(os.geteuid() != 0, reason="the provider's jails are made this way here"),
    ),
]


def run_as_caller_with_a_key(state_dir: Path, names: list[str], kind: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", HOST, str(state_dir), json.dumps(names), JAIL, kind],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    outcome: dict[str, object] = json.loads(result.stdout)
    return outcome


@pytest.mark.parametrize("kind", JAIL_KINDS)
def test_the_callers_session_keyring_is_out_of_reach(tmp_path: Path, kind: str) -> None:
    outcome = run_as_caller_with_a_key(tmp_path / "state", ["host-key"], kind)
    # no search, no read, no planting, and /proc/keys shows nothing
    assert outcome["jails"] == [[-EPERM, -EPERM, "", -EPERM, ""]]
    assert outcome["host"] == "host-secret"  # the caller's own keyring is untouched


@pytest.mark.parametrize("kind", JAIL_KINDS)
def test_one_jail_plants_nothing_another_could_see(tmp_path: Path, kind: str) -> None:
    outcome = run_as_caller_with_a_key(tmp_path / "state", ["planted", "planted"], kind)
    assert outcome["jails"] == [[-EPERM, -EPERM, "", -EPERM, ""]] * 2


def test_the_jail_is_started_with_a_new_session_keyring_of_its_own() -> None:
    """The session keyring belongs to the starting thread: the caller's is
    unchanged, and a child started there inherits the new one."""
    libc = ctypes.CDLL(None, use_errno=True)
    keyctl = syscall_number("keyctl")

    def session_keyring() -> int:
        return int(libc.syscall(keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0))

    def child_session_keyring() -> int:
        probe = f"import ctypes; print(ctypes.CDLL(None).syscall({keyctl}, 0, -3, 0))"
        return int(subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True).stdout)

    before = session_keyring()
    inside, inherited = in_new_session_keyring(lambda: (session_keyring(), child_session_keyring()))
    assert inside == inherited != before
    assert session_keyring() == before
