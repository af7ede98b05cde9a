"""The module model: what a parsed file defines, imports and runs at import time
(definitions, imports, statements), as the resolver and the hasher read it."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .. import datafiles
from ..datafiles import Note
from .canon import IMPORT_NODES

# --------------------------------------------------------------------------- modules


@dataclass(frozen=True)
class Def:
    module: Module
    name: str
    node: ast.AST  # FunctionDef, ClassDef, Assign, ...
    line: int


@dataclass(frozen=True)
class ModRef:
    module: Module


@dataclass(frozen=True)
class External:
    name: str  # dotted: "numpy", "tvm.te", "tvmtune_ci.template.define_split"


@dataclass(frozen=True)
class MissingRef:
    module: Module
    name: str


@dataclass(frozen=True)
class ExecRef:
    """`module` is imported: its module-level statements run."""

    module: Module


@dataclass(frozen=True)
class DataRef:
    """The code reads a file (datafiles.Read): an input, hashed by content."""

    read: datafiles.Read


@dataclass(frozen=True)
class NotedRef:
    """A read check reports but cannot hash (datafiles.Note)."""

    note: Note


Target = Def | ModRef | External | MissingRef | ExecRef | DataRef | NotedRef
Seen = frozenset[tuple[int, str]]  # (id(module), name) already followed: import cycles


@dataclass(frozen=True)
class ImportRef:
    """What an import statement binds a name to, resolved lazily."""

    module: str  # absolute dotted name, or relative tail
    attr: str | None  # `from module import attr`; None for `import module`
    level: int = 0


class Module:
    """One parsed in-repo file (or a namespace package folder, `tree` None)."""

    def __init__(self, rel: str, folder: Path, tree: ast.Module | None, is_package: bool) -> None:
        self.rel = rel  # repo-relative posix path ("" for a namespace package)
        self.folder = folder  # where its submodules live (package) or its siblings (module)
        self.tree = tree
        self.is_package = is_package
        self.defs: dict[str, Def] = {}
        self.imports: dict[str, ImportRef] = {}
        self.star_imports: list[ImportRef] = []
        if tree is not None:
            self._index(tree.body)

    def _index(self, body: Iterable[ast.stmt]) -> None:
        # Later bindings win, as at run time. Conditional blocks (if/try/with) at
        # module level are looked into; function and class bodies are not.
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._bind_def(stmt.name, stmt)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    self._bind_target(t, stmt)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for name, imp in import_bindings(stmt):
                    if name == "*":
                        self.star_imports.append(imp)
                    else:
                        self.imports[name] = imp
                        self.defs.pop(name, None)
            elif isinstance(stmt, ast.If):
                self._index(stmt.body)
                self._index(stmt.orelse)
            elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
                self._index(stmt.body)  # type: ignore[attr-defined]
                for h in stmt.handlers:  # type: ignore[attr-defined]
                    self._index(h.body)
                self._index(stmt.orelse)  # type: ignore[attr-defined]
                self._index(stmt.finalbody)  # type: ignore[attr-defined]
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                self._index(stmt.body)

    def _bind_target(self, target: ast.expr, stmt: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            rebinds = isinstance(stmt, ast.Assign) or (isinstance(stmt, ast.AnnAssign) and stmt.value is not None)
            self._bind_def(target.id, stmt, extend=not rebinds)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                self._bind_target(e, stmt)
        elif isinstance(target, ast.Starred):
            self._bind_target(target.value, stmt)
        else:
            # `X[0] = ...`, `X.a = ...` change X: part of X's definition.
            base = target
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                self._bind_def(base.id, stmt, extend=True)

    def _bind_def(self, name: str, node: ast.stmt, extend: bool = False) -> None:
        prev = self.defs.get(name)
        if extend and prev is not None:
            # `X += [..]` extends the earlier definition: hash both statements.
            both = ast.Module(body=[prev.node, node], type_ignores=[])  # type: ignore[list-item]  # hashed, never compiled
            self.defs[name] = Def(self, name, both, prev.line)
        else:
            self.defs[name] = Def(self, name, node, node.lineno)
        self.imports.pop(name, None)


@dataclass(frozen=True)
class Stmt:
    """One module-level statement as it runs at import."""

    label: str  # "LANES", "np", "<expr>", "<if>#2", ...
    line: int
    node: ast.stmt
    digest: str
    targets: tuple[Target, ...]


@dataclass(frozen=True)
class ImportRun:
    """What importing one module runs: its statements, in order."""

    order: str  # hash of the labels in order
    stmts: tuple[Stmt, ...]


def _bound_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for e in target.elts:
            yield from _bound_names(e)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)
    else:
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name):
            yield target.id


def stmt_label(stmt: ast.stmt) -> str:
    """A name for a module-level statement that does not depend on where it is."""
    names: list[str] = []
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names = [stmt.name]
    elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
            names.extend(_bound_names(t))
    elif isinstance(stmt, IMPORT_NODES):
        names = [name for name, _ in import_bindings(stmt)]
    return ",".join(names) if names else f"<{type(stmt).__name__.lower()}>"


def first_line(stmt: ast.stmt) -> int:
    # A decorated definition starts at its first decorator.
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def import_bindings(stmt: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, ImportRef]]:
    if isinstance(stmt, ast.Import):
        for a in stmt.names:
            if a.asname:
                yield a.asname, ImportRef(a.name, None)
            else:
                # `import x.y` binds `x`; `x.y.f` is resolved attribute by attribute.
                top = a.name.split(".")[0]
                yield top, ImportRef(top, None)
    else:
        for a in stmt.names:
            yield (a.asname or a.name), ImportRef(stmt.module or "", a.name, stmt.level)
