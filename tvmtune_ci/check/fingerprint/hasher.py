"""`Hasher`: the fingerprint of a template, from what it reaches: its definitions, the
in-repo helpers they name, the import-time code of the modules that run, and the data
files they read (`Resolver` reads the files and resolves the names; the hashes of a
shared helper's definitions are computed once per run)."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import TemplateError
from .. import datafiles
from ..datafiles import Note
from .canon import Canon, is_docstring
from .model import (
    DATA_QUALNAME,
    DYNAMIC_NAMES,
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
    Stmt,
    Target,
    first_line,
    import_bindings,
    stmt_label,
)
from .resolver import Resolver


@dataclass
class _Walk:
    """What the walk from one template gathers: each dependency's digest and its place,
    the modules whose import ran, the data files read (and where first), the notes."""

    template: Module
    bases: tuple[Path, ...]
    queue: list[Target]
    deps: dict[str, str] = field(default_factory=dict)
    lines: dict[str, tuple[str, int]] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    ran: dict[str, tuple[Module, ImportRun]] = field(default_factory=dict)
    in_full: set[int] = field(default_factory=set)  # ids of statements hashed whole as a definition
    sites: dict[str, tuple[str, int]] = field(default_factory=dict)  # data file key -> first place it is read
    notes: set[Note] = field(default_factory=set)

    def add_import_time(self) -> None:
        """Each module that ran: its statements' order, and each statement not hashed
        whole as a definition."""
        for mod, run in self.ran.values():
            key = f"{mod.rel}:{MODULE_QUALNAME}"
            self.deps[key], self.lines[key] = run.order, (mod.rel, 1)
            for st in run.stmts:
                if id(st.node) not in self.in_full:
                    key = f"{mod.rel}:{MODULE_QUALNAME}.{st.label}"
                    self.deps[key], self.lines[key] = st.digest, (mod.rel, st.line)


class Hasher:
    """Fingerprints of the templates of one run, through `files`."""

    def __init__(
        self,
        files: Resolver,
        *,
        inputs: Mapping[str, Sequence[tuple[str, int]]] | None = None,
        config_file: Path | None = None,
    ) -> None:
        self.files = files
        # Declared inputs (`inputs:` in tvmtune.yaml): operator -> (glob, line there).
        self._declared = dict(inputs or {})
        self._config_file = config_file
        self._def_hashes: dict[tuple[str, str, tuple[Path, ...]], tuple[str, list[Target]]] = {}
        self._runs: dict[tuple[str, tuple[Path, ...], bool], ImportRun] = {}
        self._fingerprints: dict[Path, Fingerprint] = {}

    def fingerprint(self, path: Path) -> Fingerprint:
        path = self.files.abs(path)
        fp = self._fingerprints.get(path)
        if fp is None:
            fp = self._fingerprints[path] = self._fingerprint(path)
        return fp

    def forget(self, module: str) -> None:
        """Drop what was hashed from the module at repo-relative `module`."""
        for key in [k for k in self._def_hashes if k[0] == module]:
            del self._def_hashes[key]
        for rkey in [k for k in self._runs if k[0] == module]:
            del self._runs[rkey]

    def _fingerprint(self, path: Path) -> Fingerprint:
        decl = self.files.template(path)
        template = self.files.module_at(path)
        # Absolute imports resolve from the repository root (retune puts it first
        # on sys.path) and from the template's own folder (script-style imports).
        walk = _Walk(template, (self.files.root, path.parent), self._roots(path, template))
        while walk.queue:
            self._visit(walk, walk.queue.pop())
        globs = self._declared_inputs(path, walk.deps, walk.lines, walk.sites)
        walk.add_import_time()
        wl_hash = workloads_hash(decl.workloads)
        return Fingerprint(
            digest_of(walk.deps, wl_hash),
            dict(sorted(walk.deps.items())),
            dict(sorted(walk.lines.items())),
            wl_hash,
            {k: f"{f}:{n}" for k, (f, n) in sorted(walk.sites.items())},
            globs,
            tuple(sorted(walk.notes)),
        )

    def _roots(self, path: Path, template: Module) -> list[Target]:
        """Where the walk starts: importing the template runs its module-level code,
        and ROOTS (compute, reference, schedule) must be defined there."""
        queue: list[Target] = [ExecRef(template)]
        for name in ROOTS:
            d = template.defs.get(name)
            if d is None:
                raise TemplateError(
                    f"{path}: {name} is not defined at module level; see `tvmtune_ci.template` for the API"
                )
            queue.append(d)
        return queue

    def _visit(self, walk: _Walk, t: Target) -> None:
        """One target of the walk: what it adds to the fingerprint, and what it reaches
        queued."""
        if isinstance(t, Def):
            key = f"{t.module.rel}:{t.name}"
            if key in walk.done:
                return
            walk.done.add(key)
            digest, refs = self._hash_def(t, walk.bases)
            walk.deps[key], walk.lines[key] = digest, (t.module.rel, t.line)
            walk.in_full.add(id(t.node))
            walk.queue.extend(refs)
            # Its module was imported to get at it.
            walk.queue.append(ExecRef(t.module))
        elif isinstance(t, ExecRef):
            mod = t.module
            if mod.tree is None or mod.rel in walk.ran:
                return
            run = self._import_time(mod, walk.bases, mod is walk.template)
            walk.ran[mod.rel] = (mod, run)
            for st in run.stmts:
                walk.queue.extend(st.targets)
        elif isinstance(t, ModRef):
            # A module used as a value (`getattr(mod, name)`) may reach any of
            # its definitions.
            walk.queue.append(ExecRef(t.module))
            walk.queue.extend(t.module.defs.values())
        elif isinstance(t, MissingRef) and t.module.tree is not None:
            key = f"{t.module.rel}:{t.name}"
            walk.deps[key], walk.lines[key] = MISSING_HASH, (t.module.rel, 1)
            walk.queue.append(ExecRef(t.module))
        elif isinstance(t, DataRef):
            where = (t.read.file, t.read.line)
            rel = self.files.rel(Path(t.read.path))
            key = f"{rel}:{DATA_QUALNAME}"
            if key not in walk.sites:
                walk.deps[key] = self.files.data_digest(Path(t.read.path), rel, *where)
                walk.lines[key] = (rel, 0)
                walk.sites[key] = where
            else:
                walk.sites[key] = min(walk.sites[key], where)
        elif isinstance(t, NotedRef):
            walk.notes.add(t.note)

    def _declared_inputs(
        self, path: Path, deps: dict[str, str], lines: dict[str, tuple[str, int]], sites: dict[str, tuple[str, int]]
    ) -> dict[str, tuple[str, ...]]:
        """The files the template's operator declares (`inputs:` globs) into `deps`, by
        content; the files each glob matched. A glob that matches nothing is an error
        at its line of tvmtune.yaml: a typo must not declare nothing."""
        globs: dict[str, tuple[str, ...]] = {}
        declared = self._declared.get(path.stem, ())
        if not declared:
            return globs
        config = self._config_file or self.files.root / "tvmtune.yaml"
        config_rel = self.files.rel(config)
        for pattern, line in declared:
            files = datafiles.expand(self.files.root, pattern)
            if not files:
                raise TemplateError(
                    f"operators.{path.stem}.inputs: {pattern!r} matches no file under "
                    f"{self.files.root}; fix the glob (relative to the repository root) or remove it",
                    file=config,
                    line=line,
                )
            globs[pattern] = tuple(files)
            for rel in files:
                key = f"{rel}:{DATA_QUALNAME}"
                if key not in deps:
                    deps[key] = self.files.data_digest(self.files.root / rel, rel, config_rel, line)
                    lines[key] = (rel, 0)
                sites.setdefault(key, (config_rel, line))
        return globs

    def _import_time(self, mod: Module, bases: tuple[Path, ...], is_template: bool) -> ImportRun:
        """The module-level statements of `mod`, hashed as they run at import."""
        key = (mod.rel, bases, is_template)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self._import_time_uncached(mod, bases, is_template)
        return run

    def _import_time_uncached(self, mod: Module, bases: tuple[Path, ...], is_template: bool) -> ImportRun:
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
            if is_template and _is_implements(stmt):
                # IMPLEMENTS says which model calls the kernel serves (coverage,
                # docs/models.md); it does not change the kernel, so like a comment it
                # is no part of the fingerprint. Code that reads it is hashed with it.
                continue
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

    def _hash_code(self, mod: Module, node: ast.AST, canon: Canon, bases: tuple[Path, ...]) -> tuple[str, list[Target]]:
        """The hash of code written in `mod` and the in-repo things it names or imports."""
        # Imports inside the code (`from tvm import te` in compute) bind too, and
        # running them runs the in-repo modules they import.
        local: dict[str, ImportRef] = {}
        targets: list[Target] = []
        for imp in canon.imports:
            local.update(import_bindings(imp))
            targets.extend(ExecRef(m) for m in self.files.executed_modules(imp, mod, bases))
        if canon.sites:
            scope = _CodeScope(self.files, mod, bases, local)
            reads, notes = datafiles.scan(canon.sites, node, scope, self.files.root_posix)
            targets.extend(DataRef(r) for r in reads)
            targets.extend(NotedRef(n) for n in notes)
        external: set[str] = set()
        for chain in canon.refs:
            if chain[0] in DYNAMIC_NAMES and self._unbound(mod, chain[0], local):
                targets.append(ModRef(mod))
            if chain[:2] in STRING_IMPORTS and self._unbound(mod, chain[0], local, STRING_IMPORTS[chain[:2]]):
                targets.extend(self._string_imports(node, mod, bases))
            t = self.files.resolve_chain(mod, chain, local, bases)
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

    def _unbound(self, mod: Module, name: str, local: Mapping[str, ImportRef], module: str | None = None) -> bool:
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

    def _string_imports(self, node: ast.AST, mod: Module, bases: tuple[Path, ...]) -> list[Target]:
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
                for m in self.files.module_chain(None, parts, bases):
                    out += [ExecRef(m), ModRef(m)]  # what it returns is used as a value
        return out


def _is_implements(stmt: ast.stmt) -> bool:
    """`IMPLEMENTS = <literal>` (read_template rejects any other value)."""
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == "IMPLEMENTS"
    )


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

    def __init__(self, cache: Resolver, mod: Module, bases: tuple[Path, ...], local: Mapping[str, ImportRef]) -> None:
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
