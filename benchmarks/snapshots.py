"""Snapshot and restore against the directory transfers they are built on, in one run.

    python benchmarks/snapshots.py [--provider local|bwrap] [--files 1000] [--mib 100] [--repeat 3]

Per workload (``--files`` small files; one file of ``--mib`` MiB) it times,
best of ``--repeat``:

* ``download_dir``: the baseline, the tree brought to the client once;
* ``snapshot``: the same download, then hashing into a fresh store;
* ``snapshot (again)``: a second snapshot after one file changed (the
  incremental case: the store gains one blob);
* ``upload_dir`` to a new directory: the other baseline;
* ``restore``: building the tree from the store (each blob verified),
  the upload beside the target and the swap.

Ratios are against the baseline of the same direction; round trips are
counted per operation.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sandbox_sdk import BaseSandbox, DirectorySnapshotStore, get_provider
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.files import write_random_file

MIB = 1024 * 1024


@contextmanager
def workspace(provider_name: str) -> Iterator[BaseSandbox]:
    if provider_name == "local":
        with tempfile.TemporaryDirectory() as root:
            yield LocalSandbox(root)
        return
    with get_provider(provider_name) as provider, provider.create() as sandbox:
        yield sandbox


def fresh(parent: Path) -> Path:
    """A new name under ``parent``, so no run measures a tree already there."""
    return parent / f"run-{time.monotonic_ns()}"


def new_store(parent: Path) -> DirectorySnapshotStore:
    return DirectorySnapshotStore(fresh(parent))


def best(repeat: int, action: Callable[[], Any], before: Callable[[], Any] = lambda: None) -> float:
    times = []
    for _ in range(repeat):
        before()
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(sandbox: BaseSandbox, name: str, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work:
        local = Path(work)
        store = DirectorySnapshotStore(local / "store")
        results = {
            "download_dir": best(repeat, lambda: sandbox.download_dir(name, fresh(local))),
            "snapshot": best(
                repeat, lambda: sandbox.snapshot([name], store=DirectorySnapshotStore(fresh(local)))
            ),
        }
        snapshot = sandbox.snapshot([name], store=store)
        results["snapshot (again)"] = best(
            repeat,
            lambda: sandbox.snapshot([name], store=store),
            lambda: sandbox.write(f"{name}/changed.bin", os.urandom(64), overwrite=True),
        )
        tree = local / "tree"
        sandbox.download_dir(name, tree)
        results["upload_dir"] = best(
            repeat, lambda: sandbox.upload_dir(tree, fresh(Path("uploads")).as_posix())
        )
        results["restore"] = best(repeat, lambda: sandbox.restore(snapshot, store=store))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="local")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with workspace(args.provider) as sandbox, tempfile.TemporaryDirectory() as seed:
        small = Path(seed, "small")
        for i in range(args.files):
            path = small / f"d{i % 20}" / f"f{i}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(512))
        sandbox.upload_dir(small, "small")
        large = Path(seed, "large")
        large.mkdir()
        write_random_file(large / "big.bin", args.mib * MIB)
        sandbox.upload_dir(large, "large")
        print(f"provider {args.provider}, best of {args.repeat}")
        for name, label in (("small", f"{args.files} files"), ("large", f"1 file of {args.mib} MiB")):
            results = measure(sandbox, name, args.repeat)
            print(f"\n{label}")
            for operation, seconds in results.items():
                base = results["upload_dir" if operation in ("upload_dir", "restore") else "download_dir"]
                print(f"  {operation:<18} {seconds * 1000:9.1f} ms  {seconds / base:5.2f}x")


if __name__ == "__main__":
    main()
