"""`SourceCache`: what one run (a `check`, a re-tune) knows of the repository's code,
as two objects with a job each: `Resolver` (resolver.py) reads and parses each file
once, records what it read and resolves imports; `Hasher` (hasher.py) hashes what a
template reaches. A helper shared by many templates is parsed and hashed once.
This facade keeps them together and forgets a checked template in both."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...core.template import TemplateDecl
from .hasher import Hasher
from .model import Fingerprint
from .resolver import Resolver


class SourceCache:
    """Parsed files and fingerprints for one run: each file is read and parsed once.

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
        self.files = Resolver(root)
        self.hasher = Hasher(self.files, inputs=inputs, config_file=config_file)
        self.root = self.files.root

    # Reading and recording: the Resolver's.

    def rel(self, path: Path) -> str:
        """`path` relative to the root, posix; as given when outside it."""
        return self.files.rel(path)

    def tree(self, path: Path) -> ast.Module:
        """The parsed file; TemplateError naming file:line on a syntax error."""
        return self.files.tree(path)

    def template(self, path: Path) -> TemplateDecl:
        """read_template on the cached tree (WORKLOADS, KNOBS, functions)."""
        return self.files.template(path)

    def inputs(self) -> tuple[dict[str, str], dict[str, str]]:
        """What this cache's results were computed from, repo-relative: the git blob
        id of every file it parsed, and the state of every path an import probed.

        The same files with the same blob ids and the same probe states give the same
        declarations and fingerprints (`sources.py` lets `check` skip recomputing
        them). Complete only for a cache that has not `forget`-ed anything.
        """
        return self.files.inputs()

    # Hashing: the Hasher's.

    def fingerprint(self, path: Path) -> Fingerprint:
        return self.hasher.fingerprint(path)

    def forget(self, path: Path) -> None:
        """Drop a template's parsed tree once its entries are checked (keeps its results).

        A run over thousands of templates must not hold every AST: the memory,
        and the cyclic GC walking it on every allocation burst, would make check
        quadratic. Shared helper modules stay cached.
        """
        mod = self.files.forget(path)
        if mod is not None:
            self.hasher.forget(mod.rel)
            # Def.module points back at the module: break the cycle so the tree
            # is freed now, by reference counting, not at the next full GC.
            mod.defs.clear()
            mod.imports.clear()
