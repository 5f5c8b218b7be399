"""The warm pool on the real cluster: ``create`` claims a running pod (one merge patch
with its ``resourceVersion`` as the precondition), the pool refills in the background,
concurrent claims never share a pod, and closing the provider leaves no warm pod."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox_sdk.providers.kubernetes import KubernetesProvider
from sandbox_sdk.providers.kubernetes._errors import NameTakenError
from sandbox_sdk.providers.kubernetes.provider import pod_running, split_id

pytestmark = pytest.mark.engines

#: Seconds a warm pod may take to run (scheduling, the container's start).
WARM_SECONDS = 120.0


def warm_names(provider: KubernetesProvider, count: int) -> set[str]:
    """The names of the pool's running warm pods, once there are ``count`` of them."""
    deadline = time.monotonic() + WARM_SECONDS
    while True:
        names = {pod["metadata"]["name"] for pod in provider.warm_pods() if pod_running(pod)}
        if len(names) >= count:
            return names
        assert time.monotonic() < deadline, f"the pool has {len(names)} running pods, not {count}"
        time.sleep(0.1)  # polls the condition


@pytest.fixture
def pooled(kubeconfig: str) -> Iterator[KubernetesProvider]:
    with KubernetesProvider(kubeconfig=kubeconfig, warm_pool=2) as provider:
        yield provider
    with KubernetesProvider(kubeconfig=kubeconfig) as observer:
        assert observer.warm_pods() == []  # closing drained the pool


def test_create_claims_a_warm_pod_and_the_pool_refills(pooled: KubernetesProvider) -> None:
    warm = warm_names(pooled, 2)
    labels = {"pool": secrets.token_hex(4)}
    with pooled.create(labels=labels, ttl=600) as sandbox:
        assert split_id(sandbox.id)[0] in warm
        assert sandbox.execute("echo claimed; id -u").output == "claimed\n1000\n"
        assert [info.id for info in pooled.list(labels=labels).items] == [sandbox.id]
        assert [info.labels for info in pooled.list(labels=labels).items] == [labels]
        refilled = warm_names(pooled, 2)
        assert split_id(sandbox.id)[0] not in refilled
        assert not refilled & {
            split_id(info.id)[0] for info in pooled.iter_sandboxes()
        }  # warm pods are no sandboxes


def test_options_other_than_labels_and_lifetime_start_a_pod(pooled: KubernetesProvider) -> None:
    warm = warm_names(pooled, 2)
    with pooled.create(memory_bytes=512 * 1024**2) as sandbox:
        assert split_id(sandbox.id)[0] not in warm


def test_concurrent_claims_never_share_a_pod(pooled: KubernetesProvider) -> None:
    warm = warm_names(pooled, 2)
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: pooled.create(), range(4)))
    try:
        names = [split_id(sandbox.id)[0] for sandbox in made]
        assert len(set(names)) == 4
        assert set(names) & warm  # some came from the pool
    finally:
        for sandbox in made:
            pooled.delete(sandbox.id)


def test_a_claim_on_a_changed_pod_is_refused(pooled: KubernetesProvider) -> None:
    """The precondition itself: a patch carrying a resourceVersion the pod has moved past
    is a 409, so two claimants of one pod cannot both win."""
    name = next(iter(warm_names(pooled, 1)))
    while True:  # the first change, on the version read just before it
        pod = pooled._read(name)
        assert pod is not None
        stale = pod["metadata"]["resourceVersion"]
        try:
            pooled._patch(name, {"metadata": {"resourceVersion": stale, "annotations": {"first": "claim"}}})
            break
        except NameTakenError:  # the kubelet updated the pod's status in between: read again
            continue
    with pytest.raises(NameTakenError):
        pooled._patch(name, {"metadata": {"resourceVersion": stale, "annotations": {"second": "claim"}}})
