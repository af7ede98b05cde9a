"""The history replay, before the search: an old log's configurations (or the probes of
the region an edit opened) checked against reference() where the kernel runs, the good
ones measured as the search's first trials (journal, log), the cost model trained on
them, and the database the evolutionary search seeds its population from holding them.
Not told to the strategy: it did not propose them.

On this machine each configuration is built once: the check runs the library the
builder made, and the runner measures that same library (a compile of its own for the
check made check + build 1.4-1.6x as long: bench_replay, Zen 3). With an RPC runner the
check builds for a device of the key first.

A replay takes what it uses of its search as a `ReplaySeam` (`Search.replay_seam`),
not the search: this module does not import `search.py`. `replay_history` is the
tuner's step around it: the old log's configurations, then the probes of a new region.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core.errors import TemplateError, TuningError
from ..core.history import probes as new_region
from ..core.stats import Estimate
from ..core.template import template_name
from ..core.tunetypes import ReplayStats, Trial
from .batch import Picked
from .builder import Builder, remove_artifact, schedule_config
from .numerics import check_correct
from .request import TuneRequest
from .space import Designs, knobs_key
from .trials import entry_estimate
from .workload import Workload

# (configuration, candidate, design space, decoded knobs, program key): one configuration
# built for the first time by a replay.
_Fresh = tuple[Mapping[str, Any], Any, int, dict[str, Any], str]


def short(error: str, limit: int = 160) -> str:
    """The first line of an error, cut to `limit` characters."""
    line = next((x.strip() for x in error.strip().splitlines() if x.strip()), error)
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass(frozen=True)
class ReplaySeam:
    """What a replay uses of the search it feeds (`Search.replay_seam`), as `WarmStop`
    takes its `measure_beside`: the request and workload, MetaSchedule, the target and
    builder, the design spaces, and three of the search's calls."""

    req: TuneRequest
    wl: Workload
    ms: Any  # MetaSchedule (`tvmsetup.ms()`)
    target: Any  # the TVM target the search builds for
    builder: Builder
    designs: Designs  # decodes a schedule into its knobs; the configurations seen
    done: Callable[[], int]  # the search's trials so far (the budget's room is what is left)
    add_time: Callable[[str, float], None]  # the seconds since t0 added to one of the search's stats
    # Measures the replayed configurations with their libraries as search trials, the
    # strategy not told (`Search.measure_replayed`); returns the trials it added.
    measure: Callable[[list[Picked], list[Any], str], list[Trial]]


class Replay:
    """One replay into a search (its `ReplaySeam`: builder, design spaces, measuring).
    `run` measures; `old_best` is then the first configuration's estimate and knobs when
    it computed right and was measured (what a warm run's stop rule must match)."""

    def __init__(self, seam: ReplaySeam, source: str = "replay") -> None:
        # `source="new_region"`: the probes of an edit's new region (`history.probes`);
        # they count as the search's own trials, not the old log's.
        self.seam, self.source = seam, source
        self.failures: list[str] = []
        self.old_best: tuple[Estimate, dict[str, Any]] | None = None

    def run(self, configs: Sequence[Mapping[str, Any]]) -> ReplayStats:
        s = self.seam
        # Where the replay's seconds go (stats replay_*_s; bench_warmstart prints them).
        t0 = time.perf_counter()
        status, outcome, fresh = self._schedule(configs)
        s.add_time("replay_schedule_s", t0)
        t0 = time.perf_counter()
        results = s.builder.build([s.ms.builder.BuilderInput(c.sch.mod, s.target) for _, c, _, _, _ in fresh])
        s.add_time("replay_build_s", t0)
        t0 = time.perf_counter()
        picked, prebuilt = self._check_built(fresh, results, outcome)
        counted = [outcome[x] if isinstance(x, str) else x for x in status]
        built = sum(b for b, _ in counted)
        correct = sum(c for _, c in counted)
        old_best_correct = bool(counted) and counted[0][1]
        room = max(0, s.req.trials - s.done())
        for res in prebuilt[room:]:  # over the budget: not measured
            remove_artifact(res.artifact_path)
        picked, prebuilt = picked[:room], prebuilt[:room]
        s.add_time("replay_check_s", t0)
        new = s.measure(picked, prebuilt, self.source)
        measured = sum(e["error"] is None for e in new)
        if self.source == "replay" and old_best_correct:
            self._keep_old_best(new, status[0])
        return ReplayStats(len(configs), built, correct, measured, tuple(self.failures[:3]), old_best_correct)

    def _schedule(
        self, configs: Sequence[Mapping[str, Any]]
    ) -> tuple[list[tuple[bool, bool] | str], dict[str, tuple[bool, bool]], list[_Fresh]]:
        """Each configuration scheduled (and with RPC checked on a device first): per
        configuration (built, correct), or its program's key when that is decided by the
        build and check that follow (configurations that make one program, as two old
        ones mapped to one new point, share them); the keys decided so far; and the
        configurations to build, one per program not measured before."""
        s = self.seam
        req, wl = s.req, s.wl
        status: list[tuple[bool, bool] | str] = []
        outcome: dict[str, tuple[bool, bool]] = {}
        fresh: list[_Fresh] = []
        for kv in configs:
            try:
                if req.rpc is not None:  # on a device of the key, with a build of its own
                    check_correct(req.template, wl, req.target, kv, rpc=req.rpc)
                sch = schedule_config(req.template, wl, kv, req.target)
            except (TuningError, TemplateError) as e:
                built_ok = "does not build" not in str(e) and not isinstance(e, TemplateError)
                self.failures.append(short(str(e)))
                status.append((built_ok, False))
                continue
            sidx, decoded = s.designs.decode(sch)
            key = knobs_key(decoded)
            status.append(key)
            if key in s.designs.seen:  # measured before (checked then): not again
                outcome.setdefault(key, (True, True))
            elif key not in outcome:
                outcome[key] = (False, False)
                args_info = s.ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
                fresh.append((kv, s.ms.MeasureCandidate(sch, args_info), sidx, decoded, key))
        return status, outcome, fresh

    def _check_built(
        self, fresh: list[_Fresh], results: Sequence[Any], outcome: dict[str, tuple[bool, bool]]
    ) -> tuple[list[Picked], list[Any]]:
        """The built configurations checked against reference() on this machine (with
        RPC, `_schedule` checked them): those that compute right, to measure, and their
        builder results; `outcome` told each key's (built, correct)."""
        s = self.seam
        req, wl = s.req, s.wl
        where = f"{template_name(req.template)} workload {wl.name!r}"
        picked: list[Picked] = []
        prebuilt: list[Any] = []
        for (kv, cand, sidx, decoded, key), res in zip(fresh, results, strict=True):
            if res.error_msg:
                self.failures.append(short(f"{where}: the given configuration does not build: {res.error_msg}"))
                continue
            try:
                if req.rpc is None:
                    check_correct(req.template, wl, req.target, kv, library=res.artifact_path)
            except (TuningError, TemplateError) as e:
                self.failures.append(short(str(e)))
                outcome[key] = (True, False)
                remove_artifact(res.artifact_path)
                continue
            outcome[key] = (True, True)
            s.designs.seen.add(key)
            picked.append((cand, sidx, decoded))
            prebuilt.append(res)
        return picked, prebuilt

    def _keep_old_best(self, new: Sequence[Trial], first_key: tuple[bool, bool] | str) -> None:
        """`old_best`: the first configuration's trial among `new`, when it was measured."""
        first = next((e for e in new if e["error"] is None and knobs_key(e["knobs"]) == first_key), None)
        est = entry_estimate(first) if first is not None else None
        if first is not None and est is not None:
            self.old_best = (est, first["knobs"])


def replay_history(
    req: TuneRequest,
    wl: Workload,
    replay: Callable[[Sequence[Mapping[str, Any]], str], ReplayStats],
    journal: Sequence[Trial] | None,
) -> ReplayStats:
    """The history replay of a re-tune (`req.replay`, the old best first): `replay` (the
    search's, `Search.replay`) of the old log's configurations, then of the probes of
    the region the edit opened (`history.probes`, when `req.old_knobs` holds the old
    declaration). A resumed run replayed before the interruption: `journal` (its trials;
    None when not resumed) says what."""
    if journal is not None:  # replayed before the interruption: in the journal
        done = [e for e in journal if e.get("source") == "replay"]
        ok = sum(e["error"] is None for e in done)
        return ReplayStats(len(req.replay), ok, ok, ok, (), False)
    got = replay(req.replay, "replay")
    if req.old_knobs is not None:
        found = new_region(
            req.replay[0], req.old_knobs, req.template.KNOBS, dict(wl.params), req.target, limit=req.batch_size
        )
        if found:
            p = replay(found, "new_region")
            got = replace(got, probes=p.measured)
    return got
