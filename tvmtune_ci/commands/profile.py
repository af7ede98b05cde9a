"""`tvmtune-ci profile [NAME ...] --target T`: build each model with the committed logs
(TVM, the [tune] extra), run it on this machine with the Relax VM's per-call
instrument, and append the run to `models/<name>.profile.json`; then write the
model's README on that target (`models/<name>.<target>.md` and its chart), and the
kernel READMEs of that target: their "% of peak" reads the runner's peak as the
profiles measured it (a median over the runs, `core/profiles.runner_peak`), which the
new run moves.

The same model with every template kernel at its default configuration is timed in
turns with it: the README's "tuning made the model Nx faster". With `--uncovered-shapes
sibling`, a call a template implements at a shape no workload declares runs that
template's kernel at the nearest workload's best mapped onto it (the README lists those
as workloads worth declaring). The calls no template covers get MetaSchedule (`--trials` each, database under .tvmtune-cache/, reused),
and what it leaves the built-in parallel, vectorized schedule (model/fallback.py); with
`--untemplated fallback` the built-in schedule alone, and with `--untemplated none`
TVM's naive loops (numerical checks only). Its shares are `retune --budget`'s
weights for the workloads the model calls (docs/models.md).

Every build, and ONNX Runtime, is timed on the target's num-cores, in one fresh process
(a TVM thread pool cannot grow once it has started). A MetaSchedule comparison is the
median over independent searches; one that a load disturbed, or that left a function
without a valid record, is listed with its conditions but not published as a ratio.

Exit codes: 0 written, 2 config or usage, 3 an unreadable profile, 4 a stale or missing
log (as build_best), 5 a target this machine cannot run, or a timing whose thread pool
was not the target's num-cores.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..core.config import load_config
from ..core.errors import UsageError
from ..core.fsutil import atomic_write_bytes, atomic_write_text, sha256_file
from ..core.layout import LogSet
from ..core.modelrecords import ModelRecords, lines_of, records_path, write_records
from ..core.profiles import breakdown, profile_path, read_profile, runner_peak, write_profile
from ..core.template import discover_templates
from ..publish.modelreadme import render, render_chart
from .readme import regenerate


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", nargs="*", metavar="NAME", help="models to profile (default: every model)")
    p.add_argument("--target", required=True, help="the target (tvmtune.yaml) to build for; it must run here")
    p.add_argument(
        "--untemplated",
        choices=("metaschedule", "fallback", "none"),
        default="metaschedule",
        help="what the calls no template covers get: MetaSchedule, and the built-in schedule for "
        "what it leaves (default); the built-in schedule alone, no search (fallback); or TVM's "
        "naive loops (none: numerical checks only, never a committed README)",
    )
    p.add_argument(
        "--uncovered-shapes",
        choices=("untemplated", "sibling"),
        default="untemplated",
        help="a call a template implements at a shape no workload declares: the untemplated way "
        "(default), or the template's kernel at the nearest workload's best mapped onto it",
    )
    p.add_argument(
        "--trials", type=int, default=32, help="MetaSchedule trials for each function no template covers (default 32)"
    )
    p.add_argument(
        "--runs",
        type=int,
        default=10,
        help="instrumented inferences per kernel time, and rounds of the end-to-end timing (default 10)",
    )
    p.add_argument(
        "--metaschedule-seconds",
        type=float,
        default=None,
        metavar="S",
        help="also build the model with MetaSchedule alone, given S seconds of this runner "
        "(the seconds the committed logs' re-tunes took) in each of --metaschedule-searches "
        "independent searches, and time them in turns with the build; a search is kept under "
        ".tvmtune-cache/ and reused by the next run unless it was disturbed or incomplete",
    )
    p.add_argument(
        "--metaschedule-searches",
        type=int,
        default=3,
        metavar="N",
        help="independent MetaSchedule searches (seeds) the ratio is the median of (default 3)",
    )
    p.add_argument(
        "--no-onnxruntime",
        action="store_true",
        help="leave ONNX Runtime out (by default it runs beside the build where it is "
        "installed and the model has an ONNX form)",
    )


COMMITTED = "MetaSchedule records committed"  # the build's words when it applied them


def keep_records(config: Any, m: Any, target: Any, work: Path) -> Path:
    """The search's database (`work`), as the model's committed records for `target`
    (core/modelrecords.py): the next build there applies them instead of searching."""
    import tvm

    r = ModelRecords(
        m.name,
        target.name,
        dict(target.target),
        str(tvm.__version__),
        sha256_file(config.root / m.source),
        lines_of(work / "database_workload.json"),
        lines_of(work / "database_tuning_record.json"),
    )
    path = records_path(config.root, m.source, m.name, target.name)
    write_records(path, r)
    return path


def run(args: argparse.Namespace) -> int:
    # Here: the model wing imports TVM (model/fallback.py), and --help imports every command.
    from ..model.profile import profile_model

    config = load_config(Path(args.config) if args.config else None)
    known = [m.name for m in config.models]
    names = list(args.models) or known
    if not names:
        raise UsageError("tvmtune.yaml has no `models:`; add one (docs/models.md)")
    for n in names:
        if n not in known:
            raise UsageError(f"unknown model {n!r}; models in tvmtune.yaml: {', '.join(known) or '(none)'}")
    target = config.target(args.target)
    for m in [m for m in config.models if m.name in names]:
        work = config.root / ".tvmtune-cache" / f"{m.name}-{target.slug}"
        run_ = profile_model(
            config,
            m,
            target,
            untemplated=args.untemplated,
            trials=args.trials,
            uncovered_shapes=args.uncovered_shapes,
            runs=args.runs,
            work_dir=work,
            metaschedule_s=args.metaschedule_seconds,
            metaschedule_searches=args.metaschedule_searches,
            onnxruntime=not args.no_onnxruntime,
        )
        ratios = run_.speedup_range or (0.0, 0.0)
        med = run_.latency_s
        src = config.root / m.source
        path = profile_path(src, m.name)
        profile = read_profile(path, m.name).with_run(target.name, run_)
        write_profile(path, profile)
        stem = f"{m.name}.{target.slug}"
        atomic_write_bytes(src.parent / f"{stem}.png", render_chart(run_, f"{m.name} on {target.name}"))
        atomic_write_text(src.parent / f"{stem}.md", render(profile, target.name, f"{stem}.png"))
        if args.untemplated == "metaschedule" and not run_.untemplated.startswith(COMMITTED):
            kept = keep_records(config, m, target, work)
            print(f"  the untemplated functions' MetaSchedule records: {kept.relative_to(config.root)}")
        print(
            f"{m.name} on {target.name}: {med * 1e3:.3g} ms per inference; tuning made it "
            f"{run_.speedup:.2f}x faster ({ratios[0]:.2f}-{ratios[-1]:.2f}x over {args.runs} rounds)"
        )
        print(f"  every build timed on {run_.threads} thread(s) (the target's num-cores)")
        for a in run_.anchors:
            lo, hi = a.ratio_range
            print(
                f"  beside {a.detail}: {a.latency_s * 1e3:.3g} ms, {a.ratio:.2f}x the committed logs' "
                f"latency ({lo:.2f}-{hi:.2f}x over the rounds)"
                + (f"; NOT PUBLISHED: {a.withheld}" if a.withheld else "")
            )
        for label, sec, _n, owner in breakdown(run_)[:8]:
            print(f"  {sec / run_.kernel_seconds() * 100:5.1f}%  {label} ({owner or 'no template'})")
        print(f"wrote {path.relative_to(config.root)}, {stem}.md and {stem}.png")
    rewritten = refresh_kernel_readmes(config, target.name)
    if rewritten:
        print(f"rewrote {len(rewritten)} kernel README file(s) of {target.name}: the runner's peak moved")
    return 0


def refresh_kernel_readmes(config: Any, target: str) -> list[Path]:
    """Regenerate the kernel READMEs of `target` against the runner's peak the profiles
    now give (each README's "% of peak"); the files that changed. Without this, a
    profile run left every kernel README of its target disagreeing with its render."""
    peak = runner_peak(config, target)
    written: list[Path] = []
    for template in discover_templates(config.operators_path):
        logset = LogSet.of(config.logs_path, template.stem, target)
        if logset.manifest.is_file():
            written += regenerate(logset, peak)
    return written
