"""The driver: tune one workload of an operator template, step by step.

`tune_workload(req)` runs these steps, each a function of its own:

1. `check_correct`: the default configuration against `reference` (TuningError first).
2. the noise check: can this runner rank the search's contenders? A cold run takes
   the best contender of the search's first batch (`first_batch_noise_check`), a
   re-tune with history the old best as its replay measured it (`replay_noise_check`);
   short of `usable_precision`, or on a resume, `measure_baseline` samples the default.
3. the search (`search.Search`): a history replay and the old log's records first
   when the template was edited, then MetaSchedule's `EvolutionarySearch` with an
   `XGBModel`, batch by batch, resumable from its journal (`journal.py`). When the
   edit changed none of the programs the old log measured (`old_search_stands`),
   the replay only: the old search stands.
4. the finals (`measure.finals`): the search's top `finalists`, the default
   configuration and the previous best (when given) re-measured in interleaved
   rounds; the winner is chosen on that data and its numerics checked. A previous
   best that is equal within noise is kept. When the old search stands, the previous
   best and the default only (`run_finals`); after other edits that left the old best's
   program unchanged, the search's finalists that are old programs are left out
   (`_new_programs`).
5. the outcome: the log's records (each on the finals' scale), the top table, the
   curve and the verdict on the previous best.

The history replay of step 3 (`replay_history`) is `replay.py`; steps 4 and 5's data
work (`run_finals`, `assemble`) is `finals.py`.

How knobs map to MetaSchedule traces (and back) is `space.py`.

Importing this module does not import TVM.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core import stats
from ..core.errors import TuningError
from ..core.manifest import Measured, Trials
from ..core.template import template_name
from ..core.tunetypes import BatchEvent, ReplayStats, Trial, TuneOutcome
from . import tvmsetup
from .builder import Builder, make_builder, schedule_config
from .failures import failure_kinds
from .finals import FinalsOutcome, assemble, run_finals
from .gpubuild import gpu_resources
from .measure import full_knobs, measure_baseline, measured
from .numerics import check_correct
from .programs import old_search_stands
from .replay import replay_history
from .request import TuneRequest
from .runners import Runner, make_runner
from .search import Search, SearchResult
from .space import knobs_key
from .workload import Workload, resolve

__all__ = ["BatchEvent", "ReplayStats", "TuneOutcome", "TuneRequest", "tune_workload"]

TOP_N = 10


# --------------------------------------------------------------------------- API types


# --------------------------------------------------------------------------- the steps


def _noise_check(
    est: stats.Estimate | None, knobs: Mapping[str, Any] | None, flop: float, measure: Any, stage: str
) -> Measured | None:
    """A contender's estimate as the noise check, when its interval is within
    `measure.usable_precision` (else None: the default is sampled, which samples on and
    stops a runner too noisy to rank)."""
    if est is None or knobs is None or not est.rel_halfwidth <= measure.usable_precision:
        return None
    stopped = "converged" if est.rel_halfwidth <= measure.search_precision else "time_cap"
    return measured(knobs, est, flop, stage, stopped)


def replay_noise_check(
    est: stats.Estimate | None, knobs: Mapping[str, Any], flop: float, measure: Any
) -> Measured | None:
    """The noise check of a re-tune with history: the old best as its replay measured it,
    before the search. The search judges candidates near the old best, so the noise
    around it is the one that matters; the default, often far slower, took a 1024^3
    matmul 3.5-12 s (bench_warmstart runs D and E, Zen 4) and is measured in the finals
    anyway."""
    return _noise_check(est, knobs, flop, measure, "replay")


def first_batch_noise_check(
    est: stats.Estimate | None,
    knobs: Mapping[str, Any] | None,
    flop: float,
    measure: Any,
    warn: Callable[[str], None] | None = None,
    where: str = "",
) -> Measured | None:
    """The noise check of a cold run: the best contender of the search's first batch
    (sampled to `measure.search_precision`, none raced: there is no incumbent yet).
    Sampling the default first held the first trial back by 2.5 s (conv2d, 55-128 ms a
    run) and 5.8 s (a 1024^3 matmul, 283-312 ms) on a Zen 4 (bench_first_trial run 2),
    and the contenders are nearer what the search ranks; the finals measure the default
    anyway. Between `search_precision` and `usable_precision`, `warn` is told and tuning
    goes on."""
    got = _noise_check(est, knobs, flop, measure, "first_batch")
    if got is not None and got.stopped == "time_cap" and warn is not None:
        assert est is not None
        # As many decimals as tell the two apart ("±3.0%, short of ±3.0%" read as a bug).
        d = next((d for d in (1, 2, 3) if f"{est.rel_halfwidth:.{d}%}" != f"{measure.search_precision:.{d}%}"), 3)
        warn(
            f"{where}: noisy runner: the best of the search's first batch reached "
            f"±{est.rel_halfwidth:.{d}%}, short of measure.search_precision "
            f"±{measure.search_precision:.{d}%}, the precision the search ranks at; tuning goes on "
            f"(within measure.usable_precision ±{measure.usable_precision:.1%}; the finals "
            "decide side by side)"
        )
    return got


@dataclass(frozen=True)
class _Tuned:
    """What the steps through the finals hand the outcome (`_outcome`)."""

    req: TuneRequest  # its previous best as the replay left it
    wl: Workload
    search: Search
    result: SearchResult
    fin: FinalsOutcome
    extra: dict[str, list[Any]]  # the record JSON of a winner the search did not measure, by role
    noise: Measured
    replay: ReplayStats | None


def tune_workload(req: TuneRequest) -> TuneOutcome:
    """Tune one workload; see the module docstring for the steps."""
    t_start = time.perf_counter()
    tvmsetup.load()
    req, wl = _resolved(req)
    stats_: dict[str, float] = {}
    own_runner = req.runner is None
    runner = _runner_of(req)
    retries0 = len(getattr(runner, "retries", None) or ())
    builder = None
    try:
        # Built libraries live in work_dir (each is deleted once measured), so a killed
        # run leaves nothing behind that the caller's removal of work_dir does not remove.
        builder = make_builder(str(Path(req.work_dir) / "artifacts"))
        tuned = _tune(req, wl, builder, runner, t_start, stats_)
    finally:
        if builder is not None:
            builder.close()
        if own_runner:
            runner.close()
    return _outcome(tuned, runner, retries0, t_start, stats_)


def _lap(stats_: dict[str, float], key: str, t0: float) -> float:
    """`stats_[key]`: the seconds since `t0`; returns now."""
    now = time.perf_counter()
    stats_[key] = now - t0
    return now


def _resolved(req: TuneRequest) -> tuple[TuneRequest, Workload]:
    """The request checked, with one resolved workload for the whole run: everything
    below takes its parameters, module and FLOP count from it (workload.Workload)."""
    if req.trials < 1 or req.batch_size < 1:
        raise TuningError(f"trials ({req.trials}) and batch_size ({req.batch_size}) must be positive")
    wl = req.workload
    if wl is None:
        wl = resolve(req.template, req.workload_name, req.target)
        req = replace(req, workload=wl)
    return req, wl


def _runner_of(req: TuneRequest) -> Runner:
    """The request's runner, set to its measuring options, or a new one."""
    if req.runner is None:
        return make_runner(req.measure, req.rpc)  # its worker starts while we check numerics
    runner = req.runner
    runner.set_options(req.measure)
    return runner


def _tune(
    req: TuneRequest, wl: Workload, builder: Builder, runner: Runner, t_start: float, stats_: dict[str, float]
) -> _Tuned:
    """Steps 1 to 4: the numerics, the noise check, the search, the finals."""
    check_correct(req.template, wl, req.target, rpc=req.rpc)  # 1
    t = _lap(stats_, "correctness_s", t_start)
    # An edit that changed no program the old log measured: its search stands, and no
    # search runs (the replay and the finals re-measure its best).
    stands = old_search_stands(req, wl)
    t = _lap(stats_, "stands_s", t)
    search = Search(req, builder, runner, t_start)  # 3 + 4
    t = _lap(stats_, "setup_s", t)
    stats_["resumed"] = float(search.resumed)

    def sample_default() -> Measured:
        return measure_baseline(req.template, wl, req.target, req.measure, runner=runner, warn=req.warn)

    req, early, replay, stands = _before_search(req, wl, search, stands, sample_default, stats_, t)
    result, noise = _search(req, wl, search, stands, early, sample_default, stats_)
    t = time.perf_counter()
    entries = result.trials
    fin = run_finals(req, entries, runner, builder, stands=result.stood)  # 5
    _lap(stats_, "finals_s", t)
    if replay is not None and fin.left_out:
        replay = replace(replay, finals_left_out=fin.left_out)
    extra = _unsearched_winner(req, wl, search, entries, fin)
    return _Tuned(req, wl, search, result, fin, extra, noise, replay)


def _before_search(
    req: TuneRequest,
    wl: Workload,
    search: Search,
    stands: str | None,
    sample_default: Callable[[], Measured],
    stats_: dict[str, float],
    t: float,
) -> tuple[TuneRequest, Measured | None, ReplayStats | None, str | None]:
    """What comes before the search's first batch: the noise check (2) where it does not
    wait for that batch, the old log's prior and the history replay. Returns the request
    with the old best as a finalist only if it works, the noise check (None: a cold run
    takes it after the first batch, `_search`), the replay's counts, and why the old
    search stands (None unless the replay measured its best here)."""
    # The noise check (2): a resumed run (its first batch and replay are in the
    # journal) samples the default; a re-tune with history takes the replay's old
    # best, a cold run its first batch's best contender (`_search`).
    noise = sample_default() if search.resumed else None
    t = _lap(stats_, "baseline_s", t)
    # The old log's other records teach the cost model before anything is measured
    # (also on a resume: the model is not saved).
    n_prior = search.train_prior(req.prior) if req.prior else 0
    t = _lap(stats_, "prior_s", t) if req.prior else t
    replay = None
    if req.replay:
        replay = replay_history(req, wl, search.replay, search.store.trials if search.resumed else None)
        if not search.resumed:
            t = _lap(stats_, "replay_s", t)
        replay = replace(replay, prior=n_prior)
        if not replay.old_best_correct:  # the old best is a finalist only if it works
            req = replace(req, previous_knobs=None)
        elif req.previous_knobs is None:
            req = replace(req, previous_knobs=dict(req.replay[0]))
    if noise is None and replay is not None and replay.old_best_correct:
        noise = replay_noise_check(
            search.old_best, full_knobs(req.template, wl, req.replay[0], req.target), search.flop, req.measure
        )
    if noise is None and req.replay:  # the old best computes wrong now, or its replay was too noisy
        noise = sample_default()
        _lap(stats_, "baseline_s", t)
    # The old search stands only where the replay measured its best here.
    if not (stands and replay is not None and replay.old_best_correct and not search.resumed):
        stands = None
    return req, noise, replay, stands


def _search(
    req: TuneRequest,
    wl: Workload,
    search: Search,
    stands: str | None,
    noise: Measured | None,
    sample_default: Callable[[], Measured],
    stats_: dict[str, float],
) -> tuple[SearchResult, Measured]:
    """The search (3), and the noise check (2) when it was left to the search's first
    batch (`noise` None) or the search measured nothing."""

    def first_batch_noise() -> None:
        nonlocal noise
        t0 = time.perf_counter()
        p = search.progress
        noise = (
            first_batch_noise_check(
                p.best,
                full_knobs(req.template, wl, p.best_knobs, req.target) if p.best_knobs else None,
                search.flop,
                req.measure,
                req.warn,
                f"{template_name(req.template)}/{req.workload_name}",
            )
            or sample_default()
        )
        stats_["baseline_s"] = stats_.get("baseline_s", 0.0) + time.perf_counter() - t0

    result = search.run(stands, after_first_batch=first_batch_noise if noise is None else None)
    if noise is None:  # the search measured nothing (a zero budget, an exhausted space)
        noise = sample_default()
    stats_.update(result.stats)
    return result, noise


def _unsearched_winner(
    req: TuneRequest, wl: Workload, search: Search, entries: Sequence[Trial], fin: FinalsOutcome
) -> dict[str, list[Any]]:
    """The records of finalists that are not search trials (the default or the
    previous best winning, unless replayed), made from their schedules."""
    extra: dict[str, list[Any]] = {}
    searched = {knobs_key(e["knobs"]) for e in entries}
    for r in fin.results:
        if r.finalist.role != "search" and r is fin.winner and r.finalist.key not in searched:
            sch = schedule_config(req.template, wl, r.finalist.knobs, req.target)
            extra[r.finalist.role] = search.record_json(sch)
    return extra


def _outcome(tuned: _Tuned, runner: Runner, retries0: int, t_start: float, stats_: dict[str, float]) -> TuneOutcome:
    """Step 5: the finals assembled (`finals.assemble`), the GPU resources of the best,
    the devices used, and the outcome."""
    req, wl, result, fin = tuned.req, tuned.wl, tuned.result, tuned.fin
    template, entries = req.template, result.trials
    flop = tuned.search.flop
    a = assemble(
        entries, fin, tuned.extra, flop, tuned.noise, full=lambda knobs: full_knobs(template, wl, knobs, req.target)
    )
    gpu = gpu_resources(template, wl, req.target, a.best.knobs)
    devices = tuple(sorted({d for e in entries if not e["error"] and (d := e.get("device"))}))
    stats_["devices_used"] = float(len(devices))
    stats_["device_retries"] = float(len(getattr(runner, "retries", None) or ()) - retries0)
    stats_["total_s"] = time.perf_counter() - t_start
    return TuneOutcome(
        workload_name=req.workload_name,
        records=a.records,
        best=a.best,
        baseline=a.baseline,
        top=tuple(a.top[:TOP_N]),
        trials=_trials(req, entries, result),
        curve=result.curve,
        space_size=result.space_size,
        design_spaces=result.design_spaces,
        noise_check=tuned.noise,
        workload_json=result.workload_json,
        flop=flop,
        stats=stats_,
        devices=devices,
        previous=a.previous,
        previous_verdict=a.previous_verdict,
        best_source=fin.winner.finalist.role,
        final_results=tuple(a.final_results),
        replay=tuned.replay,
        gpu=gpu,
    )


def _trials(req: TuneRequest, entries: Sequence[Trial], result: SearchResult) -> Trials:
    """The trials' counts, and why the search stopped."""
    return Trials(
        requested=req.trials,
        run=len(entries),
        valid=len(entries) - sum(e["error"] is not None for e in entries),
        failed=sum(e["error"] is not None for e in entries),
        stop_reason=result.reason,
        stop_detail=result.detail,
        budget_note=result.budget_note,
        failures=failure_kinds(entries),
    )
