"""Benchmark: reading a log's records for the cost model's prior, in the re-tune's own
process against the child process that did it before.

    python -m benchmarks.bench_prior_read --target zen4-2c             # ~2 min on 2 cores
    python -m benchmarks.bench_prior_read --target zen4-2c --rounds 7

Before a re-tune with history trains the cost model, it reads the old log's records as
configurations (`priors.py`). After a template edit only the template as committed
with the log can decode them: it is checked out from git and read in a child process
that imports TVM (`priors.old_records`). When the template did not change (a new shape
seeded from its siblings, a new target from another target's log) the re-tune now
reads them in its own process with the template as imported (`priors.records_here`,
chosen by `pipeline.history.tuned_with`). This time comes before a new shape's first
trial.

For each committed log set in `tuning_logs/*/TARGET/` whose template is the one it was
tuned with (every set on main, whose logs are fresh), in interleaved rounds (child,
here, child, ...), the seconds of each way to read every workload's records; the
workloads are resolved afresh in each round (the re-tune hands its own to the read,
which saves that too: not counted here). The anchor is the child process; printed per
set: the records read, the median seconds of each way over the rounds and here / child.
Both must read the same records (checked once per set).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import ROOT, wait_idle


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--target", required=True, help="a folder name under tuning_logs/OP/ (e.g. zen4-2c)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per set (5)")
    p.add_argument("--wait-idle", type=float, default=60.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tvmtune_ci.check.fingerprint import SourceCache
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.pipeline.history import tuned_with
    from tvmtune_ci.tune import priors, tvmsetup

    tvmsetup.load()
    config = load_config(ROOT / "tvmtune.yaml")
    cache = SourceCache(ROOT, inputs=config.declared_inputs(), config_file=config.path)
    waited = wait_idle(args.wait_idle)
    print(f"# bench_prior_read: target {args.target}, {args.rounds} interleaved rounds per set (waited {waited:.0f} s)")
    print("| set | records | child process: s (median) | here: s (median) | here / child |")
    print("|---|---|---|---|---|")
    ratios = []
    for mpath in sorted(ROOT.glob(f"tuning_logs/*/{args.target}/manifest.json")):
        manifest = read_manifest(mpath)
        path = ROOT / manifest.template_file
        template = import_template(path, ROOT)
        wanted = list(manifest.workloads)
        if not tuned_with(manifest, manifest.template_file, cache.fingerprint(path).dependencies, template.WORKLOADS):
            print(f"| {mpath.parent.relative_to(ROOT)} | skipped: its template changed since it was tuned | | | |")
            continue
        child_s, here_s = [], []
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="bench-prior-read-") as scratch:
                t0 = time.perf_counter()
                child = priors.old_records(ROOT, mpath, manifest, wanted, Path(scratch))
                child_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            here = priors.records_here(template, mpath, manifest, wanted)
            here_s.append(time.perf_counter() - t0)
            if r == 0 and here != child:
                raise SystemExit(f"{mpath}: the two reads differ")
        c, h = statistics.median(child_s), statistics.median(here_s)
        ratios.append(h / c)
        n = sum(len(v) for v in here.values())
        print(
            f"| {mpath.parent.relative_to(ROOT)} | {n} | {c:.2f} ({min(child_s):.2f}-{max(child_s):.2f}) | "
            f"{h:.2f} ({min(here_s):.2f}-{max(here_s):.2f}) | {h / c:.2f} |",
            flush=True,
        )
    if ratios:
        print(f"\nhere / child: median {statistics.median(ratios):.2f} over {len(ratios)} set(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
