"""`find_stale`: every configured (operator, target), fresh or stale with all its reasons."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from ...core import gcpause
from ...core.config import Config, TargetConfig
from ...core.errors import ConfigError
from ...core.git import read as git_read
from ...core.layout import LogSet
from ...core.targetinfo import scope
from ...core.template import ADVISED_POINTS, TemplateDecl, discover_templates, space_advice
from ..datafiles import ENV, Note
from ..fingerprint import Fingerprint, SourceCache
from ..models import ModelProblem, check_models
from .model import MISSING, Entry, Report
from .orphans import find_orphans, find_renamed
from .pairing import Pairing
from .prscope import pr_candidates, touched
from .rules import Checker
from .select import select_entries
from .templates import CheckedTemplate, parse_workers, read_checked_templates, target_space
from .tvmversion import installed_tvm_version, major_minor


def _space_advice(entry: Entry, target: TargetConfig, decl: TemplateDecl) -> list[str]:
    """A warning per workload whose design space is outside the advised size, naming the
    knob to change. Only for a template this check parsed (new or edited: the pull
    request that brings it); one whose recorded sources git vouches for is not parsed
    again for it, which keeps `check` fast."""
    low, high = ADVISED_POINTS
    odd = [w for w, (points, _) in sorted(entry.space_sizes.items()) if not low <= points <= high]
    out = []
    for w in odd:
        why = space_advice(decl.knobs, scope(decl.workloads[w], target.target), decl.constraints)
        if why is not None:
            line = min(decl.knob_lines.values(), default=entry.template_line)
            out.append(f"{entry.template_file}:{line}: workload {w!r} on {target.name}: {why}")
    return out


def _read_warnings(config: Config, noted: dict[Note, list[str]]) -> list[str]:
    """One warning per read that check reports, at its file:line, naming the operators
    whose templates run it. A read it cannot follow is silent for an operator that
    declares `inputs:` (what it reads is declared there)."""
    out = []
    for n, ops in sorted(noted.items()):
        if n.kind == ENV:
            users = _named(ops)
            out.append(
                f"{n.file}:{n.line}: reads environment variable {n.what} (run by {users}); "
                "its value is the runner's and no log records it: set it alike on every "
                "runner, or make it a knob"
            )
            continue
        undeclared = [op for op in ops if not config.operator(op).inputs]
        if undeclared:
            key = undeclared[0] if len(undeclared) == 1 else "<operator>"
            out.append(
                f"{n.file}:{n.line}: reads a file tvmtune-ci cannot follow: declare it "
                f"({n.what}; run by {_named(undeclared)}): list the files it reads under "
                f"`operators.{key}.inputs` in tvmtune.yaml (globs relative to the "
                "repository), so that editing them makes the logs stale"
            )
    return out


def _named(ops: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(ops[:most])
    return shown if len(ops) <= most else f"{shown} and {len(ops) - most} more"


def _check_folders(config: Config) -> None:
    """ConfigError when operators_dir is not a folder: a typo must not check nothing."""
    path = config.operators_path
    if path.is_dir():
        return
    name = config.path.name if config.path is not None else "tvmtune.yaml"
    line = config.lines.get("operators_dir")
    what = "is not a folder" if path.exists() else "does not exist"
    if line is None:
        raise ConfigError(
            f"{name}:1: operators_dir is not set and the default folder "
            f"{config.operators_dir}/ {what}; set `operators_dir:` to the folder of "
            "your operator templates"
        )
    raise ConfigError(
        f"{name}:{line}: operators_dir {config.operators_dir!r} {what} ({path}); "
        "fix the path (relative to tvmtune.yaml) or create the folder"
    )


# --------------------------------------------------------------------------- API


def find_stale(
    config: Config,
    *,
    as_of: datetime.date | None = None,
    changed_since: str | None = None,
    operators: Sequence[str] | None = None,
    targets: Sequence[str] | None = None,
    rehash: bool = False,
) -> Report:
    """Every configured (operator, target), fresh or stale with all its reasons.

    `changed_since=REF` keeps the entries whose template, in-repo dependencies or
    log folder differ between REF and the work tree (all of them when tvmtune.yaml
    does); an unknown REF is a UsageError. `operators`/`targets` select by name.

    A log (or results.json) is read and hashed unless git vouches for it: tracked,
    unmodified in the work tree, and its blob id the one the manifest recorded
    (`log_git_blob`, `files_git_blob`). A template is parsed and fingerprinted
    unless its manifest's `sources` still hold (sources.unchanged). `rehash=True`
    reads, hashes and parses everything regardless.
    """
    as_of = as_of or datetime.date.today()
    cache = SourceCache(config.root, inputs=config.declared_inputs(), config_file=config.path)
    warnings: list[str] = list(config.warnings)
    _check_folders(config)
    # Resolved once: every path below is joined onto these, never resolved again.
    templates = {p.stem: p for p in discover_templates(config.operators_path.resolve())}
    pairing = Pairing(config, templates)
    logs_path = config.logs_path.resolve()
    want_ops, want_targets = select_entries(config, operators, targets)
    changed = git_read.changed_files(config.root, changed_since) if changed_since is not None else None

    if not templates:
        warnings.append(
            f"no operator templates in {config.operators_dir}/; add one "
            f"(e.g. {config.operators_dir}/matmul.py) or set operators_dir in tvmtune.yaml"
        )
    for o in config.operators:
        if o.name not in templates:
            warnings.append(
                f"tvmtune.yaml:{o.line}: operators.{o.name} has no template "
                f"{config.operators_dir}/{o.name}.py; fix the name or remove the entry"
            )

    tvm_expected, tvm_source = None, ""
    if config.tvm_version is not None:
        tvm_expected, tvm_source = major_minor(config.tvm_version), "tvm_version in tvmtune.yaml"
    else:
        installed = installed_tvm_version()
        if installed is not None:
            tvm_expected, tvm_source = major_minor(installed), f"installed apache-tvm {installed}"
    if tvm_expected is None:
        warnings.append(
            "the TVM version is unknown, so tvm_changed was not checked; set "
            'tvm_version in tvmtune.yaml (e.g. tvm_version: "0.27") or install apache-tvm'
        )

    checker = Checker(config, cache, as_of, tvm_expected, tvm_source, None if rehash else cache.root)
    config_changed = changed is not None and checker.config_rel in changed
    candidates = (
        pr_candidates(config.root.resolve(), templates, changed, cache, logs_path, config.declared_inputs())
        if changed is not None and not config_changed
        else None
    )
    entries = []
    advice: list[str] = []
    noted: dict[Note, list[str]] = {}  # a read check reports -> the operators that run it
    missing: list[tuple[str, TargetConfig, Fingerprint, str]] = []  # entries with no log
    # The loop allocates millions of short-lived AST nodes, freed by reference counting
    # (SourceCache.forget breaks the one cycle): no collection while it runs.
    with gcpause.paused():
        # First what each entry's manifest records; then the templates that an entry
        # cannot take from its record, parsed together (over the cores when many);
        # then the rules.
        todo: list[tuple[str, TargetConfig, LogSet, tuple, CheckedTemplate | None]] = []
        for op in sorted(templates):
            if want_ops is not None and op not in want_ops:
                continue
            if candidates is not None and op not in candidates:
                continue
            rel = cache.rel(templates[op])
            pending = []
            for target in pairing.candidates(op):
                if want_targets is not None and target.name not in want_targets:
                    continue
                logset = LogSet.of(logs_path, op, target.name)
                read = checker.read(logset)
                tpl = checker.recorded(read[0], rel, target, op) if read[0] is not None else None
                pending.append((op, target, logset, read, tpl))
            if all(tpl is not None for *_, tpl in pending):
                pairing.vouch(op, (target.name for _, target, *_ in pending))
            else:  # a pair no manifest vouches for: of a kind the template declares?
                pending = [p for p in pending if pairing.paired(op, p[1])]
            todo += pending
        unparsed = [templates[op] for op in dict.fromkeys(op for op, *_, tpl in todo if tpl is None)]
        parsed_all = read_checked_templates(unparsed, cache, workers=parse_workers(len(unparsed)))
        for op, target, logset, read, recorded in todo:
            # Parsed when an entry of the op could not trust its record: its space advice
            # then holds for every target of the op.
            parsed = parsed_all.get(templates[op])
            tpl = recorded if recorded is not None else parsed
            assert tpl is not None
            manifest, reasons = checker.check(tpl, target, logset, read)
            sizes, invalid = target_space(tpl, target)
            if invalid is not None:
                reasons.insert(0, invalid)
            entry = Entry(op, target.name, tpl.rel, tpl.line, tuple(reasons), manifest, logset, sizes, as_of)
            if changed is None or config_changed or touched(entry, tpl, changed, cache):
                entries.append(entry)
                other = manifest.measured_on_other_cpu() if manifest is not None else None
                if other is not None:  # not stale: a re-tune on the same runner repeats it
                    advice.append(
                        f"{cache.rel(logset.manifest)}: measured on "
                        f"{other}, not the target's {target.target['mcpu']}: its timings and ranking are "
                        f"that machine's; re-tune {op}/{target.name} on a runner with that CPU "
                        "(its runs-on labels in tvmtune.yaml)"
                    )
                if parsed is not None and parsed.decl is not None:
                    advice += _space_advice(entry, target, parsed.decl)
                for n in tpl.notes:
                    ops = noted.setdefault(n, [])
                    if op not in ops:
                        ops.append(op)
                if manifest is None and reasons and reasons[0].code == MISSING and tpl.fingerprint is not None:
                    missing.append((op, target, tpl.fingerprint, tpl.rel))
    warnings += list(dict.fromkeys(advice))
    warnings += _read_warnings(config, noted)
    kept: list[str] = []
    orphans = find_orphans(config, cache, templates, pairing, logs_path, kept)
    if missing and orphans:
        entries, orphans = find_renamed(config, cache, entries, orphans, missing)
    # The models' coverage files (docs/models.md): read once, templates parsed only when
    # git cannot vouch for them. Not for a selection of operators or targets.
    models: list[ModelProblem] = []
    if operators is None and targets is None:
        models, model_warnings = check_models(config, checker.index(), templates)
        warnings += model_warnings
    return Report(
        tuple(entries),
        tuple(orphans),
        tuple(warnings),
        checker.trusted,
        checker.templates_trusted,
        tuple(kept),
        models=tuple(models),
    )
