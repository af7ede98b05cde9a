"""One time budget spent across many (operator, target, workload) items: `retune --budget`.

A fleet's yearly re-tune spends the same trials on every workload however much it
matters. With a budget, every item first gets its **floor**: its correctness check,
its noise check, its history replay, its finals and the search's warm-up (the first
`search.WARMUP_SAMPLES` trials, where a search gains most: the steep start of its
curve). Only the time beyond the floors of the items still to tune is shared by
weight (`operators.NAME.weight` / `workloads:` in tvmtune.yaml: the share of the
end-to-end time a profile gives). Measured (bench_budget, AMD EPYC Zen 5, 2 cores,
weights 60/25/10/5%): shares by weight alone gave conv2d, weight 0.10, 16 trials where
equal shares gave it 32, and its best came out 1.6-2.1x slower; the weighted
end-to-end time ended 1.03x and 1.05x the equal arm's, at 1.17-1.26x its seconds,
because nothing reserved the later items' floors.

**The lightest run first, the heaviest last.** A floor differs between items (a conv2d
trial costs more than a softmax one) and is known only once the item has run; the
floors reserved for the items still to come are a guess. Run first, the heaviest item
was given what that guess left: with conv2d weighted 0.60, its own floor (35 s,
measured in its warm-up) taken for the 6 items after it reserved the whole budget, and
it got 35-36 trials where equal trials gave it 64, while the items after it, with
floors of 17-25 s, ran 50-98 trials. Last, the heaviest item takes what the
others' measured floors and shares left, as Ansor's task scheduler gives every task its
warm-up round before its gradient spends the rest. The weighted end-to-end time went
from 1.18-1.23x that of equal trials at the same seconds to 1.00-1.02x (equal's own
spread between seeds: 1.01-1.02x) at 0.76-0.80x the seconds, conv2d running to early
stop (98-100 trials; bench_budget run 6, Zen 5, 3 seeds). An item that needs
less (its search stops early, or its history says the old best still holds) leaves the
rest to the items after it. One that still gains fast when its share is spent goes on,
batch by batch, while its gradient beats the items after it (`Budget.go_on`): in
bench_budget's second run the weight shares held the budget, yet conv2d (weight 0.10)
was cut at 48 trials at 2.03 ms where 64-80 trials reached 0.63-0.77 ms, while the
0.30-weight matmuls' extra trials bought 3-9%.

A floor is estimated from the items done that searched (their median: what each took
besides its search, plus its warm-up trials at its own pace; an item that stopped after
its replay or was carried forward measured no warm-up, `floor_of`); before any is done,
from the measurement settings, until the first searching item's warm-up ends and
measures its own (`Budget.reshare`). Pure Python, no TVM: `matrix --budget` splits a
budget between runner jobs with it.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..core.errors import UsageError

Item = tuple[str, str, str]  # (operator, target, workload)

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str = "--budget") -> float:
    """Seconds of `90m`, `2h`, `1h30m`, `3600s` or `3600`; UsageError otherwise."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", t)
        if not parts or "".join(a + b for a, b in parts) != t:
            raise UsageError(f"{option} {text!r} is not a duration; write e.g. 90m, 2h, 1h30m or 3600s")
        seconds = sum(float(a) * _UNITS[b] for a, b in parts)
    if seconds <= 0:
        raise UsageError(f"{option} {text!r} must be positive")
    return seconds


def fmt_duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.0f} s"


@dataclass
class Budget:
    """`total_s` seconds across `weights` (item -> weight), spent from `start`;
    `floor_s`: what an item costs at least before any is done (`floor_estimate`)."""

    total_s: float
    weights: dict[Item, float]
    start: float = field(default_factory=time.monotonic)
    floor_s: float = 0.0
    done: dict[Item, float] = field(default_factory=dict)  # item -> seconds it took
    floors: dict[Item, float] = field(default_factory=dict)  # item -> its floor, measured

    def order(self) -> list[Item]:
        """The items, lightest first and the heaviest last (ties by name): the order they
        should run in, so that the heaviest is given what the others' measured floors
        left, not what a guess at them left (the module's docstring)."""
        return sorted(self.weights, key=lambda i: (self.weights[i], i))

    def spent_s(self) -> float:
        return time.monotonic() - self.start

    def left_s(self) -> float:
        return max(0.0, self.total_s - (time.monotonic() - self.start))

    def floor(self) -> float:
        """An item's floor: the median of those measured, else the estimate given."""
        return statistics.median(self.floors.values()) if self.floors else self.floor_s

    def share(self, item: Item, left_s: float | None = None, measured: str = "") -> tuple[float, str]:
        """Seconds `item` may take now (or with `left_s` left, as at its start), and why,
        in words: its floor, and its weight's share of what is left beyond the floors of
        the items not done (itself included)."""
        todo = {i: w for i, w in self.weights.items() if i not in self.done}
        total = sum(todo.values()) or 1.0
        w = todo.get(item, self.weights.get(item, 0.0))
        left, floor = self.left_s() if left_s is None else left_s, self.floor()
        pool = max(0.0, left - floor * max(1, len(todo)))
        seconds = floor + pool * w / total
        return seconds, (
            f"{fmt_duration(seconds)} of the {fmt_duration(self.total_s)} budget: "
            f"its floor ({fmt_duration(floor)}: checks, finals and the search's "
            f"warm-up{measured}) and weight {w:.2f} of the {total:.2f} still to tune of the "
            f"{fmt_duration(pool)} beyond the floors of the {len(todo)} left"
        )

    def reshare(self, item: Item, floor_s: float, left_s: float) -> tuple[float, str] | None:
        """The first searching item's share again once its warm-up is done, its own floor
        (`floor_s`: its seconds so far and its finals) measured: it replaces the estimate
        from the measurement settings for every item, and its share is recomputed with
        the `left_s` seconds that were left at its start. None once a searching item
        is done (the floors measured then decide). The settings' estimate counts every
        contender and finalist at its time cap, a ceiling: on a 2-core Zen 5 it said 37 s
        where the items' floors were 17-25 s (bench_budget run 4): reserved for 6 items
        after the first, it would leave the first nothing beyond its floor at a budget of
        64 trials' worth."""
        if self.floors:
            return None
        self.floor_s = floor_s
        return self.share(item, left_s=left_s, measured=", measured in its own warm-up")

    def go_on(self, item: Item, spent_s: float, gain_per_s: float, need_s: float) -> tuple[bool, str]:
        """Past its share, may `item` spend one more batch (`need_s`: the batch, its finals
        and its part of the set's history run)? Items run one after another and a search
        is not come back to, so this is Ansor's greedy choice made one item at a time:
        go on while the item's measured gradient (its weight x what its last batches
        gained per second) beats the best gradient an item after it is guessed to have at
        the end of its share (Ansor's optimistic forward guess: a best that keeps
        improving like 1 / the time spent on it), and the floors of the items after it
        stay reserved. A search still gaining fast is not cut at its share; the seconds
        come from the items after it. One whose curve has flattened stops at its share."""
        later = {i: w for i, w in self.weights.items() if i not in self.done and i != item}
        left = self.left_s()
        floors = self.floor() * len(later)
        if left - floors < need_s:
            return False, (
                f"the {fmt_duration(left)} left were the floors of the {len(later)} item(s) after it"
                if later
                else "the budget was spent"
            )
        g = self.weights.get(item, 0.0) * max(0.0, gain_per_s)
        if not later:  # the seconds have no other use, but a flat search is not worth them
            return (
                g > 0,
                f"its gradient {_pct_min(g)}, no item after it"
                if g > 0
                else "its last batches gained nothing, no item after it",
            )
        pool = max(0.0, left - need_s - floors)
        total = sum(later.values()) or 1.0
        lam, best = max((w / (self.floor() + pool * w / total), i) for i, w in later.items())
        name = f"{best[0]}/{best[2]}"
        if g > lam:
            return True, f"its gradient {_pct_min(g)} beat {name}'s {_pct_min(lam)} at the end of its share"
        return False, (
            f"its gradient {_pct_min(g)} (its last batches' gain) fell below {name}'s "
            f"{_pct_min(lam)} at the end of its share"
        )

    def finish(self, item: Item, seconds: float, floor_s: float | None = None) -> None:
        """`item` took `seconds`, of which `floor_s` (when known) were its floor."""
        self.done[item] = seconds
        if floor_s is not None:
            self.floors[item] = floor_s


def _pct_min(g: float) -> str:
    """A gradient (a share of the end-to-end time per second) in words."""
    return f"{g * 6000:.2g}% of the end-to-end time per min"


def floor_estimate(
    time_cap_s: float, search_cap_s: float, finalists: int, warmup: int, history_s: float = 0.0
) -> float:
    """An item's floor before any is measured, from the measurement settings: the
    baseline and the finals (the finalists, the default and the previous best) at one
    time cap each, the correctness check at about two more, the warm-up's trials at the
    search's cap per contender, and its part of its set's history run (`history_s`)."""
    return time_cap_s * (finalists + 4) + warmup * search_cap_s + history_s


def floor_of(seconds: float, stats: Mapping[str, float], warmup: int, history_s: float = 0.0) -> float | None:
    """What a finished item's floor was: all it took besides its search, its search's
    first `warmup` trials at the pace of its whole search, and its part of its set's
    history run (`history_s`, measured after the set's workloads).

    None when its search measured nothing (its history said the old search stands, or
    nothing was left of its share): what it took has no warm-up in it, so it says
    nothing of what an item that searches costs. Counted among the floors, it would pull
    their median down (on a 2-core Zen 5, a matmul whose old search stood took 11-12 s
    in all, bench_warmstart run S, where searching items' floors were 17-35 s,
    bench_budget runs 4-5), and with it the floors kept for the items after it: an item
    past its share would go on into seconds their warm-ups take anyway (a warm-up is
    never cut), and the run would end over its budget."""
    search_s = stats.get("search_s", 0.0)
    trials = stats.get("search_trials", 0.0)
    if not trials:
        return None
    pace = search_s / trials
    return max(0.0, seconds - search_s) + pace * min(trials, warmup) + history_s


def split(total_s: float, groups: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """A budget split between runner jobs (group -> its items' weights) in proportion to
    the weights each job carries: what `matrix --budget` gives each job."""
    sums = {g: sum(ws) for g, ws in groups.items()}
    total = sum(sums.values()) or 1.0
    return {g: total_s * s / total for g, s in sums.items()}
