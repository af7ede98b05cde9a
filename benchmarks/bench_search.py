"""Search quality: tvmtune-ci's tuner on a template vs stock MetaSchedule on TVM's own space.

    python -m benchmarks.bench_search                       # matmul/m1024, 64 trials, seeds 1,2,3
    python -m benchmarks.bench_search --op dense --workload ffn1 --trials 100 --seeds 1,2,3,4,5
    python -m benchmarks.bench_search --skip-stock          # the two template arms only

Three searches get the same budget of measured trials on the same workload, once
per seed (at least 3: one seed's luck is as large as the differences judged):

- tool: `tvmtune_ci.tune.tuner.tune_workload` over the template's knob space as
  committed, early stop off so the whole budget is spent;
- wide: the same over the template's space *before it was pruned* with
  hindsight. Commit 5655469 dropped choices that "never won" in earlier runs
  (`pack_b: none` of the GEMM templates); this arm puts them back (see PRUNED),
  so the tool is not judged only on a space cut to fit known answers;
- stock: `tvm.s_tir.meta_schedule.tir_integration.tune_tir` on the template's
  compute with TVM's own auto-scheduled space (`space="post-order-apply"`: the
  llvm schedule rules), its defaults otherwise, in a fresh process. One fix:
  TVM 0.27's LocalRunner worker asks for device "llvm", which does not exist, so
  its initializer maps the target kind to "cpu" (else every stock trial fails).

Printed per seed: the best-so-far curve of each (GFLOP/s by trial, as each
search measured it), the trials each needs to reach 95% of its own final best and
of the best final of all arms and seeds; then every final best rebuilt and
re-measured in interleaved rounds in this process (the only numbers compared
across arms), and the median over seeds per arm.

Measurements use --threads cores: TVM_NUM_THREADS is set for all searches' runner
processes (TVM's default on x86 is half the hardware threads, one on a 2-core VM).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import wait_idle

ROOT = Path(__file__).resolve().parents[1]
# Set by main(): this machine's CPU (or --mcpu): code built for a CPU the host lacks
# dies with SIGILL, and the templates read their lanes and registers from it.
TARGET: dict[str, Any] = {"kind": "llvm", "num-cores": 2}
FAILED = 1e9  # MetaSchedule records a failed run as 1e10 s

STOCK_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, {root!r})
args = json.loads(sys.argv[1])
import tvm
from tvm.s_tir import meta_schedule as ms
from tvmtune_ci.tune.workload import workload_module
from tvmtune_ci.template import import_template


def fix_llvm_device():
    # LocalRunner worker initializer: tvm.runtime.device("llvm") raises
    # "Unknown device: llvm" in TVM 0.27; map the target kind to cpu.
    import tvm.runtime

    orig = tvm.runtime.device

    def device(dev_type, dev_id=0):
        return orig("cpu" if dev_type in ("llvm", "c") else dev_type, dev_id)

    tvm.runtime.device = device


from pathlib import Path
tmpl = import_template(Path(args["template"]), Path(args["root"]))
mod = workload_module(tmpl, args["workload"])
runner = ms.runner.LocalRunner(
    evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=args["repeat"],
                                               min_repeat_ms=args["min_repeat_ms"]),
    initializer=fix_llvm_device,
)
t0 = time.perf_counter()
db = ms.tir_integration.tune_tir(mod, tvm.target.Target(args["target"]), args["work_dir"],
                                 max_trials_global=args["trials"],
                                 num_trials_per_iter=args["batch"], space="post-order-apply",
                                 runner=runner, seed=args["seed"])
print("STOCK-RESULT " + json.dumps({{"wall_s": time.perf_counter() - t0}}))
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--op", default="matmul", help="operator template in operators/ (matmul)")
    p.add_argument("--workload", default="m1024", help="one of its WORKLOADS (m1024)")
    p.add_argument("--trials", type=int, default=64, help="measured trials for each (64)")
    p.add_argument("--batch", type=int, default=16, help="trials per search batch (16)")
    p.add_argument("--seeds", default="1,2,3", help="search seeds, comma-separated (1,2,3)")
    p.add_argument("--threads", type=int, default=2, help="threads the kernels run on (2)")
    # Stock's LocalRunner measures with fixed repeats (ours samples adaptively).
    p.add_argument("--repeat", type=int, default=5, help="stock's time_evaluator repeats (5)")
    p.add_argument("--min-repeat-ms", type=int, default=50, help="stock's per repeat (50)")
    p.add_argument("--rounds", type=int, default=10, help="re-measurement rounds of the bests")
    p.add_argument("--work-dir", help="keep the searches' files here (default: a temp dir)")
    p.add_argument(
        "--wait-idle",
        type=float,
        default=120.0,
        help="before measuring, wait up to this many seconds for the 1-minute load "
        "average to drop below 0.5 (other processes' load is noise) (120)",
    )
    p.add_argument("--skip-stock", action="store_true")
    p.add_argument("--skip-tool", action="store_true", help="skip both template arms")
    p.add_argument("--skip-wide", action="store_true", help="skip the pre-pruning arm")
    p.add_argument("--mcpu", help="LLVM CPU to tune for (default: this machine's; another CPU's code may not run here)")
    args = p.parse_args(argv)
    args.seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    if not args.seeds:
        p.error("--seeds needs at least one seed")
    return args


# Choices dropped from the committed templates after earlier tuning runs showed them
# never winning (commit 5655469): structure knob -> the dropped candidates. The
# schedules still implement them.
PRUNED: dict[str, list[str]] = {"pack_b": ["none"]}


def widen(template_path: Path, work_dir: Path) -> Path | None:
    """A copy of the template with PRUNED's choices restored; None if it has none of them."""
    import re

    text = template_path.read_text()
    changed = text
    for knob, extra in PRUNED.items():
        pat = re.compile(rf'(define_structure\(\s*"{re.escape(knob)}"\s*,\s*\[)([^\]]*)\]')

        def add(m: re.Match[str], extra: list[str] = extra) -> str:
            body = m.group(2).rstrip().rstrip(",")
            return m.group(1) + body + "".join(f', "{x}"' for x in extra if f'"{x}"' not in body) + "]"

        changed = pat.sub(add, changed)
    if changed == text:
        return None
    work_dir.mkdir(parents=True, exist_ok=True)
    out = work_dir / f"{template_path.stem}_wide.py"
    out.write_text(changed)
    return out


# --------------------------------------------------------------------------- curves


def best_so_far(gflops_by_trial: list[float | None]) -> list[float]:
    out, best = [], 0.0
    for g in gflops_by_trial:
        if g is not None and g > best:
            best = g
        out.append(best)
    return out


def trials_to(curve: list[float], level: float) -> int | None:
    """1-based trial at which the best-so-far first reaches `level` (None: never)."""
    for i, g in enumerate(curve, 1):
        if g >= level:
            return i
    return None


def curve_points(curve: list[float], n: int = 10) -> str:
    if not curve:
        return "-"
    marks = sorted({max(1, round(len(curve) * k / n)) for k in range(1, n + 1)})
    return "  ".join(f"{t}:{curve[t - 1]:.0f}" for t in marks)


def stock_trials(work_dir: Path, flop: float) -> tuple[list[float | None], Any]:
    """GFLOP/s of each stock trial in the order measured, and the best record's trace JSON."""
    lines = (work_dir / "database_tuning_record.json").read_text().splitlines()
    out: list[float | None] = []
    best, best_s = None, float("inf")
    for line in lines:
        _, rec = json.loads(line)
        trace, run_secs = rec[0], rec[1]
        secs = [float(x) for x in run_secs or []]
        if not secs or min(secs) >= FAILED:
            out.append(None)
            continue
        mean = statistics.fmean(secs)
        out.append(flop / mean / 1e9)
        if mean < best_s:
            best, best_s = trace, mean
    return out, best


# --------------------------------------------------------------------------- runs


def run_tool(args: argparse.Namespace, template: Any, work_dir: Path, seed: int) -> Any:
    from tvmtune_ci.core.configschema import EarlyStop, MeasureOptions
    from tvmtune_ci.tune.tuner import TuneRequest, tune_workload

    req = TuneRequest(
        template=template,
        workload_name=args.workload,
        target=TARGET,
        trials=args.trials,
        work_dir=work_dir,
        batch_size=args.batch,
        seed=seed,
        early_stop=EarlyStop(patience=0),
        measure=MeasureOptions(),  # tvmtune-ci's default adaptive sampling
    )
    return tune_workload(req)


def run_stock(args: argparse.Namespace, work_dir: Path, seed: int) -> float:
    payload = json.dumps(
        {
            "template": str(ROOT / "operators" / f"{args.op}.py"),
            "root": str(ROOT),
            "workload": args.workload,
            "target": TARGET,
            "trials": args.trials,
            "batch": args.batch,
            "seed": seed,
            "repeat": args.repeat,
            "min_repeat_ms": args.min_repeat_ms,
            "work_dir": str(work_dir),
        }
    )
    r = subprocess.run(
        [sys.executable, "-c", STOCK_SCRIPT.format(root=str(ROOT)), payload], capture_output=True, text=True, cwd=ROOT
    )
    for line in r.stdout.splitlines():
        if line.startswith("STOCK-RESULT "):
            return float(json.loads(line[len("STOCK-RESULT ") :])["wall_s"])
    raise SystemExit(f"stock run failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def build_stock_best(template: Any, workload: str, trace_json: Any) -> Any:
    """The stock best, replayed on the workload and post-processed as tune_tir measured it."""
    import tvm

    from tvmtune_ci.tune.builder import apply_postprocs
    from tvmtune_ci.tune.workload import workload_module

    sch = tvm.s_tir.Schedule(workload_module(template, workload))
    tvm.s_tir.schedule.Trace.apply_json_to_schedule(trace_json, sch)
    apply_postprocs(sch, TARGET)
    return tvm.compile(sch.mod, target=tvm.target.Target(TARGET))


def remeasure(template: Any, workload: str, exes: dict[Any, Any], rounds: int) -> dict[Any, float]:
    """Best round (seconds) of each executable, measured in interleaved rounds."""
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from tvmtune_ci.tune.workload import workload_module

    mod = workload_module(template, workload)
    rng = np.random.default_rng(1)
    dev = tvm.cpu()
    arrays = [
        rng.uniform(-1, 1, [int(s) for s in a.shape]).astype(str(a.dtype)) for a in ArgInfo.from_prim_func(mod["main"])
    ]
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    times: dict[Any, list[float]] = {k: [] for k in exes}
    for _ in range(rounds):
        for name, exe in exes.items():
            time.sleep(0.1)  # the other kernel's idle workers stop spinning
            ev = exe.mod.time_evaluator(exe.mod.entry_name, dev, number=1, repeat=5, min_repeat_ms=50)
            times[name].append(min(float(x) for x in ev(*tensors).results))
    return {k: min(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # inherited by both runners' workers

    from tvmtune_ci.core.targetinfo import scope
    from tvmtune_ci.core.template import import_template, space_size
    from tvmtune_ci.tune.builder import build_config
    from tvmtune_ci.tune.hostcheck import check_host, host_target
    from tvmtune_ci.tune.workload import flop_count, workload_module

    TARGET.update({"mcpu": args.mcpu} if args.mcpu else host_target())
    check_host(TARGET, advice="pass --mcpu of a CPU this machine has (default: its own)")
    print(f"target {json.dumps(TARGET)}")

    template = import_template(ROOT / "operators" / f"{args.op}.py", ROOT)
    if args.workload not in template.WORKLOADS:
        raise SystemExit(f"{args.op} has no workload {args.workload!r}; it has {', '.join(template.WORKLOADS)}")
    template_path = ROOT / "operators" / f"{args.op}.py"
    base = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench_search-"))
    arms: dict[str, Any] = {}
    if not args.skip_tool:
        arms["tool"] = template
        wide_path = None if args.skip_wide else widen(template_path, base)
        if wide_path is not None:
            arms["wide"] = import_template(wide_path, ROOT)
        elif not args.skip_wide:
            print(f"{args.op} has none of the pruned choices {PRUNED}: no wide arm")
    scope_ = scope(template.WORKLOADS[args.workload], TARGET)
    for name, mod in arms.items():
        per_space, n_spaces = space_size(mod.KNOBS, scope_)
        print(f"{name} space: {per_space} points x {n_spaces} design spaces = {per_space * n_spaces}")
    flop = flop_count(workload_module(template, args.workload))
    print(
        f"{args.op}/{args.workload}: {flop / 1e9:.3f} GFLOP; {args.trials} trials each, batch "
        f"{args.batch}, seeds {args.seeds}, {args.threads} threads; work dir {base}",
        flush=True,
    )

    curves: dict[tuple[str, int], list[float]] = {}
    walls: dict[tuple[str, int], float] = {}
    exes: dict[tuple[str, int], Any] = {}
    for seed in args.seeds:
        for name, mod in arms.items():
            t0 = time.perf_counter()
            out = run_tool(args, mod, base / f"{name}-{seed}", seed)
            walls[name, seed] = time.perf_counter() - t0
            by_trial: list[float | None] = [None] * out.trials.run
            for trial, g in out.curve:  # (1-based trial, best-so-far GFLOP/s)
                if 1 <= trial <= len(by_trial):
                    by_trial[trial - 1] = g
            curves[name, seed] = best_so_far(by_trial)
            print(
                f"seed {seed} {name}: {out.trials.run} trials ({out.trials.valid} valid, "
                f"{out.trials.failed} failed) in {walls[name, seed]:.0f} s; best "
                f"{json.dumps(out.best.knobs, sort_keys=True)}",
                flush=True,
            )
            exes[name, seed] = build_config(mod, args.workload, TARGET, out.best.knobs)
        if not args.skip_stock:
            walls["stock", seed] = run_stock(args, base / f"stock-{seed}", seed)
            per_trial, best_trace = stock_trials(base / f"stock-{seed}", flop)
            curves["stock", seed] = best_so_far(per_trial)
            valid = sum(g is not None for g in per_trial)
            print(
                f"seed {seed} stock: {len(per_trial)} trials ({valid} valid) in {walls['stock', seed]:.0f} s",
                flush=True,
            )
            if best_trace is not None:
                exes["stock", seed] = build_stock_best(template, args.workload, best_trace)

    finals = {k: c[-1] for k, c in curves.items() if c}
    top = max(finals.values(), default=0.0)
    print("\nbest-so-far GFLOP/s by trial (as measured during each search):")
    for (name, seed), c in curves.items():
        print(f"  {name:5} seed {seed}: {curve_points(c)}")
    print(f"\n{'search':6} {'seed':>4} {'final GF/s':>10} {'to 95% own':>11} {'to 95% best':>12} {'wall s':>7}")
    reach: dict[str, list[float]] = {}
    for (name, seed), c in curves.items():
        own, both = trials_to(c, 0.95 * finals[name, seed]), trials_to(c, 0.95 * top)
        reach.setdefault(name, []).append(float(both) if both else float("inf"))
        print(
            f"{name:6} {seed:>4} {finals[name, seed]:10.1f} {own or '-':>11} "
            f"{both or 'never':>12} {walls[name, seed]:>7.0f}"
        )
    if not exes:
        return 0
    waited = wait_idle(args.wait_idle)
    print(f"\nwaited {waited:.0f} s for an idle machine; load now {os.getloadavg()[0]:.2f}")
    got = remeasure(template, args.workload, exes, args.rounds)
    print(f"\nfinal bests rebuilt and re-measured in {args.rounds} interleaved rounds (best round):")
    for (name, seed), v in got.items():
        print(f"  {name:5} seed {seed}: {v * 1e3:.3f} ms = {flop / v / 1e9:.1f} GFLOP/s")
    print(f"\nper arm over seeds {args.seeds} (median; 'never' counts as infinite):")
    ref = "tool" if "tool" in arms else None
    for name in dict.fromkeys(n for n, _ in got):
        ms_ = [got[name, s] for s in args.seeds if (name, s) in got]
        wall = [walls[name, s] for s in args.seeds if (name, s) in walls]
        r = statistics.median(reach.get(name, [float("inf")]))
        line = (
            f"  {name:5} best {statistics.median(ms_) * 1e3:.3f} ms "
            f"(range {min(ms_) * 1e3:.3f}-{max(ms_) * 1e3:.3f}); trials to 95% of the "
            f"overall best {'never' if r == float('inf') else f'{r:g}'}; "
            f"wall {statistics.median(wall):.0f} s"
        )
        if ref and name != ref and (ref, args.seeds[0]) in got:
            per_seed = [got[name, s] / got[ref, s] for s in args.seeds if (name, s) in got and (ref, s) in got]
            line += (
                f"; time / tool's, same seed: {statistics.median(per_seed):.2f}x "
                f"(range {min(per_seed):.2f}-{max(per_seed):.2f})"
            )
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
