"""The ``src/`` layout: one package, ``sandbox_sdk`` with its ``providers``, in the wheel
and in the editable install."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = (
    "import sandbox_sdk.providers.local as m, sandbox_sdk.remote as r; print(m.__file__); print(r.__file__)"
)


@pytest.mark.slow
def test_wheel_holds_one_package(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            tmp_path,
            ROOT,
        ],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("sandbox_sdk_py-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "sandbox_sdk/providers/__init__.py" in names
    assert "sandbox_sdk/providers/local/__init__.py" in names
    assert "sandbox_sdk/remote/_runtime.py" in names
    assert "sandbox_sdk/py.typed" in names
    assert all(name.startswith(("sandbox_sdk/", "sandbox_sdk_py-")) for name in names)
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(unpacked)!r}); {PROBE}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert all(line.startswith(str(unpacked)) for line in done.stdout.splitlines())


def test_installed_package_resolves_providers_outside_the_tree(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, cwd=tmp_path
    )
    local_init, remote_init = done.stdout.splitlines()
    assert Path(local_init).resolve() == ROOT / "src" / "sandbox_sdk" / "providers" / "local" / "__init__.py"
    assert Path(remote_init).resolve() == ROOT / "src" / "sandbox_sdk" / "remote" / "__init__.py"
