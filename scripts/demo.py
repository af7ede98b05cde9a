"""The main job end to end on this machine's CPU, in a scratch copy of this repo.

    make demo                      # or: .venv/bin/python scripts/demo.py --trials 32

Copies operators/ into a new git repo under a temp folder, writes a tvmtune.yaml
whose one target is this CPU (its LLVM name, all cores), then runs
`tvmtune-ci retune`, then `models` and `profile` on this repo's models (built with
the logs just tuned, timed per call here), prints where the generated READMEs are,
then `status` and `check` there: the screen ends with check's verdict, the warnings
status printed not repeated. This repository's own logs are not touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=32, help="trial budget per workload (32)")
    p.add_argument("--operators", nargs="*", default=None, help="operators to tune (default: all)")
    p.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a new temp folder)")
    args = p.parse_args()

    from tvmtune_ci.tune.hostcheck import host_target

    target = host_target(os.cpu_count() or 1)
    work = args.dir or Path(tempfile.mkdtemp(prefix="tvmtune-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        ROOT / "operators", work / "operators", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    # This machine's CPU is the only target: the GPU templates (TARGET_KINDS cuda) stay out.
    from tvmtune_ci.core.template import discover_templates, read_template

    gpu = [p for p in discover_templates(work / "operators") if "llvm" not in read_template(p).kinds]
    for path in gpu:
        path.unlink()
    if gpu:
        print(f"left out the GPU templates (a CPU target only): {', '.join(p.stem for p in gpu)}")
    # This repo's models, their sources only: the scratch repo generates its own files.
    models = sorted(p for p in (ROOT / "models").glob("*.py") if not args.operators)
    (work / "models").mkdir(exist_ok=True)
    for m in models:
        shutil.copy2(m, work / "models" / m.name)
    (work / "tvmtune.yaml").write_text(
        "# written by scripts/demo.py: this machine's CPU as the only target\n"
        f"format: 1\ntrials: {args.trials}\n"
        # The first run of each set's history lasts 20 s here, not a runner's 120 s: a
        # demo of four operators would spend eight of its minutes on them.
        "measure: {history_s: 20}\n"
        f"targets:\n  this-cpu:\n    target: {json.dumps(target)}\n"
        + ("models:\n" + "".join(f"  {m.stem}: {{source: models/{m.name}}}\n" for m in models) if models else ""),
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@localhost",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@localhost",
    }
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "demo templates"]):
        subprocess.run(cmd, cwd=work, env=env, check=True)
    cli = [sys.executable, "-m", "tvmtune_ci"]
    print(f"scratch repo: {work}\ntarget: {json.dumps(target)}\n", flush=True)
    rc = subprocess.run([*cli, "retune", *(args.operators or [])], cwd=work, env=env).returncode
    if rc == 0 and models:
        # The models with the logs just tuned: which calls the templates cover, then the
        # model built with those logs and timed per call here. A shape a template
        # implements but no workload declares runs that template at its nearest
        # workload's best; the calls no template covers get the built-in parallel,
        # vectorized schedule (--untemplated fallback: MetaSchedule for them takes many
        # minutes), and the weights' transforms run once, at load.
        rc = subprocess.run([*cli, "models"], cwd=work, env=env).returncode
        if rc == 0:
            rc = subprocess.run(
                [
                    *cli,
                    "profile",
                    "--target",
                    "this-cpu",
                    "--untemplated",
                    "fallback",
                    "--uncovered-shapes",
                    "sibling",
                    "--runs",
                    "3",
                ],
                cwd=work,
                env=env,
            ).returncode
    for readme in sorted((work / "tuning_logs").glob("*/*/README.md")):
        print(f"generated: {readme}")
    for readme in sorted((work / "models").glob("*.md")):
        print(f"generated: {readme}")
    # `check` last, so that the screen ends with its verdict; the warnings `status`
    # just printed (the models' coverage line) are not printed again under it.
    shown = show(cli, "status", work, env)
    show(cli, "check", work, env, seen=frozenset(line for line in shown if line.startswith("warning: ")))
    return rc


def show(cli: list[str], verb: str, cwd: Path, env: dict[str, str], seen: frozenset[str] = frozenset()) -> list[str]:
    """Run `tvmtune-ci VERB` under a `$` heading; print its output but the lines in `seen`."""
    print(f"\n$ tvmtune-ci {verb}", flush=True)
    r = subprocess.run([*cli, verb], cwd=cwd, env=env, capture_output=True, text=True)
    lines = r.stdout.splitlines()
    for line in lines:
        if line not in seen:
            print(line)
    print(r.stderr, end="", file=sys.stderr, flush=True)
    return lines


if __name__ == "__main__":
    sys.exit(main())
