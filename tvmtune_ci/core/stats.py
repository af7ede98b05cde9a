"""The one latency estimator, its confidence interval, and the decisions built on it.

Noise on a shared runner is additive: a sample is the kernel's cost plus whatever
the machine took from it, never less. The estimator is the **lower quartile** (25th
percentile) of the samples, with a distribution-free 95% confidence interval from
order statistics (the number of samples below the true quartile is
Binomial(n, 1/4)), so no assumption on the shape of the noise is needed; it holds
for the bimodal spread a neighbour's burst gives. The mean and the median measure
the machine's load as much as the kernel; the minimum is one lucky sample (the
winner's curse) and has no interval. Measured in `docs/measurement.md`
(`benchmarks/study_estimator.py`).

Every number this tool publishes or ranks by comes from `estimate()`: the search's
ranking, racing, the finals, the previous-best decision, the log's records, the
README, the commit message and `remeasure`.

Pure Python (no numpy, no TVM): the light commands use it too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ESTIMATOR = "p25"
QUANTILE = 0.25
CONFIDENCE = 0.95
# The fewest samples whose order statistics give a 95% interval for the lower
# quartile (with 10, even [min, max] covers only 94.4%).
MIN_SAMPLES = 11


@dataclass(frozen=True)
class Estimate:
    """A latency estimate (seconds) with its 95% confidence interval [lo, hi]."""

    value: float
    lo: float
    hi: float
    n: int

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval's width over the estimate: the precision "± x%" states."""
        if not math.isfinite(self.lo) or not math.isfinite(self.hi) or self.value <= 0:
            return math.inf
        return (self.hi - self.lo) / 2.0 / self.value

    @property
    def halfwidth_s(self) -> float:
        return self.rel_halfwidth * self.value

    def to_json(self) -> dict[str, float | int]:
        return {"latency_s": self.value, "ci_lo_s": self.lo, "ci_hi_s": self.hi, "n": self.n}


def _binom_cdfs(n: int, p: float) -> list[float]:
    """[P(B <= k) for k in 0..n], B ~ Binomial(n, p), in one pass in log space (the
    terms' factors over- and underflow floats from a few hundred samples on)."""
    lp, lq = math.log(p), math.log1p(-p)
    out, total = [], 0.0
    for i in range(n + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
        out.append(min(1.0, total))
    return out


def quantile_ci_ranks(n: int, q: float = QUANTILE, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (l, u) with P(X_(l) <= q-quantile <= X_(u)) >= confidence, the
    narrowest such pair (ties: the more central); None when n samples cannot give one.

    The number B of samples below the true quantile is Binomial(n, q); the interval
    [X_(l), X_(u)] holds the quantile when l <= B < u.
    """
    cdf = _binom_cdfs(n, q)
    best: tuple[int, int] | None = None
    for lo in range(1, n + 1):
        for hi in range(lo + 1, n + 1):
            cover = cdf[hi - 1] - cdf[lo - 1]
            if cover >= confidence:
                if best is None or hi - lo < best[1] - best[0]:
                    best = (lo, hi)
                break
    return best


def quantile(xs: Sequence[float], q: float = QUANTILE) -> float:
    """The q-quantile, linearly interpolated between order statistics (numpy's default)."""
    s = sorted(xs)
    if not s:
        return math.nan
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


_RANKS: dict[int, tuple[int, int] | None] = {}


def estimate(samples: Sequence[float]) -> Estimate:
    """The lower quartile of `samples` with its order-statistic 95% interval (infinite
    when there are fewer than MIN_SAMPLES)."""
    s = sorted(float(x) for x in samples)
    n = len(s)
    if n == 0:
        return Estimate(math.inf, math.inf, math.inf, 0)
    if n not in _RANKS:
        _RANKS[n] = quantile_ci_ranks(n) if n <= 2000 else None
    ranks = _RANKS[n]
    if ranks is None and n > 2000:  # normal approximation of the binomial ranks
        sd = math.sqrt(n * QUANTILE * (1 - QUANTILE))
        ranks = (max(1, int(n * QUANTILE - 1.96 * sd)), min(n, int(n * QUANTILE + 1.96 * sd) + 1))
    if ranks is None:
        return Estimate(quantile(s), -math.inf, math.inf, n)
    return Estimate(quantile(s), s[ranks[0] - 1], s[ranks[1] - 1], n)


def from_json(d: dict[str, float | int]) -> Estimate:
    return Estimate(float(d["latency_s"]), float(d["ci_lo_s"]), float(d["ci_hi_s"]), int(d["n"]))


def faster(a: Estimate, b: Estimate) -> bool:
    """`a` is faster than `b` beyond the noise: their intervals do not overlap."""
    return a.hi < b.lo


def compare(a: Estimate, b: Estimate) -> str:
    """ "faster", "slower" or "equal" (within noise) for `a` against `b`."""
    if faster(a, b):
        return "faster"
    if faster(b, a):
        return "slower"
    return "equal"


def fmt_latency(e: Estimate | float, rel: float | None = None) -> str:
    """`4.455 ms ± 0.6%` (the precision as the interval's relative half-width)."""
    if isinstance(e, Estimate):
        value, rel = e.value, e.rel_halfwidth
    else:
        value = e
    if value >= 1.0:
        body = f"{value:.4g} s"
    elif value >= 1e-3:
        body = f"{value * 1e3:.4g} ms"
    else:
        body = f"{value * 1e6:.4g} us"
    if rel is None:
        return body
    if not math.isfinite(rel):
        return body + " ± ?"
    return f"{body} ± {rel * 100:.1f}%"
