"""Large local test files, made and checked without holding them in memory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

BLOCK = 1 << 20


def write_random_file(path: Path, size: int) -> str:
    """Fill ``path`` with ``size`` pseudo-random bytes (no two 1 MiB blocks
    alike, so a misplaced chunk shows); return their SHA-256."""
    digest = hashlib.sha256()
    block = os.urandom(BLOCK)
    with path.open("wb") as f:
        for offset in range(0, size, BLOCK):
            part = (offset.to_bytes(8, "little") + block[8:])[: size - offset]
            f.write(part)
            digest.update(part)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
