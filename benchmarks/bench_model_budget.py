"""Benchmark: `retune --all --budget` weighted by the models' shares against equal
trials per workload, at the same runner seconds, judged on the models' end-to-end
latency (issue 50, part 6).

    .venv/bin/python -m benchmarks.bench_model_budget --target zen4-2c          # 3 seeds
    .venv/bin/python -m benchmarks.bench_model_budget --target zen4-2c --trials 24 --seeds 2

For each seed, in two scratch git repos holding this repository's CPU templates, its
models (their sources and committed profiles: the shares) and a tvmtune.yaml of one
target (`--target`, which must run here; the profiles' shares are that target's), with
no hand weights:

- equal: `retune --all --trials N`, fixed trials per workload (early stop on). Its wall
  seconds T are the other arm's budget.
- budget: `retune --all --budget T --trials 300`: each workload a model calls weighs its
  share of that model's kernel time (core/profiles.model_shares), every other workload
  as the lightest share (Config.weight_of).

Then each model is built with each arm's logs (`build_model`, the calls no template
covers left at TVM's loops, shapes no workload declares on the nearest workload's best:
what `make demo` builds) and every build of a model is timed in turns with the others,
the order rotating, in a fresh process on the target's num-cores (model/timing.time_builds). Printed per model: each arm's median
latency; budget / equal per seed (median of the per-round ratios, min-max); and the
yardstick a difference must exceed: one arm's seeds against each other.

The code run is a snapshot of this checkout's HEAD (git archive), so edits made while
it runs do not reach it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import git_commit, snapshot

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="a target of tvmtune.yaml this machine runs (zen4-2c)")
    p.add_argument("--trials", type=int, default=32, help="the equal arm's trials per workload (32)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per arm (3)")
    p.add_argument("--seed", type=int, default=42, help="the first seed (42)")
    p.add_argument("--rounds", type=int, default=10, help="rounds of the end-to-end timing (10)")
    p.add_argument("--keep", type=Path, default=None, help="keep the scratch repos under this folder")
    p.add_argument(
        "--operators",
        nargs="*",
        default=None,
        help="only these operators' templates in the scratch repos (default: every CPU template)",
    )
    p.add_argument(
        "--usable-precision",
        type=float,
        default=None,
        help="measure.usable_precision in the scratch repos (default: this repo's); raise "
        "it on a loaded machine, where retune refuses a runner too noisy, and say so",
    )
    return p.parse_args(argv)


def scratch_repo(
    src: Path,
    where: Path,
    target_name: str,
    target: dict[str, Any],
    trials: int,
    seed: int,
    usable_precision: float | None = None,
    operators: list[str] | None = None,
) -> Path:
    """A git repo with the CPU templates, the models and their profiles, one target."""
    sys.path.insert(0, str(src))
    from tvmtune_ci.core.template import discover_templates, read_template

    where.mkdir(parents=True)
    shutil.copytree(src / "operators", where / "operators", ignore=shutil.ignore_patterns("__pycache__"))
    for path in discover_templates(where / "operators"):
        if "llvm" not in read_template(path).kinds or (operators and path.stem not in operators):
            path.unlink()
    shutil.copytree(src / "models", where / "models", ignore=shutil.ignore_patterns("__pycache__", "*.md", "*.png"))
    cfg = yaml.safe_load((src / "tvmtune.yaml").read_text())
    for key in ("keep", "operators"):
        cfg.pop(key, None)
    # Equal trials means equal: the profiles' trial tiers (4.1) off.
    cfg.update(trials=trials, seed=seed, targets={target_name: {"target": target}}, trial_tiers="off")
    cfg["measure"] = {**cfg.get("measure", {}), "history_s": 10}
    if usable_precision is not None:
        cfg["measure"]["usable_precision"] = usable_precision
    (where / "tvmtune.yaml").write_text(
        "# written by benchmarks/bench_model_budget.py\n" + yaml.safe_dump(cfg, sort_keys=False)
    )
    git_commit(where, "templates", init=True)
    return where


def retune(src: Path, repo: Path, *args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(src)}
    r = subprocess.run(
        [sys.executable, "-m", "tvmtune_ci", "retune", "--all", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"retune in {repo} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return seconds, r.stdout


def outcome(repo: Path, target_name: str) -> dict[str, str]:
    """operator/workload -> "N trials (why it stopped)", from the sets' manifests."""
    out = {}
    for folder in sorted((repo / "tuning_logs").glob(f"*/{target_name}")):
        m = json.loads((folder / "manifest.json").read_text())
        for w, t in sorted(m["trials"].items()):
            out[f"{folder.parent.name}/{w}"] = f"{t['run']} trials ({t['stop_detail'] or t['stop_reason']})"
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-model-budget-"))
    src = snapshot(base / "src")
    sys.path.insert(0, str(src))
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.profiles import model_shares_by_target
    from tvmtune_ci.tune.hostcheck import host_description

    config = load_config(src / "tvmtune.yaml")
    target = config.target(args.target)
    shares = model_shares_by_target(config, [target.name]).get(target.name, {})
    if not shares:
        raise SystemExit(f"no model is profiled on {target.name}: run `tvmtune-ci profile --target {target.name}`")
    os.environ["TVM_NUM_THREADS"] = str(target.target.get("num-cores", 2))
    host = host_description()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(
        f"# bench_model_budget: equal ({args.trials} trials per workload) vs budget (the equal arm's "
        f"seconds, the models' shares on {target.name}); {args.seeds} seed(s) from {args.seed}; code at "
        f"{head}; host {host.get('cpu')} ({host.get('cpu_id')}); load {os.getloadavg()[0]:.2f}; "
        f"usable_precision {args.usable_precision or config.measure.usable_precision}; operators "
        f"{' '.join(args.operators) if args.operators else 'every CPU template'}",
        flush=True,
    )
    print(
        "# shares (the budget's weights where a model calls the workload): "
        + ", ".join(f"{o}/{w} {s:.3f}" for (o, w), s in sorted(shares.items(), key=lambda x: -x[1])),
        flush=True,
    )
    repos: dict[str, Path] = {}
    seconds: dict[str, float] = {}
    try:
        for k in range(args.seeds):
            seed = args.seed + k
            eq = scratch_repo(
                src,
                base / f"equal@{k}",
                target.name,
                target.target,
                args.trials,
                seed,
                args.usable_precision,
                args.operators,
            )
            seconds[f"equal@{k}"], _ = retune(src, eq, "--seed", str(seed))
            repos[f"equal@{k}"] = eq
            bu = scratch_repo(
                src,
                base / f"budget@{k}",
                target.name,
                target.target,
                args.trials,
                seed,
                args.usable_precision,
                args.operators,
            )
            seconds[f"budget@{k}"], _ = retune(
                src, bu, "--seed", str(seed), "--trials", "300", "--budget", f"{seconds[f'equal@{k}']:.0f}s"
            )
            repos[f"budget@{k}"] = bu
            for a in (f"equal@{k}", f"budget@{k}"):
                print(f"\n{a}: {seconds[a]:.0f} s wall", flush=True)
                for item, words in outcome(repos[a], target.name).items():
                    print(f"  {item}: {words}", flush=True)
        end_to_end(args, target, repos, seconds)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


def end_to_end(args: argparse.Namespace, target: Any, repos: dict[str, Path], seconds: dict[str, float]) -> None:
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.model.build import build_model
    from tvmtune_ci.model.timing import entry_function, random_inputs, time_builds

    names = list(repos)
    models = [m.name for m in load_config(repos[names[0]] / "tvmtune.yaml").models]
    for name in models:
        with warnings.catch_warnings():  # the mapped shapes: the same in every arm
            warnings.simplefilter("ignore")
            builds = {
                a: build_model(
                    name, target=target.target, root=repos[a], untemplated="none", uncovered_shapes="sibling"
                )
                for a in names
            }
        function = entry_function(builds[names[0]].module)
        arrays = random_inputs(builds[names[0]].module, function)
        # In a fresh process on the target's cores, as `profile` times (model/timing.py time_builds).
        samples = time_builds(
            builds,
            arrays,
            threads=int(target.target.get("num-cores", 2)),
            work_dir=repos[names[0]] / ".tvmtune-cache" / f"bench-{name}",
            function=function,
            runs=args.rounds,
        ).samples
        print(f"\n## {name}: end to end, every arm's build timed in turns ({args.rounds} rounds)\n")
        for a in names:
            print(
                f"  {a}: {statistics.median(samples[a]) * 1e3:.2f} ms (median; "
                f"{min(samples[a]) * 1e3:.2f}-{max(samples[a]) * 1e3:.2f} ms)"
            )

        def ratio(a: str, b: str, samples: dict[str, list[float]] = samples) -> str:
            rs = sorted(x / y for x, y in zip(samples[a], samples[b], strict=True))
            return f"{statistics.median(rs):.3f} ({rs[0]:.3f}-{rs[-1]:.3f} over the rounds)"

        print()
        for k in range(args.seeds):
            print(
                f"  seed {args.seed + k}: budget / equal = {ratio(f'budget@{k}', f'equal@{k}')}; "
                f"{seconds[f'budget@{k}']:.0f} s against {seconds[f'equal@{k}']:.0f} s"
            )
        for arm in ("equal", "budget"):
            for k in range(1, args.seeds):
                print(f"  yardstick: {arm}, seed {args.seed + k} / seed {args.seed}: {ratio(f'{arm}@{k}', f'{arm}@0')}")
        print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
