"""The distribution as a user gets it: the wheel and the sdist, installed with
each extra into fresh virtualenvs, and mypy run from a project of the user's.

The extras are installed in groups rather than one venv each, to keep the
test within minutes: the core alone (with mypy), every extra but deepagents
together (which also proves they resolve together), and deepagents (with the
cli, so ``sbx providers`` there shows what is missing); a fourth venv holds an
editable install of the checkout, for mypy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "sandbox-sdk-py"
PROBE = (
    "import sandbox_sdk.providers.local as m, sandbox_sdk.remote as r; print(m.__file__); print(r.__file__)"
)
MYPY = f"mypy=={version('mypy')}"
#: What each group's venv installs (``{source}``: a copy of this checkout).
GROUPS = {
    "core": [DISTRIBUTION, MYPY],
    "extras": [
        f"{DISTRIBUTION}[cli,daytona,docker,e2b,fsspec,inspect,kubernetes,mcp,modal,openai-agents,remote]"
    ],
    "deepagents": [f"{DISTRIBUTION}[cli,deepagents]"],
    "editable": ["--editable", "{source}", MYPY],
}
#: Not in the tree a build starts from: caches, environments, earlier builds.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "site", "*.egg-info", "__pycache__", ".*_cache"
)
#: Code of a user's project, type-checked against the installed package.
USER_CODE = """
from sandbox_sdk import ExecuteResponse, SandboxNotFoundError, get_provider
from sandbox_sdk.providers.bwrap import BwrapProvider


def run(command: str) -> int:
    provider: BwrapProvider = get_provider("bwrap")
    try:
        sandbox = provider.get("bwrap-0")
    except SandboxNotFoundError:
        return 1
    response: ExecuteResponse = sandbox.execute(command)
    return response.exit_code or 0
"""
#: The same, wrong: mypy must see the package's types to reject it.
WRONG_USER_CODE = USER_CODE.replace("return response.exit_code or 0", "return response.output")


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(map(str, args)), check=False, capture_output=True, text=True, cwd=cwd)


def checked(*args: str | Path, cwd: Path | None = None) -> str:
    done = run(*args, cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout, so builds and installs leave no metadata in its src/."""
    copy = tmp_path_factory.mktemp("build") / "source"
    shutil.copytree(ROOT, copy, ignore=NOT_SOURCES)
    return copy


@pytest.fixture(scope="module")
def dist(source: Path) -> Path:
    """The sdist and the wheel built by ``scripts/dist`` (``python -m build`` in
    a clean copy of the checkout, then ``twine check --strict``), as the release
    workflow builds them."""
    done = subprocess.run(
        [ROOT / "scripts" / "dist", "--no-isolation", source.parent / "dist"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return source.parent / "dist"


@pytest.fixture(scope="module")
def venvs(source: Path, dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A fresh virtualenv per group, each installed with pip (at once: most of
    the time is pip resolving and unpacking)."""
    root = tmp_path_factory.mktemp("venvs")

    def install(group: str) -> Path:
        venv = root / group
        checked(sys.executable, "-m", "venv", venv)
        requirements = [arg.format(source=source) for arg in GROUPS[group]]
        checked(
            venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile",
            "--disable-pip-version-check", "--find-links", dist, *requirements,
        )  # fmt: skip
        return venv

    with ThreadPoolExecutor(len(GROUPS)) as pool:
        yield dict(zip(GROUPS, pool.map(install, GROUPS), strict=True))


@pytest.mark.slow
def test_wheel_and_sdist_hold_the_whole_package(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("sandbox_sdk_py-*.whl")
    (sdist,) = dist.glob("sandbox_sdk_py-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "sandbox_sdk").rglob("*.py")}
    assert sources <= names
    assert {"sandbox_sdk/py.typed", "sandbox_sdk/remote/_runtime.py"} <= names
    assert all(name.startswith(("sandbox_sdk/", "sandbox_sdk_py-")) for name in names)
    (scripts,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    entry_points = zipfile.ZipFile(wheel).read(scripts).decode()
    assert "sbx = sandbox_sdk.cli:main" in entry_points
    with tarfile.open(sdist) as archive:
        members = {name.partition("/")[2] for name in archive.getnames()}
    assert {"pyproject.toml", "README.md"} <= members
    assert {f"src/{name}" for name in sources | {"sandbox_sdk/py.typed"}} <= members
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    probe = f"import sys; sys.path.insert(0, {str(unpacked)!r}); {PROBE}"
    out = checked(sys.executable, "-I", "-c", probe, cwd=tmp_path)
    assert all(line.startswith(str(unpacked)) for line in out.splitlines())


@pytest.mark.slow
def test_the_core_alone_runs_bwrap_and_local_and_names_each_missing_extra(venvs: dict[str, Path]) -> None:
    python = venvs["core"] / "bin" / "python"
    checked(python, "-c", "import sandbox_sdk.providers.bwrap, sandbox_sdk.providers.local")
    for name in ("daytona", "docker", "e2b", "modal", "remote"):
        code = f"import sandbox_sdk; sandbox_sdk.get_provider({name!r})"
        done = run(python, "-c", code)
        assert done.returncode == 1
        assert f"ProviderUnavailableError: provider {name!r} is registered but cannot" in done.stderr
        assert f"pip install '{DISTRIBUTION}[{name}]'" in done.stderr
    sbx = run(venvs["core"] / "bin" / "sbx", "providers")
    assert sbx.returncode == 1
    assert sbx.stderr.strip() == (
        f"sbx needs the cli extra (click is not installed): pip install '{DISTRIBUTION}[cli]'"
    )


@pytest.mark.slow
def test_every_extra_imports_its_providers_and_integrations(venvs: dict[str, Path]) -> None:
    python = venvs["extras"] / "bin" / "python"
    walk = (
        "import pkgutil, sandbox_sdk.providers as p;"
        "[__import__(m.name) for m in pkgutil.walk_packages(p.__path__, 'sandbox_sdk.providers.')];"
        "import sandbox_sdk.integrations.inspect, sandbox_sdk.integrations.mcp, sandbox_sdk.runner;"
        "import sandbox_sdk.integrations.openai_agents;"
        "print('ok')"
    )
    assert checked(python, "-c", walk) == "ok\n"
    listed = checked(venvs["extras"] / "bin" / "sbx", "providers")
    assert "not installed" not in listed
    assert {"bwrap", "daytona", "docker", "e2b", "local", "modal", "remote"} <= {
        line.split()[0] for line in listed.splitlines()[1:] if line[:1].strip()
    }
    deepagents = venvs["deepagents"]
    checked(deepagents / "bin" / "python", "-c", "import sandbox_sdk.integrations.deepagents")
    # deepagents-code's discovery (entry.load()() on its group): the factory, from the wheel.
    discover = (
        "from importlib.metadata import entry_points;"
        "(p,) = entry_points(group='deepagents_code.sandbox_providers');"
        "print(p.name, type(p.load()()).__name__)"
    )
    assert checked(deepagents / "bin" / "python", "-c", discover) == "sandbox-sdk DeepAgentsCodeProvider\n"
    listed = checked(deepagents / "bin" / "sbx", "providers")
    (daytona,) = [line for line in listed.splitlines() if line.startswith("daytona ")]
    assert f"not installed  pip install '{DISTRIBUTION}[daytona]'" in daytona


def check_users_project(mypy: Path, project: Path) -> None:
    """``mypy --strict`` passes the user's code and rejects it made wrong (so
    it saw the package's types, not ``Any``)."""
    for code, status in ((USER_CODE, 0), (WRONG_USER_CODE, 1)):
        (project / "app.py").write_text(code)
        done = run(mypy, "--strict", "--no-incremental", "app.py", cwd=project)
        assert done.returncode == status, done.stdout + done.stderr
    assert 'Incompatible return value type (got "str", expected "int")' in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("group", ["core", "editable"])
def test_mypy_checks_a_users_project(group: str, venvs: dict[str, Path], tmp_path: Path) -> None:
    """From a project outside the repository, with the venv's own mypy: the
    installed wheel, and an editable install of the checkout."""
    check_users_project(venvs[group] / "bin" / "mypy", tmp_path)


def test_installed_package_resolves_providers_outside_the_tree(tmp_path: Path) -> None:
    out = checked(sys.executable, "-c", PROBE, cwd=tmp_path)
    local_init, remote_init = out.splitlines()
    assert Path(local_init).resolve() == ROOT / "src" / "sandbox_sdk" / "providers" / "local" / "__init__.py"
    assert Path(remote_init).resolve() == ROOT / "src" / "sandbox_sdk" / "remote" / "__init__.py"
