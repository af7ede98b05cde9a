"""`tvmtune-ci remeasure`: measure each committed best on its runner, judge its history.

One run per fresh entry (the best, the default and the calibration kernels in turns);
the verdict comes from the entry's run history with that run (`runs.judge`), never from
one run alone: "inconclusive" while the history is too short to have a band or the
latest run lies beyond it for fewer runs than a change must last, "stable" inside it,
"drift" for a persistent change beyond it (or one far beyond any band seen).
`--record` appends the run to the set's `runs.jsonl` and republishes its manifest and
README (the monthly workflow commits them with `--commit --push`), and writes the runner
band of the target's runner label (`<logs_dir>/.runners/`, pooled over its sets). A
young history (under 8 runs) is judged against that band: a change must show in every
one of the run's `--windows` (docs/run-history.md). A new label without a pooled band
yet uses its early band (the moves between a run's windows, widened, at least ±20%):
a verdict from the first remeasure after the re-tune, weaker and labelled so.

Exit 0 when nothing drifted (stable or inconclusive), 1 when a best drifted or could not
be measured, 2 on a config or usage error, 5 when this host cannot run a target or is
not the machine the history was measured on (its CPU's vendor, family, model or ISA
features differ, or a history recorded before those cannot be told apart by its stored
fields), 6 when the folder is locked, 8 on git.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import ci
from ..check.selection import add_selection_options, report_from_args
from ..core.errors import TvmtuneError
from ..core.runnerband import pool_path, runner_label
from ..core.runs import RUNS_NAME
from ..pipeline.remeasure import WINDOWS, Remeasured, Say, describe, remeasure_target
from ..publish.gitwrite import commit_paths, push_with_retry

if TYPE_CHECKING:  # pragma: no cover
    from ..check.staleness import Entry
    from ..core.configschema import Config


def register(p: argparse.ArgumentParser) -> None:
    add_selection_options(p)
    p.add_argument("--format", choices=("text", "json", "github"), default="text")
    p.add_argument(
        "--record", action="store_true", help="append the run to each set's runs.jsonl (and its manifest and README)"
    )
    p.add_argument("--commit", action="store_true", help="commit the recorded runs (implies --record)")
    p.add_argument("--push", action="store_true", help="push the commit (implies --commit)")
    p.add_argument(
        "--windows",
        type=int,
        default=None,
        metavar="N",
        help="separate windows per run, each with the calibration kernels in turns (default 3)",
    )
    p.add_argument(
        "--window-gap",
        type=float,
        default=0.0,
        metavar="S",
        help="idle seconds between windows, so that one slow stretch of the runner spans one",
    )


def run(args: argparse.Namespace) -> int:
    config, report = report_from_args(args)
    commit = args.commit or args.push
    record = args.record or commit
    say = (lambda s: print(s, file=sys.stderr)) if args.format == "json" else print
    done, skipped, failures = _remeasure(config, report.entries, args, record=record, say=say)
    if commit and record and done:
        _commit(config, done, args.push, failures)
    drifted = [r for r in done if r.drifted]
    if args.format == "json":
        _print_json(done, skipped, record=record, drifted=len(drifted), errors=len(failures))
    else:
        _print_text(done, skipped, github=args.format == "github", drifted=bool(drifted))
    if failures:
        return max(1, *(f.exit_code for f in failures))
    return 1 if drifted else 0


def _remeasure(
    config: Config, entries: Sequence[Entry], args: argparse.Namespace, *, record: bool, say: Say
) -> tuple[list[Remeasured], list[str], list[TvmtuneError]]:
    """One run per target of its fresh entries (`remeasure_target`); the entries
    remeasured, the stale ones skipped (by name) and the errors, each reported."""
    done: list[Remeasured] = []
    skipped, failures = [], []
    by_target: dict[str, list] = {}
    for e in entries:
        if e.manifest is None or not e.fresh or e.retired is not None:
            # A stale set describes another template or target: re-tune it instead. A
            # retired target's: no runner of it is left to measure on.
            skipped.append(f"{e.operator}/{e.target_name}")
            continue
        by_target.setdefault(e.target_name, []).append(e)
    for name, of_target in by_target.items():  # one run per target: its sets' bests in turns
        try:
            got = remeasure_target(
                config,
                of_target,
                record=record,
                say=say,
                windows=args.windows or WINDOWS,
                gap_s=max(0.0, args.window_gap),
            )
            for note in dict.fromkeys(n for r in got for n in r.notes):
                print(f"warning: {note}", file=sys.stderr)
            done += got
        except TvmtuneError as err:
            failures.append(err)
            print(f"error: {', '.join(e.operator for e in of_target)} on {name}: {err}", file=sys.stderr)
    return done, skipped, failures


def _print_json(done: Sequence[Remeasured], skipped: Sequence[str], *, record: bool, drifted: int, errors: int) -> None:
    json.dump(
        {
            "results": [
                {
                    "operator": r.operator,
                    "target": r.target,
                    "recorded": record,
                    "run": r.run.to_json(),
                    "verdicts": [v.to_json() for v in r.verdicts],
                    "runner_band": None if r.band is None else r.band.to_json(),
                    "history": [h.to_json() for h in r.history],
                }
                for r in done
            ],
            "skipped_stale": list(skipped),
            "drifted": drifted,
            "errors": errors,
        },
        sys.stdout,
        indent=2,
        sort_keys=True,
    )
    print()


def _print_text(done: Sequence[Remeasured], skipped: Sequence[str], *, github: bool, drifted: bool) -> None:
    """A line per verdict (an annotation for a drift with `--format github`), the
    stale entries skipped, the count; with github, the step summary's table."""
    for r in done:
        for line, v in zip(describe(r), r.verdicts, strict=True):
            if github and v.drifted:
                print(ci.annotation("warning", line, file=r.readme, title="tuning log drifted"))
            else:
                print(line)
    for s in skipped:
        print(f"{s}: stale, not re-measured (re-tune it: tvmtune-ci retune)")
    n = sum(len(r.verdicts) for r in done)
    states = [v.state for r in done for v in r.verdicts]
    short = states.count("inconclusive")
    print(
        f"{states.count('drift')} of {n} bests drifted"
        if drifted
        else f"no drift in {n} bests: {states.count('stable')} stable, {short} inconclusive"
        + (" (more runs needed)" if short else "")
    )
    if github:
        rows = "\n".join(
            f"| {r.operator}/{r.target}/{v.workload} | {v.state} | {v.runs} | "
            f"{'-' if v.band is None else f'±{v.band.halfwidth:.1%}'} | {v.sentence} |"
            for r in done
            for v in r.verdicts
        )
        ci.append_step_summary(
            f"### tvmtune-ci remeasure\n\n| entry | verdict | runs | band | why |\n|---|---|---|---|---|\n{rows}\n"
        )


def _commit(config, done, push: bool, failures: list) -> None:  # noqa: ANN001
    paths = []
    for r in done:
        folder = config.logs_path / r.operator / r.readme.split("/")[-2]
        paths += [folder / RUNS_NAME, folder / "manifest.json", folder / "README.md"]
        t = config.target(r.target)  # its runner's band, when --record wrote it
        label = runner_label(t.runs_on, t.rpc.key if t.rpc else None)
        pool = pool_path(config.logs_path, label) if label else None
        if pool is not None and pool.is_file() and pool not in paths:
            paths.append(pool)
    lines = [f"- {line}" for r in done for line in _short(r)]
    message = (
        f"tvmtune: record a remeasure run of {len(done)} entr{'y' if len(done) == 1 else 'ies'}"
        "\n\n" + "\n".join(lines) + "\n\nWritten by tvmtune-ci remeasure --record; "
        "logs only, this commit does not trigger a re-tune.\n"
    )
    try:
        sha = commit_paths(config.root, paths, message, config.git)
        print(f"committed {sha[:12]}: {message.splitlines()[0]}")
        if push:
            print(f"pushed: {push_with_retry(config.root, identity=config.git)}")
    except TvmtuneError as err:
        print(f"error: the runs are recorded but not committed: {err}", file=sys.stderr)
        failures.append(err)


def _short(r) -> list[str]:  # noqa: ANN001
    return [f"{r.operator}/{r.target}/{v.workload}: {v.state}: {v.sentence}" for v in r.verdicts]
