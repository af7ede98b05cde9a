"""The history replay, before the search: an old log's configurations (or the probes of
the region an edit opened) checked against reference() where the kernel runs, the good
ones measured as the search's first trials (journal, log), the cost model trained on
them, and the database the evolutionary search seeds its population from holding them.
Not told to the strategy: it did not propose them.

On this machine each configuration is built once: the check runs the library the
builder made, and the runner measures that same library (a compile of its own for the
check made check + build 1.4-1.6x as long: bench_replay, Zen 3). With an RPC runner the
check builds for a device of the key first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.errors import TemplateError, TuningError
from ..core.stats import Estimate
from ..core.template import template_name
from ..core.tunetypes import ReplayStats
from .builder import remove_artifact, schedule_config
from .numerics import check_correct
from .space import knobs_key
from .trials import entry_estimate

if TYPE_CHECKING:
    from .search import Search


def short(error: str, limit: int = 160) -> str:
    """The first line of an error, cut to `limit` characters."""
    line = next((x.strip() for x in error.strip().splitlines() if x.strip()), error)
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Replay:
    """One replay into `search` (its builder, runner, design spaces and measuring).
    `run` measures; `old_best` is then the first configuration's estimate and knobs when
    it computed right and was measured (what a warm run's stop rule must match)."""

    def __init__(self, search: Search, source: str = "replay") -> None:
        # `source="new_region"`: the probes of an edit's new region (`history.probes`);
        # they count as the search's own trials, not the old log's.
        self.search, self.source = search, source
        self.failures: list[str] = []
        self.old_best: tuple[Estimate, dict[str, Any]] | None = None

    def run(self, configs: Sequence[Mapping[str, Any]]) -> ReplayStats:
        s = self.search
        req, ms, wl = s.req, s.ms, s.wl
        where = f"{template_name(req.template)} workload {wl.name!r}"
        failures = self.failures
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
                    check_correct(req.template, wl, req.target, kv, rpc=req.rpc)
                sch = schedule_config(req.template, wl, kv, req.target)
            except (TuningError, TemplateError) as e:
                built_ok = "does not build" not in str(e) and not isinstance(e, TemplateError)
                failures.append(short(str(e)))
                status.append((built_ok, False))
                continue
            sidx, decoded = s.designs.decode(sch)
            key = knobs_key(decoded)
            status.append(key)
            if key in s.designs.seen:  # measured before (checked then): not again
                outcome.setdefault(key, (True, True))
            elif key not in outcome:
                outcome[key] = (False, False)
                args_info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
                fresh.append((kv, ms.MeasureCandidate(sch, args_info), sidx, decoded, key))
        s.add_time("replay_schedule_s", t0)
        t0 = time.perf_counter()
        results = s.builder.build([ms.builder.BuilderInput(c.sch.mod, s.target) for _, c, _, _, _ in fresh])
        s.add_time("replay_build_s", t0)
        t0 = time.perf_counter()
        picked: list[tuple[Any, int, dict[str, Any]]] = []
        prebuilt: list[Any] = []
        for (kv, cand, sidx, decoded, key), res in zip(fresh, results, strict=True):
            if res.error_msg:
                failures.append(short(f"{where}: the given configuration does not build: {res.error_msg}"))
                continue
            try:
                if req.rpc is None:
                    check_correct(req.template, wl, req.target, kv, library=res.artifact_path)
            except (TuningError, TemplateError) as e:
                failures.append(short(str(e)))
                outcome[key] = (True, False)
                remove_artifact(res.artifact_path)
                continue
            outcome[key] = (True, True)
            s.designs.seen.add(key)
            picked.append((cand, sidx, decoded))
            prebuilt.append(res)
        counted = [outcome[x] if isinstance(x, str) else x for x in status]
        built = sum(b for b, _ in counted)
        correct = sum(c for _, c in counted)
        old_best_correct = bool(counted) and counted[0][1]
        room = max(0, req.trials - s.done)
        for res in prebuilt[room:]:  # over the budget: not measured
            remove_artifact(res.artifact_path)
        picked, prebuilt = picked[:room], prebuilt[:room]
        s.add_time("replay_check_s", t0)
        n0, n_runs, t0 = s.done, len(s.runner.timings), time.perf_counter()
        if picked:
            s.measure(picked, notify=False, source=self.source, prebuilt=prebuilt)
        s.add_time("replay_measure_s", t0)
        # Of which: loading, and the evaluator's runs (summed over the replay and the probes).
        for key, secs in zip(("replay_load_s", "replay_eval_s"), s.run_seconds(n_runs), strict=True):
            s.stats[key] = s.stats.get(key, 0.0) + secs
        new = s.store.trials[n0:]
        measured = sum(e["error"] is None for e in new)
        if self.source == "replay" and old_best_correct:
            first = next((e for e in new if e["error"] is None and knobs_key(e["knobs"]) == status[0]), None)
            est = entry_estimate(first) if first is not None else None
            if first is not None and est is not None:
                self.old_best = (est, first["knobs"])
        return ReplayStats(len(configs), built, correct, measured, tuple(failures[:3]), old_best_correct)
