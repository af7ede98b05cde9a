"""A template as `check` sees it: parsed and fingerprinted, or as its manifest recorded it
(sources.py) when git vouches that nothing it was computed from changed."""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.configschema import TargetConfig
from ...core.cpus import usable_cores
from ...core.errors import TemplateError
from ...core.template import TemplateDecl
from .. import sources
from ..datafiles import Note
from ..fingerprint import Fingerprint, SourceCache, workloads_json
from .model import TEMPLATE_INVALID, Reason


def _invalid_reason(error: TemplateError, cache: SourceCache, template_rel: str) -> Reason:
    """template_invalid naming the repo-relative file:line the TemplateError names."""
    if error.file is None:
        return Reason(TEMPLATE_INVALID, f"{template_rel}: {error}", template_rel, None)
    rel = cache.rel(Path(error.file))
    where = f"{rel}:{error.line}" if error.line else rel
    return Reason(TEMPLATE_INVALID, f"{where}: {error.message}", rel, error.line)


def _assign_line(tree: ast.Module, name: str) -> int | None:
    for stmt in tree.body:
        targets = (
            stmt.targets if isinstance(stmt, ast.Assign) else ([stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return stmt.lineno
    return None


def _normal(obj: Any) -> Any:
    # Workloads as JSON sees them: a tuple in the template equals the list on disk.
    return json.loads(workloads_json(obj))


def value_diff(old: Any, new: Any) -> str:
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return f"{old!r} -> {new!r}"
    parts = []
    for k in sorted(set(old) | set(new)):
        if k not in old:
            parts.append(f"{k} added ({new[k]!r})")
        elif k not in new:
            parts.append(f"{k} removed (was {old[k]!r})")
        elif old[k] != new[k]:
            parts.append(f"{k} {old[k]!r} -> {new[k]!r}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class CheckedTemplate:
    """What one template contributes to each of its entries (computed once)."""

    rel: str
    line: int
    decl: TemplateDecl | None
    fingerprint: Fingerprint | None
    invalid: Reason | None
    workloads_line: int | None
    space_sizes: dict[str, tuple[int, int]]
    workloads: Any = None  # WORKLOADS as JSON reads it back: a tuple equals the stored list
    # Repo-relative files its meaning depends on (for --changed-since).
    files: frozenset[str] = frozenset()
    # Reads check reports (environment variables, paths it cannot follow).
    notes: tuple[Note, ...] = ()


def read_checked_template(path: Path, cache: SourceCache) -> CheckedTemplate:
    rel = cache.rel(path)
    try:
        decl = cache.template(path)
        fp = cache.fingerprint(path)
        workloads_line = _assign_line(cache.tree(path), "WORKLOADS")
    except TemplateError as e:
        reason = _invalid_reason(e, cache, rel)
        line = reason.line if reason.file == rel and reason.line else 1
        return CheckedTemplate(rel, line, None, None, reason, None, {})
    finally:
        cache.forget(path)  # its tree is not needed again; keeps memory flat
    return CheckedTemplate(
        rel, decl.line, decl, fp, None, workloads_line, decl.space_sizes(), _normal(decl.workloads), fp.files, fp.notes
    )


# Parsing and fingerprinting costs ~1.2 ms per template (Zen 5). A pull request that
# edits a helper every template imports, or `check --rehash`, parses them all: from
# this many on, they are split over the runner's cores. Forked workers share what the
# cache parsed before (helpers are parsed once per worker); the results come back
# pickled. 1,000 templates: 1.23 s in one process, 0.76 s in two (Zen 5, 2 cores).
PARALLEL_MIN = 200


def parse_workers(n_templates: int) -> int:
    """How many processes parse `n_templates`: 1 below PARALLEL_MIN, where fork is not
    available, or on one core; else one per core this process may run on, at most 4."""
    if n_templates < PARALLEL_MIN:
        return 1
    import multiprocessing  # here: 7 ms of every check's start otherwise

    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(usable_cores(), 4, n_templates // (PARALLEL_MIN // 2)))


_WORKER_CACHE: SourceCache | None = None  # the parent's, inherited by a forked worker


def _read_chunk(paths: Sequence[Path]) -> list[CheckedTemplate]:
    assert _WORKER_CACHE is not None
    return [read_checked_template(p, _WORKER_CACHE) for p in paths]


def read_checked_templates(
    paths: Sequence[Path], cache: SourceCache, *, workers: int = 1
) -> dict[Path, CheckedTemplate]:
    """`read_checked_template` of each path, in `workers` forked processes (1: here).
    The same results either way: a template's errors are in its CheckedTemplate."""
    if workers <= 1 or len(paths) < 2:
        return {p: read_checked_template(p, cache) for p in paths}
    import multiprocessing

    global _WORKER_CACHE
    chunks = [list(paths[i::workers]) for i in range(workers)]  # interleaved: even sizes
    _WORKER_CACHE = cache
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            results = pool.map(_read_chunk, chunks)
    except OSError:  # no processes to fork (a limit): parse them here
        return {p: read_checked_template(p, cache) for p in paths}
    finally:
        _WORKER_CACHE = None
    got = {p: r for chunk, rs in zip(chunks, results, strict=True) for p, r in zip(chunk, rs, strict=True)}
    return {p: got[p] for p in paths}


def recorded_template(rel: str, src: sources.Sources) -> CheckedTemplate:
    """A template as its manifest recorded it (sources.unchanged said it still is):
    nothing to compare, its line and space sizes to show."""
    return CheckedTemplate(
        rel, src.template_line, None, None, None, None, src.space_sizes, files=frozenset(src.blobs), notes=src.notes
    )


def target_space(tpl: CheckedTemplate, target: TargetConfig) -> tuple[dict[str, tuple[int, int]], Reason | None]:
    """The template's space sizes on this target (KNOBS may name its facts: LANES...),
    or template_invalid when an extent does not evaluate for it."""
    if tpl.decl is None:
        return tpl.space_sizes, None
    try:
        return tpl.decl.space_sizes(target.target), None
    except TemplateError as e:
        line = e.line if e.file is not None else _assign_line_of(tpl.decl.path, "KNOBS")
        where = f"{tpl.rel}:{line}" if line else tpl.rel
        return {}, Reason(TEMPLATE_INVALID, f"{where}: KNOBS for target {target.name!r}: {e.message}", tpl.rel, line)


def _assign_line_of(path: Path, name: str) -> int | None:
    try:
        return _assign_line(ast.parse(path.read_text(encoding="utf-8")), name)
    except (OSError, SyntaxError, ValueError):
        return None
