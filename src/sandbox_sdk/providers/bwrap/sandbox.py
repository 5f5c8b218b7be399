"""The bwrap sandbox; see the package docstring."""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from sandbox_sdk import errors, protocol
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.limits import Limits
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.mounts import Mount, check_mounts, open_source
from sandbox_sdk.network import NetworkPolicy
from sandbox_sdk.provider_kit import command_seconds
from sandbox_sdk.provider_kit.egress_proxy import proxy_env
from sandbox_sdk.provider_kit.host_process import LARGE_COMMAND_BYTES, bash_script
from sandbox_sdk.provider_kit.host_state import mark_used
from sandbox_sdk.provider_kit.port_forward import ExposedPorts
from sandbox_sdk.providers.bwrap import _keyring, _scripts, _seccomp
from sandbox_sdk.providers.bwrap._jail import (
    CANCEL_POLL_SECONDS,
    KILL_SECONDS,
    Expiry,
    JailClient,
    stop_jail,
)

#: Where the workspace appears inside the jail (and the working directory).
WORKSPACE_PATH = "/workspace"
TMP_DIR = "tmp"
#: In a sandbox's state directory: its jail's socket, lock, pid and log.
JAIL_DIR = "jail"
DEFAULT_MAX_OUTPUT_BYTES = 8 * 1024 * 1024
PROBE_OUTPUT_BYTES = 64 * 1024
#: Host uid/gid the jail runs as when the SDK runs as root (``nobody``).
DEFAULT_ROOT_SANDBOX_USER = (65534, 65534)
#: Top-level directories that are the system (or symlinks into ``/usr``).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What of ``/etc`` programs need to run: the dynamic linker, certificates,
#: name resolution (used only with the network on), time zone. Not passwd,
#: shadow, ssh keys or anything else of the host's configuration.
ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "localtime",
    "mime.types",
    "resolv.conf",
    "hosts",
    "nsswitch.conf",
    "gai.conf",
    "host.conf",
    "protocols",
    "services",
)
#: Toolchain configuration that packages installed under ``/usr`` keep in
#: ``/etc`` and link to from there (Debian's OpenJDK: ``/usr/lib/jvm/*/conf``
#: holds links into ``/etc/java-17-openjdk``; without it ``java`` cannot load
#: its ``java.security`` file).
ETC_TOOLCHAIN_PATTERNS = ("java-*",)
#: What ``/proc`` tells of kernel keys: every key the reader may view, by
#: name, and key counts per user. Masked with /dev/null, as Docker masks
#: ``/proc/keys`` (moby/moby daemon/pkg/oci/defaults.go, MaskedPaths).
KEYRING_FILES = ("/proc/keys", "/proc/key-users")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {
    "PATH": PATH,
    "HOME": WORKSPACE_PATH,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}
INSTALL_HINT = (
    "Install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`; "
    "Arch: `pacman -S bubblewrap`), or, for trusted code only, choose the unisolated local provider "
    'explicitly: get_provider("local").'
)
NAMESPACE_HINT = (
    "bubblewrap could not create its namespaces. Unprivileged user namespaces may be disabled: "
    "`sysctl kernel.unprivileged_userns_clone=1` (older Debian), "
    "`sysctl kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap "
    "(Ubuntu 23.10+), `sysctl user.max_user_namespaces=15000`; in a container, allow them "
    "(e.g. Docker `--security-opt seccomp=unconfined --security-opt apparmor=unconfined`). "
    'For trusted code only, the unisolated local provider is available: get_provider("local").'
)


class ResourceLimits(BaseModel):
    """Limits on everything one ``execute()`` starts. ``None`` leaves a limit
    as the host has it.

    ``memory_bytes``, ``file_size_bytes`` and ``cpu_seconds`` are rlimits of
    each process (address space, largest file written, CPU time);
    ``processes`` bounds the processes and threads of one jail at once (an
    rlimit counted in the jail's own user namespace, see docs/bwrap.md), so
    the memory of a jail is at most ``processes * memory_bytes``.
    ``timeout`` is the default wall-clock limit, after which every process of
    the jail is killed.

    ``memory_bytes`` limits address space, which runtimes reserve far beyond
    what they use: a JVM reserves 1 GiB of class space and sizes its heap to
    half the limit (under 4 GiB it does not start), so the default, 8 GiB,
    runs Java, Node, Go and Python as they come (docs/bwrap.md)."""

    model_config = ConfigDict(frozen=True)

    memory_bytes: int | None = Field(default=8 * 1024**3, gt=0)
    processes: int | None = Field(default=256, gt=0)
    file_size_bytes: int | None = Field(default=1024**3, gt=0)
    cpu_seconds: int | None = Field(default=600, gt=0)
    open_files: int | None = Field(default=1024, gt=0)
    timeout: float = Field(default=120.0, gt=0)

    def prlimit_args(self) -> list[str]:
        """Hard and soft limits both (the jail cannot raise them back).
        ``cpu_seconds`` is not among them: the jail's server, whose CPU time
        adds up over the sandbox's life, sets it on each command instead."""
        pairs = (
            ("--as", self.memory_bytes),
            ("--nproc", self.processes),
            ("--fsize", self.file_size_bytes),
            ("--nofile", self.open_files),
        )
        return [f"{flag}={value}" for flag, value in pairs if value is not None] + ["--core=0"]


def _tool(name: str, package: str = "util-linux") -> str:
    path = shutil.which(name, path=PATH)
    if path is None:
        raise errors.ProviderUnavailableError(
            f"`{name}` ({package}) is required by the bwrap provider but was not found on {PATH}"
        )
    return path


@contextlib.contextmanager
def _memory_file(name: str, data: bytes) -> Iterator[int]:
    """A descriptor of an anonymous in-memory file holding ``data``, read
    from its start by whoever inherits it."""
    fd = os.memfd_create(name)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def _nul_separated(args: Sequence[str]) -> bytes:
    """``args`` as ``bwrap --args`` reads them. A NUL inside one would split
    it into options of the caller's choosing, so it is refused."""
    if any("\0" in arg for arg in args):
        raise errors.InvalidArgumentError("a NUL character in an environment variable or path given to bwrap")
    return b"".join(os.fsencode(arg) + b"\0" for arg in args)


def is_initial_user_namespace() -> bool:
    """Whether uids here are the host's (not remapped by a container runtime);
    only the host's root is exempt from ``RLIMIT_NPROC``."""
    try:
        with open("/proc/self/uid_map") as uid_map:
            return uid_map.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def _system_mounts(extra_ro_binds: Sequence[str]) -> list[str]:
    args: list[str] = []
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    args += ["--perms", "0755", "--dir", "/etc"]
    toolchains = sorted(
        os.path.basename(p) for pattern in ETC_TOOLCHAIN_PATTERNS for p in glob.glob(f"/etc/{pattern}")
    )
    for entry in (*ETC_ENTRIES, *toolchains):
        args += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
    for path in extra_ro_binds:
        args += ["--ro-bind", path, path]
    return args


def _shared_memory(limits: ResourceLimits) -> list[str]:
    """A private ``/dev/shm`` every user may write (POSIX semaphores and
    shared memory, ``multiprocessing`` locks), capped at ``memory_bytes``:
    tmpfs pages count towards no process's address space limit."""
    size = [] if limits.memory_bytes is None else ["--size", str(limits.memory_bytes)]
    return ["--perms", "01777", *size, "--tmpfs", "/dev/shm"]


def _parents(path: str) -> list[str]:
    """Options that make ``path``'s parents on the jail's root 0755 (bwrap
    makes a mount point's missing parents 0700: its user could not reach
    it)."""
    parents = [str(parent) for parent in reversed(PurePosixPath(path).parents) if str(parent) != "/"]
    return [arg for parent in parents for arg in ("--perms", "0755", "--dir", parent)]


def _user_mounts(mounts: Sequence[Mount], sources: Sequence[int]) -> list[str]:
    """The user's mounts, each bound from its descriptor, its parents 0755."""
    args: list[str] = []
    for mount, fd in zip(mounts, sources, strict=True):
        args += _parents(mount.target)
        args += ["--ro-bind-fd" if mount.read_only else "--bind-fd", str(fd), mount.target]
    return args


@contextlib.contextmanager
def _closing(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


class JailSettings(NamedTuple):
    """What one sandbox's jail is made of."""

    workspace: Path
    tmp_dir: Path
    limits: ResourceLimits
    #: ``True``: the host's network; ``False``: none; a policy: none but the egress proxy.
    network: bool | NetworkPolicy
    mounts: tuple[Mount, ...] = ()


class Jail:
    """How to start a bwrap jail on this host, checked once by :meth:`probe`.

    As an ordinary user, bwrap makes a user namespace for the jail (and
    forbids nested ones), which also makes ``RLIMIT_NPROC`` count only the
    jail's processes, and loads the seccomp filter (``_seccomp``) before the
    jail's server starts. The host's root (uid 0 not remapped by a container)
    is exempt from ``RLIMIT_NPROC``, so as root bwrap mounts as root, then the
    server drops to ``root_sandbox_user`` with no capabilities and
    ``no_new_privs``, enters a user namespace of its own, sets the limits and
    loads the filter, which from then on refuses new namespaces (so none can
    be nested to escape the limits); bwrap cannot load it, since it would
    refuse that ``unshare`` too. Every command the server starts inherits all
    of it."""

    def __init__(
        self,
        *,
        bwrap: str | None = None,
        root_sandbox_user: tuple[int, int] = DEFAULT_ROOT_SANDBOX_USER,
        extra_ro_binds: Sequence[str] = (),
    ) -> None:
        found = shutil.which(bwrap or "bwrap", path=PATH if bwrap is None else None)
        if found is None:
            raise errors.ProviderUnavailableError(
                f"bubblewrap (`{bwrap or 'bwrap'}`) was not found. {INSTALL_HINT}"
            )
        self.bwrap = found
        self.as_root = os.geteuid() == 0 and is_initial_user_namespace()
        self.root_sandbox_user = root_sandbox_user
        self.prlimit = _tool("prlimit")
        self.setsid = _tool("setsid")
        self.python = _tool("python3", "python3")
        self.setpriv = _tool("setpriv") if self.as_root else ""
        self.unshare = _tool("unshare") if self.as_root else ""
        self.perl = _tool("perl", "perl-base") if self.as_root else ""
        self.system_mounts = _system_mounts(extra_ro_binds)
        self.proc_masks = [
            arg for path in KEYRING_FILES if os.path.exists(path) for arg in ("--dev-bind", "/dev/null", path)
        ]
        self.seccomp_filter = _seccomp.deny_filter()

    def start(
        self,
        settings: JailSettings,
        scripts: Path,
        server_args: Sequence[str],
        info_fd: int,
        pass_fds: Sequence[int],
        log_fd: int,
    ) -> None:
        """Start a jail running the server with ``server_args``, detached
        (``setsid --fork``: bwrap's parent is then init, not this process,
        which it outlives), from a thread that has a session keyring of its
        own (``_keyring``), with ``scripts`` (``_scripts``) read-only in
        it. bwrap writes its PID 1's host pid (the server's,
        see ``options``) to ``info_fd``; ``pass_fds`` reach the server;
        bwrap's and the server's stderr go to ``log_fd``. bwrap reads its
        options from a descriptor, since they name host paths, which no
        ``ps`` should show; the server's source comes in one too."""
        with contextlib.ExitStack() as stack:
            filter_fd = stack.enter_context(_memory_file("sandbox-sdk-seccomp", self.seccomp_filter))
            script_fd = stack.enter_context(_memory_file("sandbox-sdk-jail-server", _server_source()))
            sources = [stack.enter_context(_closing(open_source(mount))) for mount in settings.mounts]
            options = [*self.options(settings, scripts, sources), "--info-fd", str(info_fd)]
            if not self.as_root:
                options += ["--seccomp", str(filter_fd)]
            args_fd = stack.enter_context(_memory_file("sandbox-sdk-bwrap-args", _nul_separated(options)))
            server = [self.python, "-I", "-S", f"/dev/fd/{script_fd}", *server_args]
            argv = [self.setsid, "--fork", self.bwrap, "--args", str(args_fd), "--"]
            argv += self.command(server, settings.limits, filter_fd)
            run = functools.partial(
                subprocess.run,
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                env={"PATH": PATH},
                pass_fds=(*pass_fds, *sources, info_fd, filter_fd, script_fd, args_fd),
                check=False,
            )
            _keyring.in_new_session_keyring(run)

    def options(self, settings: JailSettings, scripts: Path, sources: Sequence[int] = ()) -> list[str]:
        """bwrap's options: namespaces, mounts, environment. The server is the
        PID namespace's PID 1 (``--as-pid-1``, no bwrap process in the jail):
        no command can signal it, not even with ``kill -9 -1``
        (``_jail_server``). ``sources`` are the descriptors of the user's
        mounts' sources (``mounts.open_source``), bound by descriptor."""
        options = [
            "--new-session",
            "--unshare-pid",
            "--as-pid-1",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
        ]
        if settings.network is not True:
            options.append("--unshare-net")
        if self.as_root:  # to drop to the sandbox user below; dropped with it
            options += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            options += ["--unshare-user", "--disable-userns"]
        options += self.system_mounts
        options += [
            "--proc", "/proc",
            *self.proc_masks,
            "--dev", "/dev",
            *_shared_memory(settings.limits),
            "--bind", str(settings.workspace), WORKSPACE_PATH,
            "--bind", str(settings.tmp_dir), "/tmp",
            *_parents(_scripts.JAIL_PATH),
            "--ro-bind", str(scripts), _scripts.JAIL_PATH,
            *_user_mounts(settings.mounts, sources),
            "--remount-ro", "/",  # the jail's own root and /etc: nothing to write there
            "--chdir", WORKSPACE_PATH,
            "--clearenv",
        ]  # fmt: skip
        for key, value in BASE_ENV.items():
            options += ["--setenv", key, value]
        return options

    def command(self, server: list[str], limits: ResourceLimits, filter_fd: int) -> list[str]:
        """What bwrap runs: the steps before the ``server`` (as root, the
        filter is loaded last, from ``filter_fd``)."""
        limited = [self.prlimit, *limits.prlimit_args(), "--"]
        if not self.as_root:
            return [*limited, *server]
        uid, gid = (str(n) for n in self.root_sandbox_user)
        return [
            *(self.setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs", "--"),
            *(self.unshare, "--user", f"--map-user={uid}", f"--map-group={gid}", "--"),
            *limited,
            *(self.perl, *_seccomp.loader_args(filter_fd)),
            *server,
        ]

    def probe(self, scratch: Path) -> None:
        """Start one jail and run a command in it; raise
        ``ProviderUnavailableError`` saying why not."""
        workspace, tmp_dir = scratch / "workspace", scratch / "tmp"
        for directory in (workspace, tmp_dir):
            directory.mkdir(exist_ok=True)
            self.own(directory)
        settings = JailSettings(workspace, tmp_dir, ResourceLimits(), network=False)
        client = JailClient(self, settings, scratch / JAIL_DIR, Expiry())
        try:
            result = client.run("exit 0", (), env=BASE_ENV, timeout=60, max_output_bytes=PROBE_OUTPUT_BYTES)
        except OSError as exc:
            raise errors.ProviderUnavailableError(
                f"bubblewrap could not be started: {exc}. {INSTALL_HINT}"
            ) from exc
        except errors.SandboxError as exc:
            raise errors.ProviderUnavailableError(f"{NAMESPACE_HINT} (bwrap said: {exc})") from exc
        finally:
            stop_jail(scratch / JAIL_DIR)
        if result.exit_code != 0:
            raise errors.ProviderUnavailableError(
                f"{NAMESPACE_HINT} (bwrap said: {result.output.strip() or result.exit_code})"
            )

    def own(self, directory: Path) -> None:
        """Make a directory the jail writes to belong to the user it runs as."""
        if self.as_root:
            try:
                os.chown(directory, *self.root_sandbox_user)
            except OSError as exc:
                raise errors.ProviderUnavailableError(
                    f"cannot give {directory} to uid/gid {self.root_sandbox_user} (root_sandbox_user): {exc}"
                ) from exc


@functools.lru_cache(maxsize=8)
def checked_jail(
    bwrap: str | None, root_sandbox_user: tuple[int, int], extra_ro_binds: tuple[str, ...]
) -> Jail:
    """A :class:`Jail` that has started once in this process (the probe is cached)."""
    jail = Jail(bwrap=bwrap, root_sandbox_user=root_sandbox_user, extra_ro_binds=extra_ro_binds)
    with tempfile.TemporaryDirectory(prefix="sandbox-sdk-bwrap-probe-") as scratch:
        os.chmod(scratch, 0o755)
        jail.probe(Path(scratch))
    return jail


class BwrapSandbox(BaseSandbox):
    """Runs each command in the sandbox's bubblewrap jail over ``workspace``.

    ``tmp_dir`` is mounted as the jail's ``/tmp``. Both must be writable by
    the user the jail runs as (``root_sandbox_user`` under root). The jail is
    started on first use and kept running (background processes live on in
    it, see docs/bwrap.md); its socket and records are in ``state_dir/jail``
    (``state_dir`` also holds the ``last-used`` file each command touches).
    Usually obtained from :class:`BwrapProvider`, whose ``delete`` and
    ``reap`` end the jail; one made without a ``state_dir`` keeps its jail
    in a temporary directory, ended when the object is collected.

    Commands longer than one argument reach the jail's bash through an
    in-memory file it inherits, so a round trip carries up to 4 MiB."""

    limits = Limits(max_command_bytes=LARGE_COMMAND_BYTES)
    #: The scripts and the operation server are the jail's own, out of its
    #: commands' reach (``_scripts``, ``_jail_server``; docs/security.md).
    installed_scripts = _scripts.JAIL_PATH
    operation_channel = True

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        tmp_dir: str | os.PathLike[str],
        sandbox_id: str | None = None,
        limits: ResourceLimits | None = None,
        network: bool | NetworkPolicy = False,
        mounts: Sequence[Mount] = (),
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        bwrap: str | None = None,
        root_sandbox_user: tuple[int, int] = DEFAULT_ROOT_SANDBOX_USER,
        extra_ro_binds: Sequence[str] = (),
        state_dir: Path | None = None,
        expiry: Expiry | None = None,
    ) -> None:
        self.workspace = Path(workspace).resolve()
        self.tmp_dir = Path(tmp_dir).resolve()
        for directory in (self.workspace, self.tmp_dir):
            if not directory.is_dir():
                raise NotADirectoryError(f"not a directory: {directory}")
        jail = checked_jail(bwrap, tuple(root_sandbox_user), tuple(extra_ro_binds))
        self._id = sandbox_id or f"bwrap-{self.workspace.name}"
        #: The jail's resource limits (``limits`` above; the round-trip limits are ``self.limits``).
        self.resources = limits or ResourceLimits()
        self.network = network
        proxied = proxy_env() if isinstance(network, NetworkPolicy) else {}
        self.env = {**BASE_ENV, **proxied, **(env or {})}
        self.limits = replace(self.limits, max_output_bytes=max_output_bytes)
        self.state_dir = state_dir
        if state_dir is None:
            jail_dir = Path(tempfile.mkdtemp(prefix="sandbox-sdk-bwrap-jail-"))
            weakref.finalize(self, _discard_jail, jail_dir)
        else:
            jail_dir = state_dir / JAIL_DIR
        #: Host paths bound into the jail (``create(mounts=...)``), checked.
        self.mounts = check_mounts(mounts, workspace=WORKSPACE_PATH)
        settings = JailSettings(self.workspace, self.tmp_dir, self.resources, self.network, self.mounts)
        self.jail = JailClient(jail, settings, jail_dir, expiry or Expiry())
        self._ports = ExposedPorts(self.jail.connect_port)

    @property
    def id(self) -> str:
        return self._id

    def expose_port(self, port: int, *, host: str = "127.0.0.1") -> str:
        """A URL on the host reaching ``port`` in the jail: a forwarder on
        ``host`` (loopback by default) whose every connection the jail's
        server makes from inside the jail's network namespace (docs/policy.md).
        Exposing a port again returns the same URL."""
        return self._ports.expose(port, host)

    def unexpose(self, port: int) -> None:
        self._ports.unexpose(port)

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        return self._execute(command, timeout, None)

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        """In a worker thread, like the default; a cancellation kills the
        command's group before it propagates."""
        cancelled = threading.Event()
        finished = threading.Event()

        def run() -> ExecuteResponse:
            try:
                return self._execute(command, timeout, cancelled)
            finally:
                finished.set()

        try:
            return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(finished.wait, KILL_SECONDS + CANCEL_POLL_SECONDS)
            raise

    def _execute(
        self, command: str, timeout: float | None, cancelled: threading.Event | None
    ) -> ExecuteResponse:
        if not isinstance(command, str):
            raise errors.InvalidArgumentError("command must be a str")
        if self.state_dir is not None:
            mark_used(self.state_dir)
        with bash_script(command) as (script, script_fds):
            return self.jail.run(
                script,
                script_fds,
                channel=command.startswith(protocol.CHANNEL_REQUEST),
                env=self.env,
                timeout=command_seconds(timeout, self.resources.timeout),
                max_output_bytes=self.limits.max_output_bytes,
                cancelled=cancelled,
            )

    def __repr__(self) -> str:
        return f"BwrapSandbox({str(self.workspace)!r}, id={self.id!r}, network={self.network})"


def _discard_jail(jail_dir: Path) -> None:
    stop_jail(jail_dir)
    shutil.rmtree(jail_dir, ignore_errors=True)


@functools.cache
def _server_source() -> bytes:
    """The jail server's source, run by the jail's ``python3``."""
    return Path(__file__).with_name("_jail_server.py").read_bytes()
