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
from collections.abc import Callable, Mapping, Sequence
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


def profile_calls(
    build: ModelBuild, arrays: Sequence[Any], *, function: str = "forward", runs: int = 10
) -> tuple[CallTime, ...]:
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
    out = [
        CallTime(
            sym,
            calls[sym],
            statistics.median(r.get(sym, 0.0) for r in per_run),
            *by_kernel.get(sym, (None, None, None)),
        )
        for sym in calls
    ]
    return tuple(sorted(out, key=lambda c: -c.seconds))


def interleaved(
    builds: dict[str, ModelBuild],
    arrays: Sequence[Any],
    *,
    function: str = "forward",
    rounds: int = 10,
    min_sample_ms: int = 100,
    others: Mapping[str, Callable[[], float]] | None = None,
) -> dict[str, list[float]]:
    """Seconds per inference of each build, `rounds` samples each, taken in turns (the
    order rotating each round): a slow stretch of the runner lands on every build
    alike, so their ratio holds where each figure alone would not. A sample is the mean
    of as many inferences as fill `min_sample_ms`. `others`: more arms that are not TVM
    builds (ONNX Runtime), each a callable returning one such sample."""
    import tvm
    from tvm import relax

    dev = tvm.cpu()
    timers: dict[str, Callable[[], float]] = {}
    for label, b in builds.items():
        vm = relax.VirtualMachine(b.executable, dev)
        args = [tvm.runtime.tensor(a, dev) for a in arrays]
        vm[function](*args)  # warm-up
        timer = vm.time_evaluator(function, dev, number=1, repeat=1, min_repeat_ms=min_sample_ms)
        timers[label] = _vm_sample(timer, args)
    for label, sample in (others or {}).items():
        sample()  # warm-up
        timers[label] = sample
    labels = list(timers)
    out: dict[str, list[float]] = {k: [] for k in labels}
    for r in range(max(1, rounds)):
        for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
            out[label].append(timers[label]())
    return out


def _vm_sample(timer: Any, args: Sequence[Any]) -> Callable[[], float]:
    return lambda: float(timer(*args).mean)


def ort_sampler(
    onnx_path: Any, arrays: Mapping[str, Any], threads: int, min_sample_ms: int = 100
) -> tuple[Callable[[], float], str]:
    """One ONNX Runtime sample (seconds per inference, the mean over `min_sample_ms`) of
    the graph at `onnx_path` fed `arrays` (its input names -> numpy), on `threads`
    intra-op threads, one inter-op: the deployment a team would compare with."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    feed = {i.name: arrays[i.name] for i in sess.get_inputs()}

    def sample() -> float:
        n, t0 = 0, time.perf_counter()
        while True:
            sess.run(None, feed)
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_sample_ms / 1e3:
                return elapsed / n

    return sample, f"ONNX Runtime {ort.__version__}, CPU, {threads} intra-op thread(s)"
