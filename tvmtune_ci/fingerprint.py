"""A semantic hash of an operator template and the in-repo code it uses.

What is hashed: the template's `compute`, `reference` and `schedule` functions and
its `KNOBS`, plus, transitively, every definition they name that lives under the
repository root: helper functions, classes and module-level constants of the same
file, and of in-repo modules reached through `from x.y import f`,
`import x.y as z` + `z.f` or relative imports. `WORKLOADS` is not part of the
code hash: workloads are compared as values (`workloads_hash`). TVM, numpy, the
standard library and `tvmtune_ci` itself are external: they are recorded only as
the name a definition binds (`np -> numpy`), never hashed.

Import-time code counts too: retune imports the template, and that runs every
module-level statement of the template and of every in-repo module it imports
(transitively, package `__init__`s included, and modules imported by the code
that is hashed). Each such statement is hashed under
"path.py:<module>.LABEL" (LABEL: the names it binds, or `<expr>`, `<if>`, ...;
`#2` for the second of a label), with the bodies of undecorated functions left
out: they run only when called, and a call is followed to the function. The
order of the statements is "path.py:<module>". A statement already hashed in
full as a definition (`def schedule`, `KNOBS = ...`) has no key of its own, and
the template's `WORKLOADS` literal is compared as values. Code that reaches its
module by a string (`globals()`, `eval`, `sys.modules[__name__]`) makes every
definition of the module count; `__import__("pkg.m")` and
`importlib.import_module("pkg.m")` with a constant name import pkg.m. Code read
from files or built from strings at run time cannot be followed: only the
statement that does it is hashed.

Data files are inputs too: a file the hashed code reads (`open`, `Path.read_text`,
`np.load`, ... with a path built from constants and `__file__`: datafiles.py) is
hashed by content under "path/of/file:<data>", and so is every file its operator
declares (`inputs:` globs in tvmtune.yaml; a glob matching nothing is an error). A
missing data file is an error at the line that reads it. Reads whose path is
computed at run time, and environment variables, are `notes` that `check` reports.

Each definition is hashed from its AST with docstrings dropped and without
positions, so comments, docstrings, blank lines, formatting and line numbers do
not count while any change of meaning does. The per-definition hashes are kept
(`dependencies`, keyed "path/in/repo.py:qualname") so a stale report can name the
function that changed, and where it is now (`lines`).

Nothing here imports or runs template code: files are read as text and parsed.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import datafiles
from .datafiles import Note
from .errors import TemplateError
from .git.read import blob_id
from .template import TemplateDecl, read_template

# Bump when the canonical form changes: every manifest then reads as stale.
ALGORITHM = "tvmtune-fingerprint/2"

# Roots of the walk inside the template module (WORKLOADS is compared as values).
ROOTS = ("compute", "reference", "schedule", "KNOBS")

# Top-level packages that are never hashed even when they sit under the root
# (this repository vendors tvmtune_ci next to its operators).
EXTERNAL_PACKAGES = frozenset({"tvmtune_ci"})

# The state of a path an import looks for (SourceCache.inputs).
FILE, DIR, ABSENT = "file", "dir", "absent"

MODULE_QUALNAME = "<module>"  # key of a module's import-time code ("path.py:<module>.LABEL")
DATA_QUALNAME = "<data>"  # key of a file the code reads, by content ("tiles.json:<data>")
MISSING_HASH = "missing"  # a name imported from an in-repo module that defines no such thing

# Builtins through which code reaches its module's definitions by a string
# (`globals()["f"]()`, `eval("f()")`, `sys.modules[__name__]`): every
# definition of the module then counts, as for a module used as a value.
DYNAMIC_NAMES = frozenset({"globals", "vars", "locals", "eval", "exec", "compile", "__name__"})
# Calls that import a module named by a string, and the module that has them
# (None: a builtin): `__import__("m")`, `importlib.import_module("m")`.
STRING_IMPORTS: dict[tuple[str, ...], str | None] = {
    ("__import__",): None,
    ("importlib", "import_module"): "importlib",
}


@dataclass(frozen=True)
class Fingerprint:
    """The semantic hash of one template; what Manifest.fingerprint/dependencies record."""

    digest: str
    dependencies: dict[str, str]  # "path/in/repo.py:qualname" -> sha256 of its canonical AST
    lines: dict[str, tuple[str, int]]  # same keys -> (repo-relative file, current line)
    workloads_hash: str
    # Data files ("path:<data>" keys, hashed by content) -> where they are read
    # ("operators/_gemm.py:12") or declared ("tvmtune.yaml:9").
    inputs: dict[str, str] = field(default_factory=dict)
    # Declared `inputs:` globs -> the files each matched.
    globs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Reads check reports but cannot hash: environment variables, computed paths.
    notes: tuple[Note, ...] = ()

    @property
    def files(self) -> frozenset[str]:
        """Repo-relative files the template's meaning depends on (itself included)."""
        return frozenset(f for f, _ in self.lines.values())


@dataclass(frozen=True)
class DependencyChange:
    key: str  # "path/in/repo.py:qualname"
    change: str  # "changed", "added" or "removed"
    file: str
    line: int | None  # current line; None when removed


def split_key(key: str) -> tuple[str, str]:
    """ "operators/_helpers.py:tile" -> ("operators/_helpers.py", "tile")."""
    file, _, qualname = key.rpartition(":")
    return file, qualname


def compare_dependencies(
    recorded: Mapping[str, str], current: Fingerprint
) -> list[DependencyChange]:
    """Which dependencies differ between a manifest and the current fingerprint."""
    out = []
    for key in sorted(set(recorded) | set(current.dependencies)):
        old, new = recorded.get(key), current.dependencies.get(key)
        if old == new:
            continue
        if new is None:
            out.append(DependencyChange(key, "removed", split_key(key)[0], None))
            continue
        file, line = current.lines[key]
        out.append(DependencyChange(key, "added" if old is None else "changed", file, line))
    return out


def workloads_json(workloads: Mapping[str, Any]) -> str:
    """Canonical JSON of a WORKLOADS dict (tuples and lists read alike)."""
    return json.dumps(workloads, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def workloads_hash(workloads: Mapping[str, Any]) -> str:
    """The hash of WORKLOADS the fingerprint's digest covers (Fingerprint.workloads_hash)."""
    return _sha(workloads_json(workloads))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- canonical AST


def path_state(path: Path | str) -> str:
    """FILE, DIR or ABSENT: what `import` finds at `path` (symlinks followed)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return ABSENT
    return FILE if stat.S_ISREG(mode) else DIR if stat.S_ISDIR(mode) else ABSENT


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


_BODY_OWNERS = frozenset({ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
_IMPORTS = (ast.Import, ast.ImportFrom)


def canonical_dump(node: ast.AST) -> str:
    """A position-free, docstring-free text form of `node`.

    Like `ast.dump(node, include_attributes=False)` on a tree without docstrings,
    but written out here because ast.dump's format changed in Python 3.13 (empty
    fields omitted): a hash recorded by a tuning runner must match on a PR runner
    with another Python. None and empty lists are omitted, so fields added by new
    Pythons with empty defaults (e.g. `type_params`) do not change the text.
    """
    return _Canon(node).text


class _Canon:
    """One pass over a definition: its canonical text, the names it reads, its imports.

    One pass, not three (dump, name visitor, import walk): `check` is dominated
    by this loop. Names are collected as attribute chains, `z.f.g` -> ("z", "f",
    "g"), so that `import mylib.tiling as z` + `z.f` resolves to the function f.
    """

    __slots__ = ("_out", "refs", "imports", "sites", "_strip")

    def __init__(self, node: ast.AST, *, import_time: bool = False) -> None:
        self._out: list[str] = []
        self.refs: dict[tuple[str, ...], None] = {}  # ordered set
        self.imports: list[ast.Import | ast.ImportFrom] = []
        # Calls and subscripts of the code that runs that may read a file or an
        # environment variable (datafiles.scan).
        self.sites: list[ast.AST] = []
        # import_time: only what runs when the module is imported; the bodies of
        # undecorated functions are left out until something else reaches them.
        self._strip = import_time
        self._node(node, False)

    @property
    def text(self) -> str:
        return "".join(self._out)

    def _node(self, node: ast.AST, in_chain: bool) -> None:
        # in_chain: `node` is the value of an Attribute whose chain is already recorded.
        cls = node.__class__
        if self._strip and (cls is ast.ClassDef or (cls in _FUNCS and node.decorator_list)):  # type: ignore[attr-defined]
            # A class body runs at import, and a decorator may call the function:
            # all of it counts, nested functions included.
            self._strip = False
            self._node(node, in_chain)
            self._strip = True
            return
        out = self._out
        if cls is ast.Name:
            if not in_chain and node.ctx.__class__ is ast.Load:  # type: ignore[attr-defined]
                self.refs[(node.id,)] = None  # type: ignore[attr-defined]
        elif cls is ast.Attribute:
            if not in_chain:
                parts = [node.attr]  # type: ignore[attr-defined]
                base = node.value  # type: ignore[attr-defined]
                while base.__class__ is ast.Attribute:
                    parts.append(base.attr)
                    base = base.value
                if base.__class__ is ast.Name:
                    parts.append(base.id)
                    self.refs[tuple(reversed(parts))] = None
        elif cls in _IMPORTS:
            self.imports.append(node)  # type: ignore[arg-type]
        elif cls is ast.Call:
            # Only calls that may read (open, np.load, P.read_text, os.getenv, ...):
            # most code has none, and then nothing more is looked at.
            f = node.func  # type: ignore[attr-defined]
            fcls = f.__class__
            name = f.id if fcls is ast.Name else f.attr if fcls is ast.Attribute else None
            if name in datafiles.CALL_NAMES and (
                name not in datafiles.MAPPING_METHODS or datafiles.on_mapping(f)
            ):
                self.sites.append(node)
        elif cls is ast.Subscript:
            v = node.value  # type: ignore[attr-defined]
            vcls = v.__class__
            name = v.id if vcls is ast.Name else v.attr if vcls is ast.Attribute else None
            if name in datafiles.MAPPING_NAMES:
                self.sites.append(node)
        out.append(cls.__name__ + "(")
        for name in cls._fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            vcls = value.__class__
            if vcls is list:
                if not value:
                    continue
                if name == "body" and self._strip and cls in _FUNCS:
                    value = _ELIDED  # runs only when called
                elif name == "body" and cls in _BODY_OWNERS and _is_docstring(value[0]):
                    # A docstring-only body means the same as `pass`.
                    value = value[1:] or [ast.Pass()]
                out.append(name + "=[")
                for item in value:
                    if isinstance(item, ast.AST):
                        self._node(item, False)
                        out.append(",")
                    else:
                        out.append(repr(item) + ",")
                out.append("],")
            elif vcls in _LEAVES:
                # Load, Store, Add, ...: no fields, so no call (they are a third of all nodes).
                out.append(f"{name}={vcls.__name__}(),")
            elif isinstance(value, ast.AST):
                out.append(name + "=")
                # The value of a recorded chain (`z` in `z.f`) is not a reference of its own.
                self._node(value, in_chain or (cls is ast.Attribute and vcls in _CHAIN))
                out.append(",")
            elif name != "type_comment":
                out.append(f"{name}={value!r},")
        out.append(")")


_LEAVES = frozenset(
    c
    for c in vars(ast).values()
    if isinstance(c, type) and issubclass(c, ast.AST) and not c._fields
)
_CHAIN = frozenset({ast.Name, ast.Attribute})
_FUNCS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})
_ELIDED: list[ast.stmt] = [ast.Pass()]


# --------------------------------------------------------------------------- modules


@dataclass(frozen=True)
class _Def:
    module: _Module
    name: str
    node: ast.AST  # FunctionDef, ClassDef, Assign, ...
    line: int


@dataclass(frozen=True)
class _ModRef:
    module: _Module


@dataclass(frozen=True)
class _External:
    name: str  # dotted: "numpy", "tvm.te", "tvmtune_ci.template.define_split"


@dataclass(frozen=True)
class _Missing:
    module: _Module
    name: str


@dataclass(frozen=True)
class _Exec:
    """`module` is imported: its module-level statements run."""

    module: _Module


@dataclass(frozen=True)
class _Data:
    """The code reads a file (datafiles.Read): an input, hashed by content."""

    read: datafiles.Read


@dataclass(frozen=True)
class _Noted:
    """A read check reports but cannot hash (datafiles.Note)."""

    note: Note


_Target = _Def | _ModRef | _External | _Missing | _Exec | _Data | _Noted
_Seen = frozenset[tuple[int, str]]  # (id(module), name) already followed: import cycles


@dataclass(frozen=True)
class _Import:
    """What an import statement binds a name to, resolved lazily."""

    module: str  # absolute dotted name, or relative tail
    attr: str | None  # `from module import attr`; None for `import module`
    level: int = 0


class _Module:
    """One parsed in-repo file (or a namespace package folder, `tree` None)."""

    def __init__(self, rel: str, folder: Path, tree: ast.Module | None, is_package: bool) -> None:
        self.rel = rel  # repo-relative posix path ("" for a namespace package)
        self.folder = folder  # where its submodules live (package) or its siblings (module)
        self.tree = tree
        self.is_package = is_package
        self.defs: dict[str, _Def] = {}
        self.imports: dict[str, _Import] = {}
        self.star_imports: list[_Import] = []
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
                for name, imp in _import_bindings(stmt):
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
            rebinds = isinstance(stmt, ast.Assign) or (
                isinstance(stmt, ast.AnnAssign) and stmt.value is not None
            )
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
            both = ast.Module(body=[prev.node, node], type_ignores=[])
            self.defs[name] = _Def(self, name, both, prev.line)
        else:
            self.defs[name] = _Def(self, name, node, node.lineno)
        self.imports.pop(name, None)


@dataclass(frozen=True)
class _Stmt:
    """One module-level statement as it runs at import."""

    label: str  # "LANES", "np", "<expr>", "<if>#2", ...
    line: int
    node: ast.stmt
    digest: str
    targets: tuple[_Target, ...]


@dataclass(frozen=True)
class _Run:
    """What importing one module runs: its statements, in order."""

    order: str  # hash of the labels in order
    stmts: tuple[_Stmt, ...]


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


def _label(stmt: ast.stmt) -> str:
    """A name for a module-level statement that does not depend on where it is."""
    names: list[str] = []
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names = [stmt.name]
    elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
            names.extend(_bound_names(t))
    elif isinstance(stmt, _IMPORTS):
        names = [name for name, _ in _import_bindings(stmt)]
    return ",".join(names) if names else f"<{type(stmt).__name__.lower()}>"


def _first_line(stmt: ast.stmt) -> int:
    # A decorated definition starts at its first decorator.
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _import_bindings(stmt: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, _Import]]:
    if isinstance(stmt, ast.Import):
        for a in stmt.names:
            if a.asname:
                yield a.asname, _Import(a.name, None)
            else:
                # `import x.y` binds `x`; `x.y.f` is resolved attribute by attribute.
                top = a.name.split(".")[0]
                yield top, _Import(top, None)
    else:
        for a in stmt.names:
            yield (a.asname or a.name), _Import(stmt.module or "", a.name, stmt.level)


class SourceCache:
    """Parsed files for one run: each file is read and parsed once.

    `check` fingerprints every template; helper modules shared by many templates
    are parsed and hashed once. Not meant to outlive a run (files may change).
    """

    def __init__(
        self,
        root: Path,
        *,
        inputs: Mapping[str, Sequence[tuple[str, int]]] | None = None,
        config_file: Path | None = None,
    ) -> None:
        self.root = root.resolve()
        self._prefix = os.path.join(str(self.root), "")  # "/repo/": string tests are cheap
        self._root_posix = self.root.as_posix()
        # Declared inputs (`inputs:` in tvmtune.yaml): operator -> (glob, line there).
        self._declared = dict(inputs or {})
        self._config_file = config_file
        self._data: dict[Path, str] = {}  # sha256 of each data file read
        self._trees: dict[Path, ast.Module] = {}
        self._modules: dict[Path, _Module] = {}
        self._found: dict[tuple[str, tuple[Path, ...]], _Module | None] = {}
        self._def_hashes: dict[tuple[str, str, tuple[Path, ...]], tuple[str, list[_Target]]] = {}
        self._runs: dict[tuple[str, tuple[Path, ...], bool], _Run] = {}
        self._decls: dict[Path, TemplateDecl] = {}
        self._fingerprints: dict[Path, Fingerprint] = {}
        # Everything the results above were computed from (`inputs`): the git blob id
        # of every file read, and the state of every path an import looked for.
        self._blobs: dict[Path, str] = {}
        self._probes: dict[Path, str] = {}

    # ------------------------------------------------------------------ files

    def rel(self, path: Path) -> str:
        """`path` relative to the root, posix; as given when outside it."""
        s = str(path)
        if s.startswith(self._prefix):
            return s[len(self._prefix) :].replace(os.sep, "/")
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def _abs(self, path: Path) -> Path:
        # Paths under the (resolved) root are used as they are: resolve() costs a
        # syscall per path component, and check handles thousands of files.
        return path if str(path).startswith(self._prefix) else path.resolve()

    def tree(self, path: Path) -> ast.Module:
        """The parsed file; TemplateError naming file:line on a syntax error."""
        path = self._abs(path)
        tree = self._trees.get(path)
        if tree is None:
            try:
                source = path.read_bytes()
            except OSError as e:
                raise TemplateError(f"cannot read: {e.strerror}", file=path) from None
            try:
                tree = ast.parse(source, filename=str(path))
            except (SyntaxError, ValueError) as e:
                line = getattr(e, "lineno", None) or 1
                msg = getattr(e, "msg", None) or str(e)
                raise TemplateError(f"syntax error: {msg}", file=path, line=line) from None
            self._trees[path] = tree
            self._blobs[path] = blob_id(source)
        return tree

    def template(self, path: Path) -> TemplateDecl:
        """read_template on the cached tree (WORKLOADS, KNOBS, functions)."""
        path = self._abs(path)
        decl = self._decls.get(path)
        if decl is None:
            decl = self._decls[path] = read_template(path, self.tree(path))
        return decl

    # ------------------------------------------------------------------ modules

    def _load(self, file: Path | None, folder: Path, is_package: bool) -> _Module:
        key = file or folder
        mod = self._modules.get(key)
        if mod is None:
            tree = self.tree(file) if file is not None else None
            rel = self.rel(file) if file is not None else ""
            mod = self._modules[key] = _Module(rel, folder, tree, is_package)
        return mod

    def module_at(self, file: Path) -> _Module:
        file = self._abs(file)
        return self._load(file, file.parent, file.name == "__init__.py")

    def _find(self, parts: list[str], bases: tuple[Path, ...]) -> _Module | None:
        """The in-repo module for dotted `parts` under one of `bases`; None: external."""
        if not parts or parts[0] in EXTERNAL_PACKAGES:
            return None
        key = (".".join(parts), bases)
        if key in self._found:
            return self._found[key]
        found = None
        for base in bases:
            p = base.joinpath(*parts)
            if not str(p).startswith(self._prefix):
                continue  # outside the repository: external, never hashed
            if self._probe(p.with_name(p.name + ".py")) == FILE:
                found = self._load(p.with_name(p.name + ".py"), p.parent, False)
            elif self._probe(p / "__init__.py") == FILE:
                found = self._load(p / "__init__.py", p, True)
            elif self._probe(p) == DIR:
                found = self._load(None, p, True)  # namespace package
            if found is not None:
                break
        self._found[key] = found
        return found

    def _package_at(self, folder: Path) -> _Module | None:
        if not (str(folder) + os.sep).startswith(self._prefix):
            return None
        init = folder / "__init__.py"
        return self._load(init if self._probe(init) == FILE else None, folder, True)

    def _probe(self, path: Path) -> str:
        """FILE, DIR or ABSENT, as an import sees `path` (symlinks followed); recorded."""
        state = path_state(path)
        self._probes[path] = state
        return state

    def inputs(self) -> tuple[dict[str, str], dict[str, str]]:
        """What this cache's results were computed from, repo-relative: the git blob
        id of every file it parsed, and the state of every path an import probed.

        The same files with the same blob ids and the same probe states give the same
        declarations and fingerprints (`sources.py` lets `check` skip recomputing
        them). Complete only for a cache that has not `forget`-ed anything.
        """
        blobs = {self.rel(p): b for p, b in self._blobs.items()}
        probes = {self.rel(p): s for p, s in self._probes.items()}
        return dict(sorted(blobs.items())), dict(sorted(probes.items()))

    def resolve_import(
        self, imp: _Import, at: _Module, bases: tuple[Path, ...], seen: _Seen = frozenset()
    ) -> _Target:
        """What `imp`, written in module `at`, binds its name to."""
        if imp.level:
            # Relative: from the importing module's package, up level-1 folders.
            folder = at.folder
            for _ in range(imp.level - 1):
                folder = folder.parent
            parts = imp.module.split(".") if imp.module else []
            mod = self._find(parts, (folder,)) if parts else self._package_at(folder)
            dotted = "." * imp.level + imp.module
        else:
            mod = self._find(imp.module.split("."), bases)
            dotted = imp.module
        if mod is None:
            return _External(f"{dotted}.{imp.attr}" if imp.attr else dotted)
        if imp.attr is None:
            return _ModRef(mod)
        return self.resolve_attr(mod, imp.attr, bases, seen)

    def executed_modules(
        self, stmt: ast.Import | ast.ImportFrom, at: _Module, bases: tuple[Path, ...]
    ) -> list[_Module]:
        """The in-repo modules that running import `stmt` (written in `at`) executes.

        Every package on the way (`import a.b.c` runs a, a.b and a.b.c) and, for
        `from pkg import name`, the submodule `name` when there is one.
        """
        out: list[_Module] = []
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                out += self._module_chain(None, a.name.split("."), bases)
            return out
        parts = stmt.module.split(".") if stmt.module else []
        if stmt.level:
            folder = at.folder
            for _ in range(stmt.level - 1):
                folder = folder.parent
            pkg = self._package_at(folder)
            if pkg is None:
                return out  # above the repository root
            out = [pkg, *self._module_chain(pkg, parts, bases)]
        else:
            out = self._module_chain(None, parts, bases)
        last = out[-1] if out and len(out) == len(parts) + bool(stmt.level) else None
        if last is not None and last.is_package:
            for a in stmt.names:
                if a.name != "*":
                    sub = self._find([a.name], (last.folder,))
                    if sub is not None:
                        out.append(sub)
        return out

    def _module_chain(
        self, start: _Module | None, parts: list[str], bases: tuple[Path, ...]
    ) -> list[_Module]:
        """`start.parts[0]`, `start.parts[0].parts[1]`, ... while they are in-repo modules."""
        out: list[_Module] = []
        cur = start
        for part in parts:
            if cur is not None and not cur.is_package:
                break
            found = self._find([part], bases if cur is None else (cur.folder,))
            if found is None:
                break
            out.append(found)
            cur = found
        return out

    def resolve_attr(
        self, mod: _Module, name: str, bases: tuple[Path, ...], seen: _Seen = frozenset()
    ) -> _Target:
        """`mod.name`: a definition, a re-export followed to its source, or a submodule."""
        if (id(mod), name) in seen:
            return _Missing(mod, name)  # an import cycle that defines nothing
        seen = seen | {(id(mod), name)}
        d = mod.defs.get(name)
        if d is not None:
            return d
        imp = mod.imports.get(name)
        if imp is not None:
            return self.resolve_import(imp, mod, bases, seen)
        if mod.is_package:
            sub = self._find([name], (mod.folder,))
            if sub is not None:
                return _ModRef(sub)
        for star in mod.star_imports:
            t = self.resolve_import(_Import(star.module, None, star.level), mod, bases, seen)
            if isinstance(t, _ModRef):
                found = self.resolve_attr(t.module, name, bases, seen)
                if not isinstance(found, _Missing):
                    return found
        return _Missing(mod, name)

    # ------------------------------------------------------------------ hashing

    def fingerprint(self, path: Path) -> Fingerprint:
        path = self._abs(path)
        fp = self._fingerprints.get(path)
        if fp is None:
            fp = self._fingerprints[path] = self._fingerprint(path)
        return fp

    def forget(self, path: Path) -> None:
        """Drop a template's parsed tree once its entries are checked (keeps its results).

        A run over thousands of templates must not hold every AST: the memory,
        and the cyclic GC walking it on every allocation burst, would make check
        quadratic. Shared helper modules stay cached.
        """
        path = self._abs(path)
        self._trees.pop(path, None)
        self._decls.pop(path, None)
        mod = self._modules.pop(path, None)
        if mod is not None:
            for key in [k for k in self._def_hashes if k[0] == mod.rel]:
                del self._def_hashes[key]
            for rkey in [k for k in self._runs if k[0] == mod.rel]:
                del self._runs[rkey]
            for key in [k for k, v in self._found.items() if v is mod]:
                del self._found[key]
            # _Def.module points back at the module: break the cycle so the tree
            # is freed now, by reference counting, not at the next full GC.
            mod.defs.clear()
            mod.imports.clear()

    def _fingerprint(self, path: Path) -> Fingerprint:
        decl = self.template(path)
        template = self.module_at(path)
        # Absolute imports resolve from the repository root (retune puts it first
        # on sys.path) and from the template's own folder (script-style imports).
        bases = (self.root, path.parent)
        deps: dict[str, str] = {}
        lines: dict[str, tuple[str, int]] = {}
        # Importing the template runs its module-level code: the walk starts there.
        queue: list[_Target] = [_Exec(template)]
        for name in ROOTS:
            d = template.defs.get(name)
            if d is None:
                raise TemplateError(
                    f"{path}: {name} is not defined at module level; "
                    "see `tvmtune_ci.template` for the API"
                )
            queue.append(d)
        done: set[str] = set()
        ran: dict[str, tuple[_Module, _Run]] = {}
        in_full: set[int] = set()  # ids of statements hashed whole as a definition
        sites: dict[str, tuple[str, int]] = {}  # data file key -> first place it is read
        notes: set[Note] = set()
        while queue:
            t = queue.pop()
            if isinstance(t, _Def):
                key = f"{t.module.rel}:{t.name}"
                if key in done:
                    continue
                done.add(key)
                digest, refs = self._hash_def(t, bases)
                deps[key], lines[key] = digest, (t.module.rel, t.line)
                in_full.add(id(t.node))
                queue.extend(refs)
                # Its module was imported to get at it.
                queue.append(_Exec(t.module))
            elif isinstance(t, _Exec):
                mod = t.module
                if mod.tree is None or mod.rel in ran:
                    continue
                run = self._import_time(mod, bases, mod is template)
                ran[mod.rel] = (mod, run)
                for st in run.stmts:
                    queue.extend(st.targets)
            elif isinstance(t, _ModRef):
                # A module used as a value (`getattr(mod, name)`) may reach any of
                # its definitions.
                queue.append(_Exec(t.module))
                queue.extend(t.module.defs.values())
            elif isinstance(t, _Missing) and t.module.tree is not None:
                key = f"{t.module.rel}:{t.name}"
                deps[key], lines[key] = MISSING_HASH, (t.module.rel, 1)
                queue.append(_Exec(t.module))
            elif isinstance(t, _Data):
                where = (t.read.file, t.read.line)
                rel = self.rel(Path(t.read.path))
                key = f"{rel}:{DATA_QUALNAME}"
                if key not in sites:
                    deps[key] = self._data_digest(Path(t.read.path), rel, *where)
                    lines[key] = (rel, 0)
                    sites[key] = where
                else:
                    sites[key] = min(sites[key], where)
            elif isinstance(t, _Noted):
                notes.add(t.note)
        globs = self._declared_inputs(path, deps, lines, sites)
        for mod, run in ran.values():
            key = f"{mod.rel}:{MODULE_QUALNAME}"
            deps[key], lines[key] = run.order, (mod.rel, 1)
            for st in run.stmts:
                if id(st.node) not in in_full:
                    key = f"{mod.rel}:{MODULE_QUALNAME}.{st.label}"
                    deps[key], lines[key] = st.digest, (mod.rel, st.line)
        wl_hash = workloads_hash(decl.workloads)
        return Fingerprint(
            digest_of(deps, wl_hash), dict(sorted(deps.items())), dict(sorted(lines.items())),
            wl_hash, {k: f"{f}:{n}" for k, (f, n) in sorted(sites.items())}, globs,
            tuple(sorted(notes)),
        )

    def _declared_inputs(
        self, path: Path, deps: dict[str, str], lines: dict[str, tuple[str, int]],
        sites: dict[str, tuple[str, int]],
    ) -> dict[str, tuple[str, ...]]:
        """The files the template's operator declares (`inputs:` globs) into `deps`, by
        content; the files each glob matched. A glob that matches nothing is an error
        at its line of tvmtune.yaml: a typo must not declare nothing."""
        globs: dict[str, tuple[str, ...]] = {}
        declared = self._declared.get(path.stem, ())
        if not declared:
            return globs
        config = self._config_file or self.root / "tvmtune.yaml"
        config_rel = self.rel(config)
        for pattern, line in declared:
            files = datafiles.expand(self.root, pattern)
            if not files:
                raise TemplateError(
                    f"operators.{path.stem}.inputs: {pattern!r} matches no file under "
                    f"{self.root}; fix the glob (relative to the repository root) or remove it",
                    file=config, line=line,
                )
            globs[pattern] = tuple(files)
            for rel in files:
                key = f"{rel}:{DATA_QUALNAME}"
                if key not in deps:
                    deps[key] = self._data_digest(self.root / rel, rel, config_rel, line)
                    lines[key] = (rel, 0)
                sites.setdefault(key, (config_rel, line))
        return globs

    def _data_digest(self, path: Path, rel: str, where: str, line: int) -> str:
        """The sha256 of a data file the code at `where:line` reads (its git blob id is
        recorded with the parsed files: `inputs`); TemplateError there when it cannot
        be read: a missing input must not pass as unchanged."""
        digest = self._data.get(path)
        if digest is not None:
            return digest
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            why = "which does not exist; restore it, or fix the path"
        except IsADirectoryError:
            why = "which is a folder, not a file; read a file, or declare the files (inputs:)"
        except OSError as e:
            why = f"which cannot be read ({e.strerror})"
        else:
            self._blobs[path] = blob_id(data)
            digest = self._data[path] = hashlib.sha256(data).hexdigest()
            return digest
        raise TemplateError(f"reads {rel}, {why}", file=self.root / where, line=line)

    def _import_time(self, mod: _Module, bases: tuple[Path, ...], is_template: bool) -> _Run:
        """The module-level statements of `mod`, hashed as they run at import."""
        key = (mod.rel, bases, is_template)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self._import_time_uncached(mod, bases, is_template)
        return run

    def _import_time_uncached(
        self, mod: _Module, bases: tuple[Path, ...], is_template: bool
    ) -> _Run:
        assert mod.tree is not None
        workloads = mod.defs.get("WORKLOADS") if is_template else None
        # The roots are hashed whole as definitions anyway (KNOBS can be long).
        roots = {id(mod.defs[n].node) for n in ROOTS if n in mod.defs} if is_template else set()
        counts: dict[str, int] = {}
        labels: list[str] = []
        stmts: list[_Stmt] = []
        for stmt in mod.tree.body:
            if _is_docstring(stmt):
                continue  # a bare string does nothing
            label = _label(stmt)
            n = counts[label] = counts.get(label, 0) + 1
            if n > 1:
                label = f"{label}#{n}"
            labels.append(label)
            if workloads is not None and stmt is workloads.node:
                continue  # a literal, compared as values (read_template rejects others)
            if id(stmt) in roots:
                continue
            canon = _Canon(stmt, import_time=True)
            digest, targets = self._hash_code(mod, stmt, canon, bases)
            stmts.append(_Stmt(label, _first_line(stmt), stmt, digest, tuple(targets)))
        return _Run(_sha("\n".join(labels)), tuple(stmts))

    def _hash_def(self, d: _Def, bases: tuple[Path, ...]) -> tuple[str, list[_Target]]:
        """The hash of one definition and the in-repo definitions it names."""
        key = (d.module.rel, d.name, bases)
        cached = self._def_hashes.get(key)
        if cached is None:
            cached = self._def_hashes[key] = self._hash_def_uncached(d, bases)
        return cached

    def _hash_def_uncached(self, d: _Def, bases: tuple[Path, ...]) -> tuple[str, list[_Target]]:
        return self._hash_code(d.module, d.node, _Canon(d.node), bases)

    def _hash_code(
        self, mod: _Module, node: ast.AST, canon: _Canon, bases: tuple[Path, ...]
    ) -> tuple[str, list[_Target]]:
        """The hash of code written in `mod` and the in-repo things it names or imports."""
        # Imports inside the code (`from tvm import te` in compute) bind too, and
        # running them runs the in-repo modules they import.
        local: dict[str, _Import] = {}
        targets: list[_Target] = []
        for imp in canon.imports:
            local.update(_import_bindings(imp))
            targets.extend(_Exec(m) for m in self.executed_modules(imp, mod, bases))
        if canon.sites:
            scope = _CodeScope(self, mod, bases, local)
            reads, notes = datafiles.scan(canon.sites, node, scope, self._root_posix)
            targets.extend(_Data(r) for r in reads)
            targets.extend(_Noted(n) for n in notes)
        external: set[str] = set()
        for chain in canon.refs:
            if chain[0] in DYNAMIC_NAMES and self._unbound(mod, chain[0], local):
                targets.append(_ModRef(mod))
            if chain[:2] in STRING_IMPORTS and self._unbound(
                mod, chain[0], local, STRING_IMPORTS[chain[:2]]
            ):
                targets.extend(self._string_imports(node, mod, bases))
            t = self._resolve_chain(mod, chain, local, bases)
            if t is None:
                continue
            if isinstance(t, _External):
                external.add(f"{chain[0]}={t.name}")
            else:
                targets.append(t)
        # Which external thing a name is bound to is part of the meaning
        # (`import numpy as np` vs `import cupy as np`), its code is not.
        extra = "".join(f"\n{e}" for e in sorted(external))
        return _sha(canon.text + extra), targets

    def _unbound(
        self, mod: _Module, name: str, local: Mapping[str, _Import], module: str | None = None
    ) -> bool:
        """`name` is the builtin (or, with `module`, that external module), not a local binding."""
        if name in local:
            imp = local[name]
        elif name in mod.defs:
            return False
        else:
            imp = mod.imports.get(name)  # type: ignore[assignment]
        if imp is None:
            return module is None
        return module is not None and imp.attr is None and imp.module == module and not imp.level

    def _string_imports(
        self, node: ast.AST, mod: _Module, bases: tuple[Path, ...]
    ) -> list[_Target]:
        """In-repo modules imported by name: `__import__("pkg.m")`, `import_module("pkg.m")`."""
        out: list[_Target] = []
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and call.args):
                continue
            func = call.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in ("__import__", "import_module"):
                continue
            arg = call.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                parts = arg.value.split(".")
                for m in self._module_chain(None, parts, bases):
                    out += [_Exec(m), _ModRef(m)]  # what it returns is used as a value
        return out

    def _resolve_chain(
        self,
        mod: _Module,
        chain: tuple[str, ...],
        local: Mapping[str, _Import],
        bases: tuple[Path, ...],
    ) -> _Target | None:
        """What `a.b.c` read inside a definition of `mod` is; None: not bound there."""
        if chain[0] in local:
            t = self.resolve_import(local[chain[0]], mod, bases)
        else:
            t = self.resolve_attr(mod, chain[0], bases)
            if isinstance(t, _Missing) and t.module is mod:
                return None  # a builtin, a parameter or a local variable
        for attr in chain[1:]:
            if not isinstance(t, _ModRef):
                break
            t = self.resolve_attr(t.module, attr, bases)
        return t


def _constant_value(node: ast.AST) -> ast.expr | None:
    """The value of `NAME = value` (one plain target); None for anything else."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.value
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return node.value
    return None


class _CodeScope:
    """A module as `datafiles.scan` sees it (`datafiles.Scope`): its file, and what a
    name in it is bound to, through the same resolution the hash follows."""

    __slots__ = ("_cache", "_mod", "_bases", "_local")

    def __init__(
        self, cache: SourceCache, mod: _Module, bases: tuple[Path, ...], local: Mapping[str, _Import]
    ) -> None:
        self._cache, self._mod, self._bases, self._local = cache, mod, bases, local

    @property
    def file(self) -> str:
        return f"{self._cache.root.as_posix()}/{self._mod.rel}"

    @property
    def rel(self) -> str:
        return self._mod.rel

    def resolve(self, chain: tuple[str, ...]) -> Any:
        cache, mod, bases = self._cache, self._mod, self._bases
        if chain[0] in self._local:
            t = cache.resolve_import(self._local[chain[0]], mod, bases)
        else:
            t = cache.resolve_attr(mod, chain[0], bases)
            if isinstance(t, _Missing) and t.module is mod:
                return None  # a builtin
        used = 1
        for attr in chain[1:]:
            if not isinstance(t, _ModRef):
                break
            t = cache.resolve_attr(t.module, attr, bases)
            used += 1
        if isinstance(t, _External):
            return ".".join((t.name, *chain[used:]))
        if isinstance(t, _Def) and used == len(chain):
            value = _constant_value(t.node)
            if value is not None:
                return value, _CodeScope(cache, t.module, bases, {})
        return datafiles.IN_REPO


def digest_of(deps: Mapping[str, str], wl_hash: str) -> str:
    """The fingerprint's digest of its dependency hashes and its WORKLOADS hash."""
    body = "".join(f"{k}\t{deps[k]}\n" for k in sorted(deps))
    return _sha(f"{ALGORITHM}\n{body}workloads\t{wl_hash}\n")


# --------------------------------------------------------------------------- API


def fingerprint_template(
    path: Path, root: Path, *, cache: SourceCache | None = None
) -> Fingerprint:
    """The fingerprint of the template at `path`, in-repo code resolved under `root`.

    Raises TemplateError (with file:line) when the template or an in-repo module
    it uses cannot be parsed, or the template lacks WORKLOADS/KNOBS/functions.
    Pass one `cache` to fingerprint many templates: shared modules parse once.
    """
    cache = cache if cache is not None else SourceCache(root)
    return cache.fingerprint(path)
