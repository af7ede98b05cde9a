"""Measuring: numerics against `reference`, the runner, the noise check, fixed configurations.

Latency is the mean of the runner's `repeat` samples (MetaSchedule's database ranks
records by the mean of `run_secs`, so our "best" and `query_schedule`'s agree).
`number: 0` means "enough runs to last `min_repeat_ms`": TVM's time evaluator is
given `number=1` and grows it until one sample lasts `min_repeat_ms`.

The runner is a MetaSchedule `Runner` behind `make_runner(measure, rpc)`: locally a
`WorkerRunner`, one persistent worker process (TVM's `PopenPoolExecutor`, as the
stock `LocalRunner`) that loads each built library, fills the arguments with random
data and runs the time evaluator; it also returns how long loading and evaluating
took, which the benchmark needs for its floor. A kernel that crashes or outlives
`timeout_s` kills only the worker, which restarts on the next measurement.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import numpy as np

from .builder import build_config, make_builder, remove_artifact, schedule_config, workload_params
from .config import MeasureOptions, RpcRunner
from .errors import DeviceError, TemplateError, TuningError
from .manifest import Measured
from .template import call_with_workload

DEFAULT_MEASURE = MeasureOptions()

# --------------------------------------------------------------------------- numerics

# (rtol, atol) per dtype; atol is scaled by max(1, max |reference|) because a
# reduction's rounding error grows with the magnitude of what it sums.
_TOLERANCE = {
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float32": (1e-4, 1e-4),
    "float64": (1e-9, 1e-9),
}


def tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) for comparing an output of `dtype` with numpy's reference."""
    if dtype in _TOLERANCE:
        return _TOLERANCE[dtype]
    if dtype.startswith("float"):
        return 1e-3, 1e-3
    return 0.0, 0.0  # integers and bool: exact


def _reference_arity(reference: Any, workload: Mapping[str, Any]) -> int:
    import inspect

    n = 0
    for p in inspect.signature(reference).parameters.values():
        if (
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.default is p.empty
            and p.name not in workload
        ):
            n += 1
        elif p.kind is p.VAR_POSITIONAL:
            return -1
    return n


def _random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype("bool")
    if dtype.startswith("uint"):
        return rng.integers(0, 8, size=shape).astype(dtype)
    if dtype.startswith("int"):
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def _mismatch_report(
    name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float
) -> str | None:
    if got.shape != want.shape:
        return f"output {name} has shape {got.shape} but reference() returned {want.shape}"
    g = got.astype("float64")
    w = want.astype("float64")
    err = np.abs(g - w)
    bad = ~(err <= atol + rtol * np.abs(w))  # NaN counts as a mismatch
    if not bad.any():
        return None
    rel = err / np.maximum(np.abs(w), np.finfo("float64").tiny)
    idx = np.argwhere(bad)
    abs_i = np.unravel_index(np.nanargmax(np.where(np.isnan(err), np.inf, err)), err.shape)
    rel_i = np.unravel_index(np.nanargmax(np.where(np.isnan(rel), np.inf, rel)), rel.shape)
    few = ", ".join(
        f"{list(map(int, i))}: got {g[tuple(i)]:.6g}, expected {w[tuple(i)]:.6g}" for i in idx[:5]
    )
    return (
        f"output {name}: {len(idx)} of {bad.size} elements differ (rtol={rtol:g}, atol={atol:g}); "
        f"max abs error {err[abs_i]:.6g} at {list(map(int, abs_i))}, "
        f"max rel error {rel[rel_i]:.6g} at {list(map(int, rel_i))}; first mismatches: {few}"
    )


def check_correct(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
) -> None:
    """Build the template at `knobs` (None: default configuration), run it on random
    inputs and compare every output with `reference`. Raises TuningError on mismatch."""
    from . import tvmsetup

    tvm = tvmsetup.load()
    ms = tvmsetup.ms()
    workload = workload_params(template, workload_name)
    where = f"{template.__name__} workload {workload_name!r}"
    sch = schedule_config(template, workload_name, knobs, target)
    infos = ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])
    n_in = _reference_arity(template.reference, workload)
    if n_in < 0:
        n_in = len(infos) - 1
    if not 0 < n_in < len(infos):
        raise TemplateError(
            f"{where}: reference() takes {n_in} input(s) but compute() has {len(infos)} "
            "parameters; reference(*inputs) must take the PrimFunc's inputs, the remaining "
            "parameters are its outputs"
        )
    rng = np.random.default_rng(seed)
    arrays = [
        _random_input(rng, tuple(int(x) for x in a.shape), str(a.dtype)) for a in infos[:n_in]
    ]
    dev = tvm.cpu()
    try:
        ex = tvm.compile(sch.mod, target=tvmsetup.make_target(dict(target)))
    except Exception as e:
        raise TuningError(
            f"{where}: the {'default' if not knobs else 'given'} configuration does not build: {e}"
        ) from None
    outs = []
    for a in infos[n_in:]:
        dtype = str(a.dtype)
        shape = tuple(int(x) for x in a.shape)
        fill = (
            np.full(shape, np.nan, dtype) if dtype.startswith("float") else np.zeros(shape, dtype)
        )
        outs.append(tvm.runtime.tensor(fill, dev))
    ex["main"](*[tvm.runtime.tensor(x, dev) for x in arrays], *outs)
    want = call_with_workload(template.reference, workload, *arrays)
    if not isinstance(want, (tuple, list)):
        want = [want]
    if len(want) != len(outs):
        raise TemplateError(
            f"{where}: reference() returned {len(want)} array(s) for {len(outs)} output "
            "parameter(s)"
        )
    problems = []
    for i, (got, exp) in enumerate(zip(outs, want, strict=True)):
        exp = np.asarray(exp)
        dtype = str(infos[n_in + i].dtype)
        rtol, atol = tolerance(dtype)
        atol *= max(1.0, float(np.nanmax(np.abs(exp.astype("float64")))) if exp.size else 1.0)
        msg = _mismatch_report(
            f"#{n_in + i} ({dtype}{list(exp.shape)})", got.numpy(), exp, rtol, atol
        )
        if msg:
            problems.append(msg)
    if problems:
        config = "the default configuration" if not knobs else f"configuration {dict(knobs)}"
        raise TuningError(
            f"{where}: {config} does not match reference(): "
            + "; ".join(problems)
            + "; fix compute(), reference() or schedule() so they agree before tuning"
        )


# --------------------------------------------------------------------------- runner


@dataclass(frozen=True)
class RunTiming:
    """Where one measurement's time went, in the worker."""

    load_s: float
    eval_s: float  # the time evaluator call: warm-up + number x repeat runs (+ calibration)


def evaluator_args(measure: MeasureOptions) -> tuple[int, int, int, bool]:
    """(number, repeat, min_repeat_ms, cache_flush) for TVM's time evaluator."""
    number = measure.number if measure.number > 0 else 1
    return number, measure.repeat, measure.min_repeat_ms, measure.enable_cpu_cache_flush


def device_type(target: Any) -> str:
    """The runtime device a target's kernels run on ("llvm" and "c" -> "cpu")."""
    kind = str(target.kind.name)
    return "cpu" if kind in ("llvm", "c") else kind


def _worker_ping() -> bool:
    import tvm  # noqa: F401 - warms the worker up

    return True


def _worker_measure(
    artifact_path: str,
    device: str,
    args_info: list[Any],
    number: int,
    repeat: int,
    min_repeat_ms: int,
    cache_flush: bool,
) -> tuple[list[float], float, float]:
    """Runs in the runner's worker process."""
    import time as _time

    import tvm
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    t0 = _time.perf_counter()
    rt_mod = tvm.runtime.load_module(artifact_path)
    t1 = _time.perf_counter()
    # A target kind is not a device name: tvm.runtime.device("llvm") raises.
    dev = tvm.runtime.device("cpu" if device in ("llvm", "c") else device, 0)
    args = default_alloc_argument(dev, args_info, 1)[0]
    evaluator = rt_mod.time_evaluator(
        rt_mod.entry_name or "main",
        dev,
        number=number,
        repeat=repeat,
        min_repeat_ms=min_repeat_ms,
        f_preproc="cache_flush_cpu_non_first_arg" if cache_flush else "",
    )
    dev.sync()
    t2 = _time.perf_counter()
    result = evaluator(*args)
    t3 = _time.perf_counter()
    return [float(x) for x in result.results], t1 - t0, t3 - t2


_RUNNER_CLASS: list[Any] = []


def _runner_class() -> Any:
    if _RUNNER_CLASS:
        return _RUNNER_CLASS[0]
    from . import tvmsetup

    tvmsetup.load()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture
    from tvm.support.popen_pool import PopenPoolExecutor

    @derived_object
    class WorkerRunner(PyRunner):
        """Measures in one persistent worker process; results are ready when `run` returns."""

        def __init__(self, measure: MeasureOptions) -> None:
            super().__init__()
            self.options = measure
            self.timings: list[RunTiming] = []
            self.pool = PopenPoolExecutor(
                max_workers=1, timeout=measure.timeout_s, stderr=subprocess.DEVNULL
            )
            self.pool.submit(_worker_ping)  # start the worker (it imports TVM) while we build

        def set_options(self, measure: MeasureOptions) -> None:
            self.options = measure

        def run(self, runner_inputs: list[Any]) -> list[Any]:
            number, repeat, min_ms, flush = evaluator_args(self.options)
            futures = []
            for inp in runner_inputs:
                fut = self.pool.submit(
                    _worker_measure,
                    str(inp.artifact_path),
                    str(inp.device_type),
                    [a.as_json() for a in inp.args_info],
                    number,
                    repeat,
                    min_ms,
                    flush,
                )
                res, err = None, None
                try:
                    res, load_s, eval_s = fut.result()
                    self.timings.append(RunTiming(load_s, eval_s))
                except TimeoutError:
                    err = f"WorkerRunner: timeout, killed after {self.options.timeout_s} s"
                except Exception as e:  # noqa: BLE001 - a crashing kernel is a failed trial
                    err = f"WorkerRunner: {type(e).__name__}: {e}"
                futures.append(LocalRunnerFuture(res=res, error_message=err))
            return futures

        def close(self) -> None:
            self.pool.shutdown()

    _RUNNER_CLASS.append(WorkerRunner)
    return WorkerRunner


def make_runner(measure: MeasureOptions, rpc: RpcRunner | None = None) -> Any:
    """The MetaSchedule `Runner` that measures for `target`: the one seam for RPC.

    Every runner returned has `run(inputs) -> futures`, `set_options(measure)`,
    `timings` and `close()`.
    """
    if rpc is not None:
        raise DeviceError(
            f"RPC measurement (tracker {rpc.tracker}, key {rpc.key}) is not implemented yet; "
            "remove `runner:` from the target in tvmtune.yaml to measure on this machine"
        )
    return _runner_class()(measure)


def _cv(samples: Sequence[float]) -> float:
    if len(samples) < 2:
        return 0.0
    mean = statistics.fmean(samples)
    return statistics.pstdev(samples) / mean if mean > 0 else math.inf


def flop_count(mod: Any) -> float:
    from . import tvmsetup

    tvmsetup.load()
    from tvm.s_tir.analysis import estimate_tir_flops

    return float(estimate_tir_flops(mod))


def gflops(flops: float, latency_s: float) -> float:
    return flops / latency_s / 1e9 if latency_s > 0 else 0.0


def run_schedule(
    sch: Any, target: Mapping[str, Any], runner: Any, builder: Any | None = None
) -> list[float]:
    """Build `sch` in-process, measure it with `runner`; the `repeat` samples in seconds."""
    from . import tvmsetup

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
            (fut,) = runner.run(
                [ms.runner.RunnerInput(built.artifact_path, device_type(tgt), args_info)]
            )
            res = fut.result()
        finally:
            remove_artifact(built.artifact_path)
        if res.error_msg:
            raise TuningError(f"measurement failed: {res.error_msg}")
        return [float(x) for x in res.run_secs]
    finally:
        if own:
            builder.close()


@dataclass
class _Session:
    """A runner (and builder) borrowed from the caller or owned for one call."""

    measure: MeasureOptions
    runner: Any = None
    builder: Any = None
    own: bool = False

    def __enter__(self) -> _Session:
        if self.runner is None:
            self.runner = make_runner(self.measure)
            self.own = True
        if self.builder is None:
            self.builder = make_builder()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.own:
            self.runner.close()
        self.builder.close()


def _measure_knobs(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None,
    measure: MeasureOptions,
    s: _Session,
) -> tuple[Measured, list[float]]:
    sch = schedule_config(template, workload_name, knobs, target)
    s.runner.set_options(measure)
    secs = run_schedule(sch, target, s.runner, s.builder)
    latency = statistics.fmean(secs)
    full = full_knobs(template, workload_name, knobs)
    return Measured(full, latency, gflops(flop_count(sch.mod), latency)), secs


def full_knobs(
    template: ModuleType, workload_name: str, knobs: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Every knob's value, defaults filled in (what a manifest records)."""
    from .template import Categorical, Split, Structural, eval_extent

    workload = workload_params(template, workload_name)
    out: dict[str, Any] = {}
    knobs = knobs or {}
    for k in getattr(template, "KNOBS", []):
        if k.name in knobs:
            v = knobs[k.name]
            out[k.name] = [int(x) for x in v] if isinstance(k, Split) else v
        elif isinstance(k, Split):
            out[k.name] = [eval_extent(k.extent, workload)] + [1] * (k.parts - 1)
        elif isinstance(k, (Categorical, Structural)):
            out[k.name] = k.candidates[0]
    return out


def measure_config(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None,
    measure: MeasureOptions = DEFAULT_MEASURE,
    *,
    runner: Any = None,
) -> Measured:
    """Build and measure one configuration (knobs by name; None: the default) here."""
    with _Session(measure, runner) as s:
        return _measure_knobs(template, workload_name, target, knobs, measure, s)[0]


def measure_baseline(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    measure: MeasureOptions = DEFAULT_MEASURE,
    *,
    runner: Any = None,
) -> tuple[Measured, float]:
    """The noise check: measure the default configuration; if the repeats' coefficient
    of variation exceeds `max_cv`, measure once more with twice the repeats; still too
    noisy -> TuningError. Returns (baseline, its CV)."""
    with _Session(measure, runner) as s:
        base, secs = _measure_knobs(template, workload_name, target, None, measure, s)
        cv = _cv(secs)
        if cv <= measure.max_cv:
            return base, cv
        doubled = replace(measure, repeat=measure.repeat * 2)
        base, secs = _measure_knobs(template, workload_name, target, None, doubled, s)
        s.runner.set_options(measure)
        cv2 = _cv(secs)
        if cv2 <= measure.max_cv:
            return base, cv2
    raise TuningError(
        f"runner too noisy: CV {cv2:.1%} > {measure.max_cv:.1%} over {doubled.repeat} "
        f"repeats of the default configuration of {template.__name__}/{workload_name} "
        f"(first try: {cv:.1%} over {measure.repeat}); run on an idle, dedicated runner "
        "(no other jobs, fixed CPU frequency), or raise measure.min_repeat_ms / measure.repeat, "
        "or, knowingly, measure.max_cv in tvmtune.yaml"
    )


@dataclass(frozen=True)
class Verified:
    best: Measured
    baseline: Measured
    best_cv: float
    baseline_cv: float

    @property
    def speedup(self) -> float:
        return self.baseline.latency_s / self.best.latency_s


def verify(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    best_knobs: Mapping[str, Any],
    measure: MeasureOptions = DEFAULT_MEASURE,
    *,
    runner: Any = None,
    check_numerics: bool = True,
) -> Verified:
    """Check the winner's numerics against `reference` (unless the caller just did),
    then re-measure it and the default configuration in one session."""
    if check_numerics:
        check_correct(template, workload_name, target, best_knobs)
    with _Session(measure, runner) as s:
        base, base_secs = _measure_knobs(template, workload_name, target, None, measure, s)
        best, best_secs = _measure_knobs(template, workload_name, target, best_knobs, measure, s)
    return Verified(best, base, _cv(best_secs), _cv(base_secs))


def time_compile(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None = None,
) -> float:
    """Seconds one `tvm.compile` of the configuration takes (for the benchmark)."""
    t0 = time.perf_counter()
    build_config(template, workload_name, target, knobs)
    return time.perf_counter() - t0
