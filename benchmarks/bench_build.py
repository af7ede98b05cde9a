"""Benchmark: a batch of kernels built on one thread against BUILD_THREADS threads.

    python -m benchmarks.bench_build --target zen3-2c            # ~2 min on 2 cores
    python -m benchmarks.bench_build --target zen4-2c --rounds 5

The builder (`builder.InProcessBuilder`) lowers, compiles (LLVM) and links each
candidate of a batch in this process. It did so one at a time, on one core while the
runner's cores waited: 14-28% of a search trial's seconds (bench_tuner, Zen 4). TVM's
lowering, LLVM and the linker release the GIL, and nothing is measured while a batch
builds, so a batch now builds on `BUILD_THREADS` threads (this process's CPUs).

For each operator of this repository and its first workload, the committed log in
`tuning_logs/OP/TARGET/` gives the old configurations a replay takes (mapped into the
template as it is now, as a re-tune does). In interleaved rounds (the starting way
alternating), the whole set is built as one batch on one thread, then on
BUILD_THREADS. The anchor is the one thread; printed per workload: the median seconds
of each way over the rounds and threads / one. Every library the threads built in the
first round is run against reference() (`check_correct(library=)`): a wrong one fails
the benchmark.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from benchmarks._common import replay_set_args, replay_sets, wait_idle

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    args = replay_set_args(__doc__ or "", argv, "workload")

    from tvmtune_ci.tune import builder as builder_mod
    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.builder import make_builder, remove_artifact, schedule_config
    from tvmtune_ci.tune.numerics import check_correct

    sets = list(replay_sets(ROOT, args.target))
    threads = builder_mod.BUILD_THREADS
    ms = tvmsetup.ms()
    builders = {1: make_builder(threads=1), threads: make_builder(threads=threads)}
    waited = wait_idle(args.wait_idle)
    print(
        f"# bench_build: tuning_logs/*/{args.target}; {args.rounds} interleaved rounds per workload; "
        f"BUILD_THREADS {threads}; waited {waited:.0f} s for idle",
        flush=True,
    )
    print(f"| workload | kernels | 1 thread: s per batch | {threads} threads: s per batch | threads / one |")
    print("|---|---|---|---|---|")
    totals = {1: 0.0, threads: 0.0}

    def build(inputs: list, n: int) -> tuple[float, list]:  # noqa: ANN001 - TVM objects
        t0 = time.perf_counter()
        got = builders[n].build(inputs)
        return time.perf_counter() - t0, got

    try:
        for manifest, template, workload, target, configs in sets:
            tgt = tvmsetup.make_target(target)
            inputs = [
                ms.builder.BuilderInput(schedule_config(template, workload, kv, target).mod, tgt) for kv in configs
            ]
            secs: dict[int, list[float]] = {1: [], threads: []}
            for r in range(args.rounds):
                for n in (1, threads) if r % 2 == 0 else (threads, 1):
                    s, got = build(inputs, n)
                    secs[n].append(s)
                    for kv, res in zip(configs, got, strict=True):
                        if res.error_msg:
                            raise SystemExit(f"{manifest.operator}/{workload}: a build failed: {res.error_msg}")
                        if r == 0 and n == threads:
                            check_correct(template, workload, target, kv, library=res.artifact_path)
                        remove_artifact(res.artifact_path)
            one, many = statistics.median(secs[1]), statistics.median(secs[threads])
            totals[1] += one
            totals[threads] += many
            print(
                f"| {manifest.operator}/{workload} | {len(configs)} | {one:.2f} | {many:.2f} | {many / one:.2f} |",
                flush=True,
            )
    finally:
        for b in builders.values():
            b.close()
    print(
        f"\nall batches: 1 thread {totals[1]:.1f} s, {threads} threads {totals[threads]:.1f} s "
        f"(threads / one {totals[threads] / totals[1]:.2f}; medians over the rounds); every library "
        "the threads built checked against reference()"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
