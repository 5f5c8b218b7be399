"""``KubernetesProvider`` against a real cluster: the lifecycle contract kit, one pod for
eight processes racing on one label set, the pod's defaults seen from inside, limits,
images the node lacks, expiry (``ttl``, ``idle_timeout``, ``reap``) and the ``sbx``
command."""

from __future__ import annotations

import json
import multiprocessing
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox_sdk import errors, get_provider
from sandbox_sdk.providers.kubernetes import KubernetesProvider, sandbox_name
from sandbox_sdk.providers.kubernetes.provider import EXPIRES_ANNOTATION, NETWORK_POLICY, split_id
from sandbox_sdk.testing import ProviderConformanceTests
from tests.cli.support import Sbx

pytestmark = pytest.mark.engines


class TestKubernetesProvider(ProviderConformanceTests):
    """Runs on the conftest's ``provider``."""


def test_registered_as_entry_point(kubeconfig: str) -> None:
    with get_provider("kubernetes", kubeconfig=kubeconfig) as provider:
        assert isinstance(provider, KubernetesProvider)


def test_no_cluster_configuration_is_said_at_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(errors.ProviderUnavailableError, match="no kubeconfig"):
        KubernetesProvider()


def test_a_cluster_that_does_not_answer_is_unavailable(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{_free_port()}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    with KubernetesProvider(kubeconfig=config, api_timeout=5) as provider:
        with pytest.raises(errors.ProviderUnavailableError):
            provider.list()
        with pytest.raises(errors.ProviderUnavailableError):
            provider.create()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def claim(kubeconfig: str, labels: dict[str, str], start: multiprocessing.synchronize.Event) -> str:
    """One racer: wait for the start, then ``get_or_create`` by ``labels``."""
    start.wait()
    with KubernetesProvider(kubeconfig=kubeconfig) as provider:
        return provider.get_or_create(labels=labels).id


def test_eight_processes_get_or_create_one_pod(kubeconfig: str, provider: KubernetesProvider) -> None:
    """No lock of ours: the API server lets one process create the pod's name (409
    AlreadyExists for the other seven), and they wait for that pod and use it."""
    labels = {"race": secrets.token_hex(6)}
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(8) as pool:
            pending = [pool.apply_async(claim, (kubeconfig, labels, start)) for _ in range(8)]
            start.set()
            ids = {result.get(timeout=300) for result in pending}
    try:
        assert len(ids) == 1
        assert [info.id for info in provider.list(labels=labels).items] == list(ids)
        assert split_id(next(iter(ids)))[0] == sandbox_name(labels)
    finally:
        for sandbox_id in ids:
            provider.delete(sandbox_id)


#: What a command sees of its confinement: its user, capabilities, no_new_privs and seccomp
#: mode, the service account token's directory, whether the root, the workspace and /tmp
#: take writes, the memory and CPU limits (cgroups v1, as the test node mounts a
#: container's own), and PID 1 (the pod's pause process: the pod shares one PID namespace).
CONFINEMENT = (
    "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '; "
    "ls /var/run/secrets/kubernetes.io 2>&1 | head -1; touch /etc/probe 2>&1; "
    "touch /tmp/probe ./probe && echo writable; pwd; "
    "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us; "
    "tr '\\0' ' ' </proc/1/cmdline; echo"
)


def test_the_defaults_confine_the_pod(module_provider: KubernetesProvider) -> None:
    with module_provider.create() as sandbox:
        seen = sandbox.execute(CONFINEMENT).output.splitlines()
    assert seen[0] == "1000"  # non-root
    no_capabilities = ["CapEff: 0000000000000000", "CapBnd: 0000000000000000"]
    assert seen[1:5] == [*no_capabilities, "NoNewPrivs: 1", "Seccomp: 2"]
    assert "No such file or directory" in seen[5]  # no service account token mounted
    assert "Read-only file system" in seen[6]
    assert seen[7:9] == ["writable", "/workspace"]
    assert seen[9:11] == [str(2 * 1024**3), "-1"]  # 2 GiB, no CPU quota
    assert seen[11].strip() == "/pause"


def test_limits_are_options_and_bad_ones_are_refused(module_provider: KubernetesProvider) -> None:
    with module_provider.create(memory_bytes=256 * 1024**2, cpu=0.5) as sandbox:
        seen = sandbox.execute(CONFINEMENT).output.splitlines()
        assert seen[9:11] == [str(256 * 1024**2), "50000"]  # half of each 100 ms period
        hog = sandbox.execute("python3 -c 'b = bytearray(512 * 1024 * 1024); print(len(b))'", timeout=60)
        assert hog.exit_code == 137  # killed by the memory limit
    for bad in (
        {"memory_bytes": 0},
        {"cpu": -1},
        {"env": {"A": 1}},
        {"image": ""},
        {"ephemeral_storage_bytes": "lots"},
        {"gpus": 1},
    ):
        with pytest.raises(errors.InvalidArgumentError):
            module_provider.create(**bad)


def test_env_reaches_commands(module_provider: KubernetesProvider) -> None:
    with module_provider.create(env={"GREETING": "hello world"}) as sandbox:
        assert sandbox.execute('echo "$GREETING" "$HOME"').output == "hello world /workspace\n"


def test_an_image_the_node_lacks_is_a_typed_error_and_no_pod_is_left(
    kubeconfig: str, module_provider: KubernetesProvider
) -> None:
    labels = {"missing-image": secrets.token_hex(4)}
    with (
        KubernetesProvider(kubeconfig=kubeconfig, image_pull_policy="Never") as strict,
        pytest.raises(errors.InvalidArgumentError, match="ErrImageNeverPull"),
    ):
        strict.create(labels=labels, image="sandbox-sdk-test/no-such-image:1")
    assert module_provider.list(labels=labels).items == []


def test_the_network_policy_is_made_once_and_kept(kubeconfig: str) -> None:
    """A deny-all NetworkPolicy over the provider's pods (which this cluster, with no
    network plugin, does not enforce: docs/kubernetes.md)."""
    with KubernetesProvider(kubeconfig=kubeconfig, network_policy=True) as guarded:
        first = guarded.create()
        second = guarded.create()
        try:
            import kubernetes.client

            networking = kubernetes.client.NetworkingV1Api(guarded.api_client)
            policy: Any = networking.read_namespaced_network_policy(NETWORK_POLICY, guarded.namespace)
            assert policy.spec.policy_types == ["Ingress", "Egress"]
            assert not policy.spec.ingress and not policy.spec.egress  # no rule lets anything through
            assert policy.spec.pod_selector.match_labels == {"sandbox-sdk.dev/provider": "kubernetes"}
        finally:
            guarded.delete(first.id)
            guarded.delete(second.id)


def _wait_until(moment: float) -> None:
    while time.time() < moment:  # the condition: a recorded deadline has passed
        time.sleep(0.05)


def _annotation(provider: KubernetesProvider, sandbox_id: str, key: str) -> str:
    pod: Any = provider.api.read_namespaced_pod(split_id(sandbox_id)[0], provider.namespace)
    return str(pod.metadata.annotations[key])


def test_an_expired_ttl_is_not_found_and_deleted(module_provider: KubernetesProvider) -> None:
    sandbox = module_provider.create(ttl=1)
    _wait_until(float(_annotation(module_provider, sandbox.id, EXPIRES_ANNOTATION)))
    with pytest.raises(errors.SandboxNotFoundError, match="expired"):
        module_provider.get(sandbox.id)
    assert sandbox.id not in [info.id for info in module_provider.iter_sandboxes()]


def test_reap_deletes_idle_and_expired_sandboxes_and_keeps_the_rest(
    module_provider: KubernetesProvider,
) -> None:
    kept = module_provider.create(idle_timeout=3600)
    idle = module_provider.create(idle_timeout=1)
    old = module_provider.create(ttl=1)
    try:
        idle.execute("true")  # its use is recorded
        used = float(_annotation(module_provider, idle.id, "sandbox-sdk.dev/last-used"))
        _wait_until(max(used + 1.5, float(_annotation(module_provider, old.id, EXPIRES_ANNOTATION))))
        reaped = module_provider.reap()
        assert idle.id in reaped and old.id in reaped and kept.id not in reaped
        assert kept.execute("echo alive").output == "alive\n"
    finally:
        for sandbox in (kept, idle, old):
            module_provider.delete(sandbox.id)


def test_sbx_runs_on_kubernetes_and_reaps(
    kubeconfig: str, module_provider: KubernetesProvider, tmp_path: Path
) -> None:
    """``sbx -p kubernetes``: create, exec, list, reap, rm."""
    sbx = Sbx(tmp_path, "kubernetes", env={"KUBECONFIG": kubeconfig})
    sandbox_id = sbx("create", "--label", "cli=yes").stdout.strip()
    try:
        assert sbx("exec", sandbox_id, "echo hi from $(id -u)").stdout == "hi from 1000\n"
        listed = json.loads(sbx("list", "--json", "--label", "cli=yes").stdout)
        assert [item["id"] for item in listed] == [sandbox_id]
    finally:
        assert sbx("rm", sandbox_id).stdout.split() == [sandbox_id]
    expiring = module_provider.create(ttl=1)
    _wait_until(float(_annotation(module_provider, expiring.id, EXPIRES_ANNOTATION)))
    assert expiring.id in sbx("reap").stdout.split()
    assert expiring.id not in [info.id for info in module_provider.iter_sandboxes()]
