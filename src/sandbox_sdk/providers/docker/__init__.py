"""Docker containers (``pip install "sandbox-sdk-py[docker]"``), on Docker Engine or on
podman's Docker-compatible service.

``DockerProvider`` makes one container per sandbox and runs each command through the
exec API (``bash -c``, as the container's user, in ``/workspace``); everything else is
derived from that. Our labels are container labels (``sandbox-sdk.label.<key>``);
``get_or_create(labels=...)`` names the container after its labels
(:func:`sandbox_name`), so concurrent callers in any process share one. Containers get
safe defaults: no network, a read-only root with a writable workspace volume and a
tmpfs ``/tmp``, Docker's capabilities less six, ``no-new-privileges``, memory and
process limits, and the image's own user (docs/docker.md). ``ttl`` is checked whenever
a sandbox is looked up; :meth:`DockerProvider.reap` also removes idle ones.
"""

from sandbox_sdk.providers.docker.provider import DEFAULT_IMAGE, DockerProvider, sandbox_name
from sandbox_sdk.providers.docker.sandbox import DockerSandbox

__all__ = ["DEFAULT_IMAGE", "DockerProvider", "DockerSandbox", "sandbox_name"]
