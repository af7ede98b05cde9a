"""Which headline figure, published with the band of its first runs, holds for the runs
that follow? Issue 20's reproduction target, asked of every run history we have.

    python -m benchmarks.study_headline                 # committed histories + bench raw
    python -m benchmarks.study_headline --publish-at 8 --later 5

No measuring: it reads the runs `remeasure --record` and `bench_drift.py` already made on
real runners (`tuning_logs/*/*/runs.jsonl`, and the histories in
`benchmarks/results/bench_drift/*_raw.jsonl` whose sets were not committed). For every
workload's series and every window of `--publish-at` runs followed by `--later` runs
(rolling over the series: each start is one trial), it publishes each candidate figure
as a README would (the median of the first runs, their band: the largest distance of
any from it, the runs the runner disturbed left out) and asks whether the median of
the later runs lies inside that band. Reported per runner: trials inside, and the
median band width (a narrower band is the point; inside by being wide is not).

Candidates (lower is faster; `runs.FIGURES`):
- `p25`: the absolute lower quartile of all the run's samples;
- `fast`: the absolute figure (what the README publishes before this study);
- `corrected`: the figure scaled by the compute calibration kernel's move in that run
  (its figure over its median in the published runs): the runner's own speed divided out;
- `chosen`: `corrected` where the published runs show the calibration tracking the
  kernel (the corrected band narrower than the absolute one), else `fast`;
- `steadier`: `corrected` where the calibration kernel's own band over the published runs
  is no wider than the kernel's absolute band, else `fast`.
`runwords.headline` publishes `corrected` (`runs.usual_speed_series`): the choice this study
made (docs/measurement.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from tvmtune_ci.core import runs as R

ROOT = Path(__file__).resolve().parents[1]


def histories(root: Path = ROOT, raw: bool = True) -> dict[str, list[R.Run]]:
    """runner/operator -> its history, oldest first: every committed set with runs, and
    each bench_drift raw file's last phase-1 history (sets measured in scratch clones)."""
    out: dict[str, list[R.Run]] = {}
    for path in sorted(root.glob("tuning_logs/*/*/runs.jsonl")):
        runs = R.parse_runs(path.read_bytes(), path)
        if len(runs) > 1:
            out[f"{path.parent.name}/{path.parent.parent.name}"] = runs
    for path in sorted((ROOT / "benchmarks/results/bench_drift").glob("*_raw.jsonl") if raw else ()):
        last: dict[str, list[R.Run]] = {}
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("phase") != 1:
                continue
            for res in rec["results"]:
                last[f"{res['target']}/{res['operator']}"] = [R.run_from_json(h) for h in res["history"]]
        for key, runs in last.items():
            if key not in out and len(runs) > 1:  # a committed history holds the same runs
                out[key] = runs
    return out


def window(runs: Sequence[R.Run], workload: str, figure: str) -> list[tuple[str, float]]:
    """The series of `figure` over these runs, the disturbed ones left out."""
    skip = R.disturbed(runs, workload)
    if figure in ("fast", "p25"):
        return [(a, v) for a, v in R.series(runs, workload, figure) if a not in skip]
    cal = {r.at: r.calibration["compute"].fast_s for r in runs if "compute" in r.calibration}
    pts = [(a, v) for a, v in R.series(runs, workload) if a not in skip and a in cal]
    return [(a, v / cal[a]) for a, v in pts]


def trial(runs: Sequence[R.Run], workload: str, publish_at: int, later: int) -> dict[str, tuple[bool, float]] | None:
    """One window: per candidate, (the later runs' median inside the band, band width)."""
    first, after = runs[:publish_at], runs[publish_at : publish_at + later]
    out: dict[str, tuple[bool, float]] = {}
    bands = {}
    for fig in ("p25", "fast", "corrected"):
        pub = window(first, workload, fig)
        # The later runs are judged as `remeasure` would: against the published median.
        nxt = window(list(first) + list(after), workload, fig)[len(pub) :]
        if len(pub) < 3 or not nxt:
            return None
        band = R.band_of(pub)
        assert band is not None
        med = statistics.median(v for _, v in nxt)
        out[fig] = (abs(med / band.median - 1) <= band.halfwidth, band.halfwidth)
        bands[fig] = band.halfwidth
    out["chosen"] = out["corrected"] if bands["corrected"] < bands["fast"] else out["fast"]
    cal = R.band_of(
        [
            (r.at, r.calibration["compute"].fast_s)
            for r in first
            if "compute" in r.calibration and r.at not in R.disturbed(first)
        ]
    )
    out["steadier"] = out["corrected"] if cal is not None and cal.halfwidth <= bands["fast"] else out["fast"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--publish-at", type=int, default=8, help="runs a README's band rests on")
    ap.add_argument("--later", type=int, default=5, help="later runs whose median must land inside")
    ap.add_argument(
        "--root",
        type=Path,
        default=None,
        help="only the histories of this clone's tuning_logs (e.g. bench_drift's, after "
        "fresh runs: --publish-at the runs its READMEs were published from)",
    )
    args = ap.parse_args()
    cands = ("p25", "fast", "corrected", "chosen", "steadier")
    print(
        f"# headline figures: published after {args.publish_at} runs, the median of the next "
        f"{args.later} inside that band? rolling windows over every history"
    )
    total = {c: [0, 0] for c in cands}
    first_total = {c: [0, 0] for c in cands}
    found = histories(args.root, raw=False) if args.root else histories()
    for key, runs in found.items():
        workloads = sorted({w for r in runs for w in r.workloads})
        for wl in workloads:
            res = []
            for s in range(0, len(runs) - args.publish_at - args.later + 1):
                t = trial(runs[s:], wl, args.publish_at, args.later)
                if t is not None:
                    res.append(t)
            if not res:
                continue
            cells = []
            for c in cands:
                inside = sum(t[c][0] for t in res)
                widths = statistics.median(t[c][1] for t in res)
                total[c][0] += inside
                total[c][1] += len(res)
                first_total[c][0] += res[0][c][0]
                first_total[c][1] += 1
                cells.append(
                    f"{c} {inside}/{len(res)} (first window {'in' if res[0][c][0] else 'OUT'}), "
                    f"band median ±{100 * widths:.1f}%"
                )
            print(f"{key} {wl} ({len(runs)} runs): " + "; ".join(cells))
    print()
    for c in cands:
        i, n = total[c]
        fi, fn = first_total[c]
        print(
            f"{c:10s}: inside in {i} of {n} windows ({100 * i / max(n, 1):.0f}%); "
            f"first window of each workload: {fi} of {fn}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
