"""Adaptive sampling: how one measurement decides it has sampled enough.

A `SamplePolicy` travels to wherever the kernel runs (the local worker, or inside the
RPC session) and `sample_loop` runs there: one sample is as many runs as fill
`sample_ms` (calibrated once, the calibration doubling as the warm-up), and samples
come in chunks until the lower quartile's interval is within the policy's precision,
its time cap is spent, or (racing) the first `probe` samples are all slower than
`race_above_s`. So a measurement costs one round trip however many samples it takes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import stats
from ..core.configschema import MeasureOptions


@dataclass(frozen=True)
class RunTiming:
    """Where one measurement's time went, in the worker."""

    load_s: float  # locally: dlopen; over RPC: upload + remote load + argument allocation
    eval_s: float  # the time evaluator call: warm-up + number x repeat runs (+ calibration)
    session_s: float = 0.0  # over RPC: the tracker handing out a server + opening the session


@dataclass(frozen=True)
class SamplePolicy:
    """When one measurement stops sampling (see the module docstring)."""

    sample_ms: float = 10.0
    precision: float = 0.01  # target relative half-width of the 95% interval
    cap_s: float = 2.0  # sampling time, excluding loading and calibration
    min_samples: int = stats.MIN_SAMPLES
    max_samples: int = 10_000
    race_above_s: float | None = None  # probe samples all above this: stop (raced)
    probe: int = 3
    chunk: int = 3  # samples per evaluator call (each call runs the kernel once unmeasured)
    number: int = 0  # runs per sample; 0: calibrate to fill sample_ms
    cache_flush: bool = False
    # Past cap_s, sampling goes on only until an interval is possible, and never past
    # this (set below the runner's kill timeout).
    hard_cap_s: float = 20.0

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def search_policy(measure: MeasureOptions, race_above_s: float | None = None) -> SamplePolicy:
    """A candidate during the search: probe, race, then sample to search_precision."""
    return SamplePolicy(
        sample_ms=measure.sample_ms,
        precision=measure.search_precision,
        cap_s=measure.search_cap_s,
        race_above_s=race_above_s,
        probe=measure.probe,
        chunk=measure.probe,
        cache_flush=measure.enable_cpu_cache_flush,
        hard_cap_s=hard_cap(measure),
    )


def full_policy(measure: MeasureOptions) -> SamplePolicy:
    """The baseline and one-off measurements: sample to `precision` within `time_cap_s`."""
    return SamplePolicy(
        sample_ms=measure.sample_ms,
        precision=measure.precision,
        cap_s=measure.time_cap_s,
        cache_flush=measure.enable_cpu_cache_flush,
        hard_cap_s=hard_cap(measure),
    )


def hard_cap(measure: MeasureOptions) -> float:
    """Sampling time a slow kernel may take to get an interval: well inside timeout_s
    (loading, calibration and the warm-up runs need the rest)."""
    return max(measure.time_cap_s, 0.6 * measure.timeout_s)


def sample_loop(evaluator_for: Any, args: Sequence[Any], policy: Mapping[str, Any]) -> dict[str, Any]:
    """Sample one loaded kernel as `policy` says (runs in the worker or RPC client).

    `evaluator_for(number, repeat, min_repeat_ms)` returns a time evaluator; returns
    {"samples", "number", "raced", "converged", "calibrate_s", "sample_s"}.
    """
    import time as _time

    p = dict(policy)
    t0 = _time.perf_counter()
    number = int(p["number"])
    if number <= 0:
        # One sample of `sample_ms` with TVM's own calibration; its mean run time sets
        # the runs per sample from now on. It warms caches and the thread pool too.
        cal = evaluator_for(1, 1, int(math.ceil(p["sample_ms"])))
        per_run = float(cal(*args).mean)
        number = max(1, math.ceil(p["sample_ms"] / 1e3 / per_run)) if per_run > 0 else 1
    t1 = _time.perf_counter()
    samples: list[float] = []
    raced = converged = False
    first = max(1, int(p["probe"]) if p["race_above_s"] is not None else int(p["chunk"]))
    ev_first = evaluator_for(number, first, 0)
    ev = evaluator_for(number, max(1, int(p["chunk"])), 0)
    while True:
        call = ev_first if not samples else ev
        samples.extend(float(x) for x in call(*args).results)
        n = len(samples)
        if p["race_above_s"] is not None and n <= first and min(samples) > p["race_above_s"]:
            raced = True
            break
        if n >= p["min_samples"] and stats.estimate(samples).rel_halfwidth <= p["precision"]:
            converged = True
            break
        # The cap stops sampling once an interval is possible; a slow kernel samples
        # on until it has one, up to hard_cap_s (below the runner's kill timeout).
        spent = _time.perf_counter() - t1
        if n >= p["max_samples"] or (spent >= p["cap_s"] and (n >= p["min_samples"] or spent >= p["hard_cap_s"])):
            break
    return {
        "samples": samples,
        "number": number,
        "raced": raced,
        "converged": converged,
        "calibrate_s": t1 - t0,
        "sample_s": _time.perf_counter() - t1,
    }


@dataclass(frozen=True)
class Sampled:
    """How one measurement ended, beside its samples (`runner.info_of(path)`)."""

    number: int
    raced: bool
    converged: bool


def device_type(target: Any) -> str:
    """The runtime device a target's kernels run on ("llvm" and "c" -> "cpu")."""
    kind = str(target.kind.name)
    return "cpu" if kind in ("llvm", "c") else kind


LOCAL_DEVICE = "local"  # what `device_of` says for this machine's runner
