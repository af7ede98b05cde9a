"""This runner's fp32 peak, measured: FMA throughput on the threads of TVM's pool.

The divisor of every "fraction of peak" a model README gives per kernel, measured on
the runner where the kernels are timed (in the same timing process, on the same pool),
not a clock read from a spec sheet: a VM's clock and its vector units' issue rate are
what the runner gives (a Zen 4 issues a 512-bit FMA as two 256-bit halves; a Zen 5
does not). benchmarks/bench_peak.py runs it alone.

The kernel is TIR, built by the same LLVM for the same target as the templates: each
thread keeps ACC independent vectors of the target's lanes in registers and runs
chains of fused multiply-adds on each (ACC covers the FMA latency times the FMA pipes
of every x86 core this product has met: 4 cycles x 2 pipes, with room), UNROLL of them
between loop branches.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm

from ..core.stats import quantile

ACC = 12  # independent accumulators a thread: > latency (4) x pipes (2)
UNROLL = 8  # FMAs on each accumulator between loop branches
ITERS = 1 << 16  # loop trips a call: about 10 ms on 2 cores of 16 lanes


def peak_kernel(threads: int, lanes: int, iters: int) -> Any:
    """The PrimFunc: out[t, a, l] = chains of iters x UNROLL fused multiply-adds."""
    from tvm.script import tirx as T

    @T.prim_func
    def peak(
        x: T.Buffer((threads, ACC, lanes), "float32"),  # type: ignore[valid-type]  # TVMScript's annotations
        out: T.Buffer((threads, ACC, lanes), "float32"),  # type: ignore[valid-type]
    ):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for t in T.parallel(threads):
            acc = T.alloc_buffer((ACC, lanes), "float32", scope="local")
            for a in T.unroll(ACC):
                for v in T.vectorized(lanes):
                    acc[a, v] = x[t, a, v]
            for _i in range(iters):
                for _u in T.unroll(UNROLL):
                    for a in T.unroll(ACC):
                        for v in T.vectorized(lanes):
                            acc[a, v] = acc[a, v] * T.float32(0.999999) + T.float32(1e-7)
            for a in T.unroll(ACC):
                for v in T.vectorized(lanes):
                    out[t, a, v] = acc[a, v]

    return peak


def flops(threads: int, lanes: int, iters: int) -> float:
    """The floating-point operations one call of `peak_kernel` runs (an FMA is two)."""
    return 2.0 * threads * ACC * lanes * iters * UNROLL


@dataclass(frozen=True)
class Peak:
    """The measured peak: the fastest quartile of the samples, and their spread."""

    gflops: float
    spread: float  # (max - min) / median of the samples' GFLOPS
    samples: tuple[float, ...]  # GFLOPS, one a sample
    threads: int
    lanes: int


def measure_peak(target: Any, threads: int, lanes: int, *, samples: int = 7, min_sample_ms: int = 200) -> Peak:
    """The peak on `threads` threads of this process's TVM pool (set TVM_NUM_THREADS
    before TVM starts it), the kernel built for `target` (a tvm Target)."""
    lib = tvm.compile(tvm.IRModule({"main": peak_kernel(threads, lanes, ITERS)}), target=target).mod
    dev = tvm.cpu()
    x = tvm.runtime.tensor(np.ones((threads, ACC, lanes), "float32"), dev)
    out = tvm.runtime.tensor(np.zeros((threads, ACC, lanes), "float32"), dev)
    lib["main"](x, out)  # the pool started, the code warm
    timer = lib.time_evaluator("main", dev, number=1, repeat=samples, min_repeat_ms=min_sample_ms)
    secs = list(timer(x, out).results)
    work = flops(threads, lanes, ITERS)
    gf = [work / s / 1e9 for s in secs]
    return Peak(work / quantile(secs) / 1e9, (max(gf) - min(gf)) / statistics.median(gf), tuple(gf), threads, lanes)


def kernel_flops(mod: Any) -> dict[str, float]:
    """Each PrimFunc of `mod`'s floating-point operations a call (TVM's estimate: a
    function that only moves data has 0)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    out = {}
    for gv, f in mod.functions_items():
        if isinstance(f, tvm.tirx.PrimFunc):
            try:
                out[gv.name_hint] = float(estimate_tir_flops(tvm.IRModule({"main": f})))
            except Exception:  # a loop nest TVM cannot count (a symbolic extent): no figure
                continue
    return out
