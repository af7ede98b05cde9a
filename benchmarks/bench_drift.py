"""Benchmark: does `remeasure` cry wolf, does it find a real slowdown, and do the README's
figures hold in later fresh processes? On this machine, with real kernels.

    python -m benchmarks.bench_drift matmul --target xeon-emr-2c --runs 20 --minutes 60   # quiet: nothing changed
    python -m benchmarks.bench_drift matmul --target xeon-emr-2c --detect 5 --source CLONE --slowdown 1.15 --slowdown-for matmul/m1021=0

Phase 1 (`--runs`): a clone of this repository (its committed logs of `--target`, which
must be this machine's), then `--runs` fresh processes of `tvmtune-ci remeasure --target T
--record`, started at even intervals over `--minutes`. Nothing changes in between, so
every "drift" verdict is a false alarm. Afterwards, per workload: each run's verdict;
the band the README states after run `--publish-at` and whether the median of the next
5 runs, at least 30 min apart in all, lies inside it; and the band the absolute lower
quartile would have had over the same runs.

Phase 2 (`--detect N`): from a clone with a history (`--source`; phase 1's, or a fresh
clone of this repository), first every workload's best and its neighbours (the best
with one knob changed: a split's factor of 2 or 4 moved, another structural choice)
measured side by side for `--pick-seconds` (interleaved, the fast figure the history
records); where none came within 0.03 of `--slowdown` x the best, pairs of one-knob
changes whose ratios multiply to near it are measured with the best again. Per
workload the one measured closest to `--slowdown` (`--slowdown-for OP/W=R` for a
workload whose band is wider; R 0: not swapped, a control in the same runs) is
picked. Then N rounds: each a fresh copy with every picked configuration swapped in
as the best (a real, slower kernel, re-measured by every run that follows; its hashes
re-recorded, so `check` still vouches for the set), and `remeasure --record` up to 3
times: a workload's trial finds the drift when a verdict says so within those 3 runs.
Each kernel is measured on its own visits, so one round is one trial per workload.
(The log's own configurations were tried first: its best's neighbours ran within 1.09x
and the rest 1.4x and slower, so a 1.15x kernel was not among them.)

A run of one set lasts `measure.history_s` (120 s here; `--history-s` sets it in the
clone), so a run of every set of a target takes minutes; the operators named on the
command line narrow both phases.

`--young` (issue 54: a verdict at the first remeasure after a re-tune): the clone first
pools every set of the target's runner label as committed into its runner band
(`<logs>/.runners/`, what `remeasure --record` keeps), then cuts the named operators'
histories to their re-tune's run (re-sealed), as a re-tune leaves them. Phase 1's runs
then start from that young history; phase 2 starts each trial from it too, with
`--runs-per-trial 1`: the drift must be found at the first run after the swap.

    python -m benchmarks.bench_drift softmax --target zen4-2c --young --history-s 60 --runs 20 --minutes 0 \
        --detect 10 --slowdown 1.15 --runs-per-trial 1

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

from benchmarks._common import result_path

ROOT = Path(__file__).resolve().parents[1]


def cli(repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    r = subprocess.run(
        [sys.executable, "-m", "tvmtune_ci", *args, "--format", "json"], cwd=repo, capture_output=True, text=True
    )
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"tvmtune-ci {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}") from None


def clone(dst: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dst)], check=True)
    return dst


def young_clone(args: argparse.Namespace) -> Path:
    """A clone whose runner band pools every set of the target's label as committed, and
    whose named operators' histories are cut to their re-tune's run (`--young`)."""
    from tvmtune_ci.core import runnerband
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.fsutil import sha256_bytes
    from tvmtune_ci.core.git.read import blob_id
    from tvmtune_ci.pipeline.remeasure import label_series

    repo = clone(Path(tempfile.mkdtemp(prefix="bench-drift-young-")) / "repo")
    if args.history_s:
        cfg_text = (repo / "tvmtune.yaml").read_text()
        new = cfg_text.replace("  finalists: 5", f"  history_s: {args.history_s:g}\n  finalists: 5", 1)
        assert new != cfg_text, "tvmtune.yaml: no measure.finalists line to put history_s beside"
        (repo / "tvmtune.yaml").write_text(new)
    cfg = load_config(repo / "tvmtune.yaml")
    target = cfg.target(args.target)
    label = runnerband.runner_label(target.runs_on, target.rpc.key if target.rpc else None)
    assert label, f"{args.target} names no runner label"
    series, notes = label_series(cfg, label)
    # The cut histories keep their first run, so their series would share its key with the
    # young one's: renamed, as a re-tune's new history (a new first run) would leave them.
    cut = {f"{op}/{args.target}/" for op in args.operators}
    pool = runnerband.Pool(
        label, {(s.key + " (archived)" if s.key.startswith(tuple(cut)) else s.key): s for s in series}
    )
    runnerband.write_pool(runnerband.pool_path(cfg.logs_path, label), pool)
    from tvmtune_ci.pipeline.remeasure import runner_identity

    band, left = pool.band(runner_identity())
    print(
        f"# young clone {repo}: runner band of {label} from {len(series)} series"
        f" ({len(left)} left out{': ' + left[0] if left else ''}): "
        f"{band.describe() if band else 'none (too few pairs)'}",
        flush=True,
    )
    for op in args.operators:
        folder = cfg.logs_path / op / target.slug
        m = json.loads((folder / "manifest.json").read_text())
        first = (folder / "runs.jsonl").read_bytes().splitlines(keepends=True)[0]
        # Its first run stands for the re-tune's (days before: the runner's speed then, not now).
        (folder / "runs.jsonl").write_bytes(first)
        m["files"]["runs.jsonl"], m["files_git_blob"]["runs.jsonl"] = sha256_bytes(first), blob_id(first)
        (folder / "manifest.json").write_text(json.dumps(m))
        print(
            f"# {op}/{args.target}: history cut to its first run ({json.loads(first)['by']}, {json.loads(first)['at']})",
            flush=True,
        )
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "commit",
            "-qm",
            "young: histories cut to the re-tune's run, runner band pooled",
        ],
        check=True,
    )
    return repo


def phase1(args: argparse.Namespace) -> Path:
    if args.source:  # a young clone: phase 1 grows a copy, phase 2 starts from the young one
        repo = Path(tempfile.mkdtemp(prefix="bench-drift-p1-")) / "repo"
        shutil.copytree(args.source, repo, symlinks=True)
    else:
        repo = clone(Path(tempfile.mkdtemp(prefix="bench-drift-")) / "repo")
    print(
        f"# phase 1: {args.runs} runs of `remeasure {' '.join(args.operators)} --target {args.target} --record` over "
        f"{args.minutes:g} min in {repo}",
        flush=True,
    )
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
            said = "; ".join(
                f"{e['operator']}/{v['workload']}: {v['state']}"
                + (f" {v['ratio']:.3f}x" if v.get("ratio") else "")
                + (" (runner band)" if "runner band" in v["sentence"] else "")
                for e in data["results"]
                for v in e["verdicts"]
            )
            print(
                f"run {i + 1} at {(time.time() - t0) / 60:.1f} min: exit {code}, "
                f"{states.count('drift')} drift, {states.count('stable')} stable, "
                f"{states.count('inconclusive')} inconclusive: {said}",
                flush=True,
            )
    return repo


def analyse1(path: Path, publish_at: int) -> None:
    from tvmtune_ci.core import runs as R

    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    recs = [r for r in recs if r["phase"] == 1]
    wrong = [
        (r["run"], f"{e['operator']}/{v['workload']}")
        for r in recs
        for e in r["results"]
        for v in e["verdicts"]
        if v["state"] == "drift"
    ]
    n_verdicts = sum(len(e["verdicts"]) for r in recs for e in r["results"])
    print(
        f"\n## nothing changed: {len(recs)} runs over {(recs[-1]['at'] - recs[0]['at']) / 60:.0f} min, "
        f"{n_verdicts} verdicts, {len(wrong)} false alarm(s){': ' + str(wrong) if wrong else ''}; "
        f"runs with any drift: {sum(r['exit'] != 0 for r in recs)} of {len(recs)} (the verdicts "
        "the runs printed, with the code they ran)\n"
    )
    # The verdicts are a function of the recorded history: replayed here with this
    # checkout's rule, run by run, on the last run's history.
    from tvmtune_ci.pipeline.remeasure import judge_history

    for e in recs[-1]["results"]:
        history = [R.run_from_json(h) for h in e["history"]]
        states: dict[str, list[str]] = {}
        for k in range(1, len(history) + 1):
            for w in sorted(history[0].workloads):
                states.setdefault(w, []).append(judge_history(history[:k], w).state)
        for w, st in states.items():
            print(
                f"- {e['operator']}/{w}, verdicts replayed with this checkout's rule after each of "
                f"the {len(st)} runs (the re-tune's first): {st.count('drift')} drift, "
                f"{st.count('stable')} stable, {st.count('inconclusive')} inconclusive; left out "
                f"as disturbed: {len(R.disturbed(history, w))} (the runner disturbed in "
                f"{len(R.disturbed(history))})"
            )
    print()
    # The last run's history holds every run (the re-tune's first).
    last = recs[-1]
    print(
        f"| workload | runs | band of the headline (at the runner's usual speed) after run {publish_at} "
        "(README) | median of the 5 later runs, spread over the rest, inside it? | the figure as "
        "measured: band, later median inside? | band of the absolute p25 over the same runs | "
        "headline band over all runs | as measured | absolute p25 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    inside = {"usual": 0, "fast": 0}
    total = 0

    def later_of(fig: list[tuple[str, float]], k: int) -> list[float]:
        # 5 later runs spread evenly over the rest of the series (>= 30 min apart in all).
        rest = len(fig) - k
        return [fig[k + round(i * (rest - 1) / 4)][1] for i in range(5)] if rest >= 5 else []

    for e in last["results"]:
        history = [R.run_from_json(h) for h in e["history"]]
        for w in sorted(history[0].workloads):
            # The usual-speed figure's band and ratios are those of fast / compute
            # calibration: the scale (the calibration's median) cancels.
            figs = {"usual": R.steady_series(history, w, "fast_vs_compute"), "fast": R.steady_series(history, w)}
            lat = R.steady_series(history, w, "p25")
            k = publish_at
            cells = {}
            for name, fig in figs.items():
                band, later = R.band_of(fig[:k]), later_of(fig, k)
                cells[name] = (band, "-")
                if band is not None and len(later) == 5:
                    med = statistics.median(later)
                    good = abs(med / band.median - 1) <= band.halfwidth
                    inside[name] += good
                    cells[name] = (band, f"{'yes' if good else 'NO'} ({med / band.median:.3f}x)")
            total += cells["usual"][1] != "-"
            lb = R.band_of(lat[:k])
            ua, fa, la = R.band_of(figs["usual"]), R.band_of(figs["fast"]), R.band_of(lat)
            (ub, uok), (fb, fok) = cells["usual"], cells["fast"]
            print(
                f"| {e['operator']}/{w} | {len(figs['fast'])} | ±{100 * ub.halfwidth:.1f}% | {uok} | "
                f"±{100 * fb.halfwidth:.1f}%, {fok} | ±{100 * lb.halfwidth:.1f}% | ±{100 * ua.halfwidth:.1f}% | "
                f"±{100 * fa.halfwidth:.1f}% | ±{100 * la.halfwidth:.1f}% |"
            )
    print(
        f"\nthe README's headline reproduced (median of 5 later runs, spread over the rest, inside its band) in "
        f"{inside['usual']} of {total} workloads; the figure as measured would have in {inside['fast']}"
    )


def rejudge1(path: Path) -> None:
    """Phase 1's runs judged again by this checkout's code (`judge_history`, with the runner
    band each run recorded): the verdicts are a function of the recorded history and band,
    so a rule changed after the runs can be read on the same runs, labelled as such."""
    from tvmtune_ci.core import runnerband
    from tvmtune_ci.core import runs as R
    from tvmtune_ci.pipeline.remeasure import judge_history

    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    recs = [r for r in recs if r["phase"] == 1]
    print("\n## the same runs judged again by this checkout's code (the runner band each run was given)\n")
    print("| run | history | workload | printed then | judged now | ratio | which band |")
    print("|---|---|---|---|---|---|---|")
    alarms = verdicts = 0
    for r in recs:
        for e in r["results"]:
            history = [R.run_from_json(h) for h in e["history"]]
            band = runnerband.RunnerBand(**e["runner_band"]) if e.get("runner_band") else None
            for then in e["verdicts"]:
                v = judge_history(history, then["workload"], band)
                verdicts += 1
                alarms += v.drifted
                which = (
                    "far rule"
                    if "at once" in v.sentence
                    else "runner band"
                    if "runner band" in v.sentence
                    else "own band"
                    if "band" in v.sentence
                    else "-"
                )
                ratio = f"{v.ratio:.3f}x" if v.ratio else "-"
                print(
                    f"| {r['run']} | {len(history)} | {then['workload']} | {then['state']} | {v.state} | "
                    f"{ratio} | {which} |"
                )
    print(f"\njudged now: {alarms} false alarm(s) in {verdicts} verdicts of {len(recs)} runs")


def phase2(args: argparse.Namespace) -> None:
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.manifest import read_manifest

    base = Path(args.source)
    cfg = load_config(base / "tvmtune.yaml")
    target = cfg.target(args.target)
    folders = sorted(
        p
        for p in (base / cfg.logs_dir).glob(f"*/{target.slug}")
        if (p / "manifest.json").is_file() and (not args.operators or p.parent.name in args.operators)
    )
    wanted = {
        f"{f.parent.name}/{w}": args.slowdown for f in folders for w in read_manifest(f / "manifest.json").results
    }
    for spec in args.slowdown_for:
        key, _, val = spec.partition("=")
        if key not in wanted:
            raise SystemExit(f"--slowdown-for {spec}: no workload {key} (have {', '.join(sorted(wanted))})")
        wanted[key] = float(val)
    # The configurations are chosen by what they measure now, side by side with the best
    # (`pick_slower`): the top table's recorded ratios did not hold (see the docstring).
    controls = sorted(k for k, v in wanted.items() if v <= 1.0)  # not swapped: false alarms, same runs
    wanted = {k: v for k, v in wanted.items() if v > 1.0}
    picks = pick_slower(base, cfg, target, folders, wanted, args.pick_seconds)
    tmpl_knobs = {k: p["best"] for k, p in picks.items()}
    with open(args.out, "a", encoding="utf-8") as out:
        out.write(json.dumps({"phase": 2, "picks": picks, "at": time.time()}) + "\n")
    print(
        f"\n## a real slowdown: {args.detect} rounds, each every workload of "
        f"{', '.join(f.parent.name for f in folders)} with its best swapped for a configuration of "
        f"its log measured slower side by side ({args.pick_seconds:g} s, interleaved)\n"
    )
    for k, p in sorted(picks.items()):
        best_knobs = tmpl_knobs[k]
        how = "the best with " + ", ".join(
            f"{n} {best_knobs[n]} -> {v}" for n, v in p["knobs"].items() if best_knobs.get(n) != v
        )
        print(
            f"- {k}: wanted {wanted[k]:.2f}x; picked {how}, measured {p['measured']:.3f}x "
            f"the best now; measured ratios of all candidates: "
            f"{', '.join(f'{r:.3f}' for r in p['all_measured'])}"
        )
    print(
        "\n| round | workload | swapped-in configuration (measured / the best's, before the round) | "
        "verdicts of the next runs (measured / the band's median) | calibration kernels / their median | found |"
    )
    print("|---|---|---|---|---|---|")
    found = trials = 0
    per: dict[str, list[bool]] = {}
    alarms: list[bool] = []
    with open(args.out, "a", encoding="utf-8") as out:
        for t in range(args.detect):
            # One round: every workload's best swapped at once (each kernel is measured on
            # its own visits, so the swaps do not disturb one another), then up to 3 runs.
            work = Path(tempfile.mkdtemp(prefix="bench-drift-trial-")) / "repo"
            shutil.copytree(base, work, symlinks=True)
            if not args.young:
                # The runs use this checkout's code (`python -m` in the copy imports the copy's).
                shutil.rmtree(work / "tvmtune_ci")
                shutil.copytree(ROOT / "tvmtune_ci", work / "tvmtune_ci")
            for key, p in picks.items():
                op, w = key.split("/")
                swap_best(work / cfg.logs_dir / op / target.slug, w, p["knobs"])
            states: dict[str, list[str]] = {k: [] for k in [*picks, *controls]}
            cals: list[str] = []
            for _ in range(args.runs_per_trial):
                ops = sorted({k.split("/")[0] for k in picks})
                code, data = cli(work, "remeasure", *ops, "--target", args.target, "--record")
                out.write(json.dumps({"phase": 2, "round": t + 1, "swaps": picks, "exit": code, **data}) + "\n")
                out.flush()
                cals.append(calibration_ratio(data))
                for e in data["results"]:
                    for v in e["verdicts"]:
                        seen = states[f"{e['operator']}/{v['workload']}"]
                        if not seen or not seen[-1].startswith("drift"):
                            ratio = f" ({v['ratio']:.3f}x)" if v.get("ratio") else ""
                            which = " [runner band]" if "runner band" in v["sentence"] else ""
                            seen.append(v["state"] + ratio + which)
                if all(s and s[-1].startswith("drift") for k, s in states.items() if k in picks):
                    break  # every workload found: a 4th run would judge nothing new
            for key, seen in sorted(states.items()):
                hit = any(x.startswith("drift") for x in seen)
                if key in controls:  # nothing changed: a drift here is a false alarm
                    alarms.append(hit)
                    print(
                        f"| {t + 1} | {key} (control, not swapped) | - | {', '.join(seen)} | "
                        f"{'; '.join(cals)} | {'FALSE ALARM' if hit else 'no drift (right)'} |",
                        flush=True,
                    )
                    continue
                found += hit
                trials += 1
                per.setdefault(key, []).append(hit)
                print(
                    f"| {t + 1} | {key} | {picks[key]['measured']:.3f}x | {', '.join(seen)} | "
                    f"{'; '.join(cals)} | {'yes' if hit else 'NO'} |",
                    flush=True,
                )
            shutil.rmtree(work.parent, ignore_errors=True)
    print(
        f"\nfound within {args.runs_per_trial} run(s): {found} of {trials}; per workload: "
        + ", ".join(f"{k} {sum(v)} of {len(v)} ({picks[k]['measured']:.3f}x)" for k, v in sorted(per.items()))
        + (f"; controls (not swapped): {sum(alarms)} false alarm(s) in {len(alarms)}" if controls else "")
    )


def calibration_ratio(data: dict[str, Any]) -> str:
    """The run's calibration kernels over their median in the history: how fast the
    runner itself was in that run (a detection on a slow runner proves less)."""
    from tvmtune_ci.core import runs as R

    history = [R.run_from_json(h) for h in data["results"][0]["history"]]
    parts = []
    for kind in ("compute", "memory"):
        pts = [r.calibration[kind].fast_s for r in history if kind in r.calibration]
        if len(pts) >= 2:
            parts.append(f"{kind[0]} {pts[-1] / statistics.median(pts[:-1]):.2f}")
    return " ".join(parts) or "-"


def pick_slower(
    base: Path, cfg: Any, target: Any, folders: list[Path], wanted: dict[str, float], seconds: float
) -> dict[str, dict[str, Any]]:
    """Per workload: the configuration whose latency, measured now side by side with the
    best (every workload's best and candidates in one interleaved run of `seconds`, each
    as the fast figure the history records), is closest to the wanted ratio. Candidates:
    the best with one knob changed, then with two such changes."""
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.builder import schedule_config

    keys: list[tuple[str, int]] = []  # (op/w, -1 for the best or the candidate's index)
    schs = []
    recorded: dict[tuple[str, int], float] = {}
    cands_of: dict[str, list[dict[str, Any]]] = {}
    tmpl_of: dict[str, tuple[Any, str, dict[str, Any]]] = {}
    for folder in folders:
        op = folder.parent.name
        template = import_template(base / cfg.operators_dir / f"{op}.py", base)
        res_all = _results_of(folder)
        for w, res in sorted(res_all.items()):
            key = f"{op}/{w}"
            if key not in wanted:
                continue
            best = res["best"]
            # Candidates: the best with one knob changed (a split's factor of 2 or 4
            # moved to another part, another structural or categorical choice). A
            # kernel measured 1.15x slower is rarely in a tuned log, where the best's
            # neighbours run within a few percent and the rest run far slower.
            cands = [{"knobs": kv, "recorded": float("nan")} for kv in neighbours(best["knobs"], template.KNOBS)]
            cands_of[key] = cands
            tmpl_of[key] = (template, w, best["knobs"])
            for i, c in [(-1, {"knobs": best["knobs"], "recorded": 1.0}), *enumerate(cands)]:
                try:
                    sch = schedule_config(template, w, dict(c["knobs"]), target.target)
                except Exception:  # noqa: BLE001 - a neighbour the template refuses
                    continue
                keys.append((key, i))
                recorded[(key, i)] = c["recorded"]
                schs.append(sch)
    fast = side_by_side(cfg, target, keys, schs, seconds)
    # Stage 2, where no candidate came within 0.03 of the wanted ratio: pairs of the
    # best's one-knob neighbours, whose ratios multiply to near it, measured again with
    # the best (a 1.15x kernel is rarely one knob away from a tuned best).
    keys2: list[tuple[str, int]] = []
    schs2 = []
    for key, want in wanted.items():
        ratios = {i: fast[(k, i)] / fast[(key, -1)] for k, i in fast if k == key and i >= 0}
        if min(abs(r - want) for r in ratios.values()) <= 0.03:
            continue
        template, w, best_knobs = tmpl_of[key]
        singles = []
        for i, r in ratios.items():
            diff = {n: v for n, v in cands_of[key][i]["knobs"].items() if best_knobs.get(n) != v}
            if len(diff) == 1 and r > 1.0:
                singles.append((diff, r))
        combos = []
        for x in range(len(singles)):
            for y in range(x + 1, len(singles)):
                (d1, r1), (d2, r2) = singles[x], singles[y]
                if set(d1) & set(d2) or abs(r1 * r2 - want) > 0.06:
                    continue
                combos.append((abs(r1 * r2 - want), {**best_knobs, **d1, **d2}, r1 * r2))
        for _, kv, est in sorted(combos, key=lambda c: c[0])[:6]:
            try:
                sch = schedule_config(template, w, dict(kv), target.target)
            except Exception:  # noqa: BLE001 - a combination the template refuses
                continue
            cands_of[key].append({"knobs": kv, "recorded": float("nan"), "product": est})
            keys2.append((key, len(cands_of[key]) - 1))
            schs2.append(sch)
    if schs2:
        for key in {k for k, _ in keys2}:
            template, w, best_knobs = tmpl_of[key]
            keys2.append((key, -1))
            schs2.append(schedule_config(template, w, dict(best_knobs), target.target))
        fast2 = side_by_side(cfg, target, keys2, schs2, seconds)
        for key in {k for k, _ in keys2}:  # stage 2's ratios on stage 2's best
            for k, i in keys2:
                if k == key and i >= 0:
                    fast[(k, i)] = fast2[(k, i)] / fast2[(key, -1)] * fast[(key, -1)]
                    recorded[(k, i)] = float("nan")
    out: dict[str, dict[str, Any]] = {}
    for key, want in wanted.items():
        cands = sorted((fast[(k, i)] / fast[(key, -1)], i) for k, i in fast if k == key and i >= 0)
        # The closest to the wanted ratio: a single measurement of a ratio spreads a few
        # percent, so "at least" would skip a 1.085x for a wanted 1.09x.
        ratio, idx = min(cands, key=lambda c: abs(c[0] - want))
        out[key] = {
            "index": idx,
            "knobs": cands_of[key][idx]["knobs"],
            "best": tmpl_of[key][2],
            "measured": ratio,
            "recorded": recorded[(key, idx)],
            "wanted": want,
            "all_measured": [r for r, _ in cands],
        }
    return out


def neighbours(best: dict[str, Any], decls: Any) -> list[dict[str, Any]]:
    """The configurations one knob away from `best`: each split with a factor of 2 or 4
    moved from one part to another, each structural or categorical knob at another of
    its candidates."""
    out = []
    for d in decls:
        v = best.get(d.name)
        if isinstance(v, list):
            for i in range(len(v)):
                for j in range(len(v)):
                    for f in (2, 4):
                        if i != j and v[i] % f == 0:
                            w = list(v)
                            w[i], w[j] = v[i] // f, v[j] * f
                            out.append({**best, d.name: w})
        elif hasattr(d, "candidates"):
            out += [{**best, d.name: c} for c in d.candidates if c != v]
    return out


def side_by_side(
    cfg: Any, target: Any, keys: list[tuple[str, int]], schs: list[Any], seconds: float
) -> dict[tuple[str, int], float]:
    """The fast figure (as the history records it) of each schedule, measured in one
    interleaved run of `seconds`."""
    from tvmtune_ci.pipeline.remeasure import kernel_figure
    from tvmtune_ci.tune.builder import make_builder
    from tvmtune_ci.tune.measure import interleave
    from tvmtune_ci.tune.runners import make_runner
    from tvmtune_ci.tune.runners.threads import measure_threads, tvm_threads

    print(f"# measuring {len(schs)} configurations side by side for {seconds:g} s", flush=True)
    with tvm_threads(measure_threads(target)):
        runner, builder = make_runner(cfg.measure, None), make_builder()
        try:
            visits = interleave(
                schs,
                target.target,
                cfg.measure,
                seconds=seconds,
                runner=runner,
                builder=builder,
                what="bench_drift: the swap candidates",
            )
        finally:
            builder.close()
            runner.close()
    return {k: kernel_figure(v).fast_s for k, v in zip(keys, visits, strict=True)}


def swap_best(folder: Path, workload: str, knobs: dict[str, Any]) -> None:
    """Make the set's best of `workload` the configuration `knobs`;
    re-record the hashes, so `check` still vouches for the set."""
    from tvmtune_ci.core.fsutil import sha256_bytes
    from tvmtune_ci.core.git.read import blob_id

    m = json.loads((folder / "manifest.json").read_text())
    if m["format"] < 4:  # results inline in the manifest
        res = m["results"][workload]
        res["best"] = {**res["best"], "knobs": knobs}
        (folder / "manifest.json").write_text(json.dumps(m))
        return
    data = json.loads((folder / "results.json").read_text())
    res = data["results"][workload]
    res["best"] = {**res["best"], "knobs": knobs}
    raw = json.dumps(data).encode()
    (folder / "results.json").write_bytes(raw)
    m["files"]["results.json"], m["files_git_blob"]["results.json"] = sha256_bytes(raw), blob_id(raw)
    (folder / "manifest.json").write_text(json.dumps(m))


def _results_of(folder: Path) -> dict[str, Any]:
    """A set's results: in results.json from manifest format 4, inline before."""
    m = json.loads((folder / "manifest.json").read_text())
    if m["format"] < 4:
        return m["results"]
    return json.loads((folder / "results.json").read_text())["results"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("operators", nargs="*", help="only these operators' sets (default: all of the target)")
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=70.0)
    ap.add_argument("--publish-at", type=int, default=8, help="runs behind the README whose headline is checked")
    ap.add_argument("--detect", type=int, default=0)
    ap.add_argument("--slowdown", type=float, default=1.15, help="phase 2: the measured ratio wanted")
    ap.add_argument(
        "--slowdown-for",
        action="append",
        default=[],
        metavar="OP/W=RATIO",
        help="phase 2: another ratio for one workload (one whose band is wider); "
        "0: not swapped, a control whose drift would be a false alarm",
    )
    ap.add_argument(
        "--pick-seconds", type=float, default=90.0, help="phase 2: how long the candidates are measured side by side"
    )
    ap.add_argument("--source", default=None, help="phase 2: the clone phase 1 left")
    ap.add_argument("--out", type=Path, default=result_path("bench_drift", "raw", "jsonl"))
    ap.add_argument("--analyse", action="store_true", help="only analyse --out")
    ap.add_argument(
        "--young",
        action="store_true",
        help="pool the label's sets into its runner band, then cut the named operators' "
        "histories to their re-tune's run (a verdict at the first remeasure)",
    )
    ap.add_argument("--history-s", type=float, default=None, help="measure.history_s in the clone")
    ap.add_argument("--runs-per-trial", type=int, default=3, help="phase 2: runs to find the drift in")
    ap.add_argument("--rejudge", action="store_true", help="with --analyse: phase 1's runs judged again by this code")
    args = ap.parse_args()
    if args.young:
        if not args.operators:
            raise SystemExit("--young needs the operators whose histories to cut")
        args.source = str(young_clone(args))
    if args.analyse:
        analyse1(args.out, args.publish_at)
        if args.rejudge:
            rejudge1(args.out)
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
