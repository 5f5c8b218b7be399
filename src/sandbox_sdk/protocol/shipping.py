"""Scripts as commands carry them: each ``remote/<module>.py`` joined to the
runtime and trimmed (:func:`shipped_source`), packed and named per version
(:func:`shipped`), and the bootstrap that runs an installed copy or installs
the one the command carries (:data:`BOOTSTRAP`, :data:`INSTALL`).
"""

from __future__ import annotations

import ast
import base64
import binascii
import hashlib
import importlib
import pkgutil
import posixpath
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from sandbox_sdk import remote
from sandbox_sdk.protocol.frame import FRAME_MARKER

RUNTIME_MODULE = "sandbox_sdk.remote._runtime"


@cache
def modules_by_op() -> dict[str, str]:
    """The ``remote/<module>.py`` that runs each operation, from the modules'
    own ``OPS`` tables (an operation name is unique across them)."""
    table: dict[str, str] = {}
    for info in pkgutil.iter_modules(remote.__path__):
        if info.name.startswith("_"):
            continue
        ops: Mapping[str, object] = importlib.import_module(f"{remote.__name__}.{info.name}").OPS
        for op in ops:
            if op in table:
                raise RuntimeError(f"operation {op!r} is defined by both {table[op]} and {info.name}")
            table[op] = info.name
    return table


def module_of(op: str) -> str:
    """The in-sandbox module whose ``OPS`` has ``op``."""
    try:
        return modules_by_op()[op]
    except KeyError:
        raise ValueError(f"no in-sandbox script has an operation {op!r}") from None


def shipped_source(module: str) -> str:
    """The program run for ``sandbox_sdk/remote/<module>.py``: the shared
    runtime, the module and a call of ``main(OPS)``, trimmed by :class:`_Shippable`."""
    package = resources.files("sandbox_sdk.remote")
    runtime = package.joinpath("_runtime.py").read_text("utf-8")
    body = package.joinpath(f"{module}.py").read_text("utf-8")
    tree = _Shippable().visit(ast.parse("\n".join([runtime, body, "main(OPS)", ""])))
    return ast.unparse(ast.fix_missing_locations(_without_unused_definitions(tree))) + "\n"


#: Directory of the installed scripts in ``scratch_dir``, one per user
#: (``%d`` is the uid, as the runtime's ``LOCK_DIR``).
SCRIPTS_DIR = ".sbx-scripts-%d"


def scripts_dir_in(scratch_dir: str) -> str:
    """Where the SDK installs its scripts in ``scratch_dir``: a path whose
    final ``%d`` the sandbox's uid replaces (:data:`BOOTSTRAP`)."""
    return posixpath.join(scratch_dir, SCRIPTS_DIR)


#: The bootstrap (``python3 -c``): run the installed script, loaded from its
#: file by CPython's own source loader (which caches its bytecode in
#: ``__pycache__``), if its CRC-32 is the one in the command and its
#: directory is the user's own, writable by no one else; otherwise run
#: :data:`INSTALL`, compiled only then. The directory is never put on
#: ``sys.path``: what the script imports comes from the standard library
#: only, never from a module planted beside it. Arguments: the scripts
#: directory (a final ``%d`` is the uid: :func:`scripts_dir_in`; a provider's
#: own read-only directory has none), module name, CRC-32, :data:`INSTALL`,
#: packed source.
BOOTSTRAP = """\
import sys,posix
d,n,c=sys.argv[1:4]
if d[-2:]=="%d":d=d[:-2]+str(posix.getuid())
p=d+"/"+n+".py"
def own():
 try:s=posix.lstat(d)
 except OSError:return False
 return s.st_mode&0o170022==0o40000 and s.st_uid==posix.getuid()
def run():
 try:
  with open(p,"rb") as f:s=f.read()
 except OSError:return
 import binascii
 if binascii.crc32(s)!=int(c):return
 try:from _frozen_importlib_external import SourceFileLoader as L
 except ImportError:from importlib.machinery import SourceFileLoader as L
 try:k=L(n,p).get_code(n)
 except OSError:return
 exec(k,dict(__name__="__main__"))
if own():run()
exec(sys.argv[4])
"""

#: Run by :data:`BOOTSTRAP` when there is no usable installed copy: unpack
#: the source, install it (a temporary file renamed into place: a racing
#: reader sees all of it or none) and import it; if that cannot be done (a
#: read-only scratch directory, say), run the unpacked source.
INSTALL = """\
import binascii,zlib
s=zlib.decompress(binascii.a2b_base64(sys.argv[5]))
t=p+"."+posix.urandom(8).hex()
try:
 try:posix.mkdir(d,0o700)
 except FileExistsError:pass
 if not own():raise PermissionError
 with open(t,"xb") as f:f.write(s)
 posix.replace(t,p)
except OSError:
 try:posix.unlink(t)
 except OSError:pass
else:run()
exec(compile(s,"sandbox_sdk/remote/"+n[4:n.rindex("_")]+".py","exec"),dict(__name__="__main__"))
"""


@dataclass(frozen=True)
class Shipped:
    """A script as a command carries it: the name it is installed under in the
    sandbox (``sbx_<module>_<digest of its source>``, so each version of the
    SDK has its own), the source's CRC-32, and the source zlib-compressed and
    base64-encoded for the command line."""

    name: str
    crc: int
    packed: str


@cache
def shipped(module: str) -> Shipped:
    """:func:`shipped_source` of ``module``, named and packed for a command."""
    source = shipped_source(module).encode("utf-8")
    return Shipped(
        name=f"sbx_{module}_{hashlib.sha256(source).hexdigest()[:16]}",
        crc=binascii.crc32(source),
        packed=base64.b64encode(zlib.compress(source, 9)).decode("ascii"),
    )


class _Shippable(ast.NodeTransformer):
    """What the sandbox does not need to run a script: docstrings, ``if
    TYPE_CHECKING:`` blocks, annotations (so nothing of ``typing`` is ever
    evaluated), ``__future__`` imports and the import of the runtime (shipped
    in front)."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        if getattr(node, "body", None) == []:
            node.body = [ast.Pass()]  # type: ignore[attr-defined]
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        is_docstring = isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        return None if is_docstring else node

    def visit_If(self, node: ast.If) -> ast.AST | None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return None
        return self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return None if node.module in ("__future__", RUNTIME_MODULE) else node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        return self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        return ast.copy_location(
            ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno), node
        )


def _without_unused_definitions(tree: ast.Module) -> ast.Module:
    """``tree`` without the top-level functions and classes that nothing it
    runs can reach: each script ships only the part of the runtime it uses,
    and the sandbox compiles less on every round trip."""
    definitions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    reachable: set[str] = set()
    pending = [node for node in tree.body if not isinstance(node, ast.FunctionDef | ast.ClassDef)]
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, ast.Name) and node.id in definitions and node.id not in reachable:
                reachable.add(node.id)
                pending.append(definitions[node.id])
    tree.body = [
        node
        for node in tree.body
        if not isinstance(node, ast.FunctionDef | ast.ClassDef) or node.name in reachable
    ]
    return tree


#: Printed, with the nonce, by :data:`MISSING`.
NO_SCRIPT_MARKER = f"{FRAME_MARKER}_NO_SCRIPT"

#: Run by :data:`BOOTSTRAP` in place of :data:`INSTALL` in a command that left
#: the script out (``_session.Session``) when there is no usable installed copy:
#: it says so, before the script has started, so the command may be sent again
#: in full. Its argument: the nonce.
MISSING = f'print("{NO_SCRIPT_MARKER}",sys.argv[5])'

#: Runs a command's packed script with nothing installed read or written:
#: the command of a sandbox that reuses no state (``reuse_sandbox_state``).
#: Arguments: the packed source, the module's name.
SHIPPED_ONLY = """\
import sys,binascii,zlib
exec(compile(zlib.decompress(binascii.a2b_base64(sys.argv[1])),"sandbox_sdk/remote/"+sys.argv[2]+".py","exec"),dict(__name__="__main__"))
"""
