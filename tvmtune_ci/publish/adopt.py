"""`adopt`: move a renamed template's log set to its new folder, without re-tuning.

`check` finds the orphaned folder that fits a renamed template (`check/renames.py`)
and names this command; here the folder is moved and its manifest, results, README
and curve rewritten for the new name, under both folders' locks.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from ..check import sources
from ..check.fingerprint import SourceCache
from ..check.renames import fits
from ..core import lock
from ..core.configschema import Config, TargetConfig
from ..core.errors import CorruptFileError, PublishError, StaleLogError
from ..core.git.read import last_commit
from ..core.layout import LogSet
from ..core.manifest import encode, read_manifest
from ..core.manifestformat import MANIFEST_NAME
from ..core.profiles import runner_peak
from ..core.runs import read_runs
from .readme import render_curve, render_readme
from .swap import recover


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
    src, dst = LogSet.of(config.logs_path, old, target.name), LogSet.of(config.logs_path, new, target.name)
    template_rel = (config.operators_path / f"{new}.py").relative_to(config.root).as_posix()
    where = f"{src.folder.relative_to(config.root)}/"
    if dst.folder.exists():
        raise PublishError(
            f"{dst.folder.relative_to(config.root)}/ exists already; tvmtune-ci does "
            f"not overwrite a log folder: remove it to adopt {where}, or keep it and "
            f"delete {where}"
        )
    with lock.hold(src.lock, f"{old}/{target.name}"), lock.hold(dst.lock, f"{new}/{target.name}"):
        recover(src.folder)  # a killed publish must not be mistaken for the set
        try:
            m = read_manifest(src.manifest)
        except (OSError, CorruptFileError) as e:
            raise StaleLogError(
                f"{where}: its manifest cannot be read ({e}); re-tune "
                f"`tvmtune-ci retune {new} --target {target.name}` instead"
            ) from None
        cache = SourceCache(config.root, inputs=config.declared_inputs(), config_file=config.path)
        decl, fp = cache.template(config.root / template_rel), cache.fingerprint(config.root / template_rel)
        if not fits(m, fp, template_rel):
            raise StaleLogError(
                f"{where} was tuned for {m.template_file} as it was then, not for {template_rel} as "
                f"it is now (the template or its workloads changed since): re-tune it with "
                f"`tvmtune-ci retune {new} --target {target.name}`, which replays this log first"
            )
        log = dst.log_name(m.tuned_on) if m.log == src.log_name(m.tuned_on) else m.log
        moved = replace(
            m,
            operator=new,
            log=log,
            template_file=template_rel,
            fingerprint=fp.digest,
            dependencies=dict(fp.dependencies),
            template_commit=last_commit(config.root, template_rel),
            sources=sources.record(cache, decl, fp, target.target).to_json(),
        )
        sealed, files = encode(moved)
        history = read_runs(src.folder, m.files)
        files["README.md"] = render_readme(sealed, history, runner_peak(config, target.name)).encode()
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
