"""A fake E2B service on 127.0.0.1 that does real work, for testing the real ``e2b`` SDK offline.

One ASGI app answers both base URLs the SDK takes (``api_url`` and
``sandbox_url``), so a test points both at :attr:`FakeE2BServer.url`.

Control plane (REST, ``X-API-KEY`` checked, errors as ``{"code", "message"}``):

- ``POST /v2/sandboxes``: create; ``templateID``, ``timeout`` (seconds, default
  15 as in the real API: ``NewSandbox.timeout``'s ``default: 15`` in e2b-dev/infra
  spec/openapi.yml, ``SandboxTimeoutDefault`` in
  packages/api/internal/sandbox/sandboxtypes/states.go), ``metadata`` and
  ``envVars`` are honoured.
- ``POST /v2/sandboxes/{id}/connect``: 200 for a running sandbox, extending its
  end time when the new timeout is longer (never shortening it: the SDK's
  ``Sandbox.connect`` docstring, e2b/sandbox_sync/main.py:279); 404 when it does
  not exist.
- ``GET /v2/sandboxes``: list by start time (``order`` asc or desc) with the
  ``metadata`` filter (the SDK's doubly-encoded query), ``state``, ``limit`` and
  ``nextToken``; the next page's token comes back in ``x-next-token``.
- ``GET /sandboxes/{id}``: details; ``DELETE /sandboxes/{id}``: kill (204, or 404);
  ``POST /sandboxes/{id}/timeout``: set the time to live, longer or shorter
  ("can extend or reduce", ``Sandbox.set_timeout``'s docstring,
  e2b/sandbox_sync/main.py:574; the API calls ``KeepAliveFor`` with
  ``allowShorter`` true, e2b-dev/infra packages/api/internal/handlers/sandbox_timeout.go).

Lifetimes as the service keeps them: a sandbox is killed at its end time, used
or not (only connect and set_timeout move it), when a timer fires: its
processes get SIGKILL, its directory is removed, and it is gone from every
route. ``max_lifetime`` is the team's maximum uptime (24 hours on Pro): a
create or connect ``timeout`` over it is a 400 "Timeout cannot be greater than
N hours" (packages/api/internal/handlers/sandbox_create.go and
sandbox_connect.go), and set_timeout never moves the end past start plus that
maximum, answering 400 once the uptime is past it (``getMaxAllowedTTL`` and
``errMaxInstanceLengthExceeded`` in packages/api/internal/orchestrator/keep_alive.go).

Sandbox daemon (envd), chosen by the ``E2b-Sandbox-Id`` header and guarded by
``X-Access-Token``; an unknown or dead sandbox gets the proxy's 502 "was not
found":

- ``GET /health``; ``GET /files`` (download) and ``POST /files`` (multipart or
  octet-stream upload, parents created), with envd's status codes: 404 missing,
  400 a directory, 500 other OS errors (``GetFiles`` in
  packages/envd/internal/api/download.go: ``os.ErrNotExist`` 404, ``IsDir`` 400,
  any other stat or open error 500; ``processFile`` in api/upload.go: a
  directory 400, making parents or opening 500).
- Connect RPC ``process.Process``: ``Start`` (server stream), ``SendSignal`` and
  ``List``; ``filesystem.Filesystem``: ``Stat``, ``MakeDir``, ``Move``,
  ``Remove`` and ``ListDir`` (depth 1). Both are the SDK's own generated ASGI
  applications, so the wire format is right by construction; every other RPC
  answers UNIMPLEMENTED.

Commands run for real: ``Start`` spawns the requested argv (the SDK sends
``/bin/bash -l -c <cmd>``) with envd's environment
(``PATH``, ``HOME``, ``USER``, ``LOGNAME``, the sandbox's ``envVars``, then the
request's ``envs``), in ``cwd`` (INVALID_ARGUMENT when it does not exist), stdin
on ``/dev/null`` unless asked for. Like envd, the command stays in the daemon's
process group: envd's ``SysProcAttr`` sets credentials and a cgroup, no
``Setsid`` or ``Setpgid`` (e2b-dev/infra
packages/envd/internal/services/process/handler/handler.go, ``New``). The
``Connect-Timeout-Ms`` deadline and ``SendSignal`` reach the command's own
process only, not what it started (Go's ``exec.CommandContext`` kills
``cmd.Process``; ``Handler.SendSignal`` signals ``p.cmd.Process``), and a
client that goes away does not kill the command ("We do not want the command
to be killed if the request context is cancelled":
packages/envd/internal/services/process/start.go, ``handleStart``). The end
event is Go's: exit code -1 after a signal, with ``ProcessState.String()``
(``signal: killed``) as its status and error (``Handler.Wait``);
``end_form`` switches to the form a command re-adopted after an envd upgrade
ends with (128 + N, no error) or to one no envd sends (-1, nothing named).
``commands_lead_group`` makes each command lead a process group of its own,
which envd does not do: it tests that the provider is right either way.

Error messages carry Go's errno texts (``open /a: permission denied``), and
renaming onto a directory fails with "file exists", as Go's ``os.Rename`` does
(it checks the destination first and never moves *into* a directory, as
Python's ``shutil.move`` would; envd's ``Move`` is ``os.Rename`` after
``permissions.EnsureDirs``: packages/envd/internal/services/filesystem/move.go);
a parent that is a file is envd's own "path is a file: <it>" (a 500 on upload,
INTERNAL on move: permissions/path.go, api/upload.go ``processFile``). The
kit's ``test_mixed_upload_batch_reports_each_item`` rests on exactly these: an
upload is a write to a hidden name beside the target, then ``Move`` onto it,
so "onto a directory" is a failed rename (``is_directory`` once the provider
looks) and "below a file" a failed write; a fake that moves into a directory,
or writes below a file, answers what envd never does.

The kit's bounded-memory stream test counts this process, the fake included:
it passes because the fake, like envd, holds back a command's output while the
stream is not read (see ``_ProcessService.start``); a fake that reads the
command's pipes into memory as fast as they fill measures its own buffer, not
the client's (the SDK reads the stream through httpx as it is iterated).
Tests inject control-plane failures with :meth:`FakeE2BServer.fail_next`
(sent with ``Should-Retry: false`` unless asked, so the SDK does not retry).

Each sandbox owns a temporary directory that is its home and default working
directory; relative paths and ``~`` resolve against it. The fake does not
isolate: absolute paths are host paths and commands run as the test's user, so
tests keep to the sandbox's home. Users as on E2B: envd runs as root
(``User=root``, packages/orchestrator/pkg/template/build/core/rootfs/files/envd.service.tpl),
so its file API (``/files``, ``filesystem.Filesystem``) reads and writes
through any mode bits, and here too; commands run as the template's user,
``user`` by default (``SysProcAttr.Credential`` in ``handler.New``;
https://e2b.dev/docs/template/user-and-workdir), for whom mode bits hold: here,
with ``unprivileged_commands``, without root's bypass (tests/providers/fake_users.py
says why not by default).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import email.parser
import email.policy
import os
import secrets
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import uvicorn
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from e2b.envd.client_shared import ENVD_JSON_CODEC
from e2b.envd.filesystem import filesystem_connect, filesystem_pb
from e2b.envd.process import process_connect, process_pb
from protobuf import Oneof
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.providers.fake_users import without_root_bypass

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]

ENVD_VERSION = "0.6.4"
DEFAULT_TIMEOUT_SECONDS = 15
#: E2B Pro's maximum sandbox uptime (the SDK's ``Sandbox.create`` docstring).
MAX_LIFETIME_SECONDS = 86_400
DEFAULT_PAGE_LIMIT = 100
#: Seconds each request waits by default (``FakeE2BServer.latency``): a service is never instant.
DEFAULT_LATENCY_SECONDS = 0.002
#: Seconds a new sandbox stays out of the listing by default (``FakeE2BServer.listing_lag``).
DEFAULT_LISTING_LAG_SECONDS = 0.2
CHUNK_SIZE = 32 * 1024
#: Output events envd holds for a command's stream before its readers wait (``outputBufferSize``).
OUTPUT_EVENTS = 64
PROCESS_ROUTE = "/process.Process/"
FILESYSTEM_ROUTE = "/filesystem.Filesystem/"
#: The forms of envd's end event (:func:`_end_event`).
EndForm = Literal["live", "readopted", "unnamed"]


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status, headers=headers)


@dataclass
class FakeSandbox:
    """One sandbox: its identity, its home directory and its running processes."""

    sandbox_id: str
    template_id: str
    home: Path
    metadata: dict[str, str]
    env_vars: dict[str, str]
    started_at: dt.datetime
    end_at: dt.datetime
    access_token: str
    #: ``time.monotonic()`` from which ``GET /v2/sandboxes`` shows it.
    listed_from: float = 0.0
    processes: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)

    def resolve(self, path: str) -> Path:
        """Resolve a path the way envd does: ``~`` and relative paths against home."""
        if path == "~" or path.startswith("~/"):
            path = str(self.home) + path[1:]
        resolved = Path(path) if path.startswith("/") else self.home / path
        return Path(os.path.normpath(resolved))

    def kill_processes(self) -> None:
        """Everything the sandbox runs dies with it: each command's own process
        group when it made one (never the fake's), else the command itself."""
        for process in list(self.processes.values()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                group = os.getpgid(process.pid)
                if group != os.getpgrp():
                    os.killpg(group, signal.SIGKILL)
            _kill(process, signal.SIGKILL)


def _kill(process: asyncio.subprocess.Process, number: int = signal.SIGKILL) -> None:
    """Signal the command's own process only, as envd does (Go's ``exec.CommandContext``).
    ``os.kill`` rather than the transport, so any thread may call it."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, number)


@dataclass
class InjectedError:
    """A REST error the next matching requests answer with (see :meth:`FakeE2BServer.fail_next`)."""

    status: int
    message: str
    remaining: int
    retry: bool


class FakeE2BServer:
    """The fake service: state, the ASGI app, and a uvicorn server on an ephemeral loopback port."""

    def __init__(self, *, api_key: str, base_dir: Path, max_lifetime: int = MAX_LIFETIME_SECONDS) -> None:
        self.api_key = api_key
        self.base_dir = base_dir
        self.max_lifetime = max_lifetime
        self.commands_lead_group = False
        self.end_form: EndForm = "live"
        #: Commands run as E2B's ``user`` would: without root's bypass of mode bits.
        self.unprivileged_commands = False
        #: Seconds every request waits before it is handled: a network's, kept small.
        self.latency = DEFAULT_LATENCY_SECONDS
        #: Seconds after its creation a sandbox first shows in ``GET /v2/sandboxes``
        #: (eventually consistent); 0 for a test that needs the listing calm.
        self.listing_lag = DEFAULT_LISTING_LAG_SECONDS
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.requests: list[tuple[str, str]] = []
        self._injected: list[InjectedError] = []
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.url = ""
        self.app = self._build_app()

    # -- test controls -------------------------------------------------

    def argv(self, argv: list[str]) -> list[str]:
        """How a command's argv is run: as it is, or with ``unprivileged_commands``
        without root's bypass of mode bits (tests/providers/fake_users.py)."""
        return without_root_bypass(argv) if self.unprivileged_commands else argv

    def fail_next(
        self, status: int, message: str = "injected failure", *, count: int = 1, retry: bool = False
    ) -> None:
        """Answer the next ``count`` control-plane requests with ``status``.

        ``retry`` sets the ``Should-Retry`` header the SDK obeys, so a test of a
        non-retried error does not wait through the SDK's backoff."""
        with self._lock:
            self._injected.append(InjectedError(status, message, count, retry))

    def sandbox(self, sandbox_id: str) -> FakeSandbox:
        """The live sandbox with this id (KeyError once killed or expired). For
        tests, from their own thread: it reads the state and never changes it."""
        sandbox = self.sandboxes[sandbox_id]
        if sandbox.end_at <= dt.datetime.now(dt.UTC):
            raise KeyError(sandbox_id)
        return sandbox

    # -- lifecycle -----------------------------------------------------

    def start(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        # envd keeps an idle connection 640 s (``idleTimeout``, the http.Server's
        # IdleTimeout, packages/envd/main.go in e2b-dev/infra); uvicorn's default of 5 s
        # raced the SDK client's pooled connections: a request sent on one the fake was
        # closing was reset (inspect's self_check waits 5 s between two commands)
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_level="warning",
            http="h11",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=640,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="fake-e2b")
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake E2B server did not start")
            time.sleep(0.01)
        self._server, self._thread, self._socket = server, thread, sock
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.url

    def stop(self) -> None:
        """Kill every sandbox's processes, stop serving, then remove the sandboxes' files."""
        for sandbox in list(self.sandboxes.values()):
            sandbox.kill_processes()
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()
        for sandbox in list(self.sandboxes.values()):
            self._destroy(sandbox)

    # -- state ---------------------------------------------------------

    def _destroy(self, sandbox: FakeSandbox) -> None:
        self.sandboxes.pop(sandbox.sandbox_id, None)
        sandbox.kill_processes()
        shutil.rmtree(sandbox.home, ignore_errors=True)

    def _reap_expired(self) -> None:
        now = dt.datetime.now(dt.UTC)
        for sandbox in list(self.sandboxes.values()):
            if sandbox.end_at <= now:
                self._destroy(sandbox)

    def _live(self, sandbox_id: str) -> FakeSandbox | None:
        self._reap_expired()
        return self.sandboxes.get(sandbox_id)

    def _set_end(self, sandbox: FakeSandbox, end_at: dt.datetime) -> None:
        """Move the sandbox's end and arm a timer that kills it then (a stale timer
        finds it alive with a later end and does nothing)."""
        sandbox.end_at = end_at
        delay = (end_at - dt.datetime.now(dt.UTC)).total_seconds()
        asyncio.get_running_loop().call_later(max(delay, 0) + 0.01, self._reap_expired)

    def _over_maximum(self, body: dict[str, Any]) -> Response | None:
        """The API's answer to a create or connect timeout over the team's maximum uptime."""
        if "timeout" in body and int(body["timeout"]) > self.max_lifetime:
            return _error(400, f"Timeout cannot be greater than {self.max_lifetime // 3600} hours")
        return None

    # -- app -----------------------------------------------------------

    def _build_app(self) -> ASGIApp:
        rest = Starlette(
            routes=[
                Route("/v2/sandboxes", self._create, methods=["POST"]),
                Route("/v2/sandboxes", self._list, methods=["GET"]),
                Route("/v2/sandboxes/{sandbox_id}/connect", self._connect, methods=["POST"]),
                Route("/sandboxes/{sandbox_id}", self._detail, methods=["GET"]),
                Route("/sandboxes/{sandbox_id}", self._kill, methods=["DELETE"]),
                Route("/sandboxes/{sandbox_id}/timeout", self._set_timeout, methods=["POST"]),
                Route("/health", self._health, methods=["GET"]),
                Route("/files", self._download, methods=["GET"]),
                Route("/files", self._upload, methods=["POST"]),
            ]
        )
        process_app = process_connect.ProcessASGIApplication(_ProcessService(self), codecs=[ENVD_JSON_CODEC])
        filesystem_app = filesystem_connect.FilesystemASGIApplication(
            _FilesystemService(self), codecs=[ENVD_JSON_CODEC]
        )

        async def app(
            scope: MutableMapping[str, Any],
            receive: Callable[[], Awaitable[Any]],
            send: Callable[[Any], Awaitable[None]],
        ) -> None:
            if scope["type"] != "http":
                return
            if self.latency:
                await asyncio.sleep(self.latency)
            path: str = scope["path"]
            self.requests.append((scope["method"], path))
            if path.startswith((PROCESS_ROUTE, FILESYSTEM_ROUTE)):
                refusal = self._envd_refusal(_headers(scope))
                if refusal is not None:
                    await refusal(scope, receive, send)
                    return
                target = process_app if path.startswith(PROCESS_ROUTE) else filesystem_app
                await target(scope, receive, send)
                return
            await rest(scope, receive, send)

        return app

    def _envd_refusal(self, headers: dict[str, str]) -> Response | None:
        """The proxy's and envd's answer when the request may not reach a sandbox, else None."""
        sandbox_id = headers.get("e2b-sandbox-id", "")
        sandbox = self._live(sandbox_id)
        if sandbox is None:
            return _error(502, f"The sandbox {sandbox_id} was not found")
        if headers.get("x-access-token") != sandbox.access_token:
            return _error(401, "unauthorized access, please provide a valid access token")
        return None

    def _api_refusal(self, request: Request) -> Response | None:
        if request.headers.get("x-api-key") != self.api_key:
            return _error(401, "Invalid API key")
        with self._lock:
            if self._injected:
                injected = self._injected[0]
                injected.remaining -= 1
                if injected.remaining <= 0:
                    self._injected.pop(0)
                return _error(
                    injected.status, injected.message, {"Should-Retry": "true" if injected.retry else "false"}
                )
        return None

    def _sandbox_json(self, sandbox: FakeSandbox) -> dict[str, Any]:
        return {
            "templateID": sandbox.template_id,
            "sandboxID": sandbox.sandbox_id,
            "clientID": "fake-client",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": sandbox.access_token,
        }

    def _listed_json(self, sandbox: FakeSandbox) -> dict[str, Any]:
        return {
            "templateID": sandbox.template_id,
            "sandboxID": sandbox.sandbox_id,
            "clientID": "fake-client",
            "startedAt": _iso(sandbox.started_at),
            "endAt": _iso(sandbox.end_at),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "state": "running",
            "envdVersion": ENVD_VERSION,
            "metadata": sandbox.metadata,
        }

    # -- REST handlers -------------------------------------------------

    async def _create(self, request: Request) -> Response:
        if (refusal := self._api_refusal(request)) is not None:
            return refusal
        body = await request.json()
        if (refusal := self._over_maximum(body)) is not None:
            return refusal
        timeout = int(body.get("timeout", DEFAULT_TIMEOUT_SECONDS))
        sandbox_id = "i" + secrets.token_hex(10)
        home = Path(tempfile.mkdtemp(prefix=f"{sandbox_id}-", dir=self.base_dir))
        now = dt.datetime.now(dt.UTC)
        sandbox = FakeSandbox(
            sandbox_id=sandbox_id,
            template_id=str(body["templateID"]),
            home=home,
            metadata=dict(body.get("metadata") or {}),
            env_vars=dict(body.get("envVars") or {}),
            started_at=now,
            end_at=now,
            access_token=secrets.token_hex(16),
            listed_from=time.monotonic() + self.listing_lag,
        )
        self._set_end(sandbox, now + dt.timedelta(seconds=timeout))
        self.sandboxes[sandbox_id] = sandbox
        return JSONResponse(self._sandbox_json(sandbox), status_code=201)

    async def _connect(self, request: Request) -> Response:
        if (refusal := self._api_refusal(request)) is not None:
            return refusal
        sandbox = self._live(request.path_params["sandbox_id"])
        if sandbox is None:
            return _error(404, f'sandbox "{request.path_params["sandbox_id"]}" doesn\'t exist')
        body = await request.json()
        if (refusal := self._over_maximum(body)) is not None:
            return refusal
        if "timeout" in body:
            wanted = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=int(body["timeout"]))
            self._set_end(sandbox, max(sandbox.end_at, wanted))
        return JSONResponse(self._sandbox_json(sandbox), status_code=200)

    async def _list(self, request: Request) -> Response:
        if (refusal := self._api_refusal(request)) is not None:
            return refusal
        self._reap_expired()
        wanted: dict[str, str] = {}
        if raw := request.query_params.get("metadata"):
            wanted = {
                urllib.parse.unquote(k): urllib.parse.unquote(v)
                for k, v in urllib.parse.parse_qsl(raw, keep_blank_values=True)
            }
        states = request.query_params.get("state", "running,paused").split(",")
        limit = int(request.query_params.get("limit", DEFAULT_PAGE_LIMIT))
        if limit < 1:
            return _error(400, "limit must be positive")
        matching = sorted(
            (
                s
                for s in self.sandboxes.values()
                if "running" in states
                and s.listed_from <= time.monotonic()
                and all(s.metadata.get(k) == v for k, v in wanted.items())
            ),
            key=lambda s: (s.started_at, s.sandbox_id),
            reverse=request.query_params.get("order") == "desc",
        )
        start = 0
        if token := request.query_params.get("nextToken"):
            try:
                start = int(base64.urlsafe_b64decode(token.encode()).decode())
            except ValueError:
                return _error(400, "invalid next token")
        page = matching[start : start + limit]
        headers = {}
        if start + limit < len(matching):
            headers["x-next-token"] = base64.urlsafe_b64encode(str(start + limit).encode()).decode()
        return JSONResponse([self._listed_json(s) for s in page], headers=headers)

    async def _detail(self, request: Request) -> Response:
        if (refusal := self._api_refusal(request)) is not None:
            return refusal
        sandbox = self._live(request.path_params["sandbox_id"])
        if sandbox is None:
            return _error(404, f'sandbox "{request.path_params["sandbox_id"]}" doesn\'t exist')
        return JSONResponse({**self._listed_json(sandbox), "envdAccessToken": sandbox.access_token})

    async def _kill(self, request: Request) -> Response:
        if (refusal := self._api_refusal(request)) is not None:
            return refusal
        sandbox = self._live(request.path_params["sandbox_id"])
        if sandbox is None:
            return _error(404, f'sandbox "{request.path_params["sandbox_id"]}" doesn\'t exist')
        self._destroy(sandbox)
        return Response(status_code=204)

    async def _set_timeout(self, request: Request) -> Response:
        if (refusal := self._api_refusal(request)) is not None:
            return refusal
        sandbox = self._live(request.path_params["sandbox_id"])
        if sandbox is None:
            return _error(404, f'sandbox "{request.path_params["sandbox_id"]}" doesn\'t exist')
        body = await request.json()
        now = dt.datetime.now(dt.UTC)
        last = sandbox.started_at + dt.timedelta(seconds=self.max_lifetime)
        if now > last:
            return _error(400, "Max instance length exceeded")
        self._set_end(sandbox, min(now + dt.timedelta(seconds=max(int(body["timeout"]), 0)), last))
        return Response(status_code=204)

    # -- envd HTTP handlers --------------------------------------------

    async def _health(self, request: Request) -> Response:
        refusal = self._envd_refusal(dict(request.headers))
        return refusal if refusal is not None else Response(status_code=204)

    async def _download(self, request: Request) -> Response:
        if (refusal := self._envd_refusal(dict(request.headers))) is not None:
            return refusal
        sandbox = self.sandboxes[request.headers["e2b-sandbox-id"]]
        path = sandbox.resolve(request.query_params.get("path", ""))
        try:
            info = path.stat()
        except FileNotFoundError:
            return _error(404, f"path '{path}' does not exist")
        except OSError as exc:
            return _error(500, f"error checking if path exists '{path}': {_go_error('stat', exc)}")
        if stat.S_ISDIR(info.st_mode):
            return _error(400, f"path '{path}' is a directory")
        try:
            content = path.read_bytes()
        except OSError as exc:
            return _error(500, f"error opening file '{path}': {_go_error('open', exc)}")
        return Response(content, media_type="application/octet-stream")

    async def _upload(self, request: Request) -> Response:
        if (refusal := self._envd_refusal(dict(request.headers))) is not None:
            return refusal
        sandbox = self.sandboxes[request.headers["e2b-sandbox-id"]]
        query_path = request.query_params.get("path")
        body = await request.body()
        media_type = request.headers.get("content-type", "").split(";")[0].strip()
        if media_type == "application/octet-stream":
            if query_path is None:
                return _error(400, "path query parameter is required for raw body upload")
            parts = [(query_path, body)]
        elif media_type.startswith("multipart/"):
            parts = _multipart_files(request.headers["content-type"], body, query_path)
        else:
            return _error(400, f"unsupported content type: {media_type}")
        written: list[dict[str, str]] = []
        for raw_path, content in parts:
            path = sandbox.resolve(raw_path)
            if any(entry["path"] == str(path) for entry in written):
                return _error(400, f"you cannot upload multiple files to the same path '{path}'")
            status, message = _write_file(path, content)
            if status != 200:
                return _error(status, message)
            written.append({"path": str(path), "name": path.name, "type": "file"})
        return JSONResponse(written)


def _go_error(op: str, exc: OSError) -> str:
    """An OS error as Go's ``*PathError`` prints it (``open /a: permission denied``),
    the form envd's messages carry."""
    text = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    return f"{op} {exc.filename}: {text}" if exc.filename else text


def _headers(scope: MutableMapping[str, Any]) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _multipart_files(content_type: str, body: bytes, query_path: str | None) -> list[tuple[str, bytes]]:
    """The ``file`` parts of a multipart body as (path, content); the path is the
    query's when given, else the part's file name, as envd does."""
    parser = email.parser.BytesParser(policy=email.policy.HTTP)
    message = parser.parsebytes(b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    files: list[tuple[str, bytes]] = []
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") != "file":
            continue
        payload = part.get_payload(decode=True)
        content = payload if isinstance(payload, bytes) else b""
        files.append((query_path if query_path is not None else part.get_filename() or "", content))
    return files


def _ensure_dirs(directory: Path) -> str | None:
    """envd's ``permissions.EnsureDirs``: each ancestor from the root is
    stat'ed and made when missing; an ancestor that is not a directory is
    "path is a file: <it>" (e2b-dev/infra packages/envd/internal/permissions/path.go).
    Its error text, or None."""
    for ancestor in [*reversed(directory.parents), directory]:
        if ancestor.exists():
            if not ancestor.is_dir():
                return f"path is a file: {ancestor}"
            continue
        try:
            ancestor.mkdir()
        except FileExistsError:
            continue  # made meanwhile (``os.IsExist``)
        except OSError as exc:
            return f"failed to create directory: {_go_error('mkdir', exc)}"
    return None


def _write_file(path: Path, content: bytes) -> tuple[int, str]:
    """Write in place (truncate, then write) with parents created, as envd's
    ``processFile`` does (packages/envd/internal/api/upload.go): a failure to
    make the parents is a 500, a directory in the way a 400; (status, message)."""
    if (failure := _ensure_dirs(path.parent)) is not None:
        return 500, f"error ensuring directories: {failure}"
    if path.is_dir():
        return 400, f"path is a directory: {path}"
    try:
        with open(path, "wb") as handle:
            handle.write(content)
    except OSError as exc:
        return 500, f"error opening file: {_go_error('open', exc)}"
    return 200, ""


def _sandbox_of(fake: FakeE2BServer, ctx: RequestContext[Any, Any]) -> FakeSandbox:
    sandbox = fake.sandboxes.get(ctx.request_headers.get("e2b-sandbox-id", ""))
    if sandbox is None:
        raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found")
    return sandbox


def _end_event(returncode: int, form: EndForm = "live") -> process_pb.ProcessEvent.EndEvent:
    """envd's end event of a command that ended with ``returncode`` (negative: killed by that signal).

    ``live``, the path every command takes (``Handler.Wait``, e2b-dev/infra
    packages/envd/internal/services/process/handler/handler.go): Go's
    ``ProcessState.ExitCode()`` (-1 after a signal), ``Exited()``,
    ``String()`` as the status, and ``cmd.Wait()``'s error text as the error
    (set for any non-zero end). Go names a signal as the C library's
    ``strsignal`` does, lower-cased ("signal: killed", "signal: terminated":
    go/src/syscall/zerrors_linux_amd64.go).

    ``readopted``, a command that outlived an envd live upgrade and was
    reaped by the new envd (``Handler.reapByPidfd``, handler/readopt.go): exit
    code ``128 + int(ws.Signal())`` and the signal's name alone as the status
    after a signal, status "exited" after an exit, never an error.

    ``unnamed``: -1 after a signal with neither status nor error, which no
    envd sends; a server built from the SDK alone might."""
    signalled = returncode < 0
    if form == "readopted":
        if signalled:
            name = _go_signal_name(-returncode)
            return process_pb.ProcessEvent.EndEvent(exit_code=128 - returncode, exited=False, status=name)
        return process_pb.ProcessEvent.EndEvent(exit_code=returncode, exited=True, status="exited")
    if signalled and form == "unnamed":
        return process_pb.ProcessEvent.EndEvent(exit_code=-1, exited=False)
    if signalled:
        text = f"signal: {_go_signal_name(-returncode)}"
        return process_pb.ProcessEvent.EndEvent(exit_code=-1, exited=False, status=text, error=text)
    text = f"exit status {returncode}"
    return process_pb.ProcessEvent.EndEvent(
        exit_code=returncode, exited=True, status=text, error=text if returncode else None
    )


def _go_signal_name(number: int) -> str:
    """Go's ``syscall.Signal.String()``: the C library's description, lower-cased first letter."""
    description = signal.strsignal(number) or f"Signal {number}"
    return f"{description[0].lower()}{description[1:]}"


def _start_response(event: Any) -> process_pb.StartResponse:
    return process_pb.StartResponse(event=process_pb.ProcessEvent(event=event))


class _ProcessService(process_connect.Process):
    """envd's process service: real subprocesses, streamed output, deadline kills."""

    def __init__(self, fake: FakeE2BServer) -> None:
        self._fake = fake

    async def start(
        self,
        request: process_pb.StartRequest,
        ctx: RequestContext[process_pb.StartRequest, process_pb.StartResponse],
    ) -> AsyncIterator[process_pb.StartResponse]:
        sandbox = _sandbox_of(self._fake, ctx)
        config = request.process
        if config is None or not config.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "process config is required")
        if request.pty is not None:
            raise ConnectError(Code.UNIMPLEMENTED, "the fake does not run PTYs")
        cwd = sandbox.resolve(config.cwd) if config.has_field("cwd") and config.cwd else sandbox.home
        if not cwd.exists():
            raise ConnectError(Code.INVALID_ARGUMENT, f"cwd '{cwd}' does not exist")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(sandbox.home),
            "USER": "user",
            "LOGNAME": "user",
            **sandbox.env_vars,
            **dict(config.envs),
        }
        timeout_header = ctx.request_headers.get("connect-timeout-ms")
        try:
            timeout = int(timeout_header) / 1000 if timeout_header else 0.0
        except ValueError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, str(exc)) from exc
        try:
            process = await asyncio.create_subprocess_exec(
                *self._fake.argv([config.cmd, *config.args]),
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.PIPE if request.stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                process_group=0 if self._fake.commands_lead_group else None,
            )
        except OSError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"error starting process: {exc}") from exc
        sandbox.processes[process.pid] = process
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(timeout, _kill, process) if timeout > 0 else None
        # Output waits for the stream, as envd's does: its readers send each
        # chunk (32 KiB at most) into a channel of 64 events and block while it
        # is full ("blocked on a full Source channel send (back-pressure)"), and
        # the fan-out hands each on to the stream's unbuffered channel
        # (e2b-dev/infra packages/envd/internal/services/process/handler/
        # handler.go at 0000635: ``outputBufferSize = 64``, ``stdChunkSize``, the
        # readers' ``outMultiplex.Source <- event`` in ``New``, the comment in
        # ``Wait``; multiplex.go at 0527eb5, ``run``'s ``s.ch <- v``, line 67).
        # So a fast writer fills its pipe and waits, however slowly the client reads.
        queue: asyncio.Queue[process_pb.ProcessEvent.DataEvent | None] = asyncio.Queue(maxsize=OUTPUT_EVENTS)

        async def pump(stream: asyncio.StreamReader | None, is_stdout: bool) -> None:
            assert stream is not None
            while chunk := await stream.read(CHUNK_SIZE):
                if is_stdout:
                    out: Oneof[Literal["stdout"], bytes] = Oneof("stdout", chunk)
                    event = process_pb.ProcessEvent.DataEvent(output=out)
                else:
                    err: Oneof[Literal["stderr"], bytes] = Oneof("stderr", chunk)
                    event = process_pb.ProcessEvent.DataEvent(output=err)
                await queue.put(event)
            await queue.put(None)

        pumps = [
            asyncio.create_task(pump(process.stdout, True)),
            asyncio.create_task(pump(process.stderr, False)),
        ]
        try:
            yield _start_response(Oneof("start", process_pb.ProcessEvent.StartEvent(pid=process.pid)))
            open_streams = len(pumps)
            while open_streams:
                item = await queue.get()
                if item is None:
                    open_streams -= 1
                    continue
                yield _start_response(Oneof("data", item))
            returncode = await process.wait()
            yield _start_response(Oneof("end", _end_event(returncode, self._fake.end_form)))
        finally:
            if deadline is not None:
                deadline.cancel()
            for task in pumps:
                task.cancel()
            sandbox.processes.pop(process.pid, None)

    async def send_signal(
        self,
        request: process_pb.SendSignalRequest,
        ctx: RequestContext[process_pb.SendSignalRequest, process_pb.SendSignalResponse],
    ) -> process_pb.SendSignalResponse:
        sandbox = _sandbox_of(self._fake, ctx)
        selector = request.process.selector if request.process is not None else None
        pid = selector.value if isinstance(selector, Oneof) and selector.field == "pid" else None
        process = sandbox.processes.get(pid) if isinstance(pid, int) else None
        if process is None:
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        _kill(process, signal.SIGKILL if request.signal == process_pb.Signal.SIGKILL else signal.SIGTERM)
        return process_pb.SendSignalResponse()

    async def list(
        self,
        request: process_pb.ListRequest,
        ctx: RequestContext[process_pb.ListRequest, process_pb.ListResponse],
    ) -> process_pb.ListResponse:
        sandbox = _sandbox_of(self._fake, ctx)
        return process_pb.ListResponse(
            processes=[
                process_pb.ProcessInfo(pid=pid, config=process_pb.ProcessConfig(cmd="/bin/bash"))
                for pid in sandbox.processes
            ]
        )


def _entry(path: Path) -> filesystem_pb.EntryInfo:
    info = path.lstat()
    is_link = stat.S_ISLNK(info.st_mode)
    target_info = path.stat() if is_link and path.exists() else info
    kind = (
        filesystem_pb.FileType.DIRECTORY if stat.S_ISDIR(target_info.st_mode) else filesystem_pb.FileType.FILE
    )
    return filesystem_pb.EntryInfo(
        name=path.name,
        type=kind,
        path=str(path),
        size=info.st_size,
        mode=stat.S_IMODE(info.st_mode),
        permissions=stat.filemode(info.st_mode),
        owner="user",
        group="user",
        modified_time=Timestamp(seconds=int(info.st_mtime), nanos=info.st_mtime_ns % 1_000_000_000),
        symlink_target=os.readlink(path) if is_link else None,
        is_symlink=is_link,
    )


def _stat_or_error(path: Path) -> filesystem_pb.EntryInfo:
    try:
        return _entry(path)
    except FileNotFoundError as exc:
        raise ConnectError(Code.NOT_FOUND, f"file not found: {_go_error('lstat', exc)}") from exc
    except OSError as exc:
        raise ConnectError(Code.INTERNAL, f"error getting file info: {_go_error('lstat', exc)}") from exc


class _FilesystemService(filesystem_connect.Filesystem):
    """envd's filesystem service on the sandbox's real files."""

    def __init__(self, fake: FakeE2BServer) -> None:
        self._fake = fake

    async def stat(
        self,
        request: filesystem_pb.StatRequest,
        ctx: RequestContext[filesystem_pb.StatRequest, filesystem_pb.StatResponse],
    ) -> filesystem_pb.StatResponse:
        sandbox = _sandbox_of(self._fake, ctx)
        return filesystem_pb.StatResponse(entry=_stat_or_error(sandbox.resolve(request.path)))

    async def make_dir(
        self,
        request: filesystem_pb.MakeDirRequest,
        ctx: RequestContext[filesystem_pb.MakeDirRequest, filesystem_pb.MakeDirResponse],
    ) -> filesystem_pb.MakeDirResponse:
        sandbox = _sandbox_of(self._fake, ctx)
        path = sandbox.resolve(request.path)
        if path.is_dir():
            raise ConnectError(Code.ALREADY_EXISTS, f"directory already exists: {path}")
        if path.exists():
            raise ConnectError(Code.INVALID_ARGUMENT, f"path exists but is not a directory: {path}")
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise ConnectError(Code.INTERNAL, f"error creating directory: {_go_error('mkdir', exc)}") from exc
        return filesystem_pb.MakeDirResponse(entry=_entry(path))

    async def move(
        self,
        request: filesystem_pb.MoveRequest,
        ctx: RequestContext[filesystem_pb.MoveRequest, filesystem_pb.MoveResponse],
    ) -> filesystem_pb.MoveResponse:
        sandbox = _sandbox_of(self._fake, ctx)
        source, destination = sandbox.resolve(request.source), sandbox.resolve(request.destination)
        # envd's Move answers EnsureDirs' error as it is (packages/envd/internal/services/filesystem/move.go)
        if (failure := _ensure_dirs(destination.parent)) is not None:
            raise ConnectError(Code.INTERNAL, failure)
        if destination.is_dir() and not destination.is_symlink() and source.exists():
            # Go's os.Rename refuses a directory destination with EEXIST itself.
            raise ConnectError(Code.INTERNAL, f"error renaming: rename {source} {destination}: file exists")
        try:
            os.rename(source, destination)
        except FileNotFoundError as exc:
            raise ConnectError(Code.NOT_FOUND, f"source file not found: {_go_error('rename', exc)}") from exc
        except OSError as exc:
            raise ConnectError(Code.INTERNAL, f"error renaming: {_go_error('rename', exc)}") from exc
        return filesystem_pb.MoveResponse(entry=_entry(destination))

    async def remove(
        self,
        request: filesystem_pb.RemoveRequest,
        ctx: RequestContext[filesystem_pb.RemoveRequest, filesystem_pb.RemoveResponse],
    ) -> filesystem_pb.RemoveResponse:
        sandbox = _sandbox_of(self._fake, ctx)
        path = sandbox.resolve(request.path)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            message = f"error removing file or directory: {_go_error('unlinkat', exc)}"
            raise ConnectError(Code.INTERNAL, message) from exc
        return filesystem_pb.RemoveResponse()

    async def list_dir(
        self,
        request: filesystem_pb.ListDirRequest,
        ctx: RequestContext[filesystem_pb.ListDirRequest, filesystem_pb.ListDirResponse],
    ) -> filesystem_pb.ListDirResponse:
        sandbox = _sandbox_of(self._fake, ctx)
        path = sandbox.resolve(request.path)
        if request.depth > 1:
            raise ConnectError(Code.UNIMPLEMENTED, "the fake lists one level only")
        _stat_or_error(path)
        if not path.is_dir():
            raise ConnectError(Code.INVALID_ARGUMENT, f"path is not a directory: {path}")
        return filesystem_pb.ListDirResponse(entries=[_entry(child) for child in sorted(path.iterdir())])


__all__ = ["FakeE2BServer", "FakeSandbox"]
