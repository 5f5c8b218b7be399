"""The repository's shape, as issue 10 settled it, kept from drifting back.

- Outside ``src/sandbox_sdk``, nothing imports a private module or name of the
  package (a dotted part starting with ``_``), docs included; the exceptions
  are the unit tests of a private unit (:data:`PRIVATE_UNIT_TESTS`) and a
  provider's tests in ``tests/providers/<name>/`` importing that provider's
  own private modules.
- Every provider is one folder of the same shape; one that talks to its
  platform through a client library maps that library's errors in
  ``_errors.py``'s ``translate_errors``.
- Providers reach the core through public modules (``sandbox_sdk.provider_kit``
  and the like), never ``sandbox_sdk._core`` or ``sandbox_sdk._kernel``.
- One real package: no symlinks, no ``package-dir`` mapping, no hand-kept
  package list.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "src" / "sandbox_sdk"
PROVIDERS_DIR = PACKAGE_DIR / "providers"
#: Where the package's users live: their imports must be public.
USER_DIRS = ("tests", "benchmarks", "examples")
#: Unit tests of private units, each with the private modules it may import:
#: the unit it tests first, then what it needs to drive or feed that unit.
PRIVATE_UNIT_TESTS = {
    "tests/test_kernel.py": ("sandbox_sdk._kernel",),
    "tests/test_calls.py": (
        *("sandbox_sdk._calls", "sandbox_sdk._kernel", "sandbox_sdk.remote._runtime"),
        "sandbox_sdk._session",  # what a call's command is planned from
    ),
    "tests/test_pipeline.py": ("sandbox_sdk._core", "sandbox_sdk._calls", "sandbox_sdk._session"),
    "tests/test_operation_server.py": ("sandbox_sdk._session",),  # when a client stops launching
    "tests/test_grep_paths.py": ("sandbox_sdk.remote._runtime",),  # grep records built as the script does
    # records planted as a supervisor writes them
    "tests/providers/local/test_process_records.py": ("sandbox_sdk.remote._runtime",),
    "tests/test_async_native.py": ("sandbox_sdk._core", "sandbox_sdk._calls"),  # where replies are decoded
    "tests/test_provider_flows.py": ("sandbox_sdk._provider_flows", "sandbox_sdk._kernel"),
    "tests/test_protocol.py": ("sandbox_sdk.remote._runtime",),  # client exit codes vs the in-sandbox table
    "tests/test_remote_units.py": ("sandbox_sdk.remote._runtime",),
    "tests/test_glob_walk.py": ("sandbox_sdk.remote._runtime",),  # the oracle matches with its compile_glob
    # the in-sandbox extract script (remote/archive.py) fed hostile archives directly
    "tests/transfer/test_transfer_dirs.py": ("sandbox_sdk._calls",),
}
PROVIDER_FILES = ("__init__.py", "sandbox.py", "provider.py")
CODE_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: An import in a code block that is not Python as a whole (shell, a fragment).
IMPORT_LINE = re.compile(r"\b(?:from\s+(sandbox_sdk[\w.]*)\s+)?import\s+([\w., ]+)")
DOTTED_NAME = re.compile(r"sandbox_sdk(?:\.\w+)+")


def is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.endswith("__") for part in dotted.split("."))


def imported_names(tree: ast.AST, package: str = "") -> Iterator[str]:
    """Every module and name ``tree`` imports, dotted in full (``from
    sandbox_sdk import _core`` gives ``sandbox_sdk._core``); relative imports
    resolved against ``package``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            yield from (f"{module}.{alias.name}" for alias in node.names)


def named_in_strings(tree: ast.AST) -> Iterator[str]:
    """Dotted names in string constants: ``monkeypatch.setattr("sandbox_sdk._core.x", ...)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield from DOTTED_NAME.findall(node.value)


def names_in_code_block(block: str) -> Iterator[str]:
    try:
        tree = ast.parse(block)
    except SyntaxError:
        for module, names in IMPORT_LINE.findall(block):
            yield from (f"{module}.{name.strip()}" if module else name.strip() for name in names.split(","))
        yield from DOTTED_NAME.findall(block)
    else:
        yield from imported_names(tree)


def private_uses(path: Path) -> set[str]:
    """The private ``sandbox_sdk`` names a user-side file imports or names."""
    if path.suffix == ".md":
        names = [
            name for block in CODE_BLOCK.findall(path.read_text()) for name in names_in_code_block(block)
        ]
    else:
        tree = ast.parse(path.read_text(), str(path))
        names = [*imported_names(tree), *named_in_strings(tree)]
    return {name for name in names if name.split(".")[0] == "sandbox_sdk" and is_private(name)}


def within(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def allowed(relative: str, name: str) -> bool:
    if any(within(name, module) for module in PRIVATE_UNIT_TESTS.get(relative, ())):
        return True
    parts = Path(relative).parts
    if parts[:2] == ("tests", "providers") and len(parts) > 3:
        return name.startswith(f"sandbox_sdk.providers.{parts[2]}.")
    return False


def user_files() -> Iterator[Path]:
    """Every file of the package's users; not this one, which names private modules to allow them."""
    this = Path(__file__).resolve()
    for directory in USER_DIRS:
        yield from sorted(path for path in (ROOT / directory).rglob("*.py") if path != this)
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield ROOT / "README.md"


def test_nothing_outside_the_package_imports_its_private_modules() -> None:
    found = {}
    for path in user_files():
        relative = path.relative_to(ROOT).as_posix()
        private = sorted(name for name in private_uses(path) if not allowed(relative, name))
        if private:
            found[relative] = private
    assert found == {}, "import public names (sandbox_sdk.provider_kit, sandbox_sdk.testing, ...)"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("a.py", "from sandbox_sdk._core import check_path\n"),
        ("a.py", "from sandbox_sdk import _kernel as kernel\n"),
        ("a.py", "import sandbox_sdk._core\n"),
        ("a.py", "from sandbox_sdk.remote import (\n    read,\n    _runtime,\n)\n"),
        ("a.py", "monkeypatch.setattr('sandbox_sdk._core.wait', None)\n"),
        ("a.md", "```python\nfrom sandbox_sdk._core import Call\n```\n"),
        ("a.md", "```bash\npython -c 'from sandbox_sdk import _core'\n```\n"),
    ],
)
def test_the_guard_sees_private_uses(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    assert private_uses(tmp_path / name)
    (tmp_path / name).write_text(re.sub(r"\b_(?=[a-z])", "", text))  # the same, made public
    assert private_uses(tmp_path / name) == set()


@pytest.mark.parametrize("relative", sorted(PRIVATE_UNIT_TESTS))
def test_each_private_unit_test_uses_all_it_is_allowed(relative: str) -> None:
    """An allowance goes once its test no longer needs it (or no longer exists)."""
    used = private_uses(ROOT / relative)
    unused = [module for module in PRIVATE_UNIT_TESTS[relative] if not any(within(n, module) for n in used)]
    assert unused == []


# -- providers -----------------------------------------------------------------------------


def provider_names() -> list[str]:
    return sorted(path.name for path in PROVIDERS_DIR.iterdir() if (path / "__init__.py").exists())


def provider_package(name: str) -> str:
    """The dotted name a provider's modules live in (relative imports start there)."""
    return f"sandbox_sdk.providers.{name}"


def provider_modules(name: str) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((PROVIDERS_DIR / name).glob("*.py")):
        yield path.name, ast.parse(path.read_text(), str(path))


def core_dependencies() -> set[str]:
    """Import names of what every installation has (``pydantic``, ``anyio``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = (re.split(r"[^\w.-]", requirement, maxsplit=1)[0] for requirement in project["dependencies"])
    return {name.replace("-", "_") for name in names}


def client_libraries(name: str) -> set[str]:
    """Top-level packages a provider imports that neither Python nor the core brings."""
    ours = {"sandbox_sdk", "__future__", *sys.stdlib_module_names, *core_dependencies()}
    found: set[str] = set()
    for _, tree in provider_modules(name):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - ours


def test_the_providers_are_found() -> None:
    assert {"local", "bwrap", "daytona", "e2b", "modal"} <= set(provider_names())


@pytest.mark.parametrize("name", provider_names())
def test_provider_has_the_one_shape(name: str) -> None:
    missing = [file for file in PROVIDER_FILES if not (PROVIDERS_DIR / name / file).is_file()]
    assert missing == []


@pytest.mark.parametrize("name", [name for name in provider_names() if client_libraries(name)])
def test_provider_over_a_client_library_translates_its_errors_in_one_place(name: str) -> None:
    errors_file = PROVIDERS_DIR / name / "_errors.py"
    assert errors_file.is_file(), f"{name} imports {sorted(client_libraries(name))}: add _errors.py"
    tree = ast.parse(errors_file.read_text())
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "translate_errors" in defined
    package = provider_package(name)
    users = [
        module
        for module, tree in provider_modules(name)
        if {f"{package}._errors", f"{package}._errors.translate_errors"} & set(imported_names(tree, package))
    ]
    assert users, "translate_errors is defined but no module of the provider uses it"


@pytest.mark.parametrize("name", provider_names())
def test_provider_imports_nothing_private_from_the_core(name: str) -> None:
    package = provider_package(name)
    private = {
        f"{module}: {imported}"
        for module, tree in provider_modules(name)
        for imported in imported_names(tree, package)
        if imported.startswith("sandbox_sdk.")
        and is_private(imported)
        and not imported.startswith(package + ".")
    }
    assert private == set(), "use sandbox_sdk.provider_kit"


# -- one real package ----------------------------------------------------------------------


def test_no_symlinks_in_the_repository() -> None:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = [ROOT / name for name in listed.decode().split("\0") if name]
    assert files
    assert [path.relative_to(ROOT).as_posix() for path in files if path.is_symlink()] == []


def test_one_package_found_under_src_without_mapping() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in setuptools
    assert setuptools["packages"]["find"]["where"] == ["src"]  # found, not a hand-kept list
