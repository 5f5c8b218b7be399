"""``E2BSandbox``: the conformance kit (on sandboxes made with the sync ``Sandbox``
and with the native ``AsyncSandbox``, each then reaching the other flavour),
execute details and error mapping, through the real SDK and the fake service."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from e2b import AsyncSandbox, CommandExitException, Sandbox
from e2b import exceptions as e2b_errors

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.provider_kit import transfer_error
from sandbox_sdk.providers.e2b import E2BProvider, E2BSandbox
from sandbox_sdk.providers.e2b._errors import typed_error
from sandbox_sdk.providers.e2b.sandbox import _CommandRun
from sandbox_sdk.testing import provided_sandbox
from tests.providers.cloud_fake import CloudFakeConformance
from tests.providers.e2b.conftest import API_KEY, home_of, make_provider
from tests.providers.e2b.fake_server import EndForm, FakeE2BServer


class TestE2BSandbox(CloudFakeConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, fake_e2b: FakeE2BServer) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(make_provider(fake_e2b), "conformance")


@pytest.mark.slow
class TestE2BSandboxFromAsyncSandbox(CloudFakeConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, fake_e2b: FakeE2BServer) -> Iterator[E2BSandbox]:
        native = asyncio.run(
            AsyncSandbox.create(timeout=600, api_key=API_KEY, api_url=fake_e2b.url, sandbox_url=fake_e2b.url)
        )
        yield E2BSandbox(native)
        make_provider(fake_e2b).delete(sandbox_id=native.sandbox_id)


# -- execute ---------------------------------------------------------------------------------


def test_stdout_and_stderr_keep_their_order(e2b_sandbox: E2BSandbox) -> None:
    response = e2b_sandbox.execute("echo one; echo two >&2; echo three; echo four >&2")
    assert response.output == "one\ntwo\nthree\nfour\n"
    assert response.exit_code == 0


def test_commands_get_envd_environment_and_home(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    response = e2b_sandbox.execute('printf "%s|%s|%s" "$HOME" "$PWD" "$USER"')
    home = str(home_of(fake_e2b, e2b_sandbox))
    assert response.output == f"{home}|{home}|user"


def test_create_envs_reach_commands(provider: E2BProvider) -> None:
    sandbox = provider.create(envs={"GREETING": "hello from create"})
    try:
        assert sandbox.execute('echo "$GREETING"').output == "hello from create\n"
    finally:
        provider.delete(sandbox_id=sandbox.id)


def test_default_timeout_applies(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    short = E2BSandbox(e2b_sandbox.sdk_sandbox, timeout=0.5)
    response = short.execute("echo started; sleep 5")
    assert response.timed_out
    assert response.exit_code == 124
    deadline = time.monotonic() + 5
    while fake_e2b.sandbox(e2b_sandbox.id).processes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not fake_e2b.sandbox(e2b_sandbox.id).processes, "envd should have killed the command"


async def test_async_timeout_and_exit_codes(e2b_sandbox: E2BSandbox) -> None:
    response = await e2b_sandbox.aexecute("sleep 5", timeout=0.5)
    assert response.timed_out
    failed = await e2b_sandbox.aexecute("echo partial; exit 9")
    assert (failed.output, failed.exit_code, failed.timed_out) == ("partial\n", 9, False)


@pytest.mark.parametrize("timeout", [-1, True, "5"])  # 0 is the default: the kit checks it
def test_bad_timeouts_are_refused(e2b_sandbox: E2BSandbox, timeout: object) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        e2b_sandbox.execute("true", timeout=timeout)  # type: ignore[arg-type]


def test_output_cap_cuts_and_flags(e2b_sandbox: E2BSandbox) -> None:
    capped = E2BSandbox(e2b_sandbox.sdk_sandbox, max_output_bytes=10_000)
    response = capped.execute("head -c 50000 /dev/zero | tr '\\0' z; echo; echo tail")
    assert response.truncated
    assert response.output == "z" * 10_000


def test_end_event_that_beats_the_client_deadline_counts_as_timeout() -> None:
    """envd kills at the deadline and its end event (exit -1) can arrive before
    the SDK's own deadline fires; past the deadline that is a timeout too."""
    run = _CommandRun("sleep 9", 0.01, 1000)
    time.sleep(0.02)
    killed = CommandExitException(stdout="", stderr="", exit_code=-1, error="signal: killed")
    response = run.failed(killed)
    assert (response.timed_out, response.exit_code) == (True, 124)


@pytest.fixture(params=["live", "readopted", "unnamed"])
def end_form(request: pytest.FixtureRequest, fake_e2b: FakeE2BServer) -> Iterator[EndForm]:
    """The fake ending commands with each form of envd's end event (see ``_end_event``)."""
    fake_e2b.end_form = request.param
    yield request.param
    fake_e2b.end_form = "live"


@pytest.mark.parametrize(
    ("command", "signal_code"), [("exit 3", 3), ("kill -TERM $$", 143), ("kill -KILL $$", 137)]
)
async def test_a_signal_death_is_128_plus_n_on_execute_and_on_a_followed_run(
    end_form: EndForm, e2b_sandbox: E2BSandbox, command: str, signal_code: int
) -> None:
    """A command that dies of a signal ends with 128 + N, never an error, in
    each form envd reports it, through ``execute`` and a followed ``run``,
    sync and async; only a death no envd names (``unnamed``) reads as SIGKILL's."""
    code = 137 if end_form == "unnamed" and signal_code > 128 else signal_code
    for response in (e2b_sandbox.execute(f"echo before; {command}"), await e2b_sandbox.aexecute(command)):
        assert (response.exit_code, response.timed_out) == (code, False)
    assert e2b_sandbox.execute(f"echo before; {command}").output == "before\n"
    seen: list[str] = []
    followed = (
        e2b_sandbox.run(f"echo before; {command}", on_stdout=seen.append),
        await e2b_sandbox.arun(f"echo before; {command}", on_stdout=seen.append),
    )
    for result in followed:
        assert (result.exit_code, result.timed_out, result.stdout) == (code, False, "before\n")
    assert seen == ["before\n", "before\n"]
    # run without callbacks reads the status in the sandbox: exact in every form
    assert e2b_sandbox.run(command).exit_code == signal_code
    events = [(event.kind, event.exit_code) for event in e2b_sandbox.stream(command)]
    assert events == [("exit", code)]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ("signal: killed", 137),
        ("signal: segmentation fault (core dumped)", 139),
        ("signal: CPU time limit exceeded", 152),
        ("signal: signal 34", 162),
        ("error waiting for process '/bin/bash -l -c kill $$': signal: terminated", 143),
        (None, 137),
        ("", 137),
    ],
)
def test_go_signal_texts_read_as_128_plus_n(error: str | None, code: int) -> None:
    run = _CommandRun("true", 30, 1000)
    killed = CommandExitException(stdout="", stderr="", exit_code=-1, error=error)
    assert run.failed(killed).exit_code == code


@pytest.mark.parametrize("error", ["something else", "signal: no such signal", "exit status 2: signal: x"])
def test_unreadable_end_status_is_an_error_not_a_negative_code(error: str) -> None:
    run = _CommandRun("true", 30, 1000)
    odd = CommandExitException(stdout="", stderr="", exit_code=-1, error=error)
    with pytest.raises(errors.SandboxRuntimeError, match="without an exit status"):
        run.failed(odd)


@pytest.fixture
def leading_fake(fake_e2b: FakeE2BServer) -> Iterator[FakeE2BServer]:
    """The fake starting each command as the leader of its own process group, as envd does not."""
    fake_e2b.commands_lead_group = True
    yield fake_e2b
    fake_e2b.commands_lead_group = False


def test_exit_codes_and_group_kill_when_the_shell_leads_its_group(
    leading_fake: FakeE2BServer, e2b_sandbox: E2BSandbox
) -> None:
    """setsid forks when its caller leads a group; the prefix then runs the command
    as it is, so exit codes come through and the timeout's group kill reaches all."""
    assert e2b_sandbox.execute("echo out; exit 3").exit_code == 3
    assert e2b_sandbox.execute("echo out; exit 3").output == "out\n"
    assert e2b_sandbox.execute("kill -TERM $$").exit_code == 143
    response = e2b_sandbox.execute("(sleep 2; touch survivor) & sleep 30", timeout=0.5)
    assert response.timed_out
    time.sleep(2.5)
    assert not (home_of(leading_fake, e2b_sandbox) / "survivor").exists()


def test_timeout_kills_what_the_command_started(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    response = e2b_sandbox.execute("(sleep 2; touch survivor) & sleep 30", timeout=0.5)
    assert (response.timed_out, response.exit_code) == (True, 124)
    time.sleep(2.5)
    assert not (home_of(fake_e2b, e2b_sandbox) / "survivor").exists()


def test_killed_sandbox_raises_not_found(provider: E2BProvider) -> None:
    sandbox = provider.create()
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.ls(".")
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.download_files(["a.txt", "b.txt"])
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.upload_files([("a.txt", b"a"), ("b.txt", b"b")])


async def test_killed_sandbox_raises_not_found_async(provider: E2BProvider) -> None:
    sandbox = await provider.acreate()
    await provider.adelete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.aexecute("true")
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.als(".")
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.adownload_files(["a.txt", "b.txt"])
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.aupload_files([("a.txt", b"a"), ("b.txt", b"b")])


def test_only_sdk_sandboxes_are_wrapped() -> None:
    with pytest.raises(errors.InvalidArgumentError):
        E2BSandbox("i123")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (e2b_errors.AuthenticationException("401: Unauthorized"), errors.AuthenticationError),
        (e2b_errors.RateLimitException("429: Rate limit exceeded"), errors.RateLimitedError),  # type: ignore[no-untyped-call]
        (e2b_errors.ServiceBusyException("503: busy"), errors.ProviderUnavailableError),
        (e2b_errors.SandboxNotFoundException("Sandbox x not found"), errors.SandboxNotFoundError),
        (e2b_errors.SandboxNotRunningException("was not found"), errors.SandboxNotFoundError),
        (e2b_errors.SandboxUnreachableException("port is not open"), errors.ProviderUnavailableError),
        (e2b_errors.TimeoutException("deadline exceeded"), errors.SandboxTimeoutError),
        (e2b_errors.FileNotFoundException("path '/a' does not exist"), errors.SandboxFileNotFoundError),
        (e2b_errors.InvalidArgumentException("path '/a' is a directory"), errors.SandboxIsADirectoryError),
        (e2b_errors.SandboxException("500: open /a: permission denied"), errors.SandboxPermissionError),
        (e2b_errors.SandboxException("500: mkdir /a/b: not a directory"), errors.SandboxNotADirectoryError),
        (
            e2b_errors.SandboxException("500: error ensuring directories: path is a file: /a"),
            errors.SandboxNotADirectoryError,
        ),
        (e2b_errors.InvalidArgumentException("bad cwd"), errors.InvalidArgumentError),
        (e2b_errors.NotEnoughSpaceException("507: no space"), errors.SandboxRuntimeError),
        (ConnectionRefusedError("refused"), errors.ProviderUnavailableError),
    ],
)
def test_sdk_errors_map_to_typed_errors(raised: Exception, expected: type[errors.SandboxError]) -> None:
    mapped = typed_error(raised, "doing it")
    assert type(mapped) is expected
    assert str(raised) in str(mapped)


def test_transfer_codes_from_envd_messages() -> None:
    envd_message = "500: error opening file: open /a: permission denied"
    denied = typed_error(e2b_errors.SandboxException(envd_message), "x")
    assert transfer_error(denied) == "permission_denied"
    assert transfer_error(typed_error(e2b_errors.FileNotFoundException("nope"), "x")) == "file_not_found"


async def test_sandbox_from_async_sdk_object_works_both_ways(fake_e2b: FakeE2BServer) -> None:
    native = await AsyncSandbox.create(
        timeout=60, api_key=API_KEY, api_url=fake_e2b.url, sandbox_url=fake_e2b.url
    )
    sandbox = E2BSandbox(native)
    try:
        assert (await sandbox.aexecute("echo async")).output == "async\n"
        assert sandbox.execute("echo sync").output == "sync\n"
        assert isinstance(sandbox.sdk_sandbox, Sandbox)
        assert sandbox.sdk_async_sandbox is native
    finally:
        await native.kill()
