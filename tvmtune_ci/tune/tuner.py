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
from .builder import Builder, make_builder
from .failures import failure_kinds
from .measure import Finalist, FinalResult, finals, full_knobs, gflops, measure_baseline, measured
from .numerics import check_correct
from .programs import old_search_stands
from .request import TuneRequest
from .runners import Runner, make_runner
from .search import Search
from .space import knobs_key
from .workload import Workload, resolve

__all__ = ["BatchEvent", "ReplayStats", "TuneOutcome", "TuneRequest", "tune_workload"]

TOP_N = 10


# --------------------------------------------------------------------------- API types


# --------------------------------------------------------------------------- the steps


def _valid_sorted(entries: Sequence[Trial]) -> list[Trial]:
    return sorted(
        (e for e in entries if e["error"] is None), key=lambda e: (e["latency_s"], e["trial"])
    )


def _all_failed(where: str, entries: Sequence[Trial]) -> TuningError:
    errors = sorted({e["error"].splitlines()[0][:200] for e in entries if e["error"]})
    return TuningError(
        f"{where}: every one of {len(entries)} trials failed; first errors: "
        + "; ".join(errors[:3])
        + "; fix the template's schedule() for those knob values"
    )


@dataclass
class _FinalsOutcome:
    results: list[FinalResult]
    winner: FinalResult
    tied: set[int]  # indexes into results: equal within noise to a kept previous best
    # The search's finalists left out as programs the old log measured (`_new_programs`).
    left_out: int = 0


def _new_programs(req: TuneRequest, wl: Workload, keys: list[str], by_key: Mapping[str, Trial],
                  entries: Sequence[Trial]) -> tuple[list[str], int]:
    """The search's finalists (`keys`) less those that are programs the old log measured,
    unchanged by the edit, and how many were left out. The old log's search and finals
    ranked them below its best on this target; when the edit left that best's program
    unchanged too, measuring them again only re-rolls the noise (as when the whole old
    search stands: `run_finals`), and the finals' question is whether a program the old
    search never measured beats it. Each finalist costs the finals up to `time_cap_s`,
    and a warm run's top is mostly the replayed old configurations. At least one search
    finalist stays, the verdict compares it with the previous best: the best new program
    of the whole search, else the first finalist (the search measured only old ones)."""
    from .programs import same_program

    assert req.previous_knobs is not None
    template, target = req.template, req.target
    old = {knobs_key(full_knobs(template, wl, kv, target)): key for kv, key in req.old_programs if key}

    def measured_before(knobs: Mapping[str, Any]) -> bool:
        key = old.get(knobs_key(full_knobs(template, wl, knobs, target)))
        return key is not None and same_program(template, wl, target, knobs, key)

    if not measured_before(req.previous_knobs):
        return keys, 0  # the edit changed the old best's program: the old ranking is moot
    kept = [k for k in keys if not measured_before(by_key[k]["knobs"])]
    if not kept:
        best_new = next((knobs_key(e["knobs"]) for e in _valid_sorted(entries)
                         if not measured_before(e["knobs"])), None)
        kept = [best_new] if best_new is not None else keys[:1]
    return kept, len([k for k in keys if k not in kept])


def _decide(results: Sequence[FinalResult]) -> tuple[FinalResult | None, set[int]]:
    """The winner: the lowest estimate, except that a previous best equal to it within
    noise is kept (a re-tune switches only for a difference outside the noise)."""
    ok = [r for r in results if r.estimate is not None and r.error is None]
    if not ok:
        return None, set()
    lead = min(ok, key=lambda r: r.estimate.value)  # type: ignore[union-attr]
    prev = next((r for r in ok if r.finalist.role == "previous"), None)
    if prev is None or prev is lead:
        return lead, set()
    assert prev.estimate is not None and lead.estimate is not None
    if stats.compare(lead.estimate, prev.estimate) != "equal":
        return lead, set()
    tied = {
        i for i, r in enumerate(results)
        if r in ok and r is not prev and r.estimate.value < prev.estimate.value  # type: ignore[union-attr]
    }
    return prev, tied


def run_finals(
    req: TuneRequest, entries: list[Trial], runner: Runner, builder: Builder, *, stands: bool = False
) -> _FinalsOutcome:
    """The search's top `finalists`, the default and the previous best, interleaved;
    the winner's numerics checked (a wrong one becomes a failed trial and the next
    is taken).

    When the old search stands (`stands`: the edit changed none of the programs the old
    log measured, `programs.old_search_stands`), the field is the previous best and the
    default only. The old log's finals already ranked these same programs side by side
    on this target; its runners-up, replayed, would only re-roll that noise (and with
    four of them, a kept best lost to one by chance now and then). The previous best is
    re-measured for a fresh figure and the default for the speedup. Six finalists took
    13.0-13.5 s of a 26-27-s no-op re-tune on a noisy Zen 3 (bench_warmstart run H, 2 s
    each, time-capped); these two 7.7-7.9 s in a quiet stretch, against 9.9-11.4 s for
    six (runs I-K, docs/benchmarks.md).

    Otherwise, when the edit left the old best's program unchanged, the search's
    finalists that are programs the old log measured are left out for the same reason
    (`_new_programs`)."""
    template, name = req.template, req.workload_name
    wl = req.workload if req.workload is not None else resolve(template, name, req.target)
    where = f"{template_name(template)}/{name}"
    by_key = {knobs_key(e["knobs"]): e for e in entries if e["error"] is None}
    keys = [knobs_key(e["knobs"]) for e in _valid_sorted(entries)[: req.measure.finalists]]
    if not keys:
        raise _all_failed(where, entries)
    prev_key = "previous"
    if req.previous_knobs is not None:
        # A re-tune with history replayed the old best as a search trial: measured once
        # here, as the previous best, not twice (the same kernel took a finalist's
        # share of the finals, and the verdict compared it with itself). The verdict
        # then asks the question it is for: did the search find anything better?
        # Its record is found among all the trials (it need not be in the search's top);
        # at least one search finalist stays: the verdict compares one with it.
        prev_full = full_knobs(template, wl, req.previous_knobs, req.target)
        if stands:
            keys = []
        same = next((k for k, e in by_key.items()
                     if full_knobs(template, wl, e["knobs"], req.target) == prev_full), None)
        if same is not None and (same not in keys or len(keys) > 1):
            if same in keys:
                keys.remove(same)
            prev_key = same
    left_out = 0
    if req.previous_knobs is not None and req.old_programs and keys:
        keys, left_out = _new_programs(req, wl, keys, by_key, entries)
    finalists = [Finalist("search", by_key[key]["knobs"], key) for key in keys]
    finalists.append(Finalist("default", None, "default"))
    if req.previous_knobs is not None:
        finalists.append(Finalist("previous", dict(req.previous_knobs), prev_key))
    results = finals(template, wl, req.target, finalists, req.measure,
                     runner=runner, builder=builder)
    while True:
        winner, tied = _decide(results)
        if winner is None:
            raise TuningError(
                f"{where}: no finalist could be measured; first errors: "
                + "; ".join(sorted({str(r.error)[:200] for r in results if r.error})[:3])
            )
        if winner.finalist.role == "default":
            return _FinalsOutcome(results, winner, tied, left_out)
        try:
            check_correct(template, wl, req.target, winner.finalist.knobs, rpc=req.rpc)
            return _FinalsOutcome(results, winner, tied, left_out)
        except TuningError as err:
            if winner.finalist.key in by_key:  # a search trial (or the replayed previous best)
                e = by_key.pop(winner.finalist.key)
                e["error"], e["latency_s"] = f"wrong result: {err}", None
            results = [
                r if r is not winner else FinalResult(r.finalist, None, error=f"wrong result: {err}")
                for r in results
            ]


def _noise_check(est: stats.Estimate | None, knobs: Mapping[str, Any] | None, flop: float,
                 measure: Any, stage: str) -> Measured | None:
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
    est: stats.Estimate | None, knobs: Mapping[str, Any] | None, flop: float, measure: Any,
    warn: Callable[[str], None] | None = None, where: str = "",
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
class Assembled:
    """The finals turned into what the log and the manifest say (`assemble`)."""

    records: list[Trial]  # every trial on the finals' scale, plus a winner not searched
    best: Measured
    baseline: Measured  # the default in the finals (else the noise check's, when it was the default)
    previous: Measured | None
    top: list[Measured]  # best first, the other finalists, then the search's on the finals' scale
    final_results: tuple[dict[str, Any], ...]
    previous_verdict: str | None  # this run's best search finalist vs the previous best


def assemble(
    entries: Sequence[Trial], fin: _FinalsOutcome, extra: Mapping[str, Any], flop: float,
    noise: Measured | None, full: Callable[[Mapping[str, Any] | None], dict[str, Any]],
) -> Assembled:
    """Plain data work after the finals: the search's trials put on the finals' scale,
    the finalists' records given their finals estimates (a search finalist tied with a
    kept previous best at the kept value), the winner's record added when the search did
    not measure it (`extra`: its record JSON by role), the top table and the verdict of
    this run's best against the previous best. `full` fills a configuration's defaults."""
    records = [e.copy() for e in entries]
    rec_by_key = {knobs_key(e["knobs"]): e for e in records}
    # The search's numbers and the finals' come from different minutes of a machine
    # whose speed drifts. The log ranks them in one list (TVM's), so a configuration
    # left out of the finals is logged on the finals' scale: its search estimate x
    # (the winner's finals estimate / the best search estimate). The best is usually a
    # finalist's; when it is not (an old program left out, `_new_programs`, or the old
    # search's runners-up when it stands), that record is logged at the winner's value,
    # after it (finals sort first at a tie): nothing left out overtakes the winner in the
    # list TVM takes its best from, and the search's order is kept.
    assert fin.winner.estimate is not None
    searched = [e["latency_s"] for e in records if e["error"] is None and e["latency_s"] is not None]
    scale = fin.winner.estimate.value / min(searched) if searched else 1.0
    # Records the finals give a figure (one that failed there keeps its search figure, scaled).
    final_keys = {r.finalist.key for r in fin.results if r.finalist.key in rec_by_key and r.estimate is not None}
    for e in records:
        lat = e["latency_s"]  # set whenever `error` is None
        if e["error"] is None and lat is not None and knobs_key(e["knobs"]) not in final_keys:
            e["measured_s"], e["scale"] = lat, scale
            # x * (winner / x_min) is the winner's value for x_min only up to rounding
            # (one ulp below it once in CI): never below it.
            logged = max(lat * scale, fin.winner.estimate.value)
            e["record"] = [e["record"][0], [logged], *e["record"][2:]]
    final_json: list[dict[str, Any]] = []
    finals_measured: list[Measured] = []
    best = baseline = previous = None
    for i, r in enumerate(fin.results):
        f = r.finalist
        knobs = full(f.knobs)
        final_json.append({"role": f.role, "knobs": knobs,
                           "estimate": r.estimate.to_json() if r.estimate else None,
                           "error": r.error, "tied": i in fin.tied})
        if r.estimate is None:
            continue
        m = measured(knobs, r.estimate, flop, "finals", r.stopped)
        if f.role == "default":
            baseline = m
        elif f.role == "previous":
            previous = m
        if r is fin.winner:
            best = m
        rec: Trial | None = rec_by_key.get(f.key)
        if rec is not None or r is fin.winner:
            finals_measured.append(m)
        # The log's value of a finalist is its finals estimate; one tied with a kept
        # previous best is logged at the kept value, so TVM's ranking keeps it too.
        value = r.estimate.value
        if i in fin.tied:
            assert fin.winner.estimate is not None
            value = fin.winner.estimate.value
        if rec is None and r is fin.winner:
            rec = {"trial": 0, "batch": 0, "space": None, "knobs": f.knobs or {}, "error": None,
                   "device": None, "record": extra[f.role], "latency_s": value}
            records.append(rec)
        if rec is not None:
            rec["latency_s"] = value
            rec["ci"] = [r.estimate.lo, r.estimate.hi]
            rec["n"] = r.estimate.n
            rec["stage"] = "finals" + (" (tied with the kept previous best)" if i in fin.tied else "")
            rec["record"] = [rec["record"][0], [value], *rec["record"][2:]]
    assert best is not None
    if baseline is None and noise is not None and noise.knobs == full(None):
        baseline = noise  # the default could not be measured in the finals
    if baseline is None:
        # A re-tune with history sampled the old best, not the default, before the search.
        raise TuningError(
            "the default configuration ran in the correctness check but could not be measured "
            "in the finals ("
            + "; ".join(str(r.error)[:200] for r in fin.results if r.finalist.role == "default")
            + "), so the speedup over it is unknown and nothing is written; re-run "
            "`tvmtune-ci retune` on an idle runner, or raise measure.timeout_s in tvmtune.yaml "
            "if it timed out")
    # On the finals' scale, as the log ranks them; the search's own number kept.
    search_top = [
        Measured(full(e["knobs"]), e["record"][1][0],  # as logged, on the finals' scale
                 gflops(flop, e["record"][1][0]),
                 ci_lo_s=ci[0] * scale if (ci := e.get("ci")) else None,
                 ci_hi_s=ci[1] * scale if ci else None,
                 n=int(e.get("n", 0)), stage=e.get("stage") or "search",
                 search_s=e["latency_s"])
        for e in _valid_sorted(records)
        if not str(e.get("stage", "")).startswith("finals")
    ]
    top = sorted(finals_measured, key=lambda m: m.latency_s)
    top = [best] + [m for m in top if m is not best] + search_top
    verdict = None
    pr = next((r for r in fin.results if r.finalist.role == "previous" and r.estimate), None)
    news = [r for r in fin.results if r.finalist.role == "search" and r.estimate]
    if pr is not None and news:
        nb = min(news, key=lambda r: r.estimate.value)  # type: ignore[union-attr]
        verdict = stats.compare(nb.estimate, pr.estimate)  # type: ignore[arg-type]
    return Assembled(records, best, baseline, previous, top, tuple(final_json), verdict)


def tune_workload(req: TuneRequest) -> TuneOutcome:
    """Tune one workload; see the module docstring for the steps."""
    from . import tvmsetup
    from .builder import schedule_config

    t_start = time.perf_counter()
    tvmsetup.load()
    if req.trials < 1 or req.batch_size < 1:
        raise TuningError(
            f"trials ({req.trials}) and batch_size ({req.batch_size}) must be positive"
        )
    template, name = req.template, req.workload_name
    # One resolved workload for the whole run: everything below takes its parameters,
    # module and FLOP count from it (workload.Workload).
    wl = req.workload
    if wl is None:
        wl = resolve(template, name, req.target)
        req = replace(req, workload=wl)
    stats_: dict[str, float] = {}

    def lap(key: str, t0: float) -> float:
        now = time.perf_counter()
        stats_[key] = now - t0
        return now

    own_runner = req.runner is None
    runner: Runner
    if req.runner is None:
        runner = make_runner(req.measure, req.rpc)  # its worker starts while we check numerics
    else:
        runner = req.runner
        runner.set_options(req.measure)
    retries0 = len(getattr(runner, "retries", None) or ())
    builder = None
    try:
        # Built libraries live in work_dir (each is deleted once measured), so a killed
        # run leaves nothing behind that the caller's removal of work_dir does not remove.
        builder = make_builder(str(Path(req.work_dir) / "artifacts"))
        check_correct(template, wl, req.target, rpc=req.rpc)  # 1
        t = lap("correctness_s", t_start)
        # An edit that changed no program the old log measured: its search stands, and no
        # search runs (the replay and the finals re-measure its best).
        stands = old_search_stands(req, wl)
        t = lap("stands_s", t)
        search = Search(req, builder, runner, t_start)  # 3 + 4
        t = lap("setup_s", t)
        stats_["resumed"] = float(search.resumed)
        # The noise check (2): a resumed run (its first batch and replay are in the
        # journal) samples the default; a re-tune with history takes the replay's old
        # best, a cold run its first batch's best contender (below).
        def sample_default() -> Measured:
            return measure_baseline(template, wl, req.target, req.measure, runner=runner, warn=req.warn)

        noise = sample_default() if search.resumed else None
        t = lap("baseline_s", t)
        # The old log's other records teach the cost model before anything is measured
        # (also on a resume: the model is not saved).
        n_prior = search.train_prior(req.prior) if req.prior else 0
        t = lap("prior_s", t) if req.prior else t
        replay = None
        if req.replay:
            if search.resumed:  # replayed before the interruption: in the journal
                done = [e for e in search.store.trials if e.get("source") == "replay"]
                ok = sum(e["error"] is None for e in done)
                replay = ReplayStats(len(req.replay), ok, ok, ok, (), False)
            else:
                replay = search.replay(req.replay)
                if req.old_knobs is not None:
                    from ..core.history import probes as new_region

                    found = new_region(req.replay[0], req.old_knobs, req.template.KNOBS, dict(wl.params),
                                       req.target, limit=req.batch_size)
                    if found:
                        p = search.replay(found, source="new_region")
                        replay = replace(replay, probes=p.measured)
                t = lap("replay_s", t)
            replay = replace(replay, prior=n_prior)
            if not replay.old_best_correct:  # the old best is a finalist only if it works
                req = replace(req, previous_knobs=None)
            elif req.previous_knobs is None:
                req = replace(req, previous_knobs=dict(req.replay[0]))
        if noise is None and replay is not None and replay.old_best_correct:
            noise = replay_noise_check(search.old_best, full_knobs(template, wl, req.replay[0], req.target),
                                       search.flop, req.measure)
        if noise is None and req.replay:  # the old best computes wrong now, or its replay was too noisy
            noise = sample_default()
            t = lap("baseline_s", t)
        # The old search stands only where the replay measured its best here.
        if not (stands and replay is not None and replay.old_best_correct and not search.resumed):
            stands = None

        def first_batch_noise() -> None:
            nonlocal noise
            t0 = time.perf_counter()
            p = search.progress
            noise = first_batch_noise_check(
                p.best, full_knobs(template, wl, p.best_knobs, req.target) if p.best_knobs else None,
                search.flop, req.measure, req.warn, f"{template_name(template)}/{name}"
            ) or sample_default()
            stats_["baseline_s"] = stats_.get("baseline_s", 0.0) + time.perf_counter() - t0

        result = search.run(stands, after_first_batch=first_batch_noise if noise is None else None)
        if noise is None:  # the search measured nothing (a zero budget, an exhausted space)
            noise = sample_default()
        stats_.update(result.stats)
        t = time.perf_counter()
        entries = result.trials
        fin = run_finals(req, entries, runner, builder, stands=result.stood)  # 5
        lap("finals_s", t)
        if replay is not None and fin.left_out:
            replay = replace(replay, finals_left_out=fin.left_out)
        # The records of finalists that are not search trials (the default or the
        # previous best winning, unless replayed) are made from their schedules.
        extra: dict[str, list[Any]] = {}
        searched = {knobs_key(e["knobs"]) for e in entries}
        for r in fin.results:
            if r.finalist.role != "search" and r is fin.winner and r.finalist.key not in searched:
                sch = schedule_config(template, wl, r.finalist.knobs, req.target)
                extra[r.finalist.role] = search.record_json(sch)
    finally:
        if builder is not None:
            builder.close()
        if own_runner:
            runner.close()
    flop = search.flop
    a = assemble(entries, fin, extra, flop, noise,
                 full=lambda knobs: full_knobs(template, wl, knobs, req.target))
    records, best, baseline, previous, top, final_json, verdict = (
        a.records, a.best, a.baseline, a.previous, a.top, a.final_results, a.previous_verdict)
    from .gpubuild import gpu_resources

    gpu = gpu_resources(template, wl, req.target, best.knobs)
    devices = tuple(sorted({d for e in entries if not e["error"] and (d := e.get("device"))}))
    stats_["devices_used"] = float(len(devices))
    stats_["device_retries"] = float(len(getattr(runner, "retries", None) or ()) - retries0)
    stats_["total_s"] = time.perf_counter() - t_start
    return TuneOutcome(
        workload_name=name,
        records=records,
        best=best,
        baseline=baseline,
        top=tuple(top[:TOP_N]),
        trials=Trials(
            requested=req.trials,
            run=len(entries),
            valid=len(entries) - sum(e["error"] is not None for e in entries),
            failed=sum(e["error"] is not None for e in entries),
            stop_reason=result.reason,
            stop_detail=result.detail,
            budget_note=result.budget_note,
            failures=failure_kinds(entries),
        ),
        curve=result.curve,
        space_size=result.space_size,
        design_spaces=result.design_spaces,
        noise_check=noise,
        workload_json=result.workload_json,
        flop=flop,
        stats=stats_,
        devices=devices,
        previous=previous,
        previous_verdict=verdict,
        best_source=fin.winner.finalist.role,
        final_results=tuple(final_json),
        replay=replay,
        gpu=gpu,
    )
