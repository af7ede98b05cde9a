"""`Resolver`: the files of one run, each read and parsed once and recorded (its git
blob id, and the state of every path an import looked for), and the imports resolved
through them: what a name in a module is bound to.

Its records (`inputs`) are what `sources.py` stores so that `check` can trust a
fingerprint without recomputing it: every result of a run was computed from the files
and paths this object read.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from ...core.errors import TemplateError
from ...core.git.read import blob_id
from ...core.template import TemplateDecl, read_template
from .canon import path_state
from .model import DIR, EXTERNAL_PACKAGES, FILE
from .modules import External, ImportRef, MissingRef, ModRef, Module, Seen, Target


class Resolver:
    """Files and modules of one run under `root`. Not meant to outlive a run (files
    may change)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._prefix = os.path.join(str(self.root), "")  # "/repo/": string tests are cheap
        self.root_posix = self.root.as_posix()
        self._data: dict[Path, str] = {}  # sha256 of each data file read
        self._trees: dict[Path, ast.Module] = {}
        self._modules: dict[Path, Module] = {}
        self._found: dict[tuple[str, tuple[Path, ...]], Module | None] = {}
        self._decls: dict[Path, TemplateDecl] = {}
        # Everything the results were computed from (`inputs`): the git blob id of
        # every file read, and the state of every path an import looked for.
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

    def abs(self, path: Path) -> Path:
        # Paths under the (resolved) root are used as they are: resolve() costs a
        # syscall per path component, and check handles thousands of files.
        return path if str(path).startswith(self._prefix) else path.resolve()

    def tree(self, path: Path) -> ast.Module:
        """The parsed file; TemplateError naming file:line on a syntax error."""
        path = self.abs(path)
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
        path = self.abs(path)
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
        file = self.abs(file)
        return self._load(file, file.parent, file.name == "__init__.py")

    def find(self, parts: list[str], bases: tuple[Path, ...]) -> Module | None:
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

    def resolve_import(self, imp: ImportRef, at: Module, bases: tuple[Path, ...], seen: Seen = frozenset()) -> Target:
        """What `imp`, written in module `at`, binds its name to."""
        if imp.level:
            # Relative: from the importing module's package, up level-1 folders.
            folder = at.folder
            for _ in range(imp.level - 1):
                folder = folder.parent
            parts = imp.module.split(".") if imp.module else []
            mod = self.find(parts, (folder,)) if parts else self._package_at(folder)
            dotted = "." * imp.level + imp.module
        else:
            mod = self.find(imp.module.split("."), bases)
            dotted = imp.module
        if mod is None:
            return External(f"{dotted}.{imp.attr}" if imp.attr else dotted)
        if imp.attr is None:
            return ModRef(mod)
        return self.resolve_attr(mod, imp.attr, bases, seen)

    def executed_modules(self, stmt: ast.Import | ast.ImportFrom, at: Module, bases: tuple[Path, ...]) -> list[Module]:
        """The in-repo modules that running import `stmt` (written in `at`) executes.

        Every package on the way (`import a.b.c` runs a, a.b and a.b.c) and, for
        `from pkg import name`, the submodule `name` when there is one.
        """
        out: list[Module] = []
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                out += self.module_chain(None, a.name.split("."), bases)
            return out
        parts = stmt.module.split(".") if stmt.module else []
        if stmt.level:
            folder = at.folder
            for _ in range(stmt.level - 1):
                folder = folder.parent
            pkg = self._package_at(folder)
            if pkg is None:
                return out  # above the repository root
            out = [pkg, *self.module_chain(pkg, parts, bases)]
        else:
            out = self.module_chain(None, parts, bases)
        last = out[-1] if out and len(out) == len(parts) + bool(stmt.level) else None
        if last is not None and last.is_package:
            for a in stmt.names:
                if a.name != "*":
                    sub = self.find([a.name], (last.folder,))
                    if sub is not None:
                        out.append(sub)
        return out

    def module_chain(self, start: Module | None, parts: list[str], bases: tuple[Path, ...]) -> list[Module]:
        """`start.parts[0]`, `start.parts[0].parts[1]`, ... while they are in-repo modules."""
        out: list[Module] = []
        cur = start
        for part in parts:
            if cur is not None and not cur.is_package:
                break
            found = self.find([part], bases if cur is None else (cur.folder,))
            if found is None:
                break
            out.append(found)
            cur = found
        return out

    def forget(self, path: Path) -> Module | None:
        """Drop a file's tree, declarations and module (`SourceCache.forget`); the
        module dropped, if it was loaded, so that what was computed from it can go too."""
        path = self.abs(path)
        self._trees.pop(path, None)
        self._decls.pop(path, None)
        mod = self._modules.pop(path, None)
        if mod is not None:
            for key in [k for k, v in self._found.items() if v is mod]:
                del self._found[key]
        return mod

    def resolve_attr(self, mod: Module, name: str, bases: tuple[Path, ...], seen: Seen = frozenset()) -> Target:
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
            sub = self.find([name], (mod.folder,))
            if sub is not None:
                return ModRef(sub)
        for star in mod.star_imports:
            t = self.resolve_import(ImportRef(star.module, None, star.level), mod, bases, seen)
            if isinstance(t, ModRef):
                found = self.resolve_attr(t.module, name, bases, seen)
                if not isinstance(found, MissingRef):
                    return found
        return MissingRef(mod, name)

    def resolve_chain(
        self, mod: Module, chain: tuple[str, ...], local: Mapping[str, ImportRef], bases: tuple[Path, ...]
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

    # ------------------------------------------------------------------ data files

    def data_digest(self, path: Path, rel: str, where: str, line: int) -> str:
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
