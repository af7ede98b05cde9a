"""The tuner's request and outcome types, and what the search reports on the way.

Kept apart from `tuner.py` and `search.py` so that the modules those types pass
through (`search`, `journal`, `records`) import them from here, not from the tuner
that imports them: no cycle. Plain data, no TVM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

from .config import EarlyStop, MeasureOptions, RpcRunner
from .manifest import Measured, Trials

if TYPE_CHECKING:  # tune/ types, named here without importing tune/
    from ..tune.runners import Runner
    from ..tune.workload import Workload

__all__ = ["BatchEvent", "ReplayStats", "Trial", "TuneOutcome", "TuneRequest"]


class _TrialKeys(TypedDict):
    trial: int  # 1-based, in measuring order (0: a finalist the search never measured)
    batch: int
    space: int | None  # design space index
    knobs: dict[str, Any]
    latency_s: float | None  # None: failed (then `error` says why)
    error: str | None
    device: str | None  # who measured it: "local", an RPC "host:port", None if none did
    record: list[Any]  # the TuningRecord JSON as JSONDatabase writes it


class Trial(_TrialKeys, total=False):
    """One measured trial: what the search journals (journal.py, resumable), the tuner
    puts on the finals' scale and `records.write_log` writes as a line of the log.
    Plain JSON (a dict), so the journal and the log read it back as written."""

    ci: list[float] | None  # 95% interval of latency_s (with enough samples)
    n: int  # samples
    stage: str | None  # "search", "probe" (raced out), "finals", "finals (tied ...)"
    source: str  # "replay" (an old log's), "new_region" (a probe of an edit); absent: the search
    measured_s: float  # the search's own figure, when `latency_s` is on the finals' scale
    scale: float  # that scale (the winner's finals estimate / the best search figure of all)


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
    probes: int = 0  # points of the region the edit opened, measured after the replay
    # The search's finalists left out of the finals: programs the old log measured,
    # unchanged by the edit, as the old best's (tuner._new_programs).
    finals_left_out: int = 0


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    """What `tune_workload` tunes and how: the template module and workload, the
    target (and RPC runner), the budget, seed, measurement and early-stop settings,
    the resumable `work_dir`, and what the previous log offers (its best, or after
    a template edit its configurations to replay and its records as a prior)."""

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
    # The KNOBS of the template the old log was tuned with, when known: the region the
    # edit opened is probed next to the old best after the replay (`history.probes`).
    old_knobs: tuple[Any, ...] | None = None
    # Every record of the old log (this target's own) as (its configuration in this knob
    # space, the key of the program the old template made of it; "" for one the edit
    # repaired): `priors.old_programs`. When this template makes the same programs and
    # the edit opened no knob values (`old_knobs` known), the old search stands and the
    # search stops after the replay (`search.old_search_stands`).
    old_programs: tuple[tuple[dict[str, Any], str], ...] = ()
    # A share of a time budget (`retune --budget`, budget.py): the search stops when
    # tune_workload has run this long less what the finals need; never before its
    # warm-up (search.WARMUP_SAMPLES trials of its own).
    time_budget_s: float | None = None
    budget_note: str = ""  # the share, in words (README, commit)
    # Past its share, asked before each batch: (seconds the item will have taken with
    # its finals, the search's gain per second over its last batches, the seconds one
    # more batch needs) -> (go on?, why in words). `Budget.go_on`; None: stop at the share.
    budget_more: Callable[[float, float, float], tuple[bool, str]] | None = None
    # Asked once, when the warm-up is done: (the seconds the item will have taken at its
    # floor: so far, and its finals) -> its share again and the words, or None to keep
    # it. `Budget.reshare`: the first searching item's floor, measured, replaces the estimate.
    budget_reshare: Callable[[float], tuple[float, str] | None] | None = None
    # The workload resolved once (a `workload.Workload` of `template`, `workload_name`
    # and `target`): its parameters, module and FLOPs. None: tune_workload
    # resolves it.
    workload: Workload | None = None
    # A runner (`runners.make_runner(measure, rpc)`) the caller shares between the
    # workloads of a set and closes: its worker process (TVM's import, ~2 s) starts
    # once. None: tune_workload makes its own and closes it.
    runner: Runner | None = None


@dataclass(frozen=True)
class TuneOutcome:
    """What one workload's tuning produced: the log records, the best and default from
    the finals, the top table, trials, curve and timings."""

    workload_name: str
    # Every measured trial, in trial order (records.write_log turns them into the log).
    records: list[Trial]
    best: Measured  # from the finals, interleaved with `baseline`
    baseline: Measured  # the default configuration, in the finals
    top: tuple[Measured, ...]  # finals first, then the search's; sorted by latency
    trials: Trials
    curve: tuple[tuple[int, float], ...]  # (trial index, best-so-far GFLOPS), 1-based
    space_size: int  # points in all design spaces together
    design_spaces: int
    # The noise check: in a cold run the best of the search's first batch (stage
    # "first_batch"), in a re-tune with history the old best as the replay measured it
    # (stage "replay"), else the default configuration before the search (stage "single").
    noise_check: Measured | None
    workload_json: list[str] = field(default_factory=list)  # a line of database_workload.json
    flop: float = 0.0
    # Timings and counts (seconds): correctness_s, baseline_s, setup_s, first_trial_s,
    # prior_s (the cost model trained on the old log's records), replay_s, search_s,
    # verify_s, total_s, compile_s, export_s, load_s, eval_s, resumed,
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
    # A GPU target: the best's arch, shared memory and registers per block as its build
    # reported them (tune/gpubuild.py's gpu_resources); None on a CPU.
    gpu: dict[str, Any] | None = None
