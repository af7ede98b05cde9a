"""Which latency estimator reproduces best on a noisy runner: the data behind stats.py.

    python -m benchmarks.study_estimator                  # ~2 min: 3 kernels, 3 processes
    python -m benchmarks.study_estimator --samples 240 --procs 3 --sample-ms 10

Each of `--procs` fresh processes builds three real kernels of this repo's templates
for this CPU (matmul 1024 at a hand-picked tiling, dense at its default tiling,
softmax at its default) and takes `--samples` samples of each (one sample = as many
runs as fill `--sample-ms`), interleaved in chunks of 4 so a slow period hits all
three alike. For each estimator (mean, median, 25th percentile, minimum) and each
sample count n it prints, over consecutive n-sample windows:

- spread: (max - min) / median of the window estimates, within one process;
- between-process: the spread of each process's estimate over all its samples
  (what "re-measure in a fresh process later" sees);
- the 95% interval's coverage and width of `stats.estimate` (lower quartile).

Lower spread at equal n = a more reproducible number for the same measuring time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KERNELS = {
    "matmul/m1024": {
        "accumulate": "register",
        "pack_b": "global",
        "tile_i": [1, 128, 8],
        "tile_j": [16, 2, 2],
        "tile_k": [8, 8],
    },
    "dense/bert_ffn1": None,
    "softmax/attn_512": None,
}


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


ESTIMATORS = {"mean": statistics.fmean, "median": statistics.median, "p25": lambda xs: _quantile(xs, 0.25), "min": min}


def collect(samples: int, sample_ms: float) -> dict[str, list[float]]:
    """In this process: build the kernels, sample them interleaved; {kernel: samples}."""
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    import numpy as np

    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.builder import build_config
    from tvmtune_ci.tune.hostcheck import host_target

    tvm = tvmsetup.load()
    target = host_target(2)
    dev = tvm.cpu()
    runs = {}
    for name, knobs in KERNELS.items():
        op, wl = name.split("/")
        tpl = import_template(ROOT / "operators" / f"{op}.py", ROOT)
        ex = build_config(tpl, wl, target, knobs)
        from tvm.s_tir import meta_schedule as ms

        from tvmtune_ci.tune.workload import workload_module

        infos = ms.arg_info.ArgInfo.from_prim_func(workload_module(tpl, wl)["main"])
        args = [
            tvm.runtime.tensor(np.random.uniform(-1, 1, [int(x) for x in a.shape]).astype(str(a.dtype)), dev)
            for a in infos
        ]
        ev = ex.mod.time_evaluator(ex.mod.entry_name, dev, number=1, repeat=1, min_repeat_ms=int(sample_ms))
        per_run = float(ev(*args).mean)
        number = max(1, math.ceil(sample_ms / 1e3 / per_run))
        runs[name] = (ex.mod.time_evaluator(ex.mod.entry_name, dev, number=number, repeat=4), args)
    out: dict[str, list[float]] = {n: [] for n in runs}
    while min(len(v) for v in out.values()) < samples:
        for name, (ev, args) in runs.items():
            out[name].extend(float(x) for x in ev(*args).results)
    return {n: v[:samples] for n, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=240)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--sample-ms", type=float, default=10.0)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(collect(a.samples, a.sample_ms)))
        return 0
    from tvmtune_ci.core.stats import estimate

    runs = []
    for _ in range(a.procs):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.study_estimator",
                "--worker",
                "--samples",
                str(a.samples),
                "--sample-ms",
                str(a.sample_ms),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    print(
        f"host load average at end: {os.getloadavg()[0]:.2f}; {a.procs} processes x "
        f"{a.samples} samples of >= {a.sample_ms:g} ms per kernel\n"
    )
    for kernel in KERNELS:
        all_s = [s for r in runs for s in r[kernel]]
        floor = min(all_s)
        cv = statistics.pstdev(all_s) / statistics.fmean(all_s)
        print(
            f"## {kernel}: min {floor * 1e3:.4g} ms, CV of all samples {cv:.1%}, "
            f"median/min {statistics.median(all_s) / floor:.3f}"
        )
        print(
            f"{'n':>4} " + " ".join(f"{e + ' spread':>14}" for e in ESTIMATORS) + f" {'p25 CI cover':>13} {'p25 ±':>7}"
        )
        for n in (11, 20, 40, 80):
            spreads = []
            for est in ESTIMATORS.values():
                vals = [est(r[kernel][i : i + n]) for r in runs for i in range(0, len(r[kernel]) - n + 1, n)]
                spreads.append((max(vals) - min(vals)) / statistics.median(vals))
            # Coverage: does a window's interval (stats.estimate: the lower quartile)
            # hold the lower quartile of all samples of its process?
            hits = widths = tot = 0
            for r in runs:
                truth = _quantile(r[kernel], 0.25)
                for i in range(0, len(r[kernel]) - n + 1, n):
                    e = estimate(r[kernel][i : i + n])
                    hits += e.lo <= truth <= e.hi
                    widths += e.rel_halfwidth
                    tot += 1
            print(f"{n:>4} " + " ".join(f"{s:>14.1%}" for s in spreads) + f" {hits / tot:>13.0%} {widths / tot:>7.1%}")
        per_proc = {e: [est(r[kernel]) for r in runs] for e, est in ESTIMATORS.items()}
        print(
            "between processes (all samples each): "
            + ", ".join(f"{e} {(max(v) - min(v)) / statistics.median(v):.1%}" for e, v in per_proc.items())
        )
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
