"""Benchmark: tuning throughput through RPC devices, 1 server against 2.

    python -m benchmarks.bench_rpc                       # 16 trials, batch 8, 1 and 2 servers, 3 rounds
    python -m benchmarks.bench_rpc --trials 64 --rounds 2
    python -m benchmarks.bench_rpc --servers 1,2,3 --min-repeat-ms 50

Each run starts a real tracker and N real `python -m tvm.exec.rpc_server` processes
on 127.0.0.1 (tests/rpcfleet.py) and tunes the same small template (a 64x64x64
float32 matmul, the one tests/test_rpc_tuning.py uses) with the same seed, trials
and measurement settings through `tune_workload(TuneRequest(..., rpc=fleet.rpc(
devices=N)))`: builds in this process, each measurement one RPC session (request a
server, upload the .so, run the time evaluator), N sessions at a time.

Printed per run: trials per minute of the search (measured trials / search time) and
of the whole `tune_workload` (correctness check, baseline, search, verify), where the
search time went (generate candidates, compile + link, cost model, the rest: waiting
for the devices), the devices that measured, and the best latency.

Read the figures for what they are: every "device" here is a process on this
machine, so N servers share its cores (and share them with the builds and the
search); on a 2-core runner the second server adds at most one core's worth of
measuring and takes it from everything else. Real boards measure in parallel
without that contention. Kernels run on --threads threads each (TVM_NUM_THREADS,
inherited by the servers).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from benchmarks._common import wait_idle
from tests.small_mm import SMALL_MM  # the small matmul the RPC tests tune


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--servers", default="1,2", help="server counts to compare (1,2)")
    p.add_argument("--trials", type=int, default=16, help="measured trials per run (16)")
    p.add_argument("--batch", type=int, default=8, help="trials per search batch (8)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--sample-ms", type=float, default=5.0, help="least duration of one sample (5)")
    p.add_argument("--threads", type=int, default=1, help="threads each kernel runs on (1)")
    p.add_argument("--rounds", type=int, default=3, help="runs per server count, in alternating order (3)")
    p.add_argument(
        "--wait-idle",
        type=float,
        default=60.0,
        help="first wait up to this many seconds for the 1-minute load average to drop "
        "below 0.5 (other processes' load is noise) (60)",
    )
    return p.parse_args(argv)


def load_template(folder: Path) -> types.ModuleType:
    path = folder / "bench_rpc_mm.py"
    path.write_text(SMALL_MM, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("bench_rpc_mm", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_run(args: argparse.Namespace, template: types.ModuleType, servers: int, base: Path) -> Any:
    from tests.rpcfleet import start_fleet
    from tvmtune_ci.core.configschema import EarlyStop, MeasureOptions
    from tvmtune_ci.tune.hostcheck import host_target
    from tvmtune_ci.tune.tuner import TuneRequest, tune_workload

    target = host_target()
    # Adaptive sampling as configured by default, shorter samples; a noisy shared
    # runner is expected here, so no baseline is refused.
    measure = MeasureOptions(sample_ms=args.sample_ms, usable_precision=0.9, timeout_s=30)
    with start_fleet(base / "fleet", servers=servers) as fleet:
        t0 = time.perf_counter()
        out = tune_workload(
            TuneRequest(
                template=template,
                workload_name="s64",
                target=target,
                trials=args.trials,
                batch_size=args.batch,
                seed=args.seed,
                early_stop=EarlyStop(patience=0),
                measure=measure,
                work_dir=base / "work",
                rpc=fleet.rpc(devices=servers),
            )
        )
        wall = time.perf_counter() - t0
    return out, wall


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # inherited by the servers
    counts = [int(x) for x in args.servers.split(",") if x]
    base = Path(tempfile.mkdtemp(prefix="bench_rpc-"))
    template = load_template(base)
    waited = wait_idle(args.wait_idle)
    print(
        f"64x64x64 float32 matmul, {args.trials} trials, batch {args.batch}, seed {args.seed}, "
        f"samples >= {args.sample_ms:g} ms (adaptive), {args.threads} kernel thread(s); "
        f"{os.cpu_count()} cores shared by the tuner and every server; waited {waited:.0f} s, "
        f"1-minute load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rows: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    for r in range(args.rounds):
        for n in counts if r % 2 == 0 else counts[::-1]:
            out, wall = one_run(args, template, n, base / f"r{r}-n{n}")
            s = out.stats
            search = s["search_s"]
            busy = (
                s.get("search_generate_s", 0.0)
                + s.get("search_compile_s", 0.0)
                + s.get("search_export_s", 0.0)
                + s.get("search_cost_model_s", 0.0)
            )
            row = {
                "trials": float(out.trials.run),
                "valid": float(out.trials.valid),
                "wall_s": wall,
                "search_s": search,
                "per_min_search": 60.0 * s["search_trials"] / search if search else 0.0,
                "per_min_total": 60.0 * out.trials.run / wall,
                "generate_s": s.get("search_generate_s", 0.0),
                "compile_s": s.get("search_compile_s", 0.0) + s.get("search_export_s", 0.0),
                "cost_model_s": s.get("search_cost_model_s", 0.0),
                "devices_s": max(search - busy, 0.0),
                "eval_s": s.get("search_eval_s", 0.0),
                "devices_used": s["devices_used"],
                "retries": s["device_retries"],
                "best_us": out.best.latency_s * 1e6,
            }
            rows[n].append(row)
            print(
                f"  {n} server(s), round {r + 1}: {row['trials']:.0f} trials "
                f"({row['valid']:.0f} valid) on {row['devices_used']:.0f} device(s), "
                f"{row['retries']:.0f} retries; search {search:.1f} s = generate "
                f"{row['generate_s']:.1f} + compile {row['compile_s']:.1f} + cost model "
                f"{row['cost_model_s']:.1f} + devices {row['devices_s']:.1f} (time evaluator "
                f"{row['eval_s']:.1f} summed over sessions); whole run {wall:.1f} s; "
                f"best {row['best_us']:.1f} us",
                flush=True,
            )
    print()
    print("servers  trials/min (search)  trials/min (whole run)  devices wait s  best us")
    med: dict[int, dict[str, float]] = {}
    for n in counts:
        med[n] = {k: statistics.median(x[k] for x in rows[n]) for k in rows[n][0]}
        m = med[n]
        print(
            f"{n:>7}  {m['per_min_search']:>19.0f}  {m['per_min_total']:>22.0f}  "
            f"{m['devices_s']:>14.1f}  {m['best_us']:>7.1f}"
        )
    if 1 in med and len(med) > 1:
        for n in counts:
            if n != 1:
                ratio = med[n]["per_min_search"] / med[1]["per_min_search"]
                print(f"{n} servers vs 1: {ratio:.2f}x search trials per minute")
    print(
        "(all servers are processes on this machine and share its cores with each other and "
        "with the builds; real devices do not)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
