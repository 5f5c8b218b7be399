"""What the conformance kit runs against the cloud providers' fake services."""

from __future__ import annotations

from sandbox_sdk.testing import SandboxConformanceTests


class CloudFakeConformance(SandboxConformanceTests):
    """The kit on a fake cloud service. Each byte piped to a process's stdin
    crosses the fake in the test's process (or in another, for Modal) under
    ``tracemalloc``, a chunk of a command per round trip: the stdin check at
    its default sizes (16 and 100 MiB) takes minutes of the CI's two cores,
    and at 4 and 12 MiB it still tells one chunk in flight from a client that
    holds what it sends."""

    stdin_baseline_mib = 4
    large_stdin_mib = 12
