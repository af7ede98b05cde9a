"""Does this runner switch between speed modes? The data behind "a latency does not
carry across processes" on a shared VM.

    python -m benchmarks.study_modes                        # conv2d best on the first target, 100 s
    python -m benchmarks.study_modes --entry matmul/zen4-2c --workload m1024 --seconds 60

In one process, with the thread count a tuning run uses, the committed best of one
entry is measured the way the finals measure (`measure.finals`, one finalist, 3-sample
visits) over and over for `--seconds`. Each visit's lower quartile is printed with its
time, then the visits are grouped into modes (a new mode starts where a visit differs
from the running mode's median by more than `--gap`, default 8%), and each mode's
level, share of the time and longest stretch are listed, with the CPU time the
hypervisor reports as stolen (/proc/stat) over the run.

A runner with one mode reproduces a published latency within its precision; a runner
with several, lasting seconds to minutes, reproduces rankings and side-by-side ratios
(interleaved) but an absolute latency only when the later process happens to run in
the same mode. `tvmtune-ci remeasure` reports both for that reason.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def steal_jiffies() -> int:
    """The 'steal' column of /proc/stat's cpu line (0 where there is none)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        return int(fields[8]) if len(fields) > 8 else 0
    except OSError:
        return 0


def modes(trace: list[tuple[float, float]], gap: float) -> list[list[tuple[float, float]]]:
    """Consecutive visits grouped while each stays within `gap` of the group's median."""
    out: list[list[tuple[float, float]]] = []
    for t, v in trace:
        if out and abs(v / statistics.median(x for _, x in out[-1]) - 1) <= gap:
            out[-1].append((t, v))
        else:
            out.append([(t, v)])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entry", default=None, help="operator/target (default: conv2d on the first configured target)")
    ap.add_argument("--workload", default=None, help="default: the entry's first workload")
    ap.add_argument("--seconds", type=float, default=100.0)
    ap.add_argument("--gap", type=float, default=0.08)
    args = ap.parse_args()

    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.builder import make_builder
    from tvmtune_ci.tune.measure import Finalist, finals
    from tvmtune_ci.tune.runners import make_runner
    from tvmtune_ci.tune.runners.threads import measure_threads, tvm_threads

    cfg = load_config(ROOT / "tvmtune.yaml")
    entry = args.entry or f"conv2d/{cfg.targets[0].slug}"
    m = read_manifest(ROOT / "tuning_logs" / entry / "manifest.json")
    workload = args.workload or sorted(m.results)[0]
    best = m.results[workload].best
    tpl = import_template(ROOT / m.template_file, ROOT)
    (tcfg,) = [t for t in cfg.targets if t.name == m.target_name]
    threads = measure_threads(tcfg)
    print(
        f"# study_modes: {entry}/{workload}, {threads} threads, {args.seconds:g} s; "
        f"README: {best.latency_s * 1e3:.4g} ms ± {100 * (best.rel_halfwidth or 0):.1f}% "
        f"(tuned {m.tuned_on})"
    )
    trace: list[tuple[float, float]] = []
    with tvm_threads(threads):
        runner, builder = make_runner(cfg.measure), make_builder()
        try:
            steal0, t0 = steal_jiffies(), time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                (res,) = finals(
                    tpl,
                    workload,
                    m.target,
                    [Finalist("search", best.knobs, "b")],
                    cfg.measure,
                    runner=runner,
                    builder=builder,
                )
                if res.estimate is not None:
                    trace.append((time.perf_counter() - t0, res.estimate.value))
            steal = steal_jiffies() - steal0
        finally:
            runner.close()
            builder.close()
    print("visits (s: ms): " + " ".join(f"{t:.0f}:{v * 1e3:.3f}" for t, v in trace))
    groups = modes(trace, args.gap)
    levels: list[dict[str, float]] = []
    for g in groups:
        level = statistics.median(v for _, v in g)
        span = g[-1][0] - g[0][0] + (trace[1][0] - trace[0][0] if len(trace) > 1 else 0)
        for lv in levels:
            if abs(level / lv["level"] - 1) <= args.gap:
                lv["time"] += span
                lv["longest"] = max(lv["longest"], span)
                lv["runs"] += 1
                break
        else:
            levels.append({"level": level, "time": span, "longest": span, "runs": 1})
    total = sum(lv["time"] for lv in levels) or 1.0
    fastest = min(lv["level"] for lv in levels)
    print(f"\n{len(levels)} mode(s) over {len(groups)} stretch(es); stolen CPU time (/proc/stat) {steal / 100:.2f} s")
    print("| mode (median of visits) | x fastest | share of the time | stretches | longest |")
    print("|---|---|---|---|---|")
    for lv in sorted(levels, key=lambda x: x["level"]):
        print(
            f"| {lv['level'] * 1e3:.4g} ms | {lv['level'] / fastest:.2f} | "
            f"{100 * lv['time'] / total:.0f}% | {lv['runs']:.0f} | {lv['longest']:.0f} s |"
        )
    print(f"README / fastest mode: {best.latency_s / fastest:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
