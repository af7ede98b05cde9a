"""Benchmark: the history replay's numerics check, on a compile of its own against the library it measures.

    python -m benchmarks.bench_replay --target zen3-2c            # ~3 min on 2 cores
    python -m benchmarks.bench_replay --target zen4-2c --rounds 5

Before a re-tune with history measures the old log's configurations on the edited
template (`Search.replay`), each is checked against reference(). Until c3a1cbe the
check compiled the configuration itself (`tvm.compile`, then the executable's JIT);
the builder then built it again for the runner. Now the check runs the library the
builder made, which the runner measures.

For each operator of this repository and its first workload, the committed log in
`tuning_logs/OP/TARGET/` (any committed target folder whose CPU this machine can run:
its manifest names the target) gives the old configurations a replay takes
(`history.old_configs`). Per configuration, in
interleaved rounds (old way, new way, old way, ...), the seconds of:

- old: `check_correct(knobs)` (its own compile) + the builder's build;
- new: the builder's build + `check_correct(knobs, library=...)`.

Nothing here times a kernel: both ways run each kernel once, on the same inputs. The
anchor is the old way; printed per workload: the median seconds of each per
configuration over the rounds, and new / old for the replay's checks and builds.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from benchmarks._common import replay_set_args, replay_sets, wait_idle

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    args = replay_set_args(__doc__ or "", argv, "configuration")

    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.builder import make_builder, remove_artifact, schedule_config
    from tvmtune_ci.tune.numerics import check_correct

    sets = replay_sets(ROOT, args.target)  # as a re-tune maps them into the template as it is now
    ms = tvmsetup.ms()
    builder = make_builder()
    waited = wait_idle(args.wait_idle)
    print(
        f"# bench_replay: tuning_logs/*/{args.target}; {args.rounds} interleaved rounds per "
        f"configuration; waited {waited:.0f} s for idle",
        flush=True,
    )
    print(
        "| workload | configs | old: check (own compile) + build, s | new: build + check (its library), s | new / old |"
    )
    print("|---|---|---|---|---|")
    totals = {"old": 0.0, "new": 0.0}
    try:
        for manifest, template, workload, target, configs in sets:
            tgt = tvmsetup.make_target(target)
            old_s: list[float] = []
            new_s: list[float] = []
            for kv in configs:
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    check_correct(template, workload, target, kv)
                    sch = schedule_config(template, workload, kv, target)
                    (res,) = builder.build([ms.builder.BuilderInput(sch.mod, tgt)])
                    old_s.append(time.perf_counter() - t0)
                    remove_artifact(res.artifact_path)
                    t0 = time.perf_counter()
                    sch = schedule_config(template, workload, kv, target)
                    (res,) = builder.build([ms.builder.BuilderInput(sch.mod, tgt)])
                    check_correct(template, workload, target, kv, library=res.artifact_path)
                    new_s.append(time.perf_counter() - t0)
                    remove_artifact(res.artifact_path)
            n = len(configs)
            per_old = statistics.median(old_s)
            per_new = statistics.median(new_s)
            totals["old"] += per_old * n
            totals["new"] += per_new * n
            print(
                f"| {manifest.operator}/{workload} | {n} | {per_old:.3f} | {per_new:.3f} | {per_new / per_old:.2f} |",
                flush=True,
            )
    finally:
        builder.close()
    print(
        f"\nall replayed configurations: old {totals['old']:.1f} s, new {totals['new']:.1f} s "
        f"(new / old {totals['new'] / totals['old']:.2f}; the medians per configuration times the count)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
