"""Files and environment variables that template code reads, found without running it.

A template, or a helper it runs, that reads a tile table, a shape list or per-CPU
limits from a file schedules differently when that file changes: the file is an
input of the template's fingerprint. `fingerprint.py` asks `scan` about every piece
of code it hashes (import-time statements, and every definition the hash follows);
each read found there is a `Read` (hashed by content, `path.json:<data>`) or a
`Note` (reported by `check` at its file:line, never hashed).

What is a read:

- a call of `open`, `io.open`, `codecs.open`, `gzip.open`, `bz2.open`, `lzma.open`,
  `tarfile.open`, `zipfile.ZipFile`, numpy's `load`, `loadtxt`, `genfromtxt`,
  `fromfile`, `memmap`, pandas' `read_*`, `PIL.Image.open` with a path;
  `json.load`, `yaml.safe_load`, `csv.reader`, `pickle.load` ... read what `open`
  opened, so that `open` is the read;
- `P.read_text()`, `P.read_bytes()`, `P.open()` on a path `P`.

The path is followed when it is built from string constants, `__file__`, module-level
constants (of the same module, or imported from an in-repo one) and local variables
assigned once, through `Path(...)`, `/`, `.parent`, `.parents[i]`, `.with_name`,
`.with_suffix`, `.with_stem`, `.joinpath`, `.resolve()`, `.absolute()`,
`os.path.join/dirname/abspath/realpath/normpath`, `str(...)`, `+` and f-strings. A
relative constant is taken relative to the repository root (the folder CI runs
`retune` in; nothing changes the working folder of template code). Anything else (a parameter, a loop variable, `Path.cwd()`, a glob, a path
outside the repository) is a read tvmtune-ci cannot follow: a `Note` that asks for
it to be declared (`inputs:` in tvmtune.yaml).

Environment variables read with `os.environ[...]`, `os.environ.get`, `os.getenv` are
`Note`s too: their values are the runner's and are never recorded.

Nothing here imports or runs template code.

Over 400 lines: what counts as a read and how a path expression evaluates are two
tables that change together; split, each half would need the other's names.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# Note kinds.
ENV = "env"
UNFOLLOWED = "unfollowed"

# Calls whose path argument is read; the names are what `Scope.resolve` returns
# ("builtins.open" for the builtin).
READ_FUNCTIONS = frozenset(
    {
        "builtins.open",
        "io.open",
        "codecs.open",
        "gzip.open",
        "bz2.open",
        "lzma.open",
        "tarfile.open",
        "zipfile.ZipFile",
        "PIL.Image.open",
        "numpy.load",
        "numpy.loadtxt",
        "numpy.genfromtxt",
        "numpy.fromfile",
        "numpy.memmap",
        "pandas.read_csv",
        "pandas.read_json",
        "pandas.read_parquet",
        "pandas.read_pickle",
        "pandas.read_table",
        "pandas.read_excel",
    }
)
# Keyword names those functions take their path under.
_PATH_KEYWORDS = ("file", "fname", "filename", "name", "path", "filepath_or_buffer", "path_or_buf", "io", "fp")
READ_METHODS = frozenset({"read_text", "read_bytes", "open"})
ENV_CALLS = frozenset({"os.getenv", "os.getenvb", "os.environ.get", "os.environb.get", "os.environ.setdefault"})
ENV_MAPPINGS = frozenset({"os.environ", "os.environb"})
_FUNCTIONS = READ_FUNCTIONS | ENV_CALLS
# Names a candidate call or subscript ends with: everything else is skipped before any
# name is resolved (a template makes hundreds of calls, nearly none of them reads).
CALL_NAMES = frozenset({n.rpartition(".")[2] for n in _FUNCTIONS} | READ_METHODS)
MAPPING_NAMES = frozenset(n.rpartition(".")[2] for n in ENV_MAPPINGS)
# Methods that read only as methods of os.environ (`sch.get(loop)` is TVM's).
MAPPING_METHODS = frozenset({"get", "setdefault"})

# Path constructors and functions of one path that keep it (what they return is the
# same file); the `os.path` ones are also reachable as `posixpath`.
_SAME_PATH = frozenset(
    {
        "pathlib.Path",
        "pathlib.PurePath",
        "pathlib.PosixPath",
        "pathlib.PurePosixPath",
        "os.fspath",
        "builtins.str",
        "os.path.abspath",
        "os.path.realpath",
        "os.path.normpath",
    }
)
_SAME_PATH_METHODS = frozenset({"resolve", "absolute"})
_MAX_DEPTH = 32  # a path built from itself (`P = P / "x"` in a loop) is not followed


def on_mapping(func: ast.AST) -> bool:
    """Whether the method `func` (`X.get`) is one of something named environ/environb."""
    v = getattr(func, "value", None)
    name = v.id if isinstance(v, ast.Name) else getattr(v, "attr", None)
    return name in MAPPING_NAMES


class _InRepo:
    """`Scope.resolve`: bound to in-repo code that is not a constant (a function, a class)."""


IN_REPO = _InRepo()


class Scope(Protocol):
    """The module a piece of code is written in, as `scan` needs it."""

    @property
    def file(self) -> str:
        """The module's absolute posix path: its `__file__`."""
        ...

    @property
    def rel(self) -> str:
        """The module's path relative to the repository, posix."""
        ...

    def resolve(self, chain: tuple[str, ...]) -> str | tuple[ast.expr, Scope] | _InRepo | None:
        """What `a.b.c` names in this module: an external's dotted name ("numpy.load",
        "os.path.join"), the value of an in-repo module-level constant with the scope
        it is written in, IN_REPO for other in-repo code, None when unbound (a builtin)."""
        ...


@dataclass(frozen=True)
class Read:
    """A file the code reads, resolved: its absolute posix path, and where it is read."""

    path: str
    file: str  # repo-relative module
    line: int


@dataclass(frozen=True, order=True)
class Note:
    """A read `check` reports but cannot hash: an environment variable (ENV) or a
    file whose path is computed at run time (UNFOLLOWED)."""

    file: str  # repo-relative module
    line: int
    kind: str
    what: str  # "TILE_MAX (os.getenv)", "p.read_text(): tvmtune-ci cannot tell which file it is"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "kind": self.kind, "what": self.what}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Note:
        return cls(str(d["file"]), int(d["line"]), str(d["kind"]), str(d["what"]))


def expand(root: Path, pattern: str) -> list[str]:
    """The files a declared `inputs:` glob matches under `root`, repo-relative posix, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())


def _chain(node: ast.AST) -> tuple[str, ...] | None:
    """`a.b.c` -> ("a", "b", "c"); None when the base is not a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return tuple(reversed(parts))


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_mode(text: str | None) -> bool:
    """Whether a constant reads as an `open` mode ("r", "rb", "w+")."""
    return bool(text) and set(text) <= set("rwxabt+U")  # type: ignore[arg-type]


def _writes(mode: ast.AST | None) -> bool:
    """Whether an `open` mode argument opens for writing only ('w', 'a', 'x' without '+')."""
    m = _const_str(mode)
    return m is not None and any(c in m for c in "wax") and "+" not in m


def _shown(node: ast.AST, limit: int = 60) -> str:
    """The code of a read as a message quotes it: `open(path)`, shortened."""
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parent(p: str) -> str:
    return posixpath.dirname(p.rstrip("/") or "/") or "."


# A local name bound other than by one plain assignment (a parameter, a loop or `with`
# target, a second assignment): its value is not followed.
_OPAQUE = object()
_FILE_OBJECT = object()  # bound by `with open(...) as f`: a file, not a path


class _Function:
    """The local bindings of one function, as far as paths are concerned."""

    def __init__(self, fn: ast.AST) -> None:
        self.names: dict[str, object] = {}
        args = getattr(fn, "args", None)
        if args is not None:
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if a is not None:
                    self.names[a.arg] = _OPAQUE
        for node in ast.walk(fn):
            if node is fn:
                continue
            if isinstance(node, ast.Assign):
                if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    self._bind(node.targets[0].id, node.value)
                else:
                    for t in node.targets:
                        self._opaque(t)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                self._bind(node.target.id, node.value if node.value is not None else _OPAQUE)
            elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension)):
                self._opaque(node.target)
            elif isinstance(node, ast.NamedExpr):
                self._opaque(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if isinstance(item.optional_vars, ast.Name):
                        self._bind(item.optional_vars.id, _FILE_OBJECT)
                    elif item.optional_vars is not None:
                        self._opaque(item.optional_vars)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.names[node.name] = _OPAQUE
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    self.names[(a.asname or a.name).split(".")[0]] = _OPAQUE

    def _bind(self, name: str, value: object) -> None:
        self.names[name] = value if name not in self.names else _OPAQUE

    def _opaque(self, target: ast.AST) -> None:
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                self.names[n.id] = _OPAQUE


class _Scanner:
    """One piece of code: its sites classified, paths evaluated on demand."""

    def __init__(self, code: ast.AST, scope: Scope, root: str) -> None:
        self.code = code
        self.scope = scope
        self.root = root
        self._parents: dict[int, ast.AST] | None = None
        self._functions: dict[int, _Function] = {}
        self.reads: list[Read] = []
        self.notes: list[Note] = []

    # -------------------------------------------------------------- where names live

    def _enclosing(self, node: ast.AST) -> list[ast.AST]:
        """The functions around `node` inside the scanned code, innermost first."""
        if self._parents is None:
            self._parents = {}
            for parent in ast.walk(self.code):
                for child in ast.iter_child_nodes(parent):
                    self._parents[id(child)] = parent
        out: list[ast.AST] = []
        cur = self._parents.get(id(node))
        while cur is not None:
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                out.append(cur)
            cur = self._parents.get(id(cur))
        if not out or out[-1] is not self.code:
            # Module-level code: what its own statement binds (`with open(p) as f:`,
            # a `for` target) shadows the module's names while it runs.
            out.append(self.code)
        return out

    def _function(self, fn: ast.AST) -> _Function:
        f = self._functions.get(id(fn))
        if f is None:
            f = self._functions[id(fn)] = _Function(fn)
        return f

    def _local(self, name: str, fns: Sequence[ast.AST]) -> tuple[object, tuple[ast.AST, ...]] | None:
        """The local binding of `name` seen from inside `fns` (innermost first), with the
        functions it is evaluated in; None: not local (a module name or a builtin)."""
        for i, fn in enumerate(fns):
            bound = self._function(fn).names.get(name)
            if bound is not None:
                return bound, tuple(fns[i:])
        return None

    def _qualify(self, chain: tuple[str, ...], fns: Sequence[ast.AST], scope: Scope) -> object:
        """What `chain` names: a dotted external name, "builtins.NAME", IN_REPO, a
        (value, scope, functions) to evaluate, or None (a local that is not followed).
        Compare it with the tables only as a str: the tuple is not a name."""
        local = self._local(chain[0], fns)
        if local is not None:
            bound, where = local
            if isinstance(bound, ast.expr) and len(chain) == 1:
                return (bound, scope, where)
            return _FILE_OBJECT if bound is _FILE_OBJECT else None
        r = scope.resolve(chain)
        if r is None:
            return "builtins." + ".".join(chain)
        if isinstance(r, tuple):
            return (r[0], r[1], ())
        return r

    # -------------------------------------------------------------- paths

    def path(self, node: ast.AST, fns: Sequence[ast.AST], scope: Scope, depth: int = 0) -> str | None:
        """The path `node` evaluates to (relative or absolute, posix); None: not followed."""
        if depth > _MAX_DEPTH:
            return None
        d = depth + 1
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name) and node.id == "__file__" and self._local("__file__", fns) is None:
            return scope.file
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            base = self.path(node.value, fns, scope, d)
            return _parent(base) if base is not None else None
        if isinstance(node, (ast.Name, ast.Attribute)):
            chain = _chain(node)
            q = self._qualify(chain, fns, scope) if chain is not None else None
            return self.path(q[0], q[2], q[1], d) if isinstance(q, tuple) else None
        if isinstance(node, ast.BinOp):
            left = self.path(node.left, fns, scope, d)
            right = self.path(node.right, fns, scope, d) if left is not None else None
            if left is None or right is None:
                return None
            if isinstance(node.op, ast.Div):
                return posixpath.join(left, right)
            if isinstance(node.op, ast.Add):
                return left + right
            return None
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.FormattedValue):
                    if v.format_spec is not None or v.conversion not in (-1, 115):  # none or !s
                        return None
                    v = v.value
                p = self.path(v, fns, scope, d)
                if p is None:
                    return None
                parts.append(p)
            return "".join(parts)
        if isinstance(node, ast.Subscript):
            # P.parents[i]
            v = node.value
            i = node.slice
            if (
                isinstance(v, ast.Attribute)
                and v.attr == "parents"
                and isinstance(i, ast.Constant)
                and isinstance(i.value, int)
                and i.value >= 0
            ):
                base = self.path(v.value, fns, scope, d)
                if base is None:
                    return None
                for _ in range(i.value + 1):
                    base = _parent(base)
                return base
            return None
        if isinstance(node, ast.Call):
            return self._call_path(node, fns, scope, d)
        return None

    def _call_path(self, call: ast.Call, fns: Sequence[ast.AST], scope: Scope, d: int) -> str | None:
        func = call.func
        if call.keywords:
            return None
        chain = _chain(func)
        q = self._qualify(chain, fns, scope) if chain is not None else None
        if isinstance(q, str):
            name = q.replace("posixpath.", "os.path.", 1) if q.startswith("posixpath.") else q
            args = [self.path(a, fns, scope, d) for a in call.args]
            if any(a is None for a in args):
                return None
            if name in _SAME_PATH:
                if not args:
                    return "." if name.startswith("pathlib.") else None
                if name.startswith("pathlib."):
                    return posixpath.join(*args)  # type: ignore[arg-type]
                return args[0] if len(args) == 1 else None
            if name == "os.path.join" and args:
                return posixpath.join(*args)  # type: ignore[arg-type]
            if name == "os.path.dirname" and len(args) == 1:
                return posixpath.dirname(args[0]) or ""  # type: ignore[type-var]
            if not name.startswith("builtins."):
                return None
        if not isinstance(func, ast.Attribute):
            return None
        # A method of a path: P.with_name("x"), P.joinpath("a", "b"), P.resolve().
        base = self.path(func.value, fns, scope, d)
        if base is None:
            return None
        args = [self.path(a, fns, scope, d) for a in call.args]
        if any(a is None for a in args):
            return None
        attr = func.attr
        if attr in _SAME_PATH_METHODS and not args:
            return base
        if attr == "joinpath":
            return posixpath.join(base, *args)  # type: ignore[arg-type]
        if attr == "with_name" and len(args) == 1:
            return posixpath.join(_parent(base), args[0])  # type: ignore[arg-type]
        if attr == "with_suffix" and len(args) == 1:
            return posixpath.splitext(base)[0] + args[0]  # type: ignore[operator]
        if attr == "with_stem" and len(args) == 1:
            return posixpath.join(_parent(base), args[0] + posixpath.splitext(base)[1])  # type: ignore[operator]
        return None

    # -------------------------------------------------------------- sites

    def _found(self, node: ast.AST, path: str | None, why: str) -> None:
        line = getattr(node, "lineno", 1)
        how = _shown(node)
        if path is None:
            self.notes.append(Note(self.scope.rel, line, UNFOLLOWED, f"{how}: {why}"))
            return
        full = posixpath.normpath(path if path.startswith("/") else posixpath.join(self.root, path))
        if full != self.root and not full.startswith(self.root + "/"):
            self.notes.append(Note(self.scope.rel, line, UNFOLLOWED, f"{how}: {full} is outside the repository"))
            return
        self.reads.append(Read(full, self.scope.rel, line))

    def site(self, node: ast.AST) -> None:
        if isinstance(node, ast.Subscript):
            self._subscript(node)
        elif isinstance(node, ast.Call):
            self._call(node)

    def _subscript(self, node: ast.Subscript) -> None:
        chain = _chain(node.value)
        if chain is None or chain[-1] not in MAPPING_NAMES:
            return
        if not isinstance(node.ctx, ast.Load):
            return
        fns = self._enclosing(node)
        q = self._qualify(chain, fns, self.scope)
        if isinstance(q, str) and q in ENV_MAPPINGS:
            name = _const_str(node.slice) or "a computed name"
            self.notes.append(Note(self.scope.rel, node.lineno, ENV, f"{name} ({q}[...])"))

    def _call(self, call: ast.Call) -> None:
        func = call.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name not in CALL_NAMES:
            return
        chain = _chain(func)
        if chain is not None and not (isinstance(func, ast.Attribute) and func.attr in READ_METHODS):
            # What the module binds the name to decides first (cheap): a local binding can
            # only make a reader not one (`load = table.load`), never the reverse.
            bound = self.scope.resolve(chain)
            if bound is None:
                bound = "builtins." + ".".join(chain)
            if not isinstance(bound, str) or bound not in _FUNCTIONS:
                return
        fns = self._enclosing(call)
        q = self._qualify(chain, fns, self.scope) if chain is not None else None
        if not isinstance(q, str):
            q = None
        if q in READ_FUNCTIONS:
            assert q is not None
            arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in _PATH_KEYWORDS), None)
            if arg is None:
                return
            mode = (
                call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
            )
            if q.endswith(".open") and _writes(mode):
                return  # a file it writes is not an input
            if isinstance(arg, ast.Name) and self._qualify((arg.id,), fns, self.scope) is _FILE_OBJECT:
                return  # reads what a `with open(...)` opened: that open is the read
            self._found(call, self.path(arg, fns, self.scope), "its path is computed at run time")
            return
        if q in ENV_CALLS:
            var = _const_str(call.args[0]) if call.args else None
            self.notes.append(Note(self.scope.rel, call.lineno, ENV, f"{var or 'a computed name'} ({q})"))
            return
        if not isinstance(func, ast.Attribute) or func.attr not in READ_METHODS:
            return
        if isinstance(q, str) and not q.startswith("builtins."):
            return  # a function of an external module (Image.open is handled above)
        receiver = chain[:-1] if chain is not None else None
        if receiver is not None:
            r = self._qualify(receiver, fns, self.scope)
            if isinstance(r, str) and not r.startswith("builtins.") or r is _FILE_OBJECT:
                return  # a method of an external module or class, or of an open file
        if func.attr == "open":
            first = call.args[0] if call.args else None
            if first is not None and not _is_mode(_const_str(first)):
                return  # `archive.open(member)`: not a path's open
            if _writes(first) or _writes(next((k.value for k in call.keywords if k.arg == "mode"), None)):
                return
        self._found(call, self.path(func.value, fns, self.scope), "tvmtune-ci cannot tell which file it is")


def scan(sites: Iterable[ast.AST], code: ast.AST, scope: Scope, root: str) -> tuple[list[Read], list[Note]]:
    """The files `code` (written in `scope`) reads and the reads `check` reports.

    `sites`: the calls and subscripts of the code that runs that may read (`fingerprint.canon.Canon`
    collects them, leaving out function bodies that run only when called); `root`:
    the repository's absolute posix path."""
    scanner = _Scanner(code, scope, root)
    for node in sites:
        scanner.site(node)
    return scanner.reads, scanner.notes
