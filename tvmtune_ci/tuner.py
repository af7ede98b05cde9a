"""The search driver: tune one workload of an operator template with MetaSchedule.

`tune_workload(req)` runs these steps, each a function of its own:

1. `check_correct`: the default configuration against `reference` (TuningError first).
2. `measure_baseline`: the noise check; the default configuration's latency.
3. the search: MetaSchedule's `EvolutionarySearch` with an `XGBModel` over a
   `ScheduleFn` space (one design space per structural choice), driven batch by batch
   here (as `TaskScheduler` does) so we own early stop, progress and the builder.
4. resume: every measured batch is appended (fsync) to a journal in `work_dir`; a
   rerun after a kill replays it into the database given to `pre_tuning`, counts it
   toward the budget and trains the cost model on it before searching on.
   Each candidate is sampled adaptively (`measure.search_policy`): a first probe;
   probes all slower than `race` x the incumbent end there (recorded as measured
   slow, and still teach the cost model); contenders are sampled to
   `search_precision`. Every number is `stats.estimate` (the lower quartile), also
   the run_secs committed to the database, so TVM's own ranking is ours. Early stop
   counts an improvement only when it exceeds the measured noise band.
5. the finals (`measure.finals`): the search's top `finalists`, the default
   configuration and the previous best (when given) re-measured in interleaved
   rounds; the winner is chosen on that data and its numerics checked. A previous
   best that is equal within noise is kept.

Search knobs map to MetaSchedule as the template API says: a split is a
`SamplePerfectTile` (mutated by `MutateTileSize`), a categorical knob a
`SampleCategorical`. MetaSchedule's only categorical mutator, `MutateUnroll`, touches
only decisions that feed `meta_schedule.unroll_*` annotations, so `MutateCategorical`
(a `PyMutator`) re-draws any other categorical decision.

Importing this module does not import TVM.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from . import stats
from .builder import (
    make_builder,
    make_postprocs,
    remove_artifact,
    workload_module,
    workload_params,
)
from .config import EarlyStop, MeasureOptions, RpcRunner
from .errors import TemplateError, TuningError
from .manifest import Measured, Trials
from .measure import (
    Finalist,
    FinalResult,
    check_correct,
    device_type,
    finals,
    flop_count,
    full_knobs,
    gflops,
    make_runner,
    measure_baseline,
    measured,
    rpc_failure,
    search_policy,
)
from .records import FAILED_RUN_SECS, RECORD_FILE, WORKLOAD_FILE
from .targetinfo import scope
from .template import Categorical, Knob, Knobs, Split, design_spaces, space_size

__all__ = [
    "BatchEvent",
    "TuneRequest",
    "TuneOutcome",
    "SpaceInfo",
    "design_space_infos",
    "tune_workload",
    "decode_knobs",
]

JOURNAL_FORMAT = 2  # 2: estimates (lower quartile + interval) per trial
JOURNAL_NAME = "journal.jsonl"
SAMPLE_KINDS = ("SamplePerfectTile", "SampleCategorical")
TOP_N = 10
# Valid samples before the XGB model's predictions replace random scores (stock: 100,
# which leaves a 64-trial run a random search). It trains on every batch until then.
WARMUP_SAMPLES = 32


# --------------------------------------------------------------------------- API types


@dataclass(frozen=True)
class BatchEvent:
    """Progress after each measured batch (what `on_batch` receives)."""

    workload_name: str
    batch: int  # 1-based, counting batches of this process
    trials_done: int  # including resumed ones
    budget: int
    best_latency_s: float | None
    best_gflops: float | None
    batch_valid: int
    batch_failed: int
    elapsed_s: float  # since tune_workload started
    resumed: int = 0  # trials loaded from work_dir


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    template: ModuleType
    workload_name: str
    target: dict[str, Any]
    trials: int
    work_dir: Path
    batch_size: int = 16
    seed: int = 42
    early_stop: EarlyStop = EarlyStop()
    measure: MeasureOptions = MeasureOptions()
    rpc: RpcRunner | None = None
    on_batch: Callable[[BatchEvent], None] | None = None
    # EvolutionarySearch's population (stock: 512). Each batch replays the population
    # through the template and postprocessors about five times; on a 2-core runner
    # 512 costs 4-7 s per batch of a padded GEMM, 128 about 1 s.
    population_size: int = 128
    # The template's semantic fingerprint (with its in-repo dependencies): part of the
    # resume key. Empty: the module's source text is used.
    fingerprint: str = ""
    # The previous log's best of this workload (knobs), a finalist when given.
    previous_knobs: dict[str, Any] | None = None
    # Told when the runner is noisy but usable (more samples are taken).
    warn: Callable[[str], None] | None = None
    # History replay (template edited): the previous log's configurations mapped into
    # this template's knob space, best first (`history.map_all`). Each is built, checked
    # against reference() and measured before the search, which starts from them. The
    # first is the old best: it replaces `previous_knobs` when it still computes right.
    replay: tuple[dict[str, Any], ...] = ()
    # The old log's other records (template edited), mapped into this knob space with
    # their old latencies (`priors.prior_for`): the cost model is trained on them
    # before the first batch. Not measured, not in the log.
    prior: tuple[tuple[dict[str, Any], float], ...] = ()


@dataclass(frozen=True)
class ReplayStats:
    """How the replayed configurations fared (counts, first failures)."""

    offered: int
    built: int
    correct: int
    measured: int
    failures: tuple[str, ...] = ()
    old_best_correct: bool = False
    prior: int = 0  # old records the cost model was trained on (TuneRequest.prior)


@dataclass(frozen=True)
class TuneOutcome:
    workload_name: str
    # One dict per measured trial, in trial order: {"trial", "batch", "space", "knobs",
    # "latency_s" (None if failed), "error" (None if valid), "device" (who measured it:
    # "local", an RPC server's "host:port", None if it never reached one), "record"
    # (TuningRecord JSON as JSONDatabase writes it)}. records.write_log turns these
    # into the log entry.
    records: list[dict[str, Any]]
    best: Measured  # from the finals, interleaved with `baseline`
    baseline: Measured  # the default configuration, in the finals
    top: tuple[Measured, ...]  # finals first, then the search's; sorted by latency
    trials: Trials
    curve: tuple[tuple[int, float], ...]  # (trial index, best-so-far GFLOPS), 1-based
    space_size: int  # points in all design spaces together
    design_spaces: int
    noise_check: Measured  # the default configuration before the search (noise check)
    workload_json: list[str] = field(default_factory=list)  # a line of database_workload.json
    flop: float = 0.0
    # Timings and counts (seconds): correctness_s, baseline_s, setup_s, first_trial_s,
    # search_s, verify_s, total_s, compile_s, export_s, load_s, eval_s, resumed,
    # devices_used (distinct devices that measured a valid trial), device_retries (RPC
    # measurements measured again after their device failed).
    stats: dict[str, float] = field(default_factory=dict)
    # The devices that measured a valid trial, sorted ("local" or RPC "host:port").
    devices: tuple[str, ...] = ()
    previous: Measured | None = None  # the previous best, in the finals
    previous_verdict: str | None = None  # this run's best vs previous: faster/equal/slower
    best_source: str = "search"  # "search", "default" or "previous"
    # The finals' results, for the log: {"role", "knobs", "estimate"} in finals order.
    final_results: tuple[dict[str, Any], ...] = ()
    replay: ReplayStats | None = None  # with TuneRequest.replay


# --------------------------------------------------------------------------- design spaces


@dataclass(frozen=True)
class SpaceInfo:
    """What a record's trace is compared with to name its decisions."""

    index: int
    structure: dict[str, Any]
    signature: str  # canonical JSON of the simplified design-space instructions
    sample_knobs: tuple[str, ...]  # the knob each sampling instruction belongs to, in order
    # The same for the unsimplified trace (what a fixed configuration's schedule records).
    full_signature: str = ""
    full_sample_knobs: tuple[str, ...] = ()


def _short(error: str, limit: int = 160) -> str:
    """The first line of an error, cut to `limit` characters."""
    line = next((x.strip() for x in error.strip().splitlines() if x.strip()), error)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _plain(obj: Any) -> Any:
    """A trace's JSON in one canonical form, whichever way it was produced.

    `Trace.as_json()` in Python and the JSONDatabase file differ in small ways: FloatImm
    objects vs numbers, bools vs 0/1, an IndexMap's JSON graph compact vs indented.
    """
    if isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, str) and obj[:1] == "{":
        try:  # an embedded JSON document (IndexMap): canonical whitespace
            return json.dumps(json.loads(obj), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return obj
    if isinstance(obj, (int, float, str)) or obj is None:
        return obj
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    value = getattr(obj, "value", None)  # IntImm / FloatImm
    if isinstance(value, (int, float)):
        return value
    return str(obj)


def _signature(insts: Sequence[Any]) -> str:
    return json.dumps(_plain(list(insts)), sort_keys=True, separators=(",", ":"))


def _cut_postproc(insts: Sequence[Any]) -> list[Any]:
    for i, inst in enumerate(insts):
        if inst[0] == "EnterPostproc":
            return list(insts[:i])
    return list(insts)


def space_info(
    index: int, structure: Mapping[str, Any], sch: Any, order: Sequence[str]
) -> SpaceInfo:
    """Describe a design space from its schedule and the knob order `Knobs` recorded.

    MetaSchedule searches `trace.simplified(remove_postproc=True)` of each design
    space, which drops sampling instructions whose result is unused; instructions keep
    their identity through simplification, so the kept ones keep their knob name.
    """
    full = [inst for inst in sch.trace.insts if inst.kind.name in SAMPLE_KINDS]
    if len(full) != len(order):
        raise TemplateError(
            f"design space {dict(structure)}: schedule() made {len(full)} sampling "
            f"instructions but sampled {len(order)} knobs through cfg; sample only through "
            "cfg.split/cfg.knob"
        )
    simplified = sch.trace.simplified(remove_postproc=True)
    kept = [inst for inst in simplified.insts if inst.kind.name in SAMPLE_KINDS]
    names: list[str] = []
    for inst in kept:
        for orig, name in zip(full, order, strict=True):
            if inst.same_as(orig):
                names.append(name)
                break
        else:  # pragma: no cover - simplification copies instructions by reference
            raise TemplateError(
                f"design space {dict(structure)}: cannot name a sampling instruction"
            )
    return SpaceInfo(
        index,
        dict(structure),
        _signature(simplified.as_json()[0]),
        tuple(names),
        _signature(_cut_postproc(sch.trace.as_json()[0])),
        tuple(order),
    )


def decode_knobs(
    trace_json: Sequence[Any], spaces: Sequence[SpaceInfo], knobs: Sequence[Knob]
) -> tuple[int, dict[str, Any]]:
    """(design space index, knob values by name) of a trace's JSON (`[insts, decisions]`).

    The instructions before `EnterPostproc` identify the design space: a searched trace
    replays the design space's simplified trace, a fixed configuration's schedule
    (`schedule_config`) records the unsimplified one. Two structural choices that
    schedule identically are one program and decode as the first. The decisions of the
    sampling instructions, in order, are the knobs the design space sampled: split -> the
    factors; categorical -> the candidate its index picks; structural -> the design
    space's choice. Knobs the trace does not decide (sampled but unused) are absent;
    `full_knobs` fills in their defaults.
    """
    insts, decisions = trace_json[0], trace_json[1]
    pre = _cut_postproc(insts)
    sig = _signature(pre)
    found = [(s, s.sample_knobs) for s in spaces if s.signature == sig]
    found += [(s, s.full_sample_knobs) for s in spaces if s.full_signature == sig]
    if not found:
        raise TuningError(
            "a trace matches no design space of the template (was the template changed since?)"
        )
    space, sample_knobs = found[0]
    decided = {int(i): d for i, d in decisions}
    positions = [i for i, inst in enumerate(pre) if inst[0] in SAMPLE_KINDS]
    decls = {k.name: k for k in knobs}
    out: dict[str, Any] = dict(space.structure)
    for pos, name in zip(positions, sample_knobs, strict=False):
        decl, d = decls[name], _plain(decided.get(pos))
        if d is None:
            continue
        if isinstance(decl, Split):
            out[name] = [int(x) for x in d]
        elif isinstance(decl, Categorical):
            out[name] = decl.candidates[int(d)]
    return space.index, out


def design_space_infos(
    template: ModuleType, workload_name: str, target: Mapping[str, Any]
) -> list[SpaceInfo]:
    """The design spaces of a template's workload on `target`, for `decode_knobs` (e.g.
    on another tool's records of the same template)."""
    from . import tvmsetup

    tvm = tvmsetup.load()
    space = _Space(template, workload_params(template, workload_name), target)
    sch = tvm.s_tir.Schedule(workload_module(template, workload_name))
    return [
        space_info(i, space.structures[i], s, space.orders[i]) for i, s in enumerate(space(sch))
    ]


def knobs_key(knobs: Mapping[str, Any]) -> str:
    return json.dumps(knobs, sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------- MetaSchedule pieces

_MUTATOR_CLASS: list[Any] = []


def _mutate_categorical_class() -> Any:
    if _MUTATOR_CLASS:
        return _MUTATOR_CLASS[0]
    from . import tvmsetup

    tvmsetup.load()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.mutator import PyMutator

    @derived_object
    class MutateCategorical(PyMutator):
        """Re-draw one SampleCategorical decision (any of them) to a different candidate."""

        def __init__(self, seed: int = 0) -> None:
            self._seed = seed
            self._rng = random.Random(seed)
            self._lock = threading.Lock()  # EvolutionarySearch mutates from several threads

        def _initialize_with_tune_context(self, context: Any) -> None:
            pass

        def apply(self, trace: Any, _rand_state: Any = None) -> Any:
            cands = [
                inst
                for inst in trace.insts
                if inst.kind.name == "SampleCategorical" and len(inst.attrs[0]) > 1
            ]
            if not cands:
                return None
            with self._lock:
                inst = cands[self._rng.randrange(len(cands))]
                n = len(inst.attrs[0])
                new = self._rng.randrange(n - 1)
            current = int(_plain(trace.get_decision(inst)))
            if new >= current:
                new += 1
            return trace.with_decision(inst, new, True)

        def clone(self) -> Any:
            return MutateCategorical(self._seed + 1)

    _MUTATOR_CLASS.append(MutateCategorical)
    return MutateCategorical


def make_mutators(knobs: Sequence[Knob], seed: int) -> dict[Any, float]:
    """Mutator -> probability, in proportion to the knobs each one can change."""
    from . import tvmsetup

    ms = tvmsetup.ms()
    n_split = sum(isinstance(k, Split) for k in knobs)
    n_cat = sum(isinstance(k, Categorical) and len(k.candidates) > 1 for k in knobs)
    total = n_split + n_cat
    out: dict[Any, float] = {}
    if n_split:
        out[ms.mutator.MutateTileSize()] = n_split / total
    if n_cat:
        out[_mutate_categorical_class()(seed)] = n_cat / total
    return out


class _Space:
    """The ScheduleFn space generator of a template; remembers each space's knob order."""

    def __init__(
        self, template: ModuleType, workload: Mapping[str, Any], target: Mapping[str, Any]
    ) -> None:
        self.template = template
        self.workload = dict(workload)
        self.target = dict(target)
        self.knobs: list[Knob] = list(getattr(template, "KNOBS", []))
        self.structures = design_spaces(self.knobs)
        self.orders: dict[int, list[str]] = {}

    def __call__(self, sch: Any) -> list[Any]:
        out = []
        for i, structure in enumerate(self.structures):
            s = sch.copy()
            cfg = Knobs(self.knobs, self.workload, structure, mode="search", target=self.target)
            self.template.schedule(s, cfg)
            self.orders[i] = list(cfg.order)
            out.append(s)
        return out


# --------------------------------------------------------------------------- journal (resume)


def request_fingerprint(req: TuneRequest) -> str:
    """What must match for a work_dir's trials to be reused: the template's semantic
    fingerprint (with its in-repo helpers), the workload, the target, the TVM version,
    the seed and every measurement setting (over RPC also the device key; not the
    tracker's address or the number of devices)."""
    source = req.fingerprint
    if not source:
        try:
            source = inspect.getsource(req.template)
        except (OSError, TypeError):
            source = repr([getattr(req.template, n, None) for n in ("WORKLOADS", "KNOBS")])
    from . import tvmsetup

    payload = {
        "journal": JOURNAL_FORMAT,
        "tvm": str(tvmsetup.load().__version__),
        "template": req.template.__name__,
        "source": hashlib.sha256(source.encode()).hexdigest(),
        "workload": req.workload_name,
        "params": workload_params(req.template, req.workload_name),
        "target": req.target,
        "seed": req.seed,
        "measure": sorted(vars(req.measure).items()),
        "population": req.population_size,
        "batch_size": req.batch_size,
    }
    if req.rpc is not None:  # trials measured on other hardware are not resumed
        payload["rpc_key"] = req.rpc.key
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class Journal:
    """`work_dir/journal.jsonl`: a header line, then one line per measured trial.

    Appended and fsynced after every batch; a line cut short by a kill is dropped on
    the next open. The JSONDatabase files next to it are rebuilt from the journal.
    """

    def __init__(self, work_dir: Path, fingerprint: str) -> None:
        self.work_dir = Path(work_dir)
        self.path = self.work_dir / JOURNAL_NAME
        self.fingerprint = fingerprint
        self.header: dict[str, Any] | None = None
        self.trials: list[dict[str, Any]] = []

    def load(self) -> bool:
        """Read a matching journal; False (and nothing kept) if absent or for another request."""
        if not self.path.exists():
            return False
        good: list[str] = []
        entries: list[dict[str, Any]] = []
        header = None
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut short by a kill: everything after it is lost
            if header is None:
                header = obj
            else:
                entries.append(obj)
            good.append(line)
        if (
            not isinstance(header, dict)
            or header.get("format") != JOURNAL_FORMAT
            or header.get("fingerprint") != self.fingerprint
        ):
            return False
        from .fsutil import atomic_write_text

        atomic_write_text(self.path, "".join(g + "\n" for g in good))
        self.header, self.trials = header, entries
        return True

    def start(self, header: dict[str, Any]) -> None:
        from .fsutil import atomic_write_text

        self.header = {"format": JOURNAL_FORMAT, "fingerprint": self.fingerprint, **header}
        self.trials = []
        atomic_write_text(self.path, json.dumps(self.header, sort_keys=True) + "\n")

    def append(self, entries: Sequence[dict[str, Any]]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            for e in entries:
                f.write(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.trials.extend(entries)


# --------------------------------------------------------------------------- the search


def failure_kind(error: str) -> str:
    """ "build", "run", "timeout" or "wrong_result" for a trial's error message."""
    if error.startswith("wrong result"):
        return "wrong_result"
    if "timeout" in error.lower():
        return "timeout"
    if error.startswith("InProcessBuilder"):
        return "build"
    return "run"


def failure_kinds(entries: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in entries:
        if e.get("error"):
            kind = failure_kind(e["error"])
            out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items()))


def _rand_state(seed: int, done: int) -> int:
    """The TuneContext seed: the request's, moved on by the trials a resume starts from
    (so a resumed search does not replay the first run's random draws)."""
    return max(1, (seed + done) % (2**31 - 1))


def _run_batch(
    cands: Sequence[Any], target: Any, builder: Any, runner: Any, ms: Any
) -> list[tuple[Any, str | None, bool]]:
    """Build every candidate in-process, then give all that built to the runner at once
    (an RPC runner measures them on its devices in parallel). Per candidate, in order:
    (RunnerResult, the device that measured it or None, whether it reached the runner)."""
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in cands])
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


def _entry_estimate(entry: Mapping[str, Any]) -> stats.Estimate | None:
    """A journal entry's estimate; None for a failed or raced (probe-only) trial."""
    if entry.get("error") or entry.get("latency_s") is None or entry.get("stage") == "probe":
        return None
    lo, hi = entry["ci"] if entry.get("ci") else (-math.inf, math.inf)
    return stats.Estimate(float(entry["latency_s"]), lo, hi, int(entry.get("n", 0)))


def _ok(result: Any) -> bool:
    return result.error_msg is None and bool(result.run_secs)


class Search:
    """One workload's MetaSchedule search: context, design spaces, database, journal,
    cost model; `run()` measures batch after batch until a stop reason."""

    def __init__(self, req: TuneRequest, builder: Any, runner: Any, t_start: float) -> None:
        from . import tvmsetup

        self.ms = ms = tvmsetup.ms()
        self.req, self.builder, self.runner, self.t_start = req, builder, runner, t_start
        self.name = req.workload_name
        workload = workload_params(req.template, self.name)
        self.knobs: list[Knob] = list(getattr(req.template, "KNOBS", []))
        per_space, n_spaces = space_size(self.knobs, scope(workload, req.target))
        self.space_size, self.n_spaces = per_space * n_spaces, n_spaces
        self.target = tvmsetup.make_target(dict(req.target))
        self.work_dir = Path(req.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.work_dir, request_fingerprint(req))
        resumed = self.journal.load()
        self.resumed = len(self.journal.trials)
        space = _Space(req.template, workload, req.target)
        self.ctx = ms.TuneContext(
            mod=workload_module(req.template, self.name),
            target=self.target,
            space_generator=ms.space_generator.ScheduleFn(
                space,
                sch_rules=[],
                postprocs=make_postprocs(),
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
        self.flop = flop_count(self.ctx.mod)
        self.schedules = self.ctx.generate_design_space()
        self.spaces = [
            space_info(i, space.structures[i], sch, space.orders[i])
            for i, sch in enumerate(self.schedules)
        ]
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
        self.progress = _Progress()
        self.seen: set[str] = set()
        for entry in self.journal.trials:
            self.seen.add(knobs_key(entry["knobs"]))
            self.progress.add(entry["trial"], _entry_estimate(entry), self.flop)
        self.stats: dict[str, float] = {}
        self.batches = 0
        self.prior_n = 0  # records the cost model learned from without measuring them

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
                sch = schedule_config(req.template, self.name, kv, req.target)
            except (TuningError, TemplateError):
                continue
            info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            cands.append(ms.MeasureCandidate(sch, info))
            results.append(ms.runner.RunnerResult([float(secs)], None))
        if cands:
            t0 = time.perf_counter()
            self.cost_model.update(self.ctx, cands, results)
            self._time("prior_s", t0)
        self.prior_n += len(cands)
        return len(cands)

    # ---- the loop

    def _time(self, key: str, t0: float) -> None:
        self.stats[key] = self.stats.get(key, 0.0) + time.perf_counter() - t0

    def run(self) -> str:
        """Search until the budget is spent, early stop, or the space runs out."""
        req = self.req
        if self.done >= req.trials:
            return "budget"
        n_built, n_runs = len(self.builder.compile_s), len(self.runner.timings)
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
                    "search_load_s": float(sum(x.load_s for x in self.runner.timings[n_runs:])),
                    "search_eval_s": float(sum(x.eval_s for x in self.runner.timings[n_runs:])),
                }
            )
        return reason

    def _loop(self) -> str:
        req, empty = self.req, 0
        while self.done < req.trials:
            if self.done >= self.space_size:
                return "space_exhausted"
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
            self._measure(picked)
            improved = self.progress.improved_since(
                prev_best, req.measure.search_precision, req.early_stop.min_improvement
            )
            # Batches before the cost model has WARMUP_SAMPLES valid trials are a random
            # search; they do not count toward patience. Replayed trials (history) do
            # not count either: a search seeded near the old best cannot beat it
            # beyond the noise at once, and stopping then would end it before it
            # explored as much as a cold one (measured: bench_warmstart). The old
            # log's records the model was trained on (prior) do count: with them its
            # proposals are guided from the first batch.
            warm = sum(
                e["error"] is None and e.get("source") != "replay" for e in self.journal.trials
            ) + self.prior_n >= WARMUP_SAMPLES
            if improved or not warm:
                self.progress.stale_batches = 0
            else:
                self.progress.stale_batches += 1
            patience = req.early_stop.patience
            if patience > 0 and self.progress.stale_batches >= patience and self.done < req.trials:
                return "early_stop"
        return "budget"

    def _candidates(self) -> list[tuple[Any, int, dict[str, Any]]] | None:
        """The strategy's next batch, as (candidate, design space, knobs); None: exhausted."""
        t0 = time.perf_counter()
        cands = self.ctx.generate_measure_candidates()
        self._time("search_generate_s", t0)
        if cands is None:
            return None
        picked = []
        for c in cands:
            sidx, kv = decode_knobs(_plain(c.sch.trace.as_json()), self.spaces, self.knobs)
            key = knobs_key(kv)
            if key not in self.seen:  # else measured before a resume: not again
                self.seen.add(key)
                picked.append((c, sidx, kv))
        picked = picked[: self.req.trials - self.done]
        if not picked:
            self.ctx.notify_runner_results([], [])
        return picked

    def replay(self, configs: Sequence[Mapping[str, Any]]) -> ReplayStats:
        """The history replay, before the search: each configuration is checked against
        reference() (where the kernel runs), then the good ones are measured as the
        first batch. They become the first trials (journal, log), the cost model is
        trained on them, and the database the evolutionary search seeds its population
        from holds them. Not told to the strategy: it did not propose them."""
        from .builder import schedule_config
        from .measure import check_correct

        ms, req = self.ms, self.req
        built = correct = 0
        failures: list[str] = []
        picked: list[tuple[Any, int, dict[str, Any]]] = []
        old_best_correct = False
        for i, kv in enumerate(configs):
            try:
                check_correct(req.template, self.name, req.target, kv, rpc=req.rpc)
            except (TuningError, TemplateError) as e:
                if "does not build" not in str(e) and not isinstance(e, TemplateError):
                    built += 1
                failures.append(_short(str(e)))
                continue
            built += 1
            correct += 1
            old_best_correct = old_best_correct or i == 0
            sch = schedule_config(req.template, self.name, kv, req.target)
            args_info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            sidx, decoded = decode_knobs(_plain(sch.trace.as_json()), self.spaces, self.knobs)
            key = knobs_key(decoded)
            if key not in self.seen:
                self.seen.add(key)
                picked.append((ms.MeasureCandidate(sch, args_info), sidx, decoded))
        picked = picked[: max(0, req.trials - self.done)]
        n0 = self.done
        if picked:
            self._measure(picked, notify=False, source="replay")
        measured = sum(e["error"] is None for e in self.journal.trials[n0:])
        return ReplayStats(len(configs), built, correct, measured, tuple(failures[:3]),
                           old_best_correct)

    def _measure(
        self, picked: list[tuple[Any, int, dict[str, Any]]], *, notify: bool = True,
        source: str = "search",
    ) -> None:
        """Build and run one batch, tell the strategy (unless `notify` is off: it did
        not propose them) and the cost model, commit, journal."""
        ms, req = self.ms, self.req
        cands = [c for c, _, _ in picked]
        incumbent = self.progress.best_latency
        self.runner.set_policy(
            search_policy(req.measure, req.measure.race * incumbent if incumbent else None)
        )
        try:
            measured = _run_batch(cands, self.target, self.builder, self.runner, ms)
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
                f"{req.template.__name__}/{self.name}: all {len(ran)} measurements of a batch "
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
        entries = []
        for (_, sidx, kv), (r, device, _), est, line in zip(
            picked, measured, ests, lines, strict=True
        ):
            err = None if est is not None else str(r.error_msg or "no measurement")
            trial = self.done + len(entries) + 1
            raced = bool(est is not None and incumbent and est.n <= req.measure.probe
                         and est.value > req.measure.race * incumbent)
            entries.append(
                {
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
                    **({"source": source} if source != "search" else {}),
                }
            )
            self.progress.add(trial, est if not raced else None, self.flop)
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


@dataclass
class _Progress:
    best: stats.Estimate | None = None  # the incumbent: the lowest contender estimate
    curve: list[tuple[int, float]] = field(default_factory=list)
    stale_batches: int = 0

    @property
    def best_latency(self) -> float | None:
        return self.best.value if self.best is not None else None

    def add(self, trial: int, est: stats.Estimate | None, flop: float) -> None:
        if est is not None and (self.best is None or est.value < self.best.value):
            self.best = est
        best = self.best_latency
        self.curve.append((trial, gflops(flop, best) if best else 0.0))

    def improved_since(
        self, before: stats.Estimate | None, fallback_rel: float, min_improvement: float
    ) -> bool:
        """The best moved by more than the noise band (the larger half-width of the two
        estimates; `fallback_rel` of the value for one without an interval), and by
        more than `min_improvement`."""
        now = self.best
        if now is None:
            return False
        if before is None:
            return True
        widths = [e.halfwidth_s for e in (now, before) if math.isfinite(e.halfwidth_s)]
        band = max(widths) if len(widths) == 2 else fallback_rel * before.value
        gain = before.value - now.value
        return gain > band and gain / before.value > min_improvement


# --------------------------------------------------------------------------- the steps


def _valid_sorted(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        (e for e in entries if e["error"] is None), key=lambda e: (e["latency_s"], e["trial"])
    )


def _all_failed(where: str, entries: Sequence[dict[str, Any]]) -> TuningError:
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
    req: TuneRequest, entries: list[dict[str, Any]], runner: Any, builder: Any
) -> _FinalsOutcome:
    """The search's top `finalists`, the default and the previous best, interleaved;
    the winner's numerics checked (a wrong one becomes a failed trial and the next
    is taken)."""
    template, name = req.template, req.workload_name
    where = f"{template.__name__}/{name}"
    by_key = {knobs_key(e["knobs"]): e for e in entries if e["error"] is None}
    keys = [knobs_key(e["knobs"]) for e in _valid_sorted(entries)[: req.measure.finalists]]
    if not keys:
        raise _all_failed(where, entries)
    finalists = [Finalist("search", by_key[key]["knobs"], key) for key in keys]
    finalists.append(Finalist("default", None, "default"))
    if req.previous_knobs is not None:
        finalists.append(Finalist("previous", dict(req.previous_knobs), "previous"))
    results = finals(template, name, req.target, finalists, req.measure,
                     runner=runner, builder=builder)
    while True:
        winner, tied = _decide(results)
        if winner is None:
            raise TuningError(
                f"{where}: no finalist could be measured; first errors: "
                + "; ".join(sorted({str(r.error)[:200] for r in results if r.error})[:3])
            )
        if winner.finalist.role == "default":
            return _FinalsOutcome(results, winner, tied)
        try:
            check_correct(template, name, req.target, winner.finalist.knobs, rpc=req.rpc)
            return _FinalsOutcome(results, winner, tied)
        except TuningError as err:
            if winner.finalist.role == "search":
                e = by_key.pop(winner.finalist.key)
                e["error"], e["latency_s"] = f"wrong result: {err}", None
            results = [
                r if r is not winner else FinalResult(r.finalist, None, error=f"wrong result: {err}")
                for r in results
            ]


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
    stats_: dict[str, float] = {}

    def lap(key: str, t0: float) -> float:
        now = time.perf_counter()
        stats_[key] = now - t0
        return now

    runner = make_runner(req.measure, req.rpc)  # its worker starts while we check numerics
    builder = None
    try:
        # Built libraries live in work_dir (each is deleted once measured), so a killed
        # run leaves nothing behind that the caller's removal of work_dir does not remove.
        builder = make_builder(str(Path(req.work_dir) / "artifacts"))
        check_correct(template, name, req.target, rpc=req.rpc)  # 1
        t = lap("correctness_s", t_start)
        noise = measure_baseline(
            template, name, req.target, req.measure, runner=runner, warn=req.warn
        )  # 2
        t = lap("baseline_s", t)
        search = Search(req, builder, runner, t_start)  # 3 + 4
        t = lap("setup_s", t)
        stats_["resumed"] = float(search.resumed)
        # The old log's other records teach the cost model before anything is measured
        # (also on a resume: the model is not saved).
        n_prior = search.train_prior(req.prior) if req.prior else 0
        replay = None
        if req.replay:
            if search.resumed:  # replayed before the interruption: in the journal
                done = [e for e in search.journal.trials if e.get("source") == "replay"]
                ok = sum(e["error"] is None for e in done)
                replay = ReplayStats(len(req.replay), ok, ok, ok, (), False)
            else:
                replay = search.replay(req.replay)
                t = lap("replay_s", t)
            replay = replace(replay, prior=n_prior)
            if not replay.old_best_correct:  # the old best is a finalist only if it works
                req = replace(req, previous_knobs=None)
            elif req.previous_knobs is None:
                req = replace(req, previous_knobs=dict(req.replay[0]))
        stop_reason = search.run()
        stats_.update(search.stats)
        t = time.perf_counter()
        entries = search.journal.trials
        fin = run_finals(req, entries, runner, builder)  # 5
        lap("finals_s", t)
        # The records of finalists that are not search trials (the default or the
        # previous best winning) are made from their schedules.
        extra: dict[str, dict[str, Any]] = {}
        for r in fin.results:
            if r.finalist.role != "search" and r is fin.winner:
                sch = schedule_config(template, name, r.finalist.knobs, req.target)
                extra[r.finalist.role] = search.record_json(sch)
    finally:
        if builder is not None:
            builder.close()
        runner.close()
    flop = search.flop
    records = [dict(e) for e in entries]
    rec_by_key = {knobs_key(e["knobs"]): e for e in records}
    # The search's numbers and the finals' come from different minutes of a machine
    # whose speed drifts. The log ranks them in one list (TVM's), so a configuration
    # left out of the finals is logged on the finals' scale: its search estimate x
    # (the winner's finals estimate / the best search estimate among the finalists).
    # It was ranked below every finalist by the search, so it stays below the winner.
    assert fin.winner.estimate is not None
    searched = [rec_by_key[r.finalist.key]["latency_s"] for r in fin.results
                if r.finalist.role == "search" and r.finalist.key in rec_by_key
                and rec_by_key[r.finalist.key]["latency_s"] is not None]
    scale = fin.winner.estimate.value / min(searched) if searched else 1.0
    final_keys = {r.finalist.key for r in fin.results if r.finalist.role == "search"}
    for e in records:
        if e["error"] is None and knobs_key(e["knobs"]) not in final_keys:
            e["measured_s"], e["scale"] = e["latency_s"], scale
            e["record"] = [e["record"][0], [e["latency_s"] * scale], *e["record"][2:]]
    final_json: list[dict[str, Any]] = []
    finals_measured: list[Measured] = []
    best = baseline = previous = None
    for i, r in enumerate(fin.results):
        f = r.finalist
        knobs = full_knobs(template, name, f.knobs, req.target)
        final_json.append({"role": f.role, "knobs": knobs,
                           "estimate": r.estimate.to_json() if r.estimate else None,
                           "error": r.error, "tied": i in fin.tied})
        if r.estimate is None:
            continue
        m = measured(knobs, r.estimate, flop, "finals")
        if f.role == "default":
            baseline = m
        elif f.role == "previous":
            previous = m
        if r is fin.winner:
            best = m
        if f.role == "search" or r is fin.winner:
            finals_measured.append(m)
        # The log's value of a finalist is its finals estimate; one tied with a kept
        # previous best is logged at the kept value, so TVM's ranking keeps it too.
        value = r.estimate.value
        if i in fin.tied:
            assert fin.winner.estimate is not None
            value = fin.winner.estimate.value
        e = rec_by_key.get(f.key) if f.role == "search" else None
        if e is None and r is fin.winner:
            e = {"trial": 0, "batch": 0, "space": None, "knobs": f.knobs or {}, "error": None,
                 "device": None, "record": extra[f.role]}
            records.append(e)
        if e is not None:
            e["latency_s"] = value
            e["ci"] = [r.estimate.lo, r.estimate.hi]
            e["n"] = r.estimate.n
            e["stage"] = "finals" + (" (tied with the kept previous best)" if i in fin.tied else "")
            e["record"] = [e["record"][0], [value], *e["record"][2:]]
    assert best is not None
    if baseline is None:  # the default could not be measured in the finals
        baseline = noise
    # On the finals' scale, as the log ranks them; the search's own number kept.
    search_top = [
        Measured(full_knobs(template, name, e["knobs"], req.target), e["latency_s"] * scale,
                 gflops(flop, e["latency_s"] * scale),
                 ci_lo_s=e["ci"][0] * scale if e.get("ci") else None,
                 ci_hi_s=e["ci"][1] * scale if e.get("ci") else None,
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
    devices = tuple(sorted({e["device"] for e in entries if not e["error"] and e.get("device")}))
    stats_["devices_used"] = float(len(devices))
    stats_["device_retries"] = float(len(getattr(runner, "retries", None) or ()))
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
            stop_reason=stop_reason,
            failures=failure_kinds(entries),
        ),
        curve=tuple(search.progress.curve),
        space_size=search.space_size,
        design_spaces=search.n_spaces,
        noise_check=noise,
        workload_json=list(search.workload_json),
        flop=flop,
        stats=stats_,
        devices=devices,
        previous=previous,
        previous_verdict=verdict,
        best_source=fin.winner.finalist.role,
        final_results=tuple(final_json),
        replay=replay,
    )
