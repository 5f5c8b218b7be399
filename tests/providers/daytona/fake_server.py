"""A fake Daytona control plane and toolbox daemon on 127.0.0.1, for testing the real `daytona` SDK offline.

It does real work: every sandbox is a directory under a temporary root, commands run as real
subprocesses, and files are stored on disk. The wire format follows the SDK's generated clients
(`daytona_api_client`, `daytona_toolbox_api_client`) and the daemon's Go handlers
(`apps/daemon/pkg/toolbox/...` in daytonaio/daytona).

Routes served (``{base}`` is ``http://127.0.0.1:<port>``):

Control plane, under ``{base}/api`` (pass it as ``DaytonaConfig(api_url=...)``):
  - ``POST   /sandbox``                          create (body ``CreateSandbox``), answers ``Sandbox``
                                                 in state ``creating``, ``started`` from the next
                                                 request on (``create_seconds`` later): the SDK's
                                                 ``create`` waits for ``started`` when the answer
                                                 is not (``Daytona.create``, daytona/_sync/daytona.py)
  - ``GET    /sandbox``                          list: ``labels`` (JSON object, all must match),
                                                 ``cursor``, ``limit`` -> ``{"items", "nextCursor"}``
  - ``GET    /sandbox/{idOrName}``               get (a deleted one by id: state ``destroyed``),
                                                 404 when unknown
  - ``DELETE /sandbox/{idOrName}``               delete (removes the directory), 404 when unknown
                                                 or already deleted
  - ``GET    /sandbox/{id}/toolbox-proxy-url``   toolbox proxy discovery -> ``{"url": "{base}/toolbox"}``
  - ``POST   /sandbox/{idOrName}/start|stop``    state changes, through ``starting`` /
                                                 ``resuming`` for ``transition_seconds``; start
                                                 refuses (400) while a change is in progress

Lifecycle, as the service runs it (times in fake minutes of ``minute_seconds`` seconds):
  - a started sandbox idle for ``autoStopInterval`` minutes (no toolbox request: the proxy
    records activity, apps/proxy/pkg/proxy/get_sandbox_target.go ``updateLastActivity``) is
    ``stopped``; 0 disables it (CreateSandbox ``autoStopInterval``, daytona_api_client)
  - ``ttlMinutes`` after creation the sandbox is destroyed whatever its state
    (CreateSandbox ``ttlMinutes``: "wall-clock time since creation regardless of sandbox state")
  - a new sandbox shows in ``list`` only ``listing_lag`` seconds after creation
    (``list_sandboxes``: "Eventually consistent", daytona_api_client/api/sandbox_api.py)
  - the toolbox of a sandbox that is not started answers 400 "container has no IP address, it
    might not be running" (apps/runner/pkg/api/controllers/proxy.go ``getProxyTarget``); with
    ``wake_on_request`` (VM runners) a stopped one is started by the proxy, which answers 503
    "Sandbox is starting" instead of forwarding the request (apps/proxy/pkg/proxy/wake.go)

Toolbox daemon, under ``{base}/toolbox/{sandboxId}`` (the SDK prefixes the sandbox id itself):
  - ``POST /process/execute``      ``{"command", "cwd", "envs", "timeout"}`` -> ``{"exitCode", "result"}``
                                   with stdout and stderr merged; 408 on timeout (process group killed)
  - ``POST /files/bulk-upload``    multipart ``files[i].path`` + ``files[i].file``; creates parent
                                   directories, truncates and writes in place like the daemon; 400
                                   ``{"errors": [...]}`` if any file failed (the others stay written)
  - ``POST /files/bulk-download``  ``{"paths": [...]}`` -> multipart with a ``file`` or a JSON
                                   ``error`` part per path (codes ``FILE_NOT_FOUND``,
                                   ``FILE_ACCESS_DENIED``, ``INVALID_FILE_PATH``)

Anything else answers 404. The Socket.IO event gateway is deliberately absent, so the SDK falls
back to polling, which the routes above satisfy. Every request must carry
``Authorization: Bearer <api_key>`` (401 otherwise). `FakeDaytonaServer.fail_next` makes the next
matching requests fail with a chosen status, to exercise error mapping; `stall_next` makes them
wait unanswered (the command never runs), as a request lost to a connect or gateway timeout.

Users: the daemon runs commands and file operations as the sandbox's user (``daytona``
unless the create names another), for whom mode bits hold: with ``unprivileged``, commands
run without root's bypass and the file routes check the owner's bits first
(tests/providers/fake_users.py, which says why not by default).

Command execution has two modes, because daemons differ: ``"stdin-shell"`` (recent daemons: the
command text is fed to a shell on stdin) and ``"argv-split"`` (older daemons: the command is split
on spaces, honouring quotes but not escapes, and executed without a shell).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from aiohttp import BodyPartReader, web

from tests.providers.fake_users import check_as_owner, without_root_bypass

ExecMode = Literal["stdin-shell", "argv-split"]

API_PREFIX = "/api"
TOOLBOX_PREFIX = "/toolbox"
DOWNLOAD_BOUNDARY = "DAYTONA-FILE-BOUNDARY"  # fixed, as in the daemon
#: The daemon's command timeout when the request has none or 0: ``timeout := 360 * time.Second``
#: (``ExecuteCommand``, apps/daemon/pkg/toolbox/process/execute/execute.go, daytonaio/daytona).
DEFAULT_EXEC_TIMEOUT_S = 360
#: Seconds between the SIGTERM and the SIGKILL of a timed-out command's group: the daemon's
#: ``terminationGracePeriod``, "default to 5 seconds" when its server passes none
#: (``NewExecuteController``, apps/daemon/pkg/toolbox/process/execute/controller.go).
TERMINATION_GRACE_S = 5.0
#: Seconds each request waits by default (``FakeDaytonaServer.latency``): a service is never instant.
DEFAULT_LATENCY_S = 0.002
#: Seconds a new sandbox stays out of ``list`` by default (``FakeDaytonaServer.listing_lag``).
DEFAULT_LISTING_LAG_S = 0.2
#: The environment a sandbox's commands start with: a fresh machine's, not the test runner's.
SANDBOX_BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class FakeSandbox:
    """One sandbox: its API record and its directory (the working directory of its commands)."""

    id: str
    name: str
    root: Path
    labels: dict[str, str]
    env: dict[str, str]
    user: str
    public: bool
    auto_stop_interval: int | None
    auto_archive_interval: int | None
    auto_delete_interval: int | None
    ttl_minutes: int | None = None
    created_at: str = field(default_factory=_now)
    state: str = "started"
    #: ``time.monotonic()`` of creation and of the last toolbox request.
    born: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    #: A state change under way: the state it ends in, and when.
    pending: tuple[str, float] | None = None


@dataclass
class _Failure:
    status: int
    path_contains: str
    remaining: int
    #: Seconds to hold the request unanswered first (and then answer ``status``).
    stall: float = 0.0


class FakeDaytonaServer:
    """Serves the routes listed in the module docstring from an aiohttp app on a private loop thread."""

    def __init__(self, root: Path, *, api_key: str = "fake-daytona-key", exec_mode: ExecMode = "stdin-shell"):
        self.root = root
        self.api_key = api_key
        self.exec_mode: ExecMode = exec_mode
        #: With False, sandbox records carry no toolbox URL and the SDK must discover it.
        self.advertise_toolbox_url = True
        self.sandboxes: dict[str, FakeSandbox] = {}
        #: Deleted sandboxes stay readable by id in state ``destroyed``, as on the service.
        self.destroyed: dict[str, FakeSandbox] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path), for assertions about traffic
        #: Seconds of a fake minute, for ``autoStopInterval`` and ``ttlMinutes``.
        self.minute_seconds = 60.0
        #: Seconds a state change (start, resume) takes.
        self.transition_seconds = 0.0
        #: Seconds a new sandbox stays ``creating`` before it is ``started``: the create
        #: answers before the sandbox runs, and the SDK waits for ``started`` by polling.
        self.create_seconds = 0.0
        #: Seconds every request waits before it is handled: a network's, kept small.
        self.latency = DEFAULT_LATENCY_S
        #: Commands and file routes as the sandbox's user: without root's bypass of mode bits.
        self.unprivileged = False
        #: Seconds before a new sandbox shows in ``list`` (eventually consistent); 0 for calm.
        self.listing_lag = DEFAULT_LISTING_LAG_S
        #: As the proxy in front of VM runners: a toolbox request to a stopped sandbox starts it
        #: and is answered 503 with a "Sandbox is starting" page, not forwarded.
        self.wake_on_request = False
        self._failures: list[_Failure] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return self.base_url + API_PREFIX

    @property
    def toolbox_url(self) -> str:
        return self.base_url + TOOLBOX_PREFIX

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        started = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def serve() -> None:
            self._runner = web.AppRunner(self._app(), handle_signals=False)
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()
            started.set()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(serve())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-daytona", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("fake Daytona server did not start")

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        loop = self._loop

        async def shutdown() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        loop.close()
        self._loop = None
        self._thread = None

    def open_connections(self) -> int:
        """Client connections the server holds open (kept alive by a client's session)."""
        assert self._runner is not None and self._runner.server is not None
        return len(self._runner.server.connections)

    def fail_next(self, status: int, *, path_contains: str = "", times: int = 1, stall: float = 0.0) -> None:
        """Answer the next `times` requests whose path contains `path_contains` with `status`,
        after holding each unanswered for `stall` seconds (never handling it)."""
        with self._lock:
            self._failures.append(_Failure(status, path_contains, times, stall))

    def set_state(self, sandbox_id: str, state: str, *, then: str | None = None, after: float = 0.0) -> None:
        """Put a sandbox in `state` (a platform-side change: auto-stop, archiving, ...),
        moving on to `then` `after` seconds later."""
        with self._lock:
            sandbox = self.sandboxes[sandbox_id]
            sandbox.state = state
            sandbox.pending = (then, time.monotonic() + after) if then else None

    def _advance(self) -> None:
        """Apply what time did since the last request: finished transitions, idle
        auto-stops, expired ttls (the service's own jobs, run lazily here)."""
        now = time.monotonic()
        with self._lock:
            for sandbox in list(self.sandboxes.values()):
                if sandbox.ttl_minutes and now - sandbox.born >= sandbox.ttl_minutes * self.minute_seconds:
                    self._destroy(sandbox)
                    continue
                if sandbox.pending is not None and now >= sandbox.pending[1]:
                    sandbox.state, sandbox.pending = sandbox.pending[0], None
                    sandbox.last_activity = now
                idle = sandbox.auto_stop_interval
                if (
                    sandbox.state == "started"
                    and idle
                    and now - sandbox.last_activity >= idle * self.minute_seconds
                ):
                    sandbox.state = "stopped"

    def _destroy(self, sandbox: FakeSandbox) -> None:
        """Forget a sandbox (lock held), leaving it readable by id as ``destroyed``."""
        self.sandboxes.pop(sandbox.id, None)
        self.destroyed[sandbox.id] = sandbox
        shutil.rmtree(sandbox.root, ignore_errors=True)

    # -- app ---------------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=1024**3)
        api = API_PREFIX
        app.router.add_post(f"{api}/sandbox", self._create)
        app.router.add_get(f"{api}/sandbox", self._list)
        app.router.add_get(f"{api}/sandbox/{{sid}}", self._get)
        app.router.add_delete(f"{api}/sandbox/{{sid}}", self._delete)
        app.router.add_get(f"{api}/sandbox/{{sid}}/toolbox-proxy-url", self._toolbox_proxy_url)
        app.router.add_post(f"{api}/sandbox/{{sid}}/start", self._start)
        app.router.add_post(f"{api}/sandbox/{{sid}}/stop", self._stop)
        tb = TOOLBOX_PREFIX + "/{sid}"
        app.router.add_post(f"{tb}/process/execute", self._execute)
        app.router.add_post(f"{tb}/files/bulk-upload", self._bulk_upload)
        app.router.add_post(f"{tb}/files/bulk-download", self._bulk_download)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        self._advance()
        with self._lock:
            self.requests.append((request.method, request.path))
            failure = next((f for f in self._failures if f.path_contains in request.path), None)
            if failure is not None:
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._failures.remove(failure)
        if failure is not None:
            await asyncio.sleep(failure.stall)
            return _error(request, failure.status, f"injected failure {failure.status}")
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(request, 401, "Unauthorized: invalid API key")
        response: web.StreamResponse = await handler(request)
        return response

    # -- control plane ------------------------------------------------------------------------------

    def _lookup(self, id_or_name: str) -> FakeSandbox | None:
        with self._lock:
            found = self.sandboxes.get(id_or_name)
            if found is None:
                found = next((s for s in self.sandboxes.values() if s.name == id_or_name), None)
            return found

    def _dto(self, sandbox: FakeSandbox, *, state: str | None = None) -> dict[str, Any]:
        state = state or sandbox.state
        return {
            "id": sandbox.id,
            "organizationId": "fake-org",
            "name": sandbox.name,
            "snapshot": "fake-snapshot",
            "user": sandbox.user,
            "env": sandbox.env,
            "labels": sandbox.labels,
            "public": sandbox.public,
            "networkBlockAll": False,
            "kvm": False,
            "target": "fake",
            "cpu": 1,
            "gpu": 0,
            "memory": 1,
            "disk": 1,
            "state": state,
            "desiredState": state,
            "autoStopInterval": sandbox.auto_stop_interval,
            "autoArchiveInterval": sandbox.auto_archive_interval,
            "autoDeleteInterval": sandbox.auto_delete_interval,
            "createdAt": sandbox.created_at,
            "updatedAt": sandbox.created_at,
            "toolboxProxyUrl": self.toolbox_url if self.advertise_toolbox_url else "",
        }

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        sandbox_id = str(uuid.uuid4())
        name = body.get("name") or sandbox_id
        if self._lookup(name) is not None:
            return _error(request, 409, f"Sandbox with name {name} already exists")
        root = self.root / sandbox_id
        root.mkdir(parents=True)
        sandbox = FakeSandbox(
            id=sandbox_id,
            name=name,
            root=root,
            labels=dict(body.get("labels") or {}),
            env=dict(body.get("env") or {}),
            user=body.get("user") or "daytona",
            public=bool(body.get("public")),
            auto_stop_interval=body.get("autoStopInterval"),
            auto_archive_interval=body.get("autoArchiveInterval"),
            auto_delete_interval=body.get("autoDeleteInterval"),
            ttl_minutes=body.get("ttlMinutes"),
            state="creating",
            pending=("started", time.monotonic() + self.create_seconds),
        )
        with self._lock:
            self.sandboxes[sandbox_id] = sandbox
        return web.json_response(self._dto(sandbox))

    async def _get(self, request: web.Request) -> web.Response:
        sandbox = self._lookup(request.match_info["sid"])
        if sandbox is not None:
            return web.json_response(self._dto(sandbox))
        with self._lock:
            gone = self.destroyed.get(request.match_info["sid"])
        if gone is None:
            return _not_found(request)
        return web.json_response(self._dto(gone, state="destroyed"))

    async def _list(self, request: web.Request) -> web.Response:
        wanted: dict[str, str] = json.loads(request.query.get("labels") or "{}")
        limit = int(request.query.get("limit") or 100)
        if not 1 <= limit <= 200:  # ``limit``: ge=1, le=200 (daytona_api_client list_sandboxes)
            return _error(request, 400, "limit must not be greater than 200")
        offset = int(request.query.get("cursor") or 0)
        visible_since = time.monotonic() - self.listing_lag
        with self._lock:
            matching = [
                s
                for s in self.sandboxes.values()
                if s.born <= visible_since and all(s.labels.get(k) == v for k, v in wanted.items())
            ]
        matching.sort(key=lambda s: (s.created_at, s.id))
        page = matching[offset : offset + limit]
        next_cursor = str(offset + limit) if offset + limit < len(matching) else None
        return web.json_response({"items": [self._dto(s) for s in page], "nextCursor": next_cursor})

    async def _delete(self, request: web.Request) -> web.Response:
        sandbox = self._lookup(request.match_info["sid"])
        if sandbox is None:
            return _not_found(request)
        with self._lock:
            self._destroy(sandbox)
        return web.json_response(self._dto(sandbox, state="destroyed"))

    async def _start(self, request: web.Request) -> web.Response:
        """Start a stopped or archived sandbox, resume a paused one ("Start or resume
        sandbox", daytona_api_client ``start_sandbox``); refused while a state change is
        in progress or from any other state, as the API's ``SandboxService.start`` does
        (apps/api/src/sandbox/services/sandbox.service.ts in daytonaio/daytona)."""
        transitions = {"stopped": "starting", "archived": "starting", "paused": "resuming"}
        return self._change(request, transitions, "started")

    async def _stop(self, request: web.Request) -> web.Response:
        return self._change(request, {"started": "stopping"}, "stopped")

    def _change(self, request: web.Request, transitions: dict[str, str], final: str) -> web.Response:
        sandbox = self._lookup(request.match_info["sid"])
        if sandbox is None:
            return _not_found(request)
        with self._lock:
            if sandbox.pending is not None:
                return _error(request, 400, "State change in progress")
            if sandbox.state not in transitions:
                return _error(request, 400, "Sandbox is not in valid state")
            if self.transition_seconds:
                sandbox.state = transitions[sandbox.state]
                sandbox.pending = (final, time.monotonic() + self.transition_seconds)
            else:
                sandbox.state = final
            sandbox.last_activity = time.monotonic()
        return web.json_response(self._dto(sandbox))

    async def _toolbox_proxy_url(self, request: web.Request) -> web.Response:
        if self._lookup(request.match_info["sid"]) is None:
            return _not_found(request)
        return web.json_response({"url": self.toolbox_url})

    # -- toolbox --------------------------------------------------------------------------------------

    def _toolbox_sandbox(self, request: web.Request) -> FakeSandbox | web.Response:
        """The sandbox a toolbox call is for (its activity recorded), or the refusal:
        404 unknown, 400 not started (the runner's toolbox proxy finds no container IP)."""
        with self._lock:
            sandbox = self.sandboxes.get(request.match_info["sid"])
            if sandbox is not None:
                sandbox.last_activity = time.monotonic()
        if sandbox is None:
            return _not_found(request)
        if sandbox.state == "stopped" and self.wake_on_request:
            # ``WakeOnRequestModifyResponse`` / ``tryWakeSandbox`` (apps/proxy/pkg/proxy/wake.go):
            # the proxy starts the sandbox, waits for it, and answers 503 with a refresh page.
            sandbox.state = "started"
            return web.Response(
                status=503,
                text="<html><body><h2>Sandbox is starting...</h2></body></html>",
                content_type="text/html",
                headers={"Retry-After": "5"},
            )
        if sandbox.state != "started":
            return _error(request, 400, "container has no IP address, it might not be running")
        return sandbox

    async def _execute(self, request: web.Request) -> web.StreamResponse:
        sandbox = self._toolbox_sandbox(request)
        if isinstance(sandbox, web.Response):
            return sandbox
        body = await request.json()
        command = body.get("command")
        if not isinstance(command, str) or not command.strip():
            return _error(request, 400, "command is required")
        timeout = body.get("timeout") or DEFAULT_EXEC_TIMEOUT_S
        cwd = _resolve(sandbox, body["cwd"]) if body.get("cwd") else sandbox.root
        env = {**SANDBOX_BASE_ENV, "HOME": str(sandbox.root), **sandbox.env, **(body.get("envs") or {})}
        if self.exec_mode == "stdin-shell":
            argv, stdin = ["bash"], command.encode()
        else:
            argv, stdin = split_command_like_old_daemon(command), b""
        try:
            proc = await asyncio.create_subprocess_exec(
                *(without_root_bypass(argv) if self.unprivileged else argv),
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return web.json_response({"exitCode": -1, "result": str(exc)})
        try:
            output, _ = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            await _terminate_group(proc)
            return _error(
                request,
                408,
                f"Command execution timed out after {timeout}s.",
                code="PROCESS_EXECUTION_TIMEOUT",
            )
        assert proc.returncode is not None
        exit_code = proc.returncode if proc.returncode >= 0 else -1  # Go reports -1 for signals
        return web.json_response({"exitCode": exit_code, "result": output.decode("utf-8", "replace")})

    async def _bulk_upload(self, request: web.Request) -> web.Response:
        sandbox = self._toolbox_sandbox(request)
        if isinstance(sandbox, web.Response):
            return sandbox
        reader = await request.multipart()
        destinations: dict[str, str] = {}
        errors: list[str] = []
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            name = part.name or ""
            index = name.removeprefix("files[").removesuffix("].path").removesuffix("].file")
            if name.endswith(".path"):
                destinations[index] = (await part.read()).decode()
                continue
            if not name.endswith(".file"):
                continue
            destination = destinations.get(index)
            if destination is None:
                errors.append(f"file[{index}]: missing .path metadata")
                continue
            target = _resolve(sandbox, destination)
            try:
                if self.unprivileged:
                    check_as_owner(target, write=True)
            except PermissionError as exc:
                errors.append(f"{destination}: create: open {target}: {_go_message(exc)}")
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                errors.append(f"{destination}: mkdir {target.parent}: {_go_message(exc)}")
                continue
            try:
                handle = open(target, "wb")  # noqa: SIM115 - written in chunks below
            except OSError as exc:
                errors.append(f"{destination}: create: open {target}: {_go_message(exc)}")
                continue
            with handle:
                while chunk := await part.read_chunk(1 << 16):
                    handle.write(chunk)
        if errors:
            return web.json_response({"errors": errors}, status=400)
        return web.Response(status=200)

    async def _bulk_download(self, request: web.Request) -> web.StreamResponse:
        sandbox = self._toolbox_sandbox(request)
        if isinstance(sandbox, web.Response):
            return sandbox
        try:
            paths = (await request.json())["paths"]
        except (ValueError, KeyError, TypeError):
            paths = None
        if not paths:
            return web.json_response(
                {"error": 'request body must be {"paths": [ ... ]} and non-empty'}, status=400
            )
        response = web.StreamResponse(
            headers={"Content-Type": f"multipart/form-data; boundary={DOWNLOAD_BOUNDARY}"}
        )
        await response.prepare(request)
        for path in paths:
            error = _download_error(sandbox, path, unprivileged=self.unprivileged)
            if error is not None:
                status, code, message = error
                payload = {
                    "statusCode": status,
                    "message": message,
                    "code": code,
                    "timestamp": _now(),
                    "path": path,
                    "method": "POST",
                }
                await response.write(
                    _part_header("error", path, "application/json; charset=utf-8")
                    + json.dumps(payload).encode()
                )
                continue
            target = _resolve(sandbox, path)
            await response.write(_part_header("file", path, "application/octet-stream"))
            with open(target, "rb") as handle:
                while chunk := handle.read(1 << 16):
                    await response.write(chunk)
        await response.write(f"\r\n--{DOWNLOAD_BOUNDARY}--\r\n".encode())
        await response.write_eof()
        return response


# -- helpers -----------------------------------------------------------------------------------------


def _resolve(sandbox: FakeSandbox, path: str) -> Path:
    """Relative paths are resolved against the sandbox's working directory, as the daemon does."""
    return Path(path) if os.path.isabs(path) else sandbox.root / path


def _go_message(exc: OSError) -> str:
    """An errno as Go spells it ("is a directory", not "Is a directory")."""
    return (exc.strerror or str(exc)).lower()


def _download_error(sandbox: FakeSandbox, path: str, *, unprivileged: bool) -> tuple[int, str, str] | None:
    if path == "":
        return 400, "INVALID_FILE_PATH", "invalid file path: path is empty"
    target = _resolve(sandbox, path)
    try:
        if unprivileged:
            check_as_owner(target, write=False)
        with open(target, "rb"):
            pass
    except FileNotFoundError:
        return 404, "FILE_NOT_FOUND", f"file not found: {path}"
    except NotADirectoryError:
        return 404, "FILE_NOT_FOUND", f"file not found: {path}"
    except PermissionError:
        return 403, "FILE_ACCESS_DENIED", f"permission denied: {path}"
    except IsADirectoryError:
        return 400, "INVALID_FILE_PATH", f"invalid file path: path points to a directory: {path}"
    except OSError as exc:
        return 500, "FILE_READ_FAILED", f"failed to open file: {exc}"
    if target.is_dir():
        return 400, "INVALID_FILE_PATH", f"invalid file path: path points to a directory: {path}"
    return None


def _part_header(name: str, path: str, content_type: str) -> bytes:
    latin1 = "".join(
        c if 0x20 <= ord(c) <= 0xFF and ord(c) != 0x7F else "_"
        for c in path.replace("\\", "\\\\").replace('"', '\\"')
    )
    encoded = urllib.parse.quote(path.encode(), safe="!#$&+-.^_`|~")
    # Parts after the first are preceded by CRLF, as Go's multipart.Writer does; a leading
    # CRLF before the first boundary is legal preamble, so always emitting it is equivalent.
    return (
        f"\r\n--{DOWNLOAD_BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="{name}"; filename="{latin1}"; '
        f"filename*=utf-8''{encoded}\r\n"
        f"Content-Type: {content_type}\r\n\r\n"
    ).encode("latin-1")


def _error(request: web.Request, status: int, message: str, *, code: str | None = None) -> web.Response:
    body: dict[str, Any] = {
        "statusCode": status,
        "message": message,
        "path": request.path,
        "method": request.method,
        "timestamp": _now(),
    }
    if code is not None:
        body["code"] = code
        body["source"] = "DAYTONA_DAEMON"
    return web.json_response(body, status=status)


def _not_found(request: web.Request) -> web.Response:
    return _error(request, 404, f"Sandbox with ID or name {request.match_info['sid']} not found")


async def _terminate_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the command's process group, then SIGKILL after a grace period, like the daemon
    (``Setpgid`` and ``TerminateProcessTreeGracefully`` in
    apps/daemon/pkg/toolbox/process/execute/execute.go, daytonaio/daytona)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), TERMINATION_GRACE_S)
            return
        except TimeoutError:
            continue


def split_command_like_old_daemon(command: str) -> list[str]:
    """Older daemons split on spaces, honour single and double quotes, and know no escapes."""
    args: list[str] = []
    current: list[str] = []
    quote: str | None = None
    for char in command:
        if char in "\"'" and quote is None:
            quote = char
        elif quote is not None and char == quote:
            quote = None
        elif char == " " and quote is None:
            if current:
                args.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        args.append("".join(current))
    return args


@contextlib.contextmanager
def running_fake_daytona(*, exec_mode: ExecMode = "stdin-shell") -> Iterator[FakeDaytonaServer]:
    """Start a fake server over a fresh temporary root; stop it and remove the root afterwards."""
    with tempfile.TemporaryDirectory(prefix="fake-daytona-") as tmp:
        server = FakeDaytonaServer(Path(tmp), exec_mode=exec_mode)
        server.start()
        try:
            yield server
        finally:
            server.stop()
