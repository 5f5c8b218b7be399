"""What a pod costs against a Docker container and a bwrap jail, in one run.

    .venv/bin/python -m benchmarks.kubernetes [--rounds 50] [--mib 50] [--repeat 2] [--creates 5]

The cluster is the one ``scripts/services start`` runs (``KUBECONFIG``, else its
kubeconfig in the services' state directory), whose kubelet drives the same dockerd the
docker provider is measured on; bwrap, the baseline, and dockerd are measured in the
same run, with the measurements of ``benchmarks.docker``:

* Create: ``create()`` (with its health check) then ``delete``, ``--creates`` times each,
  alternating; the median. ``kubernetes-pool`` is a provider with a warm pool of 2: its
  ``create()`` claims a running pod (each claim waits for the pool to be full again first,
  so every sample is a claim, not a cold start).
* Round trip: ``execute("true")`` and ``stat`` (a file operation), alternating sandbox by
  sandbox round by round; median, p90 and the ratio of medians against bwrap.
* Throughput: ``upload_files`` and ``download_files`` of one ``--mib`` MiB file, best of
  ``--repeat``; MiB/s and the ratio against bwrap.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks._round_trips import round_trips
from benchmarks.docker import MIB, WARMUP, creates, throughput
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.providers.docker import DockerProvider
from sandbox_sdk.providers.kubernetes import KubernetesProvider
from sandbox_sdk.providers.kubernetes.provider import pod_running
from tests.providers.docker.conftest import engine_url
from tests.providers.kubernetes.conftest import SERVICES_KUBECONFIG


def claims(kubeconfig: str | Path, count: int) -> float:
    """Median ms of ``create()`` (a claim) then ``delete`` on a warm pool of 2 of the
    cluster, the pool full before each claim."""
    samples = []
    with KubernetesProvider(kubeconfig=kubeconfig, warm_pool=2) as pooled:
        for _ in range(count):
            while sum(1 for pod in pooled.warm_pods() if pod_running(pod)) < 2:
                time.sleep(0.1)  # polls the condition: the pool is full
            started = time.perf_counter()
            sandbox = pooled.create()
            samples.append(time.perf_counter() - started)
            pooled.delete(sandbox.id)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--mib", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--creates", type=int, default=5)
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG") or SERVICES_KUBECONFIG
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        made: dict[str, SandboxProvider[Any]] = {
            "bwrap": BwrapProvider(Path(scratch) / "bwrap"),
            "dockerd": stack.enter_context(DockerProvider(base_url=engine_url("dockerd"))),
            "kubernetes": stack.enter_context(KubernetesProvider(kubeconfig=kubeconfig)),
        }
        created = creates(made, args.creates)
        created["kubernetes-pool"] = claims(kubeconfig, args.creates)
        print("create + health check + delete, median ms:")
        for name, ms in created.items():
            print(f"  {name:10} {ms:8.0f}  x{ms / created['bwrap']:.1f}")
        sandboxes = {name: provider.create() for name, provider in made.items()}
        try:
            samples = round_trips(sandboxes, args.rounds, WARMUP)
            print("round trip, ms: median / p90 / ratio of medians against bwrap")
            for (operation, name), values in samples.items():
                median = statistics.median(values)
                p90 = statistics.quantiles(values, n=10)[-1]
                base = statistics.median(samples[(operation, "bwrap")])
                print(f"  {operation:16} {name:10} {median:7.1f} {p90:7.1f}  x{median / base:.1f}")
            rates = throughput(sandboxes, args.mib * MIB, args.repeat)
            print(f"{args.mib} MiB, MiB/s (best of {args.repeat}) and the ratio against bwrap:")
            for (operation, name), rate in rates.items():
                print(f"  {operation:16} {name:10} {rate:7.1f}  x{rate / rates[(operation, 'bwrap')]:.2f}")
        finally:
            for name, sandbox in sandboxes.items():
                made[name].delete(sandbox.id)


if __name__ == "__main__":
    main()
