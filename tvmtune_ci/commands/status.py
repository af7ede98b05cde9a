"""`tvmtune-ci status`: one row per (operator, target); never imports TVM.

Columns: state, age in days, trials run/requested (summed over workloads), the best
latency per workload as its README states it (the figure that holds over the run
history, `runwords.headline`; this re-tune's finals while there is no run), its run-to-run
band (the runner band while the set's own history is young), config-space size (all
workloads and design spaces), and the stale reasons. Below the table, the templates
each target covers (a target pairs with the templates whose TARGET_KINDS include its
kind, unless an operator lists its targets). Exit 0; 2 on a config or usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ..check.models import warning_lines
from ..check.selection import add_selection_options, orphan_lines, report_from_args, summary_line
from ..check.staleness import TEMPLATE_INVALID, Entry, Report
from ..ci import md_escape
from ..core.configschema import Config
from ..core.errors import CorruptFileError
from ..core.manifest import Manifest
from ..core.runs import MIN_REF, PERSIST, band_of, headline_series, read_runs
from ..core.stats import fmt_latency
from ..core.template import declared_kinds, discover_templates
from ..publish.runwords import headline, noise_warning

COLUMNS = ("entry", "state", "age", "trials", "best", "run to run", "space", "reasons")


def human_count(n: int) -> str:
    """12345678 -> "12.3M": spaces grow fast, the magnitude is what matters."""
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


History = Any  # list[runs.Run]; a CorruptFileError when runs.jsonl fails its check; None: no manifest


def read_histories(report: Report) -> list[History]:
    """Each entry's run history, read once for every column and warning that needs it."""
    out: list[History] = []
    for e in report.entries:
        if e.manifest is None:
            out.append(None)
            continue
        try:
            out.append(read_runs(e.logset.folder, e.manifest.files))
        except CorruptFileError as err:
            out.append(err)
    return out


def band_cell(e: Entry, history: History) -> str:
    """The widest run-to-run band of the entry's workloads' headline figure, as their
    README states it (runs.py); while the history is too short for one, how many runs it
    has, after the runner band its latest run was judged against if it was (the band
    the README names for its drift verdicts)."""
    if e.manifest is None or history is None:
        return "-"
    if isinstance(history, CorruptFileError):
        return "? (runs.jsonl)"
    bands = [band_of(headline_series(history, w)) for w in e.manifest.workloads]
    counts = [b.runs if b else 0 for b in bands]
    if not counts or min(counts) < MIN_REF + PERSIST:
        n = min(counts, default=0)
        runs = f"{n} run{'s' if n != 1 else ''}"
        runner = history[-1].band if history else None
        return f"±{float(runner.get('halfwidth', 0)):.1%} (runner; {runs})" if runner else runs
    return f"±{max(b.halfwidth for b in bands if b):.1%} ({min(counts)})"


def noise_lines(report: Report, histories: list[History]) -> list[str]:
    """One warning per target whose runner is noisier than the effects judged on it
    (runwords.noise_warning), from the first of its entries that says so."""
    out, seen = [], set()
    for e, history in zip(report.entries, histories, strict=True):
        if e.manifest is None or e.target_name in seen or not isinstance(history, list):
            continue
        warn = noise_warning(
            history, sorted(e.manifest.workloads), float(e.manifest.measure.get("search_precision", 0.03))
        )
        if warn:
            seen.add(e.target_name)
            out.append(f"{e.target_name} (from {e.operator}'s run history): {warn}")
    return out


def best_cell(m: Manifest, history: History) -> str:
    """Each workload's best as its README's headline states it: the median over the run
    history (`runwords.headline`, the rule the README takes it by), else, before any run or
    when runs.jsonl fails its check, the re-tune's finals figure with its precision."""
    runs = history if isinstance(history, list) else []
    cells = []
    for w, r in m.results.items():
        value, _ = headline(runs, w)
        shown = fmt_latency(value) if value is not None else fmt_latency(r.best.latency_s, r.best.rel_halfwidth)
        cells.append(f"{w} {shown}")
    return ", ".join(cells) or "-"


def row(e: Entry, history: History) -> dict[str, str]:
    m = e.manifest
    trials = best = "-"
    if m is not None:
        try:
            run = sum(t.run for t in m.trials.values())
            requested = sum(t.requested for t in m.trials.values())
            trials = f"{run}/{requested}"
            best = best_cell(m, history)
        except (AttributeError, TypeError, CorruptFileError):
            pass  # a hand-edited manifest or results.json; its reasons say so
    space = sum(points * spaces for points, spaces in e.space_sizes.values())
    # Unknown only when the template's KNOBS cannot be read: say which reason to look at.
    unknown = next((r.code for r in e.reasons if r.code in (TEMPLATE_INVALID,)), "see reasons")
    return {
        "entry": f"{e.operator}/{e.target_name}",
        "state": "fresh" if e.fresh else "STALE",
        "age": f"{e.age_days}d" if e.age_days is not None else "-",
        "trials": trials,
        "best": best,
        "run to run": band_cell(e, history),
        "space": human_count(space) if e.space_sizes else f"? ({unknown})",
        "reasons": ", ".join(dict.fromkeys(r.code for r in e.reasons)) or "-",
    }


def rows(report: Report, histories: list[History]) -> list[dict[str, str]]:
    return [row(e, h) for e, h in zip(report.entries, histories, strict=True)]


@dataclass(frozen=True)
class Coverage:
    """One target, its kind, and the templates (operators) it is tuned for."""

    target: str
    kind: str
    operators: tuple[str, ...]


def coverage(config: Config, targets: Sequence[str] | None = None) -> tuple[Coverage, ...]:
    """What each configured target (those in `targets`, when given) covers: every
    template, whatever the table selected, paired as `check` pairs them."""
    kinds = {p.stem: declared_kinds(p) for p in discover_templates(config.operators_path)}
    covered = config.coverage(kinds)
    return tuple(
        Coverage(t.name, t.kind, covered[t.name]) for t in config.targets if targets is None or t.name in targets
    )


def coverage_line(c: Coverage) -> str:
    """`zen4-2c (llvm): conv2d, dense`, or why a target covers nothing."""
    ops = ", ".join(c.operators) or (
        f"none: no template's TARGET_KINDS include {c.kind}, and no "
        f"operators.NAME.targets in tvmtune.yaml lists {c.target}"
    )
    return f"{c.target} ({c.kind}): {ops}"


def render_text(report: Report, out: TextIO, covered: Sequence[Coverage] = (), verbose: bool = False) -> None:
    histories = read_histories(report)
    table = rows(report, histories)
    widths = {c: max([len(c), *(len(r[c]) for r in table)]) for c in COLUMNS}
    print("  ".join(c.upper().ljust(widths[c]) for c in COLUMNS).rstrip(), file=out)
    for r in table:
        print("  ".join(r[c].ljust(widths[c]) for c in COLUMNS).rstrip(), file=out)
    if covered:
        print("templates each target covers:", file=out)
    for c in covered:
        print(f"  {coverage_line(c)}", file=out)
    for line in orphan_lines(report):
        print(f"warning: {line}", file=out)
    # The models' coverage warnings are one line unless --verbose, as in `check`.
    for w in warning_lines(report.warnings, verbose):
        print(f"warning: {w}", file=out)
    for w in noise_lines(report, histories):
        print(f"warning: {w}", file=out)
    print(summary_line(report), file=out)


def render_markdown(report: Report) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows(report, read_histories(report)):
        lines.append("| " + " | ".join(md_escape(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=["text", "markdown"],
        default="text",
        help="a plain table, or a markdown table (for READMEs and step summaries)",
    )
    parser.add_argument(
        "--orphans",
        action="store_true",
        help="list the log folders of operators or targets that are not configured, and "
        "those kept on purpose (`keep:` in tvmtune.yaml), instead of the table",
    )
    add_selection_options(parser)
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="each model coverage warning on its own line (uncovered call shapes, ops no "
        "template implements), not one summary line",
    )


def render_orphans(report: Report, out: TextIO) -> None:
    for o in report.orphans:
        print(f"orphaned  {o.file}/: {o.detail}", file=out)
    for k in report.kept:
        print(f"kept      {k} (keep: in tvmtune.yaml)", file=out)
    if not report.orphans and not report.kept:
        print("no log folders of unconfigured operators or targets", file=out)


def run(args: argparse.Namespace) -> int:
    config, report = report_from_args(args)
    if args.orphans:
        render_orphans(report, sys.stdout)
    elif args.format == "markdown":
        print(render_markdown(report), end="")
    else:
        render_text(report, sys.stdout, coverage(config, args.target), verbose=args.verbose)
    return 0
