"""Benchmark: the measurement layer against the fixed-repeat one it replaced, side by side.

    python -m benchmarks.bench_measure                       # ~6 min on 2 cores
    python -m benchmarks.bench_measure --configs 60 --truth-rounds 30 --op dense --workload bert_ffn1
    python -m benchmarks.bench_measure --skip-ranking        # reproducibility + pick only

Three parts, all on this CPU (its LLVM name, 2 threads), one run:

1. **Ranking quality.** `--configs` random valid configurations of one template
   workload (sampled from its design spaces, as the search's first population is)
   are measured three ways, in the same order:
   - `fixed`: what tvmtune-ci 0.1 did: 5 samples of >= 50 ms (`number`
     calibrated), ranked by their mean;
   - `adaptive`: `measure.search_policy` without racing (sampled to
     `search_precision` within `search_cap_s`), ranked by `stats.estimate`;
   - `raced`: the same with racing against the best so far, as the search does.
   Ground truth is a long interleaved re-measurement of all of them
   (`--truth-rounds` rounds of 3 samples each, A B C ... A B C ..., p25). Printed:
   top-1 hit (does the method's fastest equal the truth's, or lie within 1% of
   it), Kendall tau against the truth, and measuring seconds per configuration
   (the worker's sampling time, calibration included).
2. **Reproducibility.** Each committed best of this CPU's target (tuning_logs/,
   the manifest's best) is re-measured in 5 fresh processes with `measure_config`
   (full policy); the median of the 5 against the README's value and precision.
3. **Pick quality.** Each committed workload's top-10 (manifest) re-measured in
   one long interleaved run; the shipped best against the fastest of the ten.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import wait_idle

ROOT = Path(__file__).resolve().parents[1]


def host_target() -> dict[str, Any]:
    from tvmtune_ci.tune.hostcheck import host_target

    return host_target(2)


def kendall_tau(a: list[float], b: list[float]) -> float:
    n = len(a)
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (a[i] - a[j]) * (b[i] - b[j])
            conc += s > 0
            disc += s < 0
    return (conc - disc) / max(1, conc + disc)


def random_configs(template: Any, workload: str, n: int, seed: int, target: dict[str, Any]) -> list[dict[str, Any]]:
    """n distinct random configurations, drawn as MetaSchedule samples its spaces."""
    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.space import TemplateSpace, decode_knobs, knobs_key, plain, space_info
    from tvmtune_ci.tune.workload import workload_module, workload_params

    tvm = tvmsetup.load()
    space = TemplateSpace(template, workload_params(template, workload), target)
    out: dict[str, dict[str, Any]] = {}
    rng = random.Random(seed)
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        sch = tvm.s_tir.Schedule(workload_module(template, workload), seed=rng.randrange(1, 2**30))
        schs = space(sch)
        infos = [space_info(i, space.structures[i], s, space.orders[i]) for i, s in enumerate(schs)]
        s = schs[rng.randrange(len(schs))]
        _, kv = decode_knobs(plain(s.trace.as_json()), infos, space.knobs)
        out.setdefault(knobs_key(kv), kv)
    return list(out.values())


def ranking(args: argparse.Namespace) -> None:
    from tvmtune_ci.core import stats
    from tvmtune_ci.core.configschema import MeasureOptions
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.builder import make_builder, schedule_config
    from tvmtune_ci.tune.runners import make_runner
    from tvmtune_ci.tune.sampling import SamplePolicy, search_policy

    target = host_target()
    tpl = import_template(ROOT / "operators" / f"{args.op}.py", ROOT)
    configs = random_configs(tpl, args.workload, args.configs, args.seed, target)
    measure = MeasureOptions()
    fixed = SamplePolicy(
        sample_ms=50, precision=0.0, cap_s=math.inf, min_samples=5, max_samples=5, chunk=5, hard_cap_s=60
    )
    runner = make_runner(measure)
    builder = make_builder()
    schs = [schedule_config(tpl, args.workload, k, target) for k in configs]
    # Built once; every measurement below reuses the library.
    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.sampling import device_type

    ms = tvmsetup.ms()
    tgt = tvmsetup.make_target(target)
    built = builder.build([ms.builder.BuilderInput(s.mod, tgt) for s in schs])
    inputs = [
        ms.runner.RunnerInput(
            b.artifact_path, device_type(tgt), ms.arg_info.ArgInfo.from_entry_func(s.mod, remove_preproc=True)
        )
        for s, b in zip(schs, built, strict=True)
    ]

    def run_schedule(sch: Any, _target: Any, runner: Any, _builder: Any) -> list[float]:
        (fut,) = runner.run([inputs[schs.index(sch)]])
        res = fut.result()
        if res.error_msg:
            raise RuntimeError(res.error_msg)
        return [float(x) for x in res.run_secs]

    print(
        f"## Ranking: {len(configs)} random configurations of {args.op}/{args.workload}, target {json.dumps(target)}\n",
        flush=True,
    )

    def one(sch: Any, policy: SamplePolicy) -> tuple[list[float], float]:
        runner.set_policy(policy)
        n = len(runner.timings)
        secs = run_schedule(sch, target, runner, builder)
        return secs, sum(t.eval_s for t in runner.timings[n:])

    results: dict[str, list[tuple[float, float]]] = {"fixed": [], "adaptive": [], "raced": []}
    best = math.inf
    for sch in schs:
        secs, t = one(sch, fixed)
        results["fixed"].append((statistics.fmean(secs), t))
    for sch in schs:
        secs, t = one(sch, search_policy(measure))
        results["adaptive"].append((stats.estimate(secs).value, t))
    for sch in schs:
        secs, t = one(sch, search_policy(measure, measure.race * best if best < math.inf else None))
        v = stats.estimate(secs).value
        if len(secs) > measure.probe:
            best = min(best, v)
        results["raced"].append((v, t))
    # Ground truth: all configurations, interleaved, many rounds of 3 samples each.
    truth_samples: list[list[float]] = [[] for _ in schs]
    t0 = time.perf_counter()
    runner.set_policy(SamplePolicy(sample_ms=10, precision=0.0, cap_s=math.inf, min_samples=3, max_samples=3, chunk=3))
    for r in range(args.truth_rounds):
        order = list(range(len(schs)))
        random.Random(r).shuffle(order)
        for i in order:
            truth_samples[i].extend(run_schedule(schs[i], target, runner, builder))
    truth = [stats.estimate(s).value for s in truth_samples]
    runner.close()
    builder.close()
    t_truth = time.perf_counter() - t0
    tbest = min(range(len(truth)), key=truth.__getitem__)
    print(
        f"ground truth: {args.truth_rounds} interleaved rounds, {len(truth_samples[0])} samples "
        f"each ({t_truth:.0f} s); spread of the truth: fastest {truth[tbest] * 1e3:.4g} ms, "
        f"slowest {max(truth) * 1e3:.4g} ms\n"
    )
    print("| method | top-1 | its pick vs truth's best | Kendall tau | measuring s / config |")
    print("|---|---|---|---|---|")
    per = {}
    for name, rows in results.items():
        vals = [v for v, _ in rows]
        pick = min(range(len(vals)), key=vals.__getitem__)
        ratio = truth[pick] / truth[tbest]
        tau = kendall_tau(vals, truth)
        per[name] = statistics.fmean(t for _, t in rows)
        hit = "yes" if pick == tbest else ("within 1%" if ratio <= 1.01 else "no")
        print(f"| {name} | {hit} | {ratio:.3f}x | {tau:.3f} | {per[name]:.3f} |")
    print(
        f"\nmeasuring seconds per configuration, fixed / raced: "
        f"{per['fixed'] / per['raced']:.2f}x fewer with racing, "
        f"{per['fixed'] / per['adaptive']:.2f}x without\n",
        flush=True,
    )


REMEASURE = r"""
import json, os, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("TVM_NUM_THREADS", "2")
from tvmtune_ci.core.config import load_config
from tvmtune_ci.tune.measure import measure_config
from tvmtune_ci.template import import_template
a = json.loads(sys.argv[1])
cfg = load_config(__import__("pathlib").Path({root!r}) / "tvmtune.yaml")
tpl = import_template(cfg.root / a["template"], cfg.root)
m = measure_config(tpl, a["workload"], a["target"], a["knobs"], cfg.measure)
print(json.dumps([m.latency_s, m.rel_halfwidth]))
"""


def committed(target_name: str | None) -> list[tuple[Path, Any]]:
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.manifest import read_manifest

    cfg = load_config(ROOT / "tvmtune.yaml")
    names = [target_name] if target_name else [t.name for t in cfg.targets]
    out = []
    for p in sorted((ROOT / "tuning_logs").glob("*/*/manifest.json")):
        m = read_manifest(p)
        if m.target_name in names and m.format >= 2:
            out.append((p, m))
    return out


def reproducibility(args: argparse.Namespace) -> None:
    from tvmtune_ci.core.stats import fmt_latency

    print("## Reproducibility: each committed best, 5 fresh processes\n")
    print("| entry | README | median of 5 fresh | ratio | within the README's ± | within ±3% |")
    print("|---|---|---|---|---|---|")
    for _, m in committed(args.target):
        for w, r in sorted(m.results.items()):
            vals = []
            for _ in range(5):
                arg = json.dumps(
                    {"template": m.template_file, "workload": w, "target": m.target, "knobs": r.best.knobs}
                )
                out = subprocess.run(
                    [sys.executable, "-c", REMEASURE.format(root=str(ROOT)), arg],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                vals.append(json.loads(out.strip().splitlines()[-1])[0])
            med = statistics.median(vals)
            ratio = med / r.best.latency_s
            rel = r.best.rel_halfwidth or 0.0
            print(
                f"| {m.operator}/{m.target_name}/{w} | {fmt_latency(r.best.latency_s, rel)} | "
                f"{med * 1e3:.4g} ms | {ratio:.3f} | {'yes' if abs(ratio - 1) <= rel else 'no'} | "
                f"{'yes' if abs(ratio - 1) <= 0.03 else 'no'} |",
                flush=True,
            )
    print()


def pick_quality(args: argparse.Namespace) -> None:
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.builder import make_builder
    from tvmtune_ci.tune.measure import Finalist, finals
    from tvmtune_ci.tune.runners import make_runner

    cfg = load_config(ROOT / "tvmtune.yaml")
    long = type(cfg.measure)(
        **{**vars(cfg.measure), "precision": 0.002, "time_cap_s": args.pick_cap_s, "timeout_s": 600.0}
    )
    print(f"## Pick quality: each committed top-10, interleaved, {args.pick_cap_s:g} s per config\n")
    print("| entry | shipped best vs fastest of the top-10 | within 2% |")
    print("|---|---|---|")
    for _, m in committed(args.target):
        tpl = import_template(cfg.root / m.template_file, cfg.root)
        runner = make_runner(long)
        builder = make_builder()
        try:
            for w, r in sorted(m.results.items()):
                tops = [t for t in r.top[:10]]
                res = finals(
                    tpl,
                    w,
                    m.target,
                    [Finalist("search", t.knobs, str(i)) for i, t in enumerate(tops)],
                    long,
                    runner=runner,
                    builder=builder,
                )
                vals = [x.estimate.value for x in res if x.estimate is not None]
                shipped = res[0].estimate.value if res[0].estimate else math.nan
                ratio = shipped / min(vals)
                print(
                    f"| {m.operator}/{m.target_name}/{w} | {ratio:.3f}x | {'yes' if ratio <= 1.02 else 'no'} |",
                    flush=True,
                )
        finally:
            builder.close()
            runner.close()
    print()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="dense")
    p.add_argument("--workload", default="bert_ffn1")
    p.add_argument("--configs", type=int, default=60)
    p.add_argument("--truth-rounds", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--target", default=None, help="committed target to check (default: all configured)")
    p.add_argument("--pick-cap-s", type=float, default=4.0)
    p.add_argument("--skip-ranking", action="store_true")
    p.add_argument("--skip-repro", action="store_true")
    p.add_argument("--skip-pick", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    waited = wait_idle(120)
    print(
        f"# bench_measure ({time.strftime('%Y-%m-%d %H:%M')}, waited {waited:.0f} s for idle; "
        f"load {os.getloadavg()[0]:.2f})\n",
        flush=True,
    )
    if not args.skip_ranking:
        ranking(args)
    if not args.skip_repro:
        reproducibility(args)
    if not args.skip_pick:
        pick_quality(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
