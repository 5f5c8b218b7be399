"""The kubernetes provider's fixtures: the real one-node cluster ``scripts/services start``
runs (Kubernetes 1.20 built from Debian's source package; its kubelet drives the dockerd
of the docker provider's tests, which holds the default image).

The cluster is the one ``KUBECONFIG`` names (``scripts/test`` exports the line
``scripts/services start`` prints), else the kubeconfig ``scripts/services`` keeps in its
state directory. Where none answers, the tests are skipped, unless ``CI`` or
``SANDBOX_SDK_REQUIRE_ENGINES`` is set: then every one of them fails, saying why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.kubernetes import KubernetesProvider
from tests.providers.docker.conftest import ENGINES_DIR, engines_required

#: The kubeconfig ``scripts/services start`` writes.
SERVICES_KUBECONFIG = ENGINES_DIR / "kubernetes" / "kubeconfig"


def unavailable(why: str) -> None:
    """Fail where engines are required, else skip, with ``why`` and what to run."""
    message = f"{why}: run `scripts/services start` (docs/kubernetes.md)"
    if engines_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def kubeconfig() -> str:
    """The cluster's kubeconfig, once its API server answers."""
    path = os.environ.get("KUBECONFIG") or None
    if path is None and SERVICES_KUBECONFIG.exists():
        path = str(SERVICES_KUBECONFIG)
    if path is None:
        unavailable("no cluster: KUBECONFIG is unset and scripts/services started none")
    assert path is not None
    try:
        with KubernetesProvider(kubeconfig=path) as probe:
            probe.list(limit=1)
    except errors.SandboxError as exc:
        unavailable(f"the cluster of {path} does not answer ({exc})")
    return path


@pytest.fixture(scope="module")
def module_provider(kubeconfig: str) -> Iterator[KubernetesProvider]:
    """One provider for a module's tests (its sandboxes are the tests' to delete)."""
    with KubernetesProvider(kubeconfig=kubeconfig) as provider:
        yield provider


@pytest.fixture
def provider(module_provider: KubernetesProvider) -> KubernetesProvider:
    return module_provider
