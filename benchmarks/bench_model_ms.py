"""Benchmark: a model built with freshly tuned template logs against MetaSchedule given
the same runner seconds, and ONNX Runtime, timed in turns (issue 50, part 5).

    .venv/bin/python -m benchmarks.bench_model_ms --target zen4-2c
    .venv/bin/python -m benchmarks.bench_model_ms --target zen4-2c --models bert_layer --runs 3

For each model, in a scratch git repo holding this repository's CPU templates, its
models and a tvmtune.yaml of one target (`--target`, which must run here; its trials,
early stop and measurement as this repository configures them):

1. `retune OPERATORS --target T`, cold: the operators whose templates the model's
   build runs (its coverage, the undeclared shapes included: they run at a sibling's
   best). Its wall seconds S are what the logs cost.
2. `profile MODEL --target T --untemplated none --uncovered-shapes sibling
   --metaschedule-seconds S`, `--runs` times: the build with those logs, MetaSchedule
   alone at S seconds (searched in the first run, its database reused after), ONNX
   Runtime, and the templates' defaults, each run timed in turns.

Printed: S, then per run the latencies and the ratios the README publishes, and the
README itself. The code run is a snapshot of this checkout's HEAD (git archive).
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

from benchmarks._common import snapshot
from benchmarks.bench_model_budget import scratch_repo

ROOT = Path(__file__).resolve().parents[1]


def run(src: Path, repo: Path, *args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "tvmtune_ci", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} in {repo} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return time.perf_counter() - t0, r.stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="a target of tvmtune.yaml this machine runs (zen4-2c)")
    p.add_argument("--models", nargs="*", default=None, help="models of tvmtune.yaml (default: all)")
    p.add_argument("--runs", type=int, default=3, help="profile runs per model (3)")
    p.add_argument("--keep", type=Path, default=None, help="keep the scratch repos under this folder")
    p.add_argument(
        "--usable-precision",
        type=float,
        default=None,
        help="measure.usable_precision in the scratch repo (default: this repo's); raise it "
        "on a loaded machine, where retune refuses a runner too noisy, and say so",
    )
    args = p.parse_args(argv)

    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-model-ms-"))
    src = snapshot(base / "src")
    sys.path.insert(0, str(src))
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.coverage import read_coverage

    config = load_config(src / "tvmtune.yaml")
    target = config.target(args.target)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(
        f"# bench_model_ms on {target.name} ({json.dumps(target.target)}); code at {head}; "
        f"load {os.getloadavg()[0]:.2f}; usable_precision "
        f"{args.usable_precision or config.measure.usable_precision}",
        flush=True,
    )
    try:
        for m in [m for m in config.models if not args.models or m.name in args.models]:
            src_path = src / m.source
            cov = read_coverage(src_path.parent / f"{m.name}.coverage.json")
            ops = sorted({cv.template for _, cv, _ in cov.calls if cv.template is not None})
            repo = scratch_repo(
                src, base / m.name, target.name, target.target, config.trials, config.seed, args.usable_precision
            )
            seconds, out = run(src, repo, "retune", *ops, "--target", target.name)
            print(
                f"\n## {m.name}: retune {' '.join(ops)} --target {target.name}, cold: {seconds:.0f} s "
                f"wall (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
            print(
                "\n".join("  " + line for line in out.splitlines() if "trials" in line or "best" in line.lower())[:3000]
            )
            for k in range(args.runs):
                _, out = run(
                    src,
                    repo,
                    "profile",
                    m.name,
                    "--target",
                    target.name,
                    "--untemplated",
                    "none",
                    "--uncovered-shapes",
                    "sibling",
                    "--metaschedule-seconds",
                    f"{seconds:.0f}",
                )
                print(f"\n### profile run {k + 1} (load {os.getloadavg()[0]:.2f})\n{out}", flush=True)
            print(f"\n### {m.name}.{target.slug}.md\n")
            print((repo / m.source).parent.joinpath(f"{m.name}.{target.slug}.md").read_text(), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
