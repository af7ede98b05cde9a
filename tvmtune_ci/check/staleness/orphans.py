"""Log folders of operators or targets no longer configured, and renamed templates
whose old folder fits (`adopt`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...core.config import Config, TargetConfig
from ...core.targets import slug
from ..fingerprint import (
    Fingerprint,
    SourceCache,
)
from .model import ORPHANED, Entry, Reason


def find_orphans(
    config: Config, cache: SourceCache, templates: dict[str, Path], logs: Path, kept: list[str]
) -> list[Reason]:
    """Log folders of operators without a template or of targets not configured for
    their operator; those that `keep:` declares go to `kept` instead."""
    if not logs.is_dir():
        return []
    known = {slug(op): {t.slug for t in config.targets_for(op)} for op in templates}
    out = []
    for d in sorted(logs.iterdir()):
        if not d.is_dir() or d.name.startswith("."):
            continue
        rel = cache.rel(d)
        if d.name not in known and config.kept(d.name):
            kept.append(f"{rel}/")
            continue
        if d.name not in known:
            out.append(
                Reason(
                    ORPHANED,
                    f"{rel}/ holds logs of operator {d.name!r}, which has no template "
                    f"{config.operators_dir}/{d.name}.py; "
                    "delete the folder or restore the template",
                    rel,
                )
            )
            continue
        for t in sorted(d.iterdir()):
            if t.is_dir() and not t.name.startswith(".") and t.name not in known[d.name]:
                if config.kept(d.name, t.name):
                    kept.append(f"{rel}/{t.name}/")
                    continue
                out.append(
                    Reason(
                        ORPHANED,
                        f"{rel}/{t.name}/ holds logs for target {t.name!r}, which is not "
                        f"configured for {d.name}; "
                        "delete the folder or add the target to tvmtune.yaml",
                        f"{rel}/{t.name}",
                    )
                )
    return out


def find_renamed(
    config: Config, cache: SourceCache, entries: list[Entry], orphans: list[Reason],
    missing: list[tuple[str, TargetConfig, Fingerprint, str]],
) -> tuple[list[Entry], list[Reason]]:
    """Entries with no log whose template was renamed from an orphaned folder's operator
    (renames.py): their `missing` reason and the folder's warning say so, with the command."""
    from .. import renames

    found = {(r.new, r.target_name): r for r in renames.find_renames(config, missing, cache.rel)}
    if not found:
        return entries, orphans
    out = []
    for e in entries:
        r = found.get((e.operator, e.target_name))
        if r is None:
            out.append(e)
            continue
        first = replace(e.reasons[0], detail=(
            f"{e.reasons[0].detail.split('; run')[0]}; renamed from {r.old}: its log {r.folder}/ "
            f"fits this template: `{r.command}` keeps it without re-tuning"))
        out.append(replace(e, reasons=(first, *e.reasons[1:]), renamed_from=r.old))
    by_old = {r.old: r for r in found.values()}
    logs_rel = cache.rel(config.logs_path.resolve())
    fixed = []
    for o in orphans:
        old = o.file.removeprefix(f"{logs_rel}/") if o.file else None
        r = by_old.get(old) if old is not None else None
        if r is not None:
            o = replace(o, detail=(f"{o.file}/ holds logs of operator {r.old!r}, renamed to "
                                   f"{r.new} (the same template): run `{r.command}`"))
        fixed.append(o)
    return out, fixed


