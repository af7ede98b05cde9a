"""Where a built model's time goes: the Relax VM's per-call instrument (TVM side of
`tvmtune-ci profile`; the file is core/profiles.py).

Each kernel call is timed between the instrument's before and after callbacks
(perf_counter; about 1 us of Python per call, small beside the kernels of a model of
this size). An inference's seconds per kernel are summed over its calls, and the
median over `runs` inferences is kept, so one slow stretch of a noisy runner does not
decide a share. The end-to-end latency is timed apart, on VMs without the
instrument, each build in turns with the others (`interleaved`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from ..core.profiles import CallTime
from .modelbuild import ModelBuild


def random_inputs(mod: Any, function: str = "forward", seed: int = 0) -> list[Any]:
    """numpy arrays for every parameter of `function` (inputs, then weights), small
    random values: a profile measures time, and these kernels' time does not depend on
    the values."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for p in mod[function].params:
        shape = tuple(int(d) for d in p.ty.shape.values)
        dtype = str(p.ty.dtype)
        if dtype.startswith("float"):
            out.append((rng.standard_normal(shape) * 0.05).astype(dtype))
        else:
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
    return out


def profile_calls(build: ModelBuild, arrays: Sequence[Any], *, function: str = "forward",
                  runs: int = 10) -> tuple[CallTime, ...]:
    """Seconds per inference of every kernel (median over `runs`), the slowest first."""
    import tvm
    from tvm import relax
    from tvm.runtime.vm import VMInstrumentReturnKind

    dev = tvm.cpu()
    vm = relax.VirtualMachine(build.executable, dev)
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    by_kernel = {s.kernel: (s.template, s.workload, s.mapped_from) for s in build.swaps}
    started: dict[str, float] = {}
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}

    def instrument(func: Any, symbol: str, before: bool, ret: Any, *rest: Any) -> Any:
        if symbol.startswith("vm.builtin."):
            return VMInstrumentReturnKind.NO_OP
        now = time.perf_counter()
        if before:
            started[symbol] = now
        else:
            seconds[symbol] = seconds.get(symbol, 0.0) + now - started.pop(symbol)
            counts[symbol] = counts.get(symbol, 0) + 1
        return VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    vm[function](*args)  # warm-up: first-call costs are no kernel's
    per_run: list[dict[str, float]] = []
    calls: dict[str, int] = {}
    for _ in range(max(1, runs)):
        seconds.clear()
        counts.clear()
        vm[function](*args)
        per_run.append(dict(seconds))
        calls = dict(counts)
    out = [CallTime(sym, calls[sym], statistics.median(r.get(sym, 0.0) for r in per_run),
                    *by_kernel.get(sym, (None, None, None)))
           for sym in calls]
    return tuple(sorted(out, key=lambda c: -c.seconds))


def interleaved(builds: dict[str, ModelBuild], arrays: Sequence[Any], *, function: str = "forward",
                rounds: int = 10, min_sample_ms: int = 100) -> dict[str, list[float]]:
    """Seconds per inference of each build, `rounds` samples each, taken in turns (the
    order rotating each round): a slow stretch of the runner lands on every build
    alike, so their ratio holds where each figure alone would not. A sample is the mean
    of as many inferences as fill `min_sample_ms`."""
    import tvm
    from tvm import relax

    dev = tvm.cpu()
    timers = {}
    for label, b in builds.items():
        vm = relax.VirtualMachine(b.executable, dev)
        args = [tvm.runtime.tensor(a, dev) for a in arrays]
        vm[function](*args)  # warm-up
        timers[label] = (vm.time_evaluator(function, dev, number=1, repeat=1,
                                           min_repeat_ms=min_sample_ms), args)
    labels = list(builds)
    out: dict[str, list[float]] = {k: [] for k in labels}
    for r in range(max(1, rounds)):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            timer, args = timers[label]
            out[label].append(float(timer(*args).mean))
    return out
