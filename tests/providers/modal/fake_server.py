"""A fake Modal backend on 127.0.0.1 that does real work, for testing against the real ``modal`` SDK.

Modal's client speaks gRPC (grpclib) to two services: the control plane
(``modal.client.ModalClient``) and, for everything that runs inside a sandbox,
a per-worker *task command router* (``modal.task_command_router.TaskCommandRouter``)
whose address and JWT the control plane hands out. Both servicers here derive
from the SDK's own generated base classes (``modal_proto.api_grpc.ModalClientBase``,
``modal_proto.task_command_router_grpc.TaskCommandRouterBase``), so the wire
format is right by construction, and every RPC not listed below answers
``UNIMPLEMENTED``: when an SDK upgrade starts calling something new, tests
fail at once with the RPC's name instead of hanging.

Point the SDK at it with ``MODAL_SERVER_URL`` plus ``MODAL_TOKEN_ID`` /
``MODAL_TOKEN_SECRET`` (see :meth:`FakeModalServer.env`). Wrong tokens get
``UNAUTHENTICATED``; so does a command-router call without the issued JWT.

Control plane RPCs served (the SDK's default "V2" sandbox backend; V1, which
the SDK only picks for GPUs, network file systems or a PTY, is not served):
    AuthTokenGet            the short-lived token V2 sandbox RPCs carry as ``x-modal-auth-token``
    EnvironmentGetOrCreate  the image builder version
    AppGetOrCreate          ``modal.App.lookup(name, create_if_missing=...)``
    ImageGetOrCreate        every image is "already built"
    SandboxCreateV2         a sandbox is a fresh temp directory (its default working directory);
                            ``env`` arrives inline as a secret source. A ``name`` is unique among
                            the app's running sandboxes: another create of it is ALREADY_EXISTS
                            ("name: ... Unique within an app", "Raises: AlreadyExistsError",
                            ``Sandbox.create``, ``modal/sandbox/_sandbox.py:230,288``), and free
                            again once its sandbox ends ("another running Sandbox in the App
                            already holds the name", ``_experimental_set_name``, same file:764)
    SandboxGetFromNameV2    the app's running sandbox of a name, else with ``include_terminated``
                            the most recent one of that name that ended (``from_name``'s docstring,
                            same file:554), else NOT_FOUND
    SandboxGetTaskIdV2      task id while running, the final result once finished
    SandboxGetCommandRouterAccess  ``http://127.0.0.1:<port>`` (this same server) and a JWT
    SandboxWaitV2           long poll on the sandbox result (``timeout`` seconds)
    SandboxTerminateV2      kills every running exec, removes the directory
    SandboxListV2           app / tag filter, running only, newest first, ``before_timestamp``
                            paging with :attr:`FakeModalServer.page_size` entries a page; each
                            entry with what the SDK's public ``Sandbox.list`` reads of it
                            (id, handle metadata, result, creation time), so a client reading
                            more than the public API gives fails here;
                            :attr:`FakeModalServer.list_delay` holds the answer back
    SandboxTagsGetV2 / SandboxTagsSetV2

Task command router RPCs served:
    TaskExecStart           spawns ``command_args`` as a real process (own session) with the
                            sandbox env + exec env, in ``workdir`` or the sandbox directory;
                            ``timeout_secs`` kills the process group
    TaskExecStdioRead       streams stdout / stderr from ``offset`` until the stream closes;
                            a stream read to its end is then freed (reading before that
                            offset again is OUT_OF_RANGE), so the fake's memory stays
                            bounded. The SDK never asks for output it has had: it tracks
                            its offset "so transient reconnects request the correct next
                            byte" (``_stream_stdio_with_retries``,
                            ``modal/sandbox/_task_command_router_client.py:1006`` in modal
                            1.6.4); and the service does not keep all output either: the
                            SDK warns, of a sandbox's own stdio, that "only the most recent
                            portion of output is retained" (``modal/io_streams.py:303``).
                            What the client has not read yet is kept ("all streams are
                            buffered in memory, waiting to be consumed by the client",
                            https://modal.com/docs/guide/sandbox-spawn, Stream types)
    TaskExecStdinWrite / TaskExecStdinWriteStream / TaskExecStdinStatus
    TaskExecPoll / TaskExecWait  exit code, or the signal for a killed process. An exec
                            past ``timeout_secs`` is killed here, on the worker side (SIGKILL to
                            its group, timed from the start request), and its status reported as
                            that signal, which the SDK turns into 128 + 9 = 137
                            (``modal/container_process.py:176``, ``wait``). The SDK's own
                            deadline starts only once the start reply is back
                            (``modal/sandbox/_common.py:1066``, ``exec_via_tcr``), so the
                            worker's report usually wins that race and ``wait()`` returns 137
                            rather than its deadline's -1 (``container_process.py:185``); both
                            happen on Modal, and
                            :attr:`FakeModalServer.exec_start_delay` makes the worker win for sure.

``/__modal/.bin/modal-sandbox-fs-tools`` (what ``Sandbox.filesystem`` execs) is
served by running ``modal_fs_tools.py`` next to this file as that process.

:meth:`FakeModalServer.fail` makes chosen RPCs fail with a chosen gRPC status;
:meth:`FakeModalServer.calls` counts the RPCs received, by name, so tests can pin
how many round trips an operation costs.
Sandbox lifetime (``timeout``) is enforced: the sandbox is terminated with a
TIMEOUT result when it runs out; so is ``idle_timeout``, counted while no exec
runs (Modal counts a running exec as activity, https://modal.com/docs/guide/sandboxes,
Idle Timeouts; the file API is execs too). The definition each sandbox was created
with is kept (:meth:`FakeModalServer.definition`). Paths are host paths: the sandbox directory is
only the default working directory, not a chroot, so tests use paths under it.
``python3`` in a sandbox is the interpreter running the fake.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from grpclib.events import RecvRequest, listen
from grpclib.server import Server, Stream
from modal._image import LATEST_IMAGE_BUILDER_VERSION
from modal_proto import api_pb2
from modal_proto import task_command_router_pb2 as tcr_pb2
from modal_proto.api_grpc import ModalClientBase
from modal_proto.task_command_router_grpc import TaskCommandRouterBase

from tests.providers.fake_users import without_root_bypass

FS_TOOLS_PATH = "/__modal/.bin/modal-sandbox-fs-tools"
_FS_TOOLS_SCRIPT = Path(__file__).with_name("modal_fs_tools.py")
_ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_STDIO_CHUNK = 64 * 1024
#: Seconds each RPC waits by default (``FakeModalServer.latency``): a service is never instant.
DEFAULT_LATENCY_SECONDS = 0.002
#: Seconds a new sandbox stays out of ``SandboxListV2`` by default (``FakeModalServer.listing_lag``).
DEFAULT_LISTING_LAG_SECONDS = 0.2

_T = TypeVar("_T")


def _unimplemented_rpcs(base: type) -> type:
    """A mixin answering UNIMPLEMENTED for every abstract RPC of a generated servicer base."""

    def handler(name: str) -> Callable[[object, Stream[Any, Any]], Coroutine[Any, Any, None]]:
        async def unimplemented(self: object, stream: Stream[Any, Any]) -> None:
            raise GRPCError(Status.UNIMPLEMENTED, f"fake modal server does not implement {name}")

        return unimplemented

    abstract = cast("frozenset[str]", getattr(base, "__abstractmethods__", frozenset()))
    return type(f"Unimplemented{base.__name__}", (), {name: handler(name) for name in abstract})


def _new_id(prefix: str, *, v2: bool = False) -> str:
    """An id shaped like Modal's; the SDK routes ``sb-`` ids of 22 characters to its V1 backend and
    treats ``ta-...V`` task ids as V2, so V2 objects get 23 characters ending in ``V``."""
    body = "".join(secrets.choice(_ID_ALPHABET) for _ in range(22))
    return f"{prefix}-{body}V" if v2 else f"{prefix}-{body}"


def _make_jwt(expires_in: float = 3600.0) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part({'exp': time.time() + expires_in})}.{secrets.token_hex(8)}"


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Tells when the process exits. ``Process.wait()`` also waits for every pipe to
    close, which a background child can put off indefinitely; Modal reports the exec's
    own exit."""

    def __init__(self) -> None:
        super().__init__(limit=_STDIO_CHUNK, loop=asyncio.get_running_loop())
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


@dataclass
class _Exec:
    process: asyncio.subprocess.Process
    exited: asyncio.Event
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    closed_fds: set[int] = field(default_factory=set)
    released: dict[int, int] = field(default_factory=dict)  # bytes of a stream delivered and freed
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    stdin_written: int = 0
    stdin_closed: bool = False
    stdin_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def buffer(self, fd: int) -> bytearray:
        return self.stdout if fd == tcr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT else self.stderr

    async def read_from(self, fd: int, offset: int) -> bytes:
        """The next chunk of output at ``offset``, waiting for it; empty once the stream is closed."""
        start = offset - self.released.get(fd, 0)
        if start < 0:
            raise GRPCError(Status.OUT_OF_RANGE, f"output before offset {offset} was already delivered")
        async with self.changed:
            await self.changed.wait_for(lambda: len(self.buffer(fd)) > start or fd in self.closed_fds)
            return bytes(self.buffer(fd)[start : start + _STDIO_CHUNK])

    def release(self, fd: int) -> None:
        """Free a stream read to its closed end. The fake runs in the tests' own process, so
        output it kept for every exec of a sandbox would count as the client's memory."""
        self.released[fd] = self.released.get(fd, 0) + len(self.buffer(fd))
        self.buffer(fd).clear()

    async def write_stdin(self, offset: int, data: bytes, eof: bool) -> None:
        """Append stdin bytes at ``offset``; bytes already written (a client retry) are skipped."""
        async with self.stdin_lock:
            if self.stdin_closed:
                if data or not eof:
                    raise GRPCError(Status.FAILED_PRECONDITION, "stdin is closed")
                return
            if offset > self.stdin_written:
                raise GRPCError(Status.OUT_OF_RANGE, f"stdin offset {offset} past {self.stdin_written}")
            data = data[self.stdin_written - offset :]
            stdin = self.process.stdin
            assert stdin is not None
            try:
                if data:
                    stdin.write(data)
                    await stdin.drain()
                    self.stdin_written += len(data)
                if eof:
                    stdin.close()
                    self.stdin_closed = True
            except (BrokenPipeError, ConnectionResetError) as exc:
                self.stdin_closed = True
                raise GRPCError(Status.FAILED_PRECONDITION, "the process closed its stdin") from exc


@dataclass
class _Sandbox:
    id: str
    app_id: str
    task_id: str
    directory: Path
    env: dict[str, str]
    workdir: str
    created_at: float
    tags: dict[str, str]
    #: ``time.monotonic()`` from which ``SandboxListV2`` shows it.
    listed_from: float = 0.0
    result: api_pb2.GenericResult | None = None
    execs: dict[str, _Exec] = field(default_factory=dict)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    definition: api_pb2.Sandbox = field(default_factory=api_pb2.Sandbox)
    lifetime: asyncio.TimerHandle | None = None
    idle: asyncio.TimerHandle | None = None

    def running_execs(self) -> int:
        return sum(proc.process.returncode is None for proc in self.execs.values())


class _State:
    """Everything the two servicers share; only touched on the server's event loop."""

    def __init__(self, root: Path, token_id: str, token_secret: str) -> None:
        self.root = root
        # ``python3`` inside sandboxes is the real interpreter running the fake: the one first
        # on the host's PATH may be a slow shim (pyenv), and the SDK runs python3 in every file op.
        self.bin_dir = root / ".bin"
        self.bin_dir.mkdir()
        (self.bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
        self.token_id = token_id
        self.token_secret = token_secret
        self.jwt = _make_jwt()
        self.auth_token = _make_jwt()
        self.failures: dict[str, tuple[Status, int]] = {}
        self.calls: Counter[str] = Counter()
        self.router_url = ""
        self.page_size = 3
        self.exec_start_delay = 0.0
        self.unprivileged_execs = False
        self.listing_lag = DEFAULT_LISTING_LAG_SECONDS
        #: Seconds every RPC waits before it is handled: a network's, kept small.
        self.latency = DEFAULT_LATENCY_SECONDS
        self.stdio_read_delay = 0.0
        self.list_delay = 0.0
        self.apps: dict[str, str] = {}
        self.sandboxes: dict[str, _Sandbox] = {}
        self._clock = 0.0

    def timestamp(self) -> float:
        """Strictly increasing creation times, so ``before_timestamp`` paging is exact."""
        self._clock = max(time.time(), self._clock + 1e-3)
        return self._clock

    def check_token(self, stream: Stream[Any, Any]) -> None:
        if (
            _header(stream, "x-modal-token-id") != self.token_id
            or _header(stream, "x-modal-token-secret") != self.token_secret
        ):
            raise GRPCError(Status.UNAUTHENTICATED, "Invalid token id or secret")

    def check_auth_token(self, stream: Stream[Any, Any]) -> None:
        if _header(stream, "x-modal-auth-token") != self.auth_token:
            raise GRPCError(Status.UNAUTHENTICATED, "Invalid or missing auth token")

    def check_jwt(self, stream: Stream[Any, Any]) -> None:
        if _header(stream, "authorization") != f"Bearer {self.jwt}":
            raise GRPCError(Status.UNAUTHENTICATED, "Invalid or missing command router JWT")

    def idle_from_now(self, sandbox: _Sandbox) -> None:
        """(Re)start the idle clock of a sandbox with an ``idle_timeout`` and no running exec."""
        if sandbox.idle is not None:
            sandbox.idle.cancel()
            sandbox.idle = None
        seconds = sandbox.definition.idle_timeout_secs
        if seconds and sandbox.result is None and not sandbox.running_execs():
            timeout = api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT
            sandbox.idle = asyncio.get_running_loop().call_later(
                seconds, self.finish, sandbox, timeout, "Sandbox idle timeout"
            )

    def running_named(self, app_id: str, name: str) -> _Sandbox | None:
        for sandbox in self.sandboxes.values():
            if sandbox.app_id == app_id and sandbox.definition.name == name and sandbox.result is None:
                return sandbox
        return None

    def sandbox(self, sandbox_id: str) -> _Sandbox:
        try:
            return self.sandboxes[sandbox_id]
        except KeyError:
            raise GRPCError(Status.NOT_FOUND, f"Sandbox {sandbox_id} not found") from None

    def running_task(self, task_id: str) -> _Sandbox:
        for sandbox in self.sandboxes.values():
            if sandbox.task_id == task_id:
                if sandbox.result is not None:
                    raise GRPCError(Status.NOT_FOUND, f"Task {task_id} has finished")
                return sandbox
        raise GRPCError(Status.NOT_FOUND, f"Task {task_id} not found")

    def exec_of(self, task_id: str, exec_id: str) -> _Exec:
        for sandbox in self.sandboxes.values():
            if sandbox.task_id == task_id and exec_id in sandbox.execs:
                return sandbox.execs[exec_id]
        raise GRPCError(Status.NOT_FOUND, f"Exec {exec_id} not found")

    def finish(self, sandbox: _Sandbox, status: int, message: str) -> api_pb2.GenericResult | None:
        """End a sandbox (idempotent): kill its processes, drop its files, record the result."""
        if sandbox.result is not None:
            return sandbox.result
        sandbox.result = api_pb2.GenericResult(status=cast(Any, status), exception=message)
        for timer in (sandbox.lifetime, sandbox.idle):
            if timer is not None:
                timer.cancel()
        for proc in sandbox.execs.values():
            _kill_group(proc.process)
        shutil.rmtree(sandbox.directory, ignore_errors=True)
        sandbox.finished.set()
        return None


def _header(stream: Stream[Any, Any], name: str) -> str | None:
    value = stream.metadata.get(name) if stream.metadata else None
    return value if isinstance(value, str) else None


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """Kill the exec and everything it started, even after the exec itself has exited
    (its background children keep its process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _tags(tags: Any) -> dict[str, str]:
    return {tag.tag_name: tag.tag_value for tag in tags}


def _tag_protos(tags: dict[str, str]) -> list[api_pb2.SandboxTag]:
    return [api_pb2.SandboxTag(tag_name=name, tag_value=value) for name, value in tags.items()]


class _ControlPlane(_unimplemented_rpcs(ModalClientBase), ModalClientBase):  # type: ignore[misc]
    def __init__(self, state: _State) -> None:
        self.state = state

    async def _request(self, stream: Stream[Any, Any], *, sandbox_rpc: bool = True) -> Any:
        """Check the credentials (and, for sandbox RPCs, the short-lived auth token) and read the request."""
        self.state.check_token(stream)
        if sandbox_rpc:
            self.state.check_auth_token(stream)
        request = await stream.recv_message()
        assert request is not None
        return request

    async def AuthTokenGet(self, stream: Stream[Any, Any]) -> None:
        await self._request(stream, sandbox_rpc=False)
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=self.state.auth_token))

    async def EnvironmentGetOrCreate(self, stream: Stream[Any, Any]) -> None:
        await self._request(stream, sandbox_rpc=False)
        settings = api_pb2.EnvironmentSettings(image_builder_version=LATEST_IMAGE_BUILDER_VERSION)
        await stream.send_message(
            api_pb2.EnvironmentGetOrCreateResponse(
                environment_id="en-fake", metadata=api_pb2.EnvironmentMetadata(name="main", settings=settings)
            )
        )

    async def AppGetOrCreate(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.AppGetOrCreateRequest = await self._request(stream, sandbox_rpc=False)
        app_id = self.state.apps.get(request.app_name)
        if app_id is None:
            if request.object_creation_type != api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING:
                raise GRPCError(Status.NOT_FOUND, f"App '{request.app_name}' not found")
            app_id = self.state.apps[request.app_name] = _new_id("ap")
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=app_id))

    async def ImageGetOrCreate(self, stream: Stream[Any, Any]) -> None:
        await self._request(stream, sandbox_rpc=False)
        await stream.send_message(
            api_pb2.ImageGetOrCreateResponse(
                image_id=_new_id("im"),
                result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS),
            )
        )

    async def SandboxCreateV2(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxCreateV2Request = await self._request(stream)
        state = self.state
        definition = request.definition
        if request.app_id not in state.apps.values():
            raise GRPCError(Status.NOT_FOUND, f"App {request.app_id} not found")
        if definition.secret_ids or any(source.secret_id for source in request.secret_sources):
            raise GRPCError(Status.NOT_FOUND, "named secrets do not exist in the fake")
        env: dict[str, str] = {}
        for source in request.secret_sources:
            env.update(source.env.contents)
        if definition.name and state.running_named(request.app_id, definition.name):
            raise GRPCError(Status.ALREADY_EXISTS, f"Sandbox named {definition.name!r} already exists")
        sandbox_id = _new_id("sb", v2=True)
        directory = state.root / sandbox_id
        directory.mkdir()
        sandbox = _Sandbox(
            id=sandbox_id,
            app_id=request.app_id,
            task_id=_new_id("ta", v2=True),
            directory=directory,
            env=env,
            workdir=definition.workdir or str(directory),
            created_at=state.timestamp(),
            tags=_tags(request.tags),
            listed_from=time.monotonic() + state.listing_lag,
            definition=definition,
        )
        if definition.timeout_secs:
            sandbox.lifetime = asyncio.get_running_loop().call_later(
                definition.timeout_secs,
                state.finish,
                sandbox,
                api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT,
                "Sandbox timed out",
            )
        state.sandboxes[sandbox_id] = sandbox
        state.idle_from_now(sandbox)
        await stream.send_message(
            api_pb2.SandboxCreateV2Response(
                sandbox_id=sandbox_id,
                task_id=sandbox.task_id,
                metadata=api_pb2.SandboxHandleMetadata(app_id=request.app_id),
                command_router_access=api_pb2.CommandRouterAccess(url=state.router_url, jwt=state.jwt),
            )
        )

    async def SandboxGetFromNameV2(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxGetFromNameRequest = await self._request(stream)
        app_id = self.state.apps.get(request.app_name, "")
        found = self.state.running_named(app_id, request.sandbox_name)
        if found is None and request.include_terminated:
            ended = [
                sandbox
                for sandbox in self.state.sandboxes.values()
                if sandbox.app_id == app_id and sandbox.definition.name == request.sandbox_name
            ]
            found = max(ended, key=lambda sandbox: sandbox.created_at, default=None)
        if found is None:
            raise GRPCError(Status.NOT_FOUND, f"Sandbox named {request.sandbox_name!r} not found")
        await stream.send_message(
            api_pb2.SandboxGetFromNameResponse(
                sandbox_id=found.id,
                metadata=api_pb2.SandboxHandleMetadata(app_id=found.app_id, result=found.result),
            )
        )

    async def SandboxGetTaskIdV2(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxGetTaskIdRequest = await self._request(stream)
        sandbox = self.state.sandbox(request.sandbox_id)
        if sandbox.result is not None:
            response = api_pb2.SandboxGetTaskIdResponse(task_result=sandbox.result)
        else:
            response = api_pb2.SandboxGetTaskIdResponse(task_id=sandbox.task_id)
        await stream.send_message(response)

    async def SandboxGetCommandRouterAccess(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxGetCommandRouterAccessRequest = await self._request(stream)
        if request.sandbox_id:
            self.state.sandbox(request.sandbox_id)
        else:
            self.state.running_task(request.task_id)
        await stream.send_message(
            api_pb2.SandboxGetCommandRouterAccessResponse(url=self.state.router_url, jwt=self.state.jwt)
        )

    async def SandboxWaitV2(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxWaitRequest = await self._request(stream)
        sandbox = self.state.sandbox(request.sandbox_id)
        if request.timeout > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(sandbox.finished.wait(), request.timeout)
        await stream.send_message(
            api_pb2.SandboxWaitResponse(
                result=sandbox.result, metadata=api_pb2.SandboxHandleMetadata(app_id=sandbox.app_id)
            )
        )

    async def SandboxTerminateV2(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxTerminateRequest = await self._request(stream)
        sandbox = self.state.sandbox(request.sandbox_id)
        existing = self.state.finish(
            sandbox, api_pb2.GenericResult.GENERIC_STATUS_TERMINATED, "Sandbox terminated by user"
        )
        await stream.send_message(api_pb2.SandboxTerminateResponse(existing_result=existing))

    async def SandboxListV2(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxListRequest = await self._request(stream)
        wanted = _tags(request.tags)
        matches = [
            sandbox
            for sandbox in self.state.sandboxes.values()
            if (request.include_finished or sandbox.result is None)
            and (not request.app_id or sandbox.app_id == request.app_id)
            and (not request.before_timestamp or sandbox.created_at < request.before_timestamp)
            and wanted.items() <= sandbox.tags.items()
            and sandbox.listed_from <= time.monotonic()
        ]
        matches.sort(key=lambda sandbox: sandbox.created_at, reverse=True)
        await asyncio.sleep(self.state.list_delay)
        await stream.send_message(
            api_pb2.SandboxListResponse(
                sandboxes=[
                    # only what the SDK reads of an entry (``_Sandbox._list``,
                    # modal/sandbox/_sandbox.py:1458-1464 in modal 1.6.4): the id, the
                    # handle metadata, the task's result, and the creation time its next
                    # request pages from; not the tags or the name, which nothing public returns
                    api_pb2.SandboxInfo(
                        id=sandbox.id,
                        app_id=sandbox.app_id,
                        created_at=sandbox.created_at,
                        task_info=api_pb2.TaskInfo(id=sandbox.task_id, result=sandbox.result),
                        metadata=api_pb2.SandboxHandleMetadata(app_id=sandbox.app_id),
                    )
                    for sandbox in matches[: self.state.page_size]
                ]
            )
        )

    async def SandboxTagsGetV2(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxTagsGetRequest = await self._request(stream)
        sandbox = self.state.sandbox(request.sandbox_id)
        await stream.send_message(api_pb2.SandboxTagsGetResponse(tags=_tag_protos(sandbox.tags)))

    async def SandboxTagsSetV2(self, stream: Stream[Any, Any]) -> None:
        request: api_pb2.SandboxTagsSetRequest = await self._request(stream)
        self.state.sandbox(request.sandbox_id).tags = _tags(request.tags)
        await stream.send_message(empty_pb2.Empty())


class _CommandRouter(_unimplemented_rpcs(TaskCommandRouterBase), TaskCommandRouterBase):  # type: ignore[misc]
    def __init__(self, state: _State) -> None:
        self.state = state

    async def _request(self, stream: Stream[Any, Any]) -> Any:
        self.state.check_jwt(stream)
        request = await stream.recv_message()
        assert request is not None
        return request

    async def TaskExecStart(self, stream: Stream[Any, Any]) -> None:
        request: tcr_pb2.TaskExecStartRequest = await self._request(stream)
        sandbox = self.state.running_task(request.task_id)
        if request.exec_id in sandbox.execs:  # the SDK retried a start that did arrive
            await stream.send_message(tcr_pb2.TaskExecStartResponse())
            return
        argv = list(request.command_args)
        if not argv:
            raise GRPCError(Status.INVALID_ARGUMENT, "empty command")
        if argv[0] == FS_TOOLS_PATH:
            argv = [sys.executable, str(_FS_TOOLS_SCRIPT), *argv[1:]]
        if self.state.unprivileged_execs:
            argv = without_root_bypass(argv)
        env = {
            "PATH": f"{self.state.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(sandbox.directory),
            "LANG": "C.UTF-8",
        }
        env.update(sandbox.env)
        for source in request.secret_sources:
            if source.secret_id:
                raise GRPCError(Status.NOT_FOUND, "named secrets do not exist in the fake")
            env.update(source.env.contents)
        cwd = request.workdir or sandbox.workdir
        if not os.path.isdir(cwd):
            raise GRPCError(Status.INVALID_ARGUMENT, f"workdir {cwd} does not exist")
        pipe = asyncio.subprocess.PIPE
        devnull = asyncio.subprocess.DEVNULL
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.subprocess_exec(
                _ExitAwareProtocol,
                *argv,
                stdin=pipe,
                stdout=pipe if request.stdout_config == tcr_pb2.TASK_EXEC_STDOUT_CONFIG_PIPE else devnull,
                stderr=pipe if request.stderr_config == tcr_pb2.TASK_EXEC_STDERR_CONFIG_PIPE else devnull,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, f"cannot execute {argv[0]}: {exc.strerror}") from exc
        process = asyncio.subprocess.Process(transport, protocol, loop)
        proc = _Exec(process, protocol.exited)
        sandbox.execs[request.exec_id] = proc
        self.state.idle_from_now(sandbox)  # stops the idle clock; restarted when the last exec ends
        proc.tasks.append(
            loop.create_task(_after_exit(proc.exited, lambda: self.state.idle_from_now(sandbox)))
        )
        for fd, pipe_reader in (
            (tcr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT, process.stdout),
            (tcr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR, process.stderr),
        ):
            proc.tasks.append(loop.create_task(_pump(proc, fd, pipe_reader)))
        if request.timeout_secs:

            def kill_at_timeout() -> None:
                if process.returncode is None:
                    _kill_group(process)

            timer = loop.call_later(request.timeout_secs, kill_at_timeout)
            proc.tasks.append(loop.create_task(_after_exit(proc.exited, timer.cancel)))
        await asyncio.sleep(self.state.exec_start_delay)  # a slow reply: the SDK's deadline starts late
        await stream.send_message(tcr_pb2.TaskExecStartResponse())

    async def TaskExecStdioRead(self, stream: Stream[Any, Any]) -> None:
        request: tcr_pb2.TaskExecStdioReadRequest = await self._request(stream)
        proc = self.state.exec_of(request.task_id, request.exec_id)
        fd = request.file_descriptor
        offset = request.offset
        await asyncio.sleep(self.state.stdio_read_delay)  # a slow stream: output arrives late
        while chunk := await proc.read_from(fd, offset):
            await stream.send_message(tcr_pb2.TaskExecStdioReadResponse(data=chunk))
            offset += len(chunk)
        proc.release(fd)

    async def TaskExecStdinWrite(self, stream: Stream[Any, Any]) -> None:
        request: tcr_pb2.TaskExecStdinWriteRequest = await self._request(stream)
        proc = self.state.exec_of(request.task_id, request.exec_id)
        await proc.write_stdin(request.offset, request.data, request.eof)
        await stream.send_message(tcr_pb2.TaskExecStdinWriteResponse())

    async def TaskExecStdinWriteStream(self, stream: Stream[Any, Any]) -> None:
        self.state.check_jwt(stream)
        proc: _Exec | None = None
        offset = 0
        async for message in stream:
            if message.HasField("start"):
                proc = self.state.exec_of(message.start.task_id, message.start.exec_id)
                offset = message.start.offset
            elif proc is None:
                raise GRPCError(Status.INVALID_ARGUMENT, "stdin stream must begin with start")
            elif message.HasField("end"):
                await proc.write_stdin(offset, b"", eof=True)
            else:
                await proc.write_stdin(offset, message.data, eof=False)
                offset += len(message.data)
        await stream.send_message(tcr_pb2.TaskExecStdinWriteStreamResponse())

    async def TaskExecStdinStatus(self, stream: Stream[Any, Any]) -> None:
        request: tcr_pb2.TaskExecStdinStatusRequest = await self._request(stream)
        proc = self.state.exec_of(request.task_id, request.exec_id)
        await stream.send_message(
            tcr_pb2.TaskExecStdinStatusResponse(
                num_bytes_written=proc.stdin_written, closed=proc.stdin_closed
            )
        )

    async def TaskExecPoll(self, stream: Stream[Any, Any]) -> None:
        request: tcr_pb2.TaskExecPollRequest = await self._request(stream)
        proc = self.state.exec_of(request.task_id, request.exec_id)
        await stream.send_message(tcr_pb2.TaskExecPollResponse(**_exit_status(proc)))

    async def TaskExecWait(self, stream: Stream[Any, Any]) -> None:
        request: tcr_pb2.TaskExecWaitRequest = await self._request(stream)
        proc = self.state.exec_of(request.task_id, request.exec_id)
        await proc.exited.wait()
        await stream.send_message(tcr_pb2.TaskExecWaitResponse(**_exit_status(proc)))


def _exit_status(proc: _Exec) -> dict[str, int]:
    code = proc.process.returncode
    if code is None:
        return {}
    return {"signal": -code} if code < 0 else {"code": code}


async def _pump(proc: _Exec, fd: int, reader: asyncio.StreamReader | None) -> None:
    if reader is not None:
        while chunk := await reader.read(_STDIO_CHUNK):
            async with proc.changed:
                proc.buffer(fd).extend(chunk)
                proc.changed.notify_all()
    async with proc.changed:
        proc.closed_fds.add(fd)
        proc.changed.notify_all()


async def _after_exit(exited: asyncio.Event, then: Callable[[], object]) -> None:
    await exited.wait()
    then()


class FakeModalServer:
    """The fake backend, serving on its own thread and event loop so both the SDK's
    blocking API and its ``.aio`` API (on any loop) can reach it."""

    def __init__(self, *, token_id: str = "ak-fake-token", token_secret: str = "as-fake-secret") -> None:
        self.token_id = token_id
        self.token_secret = token_secret
        self._tempdir = tempfile.TemporaryDirectory(prefix="fake-modal-")
        self.state = _State(Path(self._tempdir.name), token_id, token_secret)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-modal-server", daemon=True)
        self._server: Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def root(self) -> Path:
        """Directory holding every sandbox's directory."""
        return self.state.root

    @property
    def page_size(self) -> int:
        return self.state.page_size

    @page_size.setter
    def page_size(self, value: int) -> None:
        self.state.page_size = value

    @property
    def exec_start_delay(self) -> float:
        """Seconds the command router waits before answering ``TaskExecStart`` (the process
        already running): how a test makes the worker's timeout kill win the race against
        the SDK's deadline for certain."""
        return self.state.exec_start_delay

    @exec_start_delay.setter
    def exec_start_delay(self, value: float) -> None:
        self.state.exec_start_delay = value

    @property
    def stdio_read_delay(self) -> float:
        """Seconds each ``TaskExecStdioRead`` waits before it streams anything: output
        reaching the SDK after the exit was reported, as under load."""
        return self.state.stdio_read_delay

    @stdio_read_delay.setter
    def stdio_read_delay(self, value: float) -> None:
        self.state.stdio_read_delay = value

    @property
    def list_delay(self) -> float:
        """Seconds ``SandboxListV2`` holds back its answer, computed on arrival: a listing
        that lags behind creates, as a loaded service's does; how a test lets two callers
        both find nothing and create at once."""
        return self.state.list_delay

    @list_delay.setter
    def list_delay(self, value: float) -> None:
        self.state.list_delay = value

    @property
    def listing_lag(self) -> float:
        """Seconds after its creation a sandbox first shows in ``SandboxListV2``: a listing
        is served from a store a create reaches later, so it is eventually consistent.
        Small by default; 0 for a test that needs the listing calm."""
        return self.state.listing_lag

    @listing_lag.setter
    def listing_lag(self, value: float) -> None:
        self.state.listing_lag = value

    @property
    def latency(self) -> float:
        """Seconds every RPC waits before it is handled."""
        return self.state.latency

    @latency.setter
    def latency(self, value: float) -> None:
        self.state.latency = value

    @property
    def unprivileged_execs(self) -> bool:
        """Whether execs (commands, and the file API's ``modal-sandbox-fs-tools``) run as a
        user whom mode bits bind: a sandbox whose image sets a ``USER`` other than root.
        Modal runs an exec as the image's user, root in the images ``modal.Image`` builds
        from its own bases, so by default the fake runs them with root's powers (that is,
        the tests' user's); set, it drops root's bypass (tests/providers/fake_users.py)."""
        return self.state.unprivileged_execs

    @unprivileged_execs.setter
    def unprivileged_execs(self, value: bool) -> None:
        self.state.unprivileged_execs = value

    def env(self) -> dict[str, str]:
        """Environment variables that point the modal SDK here."""
        return {
            "MODAL_SERVER_URL": self.url,
            "MODAL_TOKEN_ID": self.token_id,
            "MODAL_TOKEN_SECRET": self.token_secret,
        }

    def sandbox_directory(self, sandbox_id: str) -> Path:
        return self.call(lambda: self.state.sandbox(sandbox_id).directory)

    def definition(self, sandbox_id: str) -> api_pb2.Sandbox:
        """The definition (lifetime, idle timeout, name...) the sandbox was created with."""
        return self.call(lambda: self.state.sandbox(sandbox_id).definition)

    def expire(self, sandbox_id: str) -> None:
        """End a sandbox as the platform does when its lifetime runs out."""
        timeout = api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT
        self.call(lambda: self.state.finish(self.state.sandbox(sandbox_id), timeout, "Sandbox timed out"))

    def call(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the server's loop (the state is not thread-safe) and return its value."""

        async def run() -> _T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def fail(self, rpc: str, status: Status, *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``rpc`` (e.g. ``"SandboxCreateV2"``) with ``status``:
        how tests reach the SDK's error paths (rate limits, outages). ``times=0`` cancels."""

        def plan() -> None:
            self.state.failures.pop(rpc, None)
            if times > 0:
                self.state.failures[rpc] = (status, times)

        self.call(plan)

    def calls(self) -> Counter[str]:
        """How many times each RPC was received so far (a copy): subtract two of them to
        count an operation's round trips."""
        return self.call(lambda: Counter(self.state.calls))

    async def _on_request(self, event: RecvRequest) -> None:
        """Count the request, and answer it with a planned failure if there is one."""
        rpc = event.method_name.rsplit("/", 1)[-1]
        self.state.calls[rpc] += 1
        if self.state.latency:
            await asyncio.sleep(self.state.latency)
        planned = self.state.failures.pop(rpc, None)
        if planned is None:
            return
        status, times = planned
        if times > 1:
            self.state.failures[rpc] = (status, times - 1)

        async def failing(stream: Stream[Any, Any]) -> None:
            raise GRPCError(status, f"injected {status.name} for {rpc}")

        event.method_func = failing

    def start(self) -> None:
        self._thread.start()

        # IPPROTO_TCP spelled out: asyncio only sets TCP_NODELAY on sockets that say so,
        # and without it every RPC waits ~40 ms for a delayed ACK.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        listener.bind(("127.0.0.1", 0))
        self.port = int(listener.getsockname()[1])

        async def serve() -> None:
            self._server = Server([_ControlPlane(self.state), _CommandRouter(self.state)])
            listen(self._server, RecvRequest, self._on_request)
            await self._server.start(sock=listener)

        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(timeout=10)
        self.state.router_url = self.url

    def stop(self) -> None:
        async def shutdown() -> None:
            for sandbox in list(self.state.sandboxes.values()):
                self.state.finish(sandbox, api_pb2.GenericResult.GENERIC_STATUS_TERMINATED, "server stopped")
            tasks = [
                t for sb in self.state.sandboxes.values() for proc in sb.execs.values() for t in proc.tasks
            ]
            if tasks:
                await asyncio.wait(tasks, timeout=5)
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._tempdir.cleanup()

    @contextlib.contextmanager
    def running(self) -> Iterator[FakeModalServer]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


def serve_until_stdin_closes() -> None:
    """Run the fake in a process of its own (``python -m tests.providers.modal.fake_server``):
    print one JSON line with its URL and tokens, serve until standard input closes. A test
    that measures the client's own memory uses it, so the fake's buffers are not counted."""
    with FakeModalServer().running() as server:
        address = {"url": server.url, "token_id": server.token_id, "token_secret": server.token_secret}
        print(json.dumps(address), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    serve_until_stdin_closes()


__all__ = ["FS_TOOLS_PATH", "FakeModalServer", "serve_until_stdin_closes"]
