"""Every sandbox-sdk provider as a sandbox client of the OpenAI Agents SDK.

The Agents SDK (``openai-agents``, ``agents.sandbox``) runs a ``SandboxAgent``
against a ``BaseSandboxClient`` whose sessions implement ``exec``, ``read``,
``write``, ``persist_workspace`` and ``hydrate_workspace``; its own tools
(the shell, ``apply_patch``, ``view_image``) and the manifest's files,
directories and git repositories are built on those. Its maintainers ask third
parties to ship clients as packages of their own (openai/openai-agents-python#3654):
this is ours, over any provider::

    client = SandboxSDKClient(get_provider("bwrap"))
    result = await Runner.run(agent, "...", run_config=RunConfig(sandbox=SandboxRunConfig(client=client)))

How each part maps (docs/openai-agents.md has the table):

* ``client.create`` makes one sandbox (``provider.acreate(**options.create)``).
  The manifest's default root, ``/workspace``, becomes the sandbox's working
  directory (``/workspace`` itself on bwrap, a directory of its own on
  ``local``); any other root is created in the sandbox at start.
* ``exec`` is the sandbox's ``run`` (stdout and stderr apart, 128+N for a
  command killed by signal N), in the workspace root, with the manifest's
  environment; ``read`` and ``write`` are the verified transfers
  (``download_file``, ``upload_files``: SHA-256 checked, written whole or not
  at all); ``persist_workspace`` and ``hydrate_workspace`` are the directory
  transfers (``download_dir``, ``upload_dir``: one tar archive each way,
  checked member by member on both sides).
* What the SDK has no equivalent for in ours is refused before anything runs,
  with the SDK's own error types: mounts (``MountConfigError`` naming each,
  our mount API does not exist yet), manifest users and groups and ``run_as``
  (our sandboxes run commands as their one user), host-path grants, exposed
  ports (``ExposedPortUnavailableError``). PTY sessions are not offered
  (``supports_pty()`` is false), so the SDK's shell tool runs each command with
  ``exec`` and offers the model no ``write_stdin``.
* Our typed errors become the SDK's: ``WorkspaceReadNotFoundError``,
  ``WorkspaceArchiveReadError`` / ``WorkspaceArchiveWriteError`` (with our
  error as the cause), ``ExecTimeoutError``, ``ExecTransportError``.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal, cast

import anyio.to_thread
from pydantic import Field

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import RunResult
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.registry import get_provider
from sandbox_sdk.transfer import safe_extract

try:
    from agents.sandbox.errors import (
        ConfigurationError,
        ErrorCode,
        ExecTimeoutError,
        ExecTransportError,
        ExposedPortUnavailableError,
        MountConfigError,
        OpName,
        WorkspaceArchiveReadError,
        WorkspaceArchiveWriteError,
        WorkspaceReadNotFoundError,
        WorkspaceRootNotFoundError,
        WorkspaceStartError,
    )
    from agents.sandbox.manifest import Manifest
    from agents.sandbox.session import BaseSandboxSession, Instrumentation, SandboxSession
    from agents.sandbox.session.dependencies import Dependencies
    from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
    from agents.sandbox.session.sandbox_session_state import SandboxSessionState
    from agents.sandbox.session.workspace_payloads import coerce_write_payload
    from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
    from agents.sandbox.types import ExecResult, ExposedPortEndpoint, User
    from agents.sandbox.util.tar_utils import should_skip_tar_member
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "sandbox_sdk.integrations.openai_agents needs openai-agents: "
        "pip install 'sandbox-sdk-py[openai-agents]'"
    ) from exc

__all__ = [
    "BACKEND_ID",
    "SandboxSDKClient",
    "SandboxSDKClientOptions",
    "SandboxSDKSession",
    "SandboxSDKSessionState",
]

#: The name the SDK knows this backend by: the ``type`` of our options and
#: session state, and the client's ``backend_id``.
BACKEND_ID = "sandbox_sdk"
#: The manifest root the SDK gives when none is chosen; we replace it with the
#: sandbox's own working directory.
DEFAULT_ROOT: str = Manifest.model_fields["root"].default
#: Archives and files up to this size stay in memory; larger ones spill to a
#: private temporary file.
SPOOL_BYTES = 8 * 1024 * 1024


class SandboxSDKClientOptions(BaseSandboxClientOptions):
    """How :class:`SandboxSDKClient` makes a session's sandbox: ``create`` is
    passed to the provider's ``create`` (``ttl``, ``labels``, ``idle_timeout``,
    an image...: whatever that provider takes). JSON-serializable, as the SDK
    wants options to be."""

    type: Literal["sandbox_sdk"] = "sandbox_sdk"
    create: dict[str, Any] = Field(default_factory=dict)


class SandboxSDKSessionState(SandboxSessionState):
    """The SDK's session state plus which sandbox it is: ``resume`` reattaches
    to ``sandbox_id`` if it still exists, else makes a new one with the same
    ``create`` options. ``root_is_workdir``: the manifest's root is the
    sandbox's working directory (it was left at the default), so a replacement
    sandbox's own working directory takes its place."""

    type: Literal["sandbox_sdk"] = "sandbox_sdk"
    sandbox_id: str
    create: dict[str, Any] = Field(default_factory=dict)
    root_is_workdir: bool = False


def _refuse_unsupported(manifest: Manifest) -> None:
    """Refuse, before any sandbox is made, what our sandboxes cannot do: each
    refusal names what was asked for."""
    mounts = manifest.mount_targets()
    if mounts:
        named = ", ".join(f"{mount.type} at {path.as_posix()}" for mount, path in mounts)
        raise MountConfigError(
            message=f"sandbox_sdk sandboxes cannot mount external storage yet: {named}",
            context={"backend": BACKEND_ID, "mounts": [path.as_posix() for _, path in mounts]},
        )
    accounts = [user.name for user in manifest.users] + [group.name for group in manifest.groups]
    if accounts:
        raise _config_error(
            "start",
            f"sandbox_sdk sandboxes run commands as their one user; manifest users and groups "
            f"cannot be provisioned: {', '.join(accounts)}",
            accounts=accounts,
        )
    host_grants = [grant.path for grant in manifest.extra_path_grants if grant.host_path is not None]
    if host_grants:
        raise _config_error(
            "start",
            "sandbox_sdk sandboxes cannot bind host paths into the sandbox (a path grant's "
            f"host_path): {', '.join(host_grants)}; omit host_path to grant the sandbox's own path",
            grants=host_grants,
        )


def _config_error(op: OpName, message: str, **context: object) -> ConfigurationError:
    """The SDK's error for a configuration our sandboxes cannot honour, raised
    by the operation (``op``) that was asked for it."""
    return ConfigurationError(
        message=message,
        error_code=ErrorCode.SANDBOX_CONFIG_INVALID,
        op=op,
        context={"backend": BACKEND_ID, **context},
        retryable=False,
    )


async def _working_directory(sandbox: BaseSandbox) -> str:
    """The sandbox's working directory, as an absolute path inside it."""
    response = await sandbox.arun(["pwd", "-P"])
    path = response.stdout.strip()
    if response.exit_code != 0 or not path.startswith("/"):
        raise WorkspaceStartError(
            path=Path(DEFAULT_ROOT),
            message=f"sandbox {sandbox.id}: could not learn its working directory: {response.output!r}",
        )
    return path


class SandboxSDKSession(BaseSandboxSession):
    """One sandbox of any provider as an Agents SDK session (see the module's
    docstring for what maps to what)."""

    state: SandboxSDKSessionState

    def __init__(
        self,
        state: SandboxSDKSessionState,
        provider: SandboxProvider[Any],
        sandbox: BaseSandbox | None = None,
    ) -> None:
        self.state = state
        self.provider = provider
        self._sandbox = sandbox

    @property
    def sandbox(self) -> BaseSandbox:
        """The sandbox this session runs in (once started, or made by ``create``)."""
        if self._sandbox is None:
            raise WorkspaceStartError(
                path=Path(self.state.manifest.root),
                message=f"sandbox {self.state.sandbox_id} is not attached: start the session first",
            )
        return self._sandbox

    def _root(self) -> str:
        return str(self.state.manifest.root)

    # -- lifecycle ---------------------------------------------------------------------------

    async def _ensure_backend_started(self) -> None:
        """Reattach to the state's sandbox, or make a replacement (a resumed
        session whose sandbox was deleted or expired: the SDK then restores
        the workspace from its snapshot)."""
        _refuse_unsupported(self.state.manifest)
        if self._sandbox is not None:
            return
        try:
            self._sandbox = await self.provider.aget(self.state.sandbox_id)
            self._set_start_state_preserved(True)
            return
        except errors.SandboxNotFoundError:
            pass
        self._sandbox = await self.provider.acreate(**self.state.create)
        self.state.sandbox_id = self._sandbox.id
        self.state.workspace_root_ready = False
        if self.state.root_is_workdir:
            root = await _working_directory(self._sandbox)
            self.state.manifest = self.state.manifest.model_copy(update={"root": root})

    async def _prepare_backend_workspace(self) -> None:
        """Create the workspace root (a root the manifest chose may not exist yet)."""
        try:
            await self.sandbox.amkdir(self._root(), parents=True, exist_ok=True)
        except errors.SandboxError as exc:
            raise WorkspaceStartError(path=Path(self._root()), cause=exc) from exc

    async def running(self) -> bool:
        return self._sandbox is not None and await self.provider.ais_alive(self._sandbox)

    # -- commands ----------------------------------------------------------------------------

    def _prepare_exec_command(
        self, *command: str | Path, shell: bool | list[str], user: str | User | None
    ) -> list[str]:
        """The SDK would prefix ``sudo -u USER``; our sandboxes have one user."""
        if user:
            name = user.name if isinstance(user, User) else user
            raise _config_error(
                "exec",
                f"sandbox_sdk sandboxes run commands as their one user, not as {name!r} "
                "(a SandboxAgent's run_as, or a tool's user)",
                user=name,
            )
        return list(super()._prepare_exec_command(*command, shell=shell, user=None))

    async def _exec_internal(self, *command: str | Path, timeout: float | None = None) -> ExecResult:
        """``command`` (an argument vector) through the sandbox's ``run``, in
        the workspace root with the manifest's environment. ``timeout=None`` is
        the sandbox's default (its ``limits.operation_timeout``). A workspace
        root that is gone (removed by a command) raises the SDK's
        ``WorkspaceRootNotFoundError``."""
        argv = [str(part) for part in command]
        env = await self.state.manifest.environment.resolve()
        try:
            response = await self.sandbox.arun(argv, cwd=self._root(), env=env or None, timeout=timeout)
        except (errors.SandboxFileNotFoundError, errors.SandboxPermissionError) as exc:
            if exc.path == self._root():
                raise WorkspaceRootNotFoundError(path=Path(self._root()), cause=exc) from exc
            # A program that cannot be run: what a shell reports for it.
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return ExecResult(stdout=b"", stderr=f"{exc}\n".encode(), exit_code=code)
        except errors.SandboxError as exc:
            raise ExecTransportError(command=argv, context={"sandbox": self.sandbox.id}, cause=exc) from exc
        return self._exec_result(argv, response, timeout)

    def _exec_result(self, argv: Sequence[str], response: RunResult, timeout: float | None) -> ExecResult:
        if response.timed_out:
            raise ExecTimeoutError(command=argv, timeout_s=timeout, context={"output": response.output})
        if response.exit_code is None:
            raise ExecTransportError(
                command=argv,
                message=f"sandbox {self.sandbox.id}: the command ended without an exit status",
                context={"sandbox": self.sandbox.id},
            )
        if response.truncated:
            # Never hand back part of the output as if it were all of it.
            limit = self.sandbox.limits.max_output_bytes
            raise ExecTransportError(
                command=argv,
                message=(
                    f"the command's output passed the sandbox's limit of {limit} bytes "
                    "(redirect it to a file and read that)"
                ),
                context={"sandbox": self.sandbox.id, "reason": "output_truncated", "limit": limit},
            )
        return ExecResult(
            stdout=response.stdout.encode(), stderr=response.stderr.encode(), exit_code=response.exit_code
        )

    async def resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        """No provider of ours exposes a sandbox's ports yet."""
        raise ExposedPortUnavailableError(
            port=port,
            exposed_ports=self.state.exposed_ports,
            reason="backend_unavailable",
            context={"backend": BACKEND_ID, "detail": "sandbox_sdk providers do not expose ports"},
        )

    # -- files -------------------------------------------------------------------------------

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        """The whole file, downloaded in chunks and checked against the
        sandbox's SHA-256."""
        self._one_user("read", user, path)
        target = await self._validate_path_access(path)
        spool = _spooled()
        try:
            await self.sandbox.adownload_file(target.as_posix(), cast(BinaryIO, spool))
        except FileNotFoundError as exc:
            spool.close()
            raise WorkspaceReadNotFoundError(path=path, cause=exc) from exc
        except errors.SandboxError as exc:
            spool.close()
            raise WorkspaceArchiveReadError(path=path, context=_reason(exc), cause=exc) from exc
        spool.seek(0)
        return _as_iobase(spool)

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        """Replace ``path`` with ``data``, creating parents: the payload is read
        whole first, then lands by the verified upload (staged, checked,
        renamed), so the file is either the new content or untouched."""
        self._one_user("write", user, path)
        payload = coerce_write_payload(path=path, data=data)
        target = await self._validate_path_access(path, for_write=True)
        with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
            await anyio.to_thread.run_sync(shutil.copyfileobj, payload.stream, spool)
            spool.seek(0)
            results = await self.sandbox.aupload_files([(target.as_posix(), cast(BinaryIO, spool))])
        try:
            results.raise_for_errors()
        except errors.TransferFailedError as exc:
            raise WorkspaceArchiveWriteError(path=path, context=_reason(exc), cause=exc) from exc

    def _one_user(self, op: OpName, user: str | User | None, path: Path) -> None:
        """Refuse a ``read`` or ``write`` as another user: our sandboxes have one."""
        if user:
            name = user.name if isinstance(user, User) else user
            raise _config_error(
                op, f"sandbox_sdk sandboxes have one user; cannot {op} {path} as {name!r}", user=name
            )

    # -- workspace archives ------------------------------------------------------------------

    async def persist_workspace(self) -> io.IOBase:
        """The workspace as a tar archive of workspace-relative members, less
        the paths the SDK leaves out of snapshots (ephemeral entries). It
        travels by ``download_dir`` (one archive, checked member by member); a
        symlink leaving the workspace fails the whole persist, naming it (the
        SDK's own hydrate refuses such links too)."""
        root = self._root()
        skip = self._persist_workspace_skip_relpaths()
        with tempfile.TemporaryDirectory(prefix="sbx-openai-agents-") as scratch:
            tree = Path(scratch) / "workspace"
            try:
                await self.sandbox.adownload_dir(root, tree, symlinks="refuse")
            except errors.SandboxError as exc:
                raise WorkspaceArchiveReadError(path=Path(root), context=_reason(exc), cause=exc) from exc
            archive = _spooled()
            try:
                await anyio.to_thread.run_sync(_pack, tree, archive, skip)
            except BaseException:
                archive.close()
                raise
        archive.seek(0)
        return _as_iobase(archive)

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        """Extract a tar archive (as :meth:`persist_workspace` makes) into the
        workspace: checked here first (no absolute names, no ``..``, no links
        leading out, no devices: nothing is sent otherwise), then sent by
        ``upload_dir``, which the sandbox checks again before extracting."""
        root = self._root()
        with tempfile.TemporaryDirectory(prefix="sbx-openai-agents-") as scratch:
            tree = Path(scratch) / "workspace"
            try:
                await anyio.to_thread.run_sync(_unpack, data, tree)
            except (errors.SandboxError, tarfile.TarError, OSError) as exc:
                context = {"reason": "unsafe_or_unreadable_archive", "detail": str(exc)}
                raise WorkspaceArchiveWriteError(path=Path(root), context=context, cause=exc) from exc
            try:
                await self.sandbox.aupload_dir(tree, root, symlinks="refuse")
            except errors.SandboxError as exc:
                raise WorkspaceArchiveWriteError(path=Path(root), context=_reason(exc), cause=exc) from exc


def _reason(exc: BaseException) -> dict[str, object]:
    """Our error, as context the SDK's error carries: its type and message."""
    return {"reason": type(exc).__name__, "detail": str(exc)}


def _spooled() -> IO[bytes]:
    """A private temporary file (in memory up to :data:`SPOOL_BYTES`) that is
    handed to the SDK, which closes it."""
    return tempfile.SpooledTemporaryFile(SPOOL_BYTES)


def _as_iobase(stream: IO[bytes]) -> io.IOBase:
    """A spooled temporary file is an ``io.IOBase`` at run time (Python 3.11+);
    the standard library's stubs only say ``IO[bytes]``."""
    assert isinstance(stream, io.IOBase)
    return stream


def _pack(tree: Path, archive: IO[bytes], skip: Iterable[Path]) -> None:
    """Write ``tree`` into ``archive`` as workspace-relative members, leaving
    out ``skip`` (workspace-relative paths, with all below them)."""
    skipped = list(skip)

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if should_skip_tar_member(member.name, skip_rel_paths=skipped, root_name=None):
            return None
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        return member

    with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(os.listdir(tree)):
            tar.add(tree / child, arcname=child, filter=keep)


def _unpack(data: io.IOBase, tree: Path) -> None:
    """Extract ``data`` into ``tree`` after checking every member (our
    ``safe_extract``: nothing is written if one member is unsafe)."""
    with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
        shutil.copyfileobj(data, spool)
        spool.seek(0)
        safe_extract(spool, tree)


class SandboxSDKClient(BaseSandboxClient[SandboxSDKClientOptions | None]):
    """Sessions over one sandbox-sdk provider: ``SandboxSDKClient()`` uses
    ``get_provider()`` (``SANDBOX_SDK_PROVIDER``, else bwrap), or pass a
    provider (``SandboxSDKClient(get_provider("local"))``). A session's
    sandbox is made by :meth:`create` and deleted by :meth:`delete` (the SDK's
    runner calls it for the sessions it made)."""

    backend_id = BACKEND_ID
    supports_default_options = True

    def __init__(
        self,
        provider: SandboxProvider[Any] | None = None,
        *,
        instrumentation: Instrumentation | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        self.provider = provider if provider is not None else get_provider()
        self._instrumentation = instrumentation if instrumentation is not None else Instrumentation()
        self._dependencies = dependencies

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: SandboxSDKClientOptions | None = None,
    ) -> SandboxSession:
        """Make the sandbox now (so the state names it and its root from the
        start); the manifest is applied when the session starts."""
        settings = options if options is not None else SandboxSDKClientOptions()
        manifest = self._validate_manifest_for_create(manifest if manifest is not None else Manifest())
        _refuse_unsupported(manifest)
        sandbox = await self.provider.acreate(**settings.create)
        try:
            root_is_workdir = manifest.root == DEFAULT_ROOT
            if root_is_workdir:
                root = await _working_directory(sandbox)
                manifest = manifest.model_copy(update={"root": root}, deep=True)
            state = SandboxSDKSessionState(
                sandbox_id=sandbox.id,
                create=settings.create,
                root_is_workdir=root_is_workdir,
                manifest=manifest,
                snapshot=resolve_snapshot(snapshot, sandbox.id),
            )
        except BaseException:
            await self.provider.adelete(sandbox.id)
            raise
        inner = SandboxSDKSession(state, self.provider, sandbox)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        """Delete the session's sandbox (a sandbox already gone is no error)."""
        inner = session._inner
        if not isinstance(inner, SandboxSDKSession):
            raise TypeError(
                f"SandboxSDKClient.delete expects a SandboxSDKSession, not {type(inner).__name__}"
            )
        await self.provider.adelete(inner.state.sandbox_id)
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """A session for ``state``'s sandbox: reattached at start if it still
        exists, else replaced by a new one (and the SDK restores the workspace
        from the state's snapshot)."""
        if not isinstance(state, SandboxSDKSessionState):
            raise TypeError(
                f"SandboxSDKClient.resume expects a SandboxSDKSessionState, not {type(state).__name__}"
            )
        state.assert_path_grants_rebound()
        _refuse_unsupported(state.manifest)
        inner = SandboxSDKSession(state, self.provider)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, SandboxSDKSessionState)
