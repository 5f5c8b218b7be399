"""The Docker provider; see the package docstring."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import logging
import math
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import anyio
import anyio.to_thread

try:
    import docker
    import docker.errors
    import docker.types
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the docker provider needs the docker package: pip install 'sandbox-sdk-py[docker]'"
    ) from exc

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.mounts import check_mounts
from sandbox_sdk.provider import SandboxProvider, labels_match
from sandbox_sdk.provider_kit import Lifetime, NativeRequest, Sleep, check_seconds
from sandbox_sdk.provider_kit.exec_runner import IMAGE_CHECK, IMAGE_LACKS, USED_MARKER
from sandbox_sdk.provider_kit.options import positive_int, string_map
from sandbox_sdk.providers.docker._errors import NameTakenError, translate_errors
from sandbox_sdk.providers.docker.sandbox import DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_TIMEOUT, DockerSandbox

logger = logging.getLogger(__name__)
lifecycle_log = logging.getLogger("sandbox_sdk.lifecycle")

#: The image sandboxes run unless told otherwise: a minimal Debian with python3 and a user
#: ``sandbox``, built from Debian's packages by ``scripts/services start`` (docs/docker.md).
DEFAULT_IMAGE = "sandbox-sdk/debian-python:bookworm"
#: Where commands run: an anonymous volume of the container's own (writable under the
#: read-only root, removed with the container), also the commands' ``HOME``.
WORKSPACE = "/workspace"
#: Every container this provider made carries this label, with the value ``docker``.
MANAGED_LABEL = "sandbox-sdk.provider"
#: A caller's label ``key`` is the container label ``sandbox-sdk.label.<key>``.
LABEL_PREFIX = "sandbox-sdk.label."
#: The epoch second after which a sandbox with a ``ttl`` is expired.
EXPIRES_LABEL = "sandbox-sdk.expires-at"
#: The user a sandbox's commands run as (the image's own user unless the provider names one);
#: the container's init runs as root, so that :meth:`DockerProvider._set_up` may chown.
USER_LABEL = "sandbox-sdk.user"
#: A sandbox's ``idle_timeout`` in seconds.
IDLE_LABEL = "sandbox-sdk.idle-timeout"
#: Default memory limit of a container (its tmpfs ``/tmp`` counts against it too).
DEFAULT_MEMORY_BYTES = 2 * 1024**3
#: Default limit on the number of processes (and threads) in a container.
DEFAULT_PIDS_LIMIT = 1024
#: The capabilities a container keeps (Docker's default set less NET_RAW, MKNOD,
#: AUDIT_WRITE, SETFCAP, SETPCAP and SYS_CHROOT). They matter only to commands run as root
#: (an image without a user of its own): package managers chown, setuid and write through
#: permission bits. A non-root user has none of them.
KEPT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
)
#: Options of ``create`` besides ``ttl`` and ``idle_timeout``.
SANDBOX_OPTIONS = frozenset(
    {"image", "env", "cpu", "memory_bytes", "pids_limit", "network", "name", "mounts"}
)
#: Seconds ``get_or_create`` waits for a container another process is starting under the
#: name it wants, before it gives up on it.
START_WAIT_SECONDS = 60.0
#: Pause between two looks at such a container.
START_POLL_SECONDS = 0.1
#: Run when a sandbox is created: says what the image lacks (exit 3), and whether the
#: workspace still has to be given to the sandbox's user (``$1``, empty for root): exit 5.
SETUP_SCRIPT = IMAGE_CHECK + (
    '[ -n "$1" ] || exit 0\n'
    'u=${1%%:*}; uid=$(id -u "$u" 2>/dev/null || echo "$u")\n'
    f'[ "$(stat -c %u {WORKSPACE})" = "$uid" ] || exit 5\n'
)
#: Exit status of :data:`SETUP_SCRIPT` when the workspace must change hands.
NOT_OWNED = 5


def sandbox_name(labels: Mapping[str, str]) -> str:
    """The container name ``get_or_create(labels=...)`` gives the sandbox it creates.

    Names are unique in an engine (creating a second container of a name fails with 409),
    so one name per label set makes concurrent ``get_or_create`` calls, in any process,
    agree on one container. A digest: names are ``[a-zA-Z0-9][a-zA-Z0-9_.-]*``, labels
    are not."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return f"sandbox-sdk-{hashlib.sha256(canonical.encode()).hexdigest()[:40]}"


@dataclass(frozen=True)
class FindNamed(NativeRequest):
    """The container called ``name`` (its inspection), or ``None``."""

    name: str


@dataclass(frozen=True)
class Remove(NativeRequest):
    """Remove the container ``container_id`` with its volumes; a missing one is fine."""

    container_id: str


def caller_labels(container_labels: Mapping[str, str]) -> dict[str, str]:
    """A caller's labels, from a container's."""
    return {
        key[len(LABEL_PREFIX) :]: value
        for key, value in container_labels.items()
        if key.startswith(LABEL_PREFIX)
    }


def expired(container_labels: Mapping[str, str], now: float) -> bool:
    """Whether a container's ``ttl`` has run out."""
    expires = container_labels.get(EXPIRES_LABEL)
    return expires is not None and now >= float(expires)


class DockerProviderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`DockerProvider` (``get_provider("docker", **config)``
    type-checks them against this; tests/test_registry.py keeps the two alike)."""

    base_url: str | None
    image: str
    user: str | None
    command_timeout: float
    max_output_bytes: int
    engine_timeout: float


class DockerProvider(SandboxProvider[DockerSandbox]):
    """Containers of one Docker Engine (``dockerd``, or podman's Docker-compatible service).

    ``DockerProvider(base_url=None, image=DEFAULT_IMAGE, user=None)``: ``base_url`` is the
    engine's address (``unix:///path/docker.sock``; default ``DOCKER_HOST``, else the
    engine's usual socket); ``user`` overrides the image's own user. ``create`` options:
    ``ttl``, ``idle_timeout`` (seconds; the idle timeout is enforced by :meth:`reap`),
    ``image``, ``env``, ``cpu`` (cores), ``memory_bytes``, ``pids_limit``, ``network``
    (``False``: none, the default; ``True``: the engine's default bridge; a string: that
    network), ``name``, ``mounts`` (host paths bound into the container:
    :class:`~sandbox_sdk.Mount`, docs/policy.md; the engine's host's paths). The image is
    never pulled.
    """

    name = "docker"
    supports_mounts = True

    def __init__(
        self,
        *,
        base_url: str | None = None,
        image: str = DEFAULT_IMAGE,
        user: str | None = None,
        command_timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        engine_timeout: float = 60.0,
    ) -> None:
        options: dict[str, Any] = docker.utils.kwargs_from_env()
        if base_url is not None:
            options["base_url"] = base_url
        with translate_errors("connect to the container engine"):
            self.client = docker.APIClient(version="auto", timeout=engine_timeout, **options)
        self.image = image
        self.user = user
        self.command_timeout = command_timeout
        self.max_output_bytes = max_output_bytes

    def _wrap(self, container_id: str, user: str) -> DockerSandbox:
        return DockerSandbox(
            self.client,
            container_id,
            user=user,
            workdir=WORKSPACE,
            timeout=self.command_timeout,
            max_output_bytes=self.max_output_bytes,
        )

    # -- create --------------------------------------------------------------------------

    def _create(self, *, labels: dict[str, str], **options: Any) -> DockerSandbox:
        lifetime = Lifetime.from_options(options, platform="Docker", default_idle_timeout=None)
        unknown = set(options) - SANDBOX_OPTIONS
        if unknown:
            raise errors.InvalidArgumentError(
                f"unknown Docker sandbox options {sorted(unknown)}; known: ttl, idle_timeout, "
                f"{', '.join(sorted(SANDBOX_OPTIONS))}"
            )
        container_labels = {MANAGED_LABEL: "docker"}
        image = options.get("image", self.image)
        with translate_errors(f"inspect image {image!r}"):
            user = self.user if self.user is not None else self.client.inspect_image(image)["Config"]["User"]
        container_labels[USER_LABEL] = user or "0"
        for key, value in labels.items():
            if not isinstance(key, str) or not isinstance(value, str) or not key:
                raise errors.InvalidArgumentError(f"invalid label {key!r}={value!r}")
            container_labels[LABEL_PREFIX + key] = value
        if lifetime.ttl is not None:
            container_labels[EXPIRES_LABEL] = repr(time.time() + lifetime.ttl)
        if lifetime.idle_timeout is not None:
            container_labels[IDLE_LABEL] = repr(lifetime.idle_timeout)
        with translate_errors(f"create a container of image {image!r}"):
            host_config = self.client.create_host_config(**self._host_options(options))
            env = {"HOME": WORKSPACE, **string_map("env", options.get("env") or {})}
            container_id = self.client.create_container(
                image,
                entrypoint=["sleep"],
                command=["infinity"],
                user="0",  # the init and its sleep; commands run as ``user`` (see _set_up)
                working_dir=WORKSPACE,
                environment=env,
                labels=container_labels,
                host_config=host_config,
                name=options.get("name"),
            )["Id"]
        try:
            with translate_errors(f"start container {container_id[:12]}"):
                self.client.start(container_id)
            self._set_up(container_id, image, "" if user in ("", "root", "0", "0:0") else user)
        except BaseException:
            with contextlib.suppress(Exception):
                self._remove(container_id)
            raise
        return self._wrap(container_id, user or "0")

    def _host_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The safe defaults (docs/docker.md), with the caller's limits."""
        network = options.get("network", False)
        if network is True:
            network_mode = "bridge"
        elif network is False:
            network_mode = "none"
        elif isinstance(network, str) and network:
            network_mode = network
        else:
            raise errors.InvalidArgumentError(f"network must be a bool or a network's name, not {network!r}")
        memory = positive_int("memory_bytes", options.get("memory_bytes", DEFAULT_MEMORY_BYTES))
        host: dict[str, Any] = {
            "init": True,
            "network_mode": network_mode,
            "read_only": True,
            "tmpfs": {"/tmp": "rw,nosuid,nodev,mode=1777"},
            "mounts": [
                docker.types.Mount(WORKSPACE, None, type="volume"),
                *(
                    docker.types.Mount(mount.target, mount.source, type="bind", read_only=mount.read_only)
                    for mount in check_mounts(options.get("mounts", ()), workspace=WORKSPACE)
                ),
            ],
            "cap_drop": ["ALL"],
            "cap_add": list(KEPT_CAPABILITIES),
            "security_opt": ["no-new-privileges"],
            "pids_limit": positive_int("pids_limit", options.get("pids_limit", DEFAULT_PIDS_LIMIT)),
            "mem_limit": memory,
            "memswap_limit": memory,
        }
        cpu = check_seconds("cpu", options.get("cpu"))  # a positive number, as seconds are
        if cpu is not None:
            host["nano_cpus"] = math.ceil(cpu * 1e9)
        return host

    def _set_up(self, container_id: str, image: str, user: str) -> None:
        """Check the image has what the SDK needs and give the workspace to ``user``.

        Where the image has no ``/workspace`` of that user (the volume copies the image's
        directory, owner included), a ``chown`` as root gives it, before any command of the
        sandbox's runs (an exec as root has the container's capabilities only because the
        container's own user is root: its init)."""
        code, output = self._run_fixed(container_id, image, ["sh", "-c", SETUP_SCRIPT, "setup", user])
        if code == NOT_OWNED:
            code, output = self._run_fixed(container_id, image, ["chown", "--", user, WORKSPACE])
        if code == IMAGE_LACKS:
            missing = output.partition("missing:")[2].split()
            raise errors.InvalidArgumentError(
                f"image {image!r} lacks {' and '.join(missing)}: the docker provider runs commands with "
                "bash and file operations with python3 (3.8 or newer)"
            )
        if code != 0:
            raise errors.SandboxRuntimeError(
                f"setting up container {container_id[:12]} failed (exit {code}): {output.strip()}"
            )

    def _run_fixed(self, container_id: str, image: str, argv: builtins.list[str]) -> tuple[int, str]:
        """Run one of our own commands as root; its exit status and output."""
        with translate_errors(f"set up container {container_id[:12]}"):
            try:
                exec_id = self.client.exec_create(container_id, argv, user="0")["Id"]
                output = self.client.exec_start(exec_id).decode("utf-8", "replace")
            except docker.errors.APIError as exc:
                if "executable file not found" in str(exc) or "no such file" in str(exc).lower():
                    raise errors.InvalidArgumentError(
                        f"image {image!r} has no {argv[0]}; the docker provider needs sh, bash and "
                        "python3 in the image"
                    ) from exc
                raise
            return int(self.client.exec_inspect(exec_id)["ExitCode"]), output

    # -- get, list, delete ----------------------------------------------------------------

    def _inspect(self, sandbox_id: str) -> dict[str, Any]:
        """The container ``sandbox_id`` (a full container id) if this provider made it."""
        if not isinstance(sandbox_id, str) or len(sandbox_id) != 64:
            raise errors.SandboxNotFoundError(f"no docker sandbox {sandbox_id!r}")
        with translate_errors(f"get sandbox {sandbox_id[:12]}"):
            attrs: dict[str, Any] = self.client.inspect_container(sandbox_id)
        if attrs["Id"] != sandbox_id or (attrs["Config"]["Labels"] or {}).get(MANAGED_LABEL) != "docker":
            raise errors.SandboxNotFoundError(f"no docker sandbox {sandbox_id!r}")
        return attrs

    def _get(self, sandbox_id: str) -> DockerSandbox:
        attrs = self._inspect(sandbox_id)
        if expired(attrs["Config"]["Labels"], time.time()):
            self._remove(sandbox_id)
            lifecycle_log.info("%s: reaped sandbox %s (its ttl ran out)", self.name, sandbox_id)
            raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} has expired (its ttl ran out)")
        if not attrs["State"]["Running"]:
            raise errors.SandboxNotFoundError(
                f"sandbox {sandbox_id} is not running ({attrs['State']['Status']})"
            )
        return self._wrap(sandbox_id, attrs["Config"]["Labels"].get(USER_LABEL) or "0")

    def _containers(self) -> builtins.list[dict[str, Any]]:
        """Every container this provider made, oldest first (ties by id)."""
        with translate_errors("list containers"):
            found = self.client.containers(all=True, filters={"label": f"{MANAGED_LABEL}=docker"})
        return sorted(found, key=lambda item: (int(item["Created"]), item["Id"]))

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """Sandboxes carrying ``labels``, oldest first; the cursor is the last one's place."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise errors.InvalidArgumentError(f"limit must be an int >= 1, not {limit!r}")
        after = _cursor_key(cursor)
        items: builtins.list[SandboxInfo] = []
        for container in self._containers():
            key = (int(container["Created"]), container["Id"])
            if after is not None and key <= after:
                continue
            mine = caller_labels(container.get("Labels") or {})
            if not labels_match(mine, labels):
                continue
            if len(items) == limit:
                last = items[-1]
                return SandboxPage(items=items, next_cursor=f"{int(last.created_at.timestamp())}:{last.id}")
            items.append(
                SandboxInfo(
                    id=container["Id"],
                    labels=mine,
                    created_at=datetime.fromtimestamp(int(container["Created"]), UTC),
                    status=container.get("State") or "unknown",
                    metadata={"name": (container.get("Names") or [""])[0].lstrip("/")},
                )
            )
        return SandboxPage(items=items)

    def _delete(self, sandbox_id: str) -> None:
        try:
            self._inspect(sandbox_id)
        except errors.SandboxNotFoundError:
            return
        self._remove(sandbox_id)

    def _remove(self, container_id: str) -> None:
        with (
            contextlib.suppress(errors.SandboxNotFoundError),
            translate_errors(f"remove {container_id[:12]}"),
        ):
            self.client.remove_container(container_id, v=True, force=True)

    def reap(self) -> builtins.list[str]:
        """Delete every sandbox whose ``ttl`` ran out, that sat idle past its
        ``idle_timeout`` (the time its last command started, recorded in the container),
        or whose container stopped; returns their ids."""
        now = time.time()
        reaped = []
        for container in self._containers():
            container_id, state = container["Id"], container.get("State")
            labels = container.get("Labels") or {}
            if state == "created":  # another process is starting it
                continue
            gone = state != "running" or expired(labels, now)
            if not gone and IDLE_LABEL in labels:
                gone = self._idle_for(container_id, int(container["Created"])) > float(labels[IDLE_LABEL])
            if gone:
                self._remove(container_id)
                lifecycle_log.info("%s: reaped sandbox %s", self.name, container_id)
                reaped.append(container_id)
        return reaped

    def _idle_for(self, container_id: str, created: int) -> float:
        """Seconds since the container's last command started (since its creation if none did)."""
        probe = f"date +%s; stat -c %Y {USED_MARKER} 2>/dev/null || echo {created}"
        with translate_errors(f"check idle time of {container_id[:12]}"):
            exec_id = self.client.exec_create(container_id, ["sh", "-c", probe], user="0")["Id"]
            now, used = self.client.exec_start(exec_id).split()[:2]
        return float(now) - float(used)

    # -- get_or_create by labels: one container name per label set ---------------------------

    def _reuse_or_create(
        self, labels: Mapping[str, str], options: dict[str, Any]
    ) -> Generator[Any, Any, DockerSandbox]:
        """The live container named after ``labels``, else the base's (a sandbox carrying
        exactly ``labels``, else a new one), created under that name: of processes creating
        at once, one wins the name and the others wait for its container to start."""
        name = options.get("name") or sandbox_name(labels)
        found = yield from self._named_live(name)
        if found is not None:
            return found
        try:
            return (yield from super()._reuse_or_create(labels, {**options, "name": name}))
        except NameTakenError:
            winner = yield from self._named_live(name, appearing=True)
            if winner is None:
                raise
            return winner

    def _named_live(self, name: str, *, appearing: bool = False) -> Generator[Any, Any, DockerSandbox | None]:
        """The container called ``name`` once it runs, if it answers; one that stopped or
        expired is removed (so the name is free), one still starting is waited for. The
        engine reserves a name before the container it names can be looked up: with
        ``appearing`` (the name was just refused), a missing container is waited for too."""
        waited = 0.0
        while True:
            attrs = yield FindNamed(name)
            if attrs is None and appearing and waited < START_WAIT_SECONDS:
                yield Sleep(START_POLL_SECONDS)
                waited += START_POLL_SECONDS
                continue
            if attrs is None:
                return None
            labels = attrs["Config"]["Labels"] or {}
            status = attrs["State"]["Status"]
            if status == "created" and waited < START_WAIT_SECONDS:
                yield Sleep(START_POLL_SECONDS)
                waited += START_POLL_SECONDS
                continue
            if status == "running" and not expired(labels, time.time()):
                sandbox = self._handed_out(self._wrap(attrs["Id"], labels.get(USER_LABEL) or "0"))
                if (yield from self._op_is_alive(sandbox)):
                    return sandbox
            logger.warning(
                "get_or_create: container %s (%s) is %s; removing it for a new, empty one",
                name,
                attrs["Id"][:12],
                "expired" if expired(labels, time.time()) else status,
            )
            yield Remove(attrs["Id"])
            return None

    def _perform(self, request: Any) -> Any:
        """Our own requests; the rest as the base does."""
        if isinstance(request, FindNamed):
            with contextlib.suppress(errors.SandboxNotFoundError), translate_errors(f"find {request.name}"):
                attrs = self.client.inspect_container(request.name)
                if (attrs["Config"]["Labels"] or {}).get(MANAGED_LABEL) == "docker":
                    return attrs
            return None
        if isinstance(request, Remove):
            return self._remove(request.container_id)
        return super()._perform(request)

    async def _aperform(self, request: Any) -> Any:
        """Our own requests in a worker thread (the client blocks); the rest as the base does."""
        if isinstance(request, FindNamed | Remove):
            return await anyio.to_thread.run_sync(self._perform, request)
        return await super()._aperform(request)

    def close(self) -> None:
        """Close the engine client's connections; idempotent."""
        self.client.close()


def _cursor_key(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    created, _, container_id = cursor.partition(":")
    if not created.isdigit() or len(container_id) != 64:
        raise errors.InvalidArgumentError(f"not a cursor of this provider: {cursor!r}")
    return int(created), container_id


__all__ = ["DEFAULT_IMAGE", "DockerProvider", "sandbox_name"]
