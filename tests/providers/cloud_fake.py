"""What the conformance kit runs against the cloud providers' fake services."""

from __future__ import annotations

from sandbox_sdk.testing import SandboxConformanceTests


class CloudFakeConformance(SandboxConformanceTests):
    """The kit on a fake cloud service, with sizes and pauses for a fake that
    shares the test's process and two loaded cores. Each byte piped to a process's stdin
    crosses the fake in the test's process (or in another, for Modal) under
    ``tracemalloc``, a chunk of a command per round trip: the stdin check at
    its default sizes (16 and 100 MiB) takes minutes of the CI's two cores,
    and at 4 and 12 MiB it still tells one chunk in flight from a client that
    holds what it sends."""

    stdin_baseline_mib = 4
    large_stdin_mib = 12
    #: The fake serves from the test's process (Modal's streams stdout and stderr
    #: apart, ordered by arrival): under CI's load, a pause of half a second
    #: once swapped two writes.
    interleave_seconds = 1.5
