"""Benchmark: tvmtune-ci's tuner against stock MetaSchedule `tune_tir`, side by side.

    python -m benchmarks.bench_tuner                      # 64 trials each, 512^3 matmul
    python -m benchmarks.bench_tuner --trials 128 --stock-trials 64
    python -m benchmarks.bench_tuner --stock-equal-time   # stock measures as long as ours
    python -m benchmarks.bench_tuner --skip-stock         # ours only
    python -m benchmarks.bench_tuner --template conv2d --workload resnet50_3x3 --skip-stock

Ours prints where a search trial's seconds went (proposing, building, exporting,
loading, measuring, the cost model), largest first.

What is compared: trials per minute, per-trial time and the whole-call overhead
multiple (per-trial time over the compile + measure floor) of `tune_workload`
against stock `tune_tir`, and the quality of what each found (both bests
re-measured side by side in one interleaved `measure.finals` run).

Both tune the same template (`operators/matmul.py`'s schedule on a 512x512x512
workload the benchmark adds; the template's own workloads are larger) over the same
design space: a `ScheduleFn` that applies the template per structural choice, with
the same postprocessors and mutators.

Measurement (the two sides do not measure alike, so this is stated, not assumed):

- ours: the `MeasureOptions` defaults, i.e. adaptive sampling (samples of
  `sample_ms`, to `search_precision` within `search_cap_s` per contender), racing
  (`race` x the incumbent after `probe` samples), the noise check before and the
  interleaved finals after the search, ranked by the lower quartile (`stats`).
- stock, by default: tvmtune-ci 0.1's fixed settings, the "today's fixed
  settings" of the issue: `EvaluatorConfig(number=1, repeat=5, min_repeat_ms=50)`
  (number calibrated up to 50 ms per sample), ranked by the mean. Precision is NOT
  equalised in this mode; the precision each side reached is printed (ours: the
  95% interval of the p25, stock: the 95% t-interval of its mean of `repeat`).
- stock with `--stock-equal-time`: `repeat` is chosen after our run so that stock
  spends per trial about what our runner spent per contender (a candidate sampled
  to `search_precision`, not raced); the measured runner time per trial of both
  sides is printed so the match can be checked.

Overheads are counted the same way for both sides: each side runs in a fresh
Python process started by this script, and the same milestones are taken (wall
clock since the parent launched the process):

- `import tvm`; the tensor-intrinsic import each side needs (ours: x86 only via
  `tvmsetup`; stock: all of `tvm.s_tir.tensor_intrin`, which `TuneContext` imports
  anyway); the runner's worker process started (ours: started before `import tvm`,
  as `retune` starts it, then `make_runner` adopts it and waits on it; stock:
  `LocalRunner()`, whose sanity check waits on it). These are the one-time
  import/startup costs.
- the tuning call (`tune_workload` / `tune_tir`) starts and ends; inside it, every
  runner call is time-stamped by the same wrapper (`_stamp_runner`), so the first
  and the last measured search trial are known for both.

Per-trial time INCLUDING the one-time costs is the process's wall time (launch to
exit) over its trials; EXCLUDING them, the tuning call's wall time over its trials
(ours still counts its correctness check, noise check and finals: they are part of
the call). Ratios come from this one run; the two processes run one after the
other, ours first.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import wait_idle

ROOT = Path(__file__).resolve().parents[1]

# tvmtune-ci 0.1's fixed measurement: what stock gets unless --stock-equal-time.
FIXED_REPEAT = 5
FIXED_MIN_REPEAT_MS = 50
GOAL_TPM_RATIO = 3.0
# Two-sided 95% Student t quantiles by degrees of freedom (stock's mean of `repeat`).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def bench_template(workload: str, template: str = "matmul") -> types.ModuleType:
    """`operators.<template>`; for matmul, one more workload `mN` when it has none of
    that name (same knobs, schedule, reference)."""
    import importlib

    mod = importlib.import_module(f"operators.{template}")
    if workload in mod.WORKLOADS:
        return mod
    if template != "matmul" or not workload.lstrip("m").isdigit():
        raise SystemExit(
            f"operators/{template}.py has no workload {workload!r} "
            f"(it has {', '.join(mod.WORKLOADS)}); mN works for matmul only"
        )
    m = types.ModuleType("matmul")
    m.__dict__.update({k: v for k, v in vars(mod).items() if not k.startswith("__")})
    m.__file__ = mod.__file__
    n = int(workload.lstrip("m"))
    m.WORKLOADS = {**mod.WORKLOADS, workload: {"M": n, "N": n, "K": n, "dtype": "float32"}}
    return m


# Where a search trial's seconds go (tune_workload's stats), in the order they happen.
BREAKDOWN = (
    ("propose (evolutionary search)", "search_generate_s"),
    ("build (lowering + LLVM)", "search_compile_s"),
    ("export (.so)", "search_export_s"),
    ("load in the worker", "search_load_s"),
    ("measure (samples)", "search_eval_s"),
    ("cost model update", "search_cost_model_s"),
    ("cost model predict (warm rule)", "search_predict_s"),
)


def breakdown(st: dict[str, float]) -> list[tuple[str, float, float]]:
    """(part, ms per search trial, share of the search's seconds), largest first; "the
    rest" is what no part timed (the runner's IPC, the journal, the database, the
    strategy's bookkeeping)."""
    n = max(1.0, st.get("search_trials", 1.0))
    total = st.get("search_s", 0.0)
    # Built on threads, compile and export are summed over them: the wall seconds are the share.
    summed = {"search_compile_s", "search_export_s"} if st.get("search_build_wall_s") else set()
    rows = [(name, st.get(key, 0.0)) for name, key in BREAKDOWN if st.get(key) and key not in summed]
    if summed:
        rows.append(("build + export (wall, on the builder's threads)", st["search_build_wall_s"]))
    rows.append(("the rest (IPC, journal, database)", max(0.0, total - sum(s for _, s in rows))))
    return sorted(((name, s / n * 1e3, s / total if total else math.nan) for name, s in rows), key=lambda r: -r[1])


def mean_rel_halfwidth(secs: list[float]) -> float:
    """The 95% t-interval's half-width of the mean of `secs`, over the mean (stock's
    own estimator's precision); inf with fewer than 2 samples."""
    n = len(secs)
    if n < 2:
        return math.inf
    m = statistics.fmean(secs)
    t = _T95.get(n - 1, 1.96 + 2.4 / (n - 1))
    return t * statistics.stdev(secs) / math.sqrt(n) / m if m > 0 else math.inf


# --------------------------------------------------------------------------- both children


class _Clock:
    """Milestones in seconds since the parent launched this process (wall clock, so
    that the parent's and the child's times are on one axis)."""

    def __init__(self, launch: float) -> None:
        self.launch = launch
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.marks[name] = time.time() - self.launch


def _stamp_runner(
    runner: Any, calls: list[dict[str, Any]], launch: float, tag: Callable[[Any], dict[str, Any]]
) -> None:
    """Time-stamp every measurement of a MetaSchedule runner (both sides use this).

    Both `WorkerRunner` and stock `LocalRunner` measure their inputs one after the
    other inside `run`, so running them one input per call changes nothing but lets
    each trial's end be seen. The derived object looks `run` up on its instance at
    every call (C++ callers included), so replacing it there is enough.
    """
    inst = runner._inst
    orig = inst.run

    def run(inputs: list[Any]) -> list[Any]:
        futures: list[Any] = []
        for inp in inputs:
            t0 = time.time()
            futures.extend(orig([inp]))
            t1 = time.time()
            calls.append({"start": t0 - launch, "end": t1 - launch, "s": t1 - t0, **tag(inp)})
        return futures

    inst.run = run


def _search_calls(calls: list[dict[str, Any]]) -> dict[str, Any]:
    search = [c for c in calls if c["search"]]
    return {
        "search_calls": len(search),
        "first_trial": search[0]["end"] if search else None,
        "last_trial": search[-1]["end"] if search else None,
        "runner_s": sum(c["s"] for c in search),
        "contender_runner_s": [c["s"] for c in search if not c.get("raced")],
    }


def child_ours(p: dict[str, Any]) -> dict[str, Any]:
    clock = _Clock(p["launch"])
    # As `retune` does: the measuring worker's process starts before this one imports
    # TVM, and its import runs beside ours.
    from tvmtune_ci.tune.runners.local import prestart_worker

    prestart_worker()
    import tvm  # noqa: F401 - timed on its own: the same first step as stock's

    clock.mark("tvm_import")
    from tvmtune_ci.tune import tvmsetup

    tvmsetup.load()  # x86 intrinsics only (the ~30 s full import is stubbed)
    # The builder's threads per batch (1: as before 2026-12-04), as this fresh process's
    # default: tune_workload makes its own builder.
    if p.get("build_threads"):
        from tvmtune_ci.tune import builder as builder_mod

        builder_mod.BUILD_THREADS = int(p["build_threads"])
    clock.mark("intrin_import")
    from dataclasses import replace

    from tvmtune_ci.core.configschema import EarlyStop, MeasureOptions
    from tvmtune_ci.tune.runners import make_runner
    from tvmtune_ci.tune.runners.local import worker_ping as _worker_ping
    from tvmtune_ci.tune.sampling import search_policy
    from tvmtune_ci.tune.tuner import TuneRequest, tune_workload

    measure = MeasureOptions()
    runner = make_runner(measure)  # adopts the prestarted worker
    # Wait for the worker here, as stock's LocalRunner() does: worker start is a
    # one-time cost on both sides. (tune_workload alone overlaps it with the
    # correctness check, so this makes ours' INCLUDING figure slightly worse.)
    runner.pool.submit(_worker_ping).result()
    clock.mark("worker_start")
    calls: list[dict[str, Any]] = []
    plain_search = search_policy(measure)

    def tag(inp: Any) -> dict[str, Any]:
        policy = runner._inst.policy
        info = runner.info_of(str(inp.artifact_path))
        return {
            # The search's policy differs from the baseline's and the finals' ones.
            "search": replace(policy, race_above_s=None) == plain_search,
            "raced": bool(info is not None and info.raced),
        }

    _stamp_runner(runner, calls, p["launch"], tag)
    tmpl = bench_template(p["workload"], p["template"])
    events: list[Any] = []
    req = TuneRequest(
        template=tmpl,
        workload_name=p["workload"],
        target=p["target"],
        trials=p["trials"],
        batch_size=p["batch_size"],
        seed=p["seed"],
        early_stop=EarlyStop(patience=0),
        measure=measure,
        work_dir=Path(p["work_dir"]),
        on_batch=events.append,
        runner=runner,  # the started, stamped one (tune_workload leaves it open)
    )
    clock.mark("call_start")
    try:
        out = tune_workload(req)
    finally:
        runner.close()
    clock.mark("call_end")

    def rel(e: dict[str, Any]) -> float:
        lo, hi = e["ci"]
        return (hi - lo) / 2 / e["latency_s"]

    contenders = [e for e in out.records if e.get("stage") == "search" and e.get("ci")]
    return {
        "marks": clock.marks,
        **_search_calls(calls),
        "trials": out.trials.run,
        "valid": out.trials.valid,
        "failed": out.trials.failed,
        "stop_reason": out.trials.stop_reason,
        "raced": sum(e.get("stage") == "probe" for e in out.records),
        "search_rel": [rel(e) for e in contenders],
        "search_best_s": min(
            (e["latency_s"] for e in out.records if e["latency_s"] and e.get("stage") != "probe"), default=None
        ),
        "stats": out.stats,
        "best": {
            "knobs": out.best.knobs,
            "latency_s": out.best.latency_s,
            "gflops": out.best.gflops,
            "rel": out.best.rel_halfwidth,
        },
        "baseline_s": out.baseline.latency_s,
        "noise_rel": out.noise_check.rel_halfwidth,
        "best_source": out.best_source,
        "events": [
            f"  batch {e.batch:3d}: {e.trials_done:4d}/{e.budget}, best "
            f"{e.best_gflops or 0:6.1f} GFLOPS, {e.batch_valid} ok, {e.batch_failed} failed, "
            f"{e.elapsed_s:6.1f} s"
            for e in events
        ],
    }


def child_stock(p: dict[str, Any]) -> dict[str, Any]:
    clock = _Clock(p["launch"])
    import tvm

    clock.mark("tvm_import")
    import tvm.s_tir.tensor_intrin  # noqa: F401 - what TuneContext.__init__ imports first

    clock.mark("intrin_import")
    from tvm.s_tir import meta_schedule as ms

    from tvmtune_ci.tune.builder import make_postprocs
    from tvmtune_ci.tune.space import TemplateSpace, make_mutators
    from tvmtune_ci.tune.workload import workload_module

    runner = ms.runner.LocalRunner(  # its sanity check waits for the worker to start
        evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=p["repeat"], min_repeat_ms=p["min_repeat_ms"])
    )
    clock.mark("worker_start")
    calls: list[dict[str, Any]] = []
    _stamp_runner(runner, calls, p["launch"], lambda inp: {"search": True})
    tmpl = bench_template(p["workload"], p["template"])
    wl = tmpl.WORKLOADS[p["workload"]]
    mod = workload_module(tmpl, p["workload"])
    space = ms.space_generator.ScheduleFn(
        TemplateSpace(tmpl, wl, p["target"]),
        sch_rules=[],
        postprocs=make_postprocs(),
        mutator_probs=make_mutators(tmpl.KNOBS, p["seed"]),
    )
    clock.mark("call_start")
    with ms.Profiler() as prof:
        ms.tir_integration.tune_tir(
            mod,
            tvm.target.Target(p["target"]),
            p["work_dir"],
            max_trials_global=p["trials"],
            space=space,
            runner=runner,
            seed=p["seed"],
        )
    clock.mark("call_end")
    # The records as the JSONDatabase wrote them (TuningRecord.as_json() cannot
    # convert an IndexMap in a trace).
    with open(Path(p["work_dir"]) / "database_tuning_record.json", encoding="utf-8") as f:
        recs = [json.loads(x)[1] for x in f if x.strip()]
    valid = [r for r in recs if r[1] and float(r[1][0]) < 1e9]
    best = min(valid, key=lambda r: statistics.fmean(float(x) for x in r[1])) if valid else None
    errors: list[str] = []
    if len(valid) < len(recs):  # why trials failed, from tune_tir's own logs
        for log in sorted((Path(p["work_dir"]) / "logs").glob("*.log")):
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                if ("Error" in line or "Timeout" in line) and line.strip()[:200] not in errors:
                    errors.append(line.strip()[:200])
    return {
        "marks": clock.marks,
        **_search_calls(calls),
        "errors": errors[:3],
        "trials": len(recs),
        "valid": len(valid),
        "search_rel": [mean_rel_halfwidth([float(x) for x in r[1]]) for r in valid],
        "best_latency_s": statistics.fmean(float(x) for x in best[1]) if best else None,
        "best_trace": best[0] if best else None,
        "profile": {str(k): float(v) for k, v in prof.get().items()},
    }


def run_child(side: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Run one side in a fresh process; its result, with `wall_s` (launch to exit)."""
    out_file = Path(payload["work_dir"] + ".json")
    Path(payload["work_dir"]).mkdir(parents=True, exist_ok=True)
    launch = time.time()
    payload = {**payload, "launch": launch, "out": str(out_file)}
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_tuner", "--child", side, "--payload", json.dumps(payload)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.time() - launch
    if r.returncode != 0 or not out_file.exists():
        raise SystemExit(f"{side} run failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    res = json.loads(out_file.read_text(encoding="utf-8"))
    res["wall_s"] = wall
    return res


# --------------------------------------------------------------------------- report


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"±{x:.1%}"


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if math.isfinite(x)]
    return statistics.median(xs) if xs else None


def side_figures(res: dict[str, Any], compile_floor_s: float) -> dict[str, float]:
    """Per-trial figures of one side, computed identically for both."""
    n, m = max(1, res["trials"]), res["marks"]
    call = m["call_end"] - m["call_start"]
    runner_pt = res["runner_s"] / res["search_calls"] if res["search_calls"] else math.nan
    floor = compile_floor_s + runner_pt
    return {
        "n": n,
        "one_time": m["worker_start"],  # launch -> tvm, intrinsics, worker: all done
        "call": call,
        "tpm_incl": n / res["wall_s"] * 60,
        "tpm_excl": n / call * 60,
        "pt_incl": res["wall_s"] / n,
        "pt_excl": call / n,
        "runner_pt": runner_pt,
        "floor": floor,
        "mult_incl": res["wall_s"] / n / floor,
        "mult_excl": call / n / floor,
        "first_launch": res["first_trial"] if res["first_trial"] is not None else math.nan,
        "first_call": (res["first_trial"] - m["call_start"]) if res["first_trial"] else math.nan,
    }


def print_side(name: str, res: dict[str, Any], f: dict[str, float]) -> None:
    m = res["marks"]
    print(
        f"one-time (s since launch): import tvm {m['tvm_import']:.2f} | tensor intrinsics "
        f"{m['intrin_import']:.2f} | runner worker up {m['worker_start']:.2f}; tuning call "
        f"{m['call_start']:.2f} -> {m['call_end']:.2f}; process exit {res['wall_s']:.2f}"
    )
    print(
        f"trials {res['trials']} ({res['valid']} valid), {res['search_calls']} measured in "
        f"the search; first measured search trial at {f['first_launch']:.2f} s after launch, "
        f"{f['first_call']:.2f} s after the call started"
    )
    print(
        f"per trial INCLUDING one-time costs (process wall {res['wall_s']:.1f} s): "
        f"{_ms(f['pt_incl'])}, {f['tpm_incl']:.1f} trials/min"
    )
    print(
        f"per trial EXCLUDING them (tuning call {f['call']:.1f} s): {_ms(f['pt_excl'])}, {f['tpm_excl']:.1f} trials/min"
    )
    print(
        f"runner time per measured search trial (load + sampling + IPC): {_ms(f['runner_pt'])}; "
        f"floor (compile + that) {_ms(f['floor'])}; whole-call multiple of the floor: "
        f"{f['mult_excl']:.2f}x excluding, {f['mult_incl']:.2f}x including one-time costs"
    )
    if res["last_trial"] is not None and res["search_calls"] > 1:
        steady = (res["last_trial"] - res["first_trial"]) / (res["search_calls"] - 1)
        print(f"  {name} search, first -> last measured trial: {_ms(steady)} per trial")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--template", default="matmul", help="one of operators/ (default matmul)")
    p.add_argument(
        "--workload", default="m512", help="a workload of the template, or for matmul mN: an N x N x N fp32 matmul"
    )
    p.add_argument("--trials", type=int, default=64, help="our trial budget")
    p.add_argument("--stock-trials", type=int, default=None, help="default: --trials")
    p.add_argument("--batch-size", type=int, default=16, help="ours (stock: tune_tir's 64)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--stock-repeat", type=int, default=FIXED_REPEAT)
    p.add_argument("--stock-min-repeat-ms", type=int, default=FIXED_MIN_REPEAT_MS)
    p.add_argument(
        "--stock-equal-time",
        action="store_true",
        help="choose stock's repeat so it measures a trial as long as ours measures a contender",
    )
    p.add_argument("--mcpu", default=None, help="default: this machine's CPU")
    p.add_argument("--skip-stock", action="store_true")
    p.add_argument(
        "--build-threads",
        type=int,
        default=None,
        help="ours: threads a batch builds on (default: BUILD_THREADS, this machine's CPUs)",
    )
    p.add_argument(
        "--wait-idle",
        type=float,
        default=300,
        help="seconds to wait at most for the 1-minute load average to drop below 0.5",
    )
    p.add_argument("--child", choices=("ours", "stock"), help=argparse.SUPPRESS)
    p.add_argument("--payload", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.stock_trials = args.stock_trials or args.trials
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        payload = json.loads(args.payload)
        res = (child_ours if args.child == "ours" else child_stock)(payload)
        Path(payload["out"]).write_text(json.dumps(res), encoding="utf-8")
        return 0

    waited = wait_idle(args.wait_idle)
    load_avg = os.getloadavg()[0]
    from tvmtune_ci.tune import tvmsetup

    tvmsetup.load()
    from tvmtune_ci.tune.builder import BUILD_THREADS
    from tvmtune_ci.tune.hostcheck import host_target

    target = {"kind": "llvm", "mcpu": args.mcpu, "num-cores": 2} if args.mcpu else host_target(2)
    from tvmtune_ci.core.configschema import MeasureOptions

    measure = MeasureOptions()
    tmpl = bench_template(args.workload, args.template)
    scratch = Path(tempfile.mkdtemp(prefix="bench-tuner-"))
    common = {"workload": args.workload, "template": args.template, "target": target, "seed": args.seed}
    print(
        f"# tvmtune-ci tuner benchmark: {args.template}/{args.workload} (operators/{args.template}.py's "
        f"schedule), target {json.dumps(target)}"
    )
    print(
        f"# ours: tune_workload, {args.trials} trials, batch {args.batch_size}, population 128, "
        f"early stop off; MeasureOptions defaults: sample_ms={measure.sample_ms:g}, "
        f"search_precision={measure.search_precision:.0%} within search_cap_s="
        f"{measure.search_cap_s:g}, race={measure.race:g} after probe={measure.probe}, "
        f"precision={measure.precision:.0%} (noise check, finals of {measure.finalists}), p25; "
        f"builds on {args.build_threads or BUILD_THREADS} "
        "thread(s)"
    )
    print(
        f"# space (both): ScheduleFn over the template's {len(tmpl.KNOBS)} knobs, "
        "same postprocessors and mutators; each side in a fresh process, ours first"
    )
    print(f"# load average at start: {load_avg:.2f} (waited {waited:.0f} s); 2 CPUs")

    try:
        ours = run_child(
            "ours",
            {
                **common,
                "trials": args.trials,
                "batch_size": args.batch_size,
                "build_threads": args.build_threads,
                "work_dir": str(scratch / "ours"),
            },
        )
        st = ours["stats"]
        compile_floor = st.get("search_compile_s", 0.0) / max(1.0, st.get("search_trials", 1.0))
        fo = side_figures(ours, compile_floor)

        print("\n## ours: tvmtune_ci.tune.tuner.tune_workload (fresh process)")
        for line in ours["events"]:
            print(line)
        print_side("ours", ours, fo)
        print(
            f"  inside the call: correctness {st['correctness_s']:.2f} s | noise check "
            f"{st['baseline_s']:.2f} s ({_pct(ours['noise_rel'])}) | setup {st['setup_s']:.2f} s | "
            f"search {st['search_s']:.1f} s | finals {st.get('finals_s', math.nan):.2f} s; "
            f"stop: {ours['stop_reason']}"
        )
        print(
            f"  search measuring: {ours['raced']} raced, contender precision (p25 95% interval) "
            f"median {_pct(_median(ours['search_rel']))} over {len(ours['search_rel'])}; runner "
            f"time per contender {_ms(statistics.fmean(ours['contender_runner_s'] or [0.0]))}"
        )
        print(
            f"  compile per trial (lowering + LLVM object code, in-process builder): "
            f"{_ms(compile_floor)} (the floor's compile part, both sides)"
        )
        n = st.get("search_trials", 0.0)
        print(
            f"  where a search trial's {_ms(st['search_s'] / max(1.0, n))} went ({n:.0f} trials, "
            "largest first): " + " | ".join(f"{name} {ms:.0f} ms ({share:.0%})" for name, ms, share in breakdown(st))
        )
        b = ours["best"]
        print(
            f"best (from the finals): {b['latency_s'] * 1e3:.3f} ms {_pct(b['rel'])} = "
            f"{b['gflops']:.1f} GFLOPS ({ours['best_source']}); default "
            f"{ours['baseline_s'] * 1e3:.3f} ms; speedup {ours['baseline_s'] / b['latency_s']:.1f}x"
        )
        if args.skip_stock:
            return 0

        repeat = args.stock_repeat
        if args.stock_equal_time:
            # Runs of min_repeat_ms each, plus about one for TVM's calibration of number.
            per = statistics.fmean(ours["contender_runner_s"] or [0.0])
            repeat = max(2, round(per * 1e3 / args.stock_min_repeat_ms) - 1)
            mode = "equal time: repeat chosen to match our runner time per contender"
        elif (repeat, args.stock_min_repeat_ms) == (FIXED_REPEAT, FIXED_MIN_REPEAT_MS):
            mode = "tvmtune-ci 0.1's fixed settings; precision NOT equalised, both printed"
        else:
            mode = "fixed settings given on the command line; precision NOT equalised"
        print(
            f"\n## stock: ms.tir_integration.tune_tir (fresh process), {args.stock_trials} trials, "
            f"tune_tir defaults (batch 64, population 512, LocalBuilder, XGB)"
        )
        print(
            f"measurement: EvaluatorConfig(number=1 calibrated, repeat={repeat}, "
            f"min_repeat_ms={args.stock_min_repeat_ms}), ranked by the mean; {mode}",
            flush=True,
        )
        stock = run_child(
            "stock",
            {
                **common,
                "trials": args.stock_trials,
                "repeat": repeat,
                "min_repeat_ms": args.stock_min_repeat_ms,
                "work_dir": str(scratch / "stock"),
            },
        )
        fs = side_figures(stock, compile_floor)
        print_side("stock", stock, fs)
        for err in stock.get("errors", []):
            print(f"  stock failure (from its logs): {err}")
        print(
            f"  search measuring: precision of the mean of {repeat} (95% t-interval) median "
            f"{_pct(_median(stock['search_rel']))} over {len(stock['search_rel'])} valid trials"
        )
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

        print(f"\n## side by side (one run; stock measurement: {mode})")
        if not stock["valid"]:
            # Trials that never ran are not a throughput: a ratio would flatter us.
            print("stock measured no valid trial (see its failures above): no ratios printed")
            return 0
        print(
            f"trials per minute, EXCLUDING one-time costs: ours {fo['tpm_excl']:.1f} / stock "
            f"{fs['tpm_excl']:.1f} = {fo['tpm_excl'] / fs['tpm_excl']:.2f}x "
            f"(goal >= {GOAL_TPM_RATIO:g}x)"
        )
        print(
            f"trials per minute, INCLUDING them: ours {fo['tpm_incl']:.1f} / stock "
            f"{fs['tpm_incl']:.1f} = {fo['tpm_incl'] / fs['tpm_incl']:.2f}x"
        )
        print(
            f"per trial: ours {_ms(fo['pt_excl'])} / {_ms(fo['pt_incl'])}, stock "
            f"{_ms(fs['pt_excl'])} / {_ms(fs['pt_incl'])} (excluding / including)"
        )
        print(f"one-time costs (launch -> worker up): ours {fo['one_time']:.1f} s, stock {fs['one_time']:.1f} s")
        print(
            f"first measured search trial after launch: ours {fo['first_launch']:.1f} s, "
            f"stock {fs['first_launch']:.1f} s; after the call started: ours "
            f"{fo['first_call']:.1f} s, stock {fs['first_call']:.1f} s"
        )
        print(
            f"whole-call multiple of the floor (excluding one-time): ours {fo['mult_excl']:.2f}x, "
            f"stock {fs['mult_excl']:.2f}x; runner time per search trial: ours "
            f"{_ms(fo['runner_pt'])}, stock {_ms(fs['runner_pt'])}"
        )
        print(
            f"search precision (median): ours {_pct(_median(ours['search_rel']))} (p25, "
            f"contenders), stock {_pct(_median(stock['search_rel']))} (mean of {repeat})"
        )
        if stock["best_trace"] is None:
            print("stock found no valid configuration")
            return 0
        compare_bests(args, tmpl, target, measure, ours, stock)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def compare_bests(
    args: argparse.Namespace,
    tmpl: types.ModuleType,
    target: dict[str, Any],
    measure: Any,
    ours: dict[str, Any],
    stock: dict[str, Any],
) -> None:
    """Both bests re-measured in one interleaved `measure.finals` run (so a slow
    period of the machine hits both alike)."""
    from tvmtune_ci.core import stats
    from tvmtune_ci.tune.builder import make_builder
    from tvmtune_ci.tune.measure import Finalist, finals
    from tvmtune_ci.tune.runners import make_runner
    from tvmtune_ci.tune.space import decode_knobs, design_space_infos

    infos = design_space_infos(tmpl, args.workload, target)
    _, stock_knobs = decode_knobs(stock["best_trace"], infos, tmpl.KNOBS)
    print(
        f"best during the search (each side's own estimator): ours "
        f"{(ours['search_best_s'] or math.nan) * 1e3:.3f} ms (p25), stock "
        f"{stock['best_latency_s'] * 1e3:.3f} ms (mean)"
    )
    runner, builder = make_runner(measure), make_builder()
    try:
        res = finals(
            tmpl,
            args.workload,
            target,
            [Finalist("ours", ours["best"]["knobs"], "ours"), Finalist("stock", stock_knobs, "stock")],
            measure,
            runner=runner,
            builder=builder,
        )
    finally:
        runner.close()
        builder.close()
    by = {r.finalist.role: r for r in res}
    eo, es = by["ours"].estimate, by["stock"].estimate
    if eo is None or es is None:
        print(f"finals failed: ours {by['ours'].error}, stock {by['stock'].error}")
        return
    lo, hi = eo.lo / es.hi, eo.hi / es.lo  # the ratio's range over both intervals
    print(
        f"both bests re-measured (measure.finals, interleaved, p25): ours "
        f"{stats.fmt_latency(eo)} (n={eo.n}), stock {stats.fmt_latency(es)} (n={es.n}); "
        f"ours/stock = {eo.value / es.value:.3f} [{lo:.3f}, {hi:.3f}]: ours "
        f"{stats.compare(eo, es)} (goal <= 1)"
    )
    print(f"stock best knobs: {json.dumps(stock_knobs)}")
    print(f"ours best knobs: {json.dumps(ours['best']['knobs'])}")


if __name__ == "__main__":
    raise SystemExit(main())
