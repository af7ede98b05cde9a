"""A search's trials as its journal holds them, read: each entry's estimate, which
entries are the search's own (`source`), and the incumbent with its curve (`Progress`).
Shared by the loop (`search.Search`), its budget gate (`budgetgate.BudgetGate`) and the
stop rule of a re-tune with history (`warmstop.WarmStop`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import stats
from ..core.tunetypes import Trial
from .measure import gflops


def own_entries(trials: Sequence[Trial]) -> list[Trial]:
    """The journal entries of a search's own measured proposals: not the replay's
    (source "replay") nor a probe of the region an edit opened (source "new_region")."""
    return [e for e in trials if e["error"] is None and e.get("source") is None]


def trials_of_its_own(trials: Sequence[Trial]) -> int:
    """How many trials the search ran beyond the replay (its own and the probes): what a
    budget's warm-up and "matched the old best after N trials of its own" count."""
    return sum(e.get("source") != "replay" for e in trials)


def entry_estimate(entry: Mapping[str, Any]) -> stats.Estimate | None:
    """A journal entry's estimate; None for a failed or raced (probe-only) trial."""
    if entry.get("error") or entry.get("latency_s") is None or entry.get("stage") == "probe":
        return None
    lo, hi = entry["ci"] if entry.get("ci") else (-math.inf, math.inf)
    return stats.Estimate(float(entry["latency_s"]), lo, hi, int(entry.get("n", 0)))


@dataclass
class Progress:
    """The incumbent (the lowest contender estimate) and its knobs, the best-so-far
    curve (trial, GFLOP/s), and the cold rule's count of flat batches."""

    best: stats.Estimate | None = None  # the incumbent: the lowest contender estimate
    best_knobs: dict[str, Any] | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    stale_batches: int = 0

    @property
    def best_latency(self) -> float | None:
        return self.best.value if self.best is not None else None

    def add(self, trial: int, est: stats.Estimate | None, flop: float, knobs: dict[str, Any] | None = None) -> None:
        if est is not None and (self.best is None or est.value < self.best.value):
            self.best, self.best_knobs = est, knobs
        best = self.best_latency
        self.curve.append((trial, gflops(flop, best) if best else 0.0))

    def improved_since(self, before: stats.Estimate | None, fallback_rel: float, min_improvement: float) -> bool:
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
