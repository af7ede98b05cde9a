"""`tvmtune-ci remeasure`: re-measure each committed best on its runner; report drift.

Exit 0 when every best measures as its README says (within the noise), 1 when one
drifted beyond it or could not be measured, 2 on a config or usage error, 5 when
this host cannot run a target.
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import ci
from ..selection import add_selection_options, report_from_args


def register(p: argparse.ArgumentParser) -> None:
    add_selection_options(p)
    p.add_argument("--format", choices=("text", "json", "github"), default="text")


def run(args: argparse.Namespace) -> int:
    from ..remeasure import describe, remeasure_entry

    config, report = report_from_args(args)
    say = (lambda s: print(s, file=sys.stderr)) if args.format == "json" else print
    drifts = []
    skipped = []
    for e in report.entries:
        if e.manifest is None or not e.fresh:
            # A stale set describes another template or target: re-tune it instead.
            skipped.append(f"{e.operator}/{e.target_name}")
            continue
        drifts.extend(remeasure_entry(config, e, say=say))
    bad = [d for d in drifts if d.drifted or d.error]
    if args.format == "json":
        json.dump({"results": [d.to_json() for d in drifts], "skipped_stale": skipped,
                   "drifted": len(bad)}, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        for d in drifts:
            line = describe(d)
            if args.format == "github" and (d.drifted or d.error):
                print(ci.annotation("warning", line, file=d.readme, title="tuning log drifted"))
            else:
                print(line)
        for s in skipped:
            print(f"{s}: stale, not re-measured (re-tune it: tvmtune-ci retune)")
        print(f"{len(bad)} of {len(drifts)} bests drifted beyond the noise or could not be measured"
              if bad else f"all {len(drifts)} bests measure as recorded, within the noise")
        if args.format == "github":
            rows = "\n".join(f"| {d.operator}/{d.target}/{d.workload} | {d.verdict} | "
                             f"{'-' if d.ratio is None else f'{d.ratio:.3f}x'} |" for d in drifts)
            ci.append_step_summary("### tvmtune-ci remeasure\n\n| entry | now vs README | ratio |\n"
                                   f"|---|---|---|\n{rows}\n")
    return 1 if bad else 0
