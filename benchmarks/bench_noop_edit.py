"""Benchmark: what a template edit that changes no kernel costs the runner, end to end.

    python -m benchmarks.bench_noop_edit --target zen4-2c            # matmul, this CPU's logs
    python -m benchmarks.bench_noop_edit --target zen4-2c --operator softmax --reps 2

The issue this answers (issue 21): after a no-op edit (a dead statement in a template)
the re-tune cost 0.82 of a cold run on a Zen 3. Here the whole `tvmtune-ci retune`
command is timed, as the CI job runs it (its template load, the old log's read, the
tuner's steps, the run history's first run, the publish), in fresh clones of this
repository with the same edit committed (`_unused = None` in the template's
schedule()):

- carried: `retune OP --target T` (the default: `pipeline.carry_step` finds that the
  edit changed no program and carries the set forward unmeasured);
- warm: `retune OP --target T --no-carry` (the history replay, the old search standing,
  the finals and the history run: what a no-op edit cost before);
- cold: the log set removed first, so `retune` tunes from nothing (early stop, the
  repository's trial budget).

`--reps` clones per arm, interleaved (carried, warm, cold, carried, ...), so the runner's
speed moves hit all arms alike. The anchor is the cold run; seconds are wall seconds of
the command on this machine, ratios from this one run. Raw: every command's seconds and
its last lines (`--out`).
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

from benchmarks._common import result_path, wait_idle

ROOT = Path(__file__).resolve().parents[1]
EDIT = ("def schedule(sch, cfg) -> None:\n", "def schedule(sch, cfg) -> None:\n    _unused = None  # a no-op edit\n")


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "bench",
            "GIT_AUTHOR_EMAIL": "bench@localhost",
            "GIT_COMMITTER_NAME": "bench",
            "GIT_COMMITTER_EMAIL": "bench@localhost",
            "PATH": "/usr/bin:/bin",
        },
    )


def prepare(scratch: Path, operator: str, target: str, arm: str) -> Path:
    """A clone with the no-op edit committed (and for `cold`, the set removed)."""
    repo = scratch / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    path = repo / "operators" / f"{operator}.py"
    text = path.read_text(encoding="utf-8")
    if EDIT[0] not in text:
        raise SystemExit(f"{path.relative_to(repo)} has no `{EDIT[0].strip()}` to edit")
    path.write_text(text.replace(EDIT[0], EDIT[1], 1), encoding="utf-8")
    if arm == "cold":
        shutil.rmtree(repo / "tuning_logs" / operator / target)
    git(repo, "commit", "-qam", "a no-op edit")
    return repo


def run_arm(operator: str, target: str, arm: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-noop-") as tmp:
        repo = prepare(Path(tmp), operator, target, arm)
        cmd = [sys.executable, "-m", "tvmtune_ci", "retune", operator, "--target", target]
        if arm == "warm":
            cmd.append("--no-carry")
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(
                f"{arm}: {' '.join(cmd[2:])} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            )
        check = subprocess.run(
            [sys.executable, "-m", "tvmtune_ci", "check", operator, "--target", target],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        carried = "carried forward, 0 trials" in r.stdout
        trials = sum(
            int(x.split(" trials")[0].rsplit(" ", 1)[-1])
            for x in r.stdout.splitlines()
            if x.startswith(f"{operator}/{target}/") and " trials (" in x
        )
        return {
            "arm": arm,
            "s": secs,
            "carried": carried,
            "trials": trials,
            "check": check.returncode,
            "tail": r.stdout.splitlines()[-6:],
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="a target this machine can measure, with committed logs")
    ap.add_argument("--operator", default="matmul")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--arms", default="carried,warm,cold")
    ap.add_argument("--wait-idle", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=result_path("bench_noop_edit", "raw", "jsonl"))
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    waited = wait_idle(args.wait_idle)
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    print(
        f"# bench_noop_edit: retune {args.operator} --target {args.target} after a no-op edit; "
        f"arms {', '.join(arms)}, {args.reps} rep(s) interleaved; {cpu}; waited {waited:.0f} s for idle",
        flush=True,
    )
    rows: list[dict[str, object]] = []
    with open(args.out, "a", encoding="utf-8") as out:
        for rep in range(args.reps):
            for arm in arms:
                row = {"rep": rep, "at": time.time(), **run_arm(args.operator, args.target, arm)}
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                print(
                    f"rep {rep} {arm}: {row['s']:.1f} s, {row['trials']} trials, carried {row['carried']}, "
                    f"check exit {row['check']}",
                    flush=True,
                )
    med = {a: statistics.median(float(r["s"]) for r in rows if r["arm"] == a) for a in arms}  # type: ignore[arg-type]
    print("\n| arm | seconds (median of reps) | / cold |")
    print("|---|---|---|")
    for a in arms:
        ratio = f"{med[a] / med['cold']:.3f}" if "cold" in med else "-"
        print(f"| {a} | {med[a]:.1f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
