"""Log folders of operators or targets no longer configured, and renamed templates
whose old folder fits (`adopt`)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ...core.configschema import Config, TargetConfig
from ...core.targets import slug
from .. import renames
from ..fingerprint import Fingerprint, SourceCache
from .model import ORPHANED, Entry, Reason
from .pairing import Pairing


def find_orphans(
    config: Config, cache: SourceCache, templates: dict[str, Path], pairing: Pairing, logs: Path, kept: list[str]
) -> list[Reason]:
    """Log folders of operators without a template or of targets not configured for
    their operator, or of a kind its template does not declare (`pairing`); those that
    `keep:` declares go to `kept` instead."""
    if not logs.is_dir():
        return []
    # Slug -> (operator, the targets configured for it whatever their kind, by slug);
    # the pairing reads a kind only for a folder the check's entries did not vouch for.
    known = {slug(op): (op, {t.slug: t for t in config.targets_for(op, None)}) for op in templates}
    logs_rel = cache.rel(logs)
    out = []
    # scandir's entries know their type (no stat per folder, no Path per name): this
    # runs over every log folder on every check.
    for op_name, op_dir in _folders(logs):
        rel = f"{logs_rel}/{op_name}"
        if op_name not in known and config.kept(op_name):
            kept.append(f"{rel}/")
            continue
        if op_name not in known:
            out.append(
                Reason(
                    ORPHANED,
                    f"{rel}/ holds logs of operator {op_name!r}, which has no template "
                    f"{config.operators_dir}/{op_name}.py; "
                    "delete the folder or restore the template",
                    rel,
                )
            )
            continue
        op, configured = known[op_name]
        for t_name, _ in _folders(op_dir):
            t = configured.get(t_name)
            if t is None or not pairing.paired(op, t):
                if config.kept(op_name, t_name):
                    kept.append(f"{rel}/{t_name}/")
                    continue
                if t is None:
                    why = f"not configured for {op_name}; delete the folder or add the target to tvmtune.yaml"
                else:  # configured, of a kind the template does not declare
                    why = (
                        f"a {t.kind} target, and {op_name}'s template schedules for "
                        f"{' or '.join(pairing.kinds(op) or ())} targets (TARGET_KINDS); "
                        "delete the folder"
                    )
                out.append(
                    Reason(
                        ORPHANED, f"{rel}/{t_name}/ holds logs for target {t_name!r}, which is {why}", f"{rel}/{t_name}"
                    )
                )
    return out


def _folders(path: str | Path) -> list[tuple[str, str]]:
    """(name, path) of the folders in `path` (symlinks to folders too, as Path.is_dir
    says), hidden ones left out, sorted by name."""
    with os.scandir(path) as it:
        return sorted((e.name, e.path) for e in it if not e.name.startswith(".") and e.is_dir())


def find_renamed(
    config: Config,
    cache: SourceCache,
    entries: list[Entry],
    orphans: list[Reason],
    missing: list[tuple[str, TargetConfig, Fingerprint, str]],
) -> tuple[list[Entry], list[Reason]]:
    """Entries with no log whose template was renamed from an orphaned folder's operator
    (renames.py): their `missing` reason and the folder's warning say so, with the command."""
    found = {(r.new, r.target_name): r for r in renames.find_renames(config, missing, cache.rel)}
    if not found:
        return entries, orphans
    out = []
    for e in entries:
        r = found.get((e.operator, e.target_name))
        if r is None:
            out.append(e)
            continue
        first = replace(
            e.reasons[0],
            detail=(
                f"{e.reasons[0].detail.split('; run')[0]}; renamed from {r.old}: its log {r.folder}/ "
                f"fits this template: `{r.command}` keeps it without re-tuning"
            ),
        )
        out.append(replace(e, reasons=(first, *e.reasons[1:]), renamed_from=r.old))
    by_old = {r.old: r for r in found.values()}
    logs_rel = cache.rel(config.logs_path.resolve())
    fixed = []
    for o in orphans:
        old = o.file.removeprefix(f"{logs_rel}/") if o.file else None
        r = by_old.get(old) if old is not None else None
        if r is not None:
            o = replace(
                o,
                detail=(
                    f"{o.file}/ holds logs of operator {r.old!r}, renamed to "
                    f"{r.new} (the same template): run `{r.command}`"
                ),
            )
        fixed.append(o)
    return out, fixed
