"""One time budget spent across many (operator, target, workload) items: `retune --budget`.

A fleet's yearly re-tune spends the same trials on every workload however much it
matters. With a budget, each item gets, when its turn comes, the share of what is left
that its weight (`operators.NAME.weight` / `workloads:` in tvmtune.yaml: its share of
the end-to-end time a profile gives) has among the items not done yet; the heaviest go
first. An item that needs less (its search stops early, or its history says the old
best still holds) leaves the rest to the items after it. Every item still gets its
correctness check, its noise check and its history replay: they come out of its share.

Pure Python, no TVM: `matrix --budget` splits a budget between runner jobs with it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .errors import UsageError

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
    """`total_s` seconds across `weights` (item -> weight), spent from `start`."""

    total_s: float
    weights: dict[Item, float]
    start: float = field(default_factory=time.monotonic)
    done: dict[Item, float] = field(default_factory=dict)  # item -> seconds it took

    def order(self) -> list[Item]:
        """The items, heaviest first (ties by name): the order they should run in."""
        return sorted(self.weights, key=lambda i: (-self.weights[i], i))

    def left_s(self) -> float:
        return max(0.0, self.total_s - (time.monotonic() - self.start))

    def share(self, item: Item) -> tuple[float, str]:
        """Seconds `item` may take now, and why, in words: its weight's share of what is
        left among the items not done."""
        todo = {i: w for i, w in self.weights.items() if i not in self.done}
        total = sum(todo.values()) or 1.0
        w = todo.get(item, self.weights.get(item, 0.0))
        left = self.left_s()
        seconds = left * w / total
        return seconds, (f"{fmt_duration(seconds)} of the {fmt_duration(self.total_s)} budget: "
                         f"weight {w:.2f} of the {total:.2f} still to tune when it started, with "
                         f"{fmt_duration(left)} left")

    def finish(self, item: Item, seconds: float) -> None:
        self.done[item] = seconds


def split(total_s: float, groups: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """A budget split between runner jobs (group -> its items' weights) in proportion to
    the weights each job carries: what `matrix --budget` gives each job."""
    sums = {g: sum(ws) for g, ws in groups.items()}
    total = sum(sums.values()) or 1.0
    return {g: total_s * s / total for g, s in sums.items()}
