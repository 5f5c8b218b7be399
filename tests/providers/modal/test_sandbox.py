"""``ModalSandbox`` on the fake backend, through the real modal SDK: the conformance
kit, run twice (as is, on the SDK's blocking API, and with every round trip forced
through the SDK's native ``.aio`` API: ``aexecute``, ``aupload_files``,
``adownload_files``, so the async code path meets the whole contract too), and the
execute specifics: timeouts, output, stdin, the argument cap, errors mid-command."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import partial

import anyio
import pytest
from grpclib import Status
from modal._utils.grpc_utils import GRPC_WINDOW_SIZE

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from sandbox_sdk.provider_kit import Progress, UploadSource
from sandbox_sdk.providers.modal import ModalProvider, ModalSandbox
from sandbox_sdk.testing import provided_sandbox
from sandbox_sdk.transfer import TransferResults
from tests.providers.cloud_fake import CloudFakeConformance
from tests.providers.modal.conftest import SeparateServer, make_provider
from tests.providers.modal.fake_server import FakeModalServer


@pytest.fixture(scope="module")
def separate_sandbox(separate_modal_server: SeparateServer) -> Iterator[BaseSandbox]:
    """A sandbox of the fake backend running in another process."""
    yield from provided_sandbox(make_provider(separate_modal_server), "memory")


class _ClientMemoryMeasuredApart(CloudFakeConformance):
    """``stream`` reads an exec's output natively, and Modal keeps what the client
    has not read yet ("By default, all streams are buffered in memory, waiting
    to be consumed by the client": https://modal.com/docs/guide/sandbox-spawn,
    Stream types), and so does the fake until a stream read to its end is freed.
    The kit's bounded-memory test traces this process's memory, so it runs on a
    fake in a process of its own: what it measures is the client alone. That
    holds ``STREAM_AHEAD`` pieces at most, and the SDK's gRPC connection as much
    as its HTTP/2 window lets in unread: 64 MiB a stream and a connection
    (``GRPC_WINDOW_SIZE``, ``modal/_utils/grpc_utils.py:210`` in modal 1.6.4,
    the ``http2_*_window_size`` of its grpclib ``Configuration``), which the
    server fills whenever it sends faster than the client reads."""

    stream_read_ahead = GRPC_WINDOW_SIZE

    @pytest.mark.slow
    def test_stream_of_100_mib_keeps_client_memory_bounded(self, separate_sandbox: BaseSandbox) -> None:
        super().test_stream_of_100_mib_keeps_client_memory_bounded(separate_sandbox)

    @pytest.mark.slow
    def test_100_mib_through_stdin_keeps_client_memory_bounded(
        self, separate_sandbox: BaseSandbox, workdir: str
    ) -> None:
        """Measured apart too: the fake in this process would hold what it is sent."""
        separate_sandbox.mkdir(workdir)
        super().test_100_mib_through_stdin_keeps_client_memory_bounded(separate_sandbox, workdir)


class TestModalSandbox(_ClientMemoryMeasuredApart):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, modal_provider: ModalProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(modal_provider, "conformance-sync")


class _AsyncDrivenSandbox(ModalSandbox):
    """Every blocking entry point answered by its native async twin on a fresh event loop."""

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return anyio.run(partial(self.aexecute, command, timeout=timeout))

    def upload_files(
        self, files: Iterable[tuple[str, UploadSource]], *, progress: Progress | None = None
    ) -> TransferResults[FileUploadResponse]:
        return anyio.run(partial(self.aupload_files, list(files), progress=progress))

    def download_files(
        self, paths: Iterable[str], *, progress: Progress | None = None
    ) -> TransferResults[FileDownloadResponse]:
        return anyio.run(partial(self.adownload_files, list(paths), progress=progress))


@pytest.mark.slow
class TestModalSandboxAsyncApi(_ClientMemoryMeasuredApart):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, modal_provider: ModalProvider) -> Iterator[ModalSandbox]:
        created = modal_provider.create(labels={"suite": "conformance-async"})
        yield _AsyncDrivenSandbox(
            created.sandbox, timeout=created.timeout, max_output_bytes=created.limits.max_output_bytes
        )
        modal_provider.delete(sandbox_id=created.id)


def test_timeout_reports_timed_out_with_exit_code_124(sandbox: ModalSandbox) -> None:
    response = sandbox.execute("echo before; sleep 20", timeout=1)
    assert response.timed_out
    assert response.exit_code == 124
    assert response.output == "before\n"


@pytest.mark.parametrize("via", ["execute", "aexecute"])
def test_timeout_reported_by_the_worker_as_sigkill_is_still_ours(
    sandbox: ModalSandbox, modal_server: FakeModalServer, via: str
) -> None:
    """A slow start reply lets the worker's kill at ``timeout_secs`` (status 128 + 9) beat
    the SDK's deadline: still our timeout, 124, not a command that died of SIGKILL."""
    modal_server.exec_start_delay = 0.5
    try:
        if via == "execute":
            response = sandbox.execute("echo before; sleep 20", timeout=1)
        else:
            response = anyio.run(partial(sandbox.aexecute, "echo before; sleep 20", timeout=1))
    finally:
        modal_server.exec_start_delay = 0.0
    assert (response.exit_code, response.timed_out, response.output) == (124, True, "before\n")


def test_output_arriving_after_a_slow_start_and_the_exit_is_kept(
    sandbox: ModalSandbox, modal_server: FakeModalServer
) -> None:
    """The start reply comes late (the command has long exited) and the output later still,
    after the exit status: the drain after the exit waits for it (it used to count from
    before the start, and returned at once)."""
    modal_server.exec_start_delay = 0.6
    modal_server.stdio_read_delay = 0.2
    try:
        response = sandbox.execute("echo kept", timeout=30)
    finally:
        modal_server.exec_start_delay = modal_server.stdio_read_delay = 0.0
    assert (response.exit_code, response.output) == (0, "kept\n")


@pytest.mark.parametrize(
    ("command", "status"), [("exit 3", 3), ("kill -TERM $$", 143), ("kill -KILL $$", 137)]
)
def test_exit_status_of_a_command_and_of_signal_deaths(
    sandbox: ModalSandbox, command: str, status: int
) -> None:
    response = sandbox.execute(command, timeout=30)
    assert (response.exit_code, response.timed_out) == (status, False)


def test_an_execute_costs_three_requests(sandbox: ModalSandbox, modal_server: FakeModalServer) -> None:
    """Start, one stdout stream, wait: the floor for a command whose output is read while
    it runs and whose status is not in its output."""
    sandbox.execute("true")  # the handle's task id and command router are looked up once
    before = modal_server.calls()
    assert sandbox.execute("echo counted").output == "counted\n"
    assert modal_server.calls() - before == {"TaskExecStart": 1, "TaskExecStdioRead": 1, "TaskExecWait": 1}


def test_fractional_timeouts_round_up_and_bad_ones_are_refused(sandbox: ModalSandbox) -> None:
    assert sandbox.execute("sleep 0.3; echo done", timeout=0.1).output == "done\n"
    with pytest.raises(errors.InvalidArgumentError):
        sandbox.execute("true", timeout=-0.5)


def test_output_cap_and_order_of_merged_streams(provider: ModalProvider) -> None:
    sandbox = provider.create()
    sandbox.limits = replace(sandbox.limits, max_output_bytes=1000)
    response = sandbox.execute("for i in 1 2 3; do echo out$i; echo err$i >&2; done; head -c 5000 /dev/zero")
    assert response.truncated
    assert response.output.startswith("out1\nerr1\nout2\nerr2\nout3\nerr3\n")
    assert len(response.output) == 1000


def test_commands_get_empty_stdin(sandbox: ModalSandbox) -> None:
    response = sandbox.execute("cat; echo end", timeout=10)
    assert response == response.model_copy(update={"output": "end\n", "exit_code": 0})


def test_command_over_modal_argument_cap_is_refused_before_sending(sandbox: ModalSandbox) -> None:
    assert sandbox.limits.max_command_bytes < 64 * 1024
    with pytest.raises(errors.InvalidArgumentError, match="64 KiB"):
        sandbox.execute(": " + "x" * sandbox.limits.max_command_bytes)


async def test_aexecute_uses_native_async(sandbox: ModalSandbox) -> None:
    response = await sandbox.aexecute("echo $((6 * 7)) >&2; exit 4")
    assert (response.output, response.exit_code) == ("42\n", 4)
    slow = await sandbox.aexecute("sleep 20", timeout=1)
    assert slow.timed_out and slow.exit_code == 124


def test_terminated_sandbox_raises_not_found(provider: ModalProvider, sandbox: ModalSandbox) -> None:
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.execute("true")


@pytest.mark.parametrize("rpc", ["TaskExecWait", "TaskExecStdioRead"])
async def test_errors_while_a_command_runs_are_typed(
    sandbox: ModalSandbox, modal_server: FakeModalServer, rpc: str
) -> None:
    modal_server.fail(rpc, Status.NOT_FOUND)
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.aexecute("sleep 0.2")
    modal_server.fail(rpc, Status.PERMISSION_DENIED)
    with pytest.raises(errors.AuthenticationError):
        sandbox.execute("sleep 0.2")


def test_unexpected_service_error_is_runtime_error(
    sandbox: ModalSandbox, modal_server: FakeModalServer
) -> None:
    modal_server.fail("TaskExecStart", Status.DATA_LOSS)
    with pytest.raises(errors.SandboxRuntimeError):
        sandbox.execute("true")
    assert sandbox.execute("echo fine").output == "fine\n"


def test_background_process_holding_output_does_not_block(sandbox: ModalSandbox) -> None:
    started = time.monotonic()
    response = sandbox.execute("sleep 30 & echo started", timeout=20)
    assert time.monotonic() - started < 5
    assert (response.output, response.exit_code, response.timed_out) == ("started\n", 0, False)


async def test_background_process_holding_output_does_not_block_async(sandbox: ModalSandbox) -> None:
    started = time.monotonic()
    response = await sandbox.aexecute("sleep 30 & echo started", timeout=20)
    assert time.monotonic() - started < 5
    assert (response.output, response.exit_code, response.timed_out) == ("started\n", 0, False)


def test_all_output_arrives_after_the_command_exits(sandbox: ModalSandbox) -> None:
    response = sandbox.execute("head -c 3000000 /dev/zero | tr '\\0' z")
    assert response.output == "z" * 3_000_000
