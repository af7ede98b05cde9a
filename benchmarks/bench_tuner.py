"""Benchmark: tvmtune-ci's tuner against stock MetaSchedule `tune_tir`, side by side.

    python benchmarks/bench_tuner.py                 # 64 trials each, 512^3 matmul
    python benchmarks/bench_tuner.py --trials 128 --stock-trials 64
    python benchmarks/bench_tuner.py --skip-stock    # ours only

Both tune the same template (`operators/matmul.py`'s schedule on a 512x512x512
workload the benchmark adds; the template's own workloads are larger) over the same
design space: a `ScheduleFn` that applies the template per structural choice, with
the same postprocessors and mutators. Both measure with the same settings (number,
repeat, min_repeat_ms). Everything else of the stock run is `tune_tir`'s default:
`LocalBuilder` (a fresh process pool per batch, each worker importing every tensor
intrinsic), `LocalRunner`, 64 trials per batch, gradient task scheduler, XGB cost
model, JSON database. The stock run is a fresh Python process, so its one-time
costs (the ~30 s `tvm.s_tir.tensor_intrin` import in `TuneContext`) count, as they
would in CI.

Figures printed: wall time and trials per minute of each, the ratio; the floor
(compile time + measured run time per trial, both measured in our run); our
per-trial time against it; time from the start of `tune_workload` to the first
measured trial; both bests re-measured in one session.
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
import types
from pathlib import Path
from typing import Any

from _common import wait_idle  # benchmarks/ is the script's folder

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def bench_template(workload: str) -> types.ModuleType:
    """`operators.matmul` with one more workload (same knobs, schedule, reference)."""
    import operators.matmul as matmul

    m = types.ModuleType("matmul")
    m.__dict__.update({k: v for k, v in vars(matmul).items() if not k.startswith("__")})
    m.__file__ = matmul.__file__
    n = int(workload.lstrip("m"))
    m.WORKLOADS = {**matmul.WORKLOADS, workload: {"M": n, "N": n, "K": n, "dtype": "float32"}}
    return m


# --------------------------------------------------------------------------- stock run (subprocess)

STOCK_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, {root!r})
args = json.loads(sys.argv[1])
t0 = time.perf_counter()
import tvm
t_import = time.perf_counter() - t0

start = time.perf_counter()
import tvm.s_tir.tensor_intrin  # what TuneContext.__init__ does first
t_intrin = time.perf_counter() - start
from tvm.s_tir import meta_schedule as ms
from benchmarks.bench_tuner import bench_template
from tvmtune_ci.builder import make_postprocs, workload_module
from tvmtune_ci.tuner import _Space, make_mutators


tmpl = bench_template(args["workload"])
wl = tmpl.WORKLOADS[args["workload"]]
mod = workload_module(tmpl, args["workload"])
space = ms.space_generator.ScheduleFn(_Space(tmpl, wl), sch_rules=[], postprocs=make_postprocs(),
                                      mutator_probs=make_mutators(tmpl.KNOBS, args["seed"]))
runner = ms.runner.LocalRunner(
    evaluator_config=ms.runner.EvaluatorConfig(number=args["number"], repeat=args["repeat"],
                                               min_repeat_ms=args["min_repeat_ms"]),
)
with ms.Profiler() as prof:
    db = ms.tir_integration.tune_tir(mod, tvm.target.Target(args["target"]), args["work_dir"],
                                     max_trials_global=args["trials"], space=space,
                                     runner=runner, seed=args["seed"])
wall = time.perf_counter() - start
# The best record as the JSONDatabase wrote it (TuningRecord.as_json() cannot convert
# an IndexMap in a trace).
lines = [json.loads(x) for x in open(args["work_dir"] + "/database_tuning_record.json")]
recs = [rec for _, rec in lines]
valid = [r for r in recs if r[1] and float(r[1][0]) < 1e9]


def mean(r):
    return sum(float(x) for x in r[1]) / len(r[1])


best = min(valid, key=mean) if valid else None
print("STOCK-RESULT " + json.dumps({{
    "import_s": t_import, "intrin_import_s": t_intrin, "wall_s": wall,
    "trials": len(recs), "valid": len(valid),
    "best_latency_s": mean(best) if best else None,
    "best_trace": best[0] if best else None,
    "profile": {{str(k): float(v) for k, v in prof.get().items()}},
}}))
"""


def run_stock(args: argparse.Namespace, target: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    payload = json.dumps(
        {
            "workload": args.workload,
            "target": target,
            "trials": args.stock_trials,
            "seed": args.seed,
            "number": args.number or 1,
            "repeat": args.repeat,
            "min_repeat_ms": args.min_repeat_ms,
            "work_dir": str(work_dir),
        }
    )
    r = subprocess.run(
        [sys.executable, "-c", STOCK_SCRIPT.format(root=str(ROOT)), payload],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    for line in r.stdout.splitlines():
        if line.startswith("STOCK-RESULT "):
            return json.loads(line[len("STOCK-RESULT ") :])
    raise SystemExit(
        f"stock run failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )


# --------------------------------------------------------------------------- main


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--workload", default="m512", help="mN: an N x N x N fp32 matmul")
    p.add_argument("--trials", type=int, default=64, help="our trial budget")
    p.add_argument("--stock-trials", type=int, default=None, help="default: --trials")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--number", type=int, default=0)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=int, default=50)
    p.add_argument("--max-cv", type=float, default=0.05)
    p.add_argument("--mcpu", default=None, help="default: this machine's CPU")
    p.add_argument("--skip-stock", action="store_true")
    p.add_argument(
        "--wait-idle",
        type=float,
        default=300,
        help="seconds to wait at most for the 1-minute load average to drop below 0.5",
    )
    args = p.parse_args(argv)
    args.stock_trials = args.stock_trials or args.trials
    return args


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    waited = wait_idle(args.wait_idle)
    load_avg = os.getloadavg()[0]

    t0 = time.perf_counter()
    from tvmtune_ci import tvmsetup

    tvmsetup.load()
    t_import = time.perf_counter() - t0
    from tvmtune_ci.config import EarlyStop, MeasureOptions
    from tvmtune_ci.measure import make_runner, measure_config, time_compile
    from tvmtune_ci.tuner import TuneRequest, decode_knobs, design_space_infos, tune_workload

    target = {"kind": "llvm", "mcpu": args.mcpu or tvmsetup.host_cpu(), "num-cores": 2}
    measure = MeasureOptions(
        number=args.number, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, max_cv=args.max_cv
    )
    tmpl = bench_template(args.workload)
    scratch = Path(tempfile.mkdtemp(prefix="bench-tuner-"))
    print(
        f"# tvmtune-ci tuner benchmark: {args.workload} fp32 matmul (operators/matmul.py's "
        f"schedule), target {json.dumps(target)}"
    )
    print(
        f"# measurement (both): number={args.number} (0 = auto), repeat={args.repeat}, "
        f"min_repeat_ms={args.min_repeat_ms}"
    )
    print(
        f"# ours: {args.trials} trials, batch {args.batch_size}, early stop off; "
        f"stock: {args.stock_trials} trials, tune_tir defaults (batch 64, population 512)"
    )
    print(
        f"# space (both): ScheduleFn over the template's {len(tmpl.KNOBS)} knobs, "
        "same postprocessors and mutators"
    )
    print(f"# load average at start: {load_avg:.2f} (waited {waited:.0f} s); 2 CPUs")
    print(
        f"import tvm + x86 intrinsics only: {t_import:.2f} s "
        f"(tensor_intrin stubbed: {tvmsetup.intrinsics_stubbed()})"
    )

    events: list[Any] = []
    req = TuneRequest(
        template=tmpl,
        workload_name=args.workload,
        target=target,
        trials=args.trials,
        batch_size=args.batch_size,
        seed=args.seed,
        early_stop=EarlyStop(patience=0),
        measure=measure,
        work_dir=scratch / "ours",
        on_batch=events.append,
    )
    t = time.perf_counter()
    out = tune_workload(req)
    ours_wall = time.perf_counter() - t
    s, n = out.stats, out.trials.run
    for e in events:
        print(
            f"  batch {e.batch:3d}: {e.trials_done:4d}/{e.budget}, best "
            f"{e.best_gflops or 0:6.1f} GFLOPS, {e.batch_valid} ok, {e.batch_failed} failed, "
            f"{e.elapsed_s:6.1f} s"
        )

    print("\n## ours: tvmtune_ci.tuner.tune_workload (in this process)")
    print(
        f"wall, whole call (correctness, noise check, search, verify): {ours_wall:.1f} s "
        f"for {n} trials ({out.trials.valid} valid, {out.trials.failed} failed, "
        f"stop: {out.trials.stop_reason})"
    )
    print(
        f"  correctness {s['correctness_s']:.2f} s | baseline + noise check "
        f"{s['baseline_s']:.2f} s (CV {out.baseline_cv:.1%}) | setup {s['setup_s']:.2f} s | "
        f"search {s['search_s']:.1f} s | verify {s['verify_s']:.2f} s"
    )
    first = s.get("first_trial_s", float("nan"))
    print(f"start of tune_workload -> first measured trial: {first:.2f} s (goal < 5 s)")
    st = int(s["search_trials"])
    per = {
        k: s.get(f"search_{k}_s", 0.0) / st
        for k in ("compile", "eval", "export", "load", "generate", "cost_model")
    }
    floor = per["compile"] + per["eval"]
    per_trial = s["search_s"] / st
    other = per_trial - sum(per.values())
    print(
        f"floor per trial: compile (lowering + LLVM object code) {_ms(per['compile'])} + "
        f"measured run (time evaluator) {_ms(per['eval'])} = {_ms(floor)}"
    )
    print(
        f"per-trial time, search loop: {_ms(per_trial)} = {per_trial / floor:.2f}x floor "
        "(goal <= 1.5x)"
    )
    print(
        f"  beyond the floor: link .so {_ms(per['export'])}, load {_ms(per['load'])}, "
        f"candidate generation {_ms(per['generate'])}, cost model update "
        f"{_ms(per['cost_model'])}, other (IPC, journal, database) {_ms(other)}"
    )
    print(f"per-trial time, whole call: {_ms(ours_wall / n)} = {ours_wall / n / floor:.2f}x floor")
    tc = statistics.median(
        time_compile(tmpl, args.workload, target, out.best.knobs) for _ in range(3)
    )
    print(
        f"cross-check: one tvm.compile of the best configuration takes {_ms(tc)} "
        "(without LLVM object emission)"
    )
    ours_tpm = n / ours_wall * 60
    print(f"trials per minute (whole call): {ours_tpm:.1f}")
    print(
        f"best, re-measured: {out.best.latency_s * 1e3:.3f} ms = {out.best.gflops:.1f} GFLOPS, "
        f"knobs {json.dumps(out.best.knobs)}"
    )
    print(
        f"baseline (default configuration): {out.baseline.latency_s * 1e3:.3f} ms; "
        f"speedup {out.baseline.latency_s / out.best.latency_s:.1f}x"
    )

    if args.skip_stock:
        shutil.rmtree(scratch, ignore_errors=True)
        return 0

    print("\n## stock: ms.tir_integration.tune_tir (fresh process)", flush=True)
    stock = run_stock(args, target, scratch / "stock")
    stock_tpm = stock["trials"] / stock["wall_s"] * 60
    stock_pt = stock["wall_s"] / max(1, stock["trials"])
    print(
        f"wall, tune_tir incl. its tensor_intrin import ({stock['intrin_import_s']:.1f} s): "
        f"{stock['wall_s']:.1f} s for {stock['trials']} trials ({stock['valid']} valid)"
    )
    print(f"trials per minute: {stock_tpm:.1f}; per trial {_ms(stock_pt)}")
    prof = stock["profile"]
    print(
        "  MetaSchedule profiler: "
        + ", ".join(
            f"{k} {prof[k]:.1f} s"
            for k in (
                "SendToBuilder",
                "SendToRunner",
                "MeasureCallback/UpdateCostModel",
                "EvoSearch/Evolve/Mutation",
                "EvoSearch/SampleInitPopulation",
            )
            if k in prof
        )
    )

    print("\n## side by side")
    print(
        f"trials per minute: ours {ours_tpm:.1f} / stock {stock_tpm:.1f} = "
        f"{ours_tpm / stock_tpm:.1f}x (goal >= 5x)"
    )
    ceiling = stock_pt / floor
    print(
        f"  the most any tuner can reach with these measurement settings is stock per trial / "
        f"floor = {_ms(stock_pt)} / {_ms(floor)} = {ceiling:.1f}x"
    )
    ours_over = ours_wall / n - floor
    stock_over = stock_pt - floor
    print(
        f"time per trial beyond the floor: ours {_ms(ours_over)}, stock {_ms(stock_over)} "
        f"= {stock_over / max(ours_over, 1e-9):.1f}x less"
    )
    if stock["best_trace"] is None:
        print("stock found no valid configuration")
        return 0
    infos = design_space_infos(tmpl, args.workload)
    _, stock_knobs = decode_knobs(stock["best_trace"], infos, tmpl.KNOBS)
    ours_search = min(r["latency_s"] for r in out.records if r["latency_s"])
    print(
        f"best latency during the search: ours {ours_search * 1e3:.3f} ms, "
        f"stock {stock['best_latency_s'] * 1e3:.3f} ms"
    )
    runner = make_runner(measure)
    try:
        lat_ours, lat_stock = [], []
        for _ in range(3):  # interleaved, so drift hits both
            for knobs, into in ((out.best.knobs, lat_ours), (stock_knobs, lat_stock)):
                m = measure_config(tmpl, args.workload, target, knobs, measure, runner=runner)
                into.append(m.latency_s)
    finally:
        runner.close()
    mo, mst = statistics.median(lat_ours), statistics.median(lat_stock)
    print(
        f"both bests re-measured (median of 3, interleaved): ours {mo * 1e3:.3f} ms, "
        f"stock {mst * 1e3:.3f} ms; ours/stock = {mo / mst:.3f} (goal <= 1; noise a few %)"
    )
    print(f"stock best knobs: {json.dumps(stock_knobs)}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
