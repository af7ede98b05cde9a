"""This runner's fp32 peak, measured: FMA throughput on `num-cores` threads.

The figure every "fraction of peak" in this repository divides by (issue 66): a
kernel's GFLOPS over this, not over a clock read from a spec sheet, since a VM's clock
and its vector units' issue rate are what the runner gives, not what the CPU's model
name promises (a Zen 4 issues a 512-bit FMA as two 256-bit halves; a Zen 5 does not).

The kernel is the product's (tvmtune_ci/model/peak.py: FMA chains in registers, built
by the same LLVM for the same target as the templates); `profile` measures it in its
timing process too. The figure is the fastest quartile of `--samples` timings, each at
least 200 ms, with its spread, and the run's load (a peak measured beside another
process is that process's share lower).

    python -m benchmarks.bench_peak --target zen4-2c [--samples 15]

Prints GFLOPS, FLOP per cycle per core at the clock /proc/cpuinfo reports (a reading,
not a divisor), and writes results/bench_peak/<date>_<machine>.txt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks._common import result_path
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.targetinfo import target_facts
from tvmtune_ci.tune import tvmsetup
from tvmtune_ci.tune.hostcheck import host_description, host_target


def clock_mhz() -> float | None:
    """The mean 'cpu MHz' /proc/cpuinfo reports (what the VM says, not a divisor)."""
    try:
        vals = [
            float(line.split(":")[1])
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("cpu MHz")
        ]
    except OSError:
        return None
    return statistics.fmean(vals) if vals else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--target", required=True, help="a target of tvmtune.yaml (its num-cores and vectors), or host: this CPU"
    )
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--out", type=Path, default=None, help="the results file (default: results/bench_peak/...)")
    args = p.parse_args(argv)

    if args.target == "host":  # this machine's own CPU, on all its cores
        want = host_target(os.cpu_count())
    else:
        cfg = load_config(None)
        tc = next((t for t in cfg.targets if t.name == args.target), None)
        if tc is None:
            names = ", ".join(t.name for t in cfg.targets)
            sys.exit(f"no target {args.target!r} in {cfg.path}; targets: {names}, or host")
        want = dict(tc.target)
    threads = int(want.get("num-cores") or os.cpu_count() or 1)
    os.environ["TVM_NUM_THREADS"] = str(threads)  # before TVM starts its pool
    import tvm  # after TVM_NUM_THREADS: the pool is sized when TVM starts it

    from tvmtune_ci.model.peak import measure_peak  # TVM at import: after the pool's size

    lanes = target_facts(want).lanes("float32")
    tvm_target = tvmsetup.make_target(want)
    t0 = time.perf_counter()
    peak = measure_peak(tvm_target, threads, lanes, samples=args.samples)
    wall = time.perf_counter() - t0
    if tvm.runtime.num_threads() != threads:
        sys.exit(f"TVM's pool has {tvm.runtime.num_threads()} threads, not {threads}: set TVM_NUM_THREADS")
    gf, best, spread = list(peak.samples), peak.gflops, peak.spread
    mhz = clock_mhz()
    host = host_description()
    lines = [
        f"# bench_peak {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {host.get('cpu', '?')}, "
        f"target {args.target} ({want}), {threads} thread(s), {lanes} fp32 lanes",
        f"# command: python -m benchmarks.bench_peak --target {args.target} --samples {args.samples}",
        f"# load average before: {os.getloadavg()[0]:.2f}; {len(gf)} samples in {wall:.1f} s",
        f"samples GFLOPS: {', '.join(f'{g:.1f}' for g in sorted(gf))}",
        f"peak fp32 (fastest quartile of {len(gf)} samples): {best:.1f} GFLOPS on {threads} thread(s), "
        f"samples spread {spread * 100:.1f}% (max-min over median)",
    ]
    if mhz:
        lines.append(
            f"at the {mhz:.0f} MHz /proc/cpuinfo reports: {best * 1e3 / mhz / threads:.1f} FLOP/cycle/core "
            "(a reading; the clock a VM reports need not be the one it runs at)"
        )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    path = args.out or result_path("bench_peak")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
