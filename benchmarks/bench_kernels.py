"""Each operator template's best configuration against numpy/OpenBLAS, same run, same threads.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.bench_kernels
    python -m benchmarks.bench_kernels --ops matmul,conv2d --rounds 30 --threads 2
    python -m benchmarks.bench_kernels --knobs picks.json   # {"matmul/m1024": {...}, ...}
    python -m benchmarks.bench_kernels --target zen4-avx2-2c --blas-isa avx2

The configuration of each (operator, workload) is the committed best
(tuning_logs/<op>/<target>/manifest.json, results[workload].best.knobs) when there
is one, else a hand-found one (`HAND_PICKS` below, or `--knobs`), labelled
"untuned hand pick". Each kernel is built as the tuner measures it: a fused
workload's epilogue on the output tile, a prepacked weight arriving packed.
Baselines: numpy/OpenBLAS matmul for matmul, dense, batch_matmul and conv2d_1x1 (for
a fused workload, the GEMM alone), im2col + numpy matmul for conv2d and conv2d_winograd, numpy for
softmax; and ONNX Runtime (where installed, `--no-ort` to leave it out) running the
same computation, epilogue included, as an exporter's ONNX ops (weights as
initializers: packed once at load, bias and activation fused by its optimizer), on
the same threads, timed in the same interleaved rounds. (numpy's softmax ufuncs are
single-threaded whatever --threads says.)

Timing: `rounds` rounds, each runs the TVM kernel, the baseline and ONNX Runtime one
after the other for at least --min-round-ms each, after --settle-ms of idle time (both
OpenBLAS and TVM leave worker threads spinning after a call, which would
otherwise steal the other side's cores); the table shows the best round of each
(the least disturbed by other processes on the machine) and the median round,
and the ratios come from the same run.

The target is this CPU's target in tvmtune.yaml (its committed logs are timed), or
`--target NAME`; its lanes come from the target (`targetinfo`), never a hard-coded
CPU. The fp32 peak is printed two ways: nominal, cores x 2 FMA pipes x the
target's fp32 lanes x 2 flop x the clock /proc/cpuinfo reports; and measured, by a
C loop of independent FMAs on vectors of the target's lanes on every core (built
with -march=native; needs `cc`), which runs at the boost clock the kernels get.

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, when set, pin OpenBLAS to slower kernels:
unset them for this command only (first line above); the BLAS kernel in use is
printed (threadpoolctl) either way. The exception is a target restricted to a
narrower ISA than the CPU has (e.g. AVX2 code on an AVX-512 CPU): `--blas-isa avx2`
pins OpenBLAS to its Haswell (AVX2) kernels too, the fair anchor for that code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import wait_idle

ROOT = Path(__file__).resolve().parents[1]
# Set by main(): the configured target whose mcpu is this machine's CPU (its committed
# logs are what is benchmarked), or this CPU itself (hand picks only). Never another
# CPU's code: built for a CPU the host lacks, it dies with SIGILL.
TARGET_NAME = "this-cpu"
TARGET: dict[str, Any] = {}
FMA_PIPES = 2  # full-width FMA pipes per core assumed by the nominal peak (the probe measures)
LANES = 16  # fp32 lanes of the target's vectors (set by main())

# Found by hand on this machine (benchmarks/README-free: rerun this script to check).
# Structural knobs and sampled knobs together, as a manifest's best.knobs.
HAND_PICKS: dict[str, dict[str, Any]] = {
    "matmul/m1024": {
        "accumulate": "register",
        "pack_b": "global",
        "tile_i": [1, 128, 8],
        "tile_j": [16, 2, 2],
        "tile_k": [8, 8],
    },
    "matmul/m1021": {
        "accumulate": "register",
        "pack_b": "tile",
        "tile_i": [2, 64, 8],
        "tile_j": [8, 4, 2],
        "tile_k": [16, 4],
    },
    "dense/bert_ffn1": {
        "accumulate": "register",
        "pack_b": "global",
        "tile_i": [32, 4],
        "tile_j": [48, 1, 4],
        "tile_k": [3, 16],
    },
    "dense/bert_ffn2": {
        "accumulate": "register",
        "pack_b": "global",
        "tile_i": [16, 8],
        "tile_j": [24, 1, 2],
        "tile_k": [12, 16],
    },
    "conv2d/resnet50_3x3": {"pad": "stage", "tile_k": [16, 4], "tile_h": [14, 4], "tile_w": [4, 14], "unroll": 64},
    "softmax/attn_512": {"exp_mode": "store", "tile_r": [8192, 1], "acc_max": [16, 2], "acc_sum": [16, 2], "unroll": 0},
    "softmax/vocab_32k": {
        "exp_mode": "store",
        "tile_r": [16, 4],
        "acc_max": [250, 8],
        "acc_sum": [250, 8],
        "unroll": 0,
    },
}


def pick_target(name: str | None) -> tuple[str, dict[str, Any]]:
    """(name, target): the named target of tvmtune.yaml, by default the one whose mcpu
    is this machine's CPU, else this CPU itself ("this-cpu": hand picks only)."""
    import tvm

    from tvmtune_ci.core.config import load_config

    host = str(tvm.target.codegen.llvm_get_system_cpu())
    targets = {t.name: t.target for t in load_config(ROOT / "tvmtune.yaml").targets}
    if name is not None:
        if name not in targets:
            raise SystemExit(f"no target {name!r} in tvmtune.yaml (it has: {', '.join(targets)})")
        if targets[name].get("mcpu") != host:
            raise SystemExit(
                f"target {name!r} is for mcpu {targets[name].get('mcpu')!r}, this "
                f"machine is {host!r}: its kernels cannot be timed here"
            )
        return name, dict(targets[name])
    for n, t in targets.items():
        if t.get("mcpu") == host and t.get("kind") == "llvm" and "mtriple" not in t:
            return n, dict(t)
    return "this-cpu", {"kind": "llvm", "mcpu": host, "num-cores": 2}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--ops",
        default="matmul,dense,batch_matmul,conv2d,conv2d_1x1,conv2d_winograd,softmax",
        help="comma-separated operators (default: every CPU template)",
    )
    p.add_argument("--workloads", default="", help="comma-separated workload names to keep (default: all)")
    p.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime out (by default it runs where installed)")
    p.add_argument("--threads", type=int, default=2, help="threads for TVM and OpenBLAS (2)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds (20)")
    p.add_argument(
        "--min-round-ms", type=float, default=20.0, help="each round runs a kernel at least this long (20 ms)"
    )
    p.add_argument(
        "--settle-ms",
        type=float,
        default=200.0,
        help="idle time before each timed segment, so the other side's spinning "
        "worker threads have gone to sleep (200 ms)",
    )
    p.add_argument("--knobs", help='JSON (or a file of it): {"op/workload": knobs} hand picks')
    p.add_argument(
        "--wait-idle",
        type=float,
        default=120.0,
        help="before measuring, wait up to this many seconds for the 1-minute load "
        "average to drop below 0.5 (other processes' load is noise) (120)",
    )
    p.add_argument("--no-peak-probe", action="store_true", help="skip the C FMA peak probe")
    p.add_argument(
        "--blas-isa",
        choices=["avx2"],
        help="pin OpenBLAS to that ISA's kernels (the anchor for a target restricted to it, e.g. mattr -avx512f)",
    )
    p.add_argument(
        "--target",
        help="a target of tvmtune.yaml whose CPU this machine is "
        "(default: the one matching this CPU, else this CPU with hand picks)",
    )
    return p.parse_args(argv)


# --------------------------------------------------------------------------- peak


def nominal_clock_ghz() -> float | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000
    except OSError:
        pass
    return None


PROBE_C = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv){
  int threads = atoi(argv[1]); double best = 0;
  for (int r = 0; r < 7; r++) {
    double t0 = 0, t1 = 0; float sink = 0; long it = 20000000L;
    #pragma omp parallel num_threads(threads) reduction(+:sink)
    {
      typedef float vf __attribute__((vector_size(LANES * 4)));
      vf a[16], b, c;
      for (int l = 0; l < LANES; l++) { b[l] = 1.0000001f; c[l] = 1e-7f; }
      for (int i = 0; i < 16; i++) for (int l = 0; l < LANES; l++) a[i][l] = (float)i;
      #pragma omp barrier
      #pragma omp master
      t0 = now();
      for (long i = 0; i < it; i++) {
        #pragma GCC unroll 16
        for (int j = 0; j < 16; j++) a[j] = a[j] * b + c;  /* one FMA (-ffp-contract) */
      }
      #pragma omp barrier
      #pragma omp master
      t1 = now();
      for (int i = 0; i < 16; i++) for (int l = 0; l < LANES; l++) sink += a[i][l];
    }
    double gf = threads * it * 16.0 * LANES * 2 / (t1 - t0) / 1e9 + 0 * sink;
    if (gf > best) best = gf;
  }
  printf("%f\n", best);
  return 0;
}
"""


def measured_peak_gflops(threads: int) -> float | None:
    """Best of 7 runs of independent FMAs on vectors of the target's LANES, on
    `threads` cores, built for this CPU (-march=native; None without cc)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "peak.c", Path(d) / "peak"
        src.write_text(PROBE_C)
        cmd = [
            cc,
            "-O2",
            "-march=native",
            "-ffp-contract=fast",
            f"-DLANES={LANES}",
            "-fopenmp",
            str(src),
            "-o",
            str(exe),
        ]
        build = subprocess.run(cmd, capture_output=True, text=True)
        if build.returncode != 0:
            return None
        run = subprocess.run([str(exe), str(threads)], capture_output=True, text=True, timeout=120)
        try:
            return float(run.stdout.strip())
        except ValueError:
            return None


# --------------------------------------------------------------------------- configurations


def manifest_knobs(op: str, workload: str) -> dict[str, Any] | None:
    path = ROOT / "tuning_logs" / op / TARGET_NAME / "manifest.json"
    if not path.is_file():
        return None
    from tvmtune_ci.core.manifest import read_manifest

    result = read_manifest(path).results.get(workload)
    return dict(result.best.knobs) if result is not None else None


def load_picks(arg: str | None) -> dict[str, dict[str, Any]]:
    picks = dict(HAND_PICKS)
    if arg:
        text = Path(arg).read_text() if Path(arg).is_file() else arg
        picks.update(json.loads(text))
    return picks


def as_direct(op: str, wl: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """conv2d_winograd computes conv2d's 3x3, stride 1: its baselines, and its FLOPs
    (the direct convolution's: an effective rate, for 2.25x or 4x fewer products), are
    conv2d's at those parameters."""
    if op == "conv2d_winograd":
        return "conv2d", {**wl, "R": 3, "S": 3, "stride": 1}
    return op, wl


def flop_count(op: str, wl: dict[str, Any]) -> float | None:
    """The GEMM's or convolution's FLOPs (an epilogue's few per output not counted)."""
    op, wl = as_direct(op, wl)
    if op in ("matmul", "dense"):
        return 2.0 * wl["M"] * wl["N"] * wl["K"]
    if op == "batch_matmul":
        return 2.0 * wl["B"] * wl["M"] * wl["N"] * wl["K"]
    if op == "conv2d_1x1":
        return 2.0 * wl["N"] * wl["K"] * wl["H"] * wl["W"] * wl["C"]
    if op == "conv2d":
        oh = (wl["H"] + 2 * wl["pad"] - wl["R"]) // wl["stride"] + 1
        ow = (wl["W"] + 2 * wl["pad"] - wl["S"]) // wl["stride"] + 1
        return 2.0 * wl["N"] * wl["K"] * oh * ow * wl["C"] * wl["R"] * wl["S"]
    return None  # softmax: bandwidth-bound, reported in GB/s


def moved_bytes(op: str, wl: dict[str, Any]) -> float | None:
    if op == "softmax":
        return 2.0 * wl["R"] * wl["N"] * 4  # read x once, write out once
    return None


def baseline(op: str, wl: dict[str, Any], arrays: list[Any]) -> tuple[str, Callable[[], Any]]:
    """The numpy way to compute the same output, writing into a preallocated array
    as the TVM kernel does (a fresh 4 MB result costs page faults, not flops). For a
    fused workload, the GEMM or convolution alone: numpy's epilogue would be extra
    single-threaded passes, so the baseline does less work than the kernel."""
    import numpy as np

    op, wl = as_direct(op, wl)
    out = np.empty_like(arrays[-1])
    if op == "batch_matmul":
        x, y = arrays[0], arrays[1]
        return "numpy matmul(X, Y, out=), batched", lambda: np.matmul(x, y, out=out)
    if op == "conv2d_1x1":
        data, kernel = arrays[0], arrays[1]
        w = kernel.reshape(kernel.shape[0], kernel.shape[1])
        flat = out.reshape(out.shape[0], out.shape[1], -1)
        xs = data.reshape(data.shape[0], data.shape[1], -1)

        def gemm() -> Any:
            for i in range(xs.shape[0]):
                np.matmul(w, xs[i], out=flat[i])
            return out

        return "numpy matmul(W[K, C], X[C, H*W], out=)", gemm
    if op == "matmul":
        a, b = arrays[0], arrays[1]
        return "numpy matmul(A, B, out=)", lambda: np.matmul(a, b, out=out)
    if op == "dense":
        x, wt = arrays[0], arrays[1].T
        return "numpy matmul(X, W.T, out=)", lambda: np.matmul(x, wt, out=out)
    if op == "conv2d":
        data, kernel = arrays[0], arrays[1]
        pad, stride = wl["pad"], wl["stride"]
        k = kernel.reshape(kernel.shape[0], -1)
        flat = out.reshape(out.shape[0], out.shape[1], -1)

        def im2col_matmul() -> Any:
            x = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
            win = np.lib.stride_tricks.sliding_window_view(x, (wl["R"], wl["S"]), axis=(2, 3))
            win = win[:, :, ::stride, ::stride]  # n, c, oh, ow, r, s
            n, c, oh, ow = win.shape[:4]
            cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * wl["R"] * wl["S"], oh * ow)
            for i in range(n):
                np.matmul(k, cols[i], out=flat[i])
            return out

        return "im2col + numpy matmul", im2col_matmul
    if op == "softmax":
        x = arrays[0]

        def softmax() -> Any:
            np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
            np.exp(out, out=out)
            np.multiply(out, 1 / out.sum(axis=-1, keepdims=True), out=out)
            return out

        return "numpy, in place (1 thread)", softmax
    raise SystemExit(f"no baseline for operator {op!r}")


# --------------------------------------------------------------------------- measuring


def out_of_space(module: Any, wl: dict[str, Any], knobs: dict[str, Any]) -> str | None:
    """Why a configuration is outside the declared space on TARGET (one the tuner can
    never pick), or None."""
    from tvmtune_ci.core.extents import eval_extent
    from tvmtune_ci.core.targetinfo import scope
    from tvmtune_ci.core.template import Categorical, Split, Structural

    declared = {k.name: k for k in module.KNOBS}
    names = scope(wl, TARGET)
    for name, v in knobs.items():
        k = declared.get(name)
        if k is None:
            return f"knob {name!r} is not declared in the template's KNOBS"
        if isinstance(k, Split):
            ext, top = eval_extent(k.extent, names), eval_extent(k.max_factor, names)
            prod = 1
            for f in v:
                prod *= int(f)
            if len(v) != k.parts or prod != ext or int(v[-1]) > top:
                return (
                    f"{name}={v} is not a point of define_split({name!r}, extent {ext}, "
                    f"parts={k.parts}, max_factor={top}) on this target"
                )
        elif isinstance(k, (Categorical, Structural)) and v not in k.candidates:
            return f"{name}={v!r} is not one of {list(k.candidates)}"
    return None


def build(module: Any, name: str, wl: dict[str, Any], knobs: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The kernel as the tuner measures it (tune/builder.schedule_config: a fused
    workload's epilogue folded into the tile's store, a prepacked one's pack split out,
    the postprocessors run), loaded; and its arguments' (shape, dtype): a prepacked
    weight arrives packed, as it does in a model built with the logs."""
    import tvm

    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.builder import make_builder, schedule_config
    from tvmtune_ci.tune.workload import Workload

    ms = tvmsetup.ms()
    sch = schedule_config(module, Workload(module, name, wl, TARGET), knobs, TARGET)
    builder = make_builder()
    try:
        (built,) = builder.build([ms.builder.BuilderInput(sch.mod, tvmsetup.make_target(TARGET))])
        if built.error_msg:
            raise SystemExit(f"{name}: build failed: {built.error_msg}")
        lib = tvm.runtime.load_module(built.artifact_path)
    finally:
        builder.close()
    args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    return lib, [([int(x) for x in a.shape], str(a.dtype)) for a in args]


def time_rounds(
    sides: list[Callable[[int], float]], rounds: int, min_round_s: float, settle_s: float
) -> list[list[float]]:
    """Per-round mean seconds of each side (a function of n calls returning the mean
    seconds of one), interleaved: every round runs each side once, in order."""
    counts = [max(1, int(min_round_s / max(side(1), 1e-6))) for side in sides]
    out: list[list[float]] = [[] for _ in sides]
    for _ in range(rounds):
        for side, n, times in zip(sides, counts, out, strict=True):
            # Every runtime's idle workers spin for a while after a call (OpenBLAS for
            # up to ~2^28 cycles): let them go to sleep before the next side runs, or
            # each measures the other's spinning.
            time.sleep(settle_s)
            times.append(side(n))
    return out


def bench_one(
    op: str, name: str, wl: dict[str, Any], knobs: dict[str, Any], source: str, args: argparse.Namespace
) -> dict[str, Any]:
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from tvmtune_ci.core.epilogue import chain, prepacked
    from tvmtune_ci.core.template import call_with_workload, import_template

    module = import_template(ROOT / "operators" / f"{op}.py", ROOT)
    lib, shapes = build(module, name, wl, knobs)
    plain = {k: v for k, v in wl.items() if k not in ("epilogue", "prepack")}
    func = call_with_workload(module.compute, plain)
    rng = np.random.default_rng(1)
    arrays = [rng.uniform(-1, 1, [int(s) for s in a.shape]).astype(str(a.dtype)) for a in ArgInfo.from_prim_func(func)]
    dev = tvm.cpu()
    # The kernel's own arguments: the plain ones, and where the kernel takes more (an
    # epilogue's bias, residual) or another shape (a packed weight), random ones.
    given = [a if list(a.shape) == sh else None for a, (sh, _) in zip(arrays[:-1], shapes[:-1], strict=False)]
    ins = [
        given[i] if i < len(given) and given[i] is not None else rng.uniform(-1, 1, sh).astype(dt)
        for i, (sh, dt) in enumerate(shapes[:-1])
    ]
    tensors = [tvm.runtime.tensor(a, dev) for a in [*ins, np.zeros(shapes[-1][0], shapes[-1][1])]]
    entry = lib.get_function(lib.entry_name)
    entry(*tensors)
    expected = call_with_workload(module.reference, plain, *arrays[:-1])
    scale = max(1e-30, float(np.max(np.abs(expected))))
    variant = bool(chain(wl)) or prepacked(wl)
    # A fused or packed variant computes more than reference() (or from a packed
    # weight): the tuner's numerics check (check_correct) held it to its chain.
    err = 0.0 if variant else float(np.max(np.abs(tensors[-1].numpy() - expected))) / scale
    base_name, run_base = baseline(op, plain, arrays)
    if variant:
        base_name += "; the GEMM only" if op != "softmax" else ""
    base_err = float(np.max(np.abs(run_base() - expected))) / scale
    ort = ort_runner(op, wl, arrays, args.threads) if not args.no_ort else None

    def run_tvm(n: int) -> float:
        ev = lib.time_evaluator(lib.entry_name, dev, number=n, repeat=1)
        return float(ev(*tensors).mean)

    sides = [run_tvm, _per_call(run_base)] + ([_per_call(ort[1])] if ort else [])
    times = time_rounds(sides, args.rounds, args.min_round_ms / 1000, args.settle_ms / 1000)
    tvm_s, base_s = times[0], times[1]
    return {
        "op": op,
        "workload": name,
        "source": source,
        "knobs": knobs,
        "baseline": base_name,
        "tvm_best": min(tvm_s),
        "tvm_median": statistics.median(tvm_s),
        "base_best": min(base_s),
        "base_median": statistics.median(base_s),
        "ort": ort[0] if ort else None,
        "ort_best": min(times[2]) if ort else None,
        "ort_median": statistics.median(times[2]) if ort else None,
        "rel_err": err,
        "base_rel_err": base_err,
        "flop": flop_count(op, wl),
        "bytes": moved_bytes(op, wl),
    }


def _per_call(fn: Callable[[], Any]) -> Callable[[int], float]:
    """fn as time_rounds times a side: n calls, the mean seconds of one."""

    def run(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n

    return run


def ort_runner(op: str, wl: dict[str, Any], arrays: list[Any], threads: int) -> tuple[str, Callable[[], Any]] | None:
    """ONNX Runtime running the same computation, epilogue included, as a graph of the
    ONNX ops an exporter writes (weights as initializers, so its optimizer packs them
    once and fuses bias and activation into its Gemm/Conv as it does in a model), on
    `threads` intra-op threads; None without onnxruntime or for an op it has no form
    here."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    import numpy as np

    from tvmtune_ci.core.epilogue import chain

    op, wl = as_direct(op, wl)
    rng = np.random.default_rng(2)
    f32 = TensorProto.FLOAT
    out_shape = list(arrays[-1].shape)
    inputs, feeds, inits, nodes = [], {}, [], []

    def feed(name: str, a: Any) -> None:
        inputs.append(helper.make_tensor_value_info(name, f32, list(a.shape)))
        feeds[name] = a

    if op == "matmul":
        feed("x", arrays[0])
        inits.append(numpy_helper.from_array(arrays[1], "w"))
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y0"]))
    elif op == "dense":
        feed("x", arrays[0])
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arrays[1].T), "w"))  # [K, N], as exported
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y0"]))
    elif op == "batch_matmul":
        feed("x", arrays[0])
        feed("w", arrays[1])
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y0"]))
    elif op in ("conv2d", "conv2d_1x1"):
        feed("x", arrays[0])
        inits.append(numpy_helper.from_array(arrays[1], "w"))
        pad, stride = wl.get("pad", 0), wl.get("stride", 1)
        conv_in = ["x", "w"]
        if "bias" in chain(wl):  # Conv's own bias input, as an exporter folds a batch norm
            inits.append(numpy_helper.from_array(rng.uniform(-1, 1, out_shape[1]).astype(np.float32), "b"))
            conv_in.append("b")
        nodes.append(
            helper.make_node("Conv", conv_in, ["y0"], pads=[pad] * 4, strides=[stride, stride], dilations=[1, 1])
        )
    elif op == "softmax":
        feed("x", arrays[0])
        nodes.append(helper.make_node("Softmax", ["x"], ["y0"], axis=-1))
    else:
        return None
    last = "y0"
    for i, kind in enumerate(chain(wl)):
        y = f"y{i + 1}"
        if kind == "bias" and op in ("conv2d", "conv2d_1x1"):
            continue  # in the Conv above
        if kind == "bias":
            inits.append(numpy_helper.from_array(rng.uniform(-1, 1, out_shape[-1]).astype(np.float32), f"b{i}"))
            nodes.append(helper.make_node("Add", [last, f"b{i}"], [y]))
        elif kind == "residual":
            feed(f"r{i}", rng.uniform(-1, 1, out_shape).astype(np.float32))
            nodes.append(helper.make_node("Add", [last, f"r{i}"], [y]))
        elif kind == "scale":
            inits.append(numpy_helper.from_array(np.array(0.125, np.float32), f"s{i}"))
            nodes.append(helper.make_node("Mul", [last, f"s{i}"], [y]))
        elif kind == "relu":
            nodes.append(helper.make_node("Relu", [last], [y]))
        elif kind == "gelu":
            nodes.append(helper.make_node("Gelu", [last], [y]))
        last = y
    graph = helper.make_graph(
        nodes, "kernel", inputs, [helper.make_tensor_value_info(last, f32, out_shape)], initializer=inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return f"ONNX Runtime {ort.__version__}", lambda: sess.run(None, feeds)


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed: see numpy.show_config() for the BLAS build"
    infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return (
        "; ".join(
            f"{i.get('internal_api')} {i.get('version')} kernel={i.get('architecture')} threads={i.get('num_threads')}"
            for i in infos
        )
        or "no BLAS found"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Before numpy/TVM load: both sides get the same threads. TVM's own default on
    # x86 is hardware_concurrency/2 (it assumes SMT), one thread on this 2-core VM.
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.blas_isa == "avx2":
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"  # OpenBLAS's AVX2 kernels
    pinned = [v for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if os.environ.get(v)]
    if pinned and args.blas_isa is None:
        print(
            f"::warning::{' and '.join(pinned)} set: OpenBLAS runs a slower kernel than it would "
            "choose; for a fair baseline rerun as `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "
            "python -m benchmarks.bench_kernels`"
        )
    import numpy as np

    from tvmtune_ci.core.template import import_template

    global TARGET_NAME, TARGET, LANES
    TARGET_NAME, TARGET = pick_target(args.target)
    from tvmtune_ci.core.targetinfo import target_facts

    facts = target_facts(TARGET)
    LANES = facts.lanes("float32")
    print(f"target {TARGET_NAME}: {json.dumps(TARGET)} ({facts.describe()})")

    picks = load_picks(args.knobs)
    ops = [o for o in args.ops.split(",") if o]
    clock = nominal_clock_ghz()
    nominal = args.threads * FMA_PIPES * LANES * 2 * clock if clock else None
    waited = wait_idle(args.wait_idle)
    print(f"waited {waited:.0f} s for an idle machine; 1-minute load {os.getloadavg()[0]:.2f}")
    probe = None if args.no_peak_probe else measured_peak_gflops(args.threads)
    print(f"numpy {np.__version__}; BLAS: {blas_info()}")
    print(f"threads: {args.threads} (TVM_NUM_THREADS, OPENBLAS_NUM_THREADS); rounds: {args.rounds}")
    if nominal:
        print(
            f"fp32 peak, nominal: {args.threads} cores x {FMA_PIPES} FMA pipes x {LANES} lanes"
            f" x 2 flop x {clock:.3f} GHz (/proc/cpuinfo) = {nominal:.0f} GFLOP/s"
        )
    if probe:
        print(
            f"fp32 peak, measured: {LANES}-lane FMA loop on {args.threads} cores = {probe:.0f} GFLOP/s "
            f"(= {probe / (args.threads * FMA_PIPES * LANES * 2):.2f} GHz effective clock)"
        )
    header = (
        f"{'operator/workload':30} {'config':18} {'TVM ms':>8} {'GFLOP/s':>8} {'%nom':>5} "
        f"{'%meas':>5} {'base ms':>8} {'x base':>6} {'(median)':>8} {'ORT ms':>8} {'x ORT':>6} {'(median)':>8}  baseline"
    )
    print(header)
    rows = []
    for op in ops:
        module = import_template(ROOT / "operators" / f"{op}.py", ROOT)
        keep = {w for w in args.workloads.split(",") if w}
        for name, wl in module.WORKLOADS.items():
            if keep and name not in keep:
                continue
            knobs = manifest_knobs(op, name)
            source = "tuned (manifest)"
            if knobs is None:
                knobs = picks.get(f"{op}/{name}")
                source = "untuned hand pick"
            if knobs is None:
                print(f"{op + '/' + name:24} no manifest and no hand pick: skipped")
                continue
            why = out_of_space(module, wl, knobs)
            if why is not None:
                print(f"{op + '/' + name:24} {source} skipped: {why}")
                continue
            r = bench_one(op, name, wl, knobs, source, args)
            rows.append(r)
            if r["flop"]:
                gf = r["flop"] / r["tvm_best"] / 1e9
                rate = f"{gf:8.1f}"
                pn = f"{100 * gf / nominal:5.0f}" if nominal else "    -"
                pm = f"{100 * gf / probe:5.0f}" if probe else "    -"
            else:
                rate = f"{r['bytes'] / r['tvm_best'] / 1e9:6.1f}GB"
                pn = pm = "    -"
            wrong = f"  WRONG: rel err {r['rel_err']:.1e}" if r["rel_err"] > 1e-3 else ""
            ort = (
                f"{r['ort_best'] * 1e3:8.3f} {r['ort_best'] / r['tvm_best']:6.2f} {r['ort_median'] / r['tvm_median']:8.2f}"
                if r["ort_best"]
                else f"{'-':>8} {'-':>6} {'-':>8}"
            )
            print(
                f"{op + '/' + name:30} {source:18} {r['tvm_best'] * 1e3:8.3f} {rate} {pn} {pm} "
                f"{r['base_best'] * 1e3:8.3f} {r['base_best'] / r['tvm_best']:6.2f} "
                f"{r['base_median'] / r['tvm_median']:8.2f} {ort}  {r['baseline']}"
                f"{wrong}"
            )
    print(
        "x base / x ORT: the baseline's / ONNX Runtime's time over TVM's (best rounds; median rounds in "
        "parentheses; above 1: TVM faster); %nom/%meas: share of the nominal/measured fp32 peak. A fused "
        "workload's kernel runs its epilogue, and so does ONNX Runtime's graph; the numpy baseline runs the "
        "GEMM or convolution only. conv2d_winograd's GFLOP/s and peak shares count the direct convolution's "
        "FLOPs (an effective rate: it computes 2.25x (m = 2) or 4x (m = 4) fewer products)"
    )
    for r in rows:
        knobs = json.dumps(r["knobs"], sort_keys=True)
        print(f"  {r['op']}/{r['workload']}: {r['source']}: {knobs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
