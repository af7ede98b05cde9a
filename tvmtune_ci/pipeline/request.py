"""One workload's tuning request built from the re-tune's `Job` (`tune_one`): the
previous best as a finalist, the history mapped and replayed, the budget's share and
its questions, the tuner's outcome and the manifest's result with its history report."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..core import history
from ..core.manifest import WorkloadResult
from ..core.runs import machine_words
from ..tune import priors
from ..tune.hostcheck import host_description
from ..tune.measure import workload_bytes
from ..tune.search import WARMUP_SAMPLES
from ..tune.tuner import TuneRequest, tune_workload
from .budget import floor_of, fmt_duration
from .history import can_reuse_previous, old_ranking_holds
from .job import Job, Say
from .siblings import SiblingSeed, is_new_shape, sibling_seed
from .words import previous_sentence, replay_report

if TYPE_CHECKING:
    from ..tune.runners import Runner
    from ..tune.tuner import TuneOutcome
    from .budget import Budget


@dataclass(frozen=True)
class Seeding:
    """Where one workload's search starts (`seeding`): the previous best's knobs as a
    finalist (`prev`), whether the old log's ranking holds on this machine (`holds`), a
    new shape's seed from its siblings (`seed`), the old configurations mapped onto the
    edited template to replay first (`mapped`) and what the edit did to the knobs
    (`diff`, None without a history).

    The cost model's prior, the old knobs and the old programs are asked of it while the
    request is built (`prior`, `old_knobs`, `old_programs`), after the budget's clock
    starts: their time counts in the workload's share."""

    prev: dict[str, Any] | None
    holds: bool
    seed: SiblingSeed | None
    mapped: list[history.Mapped]
    diff: history.KnobDiff | None

    def prior(self, job: Job, wname: str) -> tuple[tuple[dict[str, Any], float], ...]:
        """The records the cost model learns first: the siblings' for a seeded new shape,
        else the old log's mapped (without those replayed)."""
        hist, tpl = job.history, job.template
        assert tpl is not None
        return (
            self.seed.prior
            if self.seed is not None
            else priors.prior_for(
                hist.records.get(wname, []),
                tpl.decl.knobs,
                tpl.decl.workloads[wname],
                job.target.target,
                [m.knobs for m in self.mapped],
            )
            if hist is not None
            else ()
        )

    def old_knobs(self, job: Job) -> tuple[Any, ...] | None:
        # A new shape has no old search to stand, nor a region an edit opened.
        hist = job.history
        return (
            tuple(hist.old_knobs)
            if hist is not None and hist.old_knobs is not None and self.mapped and self.seed is None
            else None
        )

    def old_programs(self, job: Job, wname: str) -> tuple[tuple[dict[str, Any], str], ...]:
        # Another target's programs are other kernels whatever their modules: only this
        # target's own log, measured on this kind of runner, can stand for the edited
        # template (or rank old programs below its best in the finals).
        hist, tpl = job.history, job.template
        assert tpl is not None
        return (
            priors.old_programs(
                hist.records.get(wname, []), tpl.decl.knobs, tpl.decl.workloads[wname], job.target.target
            )
            if self.holds and hist is not None and self.seed is None
            else ()
        )


def seeding(job: Job, wname: str) -> Seeding:
    """Where `wname`'s search starts: the previous best as a finalist, or the history
    mapped onto the edited template (or a new shape seeded from its siblings); says which."""
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
        say(
            f"{wname}: {hist.manifest.log} was measured on {machine_words(hist.manifest.host)}, this machine "
            f"is {machine_words(host_description())}: its search does not stand here, and its programs are "
            "not left out of the finals"
        )
    # Another target's configurations are mapped through both targets' facts.
    source = job.config.target(hist.from_target).target if hist is not None and hist.from_target else None
    seed = None
    if hist is not None and is_new_shape(job, wname):
        try:
            seed = sibling_seed(job, wname)
        except Exception as e:  # a prior, never a reason to refuse
            say(f"{wname}: not seeded from its siblings ({type(e).__name__}: {e}); a cold search")
    if seed is not None and hist is not None:
        mapped = list(seed.mapped)
        diff = history.KnobDiff()
        say(f"{wname}: {seed.sentence(hist.manifest.log)}")
    elif hist is not None:
        old = history.old_configs(hist.manifest, wname)
        mapped = history.map_all(old, decl.knobs, wl, target.target, source)
        diff = history.knob_diff(
            hist.old_knobs, decl.knobs, wl, target.target, old_names=sorted({k for c in old for k in c})
        )
        why = f"seeded from {hist.from_target}" if hist.from_target else "template edited"
        say(
            f"{wname}: {why} ({diff.sentence()}); replaying {len(mapped)} configuration(s) of {hist.manifest.log} first"
        )
    return Seeding(prev, holds, seed, mapped, diff)


@dataclass(frozen=True)
class BudgetShare:
    """One workload's part of `retune --budget` (`budget_start`): its seconds and their
    note (None and "" without a budget), when it started, the budget left then, and its
    part of its set's history run."""

    seconds: float | None
    note: str
    t0: float
    left0: float
    history_s: float


def budget_start(job: Job, wname: str) -> BudgetShare:
    """The workload's share of the budget, asked as its search is about to start; says it."""
    budget_s, note, t0, left0 = None, "", time.monotonic(), 0.0
    # The entry's run history is measured after its workloads: each leaves its part.
    assert job.template is not None
    history_s = job.config.measure.history_s / max(1, len(job.template.decl.workloads))
    if job.budget is not None:
        left0 = job.budget.left_s()
        budget_s, note = job.budget.share((job.entry.operator, job.target.name, wname))
        budget_s -= history_s
        job.say(f"{wname}: budget: {note}")
    return BudgetShare(budget_s, note, t0, left0, history_s)


def budget_finish(job: Job, wname: str, share: BudgetShare, outcome: TuneOutcome) -> TuneOutcome:
    """Tell the budget what the workload took (and the floor it measured); the outcome
    with what it spent beside what it was given (for the README and the commit)."""
    if job.budget is None:
        return outcome
    took = time.monotonic() - share.t0
    history_s = share.history_s
    job.budget.finish(
        (job.entry.operator, job.target.name, wname), took, floor_of(took, outcome.stats, WARMUP_SAMPLES, history_s)
    )
    # What it spent beside what it was given, in the README and the commit.
    spent = f"; it took {fmt_duration(took)}" + (
        f" (and {fmt_duration(history_s)} of its set's history run after the set)" if history_s else ""
    )
    return replace(outcome, trials=replace(outcome.trials, budget_note=outcome.trials.budget_note + spent))


def tune_one(job: Job, wname: str, runner: Runner) -> tuple[TuneOutcome, WorkloadResult]:
    """One workload: the previous best as a finalist, or the history replayed; the
    tuner's outcome and the manifest's result, with the history report."""
    tpl = job.template
    assert tpl is not None
    seeds = seeding(job, wname)
    share = budget_start(job, wname)
    trials = job.trials
    if job.shares:
        trials, why = job.config.trials_of(job.entry.operator, wname, job.shares)
        job.say(f"{wname}: {trials} trials ({why})")
    outcome = tune_workload(tune_request(job, wname, runner, seeds, share, trials))
    outcome = budget_finish(job, wname, share, outcome)
    report = history_report(job, wname, seeds, outcome)
    return outcome, WorkloadResult(
        best=outcome.best,
        baseline=outcome.baseline,
        top=tuple(outcome.top[:10]),
        space_size=outcome.space_size,
        design_spaces=outcome.design_spaces,
        curve=tuple(outcome.curve),
        previous_best=outcome.previous,
        previous_verdict=outcome.previous_verdict,
        best_source=outcome.best_source,
        history=report.to_json() if report is not None else None,
        noise_check=outcome.noise_check,
        bytes_moved=workload_bytes(tpl.module, job.workloads[wname]),
        gpu=outcome.gpu,
    )


def tune_request(job: Job, wname: str, runner: Runner, seeds: Seeding, share: BudgetShare, trials: int) -> TuneRequest:
    """What the tuner is asked for `wname`: its seeding, its budget's share and questions."""
    entry, target, tpl, hist = job.entry, job.target, job.template, job.history
    assert tpl is not None
    item = (entry.operator, target.name, wname)
    return TuneRequest(
        template=tpl.module,
        workload_name=wname,
        workload=job.workloads[wname],
        target=target.target,
        trials=trials,
        batch_size=job.config.batch_size,
        seed=job.seed,
        early_stop=job.config.early_stop,
        measure=job.config.measure,
        work_dir=entry.logset.work_dir / wname,
        rpc=target.rpc,
        on_batch=job.progress(f"{entry.operator}/{entry.target_name}/{wname}") if job.progress else None,
        fingerprint=tpl.fingerprint.digest,
        previous_knobs=seeds.prev,
        warn=job.say,
        replay=tuple(m.knobs for m in seeds.mapped),
        prior=seeds.prior(job, wname),
        # Another target's log is a weaker prior: a head start, the cold rule ends it.
        warm_stop=hist is None or hist.from_target is None,
        old_knobs=seeds.old_knobs(job),
        old_programs=seeds.old_programs(job, wname),
        time_budget_s=share.seconds,
        budget_note=share.note,
        budget_more=None if job.budget is None else _budget_more(job.budget, item, share.history_s),
        budget_reshare=(
            None if job.budget is None else _budget_reshare(job.budget, item, share.left0, share.history_s, job.say)
        ),
        runner=runner,
    )


def history_report(job: Job, wname: str, seeds: Seeding, outcome: TuneOutcome) -> Any:
    """The history report of `wname` (None without a history), said line by line, and
    what became of the previous best."""
    say, hist, seed = job.say, job.history, seeds.seed
    report = None
    if seeds.diff is not None and hist is not None:
        report = replay_report(
            hist.manifest.log,
            seeds.mapped,
            seeds.diff,
            outcome,
            from_target=hist.from_target,
            siblings=seed.siblings if seed is not None else (),
        )
        for line in report.sentences():
            say(f"{wname}: history: {line}")
    # A seeded new shape: its report said what the mapped sibling best measured.
    if seed is None and outcome.previous_verdict is not None and outcome.previous is not None:
        say(f"{wname}: {previous_sentence(outcome.best_source, outcome.previous_verdict)}")
    elif seed is None and seeds.prev is not None:
        say(
            f"{wname}: the previous best could not be re-measured (its finals error is in the log); keeping this run's best"
        )
    return report


def _budget_more(
    budget: Budget, item: tuple[str, str, str], history_s: float
) -> Callable[[float, float, float], tuple[bool, str]]:
    """The search's question past its share (TuneRequest.budget_more), asked of the
    budget with the item's part of its set's history run added to what it needs."""

    def more(spent_s: float, gain_per_s: float, need_s: float) -> tuple[bool, str]:
        return budget.go_on(item, spent_s + history_s, gain_per_s, need_s + history_s)

    return more


def _budget_reshare(
    budget: Budget, item: tuple[str, str, str], left_s: float, history_s: float, say: Say
) -> Callable[[float], tuple[float, str] | None]:
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
