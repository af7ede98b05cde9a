"""The search loop of one workload: MetaSchedule's `EvolutionarySearch` with an
`XGBModel` over the template's design spaces (`space.TemplateSpace`), driven batch by
batch here (as `TaskScheduler` does) so that tvmtune-ci owns early stop, racing,
progress, the builder and the resume journal (`journal.py`).

Each candidate is sampled adaptively (`sampling.search_policy`): a first probe; probes
all slower than `race` x the incumbent end there (recorded as measured slow, and still
teach the cost model); contenders are sampled to `search_precision`. Every number is
`stats.estimate` (the lower quartile), also the run_secs committed to the database, so
TVM's own ranking is ours. Early stop counts an improvement only when it exceeds the
measured noise band. A history replay (`Search.replay`) and the old log's records
(`Search.train_prior`) come before the first batch. `tuner.tune_workload` runs the
search between the baseline and the finals; `run()` returns a `SearchResult`.

Its collaborators own their state: the journal and the database, and the resume from
them (`resume.Store`); the design spaces and the configurations seen (`space.Designs`);
the replay (`replay.Replay`); the stop rule of a re-tune with history
(`warmstop.WarmStop`); the time-budget gate (`budgetgate.BudgetGate`); the journal's
entries read (`trials.py`). Whether the old search stands is `programs.py`, a failed
trial's kind `failures.py`.

Over 400 lines: what is left here is every call into MetaSchedule's objects for one
workload (the `TuneContext` and its `EvolutionarySearch`, the `XGBModel`, the database
behind `Store`), made in the order its `TaskScheduler` protocol expects: candidates,
build and run, then the strategy, the cost model, the database and the journal told
(`measure`), with the loop that asks for the next batch and the cost model's prior and
predicted gain. State with a life of its own already lives in the collaborators above;
cutting further would split that one protocol, whose order is the correctness, across
files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core import stats
from ..core.errors import TemplateError, TuningError
from ..core.records import FAILED_RUN_SECS
from ..core.targetinfo import scope
from ..core.template import space_size, template_name
from ..core.tunetypes import BatchEvent, ReplayStats, Trial
from . import tvmsetup
from .batch import Picked, ok, run_batch, trial_entries
from .budgetgate import BudgetGate, BudgetOptions
from .builder import Builder, make_postprocs, schedule_config
from .measure import Finalist, finals, gflops
from .replay import Replay, ReplaySeam
from .request import TuneRequest
from .resume import Store
from .rpclimits import rpc_failure
from .runners import Runner
from .sampling import search_policy
from .space import Designs, TemplateSpace, constraint_postprocs, knobs_key, make_mutators
from .trials import Progress, entry_estimate, trials_of_its_own
from .warmstop import WarmOptions, WarmStop
from .workload import Workload, resolve

# Valid samples before the XGB model's predictions replace random scores (stock: 100,
# which leaves a 64-trial run a random search). It trains on every batch until then.
WARMUP_SAMPLES = 32
# A cold search's first batch: this many configurations drawn at random from the design
# spaces (MetaSchedule's ReplayTrace: 0.01 s), not the evolutionary proposal. Before
# the cost model has data its scores are random, so evolving 128 programs for them
# (0.6-1.6 s on this repository's templates, Zen 4) and building a whole batch of 16
# (115-212 ms each, bench_tuner) only delayed the first measured trial.
FIRST_BATCH = 4


# --------------------------------------------------------------------------- helpers


def _rand_state(seed: int, done: int) -> int:
    """The TuneContext seed: the request's, moved on by the trials a resume starts from
    (so a resumed search does not replay the first run's random draws)."""
    return max(1, (seed + done) % (2**31 - 1))


@dataclass(frozen=True)
class SearchResult:
    """What one search did (`Search.run`)."""

    reason: str  # why it stopped: "budget", "early_stop", "time_budget", ...
    detail: str  # why, in words ("" when the reason says it)
    trials: list[Trial]  # the journal's, this run's and a resumed run's
    stats: dict[str, float]  # where the seconds went (search_s, replay_*_s, warm_*, ...)
    stood: bool  # the old search stood: nothing was searched
    budget_note: str  # the time budget's share, in words
    curve: tuple[tuple[int, float], ...]  # best-so-far (trial, GFLOP/s)
    space_size: int
    design_spaces: int
    workload_json: list[str]


class Search:
    """One workload's MetaSchedule search: context, design spaces, database, journal,
    cost model; `run()` measures batch after batch until a stop reason."""

    def __init__(self, req: TuneRequest, builder: Builder, runner: Runner, t_start: float) -> None:
        self.ms = ms = tvmsetup.ms()
        self.req, self.builder, self.runner, self.t_start = req, builder, runner, t_start
        # The resolved workload (workload.Workload): its parameters, module and FLOPs are
        # computed once per re-tune, not once per use.
        self.wl: Workload = (
            req.workload if req.workload is not None else resolve(req.template, req.workload_name, req.target)
        )
        workload = dict(self.wl.params)
        knobs = list(getattr(req.template, "KNOBS", []))
        names = scope(workload, req.target)
        constraints = tuple(getattr(req.template, "CONSTRAINTS", ()))
        per_space, n_spaces = space_size(knobs, names, constraints)
        # With CONSTRAINTS space_size counts the legal points of all design spaces as one.
        self.designs = Designs(knobs, per_space * n_spaces)
        self.target = tvmsetup.make_target(dict(req.target))
        self.store = Store(req)
        space = TemplateSpace(req.template, workload, req.target)
        self.ctx = ms.TuneContext(
            mod=self.wl.mod,
            target=self.target,
            space_generator=ms.space_generator.ScheduleFn(
                space,
                sch_rules=[],
                # The constraint check reads the design spaces, filled below.
                postprocs=make_postprocs(req.target) + constraint_postprocs(req.template, names, self.designs.infos),
                mutator_probs=make_mutators(knobs, req.seed),
            ),
            search_strategy=ms.search_strategy.EvolutionarySearch(
                population_size=req.population_size, init_min_unmeasured=min(50, max(1, req.population_size // 2))
            ),
            task_name=self.name,
            rand_state=_rand_state(req.seed, self.store.resumed),
            num_threads="physical",
        )
        self.designs.fill(self.ctx.generate_design_space(), space)
        self.store.open(ms, self.ctx.mod, self.target, {"workload_name": self.name, "seed": req.seed})
        # One XGBoost thread: the data is small, and two OpenMP threads on a 2-core
        # runner that is busy elsewhere spin-wait each other (0.1 s trainings took 3-10 s).
        self.cost_model = ms.cost_model.XGBModel(num_tuning_cores=1, num_warmup_samples=WARMUP_SAMPLES)
        self._warm_start_cost_model()
        self.progress = Progress()
        for entry in self.store.trials:
            self.designs.seen.add(knobs_key(entry["knobs"]))
            self.progress.add(entry["trial"], entry_estimate(entry), self.flop, entry["knobs"])
        self.stats: dict[str, float] = {}
        # The time-budget gate: the item's share, asked before each batch.
        self.budget = BudgetGate(BudgetOptions.of(req, WARMUP_SAMPLES), t_start)
        # A re-tune with history: its stop rule, created when the replay measured the old
        # best (None: a cold search, which has only the cold rule).
        self.warm: WarmStop | None = None
        # The old best as the replay measured it (with or without the warm rule).
        self.replayed_best: stats.Estimate | None = None

    @property
    def name(self) -> str:
        return self.req.workload_name

    @property
    def flop(self) -> float:
        return self.wl.flops

    @property
    def resumed(self) -> int:
        """Trials a killed run left in the journal, this run goes on from."""
        return self.store.resumed

    @property
    def done(self) -> int:
        return len(self.store.trials)

    def record_json(self, sch: Any) -> list[Any]:
        """The TuningRecord JSON (as a log line holds it) of a fixed configuration's
        schedule; run_secs are filled in by the caller."""
        return self.store.record_json(sch)

    def _warm_start_cost_model(self) -> None:
        """Train the cost model on the valid records of a resumed run."""
        records = self.store.valid_records()
        if records:
            results = [self.ms.runner.RunnerResult([float(x) for x in r.run_secs], None) for r in records]
            self.cost_model.update(self.ctx, [r.as_measure_candidate() for r in records], results)

    def train_prior(self, prior: Sequence[tuple[Mapping[str, Any], float]]) -> int:
        """Train the cost model on (knobs, latency) pairs that were not measured here
        (the old log's records): the features are this template's programs for those
        knobs. Returns how many it learned from (one that no longer schedules is
        skipped)."""
        ms, req = self.ms, self.req
        cands, results = [], []
        for kv, secs in prior:
            try:
                sch = schedule_config(req.template, self.wl, kv, req.target)
            except (TuningError, TemplateError):
                continue
            info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            cands.append(ms.MeasureCandidate(sch, info))
            results.append(ms.runner.RunnerResult([float(secs)], None))
        if cands:
            t0 = time.perf_counter()
            self.cost_model.update(self.ctx, cands, results)
            self.add_time("prior_s", t0)
        return len(cands)

    # ---- the loop

    def run_seconds(self, n_runs: int) -> tuple[float, float]:
        """The runner's (loading, evaluating) seconds since its `n_runs`-th run."""
        since = self.runner.timings[n_runs:]
        return float(sum(x.load_s for x in since)), float(sum(x.eval_s for x in since))

    def add_time(self, key: str, t0: float) -> None:
        self.stats[key] = self.stats.get(key, 0.0) + time.perf_counter() - t0

    def run(self, stands: str | None = None, after_first_batch: Callable[[], None] | None = None) -> SearchResult:
        """Search until the budget is spent, early stop, or the space runs out.
        `stands`: why the old log's search still stands on the edited template
        (`old_search_stands`): then nothing is searched. `after_first_batch` is called
        once, after the first batch this process measures: a cold run takes its noise
        check from that batch's best contender (`tuner.first_batch_noise_check`)."""
        reason, detail = self._run(stands, after_first_batch)
        return SearchResult(
            reason,
            detail,
            self.store.trials,
            dict(self.stats),
            stands is not None,
            self.budget.share_note,
            tuple(self.progress.curve),
            self.designs.size,
            self.designs.count,
            list(self.store.workload_json),
        )

    def _run(self, stands: str | None, after_first_batch: Callable[[], None] | None) -> tuple[str, str]:
        req = self.req
        if self.done >= req.trials:
            return "budget", ""
        if stands is not None:
            return "history_unchanged", stands
        n_built, n_runs = len(self.builder.compile_s), len(self.runner.timings)
        n_walls = len(self.builder.build_wall_s)
        t0 = time.perf_counter()
        self.ctx.pre_tuning(
            max_trials=req.trials - self.done,
            num_trials_per_iter=req.batch_size,
            design_spaces=self.designs.schedules,
            database=self.store.db,
            cost_model=self.cost_model,
        )
        try:
            got = self._loop(after_first_batch)
        finally:
            self.ctx.post_tuning()
            self.stats["search_s"] = time.perf_counter() - t0
            self.stats.update(
                {  # this process's search trials (not baseline/verify runs)
                    "search_trials": float(self.done - self.resumed),
                    "search_compile_s": float(sum(self.builder.compile_s[n_built:])),
                    "search_export_s": float(sum(self.builder.export_s[n_built:])),
                    # The builds' wall seconds: the two above are summed over its threads.
                    "search_build_wall_s": float(sum(self.builder.build_wall_s[n_walls:])),
                    **dict(zip(("search_load_s", "search_eval_s"), self.run_seconds(n_runs), strict=True)),
                    **(self.warm.stats() if self.warm is not None else {}),
                }
            )
        return got

    def _loop(self, after_first_batch: Callable[[], None] | None) -> tuple[str, str]:
        """(why the search stopped, in a word and in words)."""
        req, empty, detail = self.req, 0, ""
        while self.done < req.trials:
            if (spent := self.budget.stops(trials_of_its_own(self.store.trials))) is not None:
                return "time_budget", spent
            if self.done >= self.designs.size:
                return "space_exhausted", detail
            # A cold search's first batch is drawn, not proposed; the strategy is not told.
            picked: list[Picked] | None = self._first_batch() if self._cold_start() else []
            drawn = bool(picked)
            if not drawn:
                picked = self._candidates()
            if picked is None:
                return "space_exhausted", detail
            if not picked:
                empty += 1  # all measured before a resume; the strategy moves on
                if empty >= 3:
                    return "space_exhausted", detail
                continue
            empty = 0
            prev_best = self.progress.best
            warm = self.warm
            gain = self._predicted_gain(picked) if warm is not None else None
            n0, was_matched = self.done, warm is not None and warm.matched_at is not None
            self.measure(picked, notify=not drawn)
            if after_first_batch is not None:
                hook, after_first_batch = after_first_batch, None
                hook()
            if self.progress.best is not None:
                self.budget.mark(self.progress.best.value)
            improved = self.progress.improved_since(
                prev_best, req.measure.search_precision, req.early_stop.min_improvement
            )
            if warm is not None:
                verdict = warm.judge(improved, gain, self.store.trials, self.progress)
                if was_matched and gain is not None and prev_best is not None:
                    warm.record(gain, verdict.band, prev_best, self.store.trials[n0:])
                if verdict.stop:
                    return warm.reason(), verdict.detail
            # The cold rule, in a re-tune with history too: there it is the ceiling, so a
            # warm run never searches longer than a cold one would. Without it the warm
            # rule alone ran 116 and 196 trials where its model kept expecting gains
            # beyond the noise and cold stopped at 64-96 (bench_warmstart, Zen 4 run E,
            # Xeon run B).
            # Batches before the cost model has WARMUP_SAMPLES valid trials are a random
            # search; they do not count toward patience. Replayed trials (history) do
            # not count either: a search seeded near the old best cannot beat it
            # beyond the noise at once, and stopping then would end it before it
            # explored as much as a cold one (measured: bench_warmstart). Nor do the
            # old log's records the model was trained on (prior): counting them
            # stopped runs 24% sooner, and one edit (softmax attn_512) ended 1.24x
            # slower than cold (bench_warmstart runs 4-5).
            warmed_up = (
                sum(e["error"] is None and e.get("source") != "replay" for e in self.store.trials) >= WARMUP_SAMPLES
            )
            if improved or not warmed_up:
                self.progress.stale_batches = 0
            else:
                self.progress.stale_batches += 1
            patience = req.early_stop.patience
            if patience > 0 and self.progress.stale_batches >= patience and self.done < req.trials:
                if warm is not None and (words := warm.cold_stop_words(patience)):
                    detail = words
                return "early_stop", detail
        return "budget", detail

    # ---- for the stop rule of a re-tune with history (warmstop.py)

    @property
    def old_best(self) -> stats.Estimate | None:
        """The old best on the new template (or another target's, mapped), as the replay
        measured it; None: cold."""
        return self.replayed_best

    def _measure_beside(
        self, knobs: Mapping[str, Any], old_knobs: Mapping[str, Any]
    ) -> tuple[stats.Estimate | None, stats.Estimate | None]:
        """An own best's `knobs` and the old best's, measured now, interleaved
        (`measure.finals` of the two, to the search precision): (own, old), each None
        when it failed. The warm rule's side-by-side re-measure."""
        req = self.req
        t0 = time.perf_counter()
        try:
            got = finals(
                req.template,
                self.wl,
                req.target,
                [Finalist("search", dict(knobs), knobs_key(knobs)), Finalist("previous", dict(old_knobs), "previous")],
                replace(req.measure, precision=req.measure.search_precision),
                runner=self.runner,
                builder=self.builder,
            )
        finally:  # the finals leave the runner set to the options they were given
            self.runner.set_options(req.measure)
        self.add_time("warm_side_by_side_s", t0)
        return got[0].estimate, got[1].estimate

    def _predicted_gain(self, picked: Sequence[Picked]) -> float | None:
        """The cost model's best predicted gain over the incumbent among the candidates it
        is about to measure (relative: 0.05 is 5% faster); None while it is not trained
        (before WARMUP_SAMPLES records, prior and replay included, it predicts at random)."""
        knobs = self.progress.best_knobs
        if knobs is None or not picked or getattr(self.cost_model, "data_size", 0) < WARMUP_SAMPLES:
            return None
        key = knobs_key(knobs)
        cand = self.designs.candidates.get(key)
        if cand is None:
            sch = schedule_config(self.req.template, self.wl, knobs, self.req.target)
            info = self.ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            cand = self.designs.candidates[key] = self.ms.MeasureCandidate(sch, info)
        t0 = time.perf_counter()
        preds = [float(x) for x in self.cost_model.predict(self.ctx, [cand, *(c for c, _, _ in picked)])]
        self.add_time("search_predict_s", t0)
        # Scores are throughput over the best seen (higher is faster); their ratio is the
        # model's expected speedup of its best candidate over the incumbent.
        if not preds[0] > 0:
            return None
        return max(preds[1:]) / preds[0] - 1

    def _candidates(self) -> list[Picked] | None:
        """The strategy's next batch, as (candidate, design space, knobs); None: exhausted."""
        t0 = time.perf_counter()
        cands = self.ctx.generate_measure_candidates()
        self.add_time("search_generate_s", t0)
        if cands is None:
            return None
        picked = self.designs.unseen(cands)[: self.req.trials - self.done]
        if not picked:
            self.ctx.notify_runner_results([], [])
        return picked

    def _cold_start(self) -> bool:
        """Nothing measured (resumed, replayed) and nothing learned (the old log's records):
        the cost model's scores would be random."""
        return self.done == 0 and getattr(self.cost_model, "data_size", 0) == 0

    def _first_batch(self) -> list[Picked]:
        """FIRST_BATCH configurations drawn at random from the design spaces, with the
        template's postprocessors (constraints included), seeded from the context's
        random state. Measured as search trials, but not told to the evolutionary
        strategy (it did not propose them); its population is seeded from the database,
        which holds them."""
        t0 = time.perf_counter()
        draw = self.ms.search_strategy.ReplayTrace()
        draw._initialize_with_tune_context(self.ctx)
        n = min(FIRST_BATCH, self.req.trials - self.done)
        draw.pre_tuning(
            max_trials=n,
            num_trials_per_iter=n,
            design_spaces=self.designs.schedules,
            database=self.store.db,
            cost_model=self.cost_model,
        )
        try:
            cands = draw.generate_measure_candidates() or []
        finally:
            draw.post_tuning()
        self.add_time("search_generate_s", t0)
        return self.designs.unseen(cands)

    def replay(self, configs: Sequence[Mapping[str, Any]], source: str = "replay") -> ReplayStats:
        """The history replay before the search (`replay.Replay`); when it measured the
        old best (the first configuration), the stop rule of a re-tune with history
        starts against it. `source="new_region"`: the probes of the region an edit
        opened, the search's own trials."""
        replay = Replay(self.replay_seam(), source)
        got = replay.run(configs)
        if replay.old_best is not None:
            est, knobs = replay.old_best
            self.replayed_best = est
            if self.req.warm_stop:
                self.warm = WarmStop(WarmOptions.of(self.req, WARMUP_SAMPLES), est, knobs, self._measure_beside)
        return got

    def replay_seam(self) -> ReplaySeam:
        """What a replay uses of this search (`replay.Replay`)."""
        return ReplaySeam(
            self.req,
            self.wl,
            self.ms,
            self.target,
            self.builder,
            self.designs,
            lambda: self.done,
            self.add_time,
            self.measure_replayed,
        )

    def measure_replayed(self, picked: list[Picked], prebuilt: list[Any], source: str) -> list[Trial]:
        """A replay's configurations measured with the libraries it built and checked
        (`measure`; the strategy is not told: it did not propose them), the seconds in
        stats replay_measure_s, replay_load_s and replay_eval_s; the trials it added."""
        n0, n_runs, t0 = self.done, len(self.runner.timings), time.perf_counter()
        if picked:
            self.measure(picked, notify=False, source=source, prebuilt=prebuilt)
        self.add_time("replay_measure_s", t0)
        # Of which: loading, and the evaluator's runs (summed over the replay and the probes).
        for key, secs in zip(("replay_load_s", "replay_eval_s"), self.run_seconds(n_runs), strict=True):
            self.stats[key] = self.stats.get(key, 0.0) + secs
        return self.store.trials[n0:]

    def measure(
        self,
        picked: list[Picked],
        *,
        notify: bool = True,
        source: str = "search",
        prebuilt: Sequence[Any] | None = None,
    ) -> None:
        """Build (unless `prebuilt`) and run one batch, tell the strategy (unless
        `notify` is off: it did not propose them) and the cost model, commit, journal."""
        incumbent = self.progress.best_latency
        measured = self._build_and_run(picked, incumbent, prebuilt)
        ests, results = self._tell(picked, measured, notify)
        entries = self._journal(picked, measured, ests, results, incumbent, source)
        if self.req.on_batch is not None:
            self._on_batch(self.req.on_batch, entries)

    def _build_and_run(
        self, picked: list[Picked], incumbent: float | None, prebuilt: Sequence[Any] | None
    ) -> list[tuple[Any, str | None, bool]]:
        """One batch built (unless `prebuilt`) and run, probes raced against `incumbent`
        (`batch.run_batch`); with RPC, an error when no measurement came back."""
        ms, req = self.ms, self.req
        cands = [c for c, _, _ in picked]
        self.runner.set_policy(search_policy(req.measure, req.measure.race * incumbent if incumbent else None))
        try:
            measured = run_batch(cands, self.target, self.builder, self.runner, ms, prebuilt)
        finally:
            self.runner.set_options(req.measure)
        self.stats.setdefault("first_trial_s", time.perf_counter() - self.t_start)
        ran = [r for r, _, reached in measured if reached]
        if req.rpc is not None and ran and not any(ok(r) for r in ran):
            # Nothing reached a device and came back: lost or hung devices, or sessions
            # too short. Stop (the journal keeps the batches before) rather than finish
            # with a log of failures.
            raise rpc_failure(
                req.rpc,
                [str(r.error_msg) for r in ran],
                f"{template_name(req.template)}/{self.name}: all {len(ran)} measurements of a batch "
                f"(after {self.done} trials)",
            )
        return measured

    def _tell(
        self, picked: list[Picked], measured: list[tuple[Any, str | None, bool]], notify: bool
    ) -> tuple[list[stats.Estimate | None], list[Any]]:
        """The batch's estimates, and its results as the strategy (when `notify`) and
        the cost model are told them."""
        ms = self.ms
        cands = [c for c, _, _ in picked]
        results = [r for r, _, _ in measured]
        # One number per measurement, the estimate: what the strategy, the cost model
        # and the database (TVM's own ranking) see.
        ests = [stats.estimate(r.run_secs) if ok(r) else None for r in results]
        results = [
            ms.runner.RunnerResult([e.value], None) if e is not None else r for r, e in zip(results, ests, strict=True)
        ]
        if notify:
            self.ctx.notify_runner_results(cands, results)
        good = [(c, r) for c, r in zip(cands, results, strict=True) if ok(r)]
        if good:
            t0 = time.perf_counter()
            self.cost_model.update(self.ctx, [c for c, _ in good], [r for _, r in good])
            self.add_time("search_cost_model_s", t0)
        return ests, results

    def _journal(
        self,
        picked: list[Picked],
        measured: list[tuple[Any, str | None, bool]],
        ests: list[stats.Estimate | None],
        results: list[Any],
        incumbent: float | None,
        source: str,
    ) -> list[Trial]:
        """The batch committed to the database and the journal, and the progress told."""
        req = self.req
        cands = [c for c, _, _ in picked]
        lines = self.store.commit(
            [
                (c.sch.trace, c.args_info, [float(x) for x in r.run_secs] if ok(r) else [FAILED_RUN_SECS])
                for c, r in zip(cands, results, strict=True)
            ]
        )
        batch = max((e["batch"] for e in self.store.trials), default=0) + 1
        entries = trial_entries(
            picked,
            measured,
            ests,
            lines,
            done=self.done,
            batch=batch,
            incumbent=incumbent,
            measure=req.measure,
            source=source,
        )
        for e, est in zip(entries, ests, strict=True):  # a raced-out probe is no contender
            self.progress.add(e["trial"], est if e["stage"] != "probe" else None, self.flop, e["knobs"])
        self.store.append(entries)
        return entries

    def _on_batch(self, on_batch: Callable[[BatchEvent], None], entries: Sequence[Trial]) -> None:
        """The request's `on_batch` told of the batch just journaled."""
        req = self.req
        best = self.progress.best_latency
        n_ok = sum(e["error"] is None for e in entries)
        on_batch(
            BatchEvent(
                workload_name=self.name,
                batch=self.store.batches,
                trials_done=self.done,
                budget=req.trials,
                best_latency_s=best,
                best_gflops=gflops(self.flop, best) if best else None,
                batch_valid=n_ok,
                batch_failed=len(entries) - n_ok,
                elapsed_s=time.perf_counter() - self.t_start,
                resumed=self.resumed,
            )
        )
