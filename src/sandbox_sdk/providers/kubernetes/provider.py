"""The Kubernetes provider; see the package docstring."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import anyio.to_thread

try:
    import kubernetes.client
    import kubernetes.config
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the kubernetes provider needs the kubernetes package: pip install 'sandbox-sdk-py[kubernetes]'"
    ) from exc

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxInfo, SandboxPage
from sandbox_sdk.provider import SandboxProvider, labels_match
from sandbox_sdk.provider_kit import Lifetime, NativeRequest, Sleep
from sandbox_sdk.provider_kit.exec_runner import IMAGE_CHECK, IMAGE_LACKS
from sandbox_sdk.provider_kit.options import positive_int, string_map
from sandbox_sdk.providers.kubernetes import _exec
from sandbox_sdk.providers.kubernetes._errors import NameTakenError, translate_errors
from sandbox_sdk.providers.kubernetes.sandbox import (
    CONTAINER,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TIMEOUT,
    KubernetesSandbox,
)

logger = logging.getLogger(__name__)
lifecycle_log = logging.getLogger("sandbox_sdk.lifecycle")

#: The image sandboxes run unless told otherwise: the docker provider's (a minimal Debian
#: with python3 and a user ``sandbox``, uid 1000), which ``scripts/services start`` builds
#: into the dockerd the test cluster's kubelet drives (docs/kubernetes.md).
DEFAULT_IMAGE = "sandbox-sdk/debian-python:bookworm"
#: Where commands run: an ``emptyDir`` of the pod (writable under the read-only root,
#: removed with the pod), also the commands' ``HOME``.
WORKSPACE = "/workspace"
#: Every pod this provider made carries this label, with the value ``kubernetes``.
MANAGED_LABEL = "sandbox-sdk.dev/provider"
#: A caller's labels, as JSON (Kubernetes label values cannot hold arbitrary strings).
LABELS_ANNOTATION = "sandbox-sdk.dev/labels"
#: Each caller label is also a pod label ``l.sandbox-sdk.dev/<digest of key>: <digest of
#: value>``, so ``list(labels=...)`` is a label selector the API server evaluates.
SELECTOR_PREFIX = "l.sandbox-sdk.dev/"
#: The epoch second after which a sandbox with a ``ttl`` is expired.
EXPIRES_ANNOTATION = "sandbox-sdk.dev/expires-at"
#: A sandbox's ``idle_timeout`` in seconds.
IDLE_ANNOTATION = "sandbox-sdk.dev/idle-timeout"
#: The epoch second of the sandbox's last use, written by its handles (at most once per
#: keep-alive interval).
USED_ANNOTATION = "sandbox-sdk.dev/last-used"
#: Options of ``create`` besides ``ttl`` and ``idle_timeout``.
SANDBOX_OPTIONS = frozenset({"image", "env", "cpu", "memory_bytes", "ephemeral_storage_bytes", "name"})
#: Default memory limit of a pod's container.
DEFAULT_MEMORY_BYTES = 2 * 1024**3
#: Default limit on what the container may write to its writable layer and its emptyDirs.
DEFAULT_EPHEMERAL_STORAGE_BYTES = 4 * 1024**3
#: What a sandbox's pod asks the scheduler for (limits are the caller's): small, so a node
#: holds many idle sandboxes (at most the limits).
REQUEST_MILLICPU = 50
REQUEST_MEMORY_BYTES = 64 * 1024**2
#: Seconds a new pod may take to run (scheduling, an image pull, the container's start).
START_SECONDS = 120.0
#: Pause between two looks at a pod that is starting.
POLL_SECONDS = 0.1
#: Container states that will not end in a running container.
FAILED_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
#: A warm pool's pods carry this label, with the digest of their pod spec (the template).
POOL_LABEL = "sandbox-sdk.dev/pool"
#: ``warm`` on a pool pod until a ``create`` claims it (then ``claimed``); a warm pod is no
#: sandbox yet: ``get``, ``list`` and ``reap`` do not see it.
STATE_LABEL = "sandbox-sdk.dev/state"
#: Seconds between two looks at the pool when nothing was claimed (a warm pod may have died).
POOL_CHECK_SECONDS = 5.0
#: The deny-all NetworkPolicy ``network_policy=True`` keeps in the namespace.
NETWORK_POLICY = "sandbox-sdk-deny-all"


def sandbox_name(labels: Mapping[str, str]) -> str:
    """The pod name ``get_or_create(labels=...)`` gives the sandbox it creates.

    Names are unique in a namespace (creating a second pod of a name fails with 409
    AlreadyExists), so one name per label set makes concurrent ``get_or_create`` calls,
    in any process on any machine, agree on one pod with no lock of ours."""
    return f"sbx-{_digest(json.dumps(sorted(labels.items()), separators=(',', ':')))[:40]}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def selector_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The pod labels standing for a caller's labels (digests: label values are limited
    to 63 characters of ``[A-Za-z0-9_.-]``, a caller's are any strings)."""
    return {SELECTOR_PREFIX + _digest(key)[:40]: _digest(value)[:40] for key, value in labels.items()}


def caller_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    """A caller's labels, from a pod's annotation."""
    raw = (pod["metadata"].get("annotations") or {}).get(LABELS_ANNOTATION) or "{}"
    try:
        labels = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def expired(pod: Mapping[str, Any], now: float) -> bool:
    """Whether a pod's ``ttl`` has run out."""
    expires = (pod["metadata"].get("annotations") or {}).get(EXPIRES_ANNOTATION)
    return expires is not None and now >= float(expires)


def pod_sandbox_id(pod: Mapping[str, Any]) -> str:
    """A sandbox's id: its pod's name and the start of the pod's uid. A pod made again under
    a name (``get_or_create`` after a delete) is a new sandbox, and a handle or id of the
    old one finds nothing rather than the new pod."""
    meta = pod["metadata"]
    return f"{meta['name']}.{meta['uid'].replace('-', '')[:12]}"


def split_id(sandbox_id: object) -> tuple[str, str]:
    """The pod name and uid prefix of a sandbox id, or ``SandboxNotFoundError``."""
    name, _, tag = sandbox_id.rpartition(".") if isinstance(sandbox_id, str) else ("", "", "")
    if not name.startswith("sbx-") or len(tag) != 12:
        raise errors.SandboxNotFoundError(f"no kubernetes sandbox {sandbox_id!r}")
    return name, tag


def pod_running(pod: Mapping[str, Any]) -> bool:
    """Whether the pod runs and its container is up."""
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(containers)
        and "running" in (containers[0].get("state") or {})
    )


def _created(pod: Mapping[str, Any]) -> datetime:
    stamp = pod["metadata"]["creationTimestamp"]
    created = datetime.fromisoformat(str(stamp))
    return created if created.tzinfo else created.replace(tzinfo=UTC)


@dataclass(frozen=True)
class FindPod(NativeRequest):
    """The pod called ``name`` if this provider made it (as a dict), or ``None``."""

    name: str


@dataclass(frozen=True)
class RemovePod(NativeRequest):
    """Delete the pod ``name`` if it is still the one of ``uid``; a missing one is fine."""

    name: str
    uid: str


class KubernetesProviderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`KubernetesProvider` (``get_provider("kubernetes",
    **config)`` type-checks them against this; tests/test_registry.py keeps the two alike)."""

    namespace: str | None
    image: str
    kubeconfig: str | os.PathLike[str] | None
    context: str | None
    in_cluster: bool | None
    run_as_user: int | None
    image_pull_policy: str
    network_policy: bool
    command_timeout: float
    max_output_bytes: int
    api_timeout: float
    start_timeout: float
    exec_protocols: tuple[str, ...]
    warm_pool: int


class KubernetesProvider(SandboxProvider[KubernetesSandbox]):
    """Pods of one namespace of a Kubernetes cluster, one per sandbox.

    ``KubernetesProvider(namespace=None, image=DEFAULT_IMAGE, kubeconfig=None, context=None,
    in_cluster=None, run_as_user=1000, ...)``: the cluster is the kubeconfig's
    (``kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config``; ``context`` picks one of
    its contexts), or, with none of those and inside a pod, the pod's service account
    (``in_cluster=True`` forces that). ``namespace`` defaults to the context's (the
    service account's in a cluster), else ``default``. ``run_as_user`` is the uid commands
    run as (``None``: the image's own user; 0 makes the pod root, which the defaults
    otherwise refuse); ``image_pull_policy`` is the container's; ``network_policy=True``
    keeps a deny-all NetworkPolicy over the provider's pods in the namespace;
    ``warm_pool=N`` keeps N pods of the provider's defaults running, which ``create``
    claims instead of starting one (:meth:`drain_pool`, also on :meth:`close`, deletes them).

    ``create`` options: ``ttl``, ``idle_timeout`` (seconds; the idle timeout is enforced by
    :meth:`reap`), ``image``, ``env``, ``cpu`` (cores), ``memory_bytes``,
    ``ephemeral_storage_bytes``.
    """

    name = "kubernetes"

    def __init__(
        self,
        *,
        namespace: str | None = None,
        image: str = DEFAULT_IMAGE,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        in_cluster: bool | None = None,
        run_as_user: int | None = 1000,
        image_pull_policy: str = "IfNotPresent",
        network_policy: bool = False,
        command_timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        api_timeout: float = 30.0,
        start_timeout: float = START_SECONDS,
        exec_protocols: tuple[str, ...] = _exec.PROTOCOLS,
        warm_pool: int = 0,
    ) -> None:
        self.configuration = kubernetes.client.Configuration()
        self.namespace = namespace or self._load_configuration(kubeconfig, context, in_cluster)
        self.api_client = kubernetes.client.ApiClient(self.configuration)
        self.api = kubernetes.client.CoreV1Api(self.api_client)
        self.image = image
        if run_as_user is not None and (isinstance(run_as_user, bool) or not isinstance(run_as_user, int)):
            raise errors.InvalidArgumentError(f"run_as_user must be an int or None, not {run_as_user!r}")
        self.run_as_user = run_as_user
        self.image_pull_policy = image_pull_policy
        self.network_policy = network_policy
        self.command_timeout = command_timeout
        self.max_output_bytes = max_output_bytes
        self.api_timeout = api_timeout
        self.start_timeout = start_timeout
        self.exec_protocols = exec_protocols
        self._policy_made = False
        if isinstance(warm_pool, bool) or not isinstance(warm_pool, int) or warm_pool < 0:
            raise errors.InvalidArgumentError(f"warm_pool must be an int >= 0, not {warm_pool!r}")
        self.warm_pool = warm_pool
        self._image_checked = False
        self._pool_wake = threading.Event()
        self._pool_stop = threading.Event()
        self._pool_thread: threading.Thread | None = None
        if warm_pool:
            self._pool_thread = threading.Thread(
                target=self._keep_pool, name="sandbox-sdk-warm-pool", daemon=True
            )
            self._pool_thread.start()

    def _load_configuration(
        self, kubeconfig: str | os.PathLike[str] | None, context: str | None, in_cluster: bool | None
    ) -> str:
        """Fill :attr:`configuration` from a kubeconfig or the pod's service account; the
        namespace they name (``default`` if none)."""
        config_file = kubeconfig or os.environ.get("KUBECONFIG") or None
        default_file = Path.home() / ".kube" / "config"
        use_cluster = in_cluster
        if use_cluster is None:
            outside = config_file is not None or default_file.exists()
            use_cluster = not outside and "KUBERNETES_SERVICE_HOST" in os.environ
        with translate_errors("load the cluster configuration"):
            if use_cluster:
                kubernetes.config.load_incluster_config(client_configuration=self.configuration)
                account = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                return account.read_text().strip() if account.exists() else "default"
            path = str(config_file) if config_file is not None else str(default_file)
            if not Path(path.split(os.pathsep)[0]).exists():
                raise errors.ProviderUnavailableError(
                    f"no kubeconfig at {path} and not in a cluster: pass kubeconfig=, set KUBECONFIG, "
                    "or run `scripts/services start` for the test cluster (docs/kubernetes.md)"
                )
            kubernetes.config.load_kube_config(
                config_file=path, context=context, client_configuration=self.configuration
            )
            contexts, active = kubernetes.config.list_kube_config_contexts(config_file=path)
            chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        return str((chosen or {}).get("context", {}).get("namespace") or "default")

    def _wrap(self, pod: Mapping[str, Any]) -> KubernetesSandbox:
        name = pod["metadata"]["name"]
        annotations = pod["metadata"].get("annotations") or {}
        idle = annotations.get(IDLE_ANNOTATION)
        return KubernetesSandbox(
            self.configuration,
            self.namespace,
            name,
            sandbox_id=pod_sandbox_id(pod),
            timeout=self.command_timeout,
            max_output_bytes=self.max_output_bytes,
            # Idle time is the provider's to track only where a sandbox has an idle timeout:
            # a handle records its use at most four times per timeout (and every 30 s).
            mark_used=None if idle is None else lambda: self._mark_used(name),
            keep_alive_seconds=min(30.0, float(idle or 120) / 4),
            protocols=self.exec_protocols,
        )

    # -- the API, as plain dicts -------------------------------------------------------------

    def _read(self, name: str) -> dict[str, Any] | None:
        """The pod ``name`` if this provider made it, else ``None``."""
        try:
            with translate_errors(f"get pod {name}"):
                pod = self.api_client.sanitize_for_serialization(
                    self.api.read_namespaced_pod(name, self.namespace, _request_timeout=self.api_timeout)
                )
        except errors.SandboxNotFoundError:
            return None
        if (pod["metadata"].get("labels") or {}).get(MANAGED_LABEL) != "kubernetes":
            return None
        return dict(pod)

    def _patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the pod (with ``metadata.resourceVersion`` in it, a
        precondition: 409 if the pod changed since); the pod it made."""
        body: Any = patch
        with translate_errors(f"patch pod {name}"):
            patched = self.api.patch_namespaced_pod(
                name,
                self.namespace,
                body,
                _content_type="application/merge-patch+json",
                _request_timeout=self.api_timeout,
            )
        return dict(self.api_client.sanitize_for_serialization(patched))

    def _mark_used(self, name: str) -> None:
        self._patch(name, {"metadata": {"annotations": {USED_ANNOTATION: repr(time.time())}}})

    def _remove(self, name: str, uid: str | None = None) -> None:
        """Delete the pod at once (no grace period: its ``sleep`` ignores SIGTERM as PID 1's
        child would not, and a sandbox has nothing to flush), only if it is still ``uid``."""
        body: Any = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        with (
            contextlib.suppress(errors.SandboxNotFoundError),
            translate_errors(f"delete pod {name}"),
        ):
            try:
                self.api.delete_namespaced_pod(
                    name, self.namespace, body=body, _request_timeout=self.api_timeout
                )
            except kubernetes.client.exceptions.ApiException as exc:
                if exc.status == 409:  # the precondition: the name is another pod's now
                    return
                raise

    # -- create ------------------------------------------------------------------------------

    def _create(self, *, labels: dict[str, str], **options: Any) -> KubernetesSandbox:
        lifetime = Lifetime.from_options(options, platform="Kubernetes", default_idle_timeout=None)
        unknown = set(options) - SANDBOX_OPTIONS
        if unknown:
            raise errors.InvalidArgumentError(
                f"unknown Kubernetes sandbox options {sorted(unknown)}; known: ttl, idle_timeout, "
                f"{', '.join(sorted(SANDBOX_OPTIONS))}"
            )
        if self.network_policy:
            self._ensure_network_policy()
        if self.warm_pool and not options:  # the pool's pods are the provider's defaults
            claimed = self._claim(labels, lifetime)
            if claimed is not None:
                return claimed
        manifest: Any = self.pod_manifest(labels, lifetime, options)
        name = manifest["metadata"]["name"]
        with translate_errors(f"create pod {name}"):
            created = self.api_client.sanitize_for_serialization(
                self.api.create_namespaced_pod(self.namespace, manifest, _request_timeout=self.api_timeout)
            )
        try:
            pod = self._wait_running(name, str(manifest["spec"]["containers"][0]["image"]))
            self._check_image(pod)
            self._image_checked = True
        except BaseException:
            with contextlib.suppress(Exception):
                self._remove(name, created["metadata"]["uid"])
            raise
        return self._wrap(pod)

    def pod_manifest(
        self, labels: Mapping[str, str], lifetime: Lifetime, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The pod a sandbox is: the safe defaults (docs/kubernetes.md), with the caller's
        labels, lifetime and limits."""
        image = options.get("image", self.image)
        if not isinstance(image, str) or not image:
            raise errors.InvalidArgumentError(f"image must be a non-empty string, not {image!r}")
        name = options.get("name") or f"sbx-{secrets.token_hex(8)}"
        if not isinstance(name, str) or not name.startswith("sbx-"):
            raise errors.InvalidArgumentError(f"this provider's pod names start with 'sbx-', not {name!r}")
        annotations = {LABELS_ANNOTATION: json.dumps(dict(labels), sort_keys=True)}
        if lifetime.ttl is not None:
            annotations[EXPIRES_ANNOTATION] = repr(time.time() + lifetime.ttl)
        if lifetime.idle_timeout is not None:
            annotations[IDLE_ANNOTATION] = repr(lifetime.idle_timeout)
        env = {"HOME": WORKSPACE, **string_map("env", options.get("env") or {})}
        limits = {
            "memory": str(positive_int("memory_bytes", options.get("memory_bytes", DEFAULT_MEMORY_BYTES))),
            "ephemeral-storage": str(
                positive_int(
                    "ephemeral_storage_bytes",
                    options.get("ephemeral_storage_bytes", DEFAULT_EPHEMERAL_STORAGE_BYTES),
                )
            ),
        }
        cpu = options.get("cpu")
        if cpu is not None:
            if isinstance(cpu, bool) or not isinstance(cpu, int | float) or not cpu > 0:
                raise errors.InvalidArgumentError(f"cpu must be a positive number of cores, not {cpu!r}")
            limits["cpu"] = f"{max(round(cpu * 1000), 1)}m"
        requests = {"cpu": f"{REQUEST_MILLICPU}m", "memory": str(REQUEST_MEMORY_BYTES)}
        if cpu is not None and cpu * 1000 < REQUEST_MILLICPU:  # a request is at most the limit
            requests["cpu"] = limits["cpu"]
        requests["memory"] = str(min(REQUEST_MEMORY_BYTES, int(limits["memory"])))
        security: dict[str, Any] = {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        pod_security: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
        if self.run_as_user is not None:
            pod_security["runAsUser"] = self.run_as_user
            pod_security["runAsGroup"] = self.run_as_user
            pod_security["fsGroup"] = self.run_as_user
            pod_security["runAsNonRoot"] = self.run_as_user != 0
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {MANAGED_LABEL: "kubernetes", **selector_labels(labels)},
                "annotations": annotations,
            },
            "spec": {
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "shareProcessNamespace": True,  # the pause process reaps orphans as PID 1
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "securityContext": pod_security,
                "containers": [
                    {
                        "name": CONTAINER,
                        "image": image,
                        "imagePullPolicy": self.image_pull_policy,
                        "command": ["sleep", "infinity"],
                        "workingDir": WORKSPACE,
                        "env": [{"name": key, "value": value} for key, value in env.items()],
                        "securityContext": security,
                        "resources": {"limits": limits, "requests": requests},
                        "volumeMounts": [
                            {"name": "workspace", "mountPath": WORKSPACE},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }
                ],
                "volumes": [{"name": "workspace", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
            },
        }

    def _wait_running(self, name: str, image: str) -> dict[str, Any]:
        """The pod once its container runs; a typed error (naming why) if it never will."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            pod = self._read(name)
            if pod is None:
                raise errors.SandboxRuntimeError(f"pod {name} was deleted while it started")
            status = pod.get("status") or {}
            phase = status.get("phase")
            for container in status.get("containerStatuses") or []:
                state = container.get("state") or {}
                if phase == "Running" and (container.get("ready") or "running" in state):
                    return pod
                waiting = state.get("waiting") or {}
                if waiting.get("reason") in FAILED_WAITING:
                    message = f"pod {name}: {waiting['reason']}: {waiting.get('message', '')}".strip()
                    if "Image" in waiting["reason"]:
                        raise errors.InvalidArgumentError(
                            f"{message} (image {image!r}: build or load it onto the nodes, or set "
                            "image_pull_policy)"
                        )
                    raise errors.SandboxRuntimeError(message)
                if "terminated" in state:
                    raise errors.SandboxRuntimeError(
                        f"pod {name}: its container ended: {state['terminated']}"
                    )
            if phase in ("Failed", "Succeeded"):
                raise errors.SandboxRuntimeError(f"pod {name} ended ({phase}): {status.get('message', '')}")
            if time.monotonic() >= deadline:
                why = "; ".join(
                    f"{c.get('reason')}: {c.get('message')}"
                    for c in status.get("conditions") or []
                    if c.get("status") != "True"
                )
                raise errors.SandboxTimeoutError(
                    f"pod {name} did not run within {self.start_timeout:g} s"
                    f" ({phase}; {why or 'no reason given'})"
                )
            time.sleep(POLL_SECONDS)

    def _first_connection(self, url: str) -> Any:
        """The first exec's connection to a new pod. The kubelet finds an exec's container
        in a cache of the runtime's containers that it refreshes every few seconds, so a
        container it has just reported running can still be "not found" (HTTP 500): that
        answer is retried until the start timeout."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                return _exec.connect(self.configuration, url, self.exec_protocols)
            except errors.SandboxRuntimeError as exc:
                if "container not found" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(POLL_SECONDS)

    def _check_image(self, pod: Mapping[str, Any]) -> None:
        """Check the image has what the SDK needs (bash, python3), with one exec of ``sh``."""
        name = pod["metadata"]["name"]
        image = pod["spec"]["containers"][0]["image"]
        url = _exec.exec_url(
            self.configuration.host, self.namespace, name, CONTAINER, ["sh", "-c", IMAGE_CHECK], False
        )
        result = _exec.run(self._first_connection(url), None, time.monotonic() + self.api_timeout, 4096)
        code = None if result.status is None else _exec.status_exit_code(result.status)
        if code == IMAGE_LACKS:
            missing = result.stdout.decode("utf-8", "replace").partition("missing:")[2].split()
            raise errors.InvalidArgumentError(
                f"image {image!r} lacks {' and '.join(missing)}: the kubernetes provider runs commands with "
                "bash and file operations with python3 (3.8 or newer)"
            )
        if code != 0:
            message = (result.status or {}).get("message") or result.broken or "no status"
            if "executable file not found" in str(message) or "no such file" in str(message).lower():
                raise errors.InvalidArgumentError(
                    f"image {image!r} has no sh; the kubernetes provider needs sh, bash and python3"
                )
            raise errors.SandboxRuntimeError(f"checking pod {name}'s image failed (exit {code}): {message}")

    def _ensure_network_policy(self) -> None:
        """The namespace's deny-all NetworkPolicy over this provider's pods (ingress and
        egress, no rule: nothing in or out), made once; one that exists is kept."""
        if self._policy_made:
            return
        policy: Any = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": NETWORK_POLICY},
            "spec": {
                "podSelector": {"matchLabels": {MANAGED_LABEL: "kubernetes"}},
                "policyTypes": ["Ingress", "Egress"],
            },
        }
        with contextlib.suppress(NameTakenError), translate_errors("create the deny-all NetworkPolicy"):
            kubernetes.client.NetworkingV1Api(self.api_client).create_namespaced_network_policy(
                self.namespace, policy, _request_timeout=self.api_timeout
            )
        self._policy_made = True

    # -- the warm pool -----------------------------------------------------------------------

    def _pool_manifest(self) -> dict[str, Any]:
        """A warm pod: the provider's defaults, no caller labels or lifetime yet, labelled
        with the digest of its spec (so providers of another template never claim it)."""
        manifest = self.pod_manifest({}, Lifetime(ttl=None, idle_timeout=None), {})
        template = _digest(json.dumps(manifest["spec"], sort_keys=True))[:40]
        manifest["metadata"]["labels"].update({POOL_LABEL: template, STATE_LABEL: "warm"})
        del manifest["metadata"]["annotations"]
        return manifest

    def warm_pods(self) -> builtins.list[dict[str, Any]]:
        """The pool's warm pods that are not going away."""
        labels = self._pool_manifest()["metadata"]["labels"]
        selector = {POOL_LABEL: labels[POOL_LABEL], STATE_LABEL: "warm"}
        found = []
        cursor = None
        while True:
            page = self._pods(selector, cursor, 500, sandboxes=False)
            found += [pod for pod in page.get("items") or [] if not pod["metadata"].get("deletionTimestamp")]
            cursor = (page.get("metadata") or {}).get("continue")
            if not cursor:
                return found

    def _claim(self, labels: Mapping[str, str], lifetime: Lifetime) -> KubernetesSandbox | None:
        """A running warm pod made this sandbox, or ``None`` if none is ready. The claim is
        one merge patch carrying the pod's ``resourceVersion``: of clients claiming one pod
        at once, the API server lets the first change it and answers 409 to the others,
        which try the next pod."""
        for pod in self.warm_pods():
            if not pod_running(pod):
                continue
            annotations = self.pod_manifest(labels, lifetime, {})["metadata"]["annotations"]
            patch = {
                "metadata": {
                    "resourceVersion": pod["metadata"]["resourceVersion"],
                    "labels": {STATE_LABEL: "claimed", **selector_labels(labels)},
                    "annotations": annotations,
                }
            }
            try:
                claimed = self._patch(pod["metadata"]["name"], patch)
            except (NameTakenError, errors.SandboxNotFoundError):  # 409: claimed first; 404: gone
                continue
            self._pool_wake.set()
            if not self._image_checked:
                try:
                    self._check_image(claimed)
                except BaseException:
                    with contextlib.suppress(Exception):
                        self._remove(claimed["metadata"]["name"], claimed["metadata"]["uid"])
                    raise
                self._image_checked = True
            return self._wrap(claimed)
        self._pool_wake.set()
        return None

    def _keep_pool(self) -> None:
        """The refiller (a daemon thread): keeps :attr:`warm_pool` warm pods, woken by each
        claim and every :data:`POOL_CHECK_SECONDS`, until :meth:`drain_pool`."""
        while not self._pool_stop.is_set():
            try:
                missing = self.warm_pool - len(self.warm_pods())
                for _ in range(missing):
                    if self._pool_stop.is_set():
                        break
                    manifest: Any = self._pool_manifest()
                    manifest["metadata"]["name"] = f"sbx-{secrets.token_hex(8)}"
                    with translate_errors("create a warm pod"):
                        self.api.create_namespaced_pod(
                            self.namespace, manifest, _request_timeout=self.api_timeout
                        )
            except errors.SandboxError as exc:
                logger.warning("warm pool: could not refill: %s", exc)
            self._pool_wake.wait(POOL_CHECK_SECONDS)
            self._pool_wake.clear()

    def drain_pool(self) -> None:
        """Stop refilling the warm pool and delete its warm pods (claimed ones are
        sandboxes and stay); idempotent."""
        if self._pool_thread is None:
            return
        self._pool_stop.set()
        self._pool_wake.set()
        self._pool_thread.join()
        self._pool_thread = None
        for pod in self.warm_pods():
            self._remove(pod["metadata"]["name"], pod["metadata"]["uid"])

    # -- get, list, delete -------------------------------------------------------------------

    def _find(self, sandbox_id: str) -> dict[str, Any] | None:
        """The pod of ``sandbox_id`` (not one made again under its name), if it is not going."""
        name, _ = split_id(sandbox_id)
        pod = self._read(name)
        if pod is None or pod["metadata"].get("deletionTimestamp") or pod_sandbox_id(pod) != sandbox_id:
            return None
        if (pod["metadata"].get("labels") or {}).get(STATE_LABEL) == "warm":
            return None
        return pod

    def _get(self, sandbox_id: str) -> KubernetesSandbox:
        pod = self._find(sandbox_id)
        if pod is None:
            raise errors.SandboxNotFoundError(f"no kubernetes sandbox {sandbox_id!r} in {self.namespace}")
        if expired(pod, time.time()):
            self._remove(pod["metadata"]["name"], pod["metadata"]["uid"])
            lifecycle_log.info("%s: reaped sandbox %s (its ttl ran out)", self.name, sandbox_id)
            raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} has expired (its ttl ran out)")
        phase = (pod.get("status") or {}).get("phase")
        if phase != "Running":
            raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} is not running ({phase})")
        return self._wrap(pod)

    def _pods(
        self, selector: Mapping[str, str], cursor: str | None, limit: int | None, *, sandboxes: bool = True
    ) -> dict[str, Any]:
        """One page of this provider's pods matching ``selector`` (the API server's order):
        its sandboxes, or with ``sandboxes=False`` its warm pods too."""
        chosen = ",".join(f"{k}={v}" for k, v in {MANAGED_LABEL: "kubernetes", **selector}.items())
        if sandboxes:
            chosen += f",{STATE_LABEL}!=warm"
        arguments: dict[str, Any] = {"label_selector": chosen, "_request_timeout": self.api_timeout}
        if limit is not None:
            arguments["limit"] = limit
        if cursor:
            arguments["_continue"] = cursor
        with translate_errors("list pods"):
            return dict(
                self.api_client.sanitize_for_serialization(
                    self.api.list_namespaced_pod(self.namespace, **arguments)
                )
            )

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """Sandboxes carrying ``labels``, in the API server's order (by name); the cursor is
        the server's continue token (it expires after a few minutes: ``InvalidArgumentError``)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise errors.InvalidArgumentError(f"limit must be an int >= 1, not {limit!r}")
        if cursor is not None and not isinstance(cursor, str):
            raise errors.InvalidArgumentError(f"not a cursor of this provider: {cursor!r}")
        page = self._pods(selector_labels(labels or {}), cursor, limit)
        items = []
        for pod in page.get("items") or []:
            mine = caller_labels(pod)
            if pod["metadata"].get("deletionTimestamp") or not labels_match(mine, labels):
                continue
            items.append(
                SandboxInfo(
                    id=pod_sandbox_id(pod),
                    labels=mine,
                    created_at=_created(pod),
                    status=str((pod.get("status") or {}).get("phase") or "unknown").lower(),
                    metadata={"namespace": self.namespace, "name": pod["metadata"]["name"]},
                )
            )
        return SandboxPage(items=items, next_cursor=(page.get("metadata") or {}).get("continue") or None)

    def _delete(self, sandbox_id: str) -> None:
        try:
            pod = self._find(sandbox_id)
        except errors.SandboxNotFoundError:  # not an id of ours: nothing to delete
            return
        if pod is not None:
            self._remove(pod["metadata"]["name"], pod["metadata"]["uid"])

    def reap(self) -> builtins.list[str]:
        """Delete every sandbox whose ``ttl`` ran out, that sat idle past its
        ``idle_timeout`` (since its handles last recorded a use, or its creation), whose pod
        ended, or that did not start within the start timeout; returns their ids."""
        now = time.time()
        reaped = []
        cursor = None
        while True:
            page = self._pods({}, cursor, 500)
            for pod in page.get("items") or []:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    continue
                annotations = meta.get("annotations") or {}
                phase = (pod.get("status") or {}).get("phase")
                age = now - _created(pod).timestamp()
                gone = phase in ("Failed", "Succeeded") or expired(pod, now)
                gone = gone or (phase == "Pending" and age > self.start_timeout)
                if not gone and IDLE_ANNOTATION in annotations:
                    used = float(annotations.get(USED_ANNOTATION) or now - age)
                    gone = now - used > float(annotations[IDLE_ANNOTATION])
                if gone:
                    self._remove(meta["name"], meta["uid"])
                    lifecycle_log.info("%s: reaped sandbox %s", self.name, pod_sandbox_id(pod))
                    reaped.append(pod_sandbox_id(pod))
            cursor = (page.get("metadata") or {}).get("continue")
            if not cursor:
                return reaped

    # -- get_or_create by labels: one pod name per label set ---------------------------------

    def _reuse_or_create(
        self, labels: Mapping[str, str], options: dict[str, Any]
    ) -> Generator[Any, Any, KubernetesSandbox]:
        """The live pod named after ``labels``, else the base's (a sandbox carrying exactly
        ``labels``, else a new one), created under that name: of processes creating at once,
        the API server lets one create the name (409 AlreadyExists for the others), and the
        others wait for its pod to run and use it."""
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

    def _named_live(
        self, name: str, *, appearing: bool = False
    ) -> Generator[Any, Any, KubernetesSandbox | None]:
        """The pod called ``name`` once it runs, if it answers; one that ended or expired is
        deleted (so the name is free), one still starting (or going) is waited for. With
        ``appearing`` (the name was just refused), a pod not found is waited for too: the
        one holding the name may be going away."""
        waited = 0.0
        while True:
            pod = yield FindPod(name)
            if pod is None:
                if appearing and waited < self.start_timeout:
                    yield Sleep(POLL_SECONDS)
                    waited += POLL_SECONDS
                    continue
                return None
            phase = (pod.get("status") or {}).get("phase")
            going = bool(pod["metadata"].get("deletionTimestamp"))
            if (going or phase == "Pending") and waited < self.start_timeout:
                yield Sleep(POLL_SECONDS)
                waited += POLL_SECONDS
                continue
            if phase == "Running" and not going and not expired(pod, time.time()):
                sandbox = self._handed_out(self._wrap(pod))
                if (yield from self._op_is_alive(sandbox)):
                    return sandbox
            logger.warning(
                "get_or_create: pod %s is %s; deleting it for a new, empty one",
                name,
                "expired" if expired(pod, time.time()) else phase,
            )
            yield RemovePod(name, pod["metadata"]["uid"])
            return None

    def _perform(self, request: Any) -> Any:
        """Our own requests; the rest as the base does."""
        if isinstance(request, FindPod):
            return self._read(request.name)
        if isinstance(request, RemovePod):
            return self._remove(request.name, request.uid)
        return super()._perform(request)

    async def _aperform(self, request: Any) -> Any:
        """Our own requests in a worker thread (the client blocks); the rest as the base does."""
        if isinstance(request, FindPod | RemovePod):
            return await anyio.to_thread.run_sync(self._perform, request)
        return await super()._aperform(request)

    def close(self) -> None:
        """Drain the warm pool, close the API client's connections; idempotent."""
        try:
            self.drain_pool()
        finally:
            self.api_client.close()


__all__ = ["DEFAULT_IMAGE", "KubernetesProvider", "sandbox_name"]
