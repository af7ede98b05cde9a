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
search between the baseline and the finals.

Its collaborators own their state: the stop rule of a re-tune with history
(`warmstop.WarmStop`), the time-budget gate (`budgetgate.BudgetGate`), the journal's
entries read (`trials.py`); whether the old search stands is `programs.py`, a failed
trial's kind `failures.py`. The replay and the resume are still methods here: they
share the context, the database and the cost model with the loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import stats
from ..core.errors import TemplateError, TuningError
from ..core.records import FAILED_RUN_SECS, RECORD_FILE, WORKLOAD_FILE
from ..core.targetinfo import scope
from ..core.template import Knob, design_spaces, space_size, template_name
from ..core.tunetypes import BatchEvent, ReplayStats, Trial, TuneRequest
from .budgetgate import BudgetGate, BudgetOptions
from .builder import make_postprocs, remove_artifact
from .journal import Journal, request_fingerprint
from .measure import gflops
from .programs import programs_unchanged  # noqa: F401 (pipeline.carry_step imports it from here)
from .rpclimits import rpc_failure
from .runners import Runner
from .sampling import device_type, search_policy
from .space import (
    TemplateSpace,
    constraint_postprocs,
    decode_knobs,
    knobs_key,
    make_mutators,
    plain,
    space_info,
)
from .trials import Progress, entry_estimate, trials_of_its_own
from .warmstop import WarmOptions, WarmStop
from .workload import resolve, workload_params

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


def _short(error: str, limit: int = 160) -> str:
    """The first line of an error, cut to `limit` characters."""
    line = next((x.strip() for x in error.strip().splitlines() if x.strip()), error)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _rand_state(seed: int, done: int) -> int:
    """The TuneContext seed: the request's, moved on by the trials a resume starts from
    (so a resumed search does not replay the first run's random draws)."""
    return max(1, (seed + done) % (2**31 - 1))


def _run_batch(
    cands: Sequence[Any], target: Any, builder: Any, runner: Runner, ms: Any,
    prebuilt: Sequence[Any] | None = None,
) -> list[tuple[Any, str | None, bool]]:
    """Build every candidate in-process (unless `prebuilt` holds their BuilderResults),
    then give all that built to the runner at once (an RPC runner measures them on its
    devices in parallel). Per candidate, in order: (RunnerResult, the device that
    measured it or None, whether it reached the runner). Every library is removed."""
    built = (list(prebuilt) if prebuilt is not None
             else builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in cands]))
    out: list[tuple[Any, str | None, bool]] = [
        (ms.runner.RunnerResult(None, str(b.error_msg)), None, False) for b in built
    ]
    todo = [i for i, b in enumerate(built) if not b.error_msg]
    try:
        inputs = [
            ms.runner.RunnerInput(built[i].artifact_path, device_type(target), cands[i].args_info)
            for i in todo
        ]
        futures = runner.run(inputs) if inputs else []
        for i, inp, fut in zip(todo, inputs, futures, strict=True):
            result = fut.result()
            out[i] = (result, runner.device_of(str(inp.artifact_path)), True)
    finally:
        for b in built:
            remove_artifact(b.artifact_path)
    return out


def _ok(result: Any) -> bool:
    return result.error_msg is None and bool(result.run_secs)


class Search:
    """One workload's MetaSchedule search: context, design spaces, database, journal,
    cost model; `run()` measures batch after batch until a stop reason."""

    def __init__(self, req: TuneRequest, builder: Any, runner: Runner, t_start: float) -> None:
        from . import tvmsetup

        self.ms = ms = tvmsetup.ms()
        self.req, self.builder, self.runner, self.t_start = req, builder, runner, t_start
        self.name = req.workload_name
        # The resolved workload (workload.Workload): its parameters, module and FLOPs are
        # computed once per re-tune, not once per use.
        self.wl = req.workload if req.workload is not None else resolve(req.template, self.name, req.target)
        workload = workload_params(req.template, self.wl)
        self.knobs: list[Knob] = list(getattr(req.template, "KNOBS", []))
        names = scope(workload, req.target)
        constraints = tuple(getattr(req.template, "CONSTRAINTS", ()))
        per_space, n_spaces = space_size(self.knobs, names, constraints)
        # With CONSTRAINTS space_size counts the legal points of all design spaces as one.
        self.space_size, self.n_spaces = per_space * n_spaces, len(design_spaces(self.knobs))
        self.target = tvmsetup.make_target(dict(req.target))
        self.work_dir = Path(req.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.work_dir, request_fingerprint(req))
        resumed = self.journal.load()
        self.resumed = len(self.journal.trials)
        space = TemplateSpace(req.template, workload, req.target)
        self.spaces: list[Any] = []  # filled below; the constraint check reads it
        self.ctx = ms.TuneContext(
            mod=self.wl.mod,
            target=self.target,
            space_generator=ms.space_generator.ScheduleFn(
                space,
                sch_rules=[],
                postprocs=make_postprocs(req.target)
                + constraint_postprocs(req.template, names, self.spaces),
                mutator_probs=make_mutators(self.knobs, req.seed),
            ),
            search_strategy=ms.search_strategy.EvolutionarySearch(
                population_size=req.population_size,
                init_min_unmeasured=min(50, max(1, req.population_size // 2)),
            ),
            task_name=self.name,
            rand_state=_rand_state(req.seed, self.resumed),
            num_threads="physical",
        )
        self.flop = self.wl.flops
        self.schedules = self.ctx.generate_design_space()
        self.spaces.extend(
            space_info(i, space.structures[i], sch, space.orders[i])
            for i, sch in enumerate(self.schedules)
        )
        self.db, self.workload_json = self._open_database(resumed)
        if not resumed:
            self.journal.start(
                {"workload_name": self.name, "seed": req.seed, "workload": self.workload_json}
            )
        # One XGBoost thread: the data is small, and two OpenMP threads on a 2-core
        # runner that is busy elsewhere spin-wait each other (0.1 s trainings took 3-10 s).
        self.cost_model = ms.cost_model.XGBModel(
            num_tuning_cores=1, num_warmup_samples=WARMUP_SAMPLES
        )
        self._warm_start_cost_model()
        self.progress = Progress()
        self.seen: set[str] = set()
        for entry in self.journal.trials:
            self.seen.add(knobs_key(entry["knobs"]))
            self.progress.add(entry["trial"], entry_estimate(entry), self.flop, entry["knobs"])
        self.stats: dict[str, float] = {}
        self.batches = 0
        # The time-budget gate: the item's share, asked before each batch.
        self.budget = BudgetGate(BudgetOptions.of(req, WARMUP_SAMPLES), t_start)
        # A re-tune with history: its stop rule, created when the replay measured the old
        # best (None: a cold search, which has only the cold rule).
        self.warm: WarmStop | None = None
        self.stop_detail = ""  # why the search stopped, in words
        self._candidate_of: dict[str, Any] = {}
        # Why the old log's search still stands on the edited template
        # (`old_search_stands`, set by the tuner): then the search is not run.
        self.stands: str | None = None
        # Called once, after the first batch this process measures: a cold run takes its
        # noise check from that batch's best contender (`tuner.first_batch_noise_check`).
        self.after_first_batch: Callable[[], None] | None = None

    @property
    def done(self) -> int:
        return len(self.journal.trials)

    # ---- resume

    def _open_database(self, resumed: bool) -> tuple[Any, list[str]]:
        """The JSONDatabase in work_dir, rebuilt from the journal; (database, workload JSON)."""
        wl_path, rec_path = self.work_dir / WORKLOAD_FILE, self.work_dir / RECORD_FILE
        if resumed:
            assert self.journal.header is not None
            wl_path.write_text(json.dumps(self.journal.header["workload"]) + "\n", "utf-8")
            rec_path.write_text(
                "".join(json.dumps([0, t["record"]]) + "\n" for t in self.journal.trials), "utf-8"
            )
        else:
            for p in (wl_path, rec_path):
                p.unlink(missing_ok=True)
        db = self.ms.database.JSONDatabase(
            path_workload=str(wl_path), path_tuning_record=str(rec_path)
        )
        db.commit_workload(self.ctx.mod)
        return db, json.loads(wl_path.read_text(encoding="utf-8").splitlines()[0])

    def record_json(self, sch: Any) -> list[Any]:
        """The TuningRecord JSON (as a log line holds it) of a fixed configuration's
        schedule; run_secs are filled in by the caller."""
        ms = self.ms
        workload = self.db.commit_workload(self.ctx.mod)
        info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        # Through the JSONDatabase, so the line is exactly what its file would hold.
        rec_path = self.work_dir / RECORD_FILE
        offset = rec_path.stat().st_size
        self.db.commit_tuning_record(
            ms.database.TuningRecord(sch.trace, workload, [FAILED_RUN_SECS], self.target, info)
        )
        with open(rec_path, "rb") as f:
            f.seek(offset)
            return json.loads(f.read().decode("utf-8").splitlines()[0])[1]

    def _warm_start_cost_model(self) -> None:
        """Train the cost model on the valid records of a resumed run."""
        records = [
            r
            for r in self.db.get_all_tuning_records()
            if r.run_secs and any(float(x) < FAILED_RUN_SECS for x in r.run_secs)
        ]
        if records:
            results = [
                self.ms.runner.RunnerResult([float(x) for x in r.run_secs], None) for r in records
            ]
            self.cost_model.update(self.ctx, [r.as_measure_candidate() for r in records], results)

    def train_prior(self, prior: Sequence[tuple[Mapping[str, Any], float]]) -> int:
        """Train the cost model on (knobs, latency) pairs that were not measured here
        (the old log's records): the features are this template's programs for those
        knobs. Returns how many it learned from (one that no longer schedules is
        skipped)."""
        from .builder import schedule_config

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
            self._time("prior_s", t0)
        return len(cands)

    # ---- the loop

    def _run_seconds(self, n_runs: int) -> tuple[float, float]:
        """The runner's (loading, evaluating) seconds since its `n_runs`-th run."""
        since = self.runner.timings[n_runs:]
        return float(sum(x.load_s for x in since)), float(sum(x.eval_s for x in since))

    def _time(self, key: str, t0: float) -> None:
        self.stats[key] = self.stats.get(key, 0.0) + time.perf_counter() - t0

    def run(self) -> str:
        """Search until the budget is spent, early stop, or the space runs out."""
        req = self.req
        if self.done >= req.trials:
            return "budget"
        if self.stands is not None:
            self.stop_detail = self.stands
            return "history_unchanged"
        n_built, n_runs = len(self.builder.compile_s), len(self.runner.timings)
        n_walls = len(self.builder.build_wall_s)
        t0 = time.perf_counter()
        self.ctx.pre_tuning(
            max_trials=req.trials - self.done,
            num_trials_per_iter=req.batch_size,
            design_spaces=self.schedules,
            database=self.db,
            cost_model=self.cost_model,
        )
        try:
            reason = self._loop()
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
                    **dict(zip(("search_load_s", "search_eval_s"), self._run_seconds(n_runs), strict=True)),
                    **(self.warm.stats() if self.warm is not None else {}),
                }
            )
        return reason

    def _loop(self) -> str:
        req, empty = self.req, 0
        while self.done < req.trials:
            if (spent := self.budget.stops(trials_of_its_own(self.journal.trials))) is not None:
                self.stop_detail = spent
                return "time_budget"
            if self.done >= self.space_size:
                return "space_exhausted"
            # A cold search's first batch is drawn, not proposed; the strategy is not told.
            picked: list[tuple[Any, int, dict[str, Any]]] | None = (
                self._first_batch() if self._cold_start() else [])
            drawn = bool(picked)
            if not drawn:
                picked = self._candidates()
            if picked is None:
                return "space_exhausted"
            if not picked:
                empty += 1  # all measured before a resume; the strategy moves on
                if empty >= 3:
                    return "space_exhausted"
                continue
            empty = 0
            prev_best = self.progress.best
            warm = self.warm
            gain = self._predicted_gain(picked) if warm is not None else None
            n0, was_matched = self.done, warm is not None and warm.matched_at is not None
            self._measure(picked, notify=not drawn)
            if self.after_first_batch is not None:
                hook, self.after_first_batch = self.after_first_batch, None
                hook()
            if self.progress.best is not None:
                self.budget.mark(self.progress.best.value)
            improved = self.progress.improved_since(
                prev_best, req.measure.search_precision, req.early_stop.min_improvement
            )
            if warm is not None:
                verdict = warm.judge(improved, gain, self.journal.trials, self.progress)
                if was_matched and gain is not None and prev_best is not None:
                    warm.record(gain, verdict.band, prev_best, self.journal.trials[n0:])
                if verdict.stop:
                    self.stop_detail = verdict.detail
                    return warm.reason()
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
            warmed_up = sum(
                e["error"] is None and e.get("source") != "replay" for e in self.journal.trials
            ) >= WARMUP_SAMPLES
            if improved or not warmed_up:
                self.progress.stale_batches = 0
            else:
                self.progress.stale_batches += 1
            patience = req.early_stop.patience
            if patience > 0 and self.progress.stale_batches >= patience and self.done < req.trials:
                if warm is not None and (words := warm.cold_stop_words(patience)):
                    self.stop_detail = words
                return "early_stop"
        return "budget"

    # ---- for the stop rule of a re-tune with history (warmstop.py)

    @property
    def old_best(self) -> stats.Estimate | None:
        """The old best on the new template, as the replay measured it; None: a cold
        search, which has only the cold rule."""
        return self.warm.old_best if self.warm is not None else None

    def _warm_options(self) -> WarmOptions:
        req = self.req
        return WarmOptions(precision=req.measure.search_precision, patience=req.early_stop.patience,
                           trials=req.trials, race=req.measure.race, warmup=WARMUP_SAMPLES)

    def _measure_beside(self, knobs: Mapping[str, Any], old_knobs: Mapping[str, Any]
                        ) -> tuple[stats.Estimate | None, stats.Estimate | None]:
        """An own best's `knobs` and the old best's, measured now, interleaved
        (`measure.finals` of the two, to the search precision): (own, old), each None
        when it failed. The warm rule's side-by-side re-measure."""
        from dataclasses import replace

        from .measure import Finalist, finals

        req = self.req
        t0 = time.perf_counter()
        try:
            got = finals(req.template, self.wl, req.target,
                         [Finalist("search", dict(knobs), knobs_key(knobs)),
                          Finalist("previous", dict(old_knobs), "previous")],
                         replace(req.measure, precision=req.measure.search_precision),
                         runner=self.runner, builder=self.builder)
        finally:  # the finals leave the runner set to the options they were given
            self.runner.set_options(req.measure)
        self._time("warm_side_by_side_s", t0)
        return got[0].estimate, got[1].estimate

    def _predicted_gain(self, picked: Sequence[tuple[Any, int, dict[str, Any]]]) -> float | None:
        """The cost model's best predicted gain over the incumbent among the candidates it
        is about to measure (relative: 0.05 is 5% faster); None while it is not trained
        (before WARMUP_SAMPLES records, prior and replay included, it predicts at random)."""
        from .builder import schedule_config

        knobs = self.progress.best_knobs
        if knobs is None or not picked or getattr(self.cost_model, "data_size", 0) < WARMUP_SAMPLES:
            return None
        key = knobs_key(knobs)
        cand = self._candidate_of.get(key)
        if cand is None:
            sch = schedule_config(self.req.template, self.wl, knobs, self.req.target)
            info = self.ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            cand = self._candidate_of[key] = self.ms.MeasureCandidate(sch, info)
        t0 = time.perf_counter()
        preds = [float(x) for x in self.cost_model.predict(self.ctx, [cand, *(c for c, _, _ in picked)])]
        self._time("search_predict_s", t0)
        # Scores are throughput over the best seen (higher is faster); their ratio is the
        # model's expected speedup of its best candidate over the incumbent.
        if not preds[0] > 0:
            return None
        return max(preds[1:]) / preds[0] - 1

    def _candidates(self) -> list[tuple[Any, int, dict[str, Any]]] | None:
        """The strategy's next batch, as (candidate, design space, knobs); None: exhausted."""
        t0 = time.perf_counter()
        cands = self.ctx.generate_measure_candidates()
        self._time("search_generate_s", t0)
        if cands is None:
            return None
        picked = self._unseen(cands)[: self.req.trials - self.done]
        if not picked:
            self.ctx.notify_runner_results([], [])
        return picked

    def _cold_start(self) -> bool:
        """Nothing measured (resumed, replayed) and nothing learned (the old log's records):
        the cost model's scores would be random."""
        return self.done == 0 and getattr(self.cost_model, "data_size", 0) == 0

    def _unseen(self, cands: Sequence[Any]) -> list[tuple[Any, int, dict[str, Any]]]:
        picked = []
        for c in cands:
            sidx, kv = decode_knobs(plain(c.sch.trace.as_json()), self.spaces, self.knobs)
            key = knobs_key(kv)
            if key not in self.seen:  # else measured before (a resume, a duplicate draw)
                self.seen.add(key)
                picked.append((c, sidx, kv))
        return picked

    def _first_batch(self) -> list[tuple[Any, int, dict[str, Any]]]:
        """FIRST_BATCH configurations drawn at random from the design spaces, with the
        template's postprocessors (constraints included), seeded from the context's
        random state. Measured as search trials, but not told to the evolutionary
        strategy (it did not propose them); its population is seeded from the database,
        which holds them."""
        t0 = time.perf_counter()
        draw = self.ms.search_strategy.ReplayTrace()
        draw._initialize_with_tune_context(self.ctx)
        n = min(FIRST_BATCH, self.req.trials - self.done)
        draw.pre_tuning(max_trials=n, num_trials_per_iter=n, design_spaces=self.schedules,
                        database=self.db, cost_model=self.cost_model)
        try:
            cands = draw.generate_measure_candidates() or []
        finally:
            draw.post_tuning()
        self._time("search_generate_s", t0)
        return self._unseen(cands)

    def replay(self, configs: Sequence[Mapping[str, Any]], source: str = "replay") -> ReplayStats:
        """The history replay, before the search: each configuration is checked against
        reference() (where the kernel runs), then the good ones are measured as the
        first batch. They become the first trials (journal, log), the cost model is
        trained on them, and the database the evolutionary search seeds its population
        from holds them. Not told to the strategy: it did not propose them.

        On this machine each configuration is built once: the check runs the library
        the builder made, and the runner measures that same library (a compile of its
        own for the check made check + build 1.4-1.6x as long: bench_replay, Zen 3). With
        an RPC runner the check builds for a device of the key first, as before.

        `source="new_region"`: the same for the probes of the region an edit opened
        (`history.probes`); they count as the search's own trials, not the old log's."""
        from .builder import schedule_config
        from .numerics import check_correct

        ms, req = self.ms, self.req
        where = f"{template_name(req.template)} workload {self.name!r}"
        failures: list[str] = []
        # Per configuration: (built, correct), or its program's key when that is decided
        # by the build and check below (configurations that make one program, as two old
        # ones mapped to one new point, share them).
        status: list[tuple[bool, bool] | str] = []
        outcome: dict[str, tuple[bool, bool]] = {}
        fresh: list[tuple[Mapping[str, Any], Any, int, dict[str, Any], str]] = []
        # Where the replay's seconds go (stats replay_*_s; bench_warmstart prints them).
        t0 = time.perf_counter()
        for kv in configs:
            try:
                if req.rpc is not None:  # on a device of the key, with a build of its own
                    check_correct(req.template, self.wl, req.target, kv, rpc=req.rpc)
                sch = schedule_config(req.template, self.name, kv, req.target)
            except (TuningError, TemplateError) as e:
                built_ok = "does not build" not in str(e) and not isinstance(e, TemplateError)
                failures.append(_short(str(e)))
                status.append((built_ok, False))
                continue
            sidx, decoded = decode_knobs(plain(sch.trace.as_json()), self.spaces, self.knobs)
            key = knobs_key(decoded)
            status.append(key)
            if key in self.seen:  # measured before (checked then): not again
                outcome.setdefault(key, (True, True))
            elif key not in outcome:
                outcome[key] = (False, False)
                args_info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
                fresh.append((kv, ms.MeasureCandidate(sch, args_info), sidx, decoded, key))
        self._time("replay_schedule_s", t0)
        t0 = time.perf_counter()
        results = self.builder.build([ms.builder.BuilderInput(c.sch.mod, self.target) for _, c, _, _, _ in fresh])
        self._time("replay_build_s", t0)
        t0 = time.perf_counter()
        picked: list[tuple[Any, int, dict[str, Any]]] = []
        prebuilt: list[Any] = []
        for (kv, cand, sidx, decoded, key), res in zip(fresh, results, strict=True):
            if res.error_msg:
                failures.append(_short(f"{where}: the given configuration does not build: {res.error_msg}"))
                continue
            try:
                if req.rpc is None:
                    check_correct(req.template, self.wl, req.target, kv, library=res.artifact_path)
            except (TuningError, TemplateError) as e:
                failures.append(_short(str(e)))
                outcome[key] = (True, False)
                remove_artifact(res.artifact_path)
                continue
            outcome[key] = (True, True)
            self.seen.add(key)
            picked.append((cand, sidx, decoded))
            prebuilt.append(res)
        counted = [outcome[x] if isinstance(x, str) else x for x in status]
        built = sum(b for b, _ in counted)
        correct = sum(c for _, c in counted)
        old_best_correct = bool(counted) and counted[0][1]
        room = max(0, req.trials - self.done)
        for res in prebuilt[room:]:  # over the budget: not measured
            remove_artifact(res.artifact_path)
        picked, prebuilt = picked[:room], prebuilt[:room]
        self._time("replay_check_s", t0)
        n0, n_runs, t0 = self.done, len(self.runner.timings), time.perf_counter()
        if picked:
            self._measure(picked, notify=False, source=source, prebuilt=prebuilt)
        self._time("replay_measure_s", t0)
        # Of which: loading, and the evaluator's runs (summed over the replay and the probes).
        for key, secs in zip(("replay_load_s", "replay_eval_s"), self._run_seconds(n_runs), strict=True):
            self.stats[key] = self.stats.get(key, 0.0) + secs
        measured = sum(e["error"] is None for e in self.journal.trials[n0:])
        if source == "replay" and old_best_correct:  # what the stop rule of a warm run must match
            first_key = status[0]
            first = next((e for e in self.journal.trials[n0:]
                          if e["error"] is None and knobs_key(e["knobs"]) == first_key), None)
            old_best = entry_estimate(first) if first is not None else None
            if first is not None and old_best is not None:
                self.warm = WarmStop(self._warm_options(), old_best, first["knobs"], self._measure_beside)
        return ReplayStats(len(configs), built, correct, measured, tuple(failures[:3]),
                           old_best_correct)

    def _measure(
        self, picked: list[tuple[Any, int, dict[str, Any]]], *, notify: bool = True,
        source: str = "search", prebuilt: Sequence[Any] | None = None,
    ) -> None:
        """Build (unless `prebuilt`) and run one batch, tell the strategy (unless
        `notify` is off: it did not propose them) and the cost model, commit, journal."""
        ms, req = self.ms, self.req
        cands = [c for c, _, _ in picked]
        incumbent = self.progress.best_latency
        self.runner.set_policy(
            search_policy(req.measure, req.measure.race * incumbent if incumbent else None)
        )
        try:
            measured = _run_batch(cands, self.target, self.builder, self.runner, ms, prebuilt)
        finally:
            self.runner.set_options(req.measure)
        self.stats.setdefault("first_trial_s", time.perf_counter() - self.t_start)
        results = [r for r, _, _ in measured]
        ran = [r for r, _, reached in measured if reached]
        if req.rpc is not None and ran and not any(_ok(r) for r in ran):
            # Nothing reached a device and came back: lost or hung devices, or sessions
            # too short. Stop (the journal keeps the batches before) rather than finish
            # with a log of failures.
            raise rpc_failure(
                req.rpc,
                [str(r.error_msg) for r in ran],
                f"{template_name(req.template)}/{self.name}: all {len(ran)} measurements of a batch "
                f"(after {self.done} trials)",
            )
        # One number per measurement, the estimate: what the strategy, the cost model
        # and the database (TVM's own ranking) see.
        ests = [stats.estimate(r.run_secs) if _ok(r) else None for r in results]
        results = [
            ms.runner.RunnerResult([e.value], None) if e is not None else r
            for r, e in zip(results, ests, strict=True)
        ]
        if notify:
            self.ctx.notify_runner_results(cands, results)
        ok = [(c, r) for c, r in zip(cands, results, strict=True) if _ok(r)]
        if ok:
            t0 = time.perf_counter()
            self.cost_model.update(self.ctx, [c for c, _ in ok], [r for _, r in ok])
            self._time("search_cost_model_s", t0)
        # JSONDatabase appends one line per record: the exact JSON the log keeps.
        rec_path = self.work_dir / RECORD_FILE
        offset = rec_path.stat().st_size
        workload = self.db.commit_workload(self.ctx.mod)
        for c, r in zip(cands, results, strict=True):
            secs = [float(x) for x in r.run_secs] if _ok(r) else [FAILED_RUN_SECS]
            self.db.commit_tuning_record(
                ms.database.TuningRecord(c.sch.trace, workload, secs, self.target, c.args_info)
            )
        with open(rec_path, "rb") as f:
            f.seek(offset)
            lines = [json.loads(x) for x in f.read().decode("utf-8").splitlines() if x.strip()]
        self.batches += 1
        batch = max((e["batch"] for e in self.journal.trials), default=0) + 1
        entries: list[Trial] = []
        for (_, sidx, kv), (r, device, _), est, line in zip(
            picked, measured, ests, lines, strict=True
        ):
            err = None if est is not None else str(r.error_msg or "no measurement")
            trial = self.done + len(entries) + 1
            raced = bool(est is not None and incumbent and est.n <= req.measure.probe
                         and est.value > req.measure.race * incumbent)
            entry: Trial = {
                "trial": trial,
                "batch": batch,
                "space": sidx,
                "knobs": kv,
                "latency_s": est.value if est is not None else None,
                "ci": [est.lo, est.hi] if est is not None and est.n >= stats.MIN_SAMPLES
                else None,
                "n": est.n if est is not None else 0,
                "stage": ("probe" if raced else "search") if est is not None else None,
                "error": err,
                "device": device,
                "record": line[1],
            }
            if source != "search":
                entry["source"] = source
            entries.append(entry)
            self.progress.add(trial, est if not raced else None, self.flop, kv)
        self.journal.append(entries)
        if req.on_batch is not None:
            best = self.progress.best_latency
            n_ok = sum(e["error"] is None for e in entries)
            req.on_batch(
                BatchEvent(
                    workload_name=self.name,
                    batch=self.batches,
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

