"""Measure log sets' bests on their target's runner (one run of their history), and
judge each history for drift.

One run: every best of the sets (of one target) and the two calibration kernels
(`calibration.py`) in turns for `measure.history_s` seconds in all (`measure.interleave`),
so each kernel's visits are spread over the whole run; each kernel summarised as the
lower quartile of all its samples (with interval) and of its fastest and slowest 1-s
stretch (`runs.KernelFigure`). A re-tune records the first run of a new set;
`tvmtune-ci remeasure --record` appends one per call.

A run is taken as WINDOWS separate windows, each with the calibration kernels in
turns (`runs.Window`): at the first runs of a history a change must last through all of
them, against the band pooled over every set of the runner label (`runnerband`), or,
on a new label without one, its early band: the moves between the windows of one run
(the re-tune's run has WINDOWS of them) widened, and never under ±20%, so a new runner
gives a verdict at its first remeasure, weaker than a pooled band and saying so; from
8 runs on the history's own band and three-runs rule decide (`runs.judge`). Either way
the verdict is never one stretch's: the README's figure against how far it moved
between runs on this runner. A run joins a history, and a history a pooled band, only
from a machine of the same identity (`runner_identity`, `runs.match_machine`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from ..check.staleness import installed_tvm_version
from ..core import lock, runnerband, runs, stats
from ..core.configschema import Config, TargetConfig
from ..core.errors import HostError, LockError, TvmtuneError
from ..core.fsutil import canonical_json
from ..core.manifest import Manifest, read_manifest, seal_files
from ..core.profiles import RunnerPeak, runner_peak
from ..core.template import import_template
from ..publish.readme import render_readme
from ..publish.runwords import against_headline
from ..publish.swap import publish, recover
from ..tune import calibration
from ..tune.builder import make_builder, schedule_config
from ..tune.devices import preflight
from ..tune.hostcheck import Host, check_host, host_description, this_host
from ..tune.measure import interleave
from ..tune.runners import make_runner
from ..tune.runners.threads import measure_threads, tvm_threads

Say = Callable[[str], None]

BURST_S = 1.0  # the stretch whose lower quartile the fast figure takes
# Separate windows of a run (measure.history_s split evenly), each with the calibration
# kernels in turns: a change must last through all of them at the first runs of a
# history. A runner's slow stretch lasted 1-24 s (up to minutes under load,
# docs/measurement.md); a window of a 120-s run lasts 40 s, and `--window-gap` puts
# idle time between them.
WINDOWS = 3


def runner_identity(host: Host | None = None, cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """What a run records of the machine that measured it: its model name and cores,
    vendor, family and model (`cpu_id`), LLVM's name for the CPU (`llvm_cpu`) and a hash
    of the ISA features LLVM's host detection reports (`isa`). `host`: for tests (the
    default is `this_host()`, which TVMTUNE_TEST_HOST_CPU can make synthetic)."""
    h = host or this_host()
    out = host_description(cpuinfo)
    out["llvm_cpu"] = h.cpu
    out["isa"] = hashlib.sha256(",".join(sorted(h.features)).encode()).hexdigest()[:16]
    return out


def kernel_figure(visits: Sequence[Any]) -> runs.KernelFigure:
    """One kernel's visits over a run, as the history records it."""
    samples = [x for v in visits for x in v.samples]
    est = stats.estimate(samples)
    bursts: dict[int, list[float]] = {}
    for v in visits:
        bursts.setdefault(int(v.t_s // BURST_S), []).extend(v.samples)
    quartiles = [stats.quantile(b) for b in bursts.values() if len(b) >= 3] or [est.value]
    lo = est.lo if math.isfinite(est.lo) else est.value
    hi = est.hi if math.isfinite(est.hi) else est.value
    # A stretch is at least as fast as the whole run's p25 and at most as slow: with
    # sparse visits (a short run, a slow kernel) no stretch may hold the fast samples.
    return runs.KernelFigure(est.value, lo, hi, est.n, min(*quartiles, est.value), max(*quartiles, est.value))


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class RunItem:
    """One log set of a run: its operator, imported template and each workload's best."""

    operator: str
    template: ModuleType
    knobs: Mapping[str, Mapping[str, Any]]  # workload -> the best's knobs
    # workload -> its workload.Workload, when the caller resolved it already (a re-tune)
    resolved: Mapping[str, Any] = field(default_factory=dict)


def measure_runs(
    items: Sequence[RunItem],
    target: TargetConfig,
    config: Config,
    *,
    by: str,
    runner: Any,
    builder: Any,
    say: Say = print,
    windows: int = WINDOWS,
    gap_s: float = 0.0,
    host: Mapping[str, Any] | None = None,
) -> dict[str, runs.Run]:
    """One run of the history of each item (log sets of one target): every best and the
    calibration kernels in turns for measure.history_s seconds in all, as `windows`
    separate windows `gap_s` apart, so each kernel's visits are spread over the whole
    run; operator -> its Run. `host`: the runner identity to record (default: this
    machine's, `runner_identity`; an RPC target's runner is described by its key)."""
    cal = calibration.kernels(target.target) or []
    names: list[tuple[str, str]] = []
    schs = []
    for it in items:
        for w in sorted(it.knobs):
            names.append((it.operator, w))
            schs.append(schedule_config(it.template, it.resolved.get(w, w), dict(it.knobs[w]), target.target))
    schs += [c.sch for c in cal]
    what = ", ".join(sorted({it.operator for it in items}))
    say(
        f"{what} on {target.name}: a run of the history: {len(names)} best(s)"
        f"{' and the calibration kernels' if cal else ''} in turns for {config.measure.history_s:g}s"
    )
    visits, per_window = _measure_windows(
        schs, target, config, runner=runner, builder=builder, windows=windows, gap_s=gap_s, what=what
    )
    figures = [kernel_figure(v) for v in visits]
    if host is None:
        host = host_description() if target.rpc else runner_identity()
    host = dict(host)
    host["runner"] = f"rpc {target.rpc.key}@{target.rpc.tracker}" if target.rpc else "local"
    return _runs_of(items, names, figures, per_window, cal, host=host, by=by, config=config, windows=windows)


def _measure_windows(
    schs: Sequence[Any],
    target: TargetConfig,
    config: Config,
    *,
    runner: Any,
    builder: Any,
    windows: int,
    gap_s: float,
    what: str,
) -> tuple[list[list[Any]], list[list[float]]]:
    """The kernels measured in turns over `windows` windows `gap_s` apart: each kernel's
    visits on one clock for the whole run, and each window's fast figure per kernel."""
    visits: list[list[Any]] = [[] for _ in schs]
    per_window: list[list[float]] = []
    t0 = time.perf_counter()
    for k in range(max(1, windows)):
        if k and gap_s > 0:
            time.sleep(gap_s)
        start = time.perf_counter() - t0
        got = interleave(
            schs,
            target.target,
            config.measure,
            seconds=config.measure.history_s / max(1, windows),
            runner=runner,
            builder=builder,
            what=f"{what} on {target.name}: a history run",
        )
        per_window.append([kernel_figure(v).fast_s for v in got])
        for i, v in enumerate(got):  # one run's clock: the 1-s stretches of windows stay apart
            visits[i] += [replace(x, t_s=x.t_s + start) for x in v]
    return visits, per_window


def _runs_of(
    items: Sequence[RunItem],
    names: Sequence[tuple[str, str]],
    figures: Sequence[runs.KernelFigure],
    per_window: Sequence[Sequence[float]],
    cal: Sequence[Any],
    *,
    host: Mapping[str, Any],
    by: str,
    config: Config,
    windows: int,
) -> dict[str, runs.Run]:
    """Each item's Run: its bests' figures (and per window, with more than one) beside
    the calibration kernels', stamped with the time, who measured it and where."""
    calibs = {c.kind: f for c, f in zip(cal, figures[len(names) :], strict=True)}
    at, tvm = now_utc(), installed_tvm_version() or "unknown"
    out: dict[str, runs.Run] = {}
    for it in items:
        wl = {w: f for (op, w), f in zip(names, figures, strict=False) if op == it.operator}
        wins = (
            tuple(
                runs.Window(
                    {w: f[i] for i, (op, w) in enumerate(names) if op == it.operator},
                    {c.kind: f[len(names) + j] for j, c in enumerate(cal)},
                )
                for f in per_window
            )
            if windows > 1
            else ()
        )
        out[it.operator] = runs.Run(
            at,
            by,
            dict(host),
            tvm,
            config.measure.history_s,
            wl,
            dict(calibs),
            calibration.CALIBRATION_VERSION if cal else 0,
            windows=wins,
        )
    return out


@dataclass(frozen=True)
class Remeasured:
    """One entry after `remeasure`: the new run, the history with it, and the verdicts."""

    operator: str
    target: str
    run: runs.Run
    history: tuple[runs.Run, ...]
    verdicts: tuple[runs.Verdict, ...]
    readme: str  # repo-relative README that states the figures
    band: runnerband.RunnerBand | None = None  # the runner band the first runs are judged on
    notes: tuple[str, ...] = ()  # warnings: an old history matched by name, series left out

    @property
    def drifted(self) -> bool:
        return any(v.drifted for v in self.verdicts)


def check_same_machine(manifest: Manifest, history: Sequence[runs.Run], here: Mapping[str, Any] | None = None) -> str:
    """HostError when this machine is not the one the history was measured on, failing
    closed (`runs.match_machine`): its band says nothing of another CPU (a runner
    replaced under the same labels). The warning to print when an old history was
    matched by its stored fields alone ("" otherwise)."""
    here = runner_identity() if here is None else here
    theirs = history[-1].host if history else manifest.host
    ok, why = runs.match_machine(here, theirs, manifest.target.get("mcpu"))
    if not ok:
        raise HostError(
            f"{manifest.operator}/{manifest.target_name} was {why}: its run history is a property of that "
            "runner. Remeasure it there (its runs-on labels), or re-tune it here (tvmtune-ci retune --all) "
            "to start a history on this one"
        )
    return f"{manifest.operator}/{manifest.target_name}: its history was {why}" if why else ""


def judge_all(
    manifest: Manifest, history: Sequence[runs.Run], band: runnerband.RunnerBand | None = None
) -> tuple[runs.Verdict, ...]:
    return tuple(judge_history(history, w, band) for w in sorted(manifest.results))


def judge_history(
    history: Sequence[runs.Run], workload: str, band: runnerband.RunnerBand | None = None
) -> runs.Verdict:
    """The verdict on one workload, without the runs in which the runner's disturbance
    moved it (`runs.disturbed`, said). A disturbed run whose figure the runner does not
    explain stays in: a change far beyond any band in it is reported at once, and the
    verdict says the runner was disturbed in that run too.

    While the history has fewer runs than its own band needs (`runs.MIN_REF` +
    `runs.PERSIST`), a runner band (`band`) judges the latest run's windows against
    the runs before (`runnerband.judge_first`); from then on the history's own band and
    three-runs rule."""
    skip = runs.disturbed(history, workload)
    kept = [r for r in history if r.at not in skip]
    runner = {k: [(r.at, r.calibration[k].fast_s) for r in kept if k in r.calibration] for k in ("compute", "memory")}
    v = runs.judge(workload, runs.series(kept, workload), runner=runner)
    young = len(runs.series(kept, workload)) < runs.MIN_REF + runs.PERSIST
    if history and history[-1].at in skip:
        # The runner's disturbance moved the kernel in this run: nothing to judge in it, and
        # the runs before were judged in their turn (bench_drift saw the rule above re-judge
        # the run before as a 1.785x "far" drift, run after run, once this one was left out).
        v = runs.Verdict(
            workload,
            "inconclusive",
            f"not judged: the runner was disturbed in this run ({skip[history[-1].at]}) and "
            "this kernel moved with it; the next remeasure tells"
            + (f" ({band.describe()})" if band is not None and young else ""),
            latest=runs.value(history[-1], workload),
            runs=len(kept),
        )
    elif band is not None and young and history and kept and kept[-1] is history[-1]:
        # Every window decides, the far-change rule's cases included: a swapped 60x kernel
        # is beyond the band in all of them, one loaded earlier run is not a change.
        v = runnerband.judge_first(workload, kept[:-1], kept[-1], band) or v
    if skip:
        n = len(skip)
        first = next(iter(skip.items()))
        v = replace(
            v,
            sentence=v.sentence
            + (
                f" ({n} run{'s' if n > 1 else ''} left out: the runner was disturbed, e.g. {first[0][:16]}: {first[1]})"
            ),
        )
    latest = runs.disturbed(history).get(history[-1].at) if history else None
    if v.drifted and latest is not None and history[-1].at not in skip:
        v = replace(
            v,
            sentence=v.sentence + f" (the runner was disturbed in the latest run: "
            f"{latest}, which does not explain this kernel's figure)",
        )
    return v


def describe(r: Remeasured) -> list[str]:
    """One line per workload: the figure now, the verdict and why; the runner's own
    drift (the calibration kernels) when a verdict is drift."""
    out = []
    for v in r.verdicts:
        f = r.run.workloads.get(v.workload)
        now = (
            ""
            if f is None
            else (
                f"best {stats.fmt_latency(f.fast_s)} in its fastest stretch "
                f"({stats.fmt_latency(f.p25_s)} over the run); "
            )
        )
        word = {"drift": "DRIFT", "stable": "stable", "inconclusive": "inconclusive"}[v.state]
        line = f"{r.operator}/{r.target}/{v.workload}: {now}{word}: {v.sentence}"
        readme = against_headline(r.history[:-1], r.run, v.workload)
        if readme:
            line += f"; {readme}"
        if v.drifted:
            line += "; " + runner_sentence(r.history)
        out.append(line)
    return out


def runner_sentence(history: Sequence[runs.Run]) -> str:
    """Whether the runner itself moved: the compute calibration kernel's latest figure
    against its median over the earlier runs."""
    pts = [(h.at, h.calibration["compute"].fast_s) for h in history if "compute" in h.calibration]
    if len(pts) < 2:
        return "the runner's own speed is not known (no calibration kernel measured)"
    before = statistics.median(v for _, v in pts[:-1])
    ratio = pts[-1][1] / before
    return f"the compute calibration kernel measured {ratio:.3f}x its median of the runs before " + (
        "(the runner itself changed speed)" if abs(ratio - 1) > 0.1 else "(the runner did not)"
    )


def label_series(config: Config, label: str, skip: Sequence[Path] = ()) -> tuple[list[runnerband.Series], list[str]]:
    """The series of every log set measured on runner `label` (every target with those
    runs-on labels), but the folders in `skip`; and in words each set that could not be
    read (left out, not fatal: the pool is evidence, not a gate)."""
    out, notes = [], []
    targets = [t for t in config.targets if runnerband.runner_label(t.runs_on, t.rpc.key if t.rpc else None) == label]
    folders = (
        sorted(d for d in config.logs_path.iterdir() if d.is_dir() and not d.name.startswith("."))
        if config.logs_path.is_dir()
        else []
    )
    for t in targets:
        for op in folders:
            folder = op / t.slug
            if folder in skip or not (folder / "manifest.json").is_file():
                continue
            try:
                m = read_manifest(folder / "manifest.json")
                history = runs.read_runs(folder, m.files)
            except TvmtuneError as err:
                notes.append(f"{op.name}/{t.name} left out of the runner band: {err}")
                continue
            out += [
                s
                for w in sorted(m.results)
                if (s := runnerband.series_of(m.operator, t.name, m.target.get("mcpu"), history, w))
            ]
    return out, notes


def runner_pool(
    config: Config, target: TargetConfig, current: Mapping[Path, tuple[Manifest, Sequence[runs.Run]]]
) -> tuple[runnerband.Pool | None, list[str]]:
    """The pool of the target's runner label: its file, with the series of every set of
    the label as they are now (`current`: the sets being measured, folder -> manifest
    and history before this run); None when the target names no runner label."""
    label = runnerband.runner_label(target.runs_on, target.rpc.key if target.rpc else None)
    if label is None:
        return None, []
    pool = runnerband.read_pool(runnerband.pool_path(config.logs_path, label), label)
    others, notes = label_series(config, label, skip=list(current))
    mine = [
        s
        for m, h in current.values()
        for w in sorted(m.results)
        if (s := runnerband.series_of(m.operator, target.name, m.target.get("mcpu"), h, w))
    ]
    return pool.merged([*others, *mine]), notes


def remeasure_target(
    config: Config,
    entries: Sequence[Any],
    *,
    record: bool,
    say: Say = print,
    windows: int = WINDOWS,
    gap_s: float = 0.0,
    here: Mapping[str, Any] | None = None,
) -> list[Remeasured]:
    """Measure the bests of fresh entries of one target in one run (`windows` windows
    `gap_s` apart), judge each entry's history with it (the runner band of its label
    while the history is young), and with `record` append the run to each set's
    runs.jsonl, republish its manifest and README atomically (under the folder's lock)
    and write the runner's pool. HostError when this host cannot run the target or is
    not the machine a history was measured on. `here`: the runner identity (tests)."""
    target = config.target(entries[0].target_name)
    assert all(e.target_name == target.name for e in entries)
    check_host(target.target, remote=target.rpc is not None)
    if target.rpc is None and here is None:
        here = runner_identity()
    histories, notes = {}, []
    for e in entries:
        histories[e.operator] = runs.read_runs(e.logset.folder, e.manifest.files)
        if target.rpc is None:
            notes.append(check_same_machine(e.manifest, histories[e.operator], here))
    pool, more = runner_pool(config, target, {e.logset.folder: (e.manifest, histories[e.operator]) for e in entries})
    band, left = pool.band(here or {}) if pool is not None and here is not None else (None, [])
    notes += more + [f"left out of the runner band: {x}" for x in left]
    if target.rpc is not None:
        preflight(target.rpc, config.measure)
    items = [
        RunItem(
            e.operator,
            import_template(config.root / e.template_file, config.root),
            {w: r.best.knobs for w, r in e.manifest.results.items()},
        )
        for e in entries
    ]
    measured = _measure_target(items, target, config, say=say, windows=windows, gap_s=gap_s, here=here)
    out = _judged(config, entries, items, measured, histories, band, notes, record=record)
    if record and pool is not None:
        # The pool learns this run too (after the verdicts: a run is never in the band
        # it is judged against).
        grown = pool.merged(
            s
            for r, e in zip(out, entries, strict=True)
            for w in sorted(e.manifest.results)
            if (s := runnerband.series_of(e.operator, target.name, e.manifest.target.get("mcpu"), r.history, w))
        )
        runnerband.write_pool(runnerband.pool_path(config.logs_path, pool.label), grown)
    return out


def _measure_target(
    items: Sequence[RunItem],
    target: TargetConfig,
    config: Config,
    *,
    say: Say,
    windows: int,
    gap_s: float,
    here: Mapping[str, Any] | None,
) -> dict[str, runs.Run]:
    """One run of the items' history on the target's runner (`measure_runs`), with the
    target's thread count; operator -> its Run."""
    with tvm_threads(measure_threads(target)):
        runner = make_runner(config.measure, target.rpc)
        builder = make_builder()
        try:
            return measure_runs(
                items,
                target,
                config,
                by="remeasure",
                runner=runner,
                builder=builder,
                say=say,
                windows=windows,
                gap_s=gap_s,
                host=here,
            )
        finally:
            builder.close()
            runner.close()


def _judged(
    config: Config,
    entries: Sequence[Any],
    items: Sequence[RunItem],
    measured: Mapping[str, runs.Run],
    histories: Mapping[str, list[runs.Run]],
    band: runnerband.RunnerBand | None,
    notes: Sequence[str],
    *,
    record: bool,
) -> list[Remeasured]:
    """Each entry's history with the new run (appended to its runs.jsonl, under the
    folder's lock, with `record`) and its verdicts."""
    out = []
    for e, it in zip(entries, items, strict=True):
        run = measured[e.operator]
        if band is not None and len(histories[e.operator]) + 1 < runs.MIN_REF + runs.PERSIST:
            run = replace(run, band=band.to_json())  # what its verdicts rest on, for the README
        if record:
            with lock.hold(e.logset.lock, f"{e.operator}/{e.target_name}"):
                history = append_run(e.logset, run, it.knobs, runner_peak(config, e.target_name))
        else:
            history = [*histories[e.operator], run]
        readme = f"{config.logs_dir}/{e.operator}/{e.logset.target_slug}/README.md"
        out.append(
            Remeasured(
                e.operator,
                e.target_name,
                run,
                tuple(history),
                judge_all(e.manifest, history, band),
                readme,
                band,
                tuple(n for n in notes if n),
            )
        )
    return out


def append_run(
    logset: Any, run: runs.Run, knobs: Mapping[str, Mapping[str, Any]], peak: RunnerPeak | None = None
) -> list[runs.Run]:
    """Append `run` to the set's runs.jsonl and republish it with its manifest (which
    hashes it) and README (which states its band), in one atomic swap; the history.

    Hold the folder's lock. The manifest is read again here: a re-tune that published
    meanwhile has its own history, and the run is not appended to a set it did not
    measure (CorruptFileError or a changed best say so)."""
    recover(logset.folder)
    manifest = read_manifest(logset.manifest)
    if {w: dict(r.best.knobs) for w, r in manifest.results.items()} != {w: dict(k) for w, k in knobs.items()}:
        raise LockError(
            f"{logset.folder} was re-tuned while this run measured the bests it "
            "had before; the run is not recorded (remeasure again)"
        )
    before = runs.read_runs_bytes(logset.folder, manifest.files)
    old = runs.parse_runs(before, logset.folder / runs.RUNS_NAME) if before else []
    data = before + run.line()  # append-only: the recorded lines stay byte for byte
    sealed = seal_files(manifest, {runs.RUNS_NAME: data})
    history = [*old, run]
    publish(
        logset.folder,
        {
            runs.RUNS_NAME: data,
            "manifest.json": canonical_json(sealed.to_json()).encode(),
            "README.md": render_readme(sealed, history, peak).encode(),
        },
        archive=False,
    )
    return history
