"""A re-tune that costs what changed (`partial_step`): when only the set's workloads
changed (added, removed, or their parameters), and its template, target and TVM did
not, only the added and changed workloads are tuned. The unchanged ones are carried:
their log entries, results and run history are kept as they were measured, and the
README and the commit say so. A removed workload's records leave the set with the old
log, archived as `.bak` like every replaced set.

The carried figures and the new ones must be one runner's, measured the same way, or
the set would publish two kinds of number side by side: so a set measured on another
machine, with another setting that changes what a figure means (`MEANING`; one this
module does not know counts as one), or from before format 2 is re-tuned whole
(`plan_partial` says why). Settings that do not (`NEUTRAL`: the search's, the runner's
gates, the length of a run of the history) may differ: the partial records their old
values. `retune --no-carry` (and `--all`) re-tune it whole too. A set that only lost
workloads measures nothing (`removal_only`): any machine may publish it, and its
manifest keeps the host and settings that measured every figure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..check.staleness import Entry
from ..core.configschema import Config, TargetConfig
from ..core.errors import CorruptFileError, TvmtuneError
from ..core.fsutil import sha256_bytes
from ..core.manifest import Manifest
from ..core.reasons import Code
from ..core.runs import Run, Window, read_runs, same_machine
from ..core.siblings import same_params
from ..core.stats import ESTIMATOR
from ..core.template import read_template
from ..tune.hostcheck import host_description
from .job import Job, Partial


def _normal(x: Any) -> Any:
    return json.loads(json.dumps(x, sort_keys=True))


# Which recorded measurement settings (the manifest's `measure`: MeasureOptions, plus
# the estimator and the threads) change what a measured figure means. The carried
# figures and this run's must agree on every one of these, or the whole set is re-tuned.
# The published figures are the finals' best and baseline (`results`: p25 to
# `precision` within `time_cap_s`) and the run history's (the fastest 1-s stretch
# of each kernel's visits, docs/measurement.md): what makes either one another number.
MEANING: Mapping[str, str] = {
    "estimator": "the statistic every figure is (the lower quartile, stats.ESTIMATOR)",
    "sample_ms": "the length of one sample: each sample is the mean of the runs that fill it, so it sets "
    "how much of the noise one sample averages, in the finals and in the history alike",
    "precision": "where the finals and the baseline stop sampling: the interval a published figure holds",
    "time_cap_s": "the other half of the finals' stopping rule: how many samples an unconverged figure "
    "comes from (the finals' time is time_cap_s per finalist)",
    "enable_cpu_cache_flush": "cold caches or warm: another latency of the same kernel",
    "threads": "the thread pool the kernels ran on: another latency of the same kernel",
}

# The settings that leave a figure's meaning alone: each changes how the search looks
# for a best, which runner may measure, or how long a run of the history lasts, but
# the figures that are published are measured by the rules above either way. A carried
# workload whose best another search found keeps that best and its figures, as when a
# re-tune keeps a previous best the search did not beat.
NEUTRAL: Mapping[str, str] = {
    "history_s": "the length of a run of the history, not how a figure is taken from it: every run "
    "records its own length (window_s), each workload's band comes from its own runs, and "
    "remeasure already extends a history at the current length",
    "search_precision": "search only: where a contender's sampling stops while the search ranks it (and "
    "the noise check, a search diagnostic recorded with its own interval); the finals re-measure",
    "search_cap_s": "search only: the seconds one contender is sampled; the finals re-measure",
    "race": "search only: when a contender is dropped as slower; the finals re-measure the best",
    "probe": "search only: the samples a contender gets before it may be raced",
    "finalists": "how many contenders the finals compare, each sampled by the same rule "
    "(precision within time_cap_s per finalist): which best wins, not what its figure is",
    "usable_precision": "a gate on the runner: a baseline that cannot reach it refuses the run; "
    "the figures of a run that goes on are taken by the same rule and state their own interval",
    "timeout_s": "a kill limit for a hung measurement, and at 0.6x how long a very slow kernel may "
    "sample on to reach the samples an interval needs: whether a figure is taken, not which statistic "
    "it is (a figure states the interval it reached, or none)",
}


def _recorded(config: Config, threads: int | None) -> dict[str, Any]:
    """The `measure` a manifest written by this run would record (pipeline.manifest_step)."""
    return _normal({**vars(config.measure), "estimator": ESTIMATOR, "threads": threads or "TVM default"})


def settings_unlike(old: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The recorded measurement settings that differ between `old` and `now` (a key one
    lacks differs): (those that refuse the carry, those that leave a figure's meaning
    alone). A setting in neither table refuses: what it does is not known here."""
    keys = sorted(k for k in set(old) | set(now) if _normal(old.get(k)) != _normal(now.get(k)))
    return [k for k in keys if k not in NEUTRAL], [k for k in keys if k in NEUTRAL]


def _measured_unlike(
    config: Config, target: TargetConfig, old: Manifest, threads: int | None
) -> tuple[str | None, dict[str, Any]]:
    """Why this run's figures would not be of the kind `old`'s are (None: they would), and
    the settings that differ without changing what a figure means (key -> the value
    `old` recorded; None where it recorded none)."""
    if target.rpc is None and not same_machine(host_description(), old.host):
        return "the set was measured on another machine: its figures and this run's would not be one runner's", {}
    now, was = _recorded(config, threads), _normal(dict(old.measure))
    refuse, neutral = settings_unlike(was, now)
    if refuse == ["threads"]:
        return "it was measured with another thread count", {}
    if refuse:
        known, unknown = [k for k in refuse if k in MEANING], [k for k in refuse if k not in MEANING]
        parts = ([", ".join(known)] if known else []) + (
            [f"{', '.join(unknown)}: not known to leave a figure's meaning alone"] if unknown else []
        )
        return f"the measurement settings changed since it was tuned ({'; '.join(parts)})", {}
    return None, {k: was.get(k) for k in neutral}


def plan_partial(
    config: Config,
    entry: Entry,
    target: TargetConfig,
    workloads: Mapping[str, Any],
    *,
    carry: bool = True,
    threads: int | None = None,
) -> Partial | str | None:
    """The partial re-tune of `entry` whose template now declares `workloads`; a string:
    why the set is re-tuned whole although only its workloads changed; None: not a
    workloads-only change. Without TVM (`retune --dry-run` asks it too)."""
    codes = {r.code for r in entry.reasons}
    if codes != {Code.WORKLOAD_CHANGED}:
        return None
    if not carry:
        return "--no-carry"
    old = entry.manifest
    if old is None or old.format < 2:
        return "the previous set's manifest is of format 1 (fixed-repeat means)" if old else None
    try:
        data = (entry.logset.folder / old.log).read_bytes()
        log = json.loads(data) if sha256_bytes(data) == old.log_sha256 else None
    except (OSError, ValueError):
        log = None
    if not isinstance(log, dict) or not isinstance(log.get("workloads"), dict):
        return f"its log {old.log} cannot be read as its manifest recorded it"
    old_wl = old.workloads
    carried = tuple(
        w
        for w in workloads
        if w in old_wl and same_params(old_wl[w], workloads[w]) and w in old.results and w in log["workloads"]
    )
    if not carried:
        return "no workload of the previous set is left unchanged"
    tuned = tuple(w for w in workloads if w not in carried)
    # What this run measures must be of the carried figures' runner and settings; a set
    # that only lost workloads measures nothing, on any machine.
    settings: dict[str, Any] = {}
    if tuned:
        unlike, settings = _measured_unlike(config, target, old, threads)
        if unlike:
            return unlike
    return Partial(
        tuned=tuned,
        changed=tuple(w for w in tuned if w in old_wl),
        carried=carried,
        removed=tuple(w for w in old_wl if w not in workloads),
        old_log=old.log,
        old_date=old.tuned_on,
        entries={w: log["workloads"][w] for w in carried},
        settings=settings,
    )


def removal_only(config: Config, entry: Entry, carry: bool = True) -> bool:
    """Whether a run would only archive workloads the template no longer declares (the
    `plan_partial` of its template has nothing to tune), known before the lock and
    without TVM: such a run measures nothing, so a host that cannot run the target may
    make it (`plan_partial` decides again under the lock)."""
    if {r.code for r in entry.reasons} != {Code.WORKLOAD_CHANGED}:
        return False  # no template to read: plan_partial would say None
    try:
        now = read_template(config.root / entry.template_file).workloads
    except TvmtuneError:
        return False
    plan = plan_partial(config, entry, config.target(entry.target_name), now, carry=carry)
    return isinstance(plan, Partial) and not plan.tuned


def partial_step(job: Job) -> Job:
    """Only the set's workloads changed: plan to tune the changed ones and carry the rest
    (`Partial`), or say why the whole set is re-tuned."""
    assert job.template is not None
    plan = plan_partial(
        job.config, job.entry, job.target, job.template.decl.workloads, carry=job.carry, threads=job.threads
    )
    if plan is None:
        return job
    if isinstance(plan, str):
        if plan != "--no-carry":
            job.say(f"every workload re-tuned: {plan}")
        return job
    job.say(f"partial re-tune: {plan.sentence()}")
    if job.budget is not None:
        for w in plan.carried:  # nothing measured: no floor, and no seconds taken
            job.budget.finish((job.entry.operator, job.target.name, w), 0.0)
    return replace(job, partial=plan)


def kept_runs(job: Job) -> list[Run]:
    """The previous set's run history without the workloads that left it or changed:
    the carried workloads' history goes on; a changed one's figures were of another
    kernel (they stay in the archived set)."""
    assert job.partial is not None and job.entry.manifest is not None
    keep = set(job.partial.carried)
    try:
        runs = read_runs(job.entry.logset.folder, job.entry.manifest.files)
    except CorruptFileError as e:
        job.say(f"the carried workloads' run history starts again: {e}")
        return []
    return [
        replace(
            r,
            workloads={w: f for w, f in r.workloads.items() if w in keep},
            windows=tuple(
                Window({w: f for w, f in x.workloads.items() if w in keep}, dict(x.calibration)) for x in r.windows
            ),
        )
        for r in runs
    ]
