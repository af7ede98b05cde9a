"""The time-budget gate of one search (`BudgetGate`): before each batch, whether the
item's share of a time budget (budget.py) stops the search. It owns the share (the
request's, until it is asked for again after the warm-up), the search's gradient
(when, and the best latency, after each batch) and what the budget said past the share.

The loop (`search.Search`) asks `stops()` before each batch and `mark()`s the best after
it; the gate answers with the stop detail, in words, when the share is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .request import TuneRequest

# Batches whose gain per second is a search's backward gradient past its share of a
# time budget (TVM auto_scheduler's task scheduler: backward_window_size=3).
BACKWARD_BATCHES = 3


@dataclass(frozen=True)
class BudgetOptions:
    """What the gate needs of the request: the item's share of the time budget (None:
    no budget) and its words, the seconds its finals need, the warm-up the budget gives
    every item (own trials), and the budget's two questions (`TuneRequest.budget_more`,
    `TuneRequest.budget_reshare`)."""

    share_s: float | None
    note: str
    finals_s: float
    warmup: int
    more: Callable[[float, float, float], tuple[bool, str]] | None = None
    reshare: Callable[[float], tuple[float, str] | None] | None = None

    @classmethod
    def of(cls, req: TuneRequest, warmup_samples: int) -> BudgetOptions:
        """The options of `req`: the finals need one time cap per finalist, the default
        and the previous best; the warm-up is `warmup_samples` trials of its own, or all
        it asked for."""
        return cls(
            share_s=req.time_budget_s,
            note=req.budget_note,
            finals_s=req.measure.time_cap_s * (req.measure.finalists + 2),
            warmup=min(warmup_samples, req.trials),
            more=req.budget_more,
            reshare=req.budget_reshare,
        )


class BudgetGate:
    """Whether one search's share of a time budget is spent, counted from `t_start`."""

    def __init__(self, options: BudgetOptions, t_start: float) -> None:
        self.options, self.t_start = options, t_start
        # The item's share and its words: the request's, until `reshare` answers.
        self.share_s, self.share_note, self.reshared = options.share_s, options.note, False
        # (when, the best's latency) after each batch of the search: its gradient under
        # a time budget; and how many batches the budget gave it past its share, and why
        # it stopped there.
        self.marks: list[tuple[float, float]] = []
        self.extra, self.why = 0, ""

    def mark(self, best_s: float) -> None:
        """The search's best latency after a batch, now."""
        self.marks.append((time.perf_counter(), best_s))

    def stops(self, own_trials: int) -> str | None:
        """Before a batch, after `own_trials` trials of the search's own: why the share
        stops the search, in words; None while it goes on."""
        stop, why = self._ask(own_trials)
        if why:  # asked past the share: it went on this batch, or stops here
            self.why, self.extra = why, self.extra + (not stop)
        return self._detail() if stop else None

    def _ask(self, own: int) -> tuple[bool, str]:
        """Whether the item's share of a time budget stops the search now, and the budget's
        words when it was asked. The share is spent less what its finals need (one time cap
        per finalist, the default and the previous best); never before its warm-up
        (WARMUP_SAMPLES trials of its own, or all it asked for): the steep start of a
        search's curve, which a budget gives every item (budget.py). When the warm-up is
        done, the share is asked for again with the floor it measured (`reshare`)."""
        o = self.options
        if o.share_s is None or own < o.warmup:
            return False, ""
        finals_s = o.finals_s
        now = time.perf_counter()
        if not self.reshared and o.reshare is not None:
            self.reshared = True
            if (again := o.reshare(now - self.t_start + finals_s)) is not None:
                self.share_s, self.share_note = again
        assert self.share_s is not None
        if now - self.t_start + finals_s < self.share_s:
            return False, ""
        if o.more is None or len(self.marks) < 2:
            return True, ""
        # Past its share: the budget decides, batch by batch, from the gain per second
        # of the last BACKWARD_BATCHES batches (Ansor's backward window) whether the
        # search still pays more than its seconds would in the items after it.
        (t0, b0), (t1, b1) = self.marks[-1 - min(BACKWARD_BATCHES, len(self.marks) - 1)], self.marks[-1]
        gain = (b0 - b1) / b1 / (t1 - t0) if t1 > t0 and b1 > 0 else 0.0
        batch_s = t1 - self.marks[-2][0]
        more, why = o.more(now - self.t_start + finals_s, gain, batch_s + finals_s)
        return not more, why

    def _detail(self) -> str:
        detail = f"its share of the time budget was spent ({self.share_note})"
        if self.why:
            went_on = (
                f"it went on for {self.extra} batch{'es' if self.extra != 1 else ''} "
                "while its gradient beat the items after it; "
                if self.extra
                else ""
            )
            detail += f"; {went_on}then {self.why}"
        return detail
