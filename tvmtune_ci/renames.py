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
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from . import sources
from .config import Config, TargetConfig
from .errors import CorruptFileError, PublishError, StaleLogError, TvmtuneError
from .fingerprint import Fingerprint, SourceCache, digest_of, split_key, workloads_hash
from .fsutil import sha256_bytes
from .layout import LogSet
from .manifest import MANIFEST_NAME, Manifest, encode, read_manifest
from .targets import canonical_target, slug
from .template import discover_templates

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
    return sorted(d.name for d in logs.iterdir()
                  if d.is_dir() and not d.name.startswith(".") and d.name not in known
                  and not config.kept(d.name))


def _manifest_of(logset: LogSet) -> Manifest | None:
    try:
        return Manifest.from_json(json.loads(logset.manifest.read_bytes()), logset.manifest,
                                  lazy_results=True)
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


def find_renames(config: Config, missing: list[tuple[str, TargetConfig, Fingerprint, str]],
                 rel: Callable[[Path], str]) -> list[Rename]:
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


def renamed_history(config: Config, operator: str, target: TargetConfig, template_rel: str,
                    say: Callable[[str], None]) -> tuple[Manifest, Path] | None:
    """The log a re-tune of `operator` (which has none) replays after a rename with an
    edit: among the orphaned folders of the same target whose template file is gone,
    a readable, unedited one tuned for this target with this template API, closest
    to the template (`similarity` at least MIN_SIMILARITY). None when there is none."""
    from .staleness import installed_tvm_version, major_minor
    from .templateapi import TEMPLATE_API

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
            same = (canonical_target(m.target) == target.target and m.template_api == TEMPLATE_API
                    and (tvm is None or major_minor(str(m.tvm_version)) == tvm)
                    and sha256_bytes((logset.folder / m.log).read_bytes()) == m.log_sha256)
        except (OSError, AttributeError, TypeError):
            same = False
        score = similarity(m, fp, template_rel) if same else 0.0
        if score >= MIN_SIMILARITY and (best is None or score > best[0]):
            best = (score, m, logset.manifest)
    if best is None:
        return None
    say(f"history: {template_rel} was renamed from {best[1].template_file} and edited; "
        f"replaying its log {best[1].log} ({best[2].parent.relative_to(config.root)})")
    return best[1], best[2]


# --------------------------------------------------------------------------- adopt


@dataclass(frozen=True)
class Adopted:
    """One log folder adopted: where it was, where it is, what was rewritten."""

    old_folder: Path
    new_folder: Path
    readme: bool  # README.md regenerated
    curve: bool  # curve.png regenerated (needs matplotlib)


def adopt(config: Config, old: str, new: str, target: TargetConfig) -> Adopted:
    """Move `old`'s log folder of `target` to `new`'s, for the renamed template, without
    re-tuning: the manifest's operator, log name, template file, fingerprint (the same
    meaning, keys under the new file) and sources are rewritten, results.json with the
    new operator, README.md and curve.png regenerated; the log, runs.jsonl and .bak files
    move unchanged. StaleLogError when the folder does not fit the template (re-tune
    it instead: the re-tune replays it), PublishError when the new folder exists."""
    from . import lock
    from .git.read import last_commit
    from .publish import recover
    from .readme import render_curve, render_readme
    from .runs import read_runs

    src, dst = LogSet.of(config.logs_path, old, target.name), LogSet.of(config.logs_path, new, target.name)
    template_rel = (config.operators_path / f"{new}.py").relative_to(config.root).as_posix()
    where = f"{src.folder.relative_to(config.root)}/"
    if dst.folder.exists():
        raise PublishError(f"{dst.folder.relative_to(config.root)}/ exists already; tvmtune-ci does "
                           f"not overwrite a log folder: remove it to adopt {where}, or keep it and "
                           f"delete {where}")
    with lock.hold(src.lock, f"{old}/{target.name}"), lock.hold(dst.lock, f"{new}/{target.name}"):
        recover(src.folder)  # a killed publish must not be mistaken for the set
        try:
            m = read_manifest(src.manifest)
        except (OSError, CorruptFileError) as e:
            raise StaleLogError(f"{where}: its manifest cannot be read ({e}); re-tune "
                                f"`tvmtune-ci retune {new} --target {target.name}` instead") from None
        cache = SourceCache(config.root, inputs=config.declared_inputs(), config_file=config.path)
        decl, fp = cache.template(config.root / template_rel), cache.fingerprint(config.root / template_rel)
        if not fits(m, fp, template_rel):
            raise StaleLogError(
                f"{where} was tuned for {m.template_file} as it was then, not for {template_rel} as "
                f"it is now (the template or its workloads changed since): re-tune it with "
                f"`tvmtune-ci retune {new} --target {target.name}`, which replays this log first")
        log = dst.log_name(m.tuned_on) if m.log == src.log_name(m.tuned_on) else m.log
        moved = replace(
            m, operator=new, log=log, template_file=template_rel, fingerprint=fp.digest,
            dependencies=dict(fp.dependencies),
            template_commit=last_commit(config.root, template_rel),
            sources=sources.record(cache, decl, fp, target.target).to_json(),
        )
        sealed, files = encode(moved)
        history = read_runs(src.folder, m.files)
        files["README.md"] = render_readme(sealed, history).encode()
        try:
            curve = render_curve(sealed)
        except ImportError:  # matplotlib: the light install; the old plot stays
            curve = None
        if curve is not None:
            files["curve.png"] = curve
        staging = dst.folder.with_name(f".{dst.folder.name}.tvmtune-adopt")
        shutil.rmtree(staging, ignore_errors=True)  # a killed adopt's
        shutil.copytree(src.folder, staging, symlinks=True)
        if log != m.log:
            (staging / m.log).rename(staging / log)
        # manifest.json last: the set's commit point.
        for name in sorted(files, key=lambda n: n == MANIFEST_NAME):
            (staging / name).write_bytes(files[name])
        staging.rename(dst.folder)
        shutil.rmtree(src.folder)
    # The old operator has no template: nothing else takes its folder's lock.
    src.lock.unlink(missing_ok=True)
    parent = src.folder.parent
    if parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
    return Adopted(src.folder, dst.folder, True, curve is not None)
