"""The words a log set's README and `remeasure` say about its run history: the headline
and its band, the runner's noise and what would narrow it, one row per run, and a run
against the headline. The figures and rules they speak of are core/runs.py's (TVM-free,
shared with `check`, `status` and the runner band); only the prose lives here.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.runs import (
    FIGURE,
    FIGURES,
    MIN_CHANGE,
    MIN_REF,
    PERSIST,
    Run,
    band_of,
    disturbed,
    headline_basis,
    steady_series,
    value,
)
from ..core.stats import fmt_latency


def against_headline(before: Sequence[Run], run: Run, workload: str) -> str | None:
    """This run's figure as the README's headline states it (at the runner's usual
    speed of the runs `before` it) against that headline and its band: what a reader who
    re-measures the kernel sees. None when `run` did not measure the workload or no run
    before it did."""
    f = run.workloads.get(workload)
    basis = headline_basis(before, workload)
    if f is None or not basis.points:
        return None
    band = band_of(basis.points)
    assert band is not None
    cal = run.calibration.get("compute")
    if basis.usual is not None and cal is None:
        # The headline divides the runner's speed out; this run cannot: comparing its
        # figure as measured with it would mix the two.
        return (
            f"as measured {fmt_latency(f.fast_s)}; not compared with the README's headline "
            f"{fmt_latency(band.median)}: this run did not measure the compute calibration "
            "kernel the headline divides the runner's speed out with"
        )
    if basis.usual is not None and cal is not None:
        now, how = f.fast_s * basis.usual / cal.fast_s, "at the runner's usual speed"
    else:
        now, how = f.fast_s, "as measured"
    ratio = now / band.median
    said = f"{how} {fmt_latency(now)}, {ratio:.3f}x the README's headline {fmt_latency(band.median)}"
    if band.runs < MIN_REF + PERSIST:
        return f"{said} (it rests on {band.runs} run{'s' if band.runs != 1 else ''}: no band yet)"
    where = "inside" if abs(ratio - 1) <= band.halfwidth else "outside"
    return f"{said}: {where} its band (±{band.halfwidth:.1%}, {band.runs} runs)"


def headline(runs: Sequence[Run], workload: str) -> tuple[float | None, str]:
    """The README's headline of a workload: the median over the runs of the kernel at the
    runner's usual speed (`usual_speed_series`; the absolute fastest-stretch figure on a
    target without calibration kernels), and in words how far the runs spread, and how
    far the absolute figure spread (what `remeasure`'s verdict judges), or how many more
    runs a band needs."""
    basis = headline_basis(runs, workload)
    pts = basis.points
    if not pts:
        return None, "no run yet"
    band = band_of(pts)
    assert band is not None
    if len(pts) < MIN_REF + PERSIST:
        need = MIN_REF + PERSIST - len(pts)
        return band.median, (f"{len(pts)} run{'s' if len(pts) != 1 else ''}; the band is known after {need} more")
    left = f"; {basis.left_out} left out: the runner was disturbed" if basis.left_out else ""
    words = f"runs spread ±{band.halfwidth:.1%} ({band.runs} runs, {band.first} to {band.last}{left})"
    if basis.usual is not None:
        raw = band_of(basis.absolute)
        assert raw is not None
        words += f"; as measured, without the runner's speed divided out: ±{raw.halfwidth:.1%}"
    return band.median, words


def runner_band(runs: Sequence[Run]) -> str | None:
    """How noisy the runner was, from the calibration kernels (fixed code): how far their
    figure spread between runs, and the largest slowest/fastest stretch within a run
    (the speed modes seen)."""
    parts = []
    for kind in ("compute", "memory"):
        pts = [(r.at, r.calibration[kind].fast_s) for r in runs if kind in r.calibration]
        if not pts:
            continue
        modes = max(r.calibration[kind].slow_s / r.calibration[kind].fast_s for r in runs if kind in r.calibration)
        band = band_of(pts)
        assert band is not None
        spread = f"±{band.halfwidth:.1%} over {band.runs} runs" if band.runs > 1 else "1 run"
        parts.append(
            f"the {kind}-bound calibration kernel {fmt_latency(band.median)} ({spread}; within a "
            f"run its slowest 1-s stretch was up to {modes:.2f}x its fastest)"
        )
    return "; ".join(parts) or None


NOISE_FIXES = (
    "a dedicated runner (no other jobs or VMs on its cores), more cores than the "
    "target's num-cores, the measuring cores isolated (isolcpus or a cpuset), the "
    "performance CPU governor with turbo off"
)


def noise_warning(runs: Sequence[Run], workloads: Sequence[str], search_precision: float) -> str | None:
    """A warning when this runner's noise is wider than the effects tvmtune-ci judges on
    it, with what would narrow it; None when it is not (or too few runs say).

    - Across runs: the widest band of a workload's headline figure (once the history has
      MIN_REF + PERSIST runs) against the smallest drift `remeasure` reports (MIN_CHANGE):
      a smaller persistent change hides in the band.
    - Within a run (its last MIN_REF + PERSIST runs): the calibration kernels' slowest
      1-s stretch over their fastest (the speed modes) against the search's precision
      (`measure.search_precision`): the search, and early stop with it, compares trials
      measured seconds apart. (The finals and the history verdict are interleaved, and
      are not affected.)"""
    said = []
    bands = [band_of(steady_series(runs, w)) for w in workloads]
    if bands and all(b is not None and b.runs >= MIN_REF + PERSIST for b in bands):
        wide = max(b.halfwidth for b in bands if b is not None)
        if wide > MIN_CHANGE:
            said.append(
                f"its figures spread ±{wide:.1%} from run to run, wider than the smallest "
                f"drift remeasure reports ({MIN_CHANGE:.0%}): a smaller lasting change "
                "goes unseen"
            )
    modes = [
        r.calibration[k].slow_s / r.calibration[k].fast_s
        for r in runs[-(MIN_REF + PERSIST) :]
        for k in r.calibration
        if r.calibration[k].fast_s > 0
    ]
    if modes and max(modes) - 1 > search_precision:
        said.append(
            f"within a run its speed moved by up to {max(modes):.2f}x for seconds at a time, "
            f"beyond the search's precision (±{search_precision:.0%}): the search and its "
            "early stop compare trials measured seconds apart in that noise (the finals are "
            "interleaved and are not affected)"
        )
    if not said:
        return None
    return (
        "This runner is noisier than the effects judged on it: " + "; ".join(said) + f". To narrow it: {NOISE_FIXES}."
    )


def history_table(runs: Sequence[Run], workloads: Sequence[str]) -> list[str]:
    """One row per run: when, by what (and whether the runner was disturbed), each
    workload's figure (marked when its band leaves it out) and the calibration kernels'."""
    if not runs:
        return []
    kinds = sorted({k for r in runs for k in r.calibration})
    out = [
        f"Figure: {FIGURES[FIGURE][1]}; one row per run (`runs.jsonl`).",
        "",
        "| run | by | machine | "
        + " | ".join(f"`{w}`" for w in workloads)
        + "".join(f" | {k} calibration" for k in kinds)
        + " |",
        "|---|---|---|" + "---|" * (len(workloads) + len(kinds)),
    ]
    runner = disturbed(runs)
    skip = {w: disturbed(runs, w) for w in workloads}
    for r in runs:
        cells = []
        for w in workloads:
            v = value(r, w)
            cells.append("-" if v is None else fmt_latency(v) + (" (left out)" if r.at in skip[w] else ""))
        cells += [fmt_latency(r.calibration[k].fast_s) if k in r.calibration else "-" for k in kinds]
        by = f"{r.by} (runner disturbed: {runner[r.at]})" if r.at in runner else r.by
        out.append(f"| {r.at} | {by} | {r.machine} | " + " | ".join(cells) + " |")
    return out
