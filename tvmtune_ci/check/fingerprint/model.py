"""What a fingerprint is: the digest, the per-definition hashes and where they are,
the WORKLOADS hash, the data files and notes; comparing two; the algorithm's version."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..datafiles import Note

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
STRING_IMPORTS: dict[tuple[str, ...], str | None] = {("__import__",): None, ("importlib", "import_module"): "importlib"}


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


def compare_dependencies(recorded: Mapping[str, str], current: Fingerprint) -> list[DependencyChange]:
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
    return sha(workloads_json(workloads))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest_of(deps: Mapping[str, str], wl_hash: str) -> str:
    """The fingerprint's digest of its dependency hashes and its WORKLOADS hash."""
    body = "".join(f"{k}\t{deps[k]}\n" for k in sorted(deps))
    return sha(f"{ALGORITHM}\n{body}workloads\t{wl_hash}\n")
