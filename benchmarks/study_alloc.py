"""Is a kernel's speed a property of where its arguments landed in memory? The data
behind a configuration that measures 1.11-1.14 ms in one run and 1.30-1.42 ms in the
next (softmax attn_512, bench_warmstart --cross, Zen 4).

    python -m benchmarks.study_alloc --entry softmax/zen4-2c --workload attn_512
    python -m benchmarks.study_alloc --entry softmax/zen4-2c --workload attn_512 --sets 8 --rounds 10

In one process, with the thread count a tuning run uses, the committed best of one
entry is built once, and `--sets` argument sets are allocated (random data, as the
runner fills them) and kept alive. Then, `--rounds` times, each set is timed in turn
(`time_evaluator`, `--repeat` repeats of at least `--min-ms` each; the median kept).
The runner allocates one fresh set per measurement, so if placement decides the
speed, every measurement draws a placement.

Each round is divided by its own median over the sets, which takes out a speed mode
of the whole runner (all sets move together within a round). What is left:
- between sets: each set's median over the rounds, slowest / fastest;
- within a set: its slowest / fastest round, the median over the sets.
Between sets well beyond within a set: the set (the placement) decides the speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spreads(table: list[list[float]]) -> tuple[list[float], float, float]:
    """`table[round][set]` in seconds: (each set's median over the rounds of its
    round-normalised figure, slowest / fastest of those, the median over the sets of
    each set's slowest / fastest normalised round)."""
    norm = [[v / statistics.median(row) for v in row] for row in table]
    sets = len(table[0])
    per_set = [statistics.median(r[i] for r in norm) for i in range(sets)]
    within = statistics.median(max(r[i] for r in norm) / min(r[i] for r in norm) for i in range(sets))
    return per_set, max(per_set) / min(per_set), within


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entry", default="softmax/zen4-2c", help="operator/target folder under tuning_logs/")
    ap.add_argument("--workload", default=None, help="default: the entry's first workload")
    ap.add_argument("--sets", type=int, default=8, help="argument sets allocated and kept alive")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-ms", type=int, default=100)
    args = ap.parse_args()

    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.runners.threads import measure_threads

    cfg = load_config(ROOT / "tvmtune.yaml")
    m = read_manifest(ROOT / "tuning_logs" / args.entry / "manifest.json")
    workload = args.workload or sorted(m.results)[0]
    best = m.results[workload].best
    (tcfg,) = [t for t in cfg.targets if t.name == m.target_name]
    threads = measure_threads(tcfg)
    if threads:
        os.environ["TVM_NUM_THREADS"] = str(threads)  # before TVM starts its pool

    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.builder import build_config
    from tvmtune_ci.tune.workload import resolve

    tvm = tvmsetup.load()
    ms = tvmsetup.ms()
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    tpl = import_template(ROOT / m.template_file, ROOT)
    wl = resolve(tpl, workload, m.target)
    lib = build_config(tpl, wl, m.target, best.knobs)
    dev = tvm.runtime.device("cpu", 0)
    # The workload's signature: a schedule changes the loops, not the arguments.
    info = ms.arg_info.ArgInfo.from_entry_func(wl.mod, remove_preproc=True)
    sets = default_alloc_argument(dev, [a.as_json() for a in info], args.sets)
    rt = lib.mod  # the runtime module, as the runner loads it
    f = rt.time_evaluator(rt.entry_name or "main", dev, number=1, repeat=args.repeat, min_repeat_ms=args.min_ms)
    print(
        f"# study_alloc: {args.entry}/{workload}, {threads} threads, {args.sets} argument sets x "
        f"{args.rounds} rounds, {args.repeat} repeats of >= {args.min_ms} ms; "
        f"README: {best.latency_s * 1e3:.4g} ms ± {100 * (best.rel_halfwidth or 0):.1f}% (tuned {m.tuned_on})"
    )
    table: list[list[float]] = []
    t0 = time.perf_counter()
    for r in range(args.rounds):
        # Every other round in reverse: a set is not always timed right after the same one.
        order = range(args.sets) if r % 2 == 0 else range(args.sets - 1, -1, -1)
        row = [0.0] * args.sets
        for i in order:
            row[i] = statistics.median(f(*sets[i]).results)
        table.append(row)
        print(f"round {r} ({time.perf_counter() - t0:.0f} s): " + " ".join(f"{v * 1e3:.3f}" for v in row), flush=True)
    per_set, between, within = spreads(table)
    raw = [statistics.median(row[i] for row in table) for i in range(args.sets)]
    print("\n| set | median over rounds (ms) | / the round's median, median over rounds |")
    print("|---|---|---|")
    for i in range(args.sets):
        print(f"| {i} | {raw[i] * 1e3:.4g} | {per_set[i]:.3f} |")
    rounds = [statistics.median(row) for row in table]
    print(
        f"\nbetween sets (slowest / fastest set, each round divided by its median): {between:.3f}\n"
        f"within a set (its slowest / fastest round, the median over the sets): {within:.3f}\n"
        f"between rounds (slowest / fastest round median: the runner's modes): {max(rounds) / min(rounds):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
