"""`tvmtune-ci readme`: regenerate a log folder's README.md and curve.png from its manifest."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import load_config
from ..errors import UsageError
from ..fsutil import atomic_write_bytes, atomic_write_text
from ..layout import LogSet
from ..manifest import read_manifest
from ..readme import render_curve, render_readme


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("operator", metavar="OPERATOR")
    p.add_argument("--target", action="append", default=[], metavar="NAME", help="target(s) to regenerate (default: every configured target of the operator)")


def regenerate(logset: LogSet) -> list[Path]:
    m = read_manifest(logset.manifest)
    written = [logset.readme]
    atomic_write_text(logset.readme, render_readme(m))
    curve = render_curve(m)
    if curve is not None:
        atomic_write_bytes(logset.curve, curve)
        written.append(logset.curve)
    return written


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.config) if args.config else None)
    targets = [config.target(t) for t in args.target] if args.target else list(config.targets_for(args.operator))
    done = 0
    for t in targets:
        logset = LogSet.of(config.logs_path, args.operator, t.name)
        if not logset.manifest.is_file():
            if args.target:
                raise UsageError(f"{logset.manifest} does not exist; run `tvmtune-ci retune {args.operator} --target {t.name}` first")
            continue
        for p in regenerate(logset):
            print(f"wrote {p}")
        done += 1
    if not done:
        raise UsageError(f"no log of {args.operator!r} has a manifest under {config.logs_path}; run `tvmtune-ci retune {args.operator}` first")
    return 0
