"""Shared by the benchmarks (`python -m benchmarks.bench_x` from the repository root)."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The author and committer of a scratch repo's commits (no git config needed).
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def result_path(bench: str, kind: str = "", ext: str = "txt", machine: str | None = None) -> Path:
    """Where a new run of `bench` keeps its output: `results/<bench>/<date>_<machine>[_<kind>].<ext>`
    (the naming of benchmarks/results/README.md), dated today (UTC). `machine`: BENCH_MACHINE if
    set (name it as that folder's files do: zen4-2c), else this machine's architecture and cores."""
    machine = machine or os.environ.get("BENCH_MACHINE") or f"{platform.machine()}-{os.cpu_count()}c"
    name = "_".join(p for p in (time.strftime("%Y-%m-%d", time.gmtime()), machine, kind) if p)
    return ROOT / "benchmarks" / "results" / bench / f"{name}.{ext}"


def append_result(bench: str, lines: Sequence[str]) -> Path:
    """Append one run's `lines` to today's results file of `bench` (a day's runs on one
    machine, one file; a blank line between runs). Returns the file."""
    path = result_path(bench)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(("\n" if f.tell() else "") + "\n".join(lines) + "\n")
    return path


def snapshot(where: Path, root: Path = ROOT) -> Path:
    """`root`'s HEAD, unpacked into `where` (git archive): the code every step of a
    benchmark imports, so edits made while it runs do not reach it."""
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=root, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def git_commit(repo: Path, message: str, *, init: bool = False, paths: list[str] | None = None) -> None:
    """Commit `paths` (default: everything) in the scratch repo `repo` (`git init` it
    first with `init`)."""
    env = {**os.environ, **GIT_ENV}
    cmds = [["git", "init", "-q"]] if init else []
    for cmd in (*cmds, ["git", "add", *(["--", *paths] if paths else ["-A"])], ["git", "commit", "-qm", message]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)


def side_trials_to(
    found: Sequence[tuple[int, dict[str, Any]]], est: Mapping[str, Any], quality_s: float, noise: Any = None
) -> int | None:
    """The first trial by which a run had measured a configuration (`found`: (trial,
    knobs), by trial) that runs, side by side (`est`: knobs' JSON, sorted keys ->
    Estimate), at `quality_s` or faster, found by then whatever its search made of it;
    with `noise` (the quality's own Estimate) also one equal to it within the noise, as
    the finals judge (as fast as cold's slowest seed's best is otherwise a coin flip).
    None if none of `found` did. bench_transfer and bench_warmstart read it alike."""
    from tvmtune_ci.core import stats

    for trial, knobs in found:
        e = est.get(json.dumps(knobs, sort_keys=True))
        if e is not None and (e.value <= quality_s or (noise is not None and stats.compare(e, noise) != "slower")):
            return trial
    return None


def add_side_args(p: argparse.ArgumentParser) -> None:
    """--side-cap-s and --side-passes: how the bests are re-measured side by side."""
    p.add_argument(
        "--side-cap-s",
        type=float,
        default=6.0,
        help="the side-by-side runs' time cap per configuration (6 s; the finals' own is "
        "measure.time_cap_s: a noisy stretch within a 2 s cap left a best at +-6.4%%)",
    )
    p.add_argument(
        "--side-passes",
        type=int,
        default=2,
        help="side-by-side runs, every other one in reverse order; each configuration keeps "
        "its fastest (2: a slow mode of the runner lasting one configuration's turn is not its speed)",
    )


def side_passes(
    measure: Callable[[list[str]], Mapping[str, Any]], keys: Sequence[str], passes: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each configuration (`keys`) measured side by side in `passes` interleaved runs
    (`measure`: keys -> key -> Estimate), every other one in reverse order; kept per
    configuration: the run where it measured fastest. The runner's slow modes (1.3-2x for
    1-24 s) only ever add time, and one lasting a configuration's whole turn in one run
    (a best measured 1.11 ms +-0.9% in one run's finals and 2.20 ms +-10% side by side)
    is not that configuration's speed. Also returned: each run's estimates, to print."""
    runs: list[dict[str, Any]] = []
    for i in range(max(passes, 1)):
        order = list(keys) if i % 2 == 0 else list(reversed(keys))
        runs.append(dict(measure(order)))
    best: dict[str, Any] = {}
    for run in runs:
        for key, e in run.items():
            if e is not None and (key not in best or e.value < best[key].value):
                best[key] = e
    return best, runs


@dataclass(frozen=True)
class AgainstSpread:
    """One arm's bests against cold's, side by side, over seeds: the ratio of the
    medians, its interval (the medians of the arm's 95% bounds over those of cold's
    other bound), and cold's own spread (slowest / fastest of its seeds)."""

    ratio: float
    lo: float
    hi: float
    spread: float

    @property
    def verdict(self) -> str:
        """ "slower": the whole interval beyond cold's spread; "point": the ratio beyond it
        but not its interval, so the noise of the measurement could make it; "within": the
        ratio within it, or faster; "not measured"."""
        if not all(math.isfinite(x) for x in (self.ratio, self.lo, self.spread)):
            return "not measured"
        if self.lo > self.spread:
            return "slower"
        return "point" if self.ratio > self.spread else "within"

    def words(self) -> str:
        return {
            "slower": "slower beyond it, and beyond the noise",
            "point": "beyond it on the point figure, not beyond the noise",
            "within": "within it or faster",
            "not measured": "not measured",
        }[self.verdict]


def against_spread(arm: Sequence[Any], cold: Sequence[Any]) -> AgainstSpread:
    """`arm` and `cold`: each seed's best, side by side (Estimates: value, lo, hi; None
    when not measured). A best slower than cold's by more than cold's seeds differ
    among themselves is a regression only when the measurement's own noise cannot
    explain it: the one side-by-side run had a noisy stretch (a best at +-6.4%) and
    cold's seeds agreed within 0.7%."""
    a = [e for e in arm if e is not None]
    c = [e for e in cold if e is not None]
    if not a or not c or len(c) < len(cold):
        return AgainstSpread(math.nan, math.nan, math.nan, math.nan)
    med = statistics.median
    return AgainstSpread(
        ratio=med(e.value for e in a) / med(e.value for e in c),
        lo=med(e.lo for e in a) / med(e.hi for e in c),
        hi=med(e.hi for e in a) / med(e.lo for e in c),
        spread=max(e.value for e in c) / min(e.value for e in c),
    )


def wait_idle(limit_s: float) -> float:
    """Seconds waited (at most limit_s) for the 1-minute load average to drop below 0.5.

    Other processes' load is noise in every ratio a benchmark prints.
    """
    t0 = time.monotonic()
    while os.getloadavg()[0] >= 0.5 and time.monotonic() - t0 < limit_s:
        time.sleep(5)
    return time.monotonic() - t0


def replay_sets(root: Path, target: str) -> Iterator[tuple[Any, ModuleType, str, dict[str, Any], list[dict[str, Any]]]]:
    """Per committed log set in `root/tuning_logs/*/target/` whose template has its first
    workload: (manifest, template, workload, target dict, the old configurations a replay
    takes, mapped into the template as it is now as a re-tune maps them). SystemExit when
    there is no such folder."""
    from tvmtune_ci.core import history
    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.measure import full_knobs

    manifests = sorted(root.glob(f"tuning_logs/*/{target}/manifest.json"))
    if not manifests:
        raise SystemExit(f"no tuning_logs/*/{target}/manifest.json in {root}")
    for manifest_path in manifests:
        manifest = read_manifest(manifest_path)
        tgt = dict(manifest.target)
        template = import_template(root / manifest.template_file, root)
        workload = next(iter(manifest.results), None)
        if workload is None or workload not in template.WORKLOADS:
            continue
        configs = [
            full_knobs(template, workload, m.knobs, tgt)
            for m in history.map_all(
                history.old_configs(manifest, workload), template.KNOBS, template.WORKLOADS[workload], tgt
            )
        ]
        yield manifest, template, workload, tgt, configs


def replay_set_args(doc: str, argv: list[str] | None, per: str) -> argparse.Namespace:
    """The command line of a benchmark over `replay_sets`: --target, --rounds (interleaved
    rounds per `per`), --wait-idle."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--target", required=True, help="a folder name under tuning_logs/OP/ (e.g. zen3-2c)")
    p.add_argument("--rounds", type=int, default=3, help=f"interleaved rounds per {per} (3)")
    p.add_argument("--wait-idle", type=float, default=60.0)
    return p.parse_args(argv)
