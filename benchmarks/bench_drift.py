"""Benchmark: does `remeasure` cry wolf, does it find a real slowdown, and do the README's
figures hold in later fresh processes? On this machine, with real kernels.

    python benchmarks/bench_drift.py matmul --target xeon-emr-2c --runs 20 --minutes 60   # quiet: nothing changed
    python benchmarks/bench_drift.py matmul --target xeon-emr-2c --detect 4 --source /tmp/bench-drift-.../repo

Phase 1 (`--runs`): a clone of this repository (its committed logs of `--target`, which
must be this machine's), then `--runs` fresh processes of `tvmtune-ci remeasure --target T
--record`, started at even intervals over `--minutes`. Nothing changes in between, so
every "drift" verdict is a false alarm. Afterwards, per workload: each run's verdict;
the band the README states after run `--publish-at` and whether the median of the next
5 runs, at least 30 min apart in all, lies inside it; and the band the absolute lower
quartile would have had over the same runs.

Phase 2 (`--detect N`): from the clone phase 1 left (`--source`), N rounds. Each takes a
fresh copy, swaps every workload's committed best for the configuration of that log
whose recorded latency is closest to `--slowdown` x the best's (a real, slower kernel,
re-measured by every run that follows; its hashes re-recorded, so `check` still vouches
for the set), and runs `remeasure --record` 3 times: a workload's trial finds the drift
when a verdict says so within those 3 runs. Each kernel is measured on its own visits,
so one round is one trial per workload.

A run of one set lasts `measure.history_s` (120 s here), so a run of every set of a
target takes minutes; the operators named on the command line narrow both phases.

Raw output: every run's JSON (`--out`), the summary printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cli(repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    r = subprocess.run([sys.executable, "-m", "tvmtune_ci", *args, "--format", "json"], cwd=repo,
                       capture_output=True, text=True)
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"tvmtune-ci {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}") from None


def clone(dst: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dst)], check=True)
    return dst


def phase1(args: argparse.Namespace) -> Path:
    repo = clone(Path(tempfile.mkdtemp(prefix="bench-drift-")) / "repo")
    print(f"# phase 1: {args.runs} runs of `remeasure {' '.join(args.operators)} --target {args.target} --record` over "
          f"{args.minutes:g} min in {repo}", flush=True)
    gap = args.minutes * 60 / args.runs
    t0 = time.time()
    with open(args.out, "a", encoding="utf-8") as out:
        for i in range(args.runs):
            wait = t0 + i * gap - time.time()
            if wait > 0:
                time.sleep(wait)
            code, data = cli(repo, "remeasure", *args.operators, "--target", args.target, "--record")
            out.write(json.dumps({"phase": 1, "run": i + 1, "exit": code, "at": time.time(), **data}) + "\n")
            out.flush()
            states = [v["state"] for r in data["results"] for v in r["verdicts"]]
            print(f"run {i + 1} at {(time.time() - t0) / 60:.1f} min: exit {code}, "
                  f"{states.count('drift')} drift, {states.count('stable')} stable, "
                  f"{states.count('inconclusive')} inconclusive", flush=True)
    return repo


def analyse1(path: Path, publish_at: int) -> None:
    from tvmtune_ci import runs as R

    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    recs = [r for r in recs if r["phase"] == 1]
    wrong = [(r["run"], f"{e['operator']}/{v['workload']}") for r in recs for e in r["results"]
             for v in e["verdicts"] if v["state"] == "drift"]
    n_verdicts = sum(len(e["verdicts"]) for r in recs for e in r["results"])
    print(f"\n## nothing changed: {len(recs)} runs over {(recs[-1]['at'] - recs[0]['at']) / 60:.0f} min, "
          f"{n_verdicts} verdicts, {len(wrong)} false alarm(s){': ' + str(wrong) if wrong else ''}; "
          f"runs with any drift: {sum(r['exit'] != 0 for r in recs)} of {len(recs)} (the verdicts "
          "the runs printed, with the code they ran)\n")
    # The verdicts are a function of the recorded history: replayed here with this
    # checkout's rule, run by run, on the last run's history.
    from tvmtune_ci.remeasure import judge_history

    for e in recs[-1]["results"]:
        history = [R.run_from_json(h) for h in e["history"]]
        states: dict[str, list[str]] = {}
        for k in range(1, len(history) + 1):
            for w in sorted(history[0].workloads):
                states.setdefault(w, []).append(judge_history(history[:k], w).state)
        for w, st in states.items():
            print(f"- {e['operator']}/{w}, verdicts replayed with this checkout's rule after each of "
                  f"the {len(st)} runs (the re-tune's first): {st.count('drift')} drift, "
                  f"{st.count('stable')} stable, {st.count('inconclusive')} inconclusive; left out "
                  f"as disturbed: {len(R.disturbed(history))}")
    print()
    # The last run's history holds every run (the re-tune's first).
    last = recs[-1]
    print(f"| workload | runs | band of `{R.FIGURE}` after run {publish_at} (README) | median of the "
          "5 later runs, spread over the rest, inside it? | band of the absolute p25 over the same runs | "
          f"band of `{R.FIGURE}` over all runs | of the absolute p25 |")
    print("|---|---|---|---|---|---|---|")
    inside = total = 0
    for e in last["results"]:
        history = [R.run_from_json(h) for h in e["history"]]
        for w in sorted(history[0].workloads):
            fig = R.steady_series(history, w)
            lat = R.steady_series(history, w, "p25")
            k = publish_at
            band = R.band_of(fig[:k])
            # 5 later runs spread evenly over the rest of the series (>= 30 min apart in all).
            rest = len(fig) - k
            later = [fig[k + round(i * (rest - 1) / 4)][1] for i in range(5)] if rest >= 5 else []
            ok = "-"
            if band is not None and len(later) == 5:
                med = statistics.median(later)
                total += 1
                good = abs(med / band.median - 1) <= band.halfwidth
                inside += good
                ok = f"{'yes' if good else 'NO'} ({med / band.median:.3f}x)"
            lb = R.band_of(lat[:k])
            fa, la = R.band_of(fig), R.band_of(lat)
            print(f"| {e['operator']}/{w} | {len(fig)} | ±{100 * band.halfwidth:.1f}% | {ok} | "
                  f"±{100 * lb.halfwidth:.1f}% | ±{100 * fa.halfwidth:.1f}% | ±{100 * la.halfwidth:.1f}% |")
    print(f"\nthe README's headline reproduced (median of 5 later runs, spread over the rest, inside its band) in "
          f"{inside} of {total} workloads")


def phase2(args: argparse.Namespace) -> None:
    from tvmtune_ci.config import load_config
    from tvmtune_ci.manifest import read_manifest

    base = Path(args.source)
    cfg = load_config(base / "tvmtune.yaml")
    target = cfg.target(args.target)
    folders = sorted(p for p in (base / cfg.logs_dir).glob(f"*/{target.slug}") if (p / "manifest.json").is_file()
                     and (not args.operators or p.parent.name in args.operators))
    print(f"\n## a real slowdown of {args.slowdown:.2f}x: {args.detect} rounds, each every workload of "
          f"{', '.join(f.parent.name for f in folders)}\n")
    print("| round | workload | swapped-in configuration (recorded latency / the best's) | verdicts of the next 3 runs (measured / the band's median) | found |")
    print("|---|---|---|---|---|")
    found = trials = 0
    with open(args.out, "a", encoding="utf-8") as out:
        for t in range(args.detect):
            # One round: every workload's best swapped at once (each kernel is measured on
            # its own visits, so the swaps do not disturb one another), then 3 runs.
            work = Path(tempfile.mkdtemp(prefix="bench-drift-trial-")) / "repo"
            shutil.copytree(base, work, symlinks=True)
            # The runs use this checkout's code (`python -m` in the copy imports the copy's).
            shutil.rmtree(work / "tvmtune_ci")
            shutil.copytree(ROOT / "tvmtune_ci", work / "tvmtune_ci")
            swaps = {}
            for folder in folders:
                op = folder.parent.name
                for w in sorted(read_manifest(folder / "manifest.json").results):
                    swaps[(op, w)] = swap_best(work / cfg.logs_dir / op / target.slug, w, args.slowdown)
            states: dict[tuple[str, str], list[str]] = {k: [] for k in swaps}
            for _ in range(3):
                ops = sorted({op for op, _ in swaps})
                code, data = cli(work, "remeasure", *ops, "--target", args.target, "--record")
                out.write(json.dumps({"phase": 2, "round": t + 1, "swaps": {f"{o}/{w}": r for (o, w), r in swaps.items()},
                                      "exit": code, **data}) + "\n")
                for e in data["results"]:
                    for v in e["verdicts"]:
                        seen = states[(e["operator"], v["workload"])]
                        if not seen or not seen[-1].startswith("drift"):
                            ratio = f" ({v['ratio']:.3f}x)" if v.get("ratio") else ""
                            seen.append(v["state"] + ratio)
            for (op, w), seen in sorted(states.items()):
                hit = any(x.startswith("drift") for x in seen)
                found += hit
                trials += 1
                print(f"| {t + 1} | {op}/{w} | {swaps[(op, w)]:.3f}x | {', '.join(seen)} | {'yes' if hit else 'NO'} |",
                      flush=True)
            shutil.rmtree(work.parent, ignore_errors=True)
    print(f"\nfound within 3 runs: {found} of {trials}")


def swap_best(folder: Path, workload: str, slowdown: float) -> float:
    """Make the set's best of `workload` the configuration of its top table whose
    recorded latency is closest to `slowdown` x the best's; re-record the hashes."""
    from tvmtune_ci.fsutil import sha256_bytes
    from tvmtune_ci.git.read import blob_id

    m = json.loads((folder / "manifest.json").read_text())
    inline = "results" in m and m.get("format", 4) < 4
    data = m if inline else json.loads((folder / "results.json").read_text())
    res = data["results"][workload]
    best = res["best"]["latency_s"]
    cands = [c for c in res["top"] if c["knobs"] != res["best"]["knobs"]]
    # At least `slowdown` as recorded: a re-tune measured on a busy runner records ratios
    # that a quiet run does not reproduce (1.09x and 1.12x recorded came back 0.95x and
    # 1.04-1.07x here), so the table reports what the runs measured, too.
    slower = [c for c in cands if c["latency_s"] / best >= slowdown]
    pick = min(slower or cands, key=lambda c: abs(c["latency_s"] / best - slowdown))
    res["best"] = {**res["best"], "knobs": pick["knobs"]}
    if not inline:
        raw = json.dumps(data).encode()
        (folder / "results.json").write_bytes(raw)
        m["files"]["results.json"], m["files_git_blob"]["results.json"] = sha256_bytes(raw), blob_id(raw)
    (folder / "manifest.json").write_text(json.dumps(m))
    return pick["latency_s"] / best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("operators", nargs="*", help="only these operators' sets (default: all of the target)")
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=70.0)
    ap.add_argument("--publish-at", type=int, default=8, help="runs behind the README whose headline is checked")
    ap.add_argument("--detect", type=int, default=0)
    ap.add_argument("--slowdown", type=float, default=1.15)
    ap.add_argument("--source", default=None, help="phase 2: the clone phase 1 left")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/bench_drift_raw.jsonl")
    ap.add_argument("--analyse", action="store_true", help="only analyse --out")
    args = ap.parse_args()
    if args.analyse:
        analyse1(args.out, args.publish_at)
        return 0
    if args.runs:
        repo = phase1(args)
        analyse1(args.out, args.publish_at)
        args.source = args.source or str(repo)
    if args.detect:
        if not args.source:
            raise SystemExit("--detect needs --source (the clone phase 1 left) or --runs")
        phase2(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
