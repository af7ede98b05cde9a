"""A re-tune that costs what changed (`partial_step`): when only the set's workloads
changed (added, removed, or their parameters), and its template, target and TVM did
not, only the added and changed workloads are tuned. The unchanged ones are carried:
their log entries, results and run history are kept as they were measured, and the
README and the commit say so. A removed workload's records leave the set with the old
log, archived as `.bak` like every replaced set.

The carried figures and the new ones must be one runner's, measured the same way, or
the set would publish two kinds of number side by side: so a set measured on another
machine, with other measurement settings, or from before format 2 is re-tuned whole
(`plan_partial` says why). `retune --no-carry` (and `--all`) re-tune it whole too.
A set that only lost workloads measures nothing (`removal_only`): any machine may
publish it, and its manifest keeps the host and settings that measured every figure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .check.staleness import Entry
from .core.config import Config, TargetConfig
from .core.errors import CorruptFileError, TvmtuneError
from .core.fsutil import sha256_bytes
from .core.manifest import Manifest
from .core.reasons import Code
from .core.runs import Run, Window, read_runs, same_machine
from .core.siblings import same_params
from .core.stats import ESTIMATOR
from .core.template import read_template
from .pipeline_job import Job
from .tune.hostcheck import host_description


@dataclass(frozen=True)
class Partial:
    """Which of a set's workloads a re-tune searches, which it carries, and which left
    the set; the old log's entries of the carried ones, as they were."""

    tuned: tuple[str, ...]  # added or changed: searched (the siblings seed them)
    changed: tuple[str, ...]  # of `tuned`, those whose parameters changed
    carried: tuple[str, ...]  # unchanged: log entries, results and run history kept
    removed: tuple[str, ...]  # no longer declared: archived with the old log
    old_log: str  # the previous set's log file
    old_date: str  # when the previous set was tuned
    entries: dict[str, Any]  # carried workload -> its entry in the old log, as parsed

    def sentence(self) -> str:
        """What the re-tune did with each workload, in words (README, commit, console)."""
        added = [w for w in self.tuned if w not in self.changed]
        parts = []
        if added:
            parts.append(f"added {', '.join(added)}")
        if self.changed:
            parts.append(f"parameters changed: {', '.join(self.changed)}")
        if self.removed:
            parts.append(f"removed {', '.join(self.removed)}")
        out = f"only workloads changed ({'; '.join(parts)})"
        if self.tuned:
            out += f": tuned {', '.join(self.tuned)}"
        out += (
            f"; carried unmeasured from {self.old_log} (tuned {self.old_date}): "
            f"{', '.join(self.carried)}, whose template, target, TVM and parameters did not "
            "change (their records, figures and run history are kept)"
        )
        if self.removed:
            out += (
                f"; the records of {', '.join(self.removed)} stay in {self.old_log}, archived "
                "beside the new log as a .bak file"
            )
        return out

    def to_json(self, on: str) -> dict[str, Any]:
        return {
            "on": on,
            "tuned": list(self.tuned),
            "changed": list(self.changed),
            "carried": list(self.carried),
            "removed": list(self.removed),
            "from_log": self.old_log,
            "from_date": self.old_date,
            "sentence": self.sentence(),
        }


def _normal(x: Any) -> Any:
    return json.loads(json.dumps(x, sort_keys=True))


def _settings(measure: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in measure.items() if k != "threads"}


def _measured_unlike(config: Config, target: TargetConfig, old: Manifest, threads: int | None) -> str | None:
    """Why this run's figures would not be of the kind `old`'s are (None: they would)."""
    if target.rpc is None and not same_machine(host_description(), old.host):
        return "the set was measured on another machine: its figures and this run's would not be one runner's"
    now = _settings({**vars(config.measure), "estimator": ESTIMATOR})
    if _normal(_settings(old.measure)) != _normal(now):
        keys = sorted(
            k for k in set(now) | set(_settings(old.measure)) if _normal(now.get(k)) != _normal(old.measure.get(k))
        )
        return f"the measurement settings changed since it was tuned ({', '.join(keys)})"
    if old.measure.get("threads") != (threads or "TVM default"):
        return "it was measured with another thread count"
    return None


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
    if tuned and (unlike := _measured_unlike(config, target, old, threads)):
        return unlike
    return Partial(
        tuned=tuned,
        changed=tuple(w for w in tuned if w in old_wl),
        carried=carried,
        removed=tuple(w for w in old_wl if w not in workloads),
        old_log=old.log,
        old_date=old.tuned_on,
        entries={w: log["workloads"][w] for w in carried},
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
