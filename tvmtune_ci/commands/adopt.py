"""`tvmtune-ci adopt OLD NEW`: keep the logs of a renamed template without re-tuning.

After `git mv operators/dense.py operators/dense_op.py`, `check` reports dense_op as
missing and names the orphaned folder that fits it (renames.py). `adopt dense
dense_op` moves tuning_logs/dense/<target>/ to tuning_logs/dense_op/<target>/ for
every target configured for dense_op (or those named with --target) whose log fits
the renamed template, rewriting its manifest (operator, log name, template file,
sources) and README; a folder that does not fit (the template changed as well) stays
where it is: re-tune it, which replays it. Never imports TVM.

Exit codes: 0 every log of OLD for those targets adopted; 1 some left (they do not
fit); 2 usage (an unknown or unrenamed operator, no folder); 4 none fits; 6 locked;
10 the new folder exists already.
"""

from __future__ import annotations

import argparse

from ..check.selection import load_quietly
from ..check.staleness import select_entries
from ..core.errors import StaleLogError, UsageError
from ..core.layout import LogSet
from ..core.targets import slug
from ..core.template import declared_kinds, discover_templates
from ..publish.adopt import adopt


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD", help="the operator's name before the rename (its log folder)")
    p.add_argument("new", metavar="NEW", help="the operator's name now (its template)")
    p.add_argument(
        "--target",
        metavar="NAME",
        action="append",
        default=None,
        help="only this configured target (repeatable; default: every target of NEW)",
    )


def run(args: argparse.Namespace) -> int:
    config = load_quietly(args.config)
    old, new = args.old, args.new
    select_entries(config, [new], args.target)  # UsageError naming an unknown one
    ops = config.operators_dir
    if old in {p.stem for p in discover_templates(config.operators_path)}:
        raise UsageError(
            f"{ops}/{old}.py exists, so {old} was not renamed; adopt takes the old "
            f"name of a renamed template (`git mv {ops}/{old}.py {ops}/{new}.py` first)"
        )
    folder = config.logs_path / slug(old)
    where = folder.relative_to(config.root)
    if not folder.is_dir():
        raise UsageError(
            f"{where}/ does not exist; `tvmtune-ci status --orphans` lists the log "
            "folders of operators without a template"
        )
    kinds = declared_kinds(config.operators_path / f"{new}.py")
    targets = [t for t in config.targets_for(new, kinds) if args.target is None or t.name in args.target]
    adopted, left = [], []
    for t in targets:
        if not LogSet.of(config.logs_path, old, t.name).manifest.is_file():
            continue
        try:
            a = adopt(config, old, new, t)
        except StaleLogError as e:
            left.append(str(e))
            print(f"left: {e}")
            continue
        adopted.append(a)
        print(
            f"adopted {a.old_folder.relative_to(config.root)}/ as "
            f"{a.new_folder.relative_to(config.root)}/ (the same template: no re-tune)"
            + (
                ""
                if a.curve
                else f"; curve.png keeps the old title: `tvmtune-ci readme {new}` "
                "regenerates it where matplotlib is installed"
            )
        )
    if not adopted and not left:
        raise UsageError(
            f"{where}/ holds no log of a target configured for {new} ({', '.join(t.name for t in targets) or 'none'})"
        )
    if not adopted:
        raise StaleLogError(f"no log of {old} fits {ops}/{new}.py:\n  - " + "\n  - ".join(left))
    new_where = config.logs_path.relative_to(config.root) / slug(new)
    print(f"commit the move: git add -A {where} {new_where} && git commit")
    o = config.operator(old)
    if o.line:
        print(f"warning: tvmtune.yaml:{o.line}: operators.{old} still names the old operator; rename it to {new}")
    return 1 if left else 0
