"""Benchmark: a new workload added to a tuned set (`retune` after the WORKLOADS edit)
against the same workload tuned alone, cold (issue 51, part 5: new workloads).

    .venv/bin/python -m benchmarks.bench_transfer --raw benchmarks/results/bench_transfer/DATE_MACHINE_raw.jsonl \
        | tee benchmarks/results/bench_transfer/DATE_MACHINE.txt    # every case, 3 seeds, 32 trials
    .venv/bin/python -m benchmarks.bench_transfer --operators matmul dense --seeds 5
    .venv/bin/python -m benchmarks.bench_transfer --operators matmul --workloads m1021 \\
        --seeds 1 --trials 8 --history-s 10                      # a smoke run (minutes)

The cases (a workload w and its siblings), per CPU template of this repository
(operators/*.py whose TARGET_KINDS take llvm):

- left out: each workload a template declares, when it declares two or more (a
  template declares one at least: conv2d's only workload has no sibling to leave);
  its siblings are the template's other workloads;
- new shapes (unless --no-new-shapes): each shape of the models (models/*.coverage.json,
  written by `tvmtune-ci models`) that a template implements but declares no workload
  of: BERT-base's 768 x 768 dense and attention softmax, the ResNet-50 stage's 1x1
  conv2d. Their siblings are every workload the template declares.

For each case and seed s (--seed, +1, ...; the seeds outer, the cases inner), in
scratch git repos holding a snapshot of this checkout's HEAD (git archive: the code
every retune and this script import, so edits made meanwhile do not reach it), a
template edited in its WORKLOADS only and a tvmtune.yaml of one target (this CPU:
LLVM's name for it, --cores cores) with this repository's measure settings:

- transfer: the template declaring the siblings, `retune OP --trials N --seed s
  --commit`; then w added to its WORKLOADS, committed, and the timed `retune OP
  --trials N --seed s --commit`: what a team adding a shape runs in CI.
- cold: the template declaring only w, the same timed retune.

A template's text is a function of its set of workloads, so a set tuned once with a
seed serves every case that needs it (m1021's cold repo is m1024's siblings' repo).

Read from each timed retune: its wall seconds (the run of the history included), and
from the published results.json, manifest.json and README.md w's trials, why it
stopped, its final best, and its curve (best-so-far GFLOPS of the search's own
measurements per trial: the curve holds no times). The seconds to a point of the
curve come from the retune's progress lines, stamped here as they arrive (one per
batch, at most every 10 s: each gives the trials done so far): the seconds from the
retune's start to the first line of w at or past that trial, an upper bound.

Cold's quality (the goal) is the slowest of cold's seeds' final search bests (their
curve's last point): a run that reaches it is within cold's own spread between
seeds. Per case: the trials and seconds each transfer run needed to reach it; every
arm's and seed's best re-measured side by side in interleaved `measure.finals`
runs (machine drift hits all alike; --side-passes of them, every other in reverse
order, each configuration's fastest kept: `_common.side_passes`), transfer / cold against cold's own spread
(slowest / fastest of its seeds there), slower beyond it only when the ratio's 95%
interval is (`_common.against_spread`); in the same run each transfer run's top
configurations (results.json's top rows within 10% of its best, with the trial that
first measured each), for a second reading of cold's quality taken side by side: the
first trial by which a transfer run had measured a configuration as fast as cold's
slowest seed's best, both re-measured here, and the seconds of its progress line
(an upper bound); and the cost of adding w to the set (the
transfer retune's seconds) against tuning w alone (the cold retune's seconds).
Last, the medians over the cases against the issue's targets: seconds to cold's
quality <= 1/4 of cold's seconds (cold's whole retune); adding a workload <= tuning it
alone + 10 s. Beside them the same readings over cold's own seconds to its quality
(bench_warmstart's denominator), the stricter one.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import (
    GIT_ENV,
    add_side_args,
    against_spread,
    git_commit,
    side_passes,
    side_trials_to,
    snapshot,
    wait_idle,
)

ROOT = Path(__file__).resolve().parents[1]
TARGET_NAME = "this-cpu"
ARMS = ("cold", "transfer")
# The retune's words about what seeded a search, what it replayed and carried, and its
# history run: printed for the transfer arm (part 2's sibling seeding shows here).
SEEDING = re.compile(r"sibling|seed(ed|ing|s )|mapped|cold search|replay|carr(y|ied)|history|partial", re.IGNORECASE)
README_SEEDING = re.compile(r"sibling|seeded|mapped", re.IGNORECASE)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=32, help="--trials of every retune (32, as in issue 51)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per arm (3)")
    p.add_argument("--seed", type=int, default=42, help="the first seed (42)")
    p.add_argument("--operators", nargs="*", default=None, help="only these templates (default: every CPU one)")
    p.add_argument(
        "--workloads",
        nargs="*",
        default=None,
        help="only these cases, by the new workload's name (see the list printed first)",
    )
    p.add_argument(
        "--no-new-shapes", action="store_true", help="only the left-out cases, not the models' undeclared shapes"
    )
    p.add_argument("--cores", type=int, default=2, help="the target's num-cores (2)")
    p.add_argument(
        "--history-s",
        type=float,
        default=None,
        help="measure.history_s in the scratch repos (default: this repo's; the issue's "
        "target includes the history run, so lower it only for a smoke run)",
    )
    p.add_argument(
        "--usable-precision",
        type=float,
        default=None,
        help="measure.usable_precision in the scratch repos (default: this repo's); raise it "
        "on a loaded machine, where retune refuses a runner too noisy, and say so",
    )
    add_side_args(p)
    p.add_argument(
        "--wait-idle", type=float, default=120.0, help="seconds to wait at most for a quiet machine first (120)"
    )
    p.add_argument(
        "--raw",
        type=Path,
        default=None,
        help="write every timed retune (arm, seed, seconds, curve, progress, its lines) to this JSONL",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the scratch repos under this folder")
    p.add_argument("--list", action="store_true", help="print the cases and stop")
    return p.parse_args(argv)


# -- the cases -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    operator: str
    workload: str  # the new one
    siblings: tuple[str, ...]  # the set it is added to
    kind: str  # "left out" or "new shape (MODEL)"


def workloads_node(text: str) -> ast.Assign | ast.AnnAssign:
    """The module-level `WORKLOADS = {...}` of a template's source."""
    for stmt in ast.parse(text).body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "WORKLOADS" for t in stmt.targets):
            return stmt
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id == "WORKLOADS"
            and stmt.value is not None
        ):
            return stmt
    raise ValueError("no module-level WORKLOADS assignment")


def declared(text: str) -> dict[str, dict[str, Any]]:
    """A template's WORKLOADS (a literal), in its order."""
    node = workloads_node(text)
    assert node.value is not None
    value = ast.literal_eval(node.value)
    if not isinstance(value, dict):
        raise ValueError("WORKLOADS is not a dict")
    return value


def with_workloads(text: str, workloads: dict[str, dict[str, Any]]) -> str:
    """The template's source with its WORKLOADS assignment replaced by `workloads`: the
    same text for the same dict, whatever the source held before (so a set's template
    is one file, byte for byte, in every repo that declares that set)."""
    node = workloads_node(text)
    lines = text.splitlines(keepends=True)
    assert node.end_lineno is not None
    block = (
        "WORKLOADS = {\n"
        + "".join(
            f"    {json.dumps(name)}: {{{', '.join(f'{json.dumps(k)}: {v!r}' for k, v in params.items())}}},\n"
            for name, params in workloads.items()
        )
        + "}\n"
    )
    return "".join(lines[: node.lineno - 1]) + block + "".join(lines[node.end_lineno :])


def shape_name(model: str, params: dict[str, Any], first: dict[str, Any]) -> str:
    """A name for a model's shape: the model, then the parameters that differ from the
    template's first workload (`bert_layer_n768_k768`)."""
    diff = [f"{k.lower()}{v}" for k, v in params.items() if first.get(k) != v]
    return "_".join([model, *diff]) if diff else f"{model}_shape"


def new_shapes(coverage: dict[str, Any], template: str) -> list[dict[str, Any]]:
    """The parameters of each shape a model's coverage says `template` implements but
    declares no workload of, once each, in the coverage's order."""
    out: list[dict[str, Any]] = []
    for call in coverage.get("calls", []):
        cov = call.get("coverage", {})
        if (
            cov.get("status") == "uncovered_shape"
            and cov.get("template") == template
            and isinstance(cov.get("params"), dict)
            and cov["params"] not in out
        ):
            out.append(dict(cov["params"]))
    return out


def find_cases(
    src: Path, operators: list[str] | None, new: bool
) -> tuple[list[Case], dict[str, dict[str, dict[str, Any]]], list[str]]:
    """The cases; per operator every workload any case needs (its declared ones first,
    in their order, then the models' shapes); the notes on what was skipped."""
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.template import discover_templates, read_template

    models = load_config(src / "tvmtune.yaml").models if new else ()
    cases: list[Case] = []
    shapes: dict[str, dict[str, dict[str, Any]]] = {}
    notes: list[str] = []
    for path in discover_templates(src / "operators"):
        if "llvm" not in read_template(path).kinds or (operators and path.stem not in operators):
            continue
        op = path.stem
        decl = declared(path.read_text())
        shapes[op] = dict(decl)
        first = next(iter(decl.values()))
        if len(decl) > 1:
            cases += [Case(op, w, tuple(x for x in decl if x != w), "left out") for w in decl]
        else:
            notes.append(f"{op}/{next(iter(decl))}: not left out (the template's only workload)")
        for m in models:
            cov_path = src / "models" / f"{m.name}.coverage.json"
            if not cov_path.is_file():
                notes.append(f"{m.name}: no {cov_path.name} (`tvmtune-ci models` writes it): no new shapes from it")
                continue
            for params in new_shapes(json.loads(cov_path.read_text()), op):
                params = {k: params[k] for k in [*first, *params] if k in params}  # the template's order
                name = shape_name(m.name, params, first)
                while name in shapes[op]:
                    name += "_"
                shapes[op][name] = params
                cases.append(Case(op, name, tuple(decl), f"new shape ({m.name})"))
    return cases, shapes, notes


# -- the scratch repos and the retunes --------------------------------------------------


class RetuneFailed(Exception):
    """A retune exited non-zero: that case is reported as failed, the others go on."""


@dataclass
class Retune:
    """One timed `retune`: its wall seconds and its output lines, each stamped with the
    seconds since it started."""

    seconds: float
    lines: list[tuple[float, str]]


@dataclass
class Arm:
    """What one arm's timed retune gave for the new workload."""

    repo: Path
    retune: Retune
    trials: int
    stop: str
    best_s: float
    curve: list[tuple[int, float]]
    progress: list[tuple[int, float]]  # (trials done, seconds since the retune started)
    readme: list[str] = field(default_factory=list)
    # (the trial that first measured it, knobs) of its published best and top table,
    # by trial (results.json names the trial since 2026-12-06); the best's trial is the
    # run's last when the search never measured it (a default or previous best won).
    found: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


def scratch_config(src: Path, target: dict[str, Any], args: argparse.Namespace, seed: int) -> str:
    cfg = yaml.safe_load((src / "tvmtune.yaml").read_text())
    for key in ("keep", "operators", "models"):
        cfg.pop(key, None)
    cfg.update(trials=args.trials, seed=seed, targets={TARGET_NAME: {"target": target}}, trial_tiers="off")
    measure = cfg.setdefault("measure", {})
    if args.history_s is not None:
        measure["history_s"] = args.history_s
    if args.usable_precision is not None:
        measure["usable_precision"] = args.usable_precision
    return "# written by benchmarks/bench_transfer.py\n" + yaml.safe_dump(cfg, sort_keys=False)


def write_template(src: Path, repo: Path, op: str, workloads: dict[str, dict[str, Any]]) -> None:
    text = (src / "operators" / f"{op}.py").read_text()
    (repo / "operators" / f"{op}.py").write_text(with_workloads(text, workloads))


def new_repo(src: Path, where: Path, op: str, workloads: dict[str, dict[str, Any]], config: str) -> Path:
    """A git repo of the operator's template (declaring `workloads`), its helpers and `config`."""
    from tvmtune_ci.core.template import discover_templates

    where.mkdir(parents=True)
    shutil.copytree(src / "operators", where / "operators", ignore=shutil.ignore_patterns("__pycache__"))
    for path in discover_templates(where / "operators"):
        if path.stem != op:
            path.unlink()
    write_template(src, where, op, workloads)
    (where / "tvmtune.yaml").write_text(config)
    git_commit(where, f"{op}: {', '.join(workloads)}", init=True)
    return where


def retune(src: Path, repo: Path, op: str, trials: int, seed: int) -> Retune:
    """`tvmtune-ci retune OP --trials N --seed S --commit` in `repo` (the snapshot's code),
    its lines stamped as they arrive."""
    env = {**os.environ, **GIT_ENV, "PYTHONPATH": str(src), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "tvmtune_ci", "retune", op, "--trials", str(trials), "--seed", str(seed), "--commit"]
    lines: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.perf_counter() - t0, line.rstrip("\n")))
        rc = proc.wait()
    seconds = time.perf_counter() - t0
    if rc != 0:
        text = "\n".join(x for _, x in lines[-40:])
        raise RetuneFailed(f"retune {op} in {repo} failed ({rc}) after {seconds:.0f} s; its last lines:\n{text}")
    return Retune(seconds, lines)


def progress_points(lines: Sequence[tuple[float, str]], label: str) -> list[tuple[int, float]]:
    """(trials done, seconds) of `label`'s progress lines ("LABEL: 16/32 trials, ...")."""
    pat = re.compile(re.escape(label) + r": (\d+)/\d+ trials")
    return [(int(m.group(1)), t) for t, line in lines if (m := pat.match(line))]


def trials_to(curve: Sequence[tuple[int, float]], goal_gflops: float) -> int | None:
    """The first trial whose best-so-far reached `goal_gflops`; None if none did."""
    return next((t for t, g in curve if g >= goal_gflops), None)


def seconds_at(points: Sequence[tuple[int, float]], trial: int | None, end: float | None = None) -> float | None:
    """Seconds of the first progress point at or past `trial`: an upper bound of when
    the search got there; `end` (the retune's whole seconds, a looser bound) when the
    search stopped after its last progress line. None for no trial."""
    if trial is None:
        return None
    return next((s for done, s in points if done >= trial), end)


def read_arm(repo: Path, op: str, w: str, run: Retune) -> Arm:
    folder = repo / "tuning_logs" / op / TARGET_NAME
    manifest = json.loads((folder / "manifest.json").read_text())
    results = json.loads((folder / "results.json").read_text())["results"]
    t = manifest["trials"][w]
    r = results[w]
    readme = [line.strip() for line in (folder / "README.md").read_text().splitlines() if README_SEEDING.search(line)]
    return Arm(
        repo=repo,
        retune=run,
        trials=int(t["run"]),
        stop=t.get("stop_detail") or t["stop_reason"],
        best_s=float(r["best"]["latency_s"]),
        curve=[(int(a), float(b)) for a, b in r.get("curve", [])],
        progress=progress_points(run.lines, f"{op}/{TARGET_NAME}/{w}"),
        readme=readme,
        found=found_by_trial(r, int(t["run"])),
    )


def found_by_trial(
    result: dict[str, Any], run: int, within: float = 1.10, top: int = 5
) -> list[tuple[int, dict[str, Any]]]:
    """(trial, knobs) of a published result's best and of its top table's rows within
    `within` of the best as published (at most `top`; slower ones are nobody's quality and
    would only lengthen the side-by-side run), each configuration once, by trial. A row
    with no trial (the default, a previous best, a results.json older than the field)
    counts at the run's end, `run`: the reading stays an upper bound."""
    best = result["best"]
    rows = [best] + [m for m in result.get("top", []) if m["latency_s"] <= within * best["latency_s"]][:top]
    out: dict[str, tuple[int, dict[str, Any]]] = {}
    for m in rows:
        key = json.dumps(m["knobs"], sort_keys=True)
        if key not in out:
            out[key] = (m.get("trial") or run, dict(m["knobs"]))
    return sorted(out.values(), key=lambda x: x[0])


class Sets:
    """Scratch repos by (operator, workload set, seed), each tuned once and committed;
    the retune that tuned it is the cold arm when the set is one workload."""

    def __init__(
        self,
        src: Path,
        base: Path,
        shapes: dict[str, dict[str, dict[str, Any]]],
        target: dict[str, Any],
        args: argparse.Namespace,
    ) -> None:
        self.src, self.base, self.shapes, self.target, self.args = src, base, shapes, target, args
        self.tuned: dict[tuple[str, tuple[str, ...], int], tuple[Path, Retune]] = {}

    def workloads(self, op: str, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """`names` in the operator's order: one set, one template text."""
        return {w: p for w, p in self.shapes[op].items() if w in names}

    def get(self, op: str, names: Sequence[str], seed: int) -> tuple[Path, Retune]:
        key = (op, tuple(self.workloads(op, names)), seed)
        if key not in self.tuned:
            where = self.base / f"{op}-{'+'.join(key[1])}@{seed}"
            if len(where.name) > 120:
                where = self.base / f"{op}-set{len(self.tuned)}@{seed}"
            repo = new_repo(
                self.src, where, op, self.workloads(op, names), scratch_config(self.src, self.target, self.args, seed)
            )
            run = retune(self.src, repo, op, self.args.trials, seed)
            self.tuned[key] = (repo, run)
            print(f"  tuned {op} {{{', '.join(key[1])}}} seed {seed}: {run.seconds:.0f} s", flush=True)
        return self.tuned[key]

    def cold(self, case: Case, seed: int) -> Arm:
        repo, run = self.get(case.operator, [case.workload], seed)
        return read_arm(repo, case.operator, case.workload, run)

    def transfer(self, case: Case, seed: int) -> Arm:
        base, _ = self.get(case.operator, case.siblings, seed)
        repo = self.base / f"transfer-{case.operator}-{case.workload}@{seed}"
        shutil.copytree(base, repo, symlinks=True)
        write_template(self.src, repo, case.operator, self.workloads(case.operator, [*case.siblings, case.workload]))
        git_commit(repo, f"{case.operator}: add workload {case.workload}", paths=[f"operators/{case.operator}.py"])
        run = retune(self.src, repo, case.operator, self.args.trials, seed)
        return read_arm(repo, case.operator, case.workload, run)


# -- the report --------------------------------------------------------------------------


def goal_of(cold_finals: Sequence[float]) -> float:
    """Cold's quality: the slowest (lowest GFLOPS) of its seeds' final search bests;
    whatever reaches it is within cold's own spread between seeds."""
    return min(cold_finals)


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def at(trial: int | None, secs: float | None) -> str:
    """`at trial 9 (17 s into the retune)`, or `not reached`."""
    return "not reached" if trial is None else f"at trial {trial} ({fmt_s(secs)} into the retune)"


def fmt_s(x: float | None) -> str:
    return "not reached" if x is None or not math.isfinite(x) else f"{x:.0f} s"


def side_by_side(
    case: Case, arms: dict[str, list[Arm]], target: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """Every arm's and seed's best, and the transfer runs' top rows (`Arm.found`), in one
    interleaved finals run, each configuration once: knobs key -> Estimate, and
    "ARM@K" -> that run's best's Estimate."""
    from tvmtune_ci.core import stats
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.builder import make_builder
    from tvmtune_ci.tune.measure import Finalist, finals
    from tvmtune_ci.tune.runners import make_runner
    from tvmtune_ci.tune.workload import resolve

    repo = arms["transfer"][0].repo  # declares w and its siblings; the same text in every seed
    for mod in [m for m in sys.modules if m == "operators" or m.startswith("operators.")]:
        del sys.modules[mod]  # the helpers of the previous case's template
    sys.path[:] = [p for p in sys.path if not Path(p).name.startswith("transfer-")]
    tmpl = import_template(repo / "operators" / f"{case.operator}.py", repo)
    measure = replace(load_config(repo / "tvmtune.yaml").measure, time_cap_s=args.side_cap_s)
    best_key: dict[str, str] = {}
    cands: dict[str, dict[str, Any]] = {}
    for a in ARMS:
        for k, arm in enumerate(arms[a]):
            best = json.loads((arm.repo / "tuning_logs" / case.operator / TARGET_NAME / "results.json").read_text())[
                "results"
            ][case.workload]["best"]["knobs"]
            best_key[f"{a}@{k}"] = json.dumps(best, sort_keys=True)
            cands[best_key[f"{a}@{k}"]] = dict(best)
            if a == "transfer":
                cands.update((json.dumps(kn, sort_keys=True), kn) for _, kn in arm.found)
    wl = resolve(tmpl, case.workload, target)
    runner, builder = make_runner(measure), make_builder()

    def one_run(order: list[str]) -> dict[str, Any]:
        fs = [Finalist("search", cands[key], key) for key in order]
        res = finals(tmpl, wl, target, fs, measure, runner=runner, builder=builder)
        return {r.finalist.key: r.estimate for r in res if r.estimate is not None}

    try:
        by_knobs, runs = side_passes(one_run, list(cands), args.side_passes)
    finally:
        runner.close()
        builder.close()
    if len(runs) > 1:
        for a, key in best_key.items():
            print(
                f"  {a}'s best in each side-by-side run: "
                + ", ".join(stats.fmt_latency(r[key]) if r.get(key) is not None else "-" for r in runs),
                flush=True,
            )
    return {**by_knobs, **{a: by_knobs[key] for a, key in best_key.items() if key in by_knobs}}


def case_report(case: Case, arms: dict[str, list[Arm]], est: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    from tvmtune_ci.core import stats

    cold, tr = arms["cold"], arms["transfer"]
    finals_g = [a.curve[-1][1] for a in cold if a.curve]
    goal = goal_of(finals_g) if finals_g else math.inf
    print(f"\n## {case.operator}/{case.workload} ({case.kind}; siblings {', '.join(case.siblings)})\n", flush=True)
    print(
        f"cold's quality: {goal:.1f} GFLOPS (the slowest of cold's {len(finals_g)} final search bests: "
        + ", ".join(f"{g:.1f}" for g in finals_g)
        + ")"
    )
    # Cold's quality side by side: the slowest cold seed's best as re-measured there (the
    # curves' figures of two runs come from two stretches of the runner, minutes apart).
    cold_side = [e for k in range(len(cold)) if (e := est.get(f"cold@{k}")) is not None]
    q_est = max(cold_side, key=lambda e: e.value) if cold_side else None
    q_side = q_est.value if q_est is not None else math.nan
    print(
        "cold's quality side by side: "
        + (f"{q_side * 1e3:.4g} ms (the slowest of cold's seeds' bests, re-measured)" if cold_side else "not measured")
    )
    row: dict[str, Any] = {"case": case, "arms": {}}
    for a in ARMS:
        for k, arm in enumerate(arms[a]):
            end = arm.retune.seconds
            t = trials_to(arm.curve, goal)
            s = seconds_at(arm.progress, t, end)
            e = est.get(f"{a}@{k}")
            side = stats.fmt_latency(e.value, e.rel_halfwidth) if e is not None else "not measured"
            t2 = side_trials_to(arm.found, est, q_side) if a == "transfer" and cold_side else None
            s2 = seconds_at(arm.progress, t2, end)
            t3 = side_trials_to(arm.found, est, q_side, q_est) if a == "transfer" and cold_side else None
            s3 = seconds_at(arm.progress, t3, end)
            row["arms"][f"{a}@{k}"] = {
                "s": arm.retune.seconds,
                "run": arm.trials,
                "t_goal": t,
                "s_goal": s if s is not None else math.inf,
                "t_side": t2,
                "s_side": s2 if s2 is not None else math.inf,
                "t_noise": t3,
                "s_noise": s3 if s3 is not None else math.inf,
                "best": e.value if e is not None else math.nan,
            }
            curve = " ".join(f"{n}:{g:.0f}" for n, g in arm.curve)
            side_q = f"; side by side {at(t2, s2)}, within its noise {at(t3, s3)}" if a == "transfer" else ""
            print(
                f"  {a} seed {seeds[k]}: {arm.retune.seconds:.0f} s wall, {arm.trials} trials ({arm.stop}); "
                f"cold's quality on its curve {at(t, s)}{side_q}; best {arm.best_s * 1e3:.4g} ms as "
                f"published, {side} side by side",
                flush=True,
            )
            if a == "transfer":
                print(
                    "    found (trial: side by side): "
                    + " ".join(
                        f"{n}:{stats.fmt_latency(x.value, x.rel_halfwidth) if (x := est.get(json.dumps(kn, sort_keys=True))) else '-'}"
                        for n, kn in arm.found
                    )
                )
            print(f"    curve (trial:GFLOPS): {curve}")
            print("    progress (trials@s): " + " ".join(f"{n}@{x:.0f}" for n, x in arm.progress))
    seen: set[str] = set()
    for k, arm in enumerate(tr):  # the retune's own words on the transfer: what seeded w
        words = [
            x
            for _, x in arm.retune.lines
            if SEEDING.search(x) and " trials, search best " not in x and not x.lstrip().startswith("measure:")
        ]
        words += [
            x
            for _, x in arm.retune.lines
            if x.startswith(f"{case.operator}/{TARGET_NAME}/") and " trials, search best " not in x
        ]
        new = [x for x in dict.fromkeys(words) if x not in seen]
        seen.update(new)
        if new:
            print(f"  transfer seed {seeds[k]}, the retune said" + (" (beyond the seeds before)" if k else "") + ":")
            for x in new:
                print(f"    | {x}")
        readme = [x for x in dict.fromkeys(arm.readme) if x not in seen]
        seen.update(readme)
        for x in readme:
            print(f"    README: {x[:300]}")
    sp = against_spread(
        [est.get(f"transfer@{k}") for k in range(len(tr))], [est.get(f"cold@{k}") for k in range(len(cold))]
    )
    row.update(
        goal=goal,
        spread=sp.spread,
        ratio=sp.ratio,
        ratio_lo=sp.lo,
        ratio_hi=sp.hi,
        verdict=sp.verdict,
        slower=sp.verdict == "slower" if sp.verdict != "not measured" else None,
    )
    print(
        f"  side by side (interleaved, each configuration's fastest run): transfer / cold {sp.ratio:.3f} ({sp.lo:.3f}-{sp.hi:.3f}, the "
        f"medians over seeds and their 95% bounds); cold's own spread {sp.spread:.3f} (slowest / fastest of its "
        f"seeds): {sp.words()}",
        flush=True,
    )
    return row


def summary(rows: list[dict[str, Any]], seeds: int) -> None:
    def m(r: dict[str, Any], arm: str, key: str) -> float:
        return med([r["arms"][f"{arm}@{k}"][key] for k in range(seeds)])

    print(f"\n## summary (medians over {seeds} seed(s) per case)\n")
    print(
        "| case | kind | cold: s, trials | cold to its quality: s | transfer: s, trials "
        "| transfer to cold's quality: trials, s | s to quality / cold s "
        "| side by side: trials, s | side s / cold s | within noise: trials, s | noise s / cold s | add cost - alone "
        "| transfer / cold best (side by side) | cold's spread |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    q_ratio, q2_ratio, q3_ratio, t_ratio, t2_ratio, t3_ratio = [], [], [], [], [], []
    add_diff, add_ratio, slower, point = [], [], [], []
    own: list[list[float]] = [[], [], []]  # the three readings over cold's own seconds to its quality
    for r in rows:
        c = r["case"]
        cs, ts = m(r, "cold", "s"), m(r, "transfer", "s")
        tg = m(r, "transfer", "s_goal")
        tt = med(
            [
                float(r["arms"][f"transfer@{k}"]["t_goal"])
                if r["arms"][f"transfer@{k}"]["t_goal"] is not None
                else math.inf
                for k in range(seeds)
            ]
        )
        tg2, tg3 = m(r, "transfer", "s_side"), m(r, "transfer", "s_noise")
        tt2, tt3 = (
            med([float(x) if (x := r["arms"][f"transfer@{k}"][key]) is not None else math.inf for k in range(seeds)])
            for key in ("t_side", "t_noise")
        )
        cq = m(r, "cold", "s_goal")  # cold's own seconds to its quality, on its curves
        for qs, ts_, secs, trials, mine in (
            (q_ratio, t_ratio, tg, tt, own[0]),
            (q2_ratio, t2_ratio, tg2, tt2, own[1]),
            (q3_ratio, t3_ratio, tg3, tt3, own[2]),
        ):
            qs.append(secs / cs)
            ts_.append(trials / m(r, "cold", "run"))
            mine.append(secs / cq)
        add_diff.append(ts - cs)
        add_ratio.append(ts / cs)
        if r["slower"]:
            slower.append(f"{c.operator}/{c.workload} ({r['ratio']:.3f} > {r['spread']:.3f})")
        elif r.get("verdict") == "point":
            point.append(
                f"{c.operator}/{c.workload} ({r['ratio']:.3f}, {r['ratio_lo']:.3f}-{r['ratio_hi']:.3f} > {r['spread']:.3f})"
            )
        print(
            f"| {c.operator}/{c.workload} | {c.kind} | {cs:.0f} s, {m(r, 'cold', 'run'):.0f} | "
            f"{fmt_s(m(r, 'cold', 's_goal'))} | {ts:.0f} s, {m(r, 'transfer', 'run'):.0f} | {tt:.0f}, {fmt_s(tg)} | {tg / cs:.2f} | "
            f"{tt2:.0f}, {fmt_s(tg2)} | {tg2 / cs:.2f} | {tt3:.0f}, {fmt_s(tg3)} | {tg3 / cs:.2f} | "
            f"{ts - cs:+.0f} s | {r['ratio']:.3f} | {r['spread']:.3f} |"
        )
    print()
    print(
        f"transfer's seconds to cold's quality / cold's seconds: median {med(q_ratio):.2f} over {len(rows)} "
        f"case(s) (range {min(q_ratio):.2f}-{max(q_ratio):.2f}); target <= 0.25"
    )
    print(f"transfer's trials to cold's quality / cold's trials: median {med(t_ratio):.2f}")
    print(
        f"side by side (each run's top configurations and cold's bests, interleaved, "
        f"by the trial that found them): seconds to cold's quality / cold's seconds: median "
        f"{med(q2_ratio):.2f} (range {min(q2_ratio):.2f}-{max(q2_ratio):.2f}), trials "
        f"{med(t2_ratio):.2f}; target <= 0.25"
    )
    print(
        f"the same, a configuration equal to cold's quality within the noise (as the finals judge) counted "
        f"as reaching it: median {med(q3_ratio):.2f} (range {min(q3_ratio):.2f}-{max(q3_ratio):.2f}), trials "
        f"{med(t3_ratio):.2f}; target <= 0.25"
    )
    print(
        f"adding the workload to its set / tuning it alone: median {med(add_ratio):.2f} "
        f"({med(add_diff):+.0f} s; range {min(add_diff):+.0f} to {max(add_diff):+.0f} s); target <= +10 s"
    )
    # The other denominator (bench_warmstart's): cold's own seconds to the quality it
    # defines. On small spaces cold's first batches often hold it, while the transfer
    # pays its seeding before its first trial: the stricter reading.
    print(
        "over cold's own seconds to its quality (on its curves; not the target's denominator, cold's whole "
        f"retune): curves median {med(own[0]):.2f}, side by side {med(own[1]):.2f}, within the noise "
        f"{med(own[2]):.2f}"
    )
    print(
        "cases whose transfer best is slower than cold's beyond cold's own spread, and beyond the noise: "
        + (", ".join(slower) or "none")
    )
    print(
        "cases beyond it on the point figure only (the interval reaches within it): " + (", ".join(point) or "none"),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-transfer-"))
    if args.keep:
        base.mkdir(parents=True, exist_ok=True)
    try:
        src = snapshot(base / "src")
        sys.path.insert(0, str(src))
        cases, shapes, notes = find_cases(src, args.operators, not args.no_new_shapes)
        if args.workloads:
            cases = [c for c in cases if c.workload in args.workloads]
        if not cases:
            raise SystemExit("no case: check --operators and --workloads (--list lists them)")
        if args.list:
            for c in cases:
                print(
                    f"{c.operator}/{c.workload}: {c.kind}, {shapes[c.operator][c.workload]}, "
                    f"siblings {', '.join(c.siblings)}"
                )
            for n in notes:
                print(f"# {n}")
            return 0
        run(args, src, base, cases, shapes, notes)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


def run(
    args: argparse.Namespace,
    src: Path,
    base: Path,
    cases: list[Case],
    shapes: dict[str, dict[str, dict[str, Any]]],
    notes: list[str],
) -> None:
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.tune import tvmsetup

    tvmsetup.load()
    from tvmtune_ci.tune.hostcheck import check_host, host_description, host_target

    target = host_target(args.cores)
    os.environ["TVM_NUM_THREADS"] = str(args.cores)  # as `retune` runs the kernels of the target
    check_host(target, advice="run this benchmark on the machine whose CPU it tunes")
    host = host_description()
    head = subprocess.run(
        ["git", "log", "-1", "--format=%h %cs %s"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    measure = load_config(src / "tvmtune.yaml").measure
    waited = wait_idle(args.wait_idle)
    seeds = [args.seed + k for k in range(args.seeds)]
    print(
        f"# bench_transfer: a workload added to its tuned set vs tuned alone (cold), issue 51 part 5; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    )
    print(
        f"# host: {host.get('cpu')} ({host.get('cpu_id', '?')}), {host.get('cores')} cores seen; LLVM cpu "
        f"{tvmsetup.host_cpu()}; target {json.dumps(target)}; load {os.getloadavg()[0]:.2f} "
        f"(waited {waited:.0f} s)"
    )
    print(f"# code: HEAD {head} (a git archive snapshot)")
    print(
        f"# settings: retune OP --trials {args.trials} --seed S --commit, seeds {', '.join(map(str, seeds))}; "
        f"measure.history_s {args.history_s if args.history_s is not None else measure.history_s:g}"
        + ("" if args.history_s is None else " (lowered: not the product's setting)")
        + f", usable_precision {args.usable_precision or measure.usable_precision:g}; side by side capped "
        f"at {args.side_cap_s:g} s per finalist",
        flush=True,
    )
    print(f"# cases ({len(cases)}): " + "; ".join(f"{c.operator}/{c.workload} ({c.kind})" for c in cases))
    for n in notes:
        print(f"# {n}")
    sets = Sets(src, base, shapes, target, args)
    arms: dict[Case, dict[str, list[Arm]]] = {c: {a: [] for a in ARMS} for c in cases}
    failed: dict[Case, str] = {}
    raw = args.raw.open("w") if args.raw else None
    try:
        for seed in seeds:
            print(f"\n# seed {seed}", flush=True)
            for c in [c for c in cases if c not in failed]:
                try:
                    arms[c]["cold"].append(sets.cold(c, seed))
                    arms[c]["transfer"].append(sets.transfer(c, seed))
                except (RetuneFailed, OSError, KeyError, ValueError) as e:
                    failed[c] = f"seed {seed}: {type(e).__name__}: {e}"
                    print(f"  {c.operator}/{c.workload} FAILED, left out of the report: {failed[c]}", flush=True)
                    continue
                print(
                    f"  {c.operator}/{c.workload} seed {seed}: cold {arms[c]['cold'][-1].retune.seconds:.0f} s, "
                    f"transfer {arms[c]['transfer'][-1].retune.seconds:.0f} s",
                    flush=True,
                )
                if raw is not None:
                    for a in ARMS:
                        x = arms[c][a][-1]
                        raw.write(
                            json.dumps(
                                {
                                    "operator": c.operator,
                                    "workload": c.workload,
                                    "kind": c.kind,
                                    "siblings": list(c.siblings),
                                    "arm": a,
                                    "seed": seed,
                                    "seconds": x.retune.seconds,
                                    "trials": x.trials,
                                    "stop": x.stop,
                                    "best_s": x.best_s,
                                    "curve": x.curve,
                                    "progress": x.progress,
                                    "found": x.found,
                                    "lines": x.retune.lines,
                                }
                            )
                            + "\n"
                        )
                    raw.flush()
    finally:
        if raw is not None:
            raw.close()
    rows = []
    for c in [c for c in cases if c not in failed]:
        est = side_by_side(c, arms[c], target, args)
        rows.append(case_report(c, arms[c], est, seeds))
    if rows:
        summary(rows, len(seeds))
    for c, why in failed.items():
        print(f"\nFAILED {c.operator}/{c.workload} ({c.kind}), {why}")


if __name__ == "__main__":
    sys.exit(main())
