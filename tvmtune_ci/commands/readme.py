"""`tvmtune-ci readme`: regenerate a log folder's README.md and curve.png from its manifest."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core import lock
from ..core.config import load_config
from ..core.errors import HostError, UsageError
from ..core.layout import LogSet
from ..core.manifest import Manifest, read_manifest
from ..core.profiles import RunnerPeak, runner_peak
from ..core.runs import read_runs
from ..core.template import declared_kinds, discover_templates
from ..publish.readme import render_curve, render_readme
from ..publish.swap import publish, recover

TUNE_EXTRA = "pip install 'tvmtune-ci[tune]'"


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("operators", nargs="*", metavar="OPERATOR", help="operators whose READMEs to regenerate")
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME",
        help="target(s) to regenerate (default: every configured target of the operator)",
    )
    p.add_argument("--all", action="store_true", help="every operator's READMEs")


def regenerate(logset: LogSet, peak: RunnerPeak | None = None) -> list[Path]:
    """Rewrite README.md and curve.png from the manifest; the paths that changed.

    Under the folder's lock, like a re-tune: a re-tune publishing meanwhile would
    otherwise swap the folder under us, or we would write into its old set. Both
    files are published together through the same atomic swap.
    """
    with lock.hold(logset.lock, f"{logset.operator}/{logset.target_slug}"):
        recover(logset.folder)  # a killed publish must not be mistaken for the set
        m = read_manifest(logset.manifest)
        history = read_runs(logset.folder, m.files)
        files = {logset.readme.name: render_readme(m, history, peak).encode()}
        curve = _curve(m)
        if curve is not None:
            files[logset.curve.name] = curve
        changed = {n: d for n, d in files.items() if not _holds(logset.folder / n, d)}
        if changed:
            publish(logset.folder, changed, archive=False)
    return [logset.folder / n for n in changed]


def _curve(m: Manifest) -> bytes | None:
    """`render_curve`, with matplotlib (the [tune] extra) missing a HostError naming the
    install, not a crash: the light install (`pip install tvmtune-ci`) lacks it."""
    try:
        return render_curve(m)
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != "matplotlib":
            raise
        raise HostError(
            f"`readme` draws curve.png with matplotlib, which is not installed "
            f"({e}); it comes with the [tune] extra: {TUNE_EXTRA}"
        ) from None


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.config) if args.config else None)
    if args.all:
        operators = [p.stem for p in discover_templates(config.operators_path)]
    elif args.operators:
        operators = list(args.operators)
    else:
        raise UsageError("name the operators whose READMEs to regenerate, or pass --all")
    for op in operators:
        # A target named here may be one no longer configured whose folder is kept
        # (`keep:`): its README is regenerated from its manifest like any other.
        kinds = declared_kinds(config.operators_path / f"{op}.py")
        names = list(args.target) or [t.name for t in config.targets_for(op, kinds)]
        if args.all and not args.target and (config.logs_path / op).is_dir():
            names += sorted(
                d.name
                for d in (config.logs_path / op).iterdir()
                if d.is_dir() and config.kept(op, d.name) and d.name not in names
            )
        done = 0
        for name in names:
            logset = LogSet.of(config.logs_path, op, name)
            if not logset.manifest.is_file():
                if args.target and not args.all:
                    raise UsageError(
                        f"{logset.manifest} does not exist; run `tvmtune-ci retune {op} --target {name}` first"
                    )
                continue
            written = regenerate(logset, runner_peak(config, name))
            for p in written:
                print(f"wrote {p}")
            if not written:
                print(f"up to date: {logset.readme}")
            done += 1
        if not done and not args.all:
            raise UsageError(
                f"no log of {op!r} has a manifest under {config.logs_path}; run `tvmtune-ci retune {op}` first"
            )
    return 0
