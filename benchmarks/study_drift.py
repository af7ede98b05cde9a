"""Which figure of a tuned kernel holds from one run to the next on this runner? The data
behind what `remeasure` decides on and what a README publishes (docs/measurement.md).

    python -m benchmarks.study_drift --procs 12 --minutes 40          # the study
    python -m benchmarks.study_drift --analyse benchmarks/results/study_drift/2026-12-01_xeon-emr-2c_window_raw.jsonl

Each of `--procs` fresh processes, started at even intervals over `--minutes`, takes
every committed best of `--logs` (default: every configured target's logs) and, for each
workload, measures four kernels in tight alternation (a few samples each, in turns,
`measure.interleave`) for `--seconds`: the best, the default configuration, and the two
calibration kernels (`tvmtune_ci/calibration.py`: compute-bound, memory-bound). The
kernels are built for THIS machine: each log's target with its `mcpu` replaced by this
CPU's (its `mattr` kept, so an AVX2 log stays AVX2); this is a study of the runner, not
a check of the logs. Every sample is kept (`--out`, one JSON line per process and
workload).

The analysis computes, per process and workload, each candidate figure from the same
samples, then how far each figure spreads between processes: half the range over the
median ("±x%"), and the same with the one most extreme process left out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import result_path

ROOT = Path(__file__).resolve().parents[1]

KERNELS = ("best", "default", "compute", "memory")


# --------------------------------------------------------------------------- the child


def host_build_target(log_target: dict[str, Any]) -> dict[str, Any]:
    """The log's target rebuilt for this CPU: mcpu and hidden features from the host,
    the log's own mattr (e.g. -avx512f) kept, 2 threads."""
    from tvmtune_ci.tune.hostcheck import host_target

    host = host_target(2)
    mattr = list(host.get("mattr", [])) + [a for a in log_target.get("mattr", []) if a not in host.get("mattr", [])]
    return {**host, **({"mattr": mattr} if mattr else {})}


def child(args: argparse.Namespace) -> int:
    os.environ["TVM_NUM_THREADS"] = "2"
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune import calibration
    from tvmtune_ci.tune.builder import make_builder, schedule_config
    from tvmtune_ci.tune.measure import interleave
    from tvmtune_ci.tune.runners import make_runner

    cfg = load_config(ROOT / "tvmtune.yaml")
    builder = make_builder()
    runner = None if args.workers > 1 else make_runner(cfg.measure)
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 - appended line by line
    try:
        for entry in args.logs:
            m = read_manifest(ROOT / "tuning_logs" / entry / "manifest.json")
            tpl = import_template(ROOT / m.template_file, ROOT)
            target = host_build_target(m.target)
            cal = calibration.kernels(target)
            assert cal is not None
            for w, res in sorted(m.results.items()):
                schs = [
                    schedule_config(tpl, w, res.best.knobs, target),
                    schedule_config(tpl, w, None, target),
                    cal[0].sch,
                    cal[1].sch,
                ]
                for worker in range(args.workers):
                    # --workers K: K sub-windows, each in a fresh measuring worker process
                    own = make_runner(cfg.measure) if runner is None else None
                    t0 = time.time()
                    try:
                        visits = interleave(
                            schs,
                            target,
                            cfg.measure,
                            seconds=args.seconds / args.workers,
                            runner=own or runner,
                            builder=builder,
                            what=f"{entry}/{w}",
                        )
                    finally:
                        if own is not None:
                            own.close()
                    rec = {
                        "proc": args.proc,
                        "worker": worker,
                        "entry": entry,
                        "workload": w,
                        "start": t0,
                        "load1": os.getloadavg()[0],
                        "readme_s": res.best.latency_s,
                        "readme_default_s": res.baseline.latency_s,
                        "visits": {
                            k: [[round(v.t_s, 3), [float(f"{x:.5g}") for x in v.samples]] for v in vs]
                            for k, vs in zip(KERNELS, visits, strict=True)
                        },
                    }
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                print(f"proc {args.proc}: {entry}/{w} done", flush=True)
    finally:
        out.close()
        if runner is not None:
            runner.close()
        builder.close()
    return 0


def child_run(args: argparse.Namespace) -> int:
    """`--protocol run`: one interleaved session per process, as a remeasure run measures:
    every best of every log and the two calibration kernels in turns for `--seconds`
    in all, so each kernel's visits are spread over the whole run."""
    os.environ["TVM_NUM_THREADS"] = "2"
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune import calibration
    from tvmtune_ci.tune.builder import make_builder, schedule_config
    from tvmtune_ci.tune.measure import interleave
    from tvmtune_ci.tune.runners import make_runner

    cfg = load_config(ROOT / "tvmtune.yaml")
    names, schs, targets = [], [], set()
    for entry in args.logs:
        m = read_manifest(ROOT / "tuning_logs" / entry / "manifest.json")
        tpl = import_template(ROOT / m.template_file, ROOT)
        target = host_build_target(m.target)
        targets.add(json.dumps(target, sort_keys=True))
        for w, res in sorted(m.results.items()):
            names.append(f"{entry}/{w}")
            schs.append(schedule_config(tpl, w, res.best.knobs, target))
    # One target for the session: the calibration kernels of the first log's target.
    target = json.loads(sorted(targets)[0])
    cal = calibration.kernels(target)
    assert cal is not None
    names += ["calibration/compute", "calibration/memory"]
    schs += [cal[0].sch, cal[1].sch]
    runner, builder = make_runner(cfg.measure), make_builder()
    try:
        t0 = time.time()
        visits = interleave(
            schs, target, cfg.measure, seconds=args.seconds, runner=runner, builder=builder, what="study"
        )
    finally:
        runner.close()
        builder.close()
    rec = {
        "proc": args.proc,
        "protocol": "run",
        "start": t0,
        "load1": os.getloadavg()[0],
        "seconds": args.seconds,
        "visits": {
            n: [[round(v.t_s, 3), [float(f"{x:.5g}") for x in v.samples]] for v in vs]
            for n, vs in zip(names, visits, strict=True)
        },
    }
    with open(args.out, "a", encoding="utf-8") as out:
        out.write(json.dumps(rec) + "\n")
    print(f"proc {args.proc}: {len(names)} kernels for {args.seconds:g}s", flush=True)
    return 0


def fast(visits: Sequence[Sequence[Any]], burst_s: float = 1.0, until: float = math.inf) -> float:
    """The lower quartile of the fastest `burst_s` stretch of a kernel's visits (>= 3 samples)."""
    return min(p25(b) for b in bursts([v for v in visits if v[0] < until], burst_s))


def analyse_runs(path: Path) -> int:
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    recs = [r for r in recs if r.get("protocol") == "run"]
    if not recs:
        return 0
    span = (max(r["start"] for r in recs) - min(r["start"] for r in recs)) / 60
    print(
        f"\n# protocol run: {len(recs)} processes over {span:.0f} min, {recs[0]['seconds']:g}s each, "
        f"{len(recs[0]['visits'])} kernels in turns"
    )
    kernels = sorted(recs[0]["visits"])
    cuts = [s for s in (30, 60, 90, 120) if s <= recs[0]["seconds"]] + [math.inf]
    rows: dict[str, list[tuple[str, float]]] = {}
    for k in kernels:
        for cut in cuts:
            label = "whole run" if cut == math.inf else f"first {cut:g}s"
            vals = [fast(r["visits"][k], until=cut) for r in recs]
            rows.setdefault(f"fastest 1-s stretch, {label}", []).append((k, spread(vals)[0]))
        vals = [p25(samples(r["visits"][k])) for r in recs]
        rows.setdefault("p25 of all samples", []).append((k, spread(vals)[0]))
        if not k.startswith("calibration/"):
            for ref in ("compute", "memory"):
                vals = [fast(r["visits"][k]) / fast(r["visits"][f"calibration/{ref}"]) for r in recs]
                rows.setdefault(f"fastest stretch / {ref} calibration's", []).append((k, spread(vals)[0]))
    print("\n| figure | median over kernels | worst kernel | " + " | ".join(kernels) + " |")
    print("|---|---|---|" + "---|" * len(kernels))
    for name, vals in rows.items():
        cells = {k: v for k, v in vals}
        worst = max(vals, key=lambda x: x[1])
        print(
            f"| {name} | ±{100 * statistics.median(v for _, v in vals):.1f}% | ±{100 * worst[1]:.1f}% "
            f"({worst[0]}) | " + " | ".join(f"{100 * cells[k]:.1f}" if k in cells else "-" for k in kernels) + " |"
        )
    return 0


# --------------------------------------------------------------------------- figures


def p25(xs: Iterable[float]) -> float:
    from tvmtune_ci.core.stats import quantile

    return quantile(list(xs), 0.25)


def samples(visits: Sequence[Sequence[Any]], until: float = math.inf) -> list[float]:
    return [x for t, xs in visits if t < until for x in xs]


def bursts(visits: Sequence[Sequence[Any]], burst_s: float) -> list[list[float]]:
    """The samples of consecutive `burst_s` stretches of the window."""
    out: dict[int, list[float]] = {}
    for t, xs in visits:
        out.setdefault(int(t // burst_s), []).extend(xs)
    return [v for _, v in sorted(out.items()) if len(v) >= 3]


def paired(a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]]) -> float:
    """Median over rounds of a's visit minimum over b's: a ratio of neighbours in time."""
    return statistics.median(min(x[1]) / min(y[1]) for x, y in zip(a, b, strict=False))


def figures(rec: dict[str, Any], short_s: float = 4.0, burst_s: float = 1.0) -> dict[str, float]:
    """Every candidate figure of one workload in one process (absolute ones in seconds,
    ratios as best / other)."""
    v = rec["visits"]
    best, default, comp, mem = (v[k] for k in KERNELS)
    full = {k: p25(samples(v[k])) for k in KERNELS}
    short = {k: p25(samples(v[k], short_s)) for k in KERNELS}
    fast = {k: min(p25(b) for b in bursts(v[k], burst_s)) for k in KERNELS}
    return {
        # what a README publishes today: the finals' p25 over their first seconds
        "abs p25, first 4 s": short["best"],
        "abs p25, whole window": full["best"],
        "abs fastest 1-s burst p25": fast["best"],
        "abs min": min(samples(best)),
        "/ default, p25s": full["best"] / full["default"],
        "/ default, paired": paired(best, default),
        "/ compute calib, p25s": full["best"] / full["compute"],
        "/ compute calib, paired": paired(best, comp),
        "/ memory calib, p25s": full["best"] / full["memory"],
        "/ memory calib, paired": paired(best, mem),
        "/ compute calib, first 4 s": short["best"] / short["compute"],
        "/ compute calib, fastest bursts": fast["best"] / fast["compute"],
        "/ memory calib, fastest bursts": fast["best"] / fast["memory"],
        "/ default, fastest bursts": fast["best"] / fast["default"],
        "calib compute abs p25": full["compute"],
        "calib memory abs p25": full["memory"],
    }


def spread(xs: Sequence[float]) -> tuple[float, float]:
    """(half the range over the median, the same without the value furthest from it)."""
    med = statistics.median(xs)
    half = (max(xs) - min(xs)) / 2 / med
    if len(xs) < 4:
        return half, half
    trimmed = sorted(xs, key=lambda x: abs(x - med))[:-1]
    return half, (max(trimmed) - min(trimmed)) / 2 / med


def analyse(path: Path) -> int:
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in recs:
        by.setdefault((r["entry"], r["workload"]), []).append(r)
    procs = sorted({r["proc"] for r in recs})
    span_min = (max(r["start"] for r in recs) - min(r["start"] for r in recs)) / 60
    print(
        f"# study_drift: {len(procs)} processes over {span_min:.0f} min, "
        f"{len(by)} workloads, load average at each workload "
        f"{min(r['load1'] for r in recs):.2f}-{max(r['load1'] for r in recs):.2f}"
    )
    table: dict[str, dict[str, tuple[float, float]]] = {}
    for key, rs in sorted(by.items()):
        figs = [figures(r) for r in sorted(rs, key=lambda r: r["start"])]
        for name in figs[0]:
            table.setdefault(name, {})["/".join(key)] = spread([f[name] for f in figs])
    names = list(table)
    wls = sorted(table[names[0]])
    print(
        "\nrun-to-run spread per workload (± half the range over the median; "
        "in brackets without the most extreme process)\n"
    )
    print("| figure | median over workloads | worst workload | " + " | ".join(wls) + " |")
    print("|---|---|---|" + "---|" * len(wls))
    for name in names:
        row = table[name]
        halves = [row[w][0] for w in wls]
        trims = [row[w][1] for w in wls]
        cells = " | ".join(f"{100 * row[w][0]:.1f} ({100 * row[w][1]:.1f})" for w in wls)
        print(
            f"| {name} | ±{100 * statistics.median(halves):.1f}% "
            f"(±{100 * statistics.median(trims):.1f}%) | ±{100 * max(halves):.1f}% | {cells} |"
        )
    return 0


# --------------------------------------------------------------------------- the verdict, simulated


def simulate(path: Path, runs: int = 20, trials: int = 2000, seed: int = 1) -> int:
    """The drift rule (`runs.judge`, as configured) on series drawn from the study's own
    run-to-run values (`--protocol run`: each kernel's fastest-stretch figure per
    process, resampled): how often it cries wolf over `runs` runs with nothing changed,
    and how often a persistent 10% or 15% slowdown, from a random run on, is reported
    within PERSIST runs (and not before it began)."""
    import random

    from tvmtune_ci.core import runs as R

    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    recs = [r for r in recs if r.get("protocol") == "run"]
    if len(recs) < 2:
        return 0
    figs = {
        "fast": lambda r, k: fast(r["visits"][k]),
        "fast / compute calibration": lambda r, k: fast(r["visits"][k]) / fast(r["visits"]["calibration/compute"]),
    }
    kernels = [k for k in sorted(recs[0]["visits"]) if not k.startswith("calibration/")]
    rng = random.Random(seed)
    print(
        f"\n# the drift rule (MIN_REF {R.MIN_REF}, PERSIST {R.PERSIST}, MARGIN {R.MARGIN:g}, "
        f"MIN_CHANGE {R.MIN_CHANGE:.0%}, FAR {R.FAR:.0%}) on the study's values resampled: "
        f"{trials} series of {runs} runs per kernel\n"
    )
    print(
        "| figure | series with a false alarm: median, worst kernel | 15% slowdown found within "
        f"{R.PERSIST} runs: median, worst | 10%: median, worst |"
    )
    print("|---|---|---|---|")
    for name, f in figs.items():
        fa, det = [], {0.15: [], 0.10: []}
        for k in kernels:
            vals = [f(r, k) for r in recs]
            n_fa = 0
            hits = {0.15: 0, 0.10: 0}
            for _ in range(trials):
                pts = [(f"{i:04d}", rng.choice(vals)) for i in range(runs)]
                n_fa += any(R.judge(k, pts[: i + 1]).drifted for i in range(runs))
                start = rng.randrange(R.MIN_REF + R.PERSIST, runs - R.PERSIST)
                for shift in hits:
                    slow = [(d, x * (1 + shift) if i >= start else x) for i, (d, x) in enumerate(pts)]
                    clean = not any(R.judge(k, slow[: i + 1]).drifted for i in range(start))
                    found = any(R.judge(k, slow[: i + 1]).drifted for i in range(start, start + R.PERSIST))
                    hits[shift] += clean and found
            fa.append((n_fa / trials, k))
            for shift in hits:
                det[shift].append((hits[shift] / trials, k))
        cells = [f"{100 * statistics.median(x for x, _ in fa):.1f}%, {100 * max(fa)[0]:.1f}% ({max(fa)[1]})"]
        for shift in (0.15, 0.10):
            d = det[shift]
            cells.append(f"{100 * statistics.median(x for x, _ in d):.0f}%, {100 * min(d)[0]:.0f}% ({min(d)[1]})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


# --------------------------------------------------------------------------- the parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=12)
    ap.add_argument("--minutes", type=float, default=40.0)
    ap.add_argument("--seconds", type=float, default=10.0, help="window per workload")
    ap.add_argument(
        "--protocol",
        choices=("window", "run"),
        default="window",
        help="window: each workload's four kernels for --seconds, one after another; "
        "run: every best and the calibration kernels in turns for --seconds in all",
    )
    ap.add_argument(
        "--workers", type=int, default=1, help="fresh measuring workers per window (each measures seconds/workers)"
    )
    ap.add_argument("--logs", nargs="*", default=None, help="operator/target folders under tuning_logs/")
    ap.add_argument("--out", type=Path, default=result_path("study_drift", "raw", "jsonl"))
    ap.add_argument("--analyse", type=Path, default=None)
    ap.add_argument("--trials", type=int, default=2000, help="simulated series per kernel and figure")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--proc", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.analyse:
        if args.protocol == "run":
            analyse_runs(args.analyse)
            return simulate(args.analyse, trials=args.trials)
        return analyse(args.analyse)
    if args.logs is None:
        from tvmtune_ci.core.config import load_config

        cfg = load_config(ROOT / "tvmtune.yaml")
        args.logs = [
            f"{p.parent.name}/{p.name}"
            for t in cfg.targets
            for p in sorted((ROOT / "tuning_logs").glob(f"*/{t.slug}"))
            if (p / "manifest.json").is_file()
        ]
    if args.child:
        return child_run(args) if args.protocol == "run" else child(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    gap = args.minutes * 60 / max(1, args.procs)
    t0 = time.time()
    for i in range(args.procs):
        wait = t0 + i * gap - time.time()
        if wait > 0:
            time.sleep(wait)
        print(f"# process {i + 1}/{args.procs} at {(time.time() - t0) / 60:.1f} min", flush=True)
        rc = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.study_drift",
                "--child",
                "--proc",
                str(i),
                "--seconds",
                str(args.seconds),
                "--workers",
                str(args.workers),
                "--out",
                str(args.out),
                "--protocol",
                args.protocol,
                "--logs",
                *args.logs,
            ]
        ).returncode
        if rc:
            return rc
    if args.protocol == "run":
        analyse_runs(args.out)
        return simulate(args.out, trials=args.trials)
    return analyse(args.out)


if __name__ == "__main__":
    raise SystemExit(main())
