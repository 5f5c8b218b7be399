"""Run one large transfer in a fresh process and print its peak RSS growth.

Usage: ``python memory_probe.py SIZE_MIB sync|async``. Prints JSON:
``{"upload_growth_mib": ..., "download_growth_mib": ..., "seconds": ...}``.
Peak RSS (``ru_maxrss``) only ever grows, so the baseline is taken after the
imports and a warm-up transfer, and each direction is measured in turn.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.files import file_sha256, write_random_file

MIB = 1024 * 1024


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(size: int, mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work:
        root, client = Path(work, "sandbox"), Path(work, "client")
        root.mkdir()
        client.mkdir()
        sandbox = LocalSandbox(root)
        source, back = client / "source.bin", client / "back.bin"
        expected = write_random_file(source, size)
        sandbox.upload_files([("warm-up", b"x" * 4096)])
        sandbox.download_file("warm-up", client / "warm-up")
        started = time.perf_counter()
        baseline = peak_mib()
        if mode == "sync":
            [response] = sandbox.upload_files([("big.bin", source)])
        else:
            [response] = asyncio.run(sandbox.aupload_files([("big.bin", source)]))
        assert response.error is None, response.error
        after_upload = peak_mib()
        if mode == "sync":
            sandbox.download_file("big.bin", back)
        else:
            asyncio.run(sandbox.adownload_file("big.bin", back))
        after_download = peak_mib()
        assert file_sha256(root / "big.bin") == expected
        assert file_sha256(back) == expected
        return {
            "upload_growth_mib": after_upload - baseline,
            "download_growth_mib": after_download - after_upload,
            "total_growth_mib": after_download - baseline,
            "seconds": time.perf_counter() - started,
        }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) * MIB, sys.argv[2])))
