"""Re-tuning one (operator, target) entry as a tuple of named steps.

    BEFORE_LOCK: check_host_step -> preflight_step (RPC)
    UNDER_LOCK:  recheck_step -> check_names_step -> load_step (the workloads resolved
                 once) -> history_step -> carry_step -> refused_step -> tune_step (per
                 workload, the tuner's steps: correctness, baseline, search, finals) ->
                 first_run_step (the run history's first run) -> manifest_step -> write_step

Each step takes a `Job` (plain data: the config, the entry, the target, what earlier
steps found) and returns the next one; `retune_entry` runs them in order, holding the
log folder's lock for the second tuple. The thread count is part of the Job (its
policy, `tune/runners/threads.py`, is shared with `remeasure.py`). Printing
is the command's business: steps report through the `say` callback. Committing and
pushing come after every entry (`commands/retune.py`, `publish/gitwrite.py`).

Over 400 lines: the steps, which log is replayed, and the words the steps report
(history report, verdicts, commit message) belong to the one re-tune.

The tuning side's modules (tuner, search, measure, builder, runners, hostcheck,
devices, priors) are imported at module level here; only `remeasure` is imported
inside the step that uses it. `commands/retune.py` imports this module before its
nothing-stale and `--dry-run` exits, so those load the `tune/` modules and numpy too.
TVM is another matter: the `tune/` modules import it only inside the functions that
build, run or measure, so importing this module does not load it.
"""

from __future__ import annotations

import datetime as _dt
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .budget import floor_of, fmt_duration
from .check import sources
from .check.fingerprint import Fingerprint, SourceCache
from .check.renames import renamed_history
from .check.sources import Sources
from .check.staleness import Entry, find_stale, installed_tvm_version, major_minor
from .core import history
from .core import lock as _lock
from .core.config import Config, TargetConfig
from .core.errors import DeviceError, HostError, LockError, TvmtuneError
from .core.fsutil import sha256_bytes
from .core.git.read import blob_id, last_commit
from .core.history import ReplayReport
from .core.layout import LogSet
from .core.manifest import (
    MANIFEST_FORMAT,
    Manifest,
    WorkloadResult,
    encode,
    read_manifest,
    seal_files,
)
from .core.reasons import Code
from .core.records import make_log, render_log
from .core.runs import RUNS_NAME, encode_runs, machine_words, parse_runs, read_runs, same_machine
from .core.stats import ESTIMATOR, fmt_latency
from .core.targetinfo import target_facts
from .core.template import Knob, TemplateDecl, check_imported_agrees, import_template, read_template
from .publish.readme import render_curve, render_readme
from .publish.swap import Published, check_publishable, publish
from .tune import priors
from .tune.builder import make_builder
from .tune.devices import preflight
from .tune.hostcheck import check_host, host_description, other_cpu
from .tune.measure import workload_bytes
from .tune.runners import make_runner
from .tune.runners.threads import (  # remeasure imports them from here too
    measure_threads,
    tvm_threads,
)
from .tune.search import WARMUP_SAMPLES
from .tune.tuner import TuneRequest, tune_workload
from .tune.workload import resolve

if TYPE_CHECKING:
    from .budget import Budget
    from .tune.runners import Runner
    from .tune.tuner import TuneOutcome
    from .tune.workload import Workload

Say = Callable[[str], None]

# Reasons under which the previous log no longer describes the same template, workload
# and target (its best is no fair finalist to keep), and under which it is not replayed
# on an edited template (history.py): reasons.Code says which.
_SAME_TEMPLATE_BLOCKERS = frozenset(c for c in Code if c.blocks_reuse)
_REPLAY_BLOCKERS = frozenset(c for c in Code if c.blocks_replay)


@dataclass(frozen=True)
class RetuneResult:
    """One entry re-tuned: the entry as it was, the new manifest, what was published."""

    entry: Entry
    manifest: Manifest
    published: Published

    def speedups(self) -> dict[str, float]:
        return {w: r.speedup for w, r in self.manifest.results.items()}


def can_reuse_previous(entry: Entry) -> bool:
    """Whether the previous log describes this very template, workload and target,
    so its best is a fair finalist to keep."""
    return entry.manifest is not None and not ({r.code for r in entry.reasons} & _SAME_TEMPLATE_BLOCKERS)


def replay_skipped(entry: Entry) -> str | None:
    """Why the previous log is not replayed on the edited template (None: it is, or
    the template did not change). Only a template edit is replayed."""
    codes = {r.code for r in entry.reasons}
    if entry.manifest is None:  # unreadable (log_modified), or none at all (missing)
        return "no readable previous log" if Code.LOG_MODIFIED in codes else None
    if Code.TEMPLATE_CHANGED not in codes and Code.WORKLOAD_CHANGED not in codes:
        return None
    if Code.TVM_CHANGED in codes:
        return f"the previous log was tuned with TVM {entry.manifest.tvm_version}"
    if Code.LOG_MODIFIED in codes:
        return "the previous log was edited by hand"
    if Code.TEMPLATE_API_CHANGED in codes:
        return (f"the previous log was decoded with template API {entry.manifest.template_api}, "
                "not this tvmtune-ci's")
    if Code.TARGET_CHANGED in codes:
        return "the previous log was tuned for another target"
    return None


def history_source(config: Config, entry: Entry, target: TargetConfig, say: Say
                   ) -> tuple[Manifest | None, Path, str | None]:
    """Whose log a re-tune replays: (manifest, its path, the other target's name or None).

    This entry's own log after a template edit; its old folder's after a rename with
    an edit (renames.renamed_history); else, with the target's seed-from,
    another target's log of the operator when the entry has no log of its own to
    keep; else none (manifest None). Says why a replay is skipped."""
    reuse = can_reuse_previous(entry)
    if can_replay(entry):
        return entry.manifest, entry.logset.manifest, None
    skipped = replay_skipped(entry)
    if entry.manifest is None and skipped is None:
        # No log: a renamed (and edited) template's is in its old folder (renames.py).
        renamed = renamed_history(config, entry.operator, target, entry.template_file, say)
        if renamed is not None:
            return renamed[0], renamed[1], None
    if not reuse and target.seed_from:
        seeded = seed_source(config, entry, target, say)
        if seeded is not None:
            say(f"history: seeding from the {target.seed_from} log {seeded[0].log} (seed-from)")
            return seeded[0], seeded[1], target.seed_from
    if skipped is not None:
        say(f"history replay skipped: {skipped}; a cold search")
    return None, entry.logset.manifest, None


def replay_plan(config: Config, entry: Entry) -> list[str]:
    """What `retune` would replay, in words, without TVM (for --dry-run): per workload
    the knob diff and how many old configurations map."""
    lines: list[str] = []
    target_cfg = config.target(entry.target_name)
    hist, _, from_target = history_source(config, entry, target_cfg, lines.append)
    if hist is None:
        return [x.removesuffix("; a cold search") for x in lines]
    decl = read_template(config.root / entry.template_file)
    target = target_cfg.target
    old_decl = history.old_declaration(config.root, hist)
    for wname, wl in sorted(decl.workloads.items()):
        old = history.old_configs(hist, wname)
        mapped = history.map_all(old, decl.knobs, wl, target)
        diff = history.knob_diff(old_decl, decl.knobs, wl, target,
                                 old_names=sorted({k for c in old for k in c}))
        whole = sum(not m.reset for m in mapped)
        lines.append(f"history {wname}: {diff.sentence()}; {len(mapped)} configuration(s) of "
                     f"{hist.log}{f' ({from_target})' if from_target else ''} would be replayed "
                     f"first, {whole} with every knob kept; its other records would train the "
                     "cost model")
    return lines


def can_replay(entry: Entry) -> bool:
    """Whether the entry's own previous log is replayed: its template was edited,
    the log is readable, unedited, for this target and tuned with this TVM."""
    codes = {r.code for r in entry.reasons}
    return (entry.manifest is not None and bool(codes & {Code.TEMPLATE_CHANGED, Code.WORKLOAD_CHANGED})
            and not codes & _REPLAY_BLOCKERS)


def _git_commit_of(root: Path, path: Path) -> str | None:
    try:
        return last_commit(root, path)
    except Exception:  # not a git repo, or the template is not committed yet
        return None


def seed_source(config: Config, entry: Entry, target: TargetConfig, say: Say) -> tuple[Manifest, Path] | None:
    """The log of `target.seed_from` for this operator, when it can seed this entry's
    search: readable, not edited by hand, tuned with this TVM, for the same template
    file. None (with a line saying why) otherwise."""

    name = target.seed_from
    assert name is not None
    logset = LogSet.of(config.logs_path, entry.operator, name)
    where = f"seed-from {name}: {logset.folder.relative_to(config.root) if logset.folder.is_relative_to(config.root) else logset.folder}"
    try:
        m = read_manifest(logset.manifest)
    except (OSError, TvmtuneError) as e:
        say(f"history: {where} has no readable log ({type(e).__name__}); a cold search")
        return None
    try:
        data = (logset.folder / m.log).read_bytes()
    except OSError:
        data = None
    installed = installed_tvm_version()
    why = None
    if data is None or sha256_bytes(data) != m.log_sha256:
        why = f"its log {m.log} is missing or was edited since its manifest was written"
    elif installed and major_minor(installed) != major_minor(str(m.tvm_version)):
        why = f"it was tuned with TVM {m.tvm_version}"
    elif m.template_file != entry.template_file:
        why = f"it is a log of {m.template_file}, not {entry.template_file}"
    if why is not None:
        say(f"history: {where}: not seeding, {why}; a cold search")
        return None
    return m, logset.manifest


def _old_records(root: Path, manifest_path: Path, manifest: Manifest, workloads: list[str],
                 say: Say) -> dict[str, list[Any]]:
    """The replayed log's records as (knobs, latency, program key) per workload, for the
    cost model's prior and the check whether the old search stands (`priors.py`); {} with
    a line saying why when they cannot be read."""
    try:
        with tempfile.TemporaryDirectory(prefix="tvmtune-prior-") as scratch:
            return priors.old_records(root, manifest_path, manifest, workloads, Path(scratch))
    except priors.PriorError as e:
        say(f"history: the cost model is not trained on the previous log's other records: {e}")
        return {}


def replay_report(source: str, mapped: Sequence[Any], diff: Any, outcome: Any,
                  from_target: str | None = None) -> Any:
    """The history report of one workload: the replay's counts and the old best's
    place in the finals (it was the "previous" finalist when it still worked)."""
    rs = outcome.replay
    resets = Counter(name for m in mapped for name in m.reset)
    old = outcome.previous if rs is not None and rs.old_best_correct else None
    return ReplayReport(
        source=source,
        offered=len(mapped),
        whole=sum(not m.reset for m in mapped),
        built=rs.built if rs else 0,
        correct=rs.correct if rs else 0,
        measured=rs.measured if rs else 0,
        knob_diff=diff,
        reset_counts=dict(resets),
        failures=rs.failures if rs else (),
        old_best_s=old.latency_s if old is not None else None,
        old_best_rel=old.rel_halfwidth if old is not None else None,
        verdict=outcome.previous_verdict if old is not None else None,
        # No search to seed when the old one stood (search.old_search_stands).
        seeded=bool(rs and rs.measured) and outcome.trials.stop_reason != "history_unchanged",
        prior=rs.prior if rs else 0,
        from_target=from_target,
        probes=rs.probes if rs else 0,
        finals_left_out=rs.finals_left_out if rs else 0,
    )


def previous_sentence(source: str, verdict: str) -> str:
    """What happened to the previous best, in words (console, README, commit)."""
    if verdict == "faster":
        return "this run's best is faster than the previous best beyond the noise; switched"
    if verdict == "slower":
        if source == "previous":
            return "the previous best is faster beyond the noise; kept it"
        return "the previous best is faster beyond the noise, but another finalist won"
    if source == "previous":
        return "this run's best and the previous best are equal within noise; kept the previous best"
    return "this run's best and the previous best are equal within noise"


def write_set(logset: LogSet, manifest: Manifest, files: dict[str, bytes]) -> Published:
    """Archive the old set as .bak and publish `files` (the log, results.json and
    manifest.json of the sealed `manifest`) with the README and plot, atomically."""
    history = parse_runs(files[RUNS_NAME], RUNS_NAME) if RUNS_NAME in files else []
    files = {**files, "README.md": render_readme(manifest, history).encode()}
    curve = render_curve(manifest)
    if curve is not None:
        files["curve.png"] = curve
    return publish(logset.folder, files)


# --------------------------------------------------------------------------- the steps


@dataclass(frozen=True)
class Template:
    """An operator template loaded once: its declarations (read without running it),
    its semantic fingerprint, and the imported module."""

    path: Path
    decl: TemplateDecl
    fingerprint: Fingerprint
    module: ModuleType
    sources: Sources  # what decl and fingerprint were computed from (for `check`)


@dataclass(frozen=True)
class History:
    """The log a re-tune replays (history.py, priors.py): this entry's own after a
    template edit, or another target's with seed-from."""

    manifest: Manifest
    manifest_path: Path
    from_target: str | None  # None: this entry's own log
    old_knobs: tuple[Knob, ...] | None  # the KNOBS it was tuned with (None: unknown)
    records: dict[str, list[Any]]  # workload -> its records as (knobs, latency, program key)


@dataclass(frozen=True)
class Job:
    """What one entry's re-tune steps pass along; each step returns the next Job."""

    config: Config
    entry: Entry
    target: TargetConfig
    trials: int
    seed: int
    say: Say
    progress: Callable[[str], Callable[[Any], None]] | None = None
    threads: int | None = None  # TVM_NUM_THREADS while measuring locally (None: TVM's own)
    template: Template | None = None
    history: History | None = None
    # Each workload resolved once (`load_step`): the carry, the tuner and the first
    # history run take its module and FLOPs from here.
    workloads: dict[str, Workload] = field(default_factory=dict)
    outcomes: dict[str, TuneOutcome] = field(default_factory=dict)
    results: dict[str, WorkloadResult] = field(default_factory=dict)
    manifest: Manifest | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # the set's log, results, manifest
    history_runs: tuple[Any, ...] = ()  # the new set's run history (runs.Run)
    budget: Budget | None = None  # shared by the entries of one `retune --budget`
    carry: bool = True  # whether a set whose programs an edit left alone is carried forward
    carried: str | None = None  # why the set was carried forward (carry_step), in words
    published: Published | None = None
    # Why this machine cannot measure the target, held back while a carry forward (which
    # measures nothing) is tried; raised if the set is not carried (`refused_step`).
    refusal: TvmtuneError | None = None


def may_carry(entry: Entry, carry: bool = True) -> bool:
    """Whether a run would try to carry the set forward, from what is known before the
    lock and without TVM: carrying is on, a template edit is the only reason the set is
    stale, and its manifest records the programs (format 2). `carry_refusal` decides the
    rest, from the programs."""
    return (carry and {r.code for r in entry.reasons} == {Code.TEMPLATE_CHANGED}
            and entry.manifest is not None and entry.manifest.format >= 2)


def _refuse_unless_carried(job: Job, err: TvmtuneError) -> Job:
    if not may_carry(job.entry, job.carry):
        raise err
    job.say(f"{err}; only the template changed: trying to carry the set forward first, "
            "which measures nothing")
    return replace(job, refusal=err)


def check_host_step(job: Job) -> Job:
    """A target this machine cannot measure is refused before anything else, unless
    only its template changed: a carry forward measures nothing, so any machine that
    can schedule the template for the target can carry the set (another CPU's)."""
    try:
        check_host(job.target.target, remote=job.target.rpc is not None)
    except HostError as err:
        return _refuse_unless_carried(job, err)
    return job


def preflight_step(job: Job) -> Job:
    """An RPC target: the tracker can serve the devices, sessions can hold a measurement
    (held back, as the host check is, while a carry forward is tried)."""
    if job.target.rpc is not None and job.refusal is None:
        try:
            preflight(job.target.rpc, job.config.measure)
        except DeviceError as err:
            return _refuse_unless_carried(job, err)
    return job


def refused_step(job: Job) -> Job:
    """Not carried forward: the host check's or the tracker's refusal stands."""
    if job.refusal is not None and job.carried is None:
        raise job.refusal
    return job


def recheck_step(job: Job) -> Job:
    """Staleness again, under the lock: another run may have published since the
    caller looked, and its set is the previous one now."""

    e = job.entry
    report = find_stale(job.config, as_of=e.as_of, operators=[e.operator], targets=[e.target_name])
    current = next((x for x in report.entries
                    if x.operator == e.operator and x.target_name == e.target_name), e)
    if e.reasons and current.fresh:
        raise LockError(
            f"{e.operator}/{e.target_name} was re-tuned by another run while this one "
            f"waited ({e.logset.folder / 'manifest.json'} is fresh now); nothing to do; pass "
            "--all to re-tune it anyway"
        )
    return replace(job, entry=current)


def check_names_step(job: Job) -> Job:
    """A name clash with a user's file would only refuse at publish time: say so
    before the tuning time is spent."""
    logset = job.entry.logset
    check_publishable(logset.folder, [logset.log_name(_dt.date.today().isoformat()),
                                      "manifest.json", "README.md", "curve.png", RUNS_NAME])
    return job


def load_step(job: Job) -> Job:
    """Read, fingerprint and import the template, once for every workload: one parse
    of its source feeds all three, so the code tuned is the code fingerprinted."""

    root = job.config.root
    path = root / job.entry.template_file
    cache = SourceCache(root, inputs=job.config.declared_inputs(), config_file=job.config.path)
    decl, fp = cache.template(path), cache.fingerprint(path)
    module = import_template(path, root, cache.tree(path))
    check_imported_agrees(module, decl)
    # Each workload resolved here, once: a carry (refused or not), the tuner and the
    # first history run take its module and FLOPs from the same object. Lazy: nothing
    # is computed until one of them asks.
    workloads = {w: resolve(module, w, job.target.target) for w in decl.workloads}
    return replace(job, template=Template(path, decl, fp, module,
                                          sources.record(cache, decl, fp, job.target.target)),
                   workloads=workloads)


def history_step(job: Job) -> Job:
    """Which log is replayed (if any), its KNOBS declaration, and its records."""
    hist, hist_path, hist_from = history_source(job.config, job.entry, job.target, job.say)
    if hist is None:
        return job
    assert job.template is not None
    root = job.config.root
    records = _old_records(root, hist_path, hist, list(job.template.decl.workloads), job.say)
    return replace(job, history=History(hist, hist_path, hist_from,
                                        history.old_declaration(root, hist), records))


def carry_refusal(job: Job) -> str | None:
    """Why the previous set cannot be carried forward onto the edited template without
    TVM (None: the programs decide, `carry_step`)."""
    entry, hist = job.entry, job.history
    codes = {r.code for r in entry.reasons}
    if not job.carry:
        return "--no-carry"
    if codes != {Code.TEMPLATE_CHANGED}:
        return None if not codes else "not only the template changed (" + ", ".join(sorted(codes)) + ")"
    if entry.manifest is None or hist is None or hist.from_target is not None:
        return "the previous log is not replayed"
    if entry.manifest.format < 2:  # fixed-repeat means, not this measurement layer's figures
        return f"the previous log is of manifest format {entry.manifest.format}"
    if hist.old_knobs is None:
        return "the previous template's knobs are unknown"
    assert job.template is not None
    if dict(job.template.decl.workloads) != dict(entry.manifest.workloads):
        return "the workloads differ"
    missing = [w for w in job.template.decl.workloads if not hist.records.get(w)]
    if missing:
        return f"the previous log's records of {', '.join(missing)} could not be read"
    return None


def carry_step(job: Job) -> Job:
    """A template edit that changed no kernel: the previous set is carried forward.

    When the only reason the set is stale is the template's edit, and for every workload
    the edited template opens no knob values and makes the same program of every
    configuration the old log measured or its manifest publishes (the records, best,
    default, top table; `programs.programs_unchanged`), with the same default
    configuration, then everything the set states still describes these kernels: the
    log's records, the finals, the run history. Measuring them again would re-measure
    the same programs (after a no-op edit the tuner's replay and finals took 16-26 s on a
    Zen 4, the history run `measure.history_s` more). The manifest is re-stamped with the new
    fingerprint and says so (`carried`); the log, results and run history stay as they
    are, and their date stays the date they were measured, so the age rule still counts
    from it. `retune --no-carry` measures anyway."""
    refusal = carry_refusal(job)
    if refusal is not None or not job.entry.reasons:
        if refusal is not None and refusal != "--no-carry" and job.history is not None:
            job.say(f"not carried forward: {refusal}")
        return job
    from .tune.measure import full_knobs
    from .tune.programs import programs_unchanged

    entry, target, tpl, hist = job.entry, job.target, job.template, job.history
    old = entry.manifest
    assert tpl is not None and hist is not None and old is not None and hist.old_knobs is not None
    t0 = time.monotonic()
    counts = {}
    for w in tpl.decl.workloads:
        params, wl = tpl.decl.workloads[w], job.workloads[w]
        result = old.results[w]
        if any(history.map_config(k, tpl.decl.knobs, params, target.target).knobs != k
               for k in priors.published_configs(old, [w])[w]):
            job.say(f"{w}: not carried forward: the edit changed the knobs of a configuration the "
                    "set publishes")
            return job
        if full_knobs(tpl.module, wl, None, target.target) != result.baseline.knobs:
            job.say(f"{w}: not carried forward: the edit changed the default configuration")
            return job
        programs = priors.old_programs(hist.records[w], tpl.decl.knobs, params, target.target)
        with tvm_threads(job.threads):
            same = programs_unchanged(tpl.module, wl, target.target, result.best.knobs,
                                      hist.old_knobs, programs)
        if not same:
            job.say(f"{w}: not carried forward: the edit changed a program the old log measured, "
                    "or opened knob values")
            return job
        counts[w] = len(programs)
    n = sum(counts.values())
    sentence = (f"the template edit changed none of the {n} programs the log measured or publishes "
                f"({', '.join(f'{w}: {c}' for w, c in counts.items())}; each configuration makes the "
                "same module as before), nor the default configuration, and opened no knob values: "
                f"the set measured on {old.tuned_on} still describes these kernels")
    log = (entry.logset.folder / old.log).read_bytes()
    if sha256_bytes(log) != old.log_sha256:
        job.say(f"not carried forward: {old.log} changed since it was read")
        return job
    manifest = replace(
        old, log_git_blob=blob_id(log),  # a set from before format 3 had none
        fingerprint=tpl.fingerprint.digest, dependencies=dict(tpl.fingerprint.dependencies),
        template_commit=_git_commit_of(job.config.root, tpl.path), sources=tpl.sources.to_json(),
        results=dict(old.results), format=MANIFEST_FORMAT,
        carried={"on": _dt.date.today().isoformat(), "from_fingerprint": old.fingerprint,
                 "sentence": sentence},
    )
    manifest, encoded = encode(manifest)
    job.say(f"carried forward: {sentence}")
    if job.budget is not None:
        took = time.monotonic() - t0
        for w in tpl.decl.workloads:
            # No floor: nothing was measured, so it says nothing of an item that searches.
            job.budget.finish((entry.operator, target.name, w), took / len(counts))
    return replace(job, carried=sentence, manifest=manifest, files=encoded)


def tune_step(job: Job) -> Job:
    """Tune every workload (the tuner's steps: correctness, baseline, search with the
    history replay, finals), with the target's thread count."""
    if job.carried is not None:
        return job
    outcomes, results = {}, {}
    assert job.template is not None
    if job.target.rpc is None and (cpu := other_cpu(job.target.target)) is not None:
        job.say(f"warning: {job.entry.operator}/{job.target.name}: the target builds for "
                f"mcpu={job.target.target['mcpu']} and this machine's CPU is {cpu} "
                f"({machine_words(host_description())}): the log will hold this machine's timings "
                f"and ranking under {job.target.name}'s name. Re-tune it on a runner with that CPU "
                "(its runs-on labels in tvmtune.yaml), or give this CPU a target of its own")
    names = list(job.template.decl.workloads)
    if job.budget is not None:  # the lightest first, as the budget orders every item
        order = job.budget.order()
        names.sort(key=lambda w: order.index((job.entry.operator, job.target.name, w))
                   if (job.entry.operator, job.target.name, w) in order else len(order))
    with tvm_threads(job.threads):
        # One runner for the set's workloads: its worker (TVM's import) starts once, with
        # the target's thread count, and measures each workload in turn.
        runner = make_runner(job.config.measure, job.target.rpc)
        try:
            for wname in names:
                outcomes[wname], results[wname] = tune_one(job, wname, runner)
        finally:
            runner.close()
    return replace(job, outcomes=outcomes, results=results)


def old_ranking_holds(target: TargetConfig, manifest: Manifest) -> bool:
    """Whether the previous log's ranking of its programs was measured on this kind of
    runner (`runs.same_machine`): the old search standing after an edit, and the finals
    leaving old programs out, rest on it. Another CPU generation ranks them otherwise (a
    Zen 4's best 1024^3 matmul ran 1.7-1.9x slower on a Zen 5 than the Zen 5's own best;
    bench_warmstart run R). An RPC target's devices are the runner: not this machine."""
    return target.rpc is not None or same_machine(host_description(), manifest.host)


def tune_one(job: Job, wname: str, runner: Runner) -> tuple[TuneOutcome, WorkloadResult]:
    """One workload: the previous best as a finalist, or the history replayed; the
    tuner's outcome and the manifest's result, with the history report."""
    entry, target, say, tpl, hist = job.entry, job.target, job.say, job.template, job.history
    assert tpl is not None
    decl, wl = tpl.decl, tpl.decl.workloads[wname]
    prev = None
    if can_reuse_previous(entry) and entry.manifest is not None and wname in entry.manifest.results:
        prev = dict(entry.manifest.results[wname].best.knobs)
        where = f"on {target.rpc.key}@{target.rpc.tracker}" if target.rpc else "on this machine"
        say(f"{wname}: the previous log's best is a finalist, re-measured {where}")
    mapped: list[history.Mapped] = []
    diff = None
    holds = False  # asked once per workload: it reads /proc/cpuinfo
    if hist is not None and hist.from_target is None:
        holds = old_ranking_holds(target, hist.manifest)
    if hist is not None and hist.from_target is None and not holds:
        say(f"{wname}: {hist.manifest.log} was measured on {machine_words(hist.manifest.host)}, this machine "
            f"is {machine_words(host_description())}: its search does not stand here, and its programs are "
            "not left out of the finals")
    if hist is not None:
        old = history.old_configs(hist.manifest, wname)
        mapped = history.map_all(old, decl.knobs, wl, target.target)
        diff = history.knob_diff(hist.old_knobs, decl.knobs, wl, target.target,
                                 old_names=sorted({k for c in old for k in c}))
        why = f"seeded from {hist.from_target}" if hist.from_target else "template edited"
        say(f"{wname}: {why} ({diff.sentence()}); replaying {len(mapped)} "
            f"configuration(s) of {hist.manifest.log} first")
    budget_s, note, t0, left0 = None, "", time.monotonic(), 0.0
    # The entry's run history is measured after its workloads: each leaves its part.
    history_s = job.config.measure.history_s / max(1, len(decl.workloads))
    if job.budget is not None:
        left0 = job.budget.left_s()
        budget_s, note = job.budget.share((entry.operator, target.name, wname))
        budget_s -= history_s
        say(f"{wname}: budget: {note}")
    resolved = job.workloads[wname]
    outcome = tune_workload(TuneRequest(
        template=tpl.module,
        workload_name=wname,
        workload=resolved,
        target=target.target,
        trials=job.trials,
        batch_size=job.config.batch_size,
        seed=job.seed,
        early_stop=job.config.early_stop,
        measure=job.config.measure,
        work_dir=entry.logset.work_dir / wname,
        rpc=target.rpc,
        on_batch=job.progress(f"{entry.operator}/{entry.target_name}/{wname}") if job.progress else None,
        fingerprint=tpl.fingerprint.digest,
        previous_knobs=prev,
        warn=say,
        replay=tuple(m.knobs for m in mapped),
        prior=priors.prior_for(hist.records.get(wname, []), decl.knobs, wl, target.target,
                               [m.knobs for m in mapped]) if hist is not None else (),
        old_knobs=(tuple(hist.old_knobs) if hist is not None and hist.old_knobs is not None and mapped
                   else None),
        # Another target's programs are other kernels whatever their modules: only this
        # target's own log, measured on this kind of runner, can stand for the edited
        # template (or rank old programs below its best in the finals).
        old_programs=(priors.old_programs(hist.records.get(wname, []), decl.knobs, wl, target.target)
                      if holds and hist is not None else ()),
        time_budget_s=budget_s,
        budget_note=note,
        budget_more=(None if job.budget is None else _budget_more(
            job.budget, (entry.operator, target.name, wname),
            history_s)),
        budget_reshare=(None if job.budget is None else _budget_reshare(
            job.budget, (entry.operator, target.name, wname), left0,
            history_s, say)),
        runner=runner,
    ))
    if job.budget is not None:
        took = time.monotonic() - t0
        job.budget.finish((entry.operator, target.name, wname), took, floor_of(
            took, outcome.stats, WARMUP_SAMPLES, history_s))
        # What it spent beside what it was given, in the README and the commit.
        spent = f"; it took {fmt_duration(took)}" + (
            f" (and {fmt_duration(history_s)} of its set's history run after the set)" if history_s else "")
        outcome = replace(outcome, trials=replace(outcome.trials, budget_note=outcome.trials.budget_note + spent))
    report = None
    if diff is not None and hist is not None:
        report = replay_report(hist.manifest.log, mapped, diff, outcome, from_target=hist.from_target)
        for line in report.sentences():
            say(f"{wname}: history: {line}")
    if outcome.previous_verdict is not None and outcome.previous is not None:
        say(f"{wname}: {previous_sentence(outcome.best_source, outcome.previous_verdict)}")
    elif prev is not None:
        say(f"{wname}: the previous best could not be re-measured (its finals error is in the log); keeping this run's best")
    return outcome, WorkloadResult(
        best=outcome.best, baseline=outcome.baseline, top=tuple(outcome.top[:10]),
        space_size=outcome.space_size, design_spaces=outcome.design_spaces,
        curve=tuple(outcome.curve), previous_best=outcome.previous,
        previous_verdict=outcome.previous_verdict, best_source=outcome.best_source,
        history=report.to_json() if report is not None else None,
        noise_check=outcome.noise_check,
        bytes_moved=workload_bytes(tpl.module, resolved),
        gpu=outcome.gpu,
    )


def _budget_more(budget: Budget, item: tuple[str, str, str], history_s: float
                 ) -> Callable[[float, float, float], tuple[bool, str]]:
    """The search's question past its share (TuneRequest.budget_more), asked of the
    budget with the item's part of its set's history run added to what it needs."""
    def more(spent_s: float, gain_per_s: float, need_s: float) -> tuple[bool, str]:
        return budget.go_on(item, spent_s + history_s, gain_per_s, need_s + history_s)
    return more


def _budget_reshare(budget: Budget, item: tuple[str, str, str], left_s: float, history_s: float,
                    say: Say) -> Callable[[float], tuple[float, str] | None]:
    """The search's question when its warm-up is done (TuneRequest.budget_reshare): the
    first searching item's share again from its own floor (with its part of its set's history
    run), as though it had been known at the item's start (`left_s` then)."""
    def reshare(floor_s: float) -> tuple[float, str] | None:
        again = budget.reshare(item, floor_s + history_s, left_s)
        if again is None:
            return None
        say(f"{item[2]}: budget, its floor measured: {again[1]}")
        return again[0] - history_s, again[1]
    return reshare


def first_run_step(job: Job) -> Job:
    """The first run of the new set's history (runs.py): each new best, its default and
    the calibration kernels measured in turns, as every later `remeasure` measures them,
    so that the band a README states is of one kind of measurement from the start."""
    from .remeasure import RunItem, measure_runs

    if job.carried is not None:  # its history goes on: the same programs
        return job
    assert job.template is not None
    item = RunItem(job.entry.operator, job.template.module,
                   {w: r.best.knobs for w, r in job.results.items()}, job.workloads)
    with tvm_threads(job.threads):
        runner = make_runner(job.config.measure, job.target.rpc)
        builder = make_builder()
        try:
            run = measure_runs([item], job.target, job.config, by="retune", runner=runner,
                               builder=builder, say=job.say)[job.entry.operator]
        finally:
            builder.close()
            runner.close()
    return replace(job, history_runs=(run,))


def manifest_step(job: Job) -> Job:
    """The new set's log bytes and manifest (provenance), not yet written."""
    if job.carried is not None:  # carry_step wrote them
        return job
    entry, target, tpl = job.entry, job.target, job.template
    assert tpl is not None
    date = _dt.date.today().isoformat()
    data = render_log(make_log(entry.operator, target.target, list(job.outcomes.values()))).encode()
    host = host_description()
    host["runner"] = f"rpc {target.rpc.key}@{target.rpc.tracker} x{target.rpc.devices}" if target.rpc else "local"
    if target.rpc is None and target.target.get("kind") == "llvm":
        from .tune.tvmsetup import host_cpu

        host["llvm_cpu"] = host_cpu()  # beside the target's mcpu: the README shows a mismatch
    # Who measured the trials: "local", or each RPC server's "host:port".
    host["devices"] = sorted({d for o in job.outcomes.values() for d in o.devices})
    manifest = Manifest(
        operator=entry.operator, target_name=target.name, target=target.target,
        log=entry.logset.log_name(date), log_sha256=sha256_bytes(data), log_git_blob=blob_id(data),
        fingerprint=tpl.fingerprint.digest, dependencies=dict(tpl.fingerprint.dependencies),
        workloads=tpl.decl.workloads, tvm_version=installed_tvm_version() or "unknown",
        tuned_on=date, seed=job.seed, trials={w: o.trials for w, o in job.outcomes.items()},
        results=job.results,
        measure={**vars(job.config.measure), "estimator": ESTIMATOR,
                 "threads": job.threads or "TVM default"},
        template_file=entry.template_file, template_commit=_git_commit_of(job.config.root, tpl.path),
        host=host, target_facts=target_facts(target.target).to_json(),
        sources=tpl.sources.to_json(),
    )
    history = {RUNS_NAME: encode_runs(job.history_runs)} if job.history_runs else {}
    manifest, encoded = encode(seal_files(manifest, history))  # records results.json's hashes
    return replace(job, manifest=manifest, files={manifest.log: data, **history, **encoded})


def write_step(job: Job) -> Job:
    """Archive the old set as .bak and publish the new one atomically; the resume
    journal is no longer needed."""
    assert job.manifest is not None
    if job.carried is not None:
        # Nothing was measured: the log and the run history stay, no .bak of them.
        folder = job.entry.logset.folder
        history = read_runs(folder, job.manifest.files)
        files = {**job.files, "README.md": render_readme(job.manifest, history).encode()}
        return replace(job, published=publish(folder, files, archive=False))
    published = write_set(job.entry.logset, job.manifest, job.files)
    shutil.rmtree(job.entry.logset.work_dir, ignore_errors=True)
    return replace(job, published=published)


# The re-tune of one entry, in order (nox-style: a tuple of steps, each Job -> Job).
BEFORE_LOCK = (check_host_step, preflight_step)
UNDER_LOCK = (recheck_step, check_names_step, load_step, history_step, carry_step, refused_step,
              tune_step, first_run_step, manifest_step, write_step)


def retune_entry(config: Config, entry: Entry, *, trials: int | None = None, seed: int | None = None,
                 say: Say = print, progress: Callable[[str], Callable[[Any], None]] | None = None,
                 budget: Budget | None = None, carry: bool = True) -> RetuneResult:
    """Re-tune one stale entry end to end: `BEFORE_LOCK`, then `UNDER_LOCK` while
    holding the folder's lock. Returns what was published. `carry`: a set whose
    programs the template's edit left alone is carried forward (`carry_step`)."""
    target = config.target(entry.target_name)
    job = Job(config, entry, target,
              trials=trials if trials is not None else config.trials_for(entry.operator),
              seed=seed if seed is not None else config.seed, say=say, progress=progress,
              threads=measure_threads(target), budget=budget, carry=carry)
    for step in BEFORE_LOCK:
        job = step(job)
    with _lock.hold(entry.logset.lock, f"{entry.operator}/{entry.target_name}"):
        for step in UNDER_LOCK:
            job = step(job)
    assert job.manifest is not None and job.published is not None
    return RetuneResult(entry, job.manifest, job.published)


def commit_message(results: Sequence[RetuneResult]) -> str:
    """The re-tune commit: per workload the best with its precision, the speedup
    against the default from the same finals, and what became of the previous best."""

    parts = []
    body = []
    for r in results:
        m = r.manifest
        if m.carried:
            parts.append(f"{m.operator} on {m.target_name} carried forward")
            body.append(f"- {m.operator}/{m.target_name}: carried forward unmeasured: {m.carried['sentence']}")
            continue
        parts.append(f"{m.operator} on {m.target_name}")
        for w, res in sorted(m.results.items()):
            if res.history is not None:

                for line in ReplayReport.from_json(res.history).sentences():
                    body.append(f"- {m.operator}/{m.target_name}/{w}: history: {line}")
            prev = ""
            if res.previous_best is not None and res.previous_verdict is not None:
                prev = f"; previous best {fmt_latency(res.previous_best.latency_s, res.previous_best.rel_halfwidth)}: " \
                       + previous_sentence(res.best_source, res.previous_verdict)
            t = m.trials[w]
            budget = f"; budget: {t.budget_note}" if t.budget_note else ""
            body.append(f"- {m.operator}/{m.target_name}/{w}: {t.run} trials ({t.stop_detail or t.stop_reason}{budget}), "
                        f"best {fmt_latency(res.best.latency_s, res.best.rel_halfwidth)} ({res.best.stage or 'measured'}), "
                        f"{res.speedup:.1f}x vs default{prev}")
    total = sum(sum(t.run for t in r.manifest.trials.values()) for r in results if not r.manifest.carried)
    speed = min((s for r in results for s in r.speedups().values()), default=1.0)
    head = f"tvmtune: re-tune {', '.join(parts)} ({total} trials, {speed:.1f}x vs default)"
    return head + "\n\n" + "\n".join(body) + ("\n\nLatencies: lower quartile of the samples ± half its 95% interval. "
            "Written by tvmtune-ci retune; logs only, this commit does not trigger a re-tune.\n")
