"""`tvmtune-ci matrix`: the stale (operator, target) pairs as a GitHub Actions matrix.

Prints one line of JSON, `{"include": [{"operator", "target", "runs-on", "extras"}, ...]}`,
where `runs-on` is `["self-hosted", *target.runs_on]` (a GPU target's name the `gpu`
label: tvmtune.yaml requires it) and `extras` what to install (`tune`, or `tune,cuda`
for a GPU target), so a workflow can fan out
one job per entry onto a runner that has the target's hardware:

    strategy:
      matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}
    runs-on: ${{ matrix.runs-on }}

On GitHub Actions it also writes `matrix=<json>` and `has-work=true|false` to
$GITHUB_OUTPUT (an empty matrix is an error there, so jobs test `has-work`) and a
table to the step summary. Never imports TVM: it runs on GitHub-hosted runners.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from .. import ci
from ..check import staleness
from ..check.selection import load_quietly, selected_operators
from ..check.staleness import TEMPLATE_INVALID
from ..core.configschema import Config
from ..core.errors import UsageError
from ..core.profiles import model_shares_by_target
from ..core.template import read_template
from ..pipeline.budget import parse_duration, split

# GitHub Actions refuses a matrix with more jobs than this.
MAX_JOBS = 256


def register(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--changed-since",
        metavar="REF",
        default=None,
        help="only entries made stale by changes since REF (e.g. the push's `before` sha)",
    )
    which.add_argument(
        "--all", action="store_true", help="every configured (operator, target), fresh or not (the yearly full re-tune)"
    )
    p.add_argument("operators", nargs="*", metavar="OPERATOR", help="only these operators (default: all)")
    p.add_argument(
        "--budget",
        default=None,
        metavar="DURATION",
        help="a time budget (runner time, e.g. 8h) split between the jobs by the weights of "
        "their workloads (operators.NAME.weight); each job gets `budget` for retune --budget",
    )
    p.add_argument(
        "--gpu-only",
        action="store_true",
        help="only entries of GPU (cuda) targets; no step summary (the PR check asks whether there is any to build)",
    )
    p.add_argument(
        "--operator",
        action="append",
        default=[],
        metavar="OP",
        help="deprecated: name the operators as arguments (kept for one release)",
    )
    p.add_argument("--target", action="append", default=[], metavar="NAME", help="only this target (repeatable)")


def runs_on(config: Config, target: str) -> list[str]:
    """`["self-hosted", *labels]` without duplicates, in order."""
    labels: list[str] = []
    for label in ("self-hosted", *config.target(target).runs_on):
        if label not in labels:
            labels.append(label)
    return labels


def extras(config: Config, target: str) -> str:
    """The extras of tvmtune-ci a re-tune of `target` installs: `tune`, and `cuda` (NVRTC
    from PyPI) for a GPU target, whose kernels its runner compiles."""
    return "tune,cuda" if config.target(target).target.get("kind") == "cuda" else "tune"


def build_matrix(config: Config, entries: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """The matrix for `entries` (staleness Entries), sorted by (operator, target)."""
    include = [
        {
            "operator": e.operator,
            "target": e.target_name,
            "runs-on": runs_on(config, e.target_name),
            "extras": extras(config, e.target_name),
        }
        for e in sorted(entries, key=lambda e: (e.operator, e.target_name))
    ]
    return {"include": include}


def add_budgets(
    config: Config, matrix: dict[str, list[dict[str, Any]]], entries: Sequence[Any], total_s: float
) -> None:
    """Each job's share of `total_s` (its workloads' weights over all), as `budget`."""
    groups = {}
    shares = model_shares_by_target(config, {e.target_name for e in entries})
    for e in entries:
        workloads = list(read_template(config.root / e.template_file).workloads)
        groups[f"{e.operator}/{e.target_name}"] = [
            config.weight_of(e.operator, w, workloads, shares.get(e.target_name)) for w in workloads
        ]
    seconds = split(total_s, groups)
    for job in matrix["include"]:
        job["budget"] = f"{max(1, int(seconds[job['operator'] + '/' + job['target']]))}s"


def select(
    config: Config,
    *,
    all_entries: bool = False,
    changed_since: str | None = None,
    operators: Sequence[str] = (),
    targets: Sequence[str] = (),
) -> tuple[Any, list[Any]]:
    """(staleness report, the entries the matrix lists).

    Entries whose template does not read (template_invalid) are never listed: a
    runner cannot tune them, and `check` already fails for them. Nor are a retired
    target's: no runner of it is left (docs/retune.md).
    """
    report = staleness.find_stale(  # unknown names: UsageError with "did you mean"
        config,
        changed_since=None if all_entries else changed_since,
        operators=list(operators) or None,
        targets=list(targets) or None,
    )
    entries = [e for e in (report.entries if all_entries else report.stale) if not untunable(e) and e.retired is None]
    return report, entries


def untunable(entry: Any) -> Any:
    """The entry's template_invalid Reason, or None."""
    return next((r for r in entry.reasons if r.code == TEMPLATE_INVALID), None)


def _summary(matrix: dict[str, list[dict[str, Any]]], entries: list[Any], all_entries: bool) -> str:
    reasons = {(e.operator, e.target_name): e.reasons for e in entries}
    what = "every configured entry" if all_entries else "stale entries"
    if not matrix["include"]:
        return f"### tvmtune-ci matrix\n\nNothing to re-tune: no {what}.\n"
    lines = [
        "### tvmtune-ci matrix",
        "",
        f"{len(matrix['include'])} job(s) to re-tune ({what}):",
        "",
        "| operator | target | runs-on | why |",
        "|---|---|---|---|",
    ]
    for job in matrix["include"]:
        why = "; ".join(f"{r.code}: {r.detail}" for r in reasons.get((job["operator"], job["target"]), ()))
        lines.append(
            f"| {job['operator']} | {job['target']} | {', '.join(job['runs-on'])} | "
            f"{(why or 'fresh (--all)').replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    config = load_quietly(args.config)
    report, entries = select(
        config,
        all_entries=args.all,
        changed_since=args.changed_since,
        operators=selected_operators(args) or (),
        targets=args.target,
    )
    for w in getattr(report, "warnings", ()) or ():
        print(f"warning: {w}", file=sys.stderr)
    for e in report.entries:
        where = untunable(e)
        if e.retired is not None and (args.all or not e.fresh):
            print(f"skipped {e.operator} on {e.target_name}: its runner is retired ({e.retired})", file=sys.stderr)
        elif where is not None:
            print(
                f"skipped {e.operator} on {e.target_name}: its template does not read "
                f"({where.detail}); fix the template, a runner cannot tune it",
                file=sys.stderr,
            )
    if args.gpu_only:
        entries = [e for e in entries if config.target(e.target_name).target.get("kind") == "cuda"]
    matrix = build_matrix(config, entries)
    if args.budget is not None:
        add_budgets(config, matrix, entries, parse_duration(args.budget))
    n = len(matrix["include"])
    if n > MAX_JOBS:
        raise UsageError(
            f"{n} entries to re-tune, more than the {MAX_JOBS} jobs a GitHub Actions matrix "
            "allows; split the run by operator (arguments) or --target"
        )
    text = json.dumps(matrix, separators=(",", ":"))
    print(text)
    for job in matrix["include"]:
        print(f"  {job['operator']} on {job['target']} -> runs-on {job['runs-on']}", file=sys.stderr)
    if not n:
        print("nothing to re-tune", file=sys.stderr)
    ci.set_outputs(matrix=text, **{"has-work": "true" if n else "false"})
    if not args.gpu_only:
        ci.append_step_summary(_summary(matrix, entries, args.all))
    return 0
