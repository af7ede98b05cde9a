"""`SourceCache`: the files of one run, read and parsed once, the imports resolved
through them, and the hashes of what a template reaches (its definitions, its
in-repo helpers, their import-time code and the data files they read).

Over 400 lines: reading, resolving and hashing share the per-run caches of one
object (a shared helper is parsed and hashed once for every template of `check`);
splitting them into objects of their own is issue 23's open part."""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import datafiles
from ..datafiles import Note
from ..errors import TemplateError
from ..git.read import blob_id
from ..template import TemplateDecl, read_template
from .canon import Canon, is_docstring, path_state
from .model import (
    DATA_QUALNAME,
    DIR,
    DYNAMIC_NAMES,
    EXTERNAL_PACKAGES,
    FILE,
    MISSING_HASH,
    MODULE_QUALNAME,
    ROOTS,
    STRING_IMPORTS,
    Fingerprint,
    digest_of,
    sha,
    workloads_hash,
)
from .modules import (
    DataRef,
    Def,
    ExecRef,
    External,
    ImportRef,
    ImportRun,
    MissingRef,
    ModRef,
    Module,
    NotedRef,
    Seen,
    Stmt,
    Target,
    first_line,
    import_bindings,
    stmt_label,
)


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
        self._modules: dict[Path, Module] = {}
        self._found: dict[tuple[str, tuple[Path, ...]], Module | None] = {}
        self._def_hashes: dict[tuple[str, str, tuple[Path, ...]], tuple[str, list[Target]]] = {}
        self._runs: dict[tuple[str, tuple[Path, ...], bool], ImportRun] = {}
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

    def _load(self, file: Path | None, folder: Path, is_package: bool) -> Module:
        key = file or folder
        mod = self._modules.get(key)
        if mod is None:
            tree = self.tree(file) if file is not None else None
            rel = self.rel(file) if file is not None else ""
            mod = self._modules[key] = Module(rel, folder, tree, is_package)
        return mod

    def module_at(self, file: Path) -> Module:
        file = self._abs(file)
        return self._load(file, file.parent, file.name == "__init__.py")

    def _find(self, parts: list[str], bases: tuple[Path, ...]) -> Module | None:
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

    def _package_at(self, folder: Path) -> Module | None:
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
        self, imp: ImportRef, at: Module, bases: tuple[Path, ...], seen: Seen = frozenset()
    ) -> Target:
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
            return External(f"{dotted}.{imp.attr}" if imp.attr else dotted)
        if imp.attr is None:
            return ModRef(mod)
        return self.resolve_attr(mod, imp.attr, bases, seen)

    def executed_modules(
        self, stmt: ast.Import | ast.ImportFrom, at: Module, bases: tuple[Path, ...]
    ) -> list[Module]:
        """The in-repo modules that running import `stmt` (written in `at`) executes.

        Every package on the way (`import a.b.c` runs a, a.b and a.b.c) and, for
        `from pkg import name`, the submodule `name` when there is one.
        """
        out: list[Module] = []
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
        self, start: Module | None, parts: list[str], bases: tuple[Path, ...]
    ) -> list[Module]:
        """`start.parts[0]`, `start.parts[0].parts[1]`, ... while they are in-repo modules."""
        out: list[Module] = []
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
        self, mod: Module, name: str, bases: tuple[Path, ...], seen: Seen = frozenset()
    ) -> Target:
        """`mod.name`: a definition, a re-export followed to its source, or a submodule."""
        if (id(mod), name) in seen:
            return MissingRef(mod, name)  # an import cycle that defines nothing
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
                return ModRef(sub)
        for star in mod.star_imports:
            t = self.resolve_import(ImportRef(star.module, None, star.level), mod, bases, seen)
            if isinstance(t, ModRef):
                found = self.resolve_attr(t.module, name, bases, seen)
                if not isinstance(found, MissingRef):
                    return found
        return MissingRef(mod, name)

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
            # Def.module points back at the module: break the cycle so the tree
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
        queue: list[Target] = [ExecRef(template)]
        for name in ROOTS:
            d = template.defs.get(name)
            if d is None:
                raise TemplateError(
                    f"{path}: {name} is not defined at module level; "
                    "see `tvmtune_ci.template` for the API"
                )
            queue.append(d)
        done: set[str] = set()
        ran: dict[str, tuple[Module, ImportRun]] = {}
        in_full: set[int] = set()  # ids of statements hashed whole as a definition
        sites: dict[str, tuple[str, int]] = {}  # data file key -> first place it is read
        notes: set[Note] = set()
        while queue:
            t = queue.pop()
            if isinstance(t, Def):
                key = f"{t.module.rel}:{t.name}"
                if key in done:
                    continue
                done.add(key)
                digest, refs = self._hash_def(t, bases)
                deps[key], lines[key] = digest, (t.module.rel, t.line)
                in_full.add(id(t.node))
                queue.extend(refs)
                # Its module was imported to get at it.
                queue.append(ExecRef(t.module))
            elif isinstance(t, ExecRef):
                mod = t.module
                if mod.tree is None or mod.rel in ran:
                    continue
                run = self._import_time(mod, bases, mod is template)
                ran[mod.rel] = (mod, run)
                for st in run.stmts:
                    queue.extend(st.targets)
            elif isinstance(t, ModRef):
                # A module used as a value (`getattr(mod, name)`) may reach any of
                # its definitions.
                queue.append(ExecRef(t.module))
                queue.extend(t.module.defs.values())
            elif isinstance(t, MissingRef) and t.module.tree is not None:
                key = f"{t.module.rel}:{t.name}"
                deps[key], lines[key] = MISSING_HASH, (t.module.rel, 1)
                queue.append(ExecRef(t.module))
            elif isinstance(t, DataRef):
                where = (t.read.file, t.read.line)
                rel = self.rel(Path(t.read.path))
                key = f"{rel}:{DATA_QUALNAME}"
                if key not in sites:
                    deps[key] = self._data_digest(Path(t.read.path), rel, *where)
                    lines[key] = (rel, 0)
                    sites[key] = where
                else:
                    sites[key] = min(sites[key], where)
            elif isinstance(t, NotedRef):
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

    def _import_time(self, mod: Module, bases: tuple[Path, ...], is_template: bool) -> ImportRun:
        """The module-level statements of `mod`, hashed as they run at import."""
        key = (mod.rel, bases, is_template)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self._import_time_uncached(mod, bases, is_template)
        return run

    def _import_time_uncached(
        self, mod: Module, bases: tuple[Path, ...], is_template: bool
    ) -> ImportRun:
        assert mod.tree is not None
        workloads = mod.defs.get("WORKLOADS") if is_template else None
        # The roots are hashed whole as definitions anyway (KNOBS can be long).
        roots = {id(mod.defs[n].node) for n in ROOTS if n in mod.defs} if is_template else set()
        counts: dict[str, int] = {}
        labels: list[str] = []
        stmts: list[Stmt] = []
        for stmt in mod.tree.body:
            if is_docstring(stmt):
                continue  # a bare string does nothing
            label = stmt_label(stmt)
            n = counts[label] = counts.get(label, 0) + 1
            if n > 1:
                label = f"{label}#{n}"
            labels.append(label)
            if workloads is not None and stmt is workloads.node:
                continue  # a literal, compared as values (read_template rejects others)
            if id(stmt) in roots:
                continue
            canon = Canon(stmt, import_time=True)
            digest, targets = self._hash_code(mod, stmt, canon, bases)
            stmts.append(Stmt(label, first_line(stmt), stmt, digest, tuple(targets)))
        return ImportRun(sha("\n".join(labels)), tuple(stmts))

    def _hash_def(self, d: Def, bases: tuple[Path, ...]) -> tuple[str, list[Target]]:
        """The hash of one definition and the in-repo definitions it names."""
        key = (d.module.rel, d.name, bases)
        cached = self._def_hashes.get(key)
        if cached is None:
            cached = self._def_hashes[key] = self._hash_def_uncached(d, bases)
        return cached

    def _hash_def_uncached(self, d: Def, bases: tuple[Path, ...]) -> tuple[str, list[Target]]:
        return self._hash_code(d.module, d.node, Canon(d.node), bases)

    def _hash_code(
        self, mod: Module, node: ast.AST, canon: Canon, bases: tuple[Path, ...]
    ) -> tuple[str, list[Target]]:
        """The hash of code written in `mod` and the in-repo things it names or imports."""
        # Imports inside the code (`from tvm import te` in compute) bind too, and
        # running them runs the in-repo modules they import.
        local: dict[str, ImportRef] = {}
        targets: list[Target] = []
        for imp in canon.imports:
            local.update(import_bindings(imp))
            targets.extend(ExecRef(m) for m in self.executed_modules(imp, mod, bases))
        if canon.sites:
            scope = _CodeScope(self, mod, bases, local)
            reads, notes = datafiles.scan(canon.sites, node, scope, self._root_posix)
            targets.extend(DataRef(r) for r in reads)
            targets.extend(NotedRef(n) for n in notes)
        external: set[str] = set()
        for chain in canon.refs:
            if chain[0] in DYNAMIC_NAMES and self._unbound(mod, chain[0], local):
                targets.append(ModRef(mod))
            if chain[:2] in STRING_IMPORTS and self._unbound(
                mod, chain[0], local, STRING_IMPORTS[chain[:2]]
            ):
                targets.extend(self._string_imports(node, mod, bases))
            t = self._resolve_chain(mod, chain, local, bases)
            if t is None:
                continue
            if isinstance(t, External):
                external.add(f"{chain[0]}={t.name}")
            else:
                targets.append(t)
        # Which external thing a name is bound to is part of the meaning
        # (`import numpy as np` vs `import cupy as np`), its code is not.
        extra = "".join(f"\n{e}" for e in sorted(external))
        return sha(canon.text + extra), targets

    def _unbound(
        self, mod: Module, name: str, local: Mapping[str, ImportRef], module: str | None = None
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
        self, node: ast.AST, mod: Module, bases: tuple[Path, ...]
    ) -> list[Target]:
        """In-repo modules imported by name: `__import__("pkg.m")`, `import_module("pkg.m")`."""
        out: list[Target] = []
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
                    out += [ExecRef(m), ModRef(m)]  # what it returns is used as a value
        return out

    def _resolve_chain(
        self,
        mod: Module,
        chain: tuple[str, ...],
        local: Mapping[str, ImportRef],
        bases: tuple[Path, ...],
    ) -> Target | None:
        """What `a.b.c` read inside a definition of `mod` is; None: not bound there."""
        if chain[0] in local:
            t = self.resolve_import(local[chain[0]], mod, bases)
        else:
            t = self.resolve_attr(mod, chain[0], bases)
            if isinstance(t, MissingRef) and t.module is mod:
                return None  # a builtin, a parameter or a local variable
        for attr in chain[1:]:
            if not isinstance(t, ModRef):
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
        self, cache: SourceCache, mod: Module, bases: tuple[Path, ...], local: Mapping[str, ImportRef]
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
            if isinstance(t, MissingRef) and t.module is mod:
                return None  # a builtin
        used = 1
        for attr in chain[1:]:
            if not isinstance(t, ModRef):
                break
            t = cache.resolve_attr(t.module, attr, bases)
            used += 1
        if isinstance(t, External):
            return ".".join((t.name, *chain[used:]))
        if isinstance(t, Def) and used == len(chain):
            value = _constant_value(t.node)
            if value is not None:
                return value, _CodeScope(cache, t.module, bases, {})
        return datafiles.IN_REPO
