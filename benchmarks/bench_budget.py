"""Benchmark: one time budget shared by weight (`retune --all --budget`) against equal
trials per workload, at the same total seconds.

    python -m benchmarks.bench_budget                       # 32 trials each, 2 seeds
    python -m benchmarks.bench_budget --trials 24 --seeds 1 --weights matmul=0.6,dense=0.4

For each seed, in two scratch git repos (this repo's CPU templates, one target: this
machine's CPU, tvmtune.yaml's measurement and early stop, a 10-s first run of each
set's history):

- equal: `retune --all --trials N`, today's fixed trials per workload (early stop on).
  Its wall seconds T are the other arm's budget.
- budget: `retune --all --budget T --trials 300`, the operators weighted as --weights
  says (their share of a model's end-to-end time, as a profile gives it; split equally
  among an operator's workloads), the lightest first and the heaviest last.
- heaviest (with --heaviest-first): the same, the items run the heaviest first, as
  before 2026-12-05 (`Budget.order` patched in the retune process): the order's A/B.

Then every arm's best of every workload, and the default configuration, are
re-measured side by side in one interleaved `measure.finals` run per workload (machine
drift hits all alike). The figure compared is a model's end-to-end time, the
weights being each workload's share of it: sum over workloads of weight x (this arm's
best / the equal arm's best), so the equal arm of the same seed is 1 (the anchor). The
arms' own spread between seeds is the yardstick a difference must exceed to count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import git_commit, wait_idle

ROOT = Path(__file__).resolve().parents[1]
TARGET_NAME = "this-cpu"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=32, help="the equal arm's trials per workload (32)")
    p.add_argument("--seeds", type=int, default=2, help="seeds per arm (2)")
    p.add_argument("--seed", type=int, default=42, help="the first seed (42)")
    p.add_argument(
        "--weights",
        default="matmul=0.6,dense=0.25,conv2d=0.1,softmax=0.05",
        help="OPERATOR=SHARE,... of the end-to-end time (default 60/25/10/5%%)",
    )
    p.add_argument(
        "--wait-idle", type=float, default=120.0, help="seconds to wait at most for a quiet machine first (120)"
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the scratch repos under this folder")
    p.add_argument(
        "--heaviest-first",
        action="store_true",
        help="a third arm per seed: the budget with the heaviest item first (the old order)",
    )
    return p.parse_args(argv)


def scratch_repo(where: Path, target: dict[str, Any], trials: int, seed: int, weights: dict[str, float]) -> Path:
    """A git repo with this repo's CPU templates and a config of one target, this CPU."""
    from tvmtune_ci.core.template import discover_templates, read_template

    where.mkdir(parents=True)
    shutil.copytree(ROOT / "operators", where / "operators", ignore=shutil.ignore_patterns("__pycache__"))
    for path in discover_templates(where / "operators"):
        if "llvm" not in read_template(path).kinds or path.stem not in weights:
            path.unlink()
    cfg = yaml.safe_load((ROOT / "tvmtune.yaml").read_text())
    cfg.pop("keep", None)
    cfg.update(
        trials=trials,
        seed=seed,
        targets={TARGET_NAME: {"target": target}},
        operators={op: {"weight": w} for op, w in weights.items()},
    )
    cfg["measure"] = {**cfg.get("measure", {}), "history_s": 10}
    (where / "tvmtune.yaml").write_text(
        "# written by benchmarks/bench_budget.py\n" + yaml.safe_dump(cfg, sort_keys=False)
    )
    git_commit(where, "templates", init=True)
    return where


# The old order, for the A/B arm: the heaviest item first.
HEAVIEST_FIRST = (
    "import sys\nfrom tvmtune_ci import cli\nfrom tvmtune_ci.pipeline import budget\n"
    "budget.Budget.order = lambda self: sorted(self.weights, key=lambda i: (-self.weights[i], i))\n"
    "sys.exit(cli.main())\n"
)


def retune(repo: Path, *args: str, heaviest_first: bool = False) -> tuple[float, str]:
    t0 = time.perf_counter()
    # This checkout's code, whatever the venv's editable install points at.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    how = ["-c", HEAVIEST_FIRST] if heaviest_first else ["-m", "tvmtune_ci"]
    r = subprocess.run(
        [sys.executable, *how, "retune", "--all", *args], cwd=repo, capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"retune in {repo} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return seconds, r.stdout


def outcome(repo: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(operator, workload) -> best knobs, trials run, why it stopped, from the set."""
    out = {}
    for folder in sorted((repo / "tuning_logs").glob(f"*/{TARGET_NAME}")):
        m = json.loads((folder / "manifest.json").read_text())
        res = json.loads((folder / "results.json").read_text())["results"]
        for w, r in res.items():
            t = m["trials"][w]
            out[(folder.parent.name, w)] = {
                "knobs": r["best"]["knobs"],
                "run": t["run"],
                "stop": t["stop_detail"] or t["stop_reason"],
            }
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tvmtune_ci.core import stats
    from tvmtune_ci.tune import tvmsetup

    tvmsetup.load()
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.builder import make_builder
    from tvmtune_ci.tune.hostcheck import host_target
    from tvmtune_ci.tune.measure import Finalist, finals
    from tvmtune_ci.tune.runners import make_runner

    weights = {k: float(v) for k, v in (x.split("=") for x in args.weights.split(","))}
    target = host_target(2)
    os.environ["TVM_NUM_THREADS"] = "2"  # as `retune` runs the kernels of a 2-core target
    waited = wait_idle(args.wait_idle)
    print(
        f"# bench_budget: equal ({args.trials} trials per workload) vs budget (the equal "
        f"arm's seconds, weighted {args.weights}); {args.seeds} seed(s) from {args.seed}; "
        f"target {json.dumps(target)}; load {os.getloadavg()[0]:.2f} (waited {waited:.0f} s)",
        flush=True,
    )
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-budget-"))
    arms: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    seconds: dict[str, float] = {}
    try:
        for k in range(args.seeds):
            seed = args.seed + k
            eq = scratch_repo(base / f"equal@{k}", target, args.trials, seed, weights)
            seconds[f"equal@{k}"], _ = retune(eq, "--seed", str(seed))
            arms[f"equal@{k}"] = outcome(eq)
            budget_s = seconds[f"equal@{k}"]
            bu = scratch_repo(base / f"budget@{k}", target, args.trials, seed, weights)
            seconds[f"budget@{k}"], text = retune(
                bu, "--seed", str(seed), "--trials", "300", "--budget", f"{budget_s:.0f}s"
            )
            arms[f"budget@{k}"] = outcome(bu)
            if args.heaviest_first:
                hv = scratch_repo(base / f"heaviest@{k}", target, args.trials, seed, weights)
                seconds[f"heaviest@{k}"], _ = retune(
                    hv, "--seed", str(seed), "--trials", "300", "--budget", f"{budget_s:.0f}s", heaviest_first=True
                )
                arms[f"heaviest@{k}"] = outcome(hv)
            for a in [x for x in (f"equal@{k}", f"budget@{k}", f"heaviest@{k}") if x in arms]:
                print(f"\n{a}: {seconds[a]:.0f} s wall", flush=True)
                for (op, w), o in sorted(arms[a].items()):
                    print(f"  {op}/{w}: {o['run']} trials ({o['stop']})", flush=True)

        # Every arm's best and the default, side by side, per workload.
        config = load_config(ROOT / "tvmtune.yaml")
        runner, builder = make_runner(config.measure), make_builder()
        names = list(arms)
        items = sorted(set.intersection(*(set(a) for a in arms.values())))
        lat: dict[tuple[str, str], dict[str, stats.Estimate]] = {}
        try:
            for op, w in items:
                tmpl = import_template(ROOT / "operators" / f"{op}.py", ROOT)
                fs = [
                    Finalist("default", None, "default"),
                    *(Finalist("search", dict(arms[a][(op, w)]["knobs"]), a) for a in names),
                ]
                res = finals(tmpl, w, target, fs, config.measure, runner=runner, builder=builder)
                lat[(op, w)] = {r.finalist.key: r.estimate for r in res if r.estimate is not None}
        finally:
            runner.close()
            builder.close()
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)

    per_op = {op: sum(1 for o, _ in items if o == op) for op in weights}
    print("\n## re-measured side by side (one interleaved run per workload)\n")
    print("| workload | weight | default | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for op, w in items:
        e = lat[(op, w)]
        cells = [
            stats.fmt_latency(e[a].value, e[a].rel_halfwidth) + f" ({arms[a][(op, w)]['run']} tr)"
            if a in e
            else "failed"
            for a in names
        ]
        print(
            f"| {op}/{w} | {weights[op] / per_op[op]:.3f} | "
            f"{stats.fmt_latency(e['default'].value, e['default'].rel_halfwidth)} | " + " | ".join(cells) + " |"
        )

    def e2e(arm: str, ref: str) -> float:
        """The end-to-end time after `arm` over that after `ref`: each workload's share
        of the time (its weight) scaled by its best's latency ratio."""
        return sum(
            weights[op] / per_op[op] * lat[(op, w)][arm].value / lat[(op, w)][ref].value for op, w in items
        ) / sum(weights.values())

    print("\n## end-to-end time (weights: shares of it), one arm over another (lower: faster)\n")
    kinds = ["budget", "heaviest"] if args.heaviest_first else ["budget"]
    for k in range(args.seeds):
        for kind in kinds:
            print(
                f"  seed {args.seed + k}: {kind} / equal = {e2e(f'{kind}@{k}', f'equal@{k}'):.3f} "
                f"({seconds[f'{kind}@{k}']:.0f} s against {seconds[f'equal@{k}']:.0f} s)"
            )
    for arm in ("equal", *kinds):
        for k in range(1, args.seeds):
            print(f"  yardstick: {arm}, seed {args.seed + k} / seed {args.seed}: {e2e(f'{arm}@{k}', f'{arm}@0'):.3f}")
    print(
        "\n  (all-default over equal, for scale: "
        + ", ".join(f"seed {args.seed + k}: {e2e('default', f'equal@{k}'):.2f}" for k in range(args.seeds))
        + ")"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
