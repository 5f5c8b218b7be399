"""inspect_ai's own conformance suite, ``self_check``, against every provider.

Each check runs on a sandbox made by ``SandboxSDKEnvironment.sample_init`` and
deleted by ``sample_cleanup``, as in an eval. What the SDK cannot do yet is
declared per provider and check, with its reason and issue: a strict xfail, so
a check that starts passing once the SDK is fixed fails here until its
declaration goes. Checks that cannot apply to our providers are skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox import self_check
from inspect_ai.util._sandbox.self_check import *  # noqa: F403

from sandbox_sdk.integrations.inspect import SandboxSDKConfig, SandboxSDKEnvironment

PROVIDERS = ["local", "bwrap", "e2b", "daytona", "modal"]
CLOUD = {"e2b", "daytona", "modal"}

#: Gaps of every provider.
KNOWN_GAPS: dict[str, str] = {}
#: Gaps of some providers only.
PROVIDER_GAPS: dict[str, dict[str, str]] = {
    "bwrap": {
        "test_exec_permission_error": (
            "the check runs /etc/passwd, which the jail does not have (the host's users are not "
            "shown in it), so the error is FileNotFoundError; a file that is there but not "
            "executable raises PermissionError (the conformance kit's "
            "test_an_argument_vector_that_cannot_run_raises)"
        ),
    },
}
#: The local provider and the cloud fakes run commands as the user of this test
#: process; run by root, they may read and write any file.
HOST_USER = {"local", *CLOUD}
AS_ROOT = {
    name: f"the sandbox runs as root here, and root may {verb} a file without {verb} permission"
    for name, verb in [
        ("test_read_file_not_allowed", "read"),
        ("test_write_text_file_without_permissions", "write"),
        ("test_write_binary_file_without_permissions", "write"),
    ]
}
#: Checks that cannot apply to our providers, skipped rather than run.
NOT_APPLICABLE = {
    "test_exec_as_user": (
        "our sandboxes have one user: exec(user=...) takes only that user and raises "
        "SandboxUserUnsupportedError for any other (test_exec_as_nonexistent_user checks it); "
        "run through the local provider as root, the check would add a user to this machine"
    ),
}
#: Checks that move 50 MiB or wait out a timeout: ``-m "not slow"`` leaves them out.
SLOW = [
    "test_read_and_write_large_file_binary",
    "test_exec_input_large",
    "test_exec_timeout_kills_process",
    "test_exec_timeout_kills_child_processes",
]
for _name in SLOW:
    pytest.mark.slow(getattr(self_check, _name))


#: Held through each check on a provider whose commands run on this host: some checks
#: write fixed paths of the host's /tmp (``/tmp/test_rw_including_directory_absolute``,
#: ``/tmp/test_cwd_absolute``, ...), which checks running at the same time elsewhere (a
#: concurrent test run) would share. bwrap's jail has a /tmp of its own.
HOST_TMP_LOCK = Path(tempfile.gettempdir()) / "sandbox-sdk-inspect-self-check.lock"


@contextlib.contextmanager
def host_tmp_locked() -> Iterator[None]:
    """The host's fixed check paths to ourselves (released by the kernel if we die)."""
    with open(HOST_TMP_LOCK, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def gaps(provider: str) -> dict[str, str]:
    """The checks expected to fail on ``provider``, with their reasons."""
    declared = KNOWN_GAPS | PROVIDER_GAPS.get(provider, {})
    if provider in HOST_USER and os.geteuid() == 0:
        declared |= AS_ROOT
    return declared


@pytest.fixture(params=PROVIDERS)
async def sandbox_env(request: pytest.FixtureRequest) -> AsyncIterator[SandboxEnvironment]:
    check: str = request.node.originalname
    if check in NOT_APPLICABLE:
        pytest.skip(NOT_APPLICABLE[check])
    reason = gaps(request.param).get(check)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason, raises=AssertionError))
    config: SandboxSDKConfig = request.getfixturevalue(f"{request.param}_config")
    with host_tmp_locked() if request.param in HOST_USER else contextlib.nullcontext():
        environments = await SandboxSDKEnvironment.sample_init("self_check", config, {})
        try:
            yield environments["default"]
        finally:
            await SandboxSDKEnvironment.sample_cleanup("self_check", config, environments, False)
