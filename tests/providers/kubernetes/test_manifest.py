"""The pod a sandbox is, and the names and labels the provider derives, without a cluster:
the secure defaults are in the spec, options are checked before any request, labels
become valid selectors, ids name one pod."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sandbox_sdk import errors
from sandbox_sdk.provider_kit import Lifetime
from sandbox_sdk.providers.kubernetes import KubernetesProvider, sandbox_name
from sandbox_sdk.providers.kubernetes.provider import (
    EXPIRES_ANNOTATION,
    IDLE_ANNOTATION,
    LABELS_ANNOTATION,
    MANAGED_LABEL,
    selector_labels,
    split_id,
)

#: Kubernetes' label syntax: an optional DNS-subdomain prefix, a name and a value of at
#: most 63 characters each.
LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")


@pytest.fixture
def provider(tmp_path: Path) -> KubernetesProvider:
    """A provider of a cluster it never reaches (nothing here makes a request)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "sandboxes"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return KubernetesProvider(kubeconfig=path)


def manifest(provider: KubernetesProvider, labels: dict[str, str] | None = None, **options: Any) -> Any:
    return provider.pod_manifest(labels or {}, Lifetime(ttl=None, idle_timeout=None), options)


def test_the_namespace_is_the_contexts(provider: KubernetesProvider) -> None:
    assert provider.namespace == "sandboxes"


def test_the_pod_has_the_secure_defaults(provider: KubernetesProvider) -> None:
    pod = manifest(provider)
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "runAsNonRoot": True,
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["limits"] == {
        "memory": str(2 * 1024**3),
        "ephemeral-storage": str(4 * 1024**3),
    }
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/workspace", "/tmp"}
    assert pod["metadata"]["labels"] == {MANAGED_LABEL: "kubernetes"}


def test_limits_and_lifetime_are_in_the_spec(provider: KubernetesProvider) -> None:
    pod = provider.pod_manifest(
        {"a": "b"}, Lifetime(ttl=60, idle_timeout=30), {"cpu": 0.02, "memory_bytes": 32 * 1024**2}
    )
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"]["cpu"] == "20m" and resources["requests"]["cpu"] == "20m"  # at most the limit
    assert resources["requests"]["memory"] == str(32 * 1024**2)
    annotations = pod["metadata"]["annotations"]
    assert json.loads(annotations[LABELS_ANNOTATION]) == {"a": "b"}
    assert float(annotations[IDLE_ANNOTATION]) == 30 and EXPIRES_ANNOTATION in annotations


def test_root_is_an_explicit_choice(tmp_path: Path, provider: KubernetesProvider) -> None:
    provider.run_as_user = 0
    assert manifest(provider)["spec"]["securityContext"]["runAsNonRoot"] is False
    provider.run_as_user = None
    assert "runAsUser" not in manifest(provider)["spec"]["securityContext"]


@pytest.mark.parametrize(
    "options",
    [
        {"memory_bytes": 0},
        {"cpu": True},
        {"cpu": 0},
        {"env": {"A": 1}},
        {"image": ""},
        {"ephemeral_storage_bytes": 1.5},
        {"name": "not-ours"},
    ],
    ids=str,
)
def test_bad_options_are_refused_before_any_request(
    provider: KubernetesProvider, options: dict[str, Any]
) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        manifest(provider, **options)


def test_any_labels_become_valid_selectors(provider: KubernetesProvider) -> None:
    labels = {"thread id": "ünïcode / and spaces", "": "", "k" * 300: "v" * 300}
    for key, value in selector_labels(labels).items():
        assert LABEL_KEY.match(key) and LABEL_VALUE.match(value)
    assert manifest(provider, labels)["metadata"]["labels"].keys() >= selector_labels(labels).keys()


def test_one_name_per_label_set_whatever_the_order() -> None:
    assert sandbox_name({"a": "1", "b": "2"}) == sandbox_name({"b": "2", "a": "1"})
    assert sandbox_name({"a": "1"}) != sandbox_name({"a": "2"})
    assert re.match(r"^sbx-[0-9a-f]{40}$", sandbox_name({"a": "1"}))


@pytest.mark.parametrize("bad", ["sbx-abc", "local-0000", "sbx-abc.123", "x.0123456789ab", 7, None])
def test_an_id_that_is_not_ours_is_not_found(bad: object) -> None:
    with pytest.raises(errors.SandboxNotFoundError):
        split_id(bad)
    assert split_id("sbx-abc.0123456789ab") == ("sbx-abc", "0123456789ab")


def test_a_bad_warm_pool_or_user_is_refused(tmp_path: Path, provider: KubernetesProvider) -> None:
    config = tmp_path / "kubeconfig"
    for bad in ({"warm_pool": -1}, {"warm_pool": True}, {"run_as_user": "root"}):
        with pytest.raises(errors.InvalidArgumentError):
            KubernetesProvider(kubeconfig=config, **bad)
