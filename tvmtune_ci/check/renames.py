"""A renamed template keeps its logs: `git mv operators/dense.py operators/dense_op.py`.

Log folders are named after the operator, so after a rename `check` finds no log of
`dense_op` and an orphaned `tuning_logs/dense/`. A fingerprint names each dependency
by its file (`operators/dense.py:schedule`), so the renamed template's fingerprint
differs only by those keys. When an orphaned folder's manifest, its template's keys
moved to the new file (`relocated`), gives the new template's very fingerprint and
workloads, the log is still true for it: `check` says "renamed from dense" with the
command (`tvmtune-ci adopt dense dense_op`), and `adopt` moves the folder, rewriting
the manifest's operator, log name and template file and re-recording its sources,
without re-tuning (`adopt`).

A rename with an edit fits no folder: the entry is `missing` as before, and its
re-tune replays the old folder's log (`renamed_history`, used by
`pipeline.history_source`) when that log is the closest fit (`similarity`) among the
orphaned folders of the same target whose template is gone.

TVM-free: `check` uses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.configschema import Config, TargetConfig
from ..core.errors import TvmtuneError
from ..core.fsutil import sha256_bytes
from ..core.layout import LogSet
from ..core.manifest import Manifest
from ..core.targets import canonical_target, slug
from ..core.template import discover_templates
from ..core.templateapi import TEMPLATE_API
from .fingerprint import Fingerprint, SourceCache, digest_of, split_key, workloads_hash
from .tvmversion import installed_tvm_version, major_minor

# A rename with an edit: the old log is replayed when at least this share of its
# dependencies, moved to the new file, hash the same.
MIN_SIMILARITY = 0.5


def relocated(deps: Mapping[str, str], old_file: str, new_file: str) -> dict[str, str]:
    """`deps` with the keys of `old_file` (the template's own) moved to `new_file`."""
    out = {}
    for key, digest in deps.items():
        file, qualname = split_key(key)
        out[f"{new_file}:{qualname}" if file == old_file else key] = digest
    return out


def fits(manifest: Manifest, fp: Fingerprint, template_rel: str) -> bool:
    """Whether `manifest`'s log was tuned for this very template under another name:
    its fingerprint, the template's file moved to `template_rel`, and its workloads
    are the template's."""
    if not isinstance(manifest.workloads, dict) or not isinstance(manifest.dependencies, dict):
        return False
    if workloads_hash(manifest.workloads) != fp.workloads_hash:
        return False
    moved = relocated(manifest.dependencies, manifest.template_file, template_rel)
    return digest_of(moved, fp.workloads_hash) == fp.digest


def similarity(manifest: Manifest, fp: Fingerprint, template_rel: str) -> float:
    """The share of the manifest's dependencies (moved to `template_rel`) that the
    template still has with the same hash."""
    moved = relocated(manifest.dependencies, manifest.template_file, template_rel)
    if not moved:
        return 0.0
    return sum(fp.dependencies.get(k) == v for k, v in moved.items()) / len(moved)


def orphan_operators(config: Config) -> list[str]:
    """Log folders of operators that have no template (sorted), `keep:` ones left out."""
    logs = config.logs_path
    if not logs.is_dir():
        return []
    known = {slug(p.stem) for p in discover_templates(config.operators_path)}
    return sorted(
        d.name
        for d in logs.iterdir()
        if d.is_dir() and not d.name.startswith(".") and d.name not in known and not config.kept(d.name)
    )


def _manifest_of(logset: LogSet) -> Manifest | None:
    try:
        return Manifest.from_json(json.loads(logset.manifest.read_bytes()), logset.manifest, lazy_results=True)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, TvmtuneError):
        return None


@dataclass(frozen=True)
class Rename:
    """An orphaned log folder that fits a template with no log: `old` renamed to `new`."""

    old: str
    new: str
    target_name: str
    folder: str  # repo-relative old log folder

    @property
    def command(self) -> str:
        return f"tvmtune-ci adopt {self.old} {self.new}"


def find_renames(
    config: Config, missing: list[tuple[str, TargetConfig, Fingerprint, str]], rel: Callable[[Path], str]
) -> list[Rename]:
    """Which (operator, target) entries without a log are renames: `missing` holds
    (operator, target, its template's fingerprint, template file) of each."""
    if not missing:
        return []
    olds = orphan_operators(config)
    out = []
    for op, target, fp, template_rel in missing:
        for old in olds:
            logset = LogSet.of(config.logs_path, old, target.name)
            m = _manifest_of(logset) if logset.manifest.is_file() else None
            if m is not None and fits(m, fp, template_rel):
                out.append(Rename(old, op, target.name, rel(logset.folder)))
                break
    return out


def renamed_history(
    config: Config, operator: str, target: TargetConfig, template_rel: str, say: Callable[[str], None]
) -> tuple[Manifest, Path] | None:
    """The log a re-tune of `operator` (which has none) replays after a rename with an
    edit: among the orphaned folders of the same target whose template file is gone,
    a readable, unedited one tuned for this target with this template API, closest
    to the template (`similarity` at least MIN_SIMILARITY). None when there is none."""
    olds = orphan_operators(config)
    if not olds:
        return None
    cache = SourceCache(config.root, inputs=config.declared_inputs(), config_file=config.path)
    try:
        fp = cache.fingerprint(config.root / template_rel)
    except TvmtuneError:
        return None
    tvm = major_minor(installed_tvm_version() or "")
    best: tuple[float, Manifest, Path] | None = None
    for old in olds:
        logset = LogSet.of(config.logs_path, old, target.name)
        m = _manifest_of(logset) if logset.manifest.is_file() else None
        if m is None or (config.root / m.template_file).exists():
            continue
        try:
            same = (
                canonical_target(m.target) == target.target
                and m.template_api == TEMPLATE_API
                and (tvm is None or major_minor(str(m.tvm_version)) == tvm)
                and sha256_bytes((logset.folder / m.log).read_bytes()) == m.log_sha256
            )
        except (OSError, AttributeError, TypeError):
            same = False
        score = similarity(m, fp, template_rel) if same else 0.0
        if score >= MIN_SIMILARITY and (best is None or score > best[0]):
            best = (score, m, logset.manifest)
    if best is None:
        return None
    say(
        f"history: {template_rel} was renamed from {best[1].template_file} and edited; "
        f"replaying its log {best[1].log} ({best[2].parent.relative_to(config.root)})"
    )
    return best[1], best[2]
