"""The tuner's outcome types, and what the search reports on the way (its request,
which names tune/'s types, is `tune/request.py`).

Kept apart from `tuner.py` and `search.py` so that the modules those types pass
through (`search`, `journal`, `records`) import them from here, not from the tuner
that imports them: no cycle. Plain data, no TVM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from .manifest import Measured, Trials

__all__ = ["BatchEvent", "ReplayStats", "Trial", "TuneOutcome"]


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
