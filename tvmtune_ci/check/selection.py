"""Which entries a command works on, and the one line that sums their report up.

`check`, `status`, `remeasure` and `matrix` take the same options (`--operator`,
`--target`, `--changed-since`, `--as-of`) and read the config the same way (its
warnings go to the report, so every output format shows them).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from ..core.config import load_config
from ..core.configerrors import ConfigWarning
from ..core.configschema import Config
from .staleness import FIX_HINT, TEMPLATE_INVALID, Report, find_stale, parse_date


def add_selection_options(parser: argparse.ArgumentParser) -> None:
    """What `check`, `status`, `remeasure` and `matrix` share: which entries (operators
    as arguments, as `retune` takes them; `--target`), as of which day."""
    parser.add_argument("operators", nargs="*", metavar="OPERATOR", help="only these operators (default: all)")
    parser.add_argument(
        "--changed-since",
        metavar="REF",
        default=None,
        help="only entries whose template, in-repo dependencies or log folder differ "
        "between REF and the work tree (all when tvmtune.yaml does)",
    )
    parser.add_argument("--as-of", metavar="YYYY-MM-DD", default=None, help="judge expiry on this day instead of today")
    parser.add_argument(
        "--operator",
        metavar="NAME",
        action="append",
        default=None,
        help="deprecated: name the operators as arguments (kept for one release)",
    )
    parser.add_argument(
        "--target", metavar="NAME", action="append", default=None, help="only this configured target (repeatable)"
    )
    parser.add_argument(
        "--rehash",
        action="store_true",
        help="read and hash every log, even those git's index says are committed and "
        "unmodified (by default git's own hash of them is trusted)",
    )


def load_quietly(path: str | None) -> Config:
    """load_config without printing its warnings: they reach the report (every format)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return load_config(Path(path) if path else None)


def selected_operators(args: argparse.Namespace) -> list[str] | None:
    """The operators named as arguments, and by the deprecated `--operator` (with a line
    that says so); None: all."""
    names = list(getattr(args, "operators", None) or [])
    old = getattr(args, "operator", None) or []
    if old:
        print(
            f"warning: --operator is deprecated and goes in the next release; name the "
            f"operators as arguments: tvmtune-ci {args.command} {' '.join(old)}",
            file=sys.stderr,
        )
        names += [n for n in old if n not in names]
    return names or None


def report_from_args(args: argparse.Namespace) -> tuple[Config, Report]:
    as_of = parse_date(args.as_of) if args.as_of else None
    config = load_quietly(args.config)
    report = find_stale(
        config,
        as_of=as_of,
        changed_since=args.changed_since,
        operators=selected_operators(args),
        targets=args.target,
        rehash=args.rehash,
    )
    return config, report


def orphan_lines(report: Report) -> list[str]:
    """What a text report says of orphaned log folders: the one folder's warning, or one
    line for many (a target switch leaves a folder per operator: 16 lines of the same
    warning buried the result)."""
    if len(report.orphans) <= 1:
        return [o.detail for o in report.orphans]
    return [
        f"{len(report.orphans)} log folders hold logs of operators or targets that are not "
        "configured: `tvmtune-ci status --orphans` lists them; delete them, or declare the "
        "ones kept on purpose under `keep:` in tvmtune.yaml"
    ]


def summary_line(report: Report) -> str:
    n, stale, unrunnable = len(report.entries), len(report.stale), len(report.unrunnable)
    retired = f"; {unrunnable} unrunnable: its target's runner is retired (docs/retune.md)" if unrunnable else ""
    if not n:
        return "no entries to check"
    if not stale and not unrunnable:
        return f"all {n} entries fresh"
    if not stale:
        return f"{n - unrunnable} of {n} entries fresh{retired}"
    fix = f"run `{FIX_HINT}` to re-tune the stale entries and rewrite their logs, then commit them"
    if any(r.code == TEMPLATE_INVALID for e in report.stale for r in e.reasons):
        fix = "fix the templates reported as template_invalid, then " + fix
    return f"{stale} of {n} entries stale; {fix}{retired}"
