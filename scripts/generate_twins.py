"""Write the public sync and async methods from one declaration per operation.

An operation is declared once, as an ``_op_<name>`` generator method that
carries the public signature and docstring of ``<name>``. For each entry of
:data:`ENTRIES` this script reads the declaring class (its syntax tree, not
the running module) and writes a module with a class that has, per
declaration, ``<name>`` (``return self._drive(self._op_<name>(...))``) and
``a<name>`` (``return await self._adrive(...)``), both with the declared
parameters and a docstring, formatted with ruff. The output is committed;
``--check`` exits non-zero with a diff when it differs from what the
declarations give (scripts/test runs it, so a drifted twin fails CI).

Usage: ``.venv/bin/python scripts/generate_twins.py [--check]``
"""

from __future__ import annotations

import argparse
import ast
import builtins
import difflib
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Width of the text of a generated async docstring (the house style).
DOC_WIDTH = 72


@dataclass(frozen=True)
class Twins:
    """One generated module: where the declarations are and what to write."""

    declarations: str  # the module that holds the declaring class, relative to the repository
    declaring_class: str
    output: str  # the generated module, relative to the repository
    generated_class: str
    docstring: str  # of the generated class
    module_docstring: str
    bases: str = ""  # the generated class's bases (default: the declaring class), e.g. "Flows[SandboxT]"
    prefix: str = "_op_"
    drive: str = "_drive"
    adrive: str = "_adrive"
    source_root: str = "src"  # where the package tree starts, for the module name of ``declarations``
    #: ``(name, async name)`` for twins that cannot be ``a<name>`` (``await`` is a keyword).
    async_names: tuple[tuple[str, str], ...] = ()


ENTRIES = [
    Twins(
        declarations="src/sandbox_sdk/_operations.py",
        declaring_class="SandboxOperations",
        output="src/sandbox_sdk/base.py",
        generated_class="BaseSandbox",
        docstring="""A sandbox whose every operation is built on :meth:`execute`.

Subclass it, implement ``id`` and ``execute`` (and ``aexecute`` if you
have a native async client), and declare your transport's caps as
``limits = Limits(max_command_bytes=..., max_output_bytes=...)``.
See docs/provider-guide.md.""",
        module_docstring="""``BaseSandbox``: every file operation, derived from one ``execute()``.

A provider implements ``id`` and ``execute``; this class supplies ``run``,
``ls``, ``stat``, ``read``, ``read_bytes``, ``write``, ``edit``, ``glob``,
``grep``, ``delete``, ``mkdir`` and the transfers, each with an async twin
prefixed ``a``, from the operations declared in ``sandbox_sdk._operations``.""",
    ),
    Twins(
        declarations="src/sandbox_sdk/_provider_flows.py",
        declaring_class="LifecycleFlows",
        output="src/sandbox_sdk/_provider_lifecycle.py",
        generated_class="ProviderLifecycle",
        bases="LifecycleFlows[SandboxT]",
        docstring="""The public lifecycle operations of :class:`~sandbox_sdk.SandboxProvider`, each
with its async twin, run from the flows of :class:`LifecycleFlows`.""",
        module_docstring="""The derived lifecycle operations of ``SandboxProvider``: ``is_alive``,
``create`` and ``get_or_create``, each with an async twin prefixed ``a``,
from the flows declared in ``sandbox_sdk._provider_flows``.""",
    ),
    Twins(
        declarations="src/sandbox_sdk/_process.py",
        declaring_class="ProcessOperations",
        output="src/sandbox_sdk/process.py",
        generated_class="Process",
        docstring="""A background command in a sandbox, from ``BaseSandbox.start`` or
``BaseSandbox.process(pid)``: ``pid`` (also its process group's id),
``command``, and ``poll``, ``read``, ``wait``, ``kill``, ``write_stdin``,
``close_stdin``, ``resize`` and ``follow``, each with its async twin
(``a<name>``; ``await_`` for ``wait``), and ``stream`` / ``astream``. Its
state lives in the sandbox, so any client can reattach to it. See
docs/processes.md.""",
        module_docstring="""``Process``: a background command in a sandbox, with async twins
(``apoll``, ``aread``, ``await_``, ``akill``, ``awrite_stdin``, ...), from
the operations declared in ``sandbox_sdk._process``.""",
        async_names=(("wait", "await_"),),
    ),
]


class GenerationError(Exception):
    """A declaration the generator cannot turn into twins."""


@dataclass(frozen=True)
class Operation:
    """One ``_op_<name>`` declaration, read from the syntax tree."""

    name: str  # the public name
    node: ast.FunctionDef
    source: str  # of the declarations module

    @property
    def result(self) -> ast.expr:
        """``T`` of the declared ``Operation[T]`` (whatever the generic is called)."""
        returns = self.node.returns
        if not isinstance(returns, ast.Subscript) or isinstance(returns.slice, ast.Tuple):
            raise GenerationError(f"{self.node.name}: declare the return type as Operation[T]")
        return returns.slice

    @property
    def parameters(self) -> str:
        """The declared parameters, annotations and defaults as written."""
        args = self.node.args
        positional = [*args.posonlyargs, *args.args]
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        written = [self._parameter(a, d) for a, d in zip(positional, defaults, strict=True)]
        if args.posonlyargs:
            written.insert(len(args.posonlyargs), "/")
        if args.vararg:
            written.append("*" + self._parameter(args.vararg, None))
        elif args.kwonlyargs:
            written.append("*")
        written += [self._parameter(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
        if args.kwarg:
            written.append("**" + self._parameter(args.kwarg, None))
        return ", ".join(written)

    def _parameter(self, arg: ast.arg, default: ast.expr | None) -> str:
        text = arg.arg
        if arg.annotation is not None:
            text += f": {self.written(arg.annotation)}"
        if default is not None:
            equals = " = " if arg.annotation is not None else "="  # as ruff formats it
            text += equals + self.written(default)
        return text

    def written(self, node: ast.AST) -> str:
        """``node`` as the declaration spells it."""
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    @property
    def arguments(self) -> str:
        """How a shell passes its parameters on to the declaration."""
        args = self.node.args
        passed = [a.arg for a in [*args.posonlyargs, *args.args][1:]]
        if args.vararg:
            passed.append(f"*{args.vararg.arg}")
        passed += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
        if args.kwarg:
            passed.append(f"**{args.kwarg.arg}")
        return ", ".join(passed)

    @property
    def docstring(self) -> str:
        """The declaration's docstring as written (indented for a method body)."""
        body = self.node.body[0]
        if ast.get_docstring(self.node) is None or not isinstance(body, ast.Expr):
            raise GenerationError(f"{self.node.name}: the declaration needs the public docstring")
        segment = ast.get_source_segment(self.source, body.value)
        assert segment is not None
        return segment

    def async_docstring(self) -> str:
        """``Async twin of :meth:`name`:`` and the first paragraph of the docstring."""
        first = (ast.get_docstring(self.node) or "").split("\n\n")[0]
        if "\\" in first or '"""' in first:
            raise GenerationError(f"{self.node.name}: keep backslashes and triple quotes out of the summary")
        summary = " ".join(first.split())
        word = summary.split(" ", 1)[0]
        if word.istitle() and word.isalpha():  # "Entries of ..." or "A page ...", not "UTF-8 ..."
            summary = summary[0].lower() + summary[1:]
        lines = textwrap.wrap(f"Async twin of :meth:`{self.name}`: {summary}", DOC_WIDTH)
        return '"""' + "\n        ".join(lines) + '"""'

    def names(self) -> set[str]:
        """The names the generated signature refers to (annotations, defaults)."""
        args = self.node.args
        nodes: list[ast.AST] = [self.result, *args.defaults, *(d for d in args.kw_defaults if d)]
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        nodes += [a.annotation for a in every if a is not None and a.annotation is not None]
        return _names(nodes)


def _names(nodes: list[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def module_name(path: str, source_root: str) -> str:
    return ".".join(Path(path).relative_to(source_root).with_suffix("").parts)


class Declarations:
    """A declarations module: its declaring class's operations, and where each
    name it uses comes from."""

    def __init__(self, entry: Twins, root: Path) -> None:
        self.entry = entry
        self.source = (root / entry.declarations).read_text("utf-8")
        self.tree = ast.parse(self.source)
        self.module = module_name(entry.declarations, entry.source_root)
        self.imports: dict[str, tuple[str, bool]] = {}  # name -> import statement, whether type-only
        for node in self.tree.body:
            self._note_imports(node, type_only=False)

    def _note_imports(self, node: ast.stmt, type_only: bool) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for inner in node.body:
                self._note_imports(inner, type_only=True)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise GenerationError(f"{self.entry.declarations}: use absolute imports")
            for alias in node.names:
                statement = f"from {node.module} import {ast.unparse(alias)}"
                self.imports[alias.asname or alias.name] = (statement, type_only)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                self.imports[name] = (f"import {ast.unparse(alias)}", type_only)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef):
            self._note_definition(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    self._note_definition(target.id)

    def _note_definition(self, name: str) -> None:
        self.imports[name] = (f"from {self.module} import {name}", False)

    def declaring_class(self) -> ast.ClassDef:
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == self.entry.declaring_class:
                return node
        raise GenerationError(f"{self.entry.declarations} has no class {self.entry.declaring_class}")

    def operations(self) -> list[Operation]:
        prefix = self.entry.prefix
        return [
            Operation(node.name[len(prefix) :], node, self.source)
            for node in self.declaring_class().body
            if isinstance(node, ast.FunctionDef)
            and node.name.startswith(prefix)
            and not node.name[len(prefix) :].startswith("_")
        ]

    def import_lines(self, names: set[str]) -> list[str]:
        """Import statements for ``names``; the type-only ones under ``TYPE_CHECKING``."""
        runtime: set[str] = set()
        type_only: set[str] = set()
        for name in sorted(names - set(dir(builtins))):
            if name not in self.imports:
                raise GenerationError(f"{self.entry.declarations}: cannot tell where {name!r} comes from")
            statement, only_types = self.imports[name]
            (type_only if only_types else runtime).add(statement)
        if not type_only:
            return sorted(runtime)
        lines = sorted(runtime | {"from typing import TYPE_CHECKING"})
        return [*lines, "", "if TYPE_CHECKING:", *(f"    {line}" for line in sorted(type_only))]


def generate(entry: Twins, root: Path = ROOT) -> str:
    """The generated module for ``entry`` (paths relative to ``root``), formatted."""
    declarations = Declarations(entry, root)
    operations = declarations.operations()
    bases = entry.bases or entry.declaring_class
    names = _names([ast.parse(bases, mode="eval")]).union(*(op.names() for op in operations))
    header = [
        f"# Generated by scripts/generate_twins.py from {entry.declaring_class} in {entry.declarations}.",
        "# Do not edit: change the declarations and run the script (scripts/test checks it).",
        f'"""{entry.module_docstring}\n"""',
        "",
        "from __future__ import annotations",
        "",
        *declarations.import_lines(names),
        "",
        "",
        f"class {entry.generated_class}({bases}):",
        f'    """{textwrap.indent(entry.docstring, "    ").lstrip()}\n    """',
    ]
    methods = [_twins(entry, operation, dict(entry.async_names)) for operation in operations]
    return _formatted("\n".join(header) + "".join(methods), root / entry.output)


def _twins(entry: Twins, op: Operation, async_names: dict[str, str]) -> str:
    call = f"self.{entry.prefix}{op.name}({op.arguments})"
    async_name = async_names.get(op.name, f"a{op.name}")
    result = op.written(op.result)
    return f"""
    def {op.name}({op.parameters}) -> {result}:
        {op.docstring}
        return self.{entry.drive}({call})

    async def {async_name}({op.parameters}) -> {result}:
        {op.async_docstring()}
        return await self.{entry.adrive}({call})
"""


def _formatted(source: str, path: Path) -> str:
    """``source`` with its imports sorted and formatted as ruff would (with the
    project's settings, as if it were ``path``)."""
    ruff = [sys.executable, "-m", "ruff"]
    for command in (["check", "--fix", "--select", "I", "--quiet"], ["format", "--quiet"]):
        source = subprocess.run(
            [*ruff, *command, "--stdin-filename", str(path), "-"],
            input=source,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, and fail on a difference")
    check = parser.parse_args(argv).check
    drifted = 0
    for entry in ENTRIES:
        wanted = generate(entry)
        target = ROOT / entry.output
        current = target.read_text("utf-8") if target.exists() else ""
        if wanted == current:
            continue
        if check:
            drifted += 1
            diff = difflib.unified_diff(
                current.splitlines(keepends=True), wanted.splitlines(keepends=True), entry.output, "generated"
            )
            sys.stdout.writelines(diff)
        else:
            target.write_text(wanted, "utf-8")
            print(f"wrote {entry.output}")
    if drifted:
        print(f"{drifted} generated module(s) differ: run scripts/generate_twins.py", file=sys.stderr)
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
