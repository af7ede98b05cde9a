"""What one workload's tuning is asked to do (`TuneRequest`): the template, workload and
target, the budget, the measuring options, what an old log offers, and the callbacks.

Here in tune/, beside the types it names (the resolved `Workload`, the `Runner`), not
in `core/tunetypes.py` with the outcome: core/ never imports tune/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..core.configschema import EarlyStop, MeasureOptions, RpcRunner
from ..core.tunetypes import BatchEvent
from .runners.controls import Runner
from .workload import Workload


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
    # Whether the replayed old best sets the stop rule of a re-tune with history
    # (`warmstop.WarmStop`). False for another target's log (seed-from, the nearest
    # target): its configurations are a weaker prior, other hardware ranks them
    # otherwise, so they give the search a head start and the cold rule alone ends it.
    warm_stop: bool = True
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
