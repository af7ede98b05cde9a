"""Benchmark: the finals with the worker's arguments filled once per signature, against
filled before every visit, side by side.

    python benchmarks/bench_finals.py                    # every CPU workload, ~6 min on 2 cores
    python benchmarks/bench_finals.py --ops matmul,softmax --rounds 3

The anchor, `fresh`, is what the measuring worker did before (and what stock
MetaSchedule's `LocalRunner` does for every candidate): fill the kernel's arguments
with random data at every runner call. `reused` is today's worker (`local._worker_args`):
filled once per (device, shapes, dtypes) and reused. The finals visit each finalist
many times (3 samples a visit), so the fill was paid once per visit.

Per workload of this repository's CPU templates, on this CPU (its LLVM name, 2 threads):
the finalists of a re-tune (the committed log's top 5 of `--from`, those that schedule
for this CPU, and the default), run through `measure.finals` with tvmtune.yaml's
measurement, once per arm and round, the arms alternating which goes first. Each arm has
its own runner (one worker each, both started before the first round); the `fresh` one's
worker drops its kept arguments before every visit (that round trip untimed). Each runner
call is timed: what a visit costs beyond its samples is its wall time less the time
evaluator's (the fill, the load, the round trip). Printed per workload: the finals'
seconds, their samples, samples per second and the winner's precision, per arm, the
median over rounds; and the ratio reused / fresh of the seconds and of samples per second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import wait_idle  # benchmarks/ is the script's folder

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _drop_kept_args() -> int:
    """Runs in a worker: forget its kept arguments (the `fresh` arm's visits)."""
    from tvmtune_ci.tune.runners import local

    n = len(local._ARGS)
    local._ARGS.clear()
    return n


def timed_visits(runner: Any, fresh: bool) -> list[float]:
    """Time every runner call of `runner` (the list it returns grows by one wall time per
    call); with `fresh`, its worker drops its kept arguments before each call (that round
    trip is not timed), so every call fills them as before."""
    from tvmtune_ci.tune.runners.local import wait_or_kill

    inst = runner._inst  # the Python object TVM's Runner.run calls back into
    run = inst.run
    walls: list[float] = []

    def run_timed(inputs: list[Any]) -> list[Any]:
        out = []
        for inp in inputs:
            inst._started()
            if fresh:
                wait_or_kill(inst.pool, inst.pool.submit(_drop_kept_args), 60.0)
            t0 = time.perf_counter()
            out.extend(run([inp]))
            walls.append(time.perf_counter() - t0)
        return out

    inst.run = run_timed
    return walls


def finalists_of(from_target: str, op: str, target: dict[str, Any]) -> list[tuple[str, Any, list[Any]]]:
    """(workload, template, [Finalist]) for each workload of `op`'s log of `from_target`."""
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.builder import schedule_config
    from tvmtune_ci.tune.measure import Finalist

    cfg = load_config(ROOT / "tvmtune.yaml")
    path = ROOT / "tuning_logs" / op / from_target / "manifest.json"
    if not path.exists():
        return []
    m = read_manifest(path)
    tpl = import_template(cfg.root / m.template_file, cfg.root)
    out = []
    for w, r in sorted(m.results.items()):
        fins = [Finalist("default", None, "default")]
        for i, t in enumerate(r.top[:5]):
            try:
                schedule_config(tpl, w, t.knobs, target)
            except Exception:  # noqa: BLE001 - another CPU's choice this one refuses
                continue
            fins.append(Finalist("search", dict(t.knobs), f"top{i}"))
        out.append((w, tpl, fins))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="conv2d,dense,matmul,softmax")
    p.add_argument("--from", dest="from_target", default="zen4-avx2-2c",
                   help="whose committed top 5 are the finalists (zen4-avx2-2c: AVX2 choices, "
                   "which every x86-64 runner of this repo schedules)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--wait-idle", type=float, default=120.0)
    args = p.parse_args()
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.stats import fmt_latency
    from tvmtune_ci.tune.builder import make_builder
    from tvmtune_ci.tune.hostcheck import host_target
    from tvmtune_ci.tune.measure import finals
    from tvmtune_ci.tune.runners import make_runner

    target = host_target(2)
    measure = load_config(ROOT / "tvmtune.yaml").measure
    waited = wait_idle(args.wait_idle)
    print(f"# bench_finals ({time.strftime('%Y-%m-%d %H:%M')} UTC, waited {waited:.0f} s for idle; "
          f"load {os.getloadavg()[0]:.2f}); target {json.dumps(target)}; finalists: the top 5 of "
          f"{args.from_target}'s logs + the default; tvmtune.yaml's measurement "
          f"(sample_ms {measure.sample_ms:g}, precision {measure.precision:.0%}, "
          f"time_cap_s {measure.time_cap_s:g} per finalist); {args.rounds} round(s), arms alternating\n",
          flush=True)
    runners = {"fresh": make_runner(measure), "reused": make_runner(measure)}
    walls = {arm: timed_visits(r, arm == "fresh") for arm, r in runners.items()}
    builder = make_builder()
    rows = []
    try:
        for op in args.ops.split(","):
            for w, tpl, fins in finalists_of(args.from_target, op, target):
                got: dict[str, list[tuple[float, int, float, float]]] = {"fresh": [], "reused": []}
                for rnd in range(args.rounds):
                    order = ["fresh", "reused"] if rnd % 2 == 0 else ["reused", "fresh"]
                    for arm in order:
                        inst = runners[arm]._inst
                        k, kw = len(inst.timings), len(walls[arm])
                        t0 = time.perf_counter()
                        res = finals(tpl, w, target, fins, measure, runner=runners[arm], builder=builder)
                        secs = time.perf_counter() - t0
                        visits = inst.timings[k:]
                        # What a visit costs beyond its samples (eval_s: the time
                        # evaluator's call): the fill, the load, the round trip.
                        over = (sum(walls[arm][kw:]) - sum(v.eval_s for v in visits)) / max(1, len(visits))
                        ok = [r for r in res if r.estimate is not None]
                        n = sum(len(r.samples) for r in ok)
                        best = min(ok, key=lambda r: r.estimate.value)
                        got[arm].append((secs, n, best.estimate.rel_halfwidth, over))
                        print(f"  {op}/{w} round {rnd} {arm}: {secs:.1f} s, {len(visits)} visits, "
                              f"{over * 1e3:.1f} ms each beyond its samples, {n} samples "
                              f"({n / secs:.0f}/s), winner {fmt_latency(best.estimate.value, best.estimate.rel_halfwidth)}"
                              f" [{best.finalist.key}], stopped: "
                              + ", ".join(f"{r.finalist.key} {r.stopped}" for r in ok), flush=True)
                med = {a: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v),
                           statistics.median(x[1] / x[0] for x in v), statistics.median(x[2] for x in v),
                           statistics.median(x[3] for x in v))
                       for a, v in got.items()}
                rows.append((f"{op}/{w}", len(fins), med))
    finally:
        builder.close()
        for r in runners.values():
            r.close()
    print("\n| workload | finalists | a visit beyond its samples, ms: fresh / reused | fresh: s, samples, "
          "samples/s, winner ± | reused: s, samples, samples/s, winner ± | reused / fresh: seconds |")
    print("|---|---|---|---|---|---|")
    for name, k, med in rows:
        f, r = med["fresh"], med["reused"]
        print(f"| {name} | {k} | {f[4] * 1e3:.1f} / {r[4] * 1e3:.1f} | {f[0]:.1f}, {f[1]:.0f}, {f[2]:.0f}, "
              f"±{f[3]:.1%} | {r[0]:.1f}, {r[1]:.0f}, {r[2]:.0f}, ±{r[3]:.1%} | {r[0] / f[0]:.2f} |")
    secs = [m["reused"][0] / m["fresh"][0] for _, _, m in rows]
    over = [m["fresh"][4] - m["reused"][4] for _, _, m in rows]
    print(f"\nover {len(rows)} workloads: a visit costs {statistics.median(over) * 1e3:.1f} ms less beyond "
          f"its samples (median; {min(over) * 1e3:.1f}-{max(over) * 1e3:.1f}); the finals' seconds, reused / "
          f"fresh, median {statistics.median(secs):.2f} ({min(secs):.2f}-{max(secs):.2f}): they end on "
          "convergence or the time cap, so noise moves them as much as the visits do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
