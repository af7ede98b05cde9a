"""Re-tuning one (operator, target) entry as a tuple of named steps.

    BEFORE_LOCK: check_host_step -> preflight_step (RPC)
    UNDER_LOCK:  recheck_step -> check_names_step -> load_step (the workloads resolved
                 once) -> history_step -> partial_step (only workloads changed: tune
                 those) -> carry_step -> refused_step -> tune_step (per
                 workload, the tuner's steps: correctness, baseline, search, finals) ->
                 first_run_step (the run history's first run) -> manifest_step -> write_step

Each step takes a `Job` (plain data: the config, the entry, the target, what earlier
steps found) and returns the next one; `retune_entry` runs them in order, holding the
log folder's lock for the second tuple. The thread count is part of the Job (its
policy, `tune/runners/threads.py`, is shared with `remeasure.py`). Printing
is the command's business: steps report through the `say` callback. Committing and
pushing come after every entry (`commands/retune.py`, `publish/gitwrite.py`).

Its parts, one job each: the data the steps pass (`pipeline/job.py`: `Job`), which log
is replayed (`pipeline/history.py`), tuning only the workloads that changed
(`pipeline/partial.py`) and seeding a new shape from its siblings (`pipeline/siblings.py`),
carrying a set forward (`pipeline/carry.py`), one
workload's request to the tuner (`pipeline/request.py`), the words (`pipeline/words.py`:
the history report, the previous best's sentence, the commit message). Their public
names are importable from here too.

The tuning side's modules (tuner, search, measure, builder, runners, hostcheck,
devices, priors) are imported at module level here, and so is `remeasure`.
`commands/retune.py` imports this module (through the package's face, lazily) only
when it re-tunes an entry: every command's `--help` imports `commands/retune.py`, and
this module's numpy is the [tune] extra's. TVM is another matter: the `tune/` modules
import it only inside the functions that build, run or measure, so importing this
module does not load it.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..check import sources
from ..check.fingerprint import SourceCache
from ..check.staleness import Entry, find_stale, installed_tvm_version
from ..core import history
from ..core import lock as _lock
from ..core.configschema import Config
from ..core.errors import DeviceError, HostError, LockError, TvmtuneError
from ..core.fsutil import sha256_bytes
from ..core.git.read import blob_id
from ..core.layout import LogSet
from ..core.manifest import Manifest, encode, seal_files
from ..core.profiles import RunnerPeak, model_shares_by_target, runner_peak
from ..core.records import make_log, render_log
from ..core.runs import RUNS_NAME, encode_runs, machine_words, parse_runs, read_runs
from ..core.stats import ESTIMATOR
from ..core.targetinfo import target_facts
from ..core.template import check_imported_agrees, import_template
from ..publish.readme import render_curve, render_readme
from ..publish.swap import Published, check_publishable, publish
from ..tune import calibration
from ..tune.builder import make_builder
from ..tune.devices import preflight
from ..tune.hostcheck import check_host, host_description, other_cpu
from ..tune.runners import make_runner
from ..tune.runners.threads import measure_threads, tvm_threads
from ..tune.tvmsetup import host_cpu
from ..tune.workload import resolve
from .carry import carry_step, may_carry
from .history import git_commit_of, history_source, old_records, tuned_with
from .job import History, Job, RetuneResult, Say, Template
from .partial import kept_runs, partial_step, removal_only
from .remeasure import RunItem, measure_runs
from .request import tune_one

if TYPE_CHECKING:
    from .budget import Budget


def write_set(logset: LogSet, manifest: Manifest, files: dict[str, bytes], peak: RunnerPeak | None = None) -> Published:
    """Archive the old set as .bak and publish `files` (the log, results.json and
    manifest.json of the sealed `manifest`) with the README and plot, atomically.
    `peak`: the runner's measured peak, which the README reads each best against."""
    history = parse_runs(files[RUNS_NAME], RUNS_NAME) if RUNS_NAME in files else []
    files = {**files, "README.md": render_readme(manifest, history, peak).encode()}
    curve = render_curve(manifest)
    if curve is not None:
        files["curve.png"] = curve
    return publish(logset.folder, files)


# --------------------------------------------------------------------------- the steps


def _refuse_unless_carried(job: Job, err: TvmtuneError) -> Job:
    if may_carry(job.entry, job.carry):
        job.say(f"{err}; only the template changed: trying to carry the set forward first, which measures nothing")
    elif removal_only(job.config, job.entry, job.carry):
        job.say(f"{err}; only workloads were removed: archiving their records measures nothing")
    else:
        raise err
    return replace(job, refusal=err)


def check_host_step(job: Job) -> Job:
    """A target this machine cannot measure is refused before anything else, unless
    only its template changed or only workloads were removed: a carry forward and an
    archive measure nothing, so any machine that can read the template can make them."""
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
    """Something to measure after all (not carried forward, or not only removals): the
    host check's or the tracker's refusal stands."""
    if job.refusal is not None and job.carried is None and not _measures_nothing(job):
        raise job.refusal
    return job


def _measures_nothing(job: Job) -> bool:
    """Only workloads were removed: the set is published from what was measured."""
    return job.partial is not None and not job.partial.tuned


def recheck_step(job: Job) -> Job:
    """Staleness again, under the lock: another run may have published since the
    caller looked, and its set is the previous one now."""

    e = job.entry
    report = find_stale(job.config, as_of=e.as_of, operators=[e.operator], targets=[e.target_name])
    current = next((x for x in report.entries if x.operator == e.operator and x.target_name == e.target_name), e)
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
    check_publishable(
        logset.folder,
        [logset.log_name(_dt.date.today().isoformat()), "manifest.json", "README.md", "curve.png", RUNS_NAME],
    )
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
    return replace(
        job,
        template=Template(path, decl, fp, module, sources.record(cache, decl, fp, job.target.target)),
        workloads=workloads,
    )


def history_step(job: Job) -> Job:
    """Which log is replayed (if any), its KNOBS declaration, and its records."""
    hist, hist_path, hist_from = history_source(job.config, job.entry, job.target, job.say)
    if hist is None:
        return job
    assert job.template is not None
    root = job.config.root
    tpl = job.template
    here = None
    if tuned_with(hist, job.entry.template_file, tpl.fingerprint.dependencies, tpl.decl.workloads):
        # The template as imported is the one the log was tuned with: decoded here.
        here = (tpl.module, job.workloads if dict(hist.target) == dict(job.target.target) else None)
    records = old_records(root, hist_path, hist, list(tpl.decl.workloads), job.say, here)
    return replace(job, history=History(hist, hist_path, hist_from, history.old_declaration(root, hist), records))


def tune_step(job: Job) -> Job:
    """Tune every workload (the tuner's steps: correctness, baseline, search with the
    history replay, finals), with the target's thread count."""
    if job.carried is not None or _measures_nothing(job):
        return job
    outcomes, results = {}, {}
    assert job.template is not None
    if job.target.rpc is None and (cpu := other_cpu(job.target.target)) is not None:
        job.say(
            f"warning: {job.entry.operator}/{job.target.name}: the target builds for "
            f"mcpu={job.target.target['mcpu']} and this machine's CPU is {cpu} "
            f"({machine_words(host_description())}): the log will hold this machine's timings "
            f"and ranking under {job.target.name}'s name. Re-tune it on a runner with that CPU "
            "(its runs-on labels in tvmtune.yaml), or give this CPU a target of its own"
        )
    names = list(job.template.decl.workloads)
    if job.partial is not None:  # the carried ones keep what they measured
        names = [w for w in names if w in job.partial.tuned]
    if job.budget is not None:  # the lightest first, as the budget orders every item
        order = job.budget.order()
        names.sort(
            key=lambda w: (
                order.index((job.entry.operator, job.target.name, w))
                if (job.entry.operator, job.target.name, w) in order
                else len(order)
            )
        )
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


def first_run_step(job: Job) -> Job:
    """The first run of the new set's history (runs.py): each new best, its default and
    the calibration kernels measured in turns, as every later `remeasure` measures them,
    so that the band a README states is of one kind of measurement from the start."""
    if job.carried is not None:  # its history goes on: the same programs
        return job
    assert job.template is not None
    kept: tuple[Any, ...] = ()
    config = job.config
    if job.partial is not None:
        # The carried workloads' history goes on; this run measures what changed, for
        # the seconds its kernels would have had in a run of the whole set, so each
        # kernel is visited as often as in any run of this history.
        kept = tuple(kept_runs(job))
        if not job.results:  # only removals: nothing new to measure
            return replace(job, history_runs=kept)
        cal = len(calibration.kernels(job.target.target) or [])
        whole = len(job.template.decl.workloads) + cal
        seconds = config.measure.history_s * (len(job.results) + cal) / whole
        job.say(
            f"the run of the history measures the {len(job.results)} tuned workload(s) for "
            f"{seconds:.0f} s of the {config.measure.history_s:g} s a run of all {whole} "
            "kernels takes (the same seconds per kernel); the carried ones' history goes on"
        )
        config = replace(config, measure=replace(config.measure, history_s=seconds))
    item = RunItem(
        job.entry.operator, job.template.module, {w: r.best.knobs for w, r in job.results.items()}, job.workloads
    )
    with tvm_threads(job.threads):
        runner = make_runner(config.measure, job.target.rpc)
        builder = make_builder()
        try:
            run = measure_runs([item], job.target, config, by="retune", runner=runner, builder=builder, say=job.say)[
                job.entry.operator
            ]
        finally:
            builder.close()
            runner.close()
    return replace(job, history_runs=(*kept, run))


def manifest_step(job: Job) -> Job:
    """The new set's log bytes and manifest (provenance), not yet written."""
    if job.carried is not None:  # carry_step wrote them
        return job
    entry, target, tpl = job.entry, job.target, job.template
    assert tpl is not None
    date = _dt.date.today().isoformat()
    log = make_log(entry.operator, target.target, list(job.outcomes.values()))
    results, trials = dict(job.results), {w: o.trials for w, o in job.outcomes.items()}
    tuned_on, partial = date, {}
    if job.partial is not None:
        # The carried workloads' entries, results and trials as they were measured, in
        # the template's order; the set's date stays the oldest measurement it holds, so
        # the age rule counts from it.
        old = entry.manifest
        assert old is not None
        new = log["workloads"]
        log["workloads"] = {
            w: job.partial.entries[w] if w in job.partial.carried else new[w] for w in tpl.decl.workloads
        }
        results = {w: old.results[w] if w in job.partial.carried else job.results[w] for w in tpl.decl.workloads}
        trials = {w: old.trials[w] if w in job.partial.carried else trials[w] for w in tpl.decl.workloads}
        tuned_on, partial = old.tuned_on, job.partial.to_json(date)
    data = render_log(log).encode()
    measure = {**vars(job.config.measure), "estimator": ESTIMATOR, "threads": job.threads or "TVM default"}
    seed = job.seed
    if _measures_nothing(job):
        # Every figure is the old set's: so are the machine, settings and seed that made them.
        assert entry.manifest is not None
        host, measure, seed = dict(entry.manifest.host), dict(entry.manifest.measure), entry.manifest.seed
    else:
        host = host_description()
        host["runner"] = f"rpc {target.rpc.key}@{target.rpc.tracker} x{target.rpc.devices}" if target.rpc else "local"
        if target.rpc is None and target.target.get("kind") == "llvm":
            host["llvm_cpu"] = host_cpu()  # beside the target's mcpu: the README shows a mismatch
        # Who measured the trials: "local", or each RPC server's "host:port".
        host["devices"] = sorted({d for o in job.outcomes.values() for d in o.devices})
    manifest = Manifest(
        operator=entry.operator,
        target_name=target.name,
        target=target.target,
        log=entry.logset.log_name(date),
        log_sha256=sha256_bytes(data),
        log_git_blob=blob_id(data),
        fingerprint=tpl.fingerprint.digest,
        dependencies=dict(tpl.fingerprint.dependencies),
        workloads=tpl.decl.workloads,
        tvm_version=installed_tvm_version() or "unknown",
        tuned_on=tuned_on,
        seed=seed,
        trials=trials,
        results=results,
        partial=partial,
        measure=measure,
        template_file=entry.template_file,
        template_commit=git_commit_of(job.config.root, tpl.path),
        host=host,
        target_facts=target_facts(target.target).to_json(),
        sources=tpl.sources.to_json(),
    )
    history = {RUNS_NAME: encode_runs(job.history_runs)} if job.history_runs else {}
    manifest, encoded = encode(seal_files(manifest, history))  # records results.json's hashes
    return replace(job, manifest=manifest, files={manifest.log: data, **history, **encoded})


def write_step(job: Job) -> Job:
    """Archive the old set as .bak and publish the new one atomically; the resume
    journal is no longer needed."""
    assert job.manifest is not None
    peak = runner_peak(job.config, job.entry.target_name)
    if job.carried is not None:
        # Nothing was measured: the log and the run history stay, no .bak of them.
        folder = job.entry.logset.folder
        history = read_runs(folder, job.manifest.files)
        files = {**job.files, "README.md": render_readme(job.manifest, history, peak).encode()}
        return replace(job, published=publish(folder, files, archive=False))
    published = write_set(job.entry.logset, job.manifest, job.files, peak)
    shutil.rmtree(job.entry.logset.work_dir, ignore_errors=True)
    return replace(job, published=published)


# The re-tune of one entry, in order (nox-style: a tuple of steps, each Job -> Job).
BEFORE_LOCK = (check_host_step, preflight_step)
UNDER_LOCK = (
    recheck_step,
    check_names_step,
    load_step,
    history_step,
    partial_step,
    carry_step,
    refused_step,
    tune_step,
    first_run_step,
    manifest_step,
    write_step,
)


def retune_entry(
    config: Config,
    entry: Entry,
    *,
    trials: int | None = None,
    seed: int | None = None,
    say: Say = print,
    progress: Callable[[str], Callable[[Any], None]] | None = None,
    budget: Budget | None = None,
    carry: bool = True,
) -> RetuneResult:
    """Re-tune one stale entry end to end: `BEFORE_LOCK`, then `UNDER_LOCK` while
    holding the folder's lock. Returns what was published. `carry`: a set whose
    programs the template's edit left alone is carried forward (`carry_step`)."""
    target = config.target(entry.target_name)
    shares = None
    if trials is None and config.trial_tiers:
        shares = model_shares_by_target(config, [target.name]).get(target.name)
    job = Job(
        config,
        entry,
        target,
        trials=trials if trials is not None else config.trials_for(entry.operator),
        seed=seed if seed is not None else config.seed,
        say=say,
        shares=shares,
        progress=progress,
        threads=measure_threads(target),
        budget=budget,
        carry=carry,
    )
    for step in BEFORE_LOCK:
        job = step(job)
    with _lock.hold(entry.logset.lock, f"{entry.operator}/{entry.target_name}"):
        for step in UNDER_LOCK:
            job = step(job)
    assert job.manifest is not None and job.published is not None
    return RetuneResult(entry, job.manifest, job.published)
