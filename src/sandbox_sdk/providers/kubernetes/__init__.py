"""Kubernetes pods (``pip install "sandbox-sdk-py[kubernetes]"``), one per sandbox.

``KubernetesProvider`` makes one pod per sandbox and runs each command through the pod
``exec`` subresource (``bash -c`` of the runner shared with the docker provider, which
enforces the timeout inside the pod and reports the exit status), with the official
``kubernetes`` client's configuration and its WebSocket transport; everything else is
derived from that. Our labels are kept in an annotation and stand as label digests for
the API server's selectors; ``get_or_create(labels=...)`` names the pod after its labels
(:func:`sandbox_name`), so concurrent callers anywhere share one, with "already exists"
as the only lock. Pods get safe defaults: no service account token, no privilege
escalation, no capabilities, the runtime's seccomp profile, a non-root user, a read-only
root with ``emptyDir`` workspace and ``/tmp``, and limits (docs/kubernetes.md). ``ttl``
and ``idle_timeout`` are annotations; :meth:`KubernetesProvider.reap` deletes what expired.
"""

from sandbox_sdk.providers.kubernetes.provider import DEFAULT_IMAGE, KubernetesProvider, sandbox_name
from sandbox_sdk.providers.kubernetes.sandbox import KubernetesSandbox

__all__ = ["DEFAULT_IMAGE", "KubernetesProvider", "KubernetesSandbox", "sandbox_name"]
