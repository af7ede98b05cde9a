"""`tvmtune-ci readme`: regenerate a log folder's README.md and curve.png from its manifest."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import lock
from ..config import load_config
from ..errors import UsageError
from ..layout import LogSet
from ..manifest import read_manifest
from ..publish import publish, recover
from ..readme import render_curve, render_readme


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("operator", metavar="OPERATOR")
    p.add_argument("--target", action="append", default=[], metavar="NAME", help="target(s) to regenerate (default: every configured target of the operator)")


def regenerate(logset: LogSet) -> list[Path]:
    """Rewrite README.md and curve.png from the manifest; the paths that changed.

    Under the folder's lock, like a re-tune: a re-tune publishing meanwhile would
    otherwise swap the folder under us, or we would write into its old set. Both
    files are published together through the same atomic swap.
    """
    with lock.hold(logset.lock, f"{logset.operator}/{logset.target_slug}"):
        recover(logset.folder)  # a killed publish must not be mistaken for the set
        m = read_manifest(logset.manifest)
        files = {logset.readme.name: render_readme(m).encode()}
        curve = render_curve(m)
        if curve is not None:
            files[logset.curve.name] = curve
        changed = {n: d for n, d in files.items() if not _holds(logset.folder / n, d)}
        if changed:
            publish(logset.folder, changed, archive=False)
    return [logset.folder / n for n in changed]


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False


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
        written = regenerate(logset)
        for p in written:
            print(f"wrote {p}")
        if not written:
            print(f"up to date: {logset.readme}")
        done += 1
    if not done:
        raise UsageError(f"no log of {args.operator!r} has a manifest under {config.logs_path}; run `tvmtune-ci retune {args.operator}` first")
    return 0
