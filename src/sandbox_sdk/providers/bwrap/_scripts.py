"""The SDK's scripts as a jail sees them: installed by the host, read-only.

Each jail start writes every shipped script (``protocol.shipped``'s name
and source) with its bytecode into the sandbox's host state and binds that
directory read-only at :data:`JAIL_PATH`. No command of the jail can change
it (the mount is read-only, and no process in the jail may remount), so the
scripts file operations run, and the operation server the jail's PID 1
forks from them, are the SDK's own (docs/security.md). The bytecode is
hash-checked against the source (PEP 552), so a jail whose ``python3`` is
another version than this process's simply compiles the source instead.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import py_compile
import shutil
import tempfile
from pathlib import Path

from sandbox_sdk import protocol

#: Where a jail finds the scripts (``BwrapSandbox.installed_scripts``).
JAIL_PATH = "/run/sandbox-sdk/scripts"


@functools.cache
def _compiled() -> tuple[tuple[str, bytes, str, bytes], ...]:
    """Each script's installed name, source, bytecode file name and
    bytecode, compiled once per process."""
    scripts = []
    with tempfile.TemporaryDirectory(prefix="sandbox-sdk-scripts-") as scratch:
        for module in sorted(set(protocol.modules_by_op().values())):
            name = protocol.shipped(module).name
            source = protocol.shipped_source(module).encode("utf-8")
            path = os.path.join(scratch, f"{name}.py")
            Path(path).write_bytes(source)
            cached = py_compile.compile(
                path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH
            )
            assert cached is not None  # doraise: an error raises
            pyc = Path(cached).read_bytes()
            scripts.append((name, source, os.path.basename(importlib.util.cache_from_source(path)), pyc))
    return tuple(scripts)


def install(directory: Path) -> None:
    """Write the scripts into ``directory``, made anew (0755: the jail's
    user reads it, and only the host writes it)."""
    shutil.rmtree(directory, ignore_errors=True)
    cache = directory / "__pycache__"
    for path, data in (
        *((directory / f"{name}.py", source) for name, source, _, _ in _compiled()),
        *((cache / pyc_name, pyc) for _, _, pyc_name, pyc in _compiled()),
    ):
        path.parent.mkdir(exist_ok=True)
        path.parent.chmod(0o755)
        path.write_bytes(data)
        path.chmod(0o644)


def server_name() -> str:
    """The installed name of the operation server's script."""
    return protocol.shipped("server").name
