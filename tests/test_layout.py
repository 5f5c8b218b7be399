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
- The import graph of ``src/sandbox_sdk``, read from the AST: no cycle in what
  runs at import time, and no arrow up the layers of :data:`LAYERS` (typing
  imports included); ``import sandbox_sdk`` loads no provider.
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
    "tests/test_round_trips.py": ("sandbox_sdk._session",),  # its fixture waits out the server's launch
    "tests/test_grep_paths.py": ("sandbox_sdk._calls",),  # the shell grep's escaped copy read back
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


# -- the import graph: no circles, no upward arrows ---------------------------------------

PACKAGE = "sandbox_sdk"
#: The package's layers, bottom first, each with the modules (and packages, all
#: their modules included) it holds; a module imports only from its own layer or
#: those below. Read from the code, bottom up:
#:
#: - vocabulary: the errors, the result models, the runner's wire format
#:   (``wire`` speaks in ``errors``) and the policies (``mounts``, ``network``);
#:   nothing else of the package.
#: - protocol: the in-sandbox scripts (``remote``, stdlib only, importing only
#:   one another) and the client side of their framing (``protocol``).
#: - calls: one operation as a call, run by the kernel (``_kernel``) over a
#:   session; processes (``_process``, public ``process``).
#: - transfer: uploads and downloads, built on calls; ``_operations`` and
#:   ``base`` use it, so it sits below them.
#: - sandbox: ``BaseSandbox`` and its derived operations, ``SandboxProvider``
#:   and its flows (``provider``: the class a provider subclasses, nothing that
#:   knows a provider).
#: - provider_kit: the parts shared by providers (host processes, host state).
#: - providers: the shipped providers; one imports no other.
#: - facade: the package root and ``registry`` (``get_provider``, typed per
#:   shipped provider), the names a user starts from.
#: - applications: what is built on the public API (integrations, the runner,
#:   the CLI, the conformance suites).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "vocabulary",
        (
            "sandbox_sdk.errors",
            "sandbox_sdk.models",
            "sandbox_sdk.wire",
            "sandbox_sdk.mounts",
            "sandbox_sdk.network",
        ),
    ),
    ("protocol", ("sandbox_sdk.remote", "sandbox_sdk.protocol")),
    (
        "calls",
        (
            "sandbox_sdk.limits",
            "sandbox_sdk._kernel",
            "sandbox_sdk._handle",
            "sandbox_sdk._session",
            "sandbox_sdk._calls",
            "sandbox_sdk._core",
            "sandbox_sdk._process",
            "sandbox_sdk.process",
        ),
    ),
    ("transfer", ("sandbox_sdk.transfer", "sandbox_sdk.snapshots")),
    (
        "sandbox",
        (
            "sandbox_sdk._operations",
            "sandbox_sdk.base",
            "sandbox_sdk._provider_flows",
            "sandbox_sdk._provider_lifecycle",
            "sandbox_sdk.provider",
        ),
    ),
    ("provider_kit", ("sandbox_sdk.provider_kit",)),
    ("providers", ("sandbox_sdk.providers",)),
    ("facade", (PACKAGE, "sandbox_sdk.registry")),
    (
        "applications",
        (
            "sandbox_sdk.__main__",
            "sandbox_sdk.cli",
            "sandbox_sdk.integrations",
            "sandbox_sdk.runner",
            "sandbox_sdk.testing",
        ),
    ),
)


def module_name(path: Path, package_dir: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_time_statements(body: list[ast.stmt], *, typing: bool) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported: the module's and
    its classes' bodies, through ``if``/``try``/``with``/``for``, not into
    functions; ``if TYPE_CHECKING:`` bodies only with ``typing`` (their
    ``else`` always)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        yield node
        if isinstance(node, ast.If) and is_type_checking(node.test) and not typing:
            yield from import_time_statements(node.orelse, typing=typing)
            continue
        blocks = [getattr(node, field, []) for field in ("body", "orelse", "finalbody")]
        blocks += [handler.body for handler in getattr(node, "handlers", [])]
        blocks += [case.body for case in getattr(node, "cases", [])]
        for block in blocks:
            yield from import_time_statements(block, typing=typing)


def import_graph(package_dir: Path, *, typing: bool = False) -> dict[str, set[str]]:
    """Each module of the package and the package modules it imports when it is
    imported (with ``typing``, for a type checker too). ``from a import b`` is
    an arrow to ``a.b`` when that is a module, else to ``a``; the parents a
    module's own import runs first (its packages) are not arrows."""
    paths = {module_name(path, package_dir): path for path in sorted(package_dir.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in import_time_statements(ast.parse(path.read_text(), str(path)).body, typing=typing):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level else ""
                module = ".".join(part for part in (base, node.module or "") if part)
                named = (f"{module}.{alias.name}" for alias in node.names)
                targets.update(dotted if dotted in paths else module for dotted in named)
        graph[name] = {target for target in targets if target in paths and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_of(name: str) -> int:
    """The index in :data:`LAYERS` of ``name``'s layer: the longest entry it is
    within (the package root is an entry for itself alone)."""
    matches = [
        (len(entry), position)
        for position, (_, entries) in enumerate(LAYERS)
        for entry in entries
        if name == entry or (entry != PACKAGE and name.startswith(entry + "."))
    ]
    assert matches, f"{name} is in no layer: add it to LAYERS"
    return max(matches)[1]


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{name} ({LAYERS[layer_of(name)][0]}) -> {target} ({LAYERS[layer_of(target)][0]})"
        for name, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(name)
    )


def test_the_runtime_import_graph_has_no_cycles() -> None:
    """Import order never depends on who was imported first."""
    assert cycles(import_graph(PACKAGE_DIR)) == []


def test_no_module_imports_from_a_layer_above_it() -> None:
    """Typing imports included: a type checker's graph across layers is as
    acyclic as the runtime one (one layer may still annotate in a circle, as
    bwrap's ``_jail`` and ``sandbox`` do)."""
    assert upward_arrows(import_graph(PACKAGE_DIR, typing=True)) == []


def test_every_layer_entry_is_a_module_or_package() -> None:
    modules = set(import_graph(PACKAGE_DIR))
    stale = [entry for _, entries in LAYERS for entry in entries if entry not in modules]
    assert stale == []


def test_the_graph_sees_cycles_and_upward_arrows(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    (package / "providers").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "providers" / "__init__.py").write_text("")
    (package / "errors.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sandbox_sdk import models\n"
    )
    (package / "models.py").write_text("class A:\n    from sandbox_sdk.providers import local\n")
    (package / "providers" / "local.py").write_text(
        "def lazy() -> None:\n    import sandbox_sdk.errors\nfrom . import other\n"
    )
    (package / "providers" / "other.py").write_text(
        "try:\n    from .local import x\nexcept ImportError:\n    pass\n"
    )
    runtime = import_graph(package)
    assert runtime["sandbox_sdk.errors"] == set()
    assert runtime["sandbox_sdk.providers.local"] == {"sandbox_sdk.providers.other"}
    assert cycles(runtime) == [["sandbox_sdk.providers.local", "sandbox_sdk.providers.other"]]
    assert upward_arrows(runtime) == [
        "sandbox_sdk.models (vocabulary) -> sandbox_sdk.providers.local (providers)"
    ]
    assert import_graph(package, typing=True)["sandbox_sdk.errors"] == {"sandbox_sdk.models"}


def test_importing_the_package_imports_no_provider() -> None:
    """``import sandbox_sdk`` loads the core only; ``ResourceLimits`` (bwrap's,
    which brings ``ctypes`` and the jail) is imported when first asked for."""
    code = (
        "import sys, sandbox_sdk\n"
        "print(sorted(m for m in sys.modules if m.startswith('sandbox_sdk.providers.')))\n"
        "from sandbox_sdk import ResourceLimits\n"
        "print(ResourceLimits.__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""},
        timeout=120,
    )
    assert result.stdout.splitlines() == ["[]", "sandbox_sdk.providers.bwrap.sandbox"]
