"""`find_stale`: every configured (operator, target), fresh or stale with all its reasons."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...core import gcpause
from ...core.configschema import Config, TargetConfig
from ...core.errors import ConfigError
from ...core.git import read as git_read
from ...core.layout import LogSet
from ...core.targetinfo import scope
from ...core.template import ADVISED_POINTS, TemplateDecl, discover_templates, space_advice
from ..datafiles import ENV, Note
from ..fingerprint import Fingerprint, SourceCache
from ..models import ModelProblem, check_models
from ..tvmversion import installed_tvm_version, major_minor
from .model import MISSING, Entry, Report
from .orphans import find_orphans, find_renamed
from .pairing import Pairing
from .prscope import pr_candidates, touched
from .rules import Checker
from .select import select_entries
from .templates import CheckedTemplate, parse_workers, read_checked_templates, target_space


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

_TVM_UNKNOWN = (
    "the TVM version is unknown, so tvm_changed was not checked; set "
    'tvm_version in tvmtune.yaml (e.g. tvm_version: "0.27") or install apache-tvm'
)

# One entry to check: its operator, target and log set, what reading its manifest gave,
# and its template as the manifest recorded it (None: the template is parsed).
_Todo = tuple[str, TargetConfig, LogSet, tuple, CheckedTemplate | None]


@dataclass(frozen=True)
class _Scope:
    """What every step of one `find_stale` reads: the config and its caches, the
    templates, and the files `--changed-since` names."""

    config: Config
    cache: SourceCache
    checker: Checker
    templates: dict[str, Path]  # operator -> its template, resolved
    pairing: Pairing
    logs_path: Path
    as_of: datetime.date
    changed: set[str] | None  # None: no --changed-since
    config_changed: bool  # tvmtune.yaml changed: every entry is concerned


@dataclass
class _Found:
    """What checking the entries gathers for the report and its warnings."""

    entries: list[Entry] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    noted: dict[Note, list[str]] = field(default_factory=dict)  # a read check reports -> the operators that run it
    missing: list[tuple[str, TargetConfig, Fingerprint, str]] = field(default_factory=list)  # entries with no log


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
    warnings += _template_warnings(config, templates)
    tvm_expected, tvm_source = _expected_tvm(config)
    if tvm_expected is None:
        warnings.append(_TVM_UNKNOWN)
    checker = Checker(config, cache, as_of, tvm_expected, tvm_source, None if rehash else cache.root)
    config_changed = changed is not None and checker.config_rel in changed
    candidates = (
        pr_candidates(config.root.resolve(), templates, changed, cache, logs_path, config.declared_inputs())
        if changed is not None and not config_changed
        else None
    )
    run = _Scope(config, cache, checker, templates, pairing, logs_path, as_of, changed, config_changed)
    found = _Found()
    # The loop allocates millions of short-lived AST nodes, freed by reference counting
    # (SourceCache.forget breaks the one cycle): no collection while it runs.
    with gcpause.paused():
        # First what each entry's manifest records; then the templates that an entry
        # cannot take from its record, parsed together (over the cores when many);
        # then the rules.
        todo = _entries_to_check(run, want_ops, want_targets, candidates)
        unparsed = [templates[op] for op in dict.fromkeys(op for op, *_, tpl in todo if tpl is None)]
        parsed_all = read_checked_templates(unparsed, cache, workers=parse_workers(len(unparsed)))
        for item in todo:
            _check_entry(run, found, item, parsed_all.get(templates[item[0]]))
    warnings += list(dict.fromkeys(found.advice))
    warnings += _read_warnings(config, found.noted)
    return _report(run, found, warnings, models=operators is None and targets is None)


def _template_warnings(config: Config, templates: dict[str, Path]) -> list[str]:
    """No operator template at all; a configured operator without its template."""
    out = []
    if not templates:
        out.append(
            f"no operator templates in {config.operators_dir}/; add one "
            f"(e.g. {config.operators_dir}/matmul.py) or set operators_dir in tvmtune.yaml"
        )
    for o in config.operators:
        if o.name not in templates:
            out.append(
                f"tvmtune.yaml:{o.line}: operators.{o.name} has no template "
                f"{config.operators_dir}/{o.name}.py; fix the name or remove the entry"
            )
    return out


def _expected_tvm(config: Config) -> tuple[str | None, str]:
    """The TVM (major.minor) the logs must have been tuned with, and who says so:
    tvmtune.yaml's tvm_version, else the installed apache-tvm; (None, "") when neither."""
    if config.tvm_version is not None:
        return major_minor(config.tvm_version), "tvm_version in tvmtune.yaml"
    installed = installed_tvm_version()
    if installed is not None:
        return major_minor(installed), f"installed apache-tvm {installed}"
    return None, ""


def _entries_to_check(
    run: _Scope, want_ops: set[str] | None, want_targets: set[str] | None, candidates: set[str] | None
) -> list[_Todo]:
    """The entries asked for (and that `--changed-since` may concern), by operator, each
    with what its manifest records; a pair no manifest vouches for only when its
    template declares the target's kind."""
    todo: list[_Todo] = []
    for op in sorted(run.templates):
        if want_ops is not None and op not in want_ops:
            continue
        if candidates is not None and op not in candidates:
            continue
        rel = run.cache.rel(run.templates[op])
        pending = []
        for target in run.pairing.candidates(op):
            if want_targets is not None and target.name not in want_targets:
                continue
            logset = LogSet.of(run.logs_path, op, target.name)
            read = run.checker.read(logset)
            tpl = run.checker.recorded(read[0], rel, target, op) if read[0] is not None else None
            pending.append((op, target, logset, read, tpl))
        if all(tpl is not None for *_, tpl in pending):
            run.pairing.vouch(op, (target.name for _, target, *_ in pending))
        else:  # a pair no manifest vouches for: of a kind the template declares?
            pending = [p for p in pending if run.pairing.paired(op, p[1])]
        todo += pending
    return todo


def _check_entry(run: _Scope, found: _Found, item: _Todo, parsed: CheckedTemplate | None) -> None:
    """One entry through the rules, kept when `--changed-since` concerns it, with its
    advice, the reads it reports, and (without a log) what finding a rename needs."""
    op, target, logset, read, recorded = item
    # Parsed when an entry of the op could not trust its record: its space advice
    # then holds for every target of the op.
    tpl = recorded if recorded is not None else parsed
    assert tpl is not None
    manifest, reasons = run.checker.check(tpl, target, logset, read)
    sizes, invalid = target_space(tpl, target)
    if invalid is not None:
        reasons.insert(0, invalid)
    entry = Entry(
        op, target.name, tpl.rel, tpl.line, tuple(reasons), manifest, logset, sizes, run.as_of, retired=target.retired
    )
    if not (run.changed is None or run.config_changed or touched(entry, tpl, run.changed, run.cache)):
        return
    found.entries.append(entry)
    other = manifest.measured_on_other_cpu() if manifest is not None else None
    if other is not None:  # not stale: a re-tune on the same runner repeats it
        found.advice.append(
            f"{run.cache.rel(logset.manifest)}: measured on "
            f"{other}, not the target's {target.target['mcpu']}: its timings and ranking are "
            f"that machine's; re-tune {op}/{target.name} on a runner with that CPU "
            "(its runs-on labels in tvmtune.yaml)"
        )
    if parsed is not None and parsed.decl is not None:
        found.advice += _space_advice(entry, target, parsed.decl)
    for n in tpl.notes:
        ops = found.noted.setdefault(n, [])
        if op not in ops:
            ops.append(op)
    if manifest is None and reasons and reasons[0].code == MISSING and tpl.fingerprint is not None:
        found.missing.append((op, target, tpl.fingerprint, tpl.rel))


def _report(run: _Scope, found: _Found, warnings: list[str], *, models: bool) -> Report:
    """The report: the entries, the orphaned log folders (a rename named in both), and
    with `models` (every entry checked) the models' coverage."""
    kept: list[str] = []
    entries = found.entries
    orphans = find_orphans(run.config, run.cache, run.templates, run.pairing, run.logs_path, kept)
    if found.missing and orphans:
        entries, orphans = find_renamed(run.config, run.cache, entries, orphans, found.missing)
    # The models' coverage files (docs/models.md): read once, templates parsed only when
    # git cannot vouch for them. Not for a selection of operators or targets.
    problems: list[ModelProblem] = []
    if models:
        problems, model_warnings = check_models(run.config, run.checker.index(), run.templates)
        warnings += model_warnings
    return Report(
        tuple(entries),
        tuple(orphans),
        tuple(warnings),
        run.checker.trusted,
        run.checker.templates_trusted,
        tuple(kept),
        models=tuple(problems),
    )
