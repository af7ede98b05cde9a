"""Measuring configurations: one, the baseline, and the finals.

Every latency is `stats.estimate` of a set of samples: the lower quartile (p25) with
its 95% order-statistic interval, sampled adaptively (`sampling.py`) by a runner
(`runners/`). `measure_config` measures one configuration, `measure_baseline` the
default one as the noise check, and `finals()` re-measures a few configurations in
interleaved rounds (A B C A B C ...) so that a slow period of the machine hits all of
them alike; winners, the previous best and the default are decided on that data only.
Numerics against `reference` are `numerics.py`.

Over 400 lines: single measurements, the finals and `interleave` (the run history's)
share one visit machinery (`_Visits`: build, calibrate runs per sample, measure, clean
up), so that every figure the tool compares was measured the same way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from ..core import stats
from ..core.configschema import MeasureOptions
from ..core.errors import TuningError
from ..core.manifest import Measured
from ..core.template import Categorical, Split, Structural, default_value, template_name
from . import tvmsetup
from .builder import Builder, make_builder, remove_artifact, schedule_config
from .rpclimits import rpc_failure
from .runners import Runner, make_runner
from .sampling import SamplePolicy, device_type, full_policy
from .workload import Workload, resolve

DEFAULT_MEASURE = MeasureOptions()


def gflops(flops: float, latency_s: float) -> float:
    """GFLOP/s of `flops` done in `latency_s`."""
    return flops / latency_s / 1e9 if latency_s > 0 else 0.0


def workload_bytes(template: ModuleType, wl: Workload) -> int:
    """Bytes one run must move at the least: every buffer of the PrimFunc's parameters
    (inputs read once, outputs written once). The bandwidth figure of a memory-bound
    operator (softmax, layernorm) divides this by the latency."""
    tvm = tvmsetup.load()
    func = resolve(template, wl).mod["main"]
    buffers = getattr(func, "buffer_map", None)  # TVM 0.27: the params are the buffers
    total = 0
    for p in func.params:
        buf = buffers.get(p) if buffers is not None else p
        if buf is None or not hasattr(buf, "shape"):
            continue
        n = 1
        for d in buf.shape:
            n *= int(d)
        dt = tvm.DataType(str(buf.dtype))
        total += n * ((dt.bits * dt.lanes + 7) // 8)
    return total


def measured(
    knobs: Mapping[str, Any], est: stats.Estimate, flop: float, stage: str, stopped: str | None = None
) -> Measured:
    """A manifest entry from an estimate (`stopped`: why its sampling stopped)."""
    return Measured(
        dict(knobs),
        est.value,
        gflops(flop, est.value) if flop else None,
        ci_lo_s=est.lo if math.isfinite(est.lo) else None,
        ci_hi_s=est.hi if math.isfinite(est.hi) else None,
        n=est.n,
        stage=stage,
        stopped=stopped or None,
    )


def run_schedule(
    sch: Any,
    target: Mapping[str, Any],
    runner: Runner,
    builder: Builder | None = None,
    what: str = "measuring a schedule",
) -> list[float]:
    """Build `sch` in-process, measure it with `runner` (its current policy); the samples
    in seconds. `what` names the measurement in the TuningError of an RPC failure."""
    ms = tvmsetup.ms()
    tgt = tvmsetup.make_target(dict(target))
    own = builder is None
    builder = builder or make_builder()
    try:
        (built,) = builder.build([ms.builder.BuilderInput(sch.mod, tgt)])
        if built.error_msg:
            raise TuningError(f"build failed: {built.error_msg}")
        try:
            args_info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            (fut,) = runner.run([ms.runner.RunnerInput(built.artifact_path, device_type(tgt), args_info)])
            res = fut.result()
        finally:
            remove_artifact(built.artifact_path)
        if res.error_msg:
            rpc = getattr(runner, "rpc", None)
            if rpc is not None:
                raise rpc_failure(rpc, [str(res.error_msg)], what)
            raise TuningError(f"measurement failed: {res.error_msg}")
        return [float(x) for x in res.run_secs]
    finally:
        if own:
            builder.close()


class _Session:
    """A runner (and builder) borrowed from the caller or owned for one call."""

    def __init__(self, measure: MeasureOptions, runner: Runner | None = None) -> None:
        self.measure = measure
        self.own = runner is None
        self.own_builder = True
        self._borrowed = runner

    def __enter__(self) -> _Session:
        self.runner: Runner = make_runner(self.measure) if self._borrowed is None else self._borrowed
        self.builder: Builder = make_builder()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.own:
            self.runner.close()
        if self.own_builder:
            self.builder.close()


def full_knobs(
    template: ModuleType, wl: Workload, knobs: Mapping[str, Any] | None, target: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every knob's value, defaults filled in (what a manifest records)."""
    # Inside: full_knobs is a pinned rule (templateapi.RULES), hashed with its imports;
    # moving this one to the top re-pins RULES_PINNED.
    from ..core.targetinfo import scope

    workload = scope(dict(resolve(template, wl).params), target)
    out: dict[str, Any] = {}
    knobs = knobs or {}
    for k in getattr(template, "KNOBS", []):
        if k.name in knobs:
            v = knobs[k.name]
            out[k.name] = [int(x) for x in v] if isinstance(k, Split) else v
        elif isinstance(k, (Split, Categorical, Structural)):
            out[k.name] = default_value(k, workload)
    return out


def measure_config(
    template: ModuleType,
    wl: Workload,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None,
    measure: MeasureOptions = DEFAULT_MEASURE,
    *,
    runner: Runner | None = None,
    policy: SamplePolicy | None = None,
) -> Measured:
    """Build and measure one configuration (knobs by name; None: the default), sampled
    to `measure.precision` within `measure.time_cap_s` (or as `policy` says)."""
    wl = resolve(template, wl, target)  # a name too, from callers outside the package
    with _Session(measure, runner) as s:
        sch = schedule_config(template, wl, knobs, target)
        s.runner.set_policy(policy or full_policy(measure))
        config = "a tuned configuration" if knobs else "the default configuration"
        what = f"{template_name(template)}/{wl.name}: measuring {config}"
        try:
            secs = run_schedule(sch, target, s.runner, s.builder, what)
        finally:
            s.runner.set_options(measure)
        full = full_knobs(template, wl, knobs, target)
        est = stats.estimate(secs)
        return measured(full, est, wl.flops, "single")


def measure_baseline(
    template: ModuleType,
    wl: Workload,
    target: Mapping[str, Any],
    measure: MeasureOptions = DEFAULT_MEASURE,
    *,
    runner: Runner | None = None,
    warn: Any = None,
) -> Measured:
    """The noise check: the default configuration sampled to `measure.search_precision`
    within `time_cap_s`. Short of it, `warn` is told; worse than `usable_precision`, it
    is sampled on for up to NOISY_EXTRA x `time_cap_s` more (all samples pooled), and
    still worse -> TuningError (the runner cannot measure usefully at all).

    It asks whether this runner can rank the search's contenders, which are sampled to
    `search_precision`; the finals re-measure the default to `precision`, beside the
    winner. A slow default (55-283 ms a run: conv2d, a 1024^3 matmul) sampled toward
    `precision` held the first trial back 9-13 s; sampled on toward `search_precision`
    on a runner already usable, 10.5 s (bench_tuner, Zen 4)."""
    wl = resolve(template, wl, target)
    where = f"{template_name(template)}/{wl.name}"
    flop = wl.flops
    with _Session(measure, runner) as s:
        sch = schedule_config(template, wl, None, target)
        what = f"{where}: measuring the default configuration"
        check = replace(full_policy(measure), precision=measure.search_precision)
        try:
            s.runner.set_policy(check)
            secs = run_schedule(sch, target, s.runner, s.builder, what)
            est = stats.estimate(secs)
            usable = est.rel_halfwidth <= measure.usable_precision
            if est.rel_halfwidth > measure.search_precision and warn is not None:
                warn(
                    f"{where}: noisy runner: the default configuration reached "
                    f"{_reached(est)} in {measure.time_cap_s:g}s, short of "
                    f"measure.search_precision ±{measure.search_precision:.1%}, the precision "
                    "the search ranks at; "
                    + (
                        f"tuning goes on (within measure.usable_precision "
                        f"±{measure.usable_precision:.1%}; the finals decide side by side)"
                        if usable
                        else "measuring on with more samples"
                    )
                )
            if not usable:
                more = replace(check, cap_s=NOISY_EXTRA * measure.time_cap_s)
                s.runner.set_policy(more)
                secs += run_schedule(sch, target, s.runner, s.builder, what)
                est = stats.estimate(secs)
        finally:
            s.runner.set_options(measure)
    base = measured(
        full_knobs(template, wl, None, target),
        est,
        flop,
        "single",
        "converged" if est.rel_halfwidth <= measure.search_precision else "time_cap",
    )
    if est.rel_halfwidth <= measure.usable_precision:
        return base
    spent = (1 + NOISY_EXTRA) * measure.time_cap_s
    raise TuningError(
        f"runner too noisy: the default configuration of {where} reached only "
        f"{_reached(est)} (95% interval of the {stats.ESTIMATOR}) in {est.n} samples within "
        f"{spent:g}s ({1 + NOISY_EXTRA} x measure.time_cap_s), worse than "
        f"measure.usable_precision ±{measure.usable_precision:.1%}; run on an idle runner (stop "
        "other jobs; `tvmtune-ci retune` alone on a dedicated self-hosted runner), or give it "
        "more time: raise measure.time_cap_s in tvmtune.yaml"
    )


# A noisy runner's baseline gets this many more time caps of samples.
NOISY_EXTRA = 3


def _reached(est: stats.Estimate) -> str:
    if math.isfinite(est.rel_halfwidth):
        return f"±{est.rel_halfwidth:.1%}"
    return f"no interval at all ({est.n} samples; one needs {stats.MIN_SAMPLES})"


def _rel(m: Measured) -> float:
    if m.ci_lo_s is None or m.ci_hi_s is None or m.latency_s <= 0:
        return math.inf
    return (m.ci_hi_s - m.ci_lo_s) / 2.0 / m.latency_s


# --------------------------------------------------------------------------- finals


@dataclass(frozen=True)
class Finalist:
    """A configuration in the finals: `role` is "search", "default" or "previous"."""

    role: str
    knobs: dict[str, Any] | None  # None: the default configuration
    key: str = ""  # the search's identity of it (its knobs as JSON)
    sch: Any = None  # a schedule to measure instead of building from knobs


@dataclass(frozen=True)
class FinalResult:
    """One finalist after the finals: its estimate and samples, or why it failed."""

    finalist: Finalist
    estimate: stats.Estimate | None
    samples: tuple[float, ...] = ()
    error: str | None = None
    # Why sampling stopped: "converged" (within measure.precision), "separated" (its
    # interval entirely above the leader's: out of the race) or "time_cap".
    stopped: str = ""


class _Visits:
    """Built kernels measured in visits of a few samples each (the finals' and
    `interleave`'s unit): one runner call per visit, runs per sample calibrated on the
    first visit and kept, artifacts removed on close."""

    def __init__(
        self, schs: Sequence[Any], target: Mapping[str, Any], measure: MeasureOptions, runner: Runner, builder: Builder
    ) -> None:
        ms = tvmsetup.ms()
        tgt = tvmsetup.make_target(dict(target))
        self.measure, self.runner = measure, runner
        self.inputs: dict[int, Any] = {}
        self.errors: dict[int, str] = {}
        self.number: dict[int, int] = {}
        todo = [i for i, sch in enumerate(schs) if sch is not None]
        built = builder.build([ms.builder.BuilderInput(schs[i].mod, tgt) for i in todo])
        for i, b in zip(todo, built, strict=True):
            if b.error_msg:
                self.errors[i] = f"build failed: {b.error_msg}"
            else:
                info = ms.arg_info.ArgInfo.from_entry_func(schs[i].mod, remove_preproc=True)
                self.inputs[i] = ms.runner.RunnerInput(b.artifact_path, device_type(tgt), info)
        # An RPC measurement is a session (connect, upload): fewer, longer visits there.
        self.chunk = 3 if getattr(runner, "rpc", None) is None else 12

    def visit(self, i: int) -> list[float] | None:
        """`chunk` samples of kernel i; None (and errors[i]) when the run failed."""
        m = self.measure
        self.runner.set_policy(
            SamplePolicy(
                sample_ms=m.sample_ms,
                precision=0.0,
                cap_s=math.inf,
                min_samples=self.chunk,
                max_samples=self.chunk,
                chunk=self.chunk,
                number=self.number.get(i, 0),
                cache_flush=m.enable_cpu_cache_flush,
            )
        )
        (fut,) = self.runner.run([self.inputs[i]])
        res = fut.result()
        if res.error_msg:
            self.errors[i] = str(res.error_msg)
            return None
        sampled = self.runner.info_of(str(self.inputs[i].artifact_path))
        if sampled is not None and sampled.number:
            self.number[i] = sampled.number
        return [float(x) for x in res.run_secs]

    def close(self) -> None:
        self.runner.set_options(self.measure)
        for inp in self.inputs.values():
            remove_artifact(inp.artifact_path)


def finals(
    template: ModuleType,
    wl: Workload,
    target: Mapping[str, Any],
    finalists: Sequence[Finalist],
    measure: MeasureOptions,
    *,
    runner: Runner,
    builder: Builder,
) -> list[FinalResult]:
    """Re-measure `finalists` in interleaved rounds (A B C, B C A, ...) until each is
    within `measure.precision`, or separated from the leader (its interval entirely
    above the leader's: out of the race, no more samples), or the finals' time
    (`time_cap_s` per finalist) is spent. One result per finalist, in order."""
    results: list[FinalResult | None] = [None] * len(finalists)
    schs: list[Any] = []
    wl = resolve(template, wl, target)  # a name too, from callers outside the package
    for i, f in enumerate(finalists):
        try:
            schs.append(f.sch or schedule_config(template, wl, f.knobs, target))
        except Exception as e:  # noqa: BLE001 - e.g. an old configuration the template refuses
            schs.append(None)
            results[i] = FinalResult(f, None, error=f"{type(e).__name__}: {e}")
    kernels = _Visits(schs, target, measure, runner, builder)
    samples: dict[int, list[float]] = {i: [] for i in kernels.inputs}
    stopped: dict[int, str] = {}
    active = list(kernels.inputs)
    budget_s = measure.time_cap_s * max(2, len(kernels.inputs))
    t0 = time.perf_counter()
    rnd = 0
    try:
        while active:
            order = active[rnd % len(active) :] + active[: rnd % len(active)]
            for i in order:
                got = kernels.visit(i)
                if got is None:
                    active.remove(i)
                    continue
                samples[i].extend(got)
            rnd += 1
            ests = {i: stats.estimate(v) for i, v in samples.items() if v and i not in kernels.errors}
            if not ests or min(ests[i].n if i in ests else 0 for i in active) < stats.MIN_SAMPLES:
                continue
            leader = min(ests.values(), key=lambda e: e.value)
            for i in list(active):
                if i not in ests:
                    continue
                if ests[i].rel_halfwidth <= measure.precision:
                    stopped[i] = "converged"
                elif ests[i].lo > leader.hi:
                    stopped[i] = "separated"
                else:
                    continue
                active.remove(i)
            if time.perf_counter() - t0 >= budget_s:
                stopped.update({i: "time_cap" for i in active})
                break
    finally:
        kernels.close()
    for i, err in kernels.errors.items():
        results[i] = FinalResult(finalists[i], None, error=err)
    for i in kernels.inputs:
        if results[i] is None:
            results[i] = FinalResult(
                finalists[i], stats.estimate(samples[i]), tuple(samples[i]), stopped=stopped.get(i, "converged")
            )
    return [r for r in results if r is not None]


@dataclass(frozen=True)
class Visit:
    """One turn of one kernel in `interleave`: when it started (seconds from the
    start) and its samples."""

    t_s: float
    samples: tuple[float, ...]


def interleave(
    schs: Sequence[Any],
    target: Mapping[str, Any],
    measure: MeasureOptions,
    *,
    seconds: float,
    runner: Runner,
    builder: Builder,
    what: str = "interleaved measurement",
) -> list[list[Visit]]:
    """Measure the schedules `schs` in tight alternation for `seconds`: round after
    round, each kernel one visit of a few samples, the starting kernel rotating, so
    every stretch of the machine's speed is seen by all of them alike. The visits per
    kernel, in order; TuningError naming `what` when one cannot be built or run."""
    kernels = _Visits(schs, target, measure, runner, builder)
    visits: list[list[Visit]] = [[] for _ in schs]
    try:
        if kernels.errors:
            i, err = next(iter(kernels.errors.items()))
            raise TuningError(f"{what}: kernel {i} could not be built: {err}")
        order = list(range(len(schs)))
        t0 = time.perf_counter()
        rnd = 0
        while True:
            for i in order[rnd % len(order) :] + order[: rnd % len(order)]:
                t = time.perf_counter() - t0
                got = kernels.visit(i)
                if got is None:
                    rpc = getattr(runner, "rpc", None)
                    if rpc is not None:
                        raise rpc_failure(rpc, [kernels.errors[i]], what)
                    raise TuningError(f"{what}: kernel {i} failed: {kernels.errors[i]}")
                visits[i].append(Visit(t, tuple(got)))
            rnd += 1
            if time.perf_counter() - t0 >= seconds:
                return visits
    finally:
        kernels.close()
