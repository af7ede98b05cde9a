"""The runner band: how far a best's figure moves from run to run on one runner label,
pooled over every log set measured there, and the verdict it allows at a set's first
`remeasure` after a re-tune.

A set's own history needs 8 runs before its own band and the three-runs rule can
judge it (`runs.judge`): with a monthly `remeasure`, most of a year. But most of that
band is the runner's, not the kernel's, and every set measured on the same runner label
gives evidence about it. So the runner keeps a **pool** beside the logs
(`<logs_dir>/.runners/<label>.json`, versioned, written atomically by `remeasure
--record`): per best and history, its figure in each run over the compute calibration
kernel measured in turns with it (the runner's speed in that run divided out; the runs
the runner disturbed left out), and the figure in each of that run's windows. The **runner
band** is the 95th percentile of how far two runs of one best moved apart, over every
such pair in the pool. A series kept there outlives the history it came from: a re-tune
starts a new history, not a new pool.

The **early band**, while a label has no pooled band (fewer than MIN_PAIRS pairs of
runs or MIN_SERIES bests: a new runner label, whose first pairs come one remeasure at
a time): so that a team's first runner gives a verdict at its first `remeasure`, not
months later. It rests on what the first runs show, and is labelled as such wherever a
verdict quotes it (`basis: "early"`): the widest of
- EARLY_WIDEN x the 95th percentile of the moves between the windows of one run (the
  figure over the compute calibration kernel of the same window; every pair of windows
  of every run in the pool). The re-tune's own run has 3 windows, so a best gives 3
  moves before its first remeasure. Within a run is seconds apart, not days: on the
  quiet Zen 4 (`bench_drift_young_zen4_quiet_raw.jsonl`, 20 runs back to back) runs
  moved 1.7x as far as the windows within one (95th percentiles ±2.2% and ±1.3%);
- the largest move between two runs of one best seen so far (95th percentile from 20);
- EARLY_FLOOR, for what a first week cannot show: the runner's mode mix over weeks. The
  pooled bands of the committed labels are ±8.1% (Zen 4, 5,863 pairs) and ±26.8% (Xeon
  EMR, 306 pairs, its calibration kernel changing mode), while over their 388 pairs of
  consecutive runs none moved more than 20% (7 beyond 15%).
So it is never narrower than ±20%, where a pooled band is typically ±8% on a quiet
runner: a first verdict sees a change of 20% or more that lasts every window, and says
"stable" of smaller ones it cannot see. It is weaker than a pooled band, and said so;
the pooled band replaces it as soon as the label has MIN_PAIRS pairs from MIN_SERIES
bests, and a set's own band from its 8th run, as before.

Never mixed across machines: a pool is read only for the label it names, and a series
joins the band only when its runner identity matches this machine's
(`runs.match_machine`, failing closed).

Persistence within one job: a run is taken as separate windows (`remeasure.WINDOWS`),
each with the calibration kernels in turns. At the first runs of a history the verdict
(`judge_first`) is "drift" only when every window lies beyond the runner band (widened
by the set's own runs once it has two) and beyond `runs.MIN_CHANGE` on one side: one of
the runner's slow stretches (seconds, up to minutes under load) spoils one window, not
all of them. Pure Python, no TVM.

Over 400 lines: the pooled band, the early band of a new label and the pool file are one
statistic, read and written in one format; apart, their thresholds would drift.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import runs
from .errors import CorruptFileError
from .fsutil import NotRegularFileError, atomic_write_json, read_regular_file
from .targets import slug

RUNNERS_DIR = ".runners"
# 2: each series keeps its runs' window figures (the early band); a format-1 file is
# read (its series have none) and written back as 2.
POOL_FORMAT = 2
READ_FORMATS = (1, 2)
MAX_POOL_BYTES = 16 << 20
# A runner band rests on at least this many pairs of runs, from at least MIN_SERIES
# series (one best's history): fewer say more about one kernel than about the runner.
MIN_PAIRS = 20
MIN_SERIES = 2
# The share of pooled run-to-run moves the band covers. Not the largest: that grows
# with the pool and is one odd run; the windows (all of them beyond) carry the rest.
QUANTILE = 0.95
FIGURE = "fast_vs_compute"
# The early band (the module's docstring): the widest of EARLY_WIDEN x the 95th
# percentile of the moves between windows within a run, the largest move between runs
# so far, and EARLY_FLOOR; it needs at least EARLY_MIN_MOVES moves within runs (one
# best's 3 windows).
EARLY_WIDEN = 2.0
EARLY_FLOOR = 0.20
EARLY_MIN_MOVES = 3


def runner_label(runs_on: Sequence[str], rpc_key: str | None = None) -> str | None:
    """The runner label a target is measured on: its `runs-on` labels (the same list is
    the same runner to GitHub), or its RPC key; None when neither names one."""
    if rpc_key:
        return f"rpc:{rpc_key}"
    return ",".join(runs_on) or None


def pool_path(logs_path: Path, label: str) -> Path:
    return logs_path / RUNNERS_DIR / f"{slug(label.replace(',', '-'))}.json"


@dataclass(frozen=True)
class Series:
    """One best's history on the runner: each run's figure over the compute calibration
    kernel measured with it, oldest first, and the identity of the machine it ran on."""

    key: str  # "operator/target/workload@<the history's first run>"
    host: dict[str, Any]
    mcpu: str | None  # the set's target CPU (matches a history recorded before cpu_id)
    points: tuple[tuple[str, float], ...]
    # Per run with 2 windows or more: its windows' figures (over the compute calibration
    # kernel of the same window), for the early band's moves within a run.
    windows: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "host": self.host,
            "mcpu": self.mcpu,
            "points": [[at, v] for at, v in self.points],
            "windows": [[at, list(vs)] for at, vs in self.windows],
        }


@dataclass(frozen=True)
class EarlyBasis:
    """What an early band rests on (the module's docstring)."""

    within: int  # moves between windows of one run
    within_q: float  # their 95th percentile (relative)
    between_q: float  # the 95th percentile of the moves between runs (the largest under 20); 0 with none

    def to_json(self) -> dict[str, Any]:
        return {"within": self.within, "within_q": self.within_q, "between_q": self.between_q}


@dataclass(frozen=True)
class RunnerBand:
    """The pooled band of one runner label, on this machine's identity; or, while it has
    none, its early band (`early` says what that rests on)."""

    label: str
    halfwidth: float  # relative: 0.042 is ±4.2%
    pairs: int
    series: int
    sets: int
    # The early band (no pooled band yet): the moves within runs it rests on, their 95th
    # percentile, and the largest move between runs; None for a pooled band.
    early: EarlyBasis | None = None

    def describe(self) -> str:
        return describe(self.to_json())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": self.label,
            "halfwidth": self.halfwidth,
            "pairs": self.pairs,
            "series": self.series,
            "sets": self.sets,
        }
        if self.early is not None:  # a pooled band is recorded as before
            out.update(basis="early", **self.early.to_json())
        return out


def describe(band: Mapping[str, Any]) -> str:
    """A runner band (as a run records it) in words."""
    if band.get("basis") == "early":
        return (
            f"the early band of `{band.get('label')}`: ±{float(band.get('halfwidth', 0)):.1%}, "
            f"weaker than a pooled band (none yet: {band.get('pairs')} of the {MIN_PAIRS} pairs of runs "
            f"from {MIN_SERIES} bests it needs); the widest of {EARLY_WIDEN:g}x the moves between the "
            f"windows of one run (±{float(band.get('within_q', 0)):.1%}, {QUANTILE:.0%} of "
            f"{band.get('within')}), the moves between runs so far "
            f"(±{float(band.get('between_q', 0)):.1%}) and ±{EARLY_FLOOR:.0%} for what a first week "
            f"cannot show; over the compute calibration kernel"
        )
    return (
        f"the runner band of `{band.get('label')}`: ±{float(band.get('halfwidth', 0)):.1%} "
        f"({QUANTILE:.0%} of the moves between {band.get('pairs')} pairs of runs of {band.get('series')} "
        f"bests in {band.get('sets')} log sets, over the compute calibration kernel)"
    )


@dataclass(frozen=True)
class Pool:
    """What one runner label's file holds: its label and series by key."""

    label: str
    series: Mapping[str, Series]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": POOL_FORMAT,
            "label": self.label,
            "series": [self.series[k].to_json() for k in sorted(self.series)],
        }

    def merged(self, more: Iterable[Series]) -> Pool:
        """With `more` in place of the stored series of the same key (a history only
        grows); the others kept, archived histories included."""
        out = dict(self.series)
        out.update((s.key, s) for s in more)
        return Pool(self.label, out)

    def band(self, here: Mapping[str, Any]) -> tuple[RunnerBand | None, list[str]]:
        """The runner band over the series measured on this machine's identity, and in
        words each series left out (another machine, or one the stored fields cannot
        tell). While that rests on fewer than MIN_PAIRS pairs or MIN_SERIES series, the
        early band (the module's docstring); None while there are fewer than
        EARLY_MIN_MOVES moves between windows of a run too."""
        moves: list[float] = []
        within: list[float] = []
        used, sets, left = 0, set(), []
        early_used, early_sets = 0, set()
        for key in sorted(self.series):
            s = self.series[key]
            ok, why = runs.match_machine(here, s.host, s.mcpu)
            if not ok:
                left.append(f"{key}: {why}")
                continue
            pairs = _moves([v for _, v in s.points])
            inside = [m for _, vs in s.windows for m in _moves(vs)]
            if pairs:
                used += 1
                sets.add(key.rsplit("/", 1)[0])
                moves += pairs
            if pairs or inside:
                early_used += 1
                early_sets.add(key.rsplit("/", 1)[0])
                within += inside
        if len(moves) >= MIN_PAIRS and used >= MIN_SERIES:
            return RunnerBand(self.label, _quantile(moves), len(moves), used, len(sets)), left
        if len(within) < EARLY_MIN_MOVES:
            return None, left
        # No pooled band yet: the early band, wider than what the first runs showed
        # (the module's docstring says why each term).
        basis = EarlyBasis(len(within), _quantile(within), _quantile(moves) if moves else 0.0)
        half = max(EARLY_WIDEN * basis.within_q, basis.between_q, EARLY_FLOOR)
        return RunnerBand(self.label, half, len(moves), early_used, len(early_sets), basis), left


def _moves(vals: Sequence[float]) -> list[float]:
    """How far each pair of figures moved apart, relative."""
    return [max(a / b, b / a) - 1 for i, a in enumerate(vals) for b in vals[i + 1 :]]


def _quantile(moves: Sequence[float]) -> float:
    """The QUANTILE of `moves` (the largest of fewer than 20)."""
    ordered = sorted(moves)
    return ordered[min(len(ordered) - 1, math.ceil(QUANTILE * len(ordered)) - 1)]


def run_figure(run: runs.Run, workload: str) -> float | None:
    """A run's figure of one best for the runner band: over the compute calibration
    kernel of the same window, in its fastest window (noise on a shared runner only ever
    slows a kernel, so the fastest window is the run's best estimate, as the fastest 1-s
    stretch is a window's); the whole run's figure when it recorded no windows."""
    got = [v for w in run.windows if (v := _normalised(w.workloads.get(workload), w.calibration.get("compute")))]
    return min(got) if got else runs.value(run, workload, FIGURE)


def series_of(
    operator: str, target_name: str, mcpu: str | None, history: Sequence[runs.Run], workload: str
) -> Series | None:
    """A best's series from its set's history, the runs the runner disturbed left out
    (None without two runs to pair nor a run of 2 windows, or without the compute
    calibration kernel). A one-run history (the re-tune's) gives its windows to the
    early band."""
    skip = runs.disturbed(history, workload)
    kept = [r for r in history if r.at not in skip]
    pts = [(r.at, v) for r in kept if (v := run_figure(r, workload))]
    wins = [(r.at, vs) for r in kept if len(vs := window_figures(r, workload)) >= 2]
    if not history or (len(pts) < 2 and not wins):
        return None
    key = f"{operator}/{target_name}/{workload}@{history[0].at}"
    return Series(key, dict(history[-1].host), mcpu, tuple(pts), tuple(wins))


def window_figures(run: runs.Run, workload: str) -> tuple[float, ...]:
    """A run's figure of one best in each of its windows, over the compute calibration
    kernel of the same window (the windows that measured both)."""
    return tuple(v for w in run.windows if (v := _normalised(w.workloads.get(workload), w.calibration.get("compute"))))


def _series(d: Any, where: str) -> Series:
    if not isinstance(d, dict) or not isinstance(d.get("key"), str) or not isinstance(d.get("host"), dict):
        raise ValueError(f"{where}: key and host expected")
    mcpu, pts, wins = d.get("mcpu"), d.get("points"), d.get("windows", [])
    if mcpu is not None and not isinstance(mcpu, str) or not isinstance(pts, list) or not isinstance(wins, list):
        raise ValueError(f"{where}: mcpu a string or null, points and windows lists")
    out = []
    for p in pts:
        if not isinstance(p, list) or len(p) != 2 or not isinstance(p[0], str) or not _positive(p[1]):
            raise ValueError(f"{where}: a point is {p!r}, expected [date, positive figure]")
        out.append((p[0], float(p[1])))
    runs_w = []
    for w in wins:
        if (
            not isinstance(w, list)
            or len(w) != 2
            or not isinstance(w[0], str)
            or not isinstance(w[1], list)
            or not all(_positive(v) for v in w[1])
        ):
            raise ValueError(f"{where}: a run's windows are {w!r}, expected [date, [positive figures]]")
        runs_w.append((w[0], tuple(float(v) for v in w[1])))
    return Series(d["key"], dict(d["host"]), mcpu, tuple(out), tuple(runs_w))


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def read_pool(path: Path, label: str) -> Pool:
    """The pool of runner `label` (empty when it has none yet); CorruptFileError when
    the file is not one, or names another label (a file copied or renamed: another
    runner's band is never used)."""
    try:
        data = read_regular_file(path, MAX_POOL_BYTES)
    except FileNotFoundError:
        return Pool(label, {})
    except (OSError, NotRegularFileError) as e:
        raise CorruptFileError(f"{path}: cannot read the runner band ({e})") from None
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict) or obj.get("format") not in READ_FORMATS:
            raise ValueError(
                f"format {obj.get('format') if isinstance(obj, dict) else None!r}, this tvmtune-ci reads "
                + " and ".join(map(str, READ_FORMATS))
            )
        if not isinstance(obj.get("series"), list):
            raise ValueError("series must be a list")
        series = [_series(d, f"series[{i}]") for i, d in enumerate(obj["series"])]
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
        raise CorruptFileError(
            f"{path}: not a runner band ({e}); restore it from git or remove it "
            "(the next remeasure --record pools the histories again)"
        ) from None
    if obj.get("label") != label:
        raise CorruptFileError(
            f"{path} is the runner band of {obj.get('label')!r}, not of {label!r}: "
            "another runner's band is never used; restore it from git or remove it"
        )
    return Pool(label, {s.key: s for s in series})


def write_pool(path: Path, pool: Pool) -> None:
    atomic_write_json(path, pool.to_json())


def verdict_basis(history: Sequence[runs.Run], workloads: Sequence[str], band: Mapping[str, Any]) -> str:
    """Which band `remeasure`'s drift verdict used for a set's latest run (`band`, as the
    run records it), in words for its README."""
    need = runs.MIN_REF + runs.PERSIST
    own = min((len(runs.headline_series(history, w)) for w in workloads), default=0)
    if own >= need:
        return (
            f"**Drift verdicts** (`tvmtune-ci remeasure`) use this set's own band ({own} runs): a "
            f"change must lie beyond it in the last {runs.PERSIST} runs (or {runs.FAR:.0%} off at once)."
        )
    return (
        f"**Drift verdicts** (`tvmtune-ci remeasure`) use {describe(band)} until this set has "
        f"{need} runs of its own ({own} now): a change must lie beyond it, and beyond "
        f"{runs.MIN_CHANGE:.0%}, in every window of one run (each with the calibration kernels in "
        f"turns); then this set's own band and {runs.PERSIST} runs."
    )


# --------------------------------------------------------------------------- the verdict


def _normalised(fig: float | None, cal: float | None) -> float | None:
    return fig / cal if fig and cal else None


def judge_first(workload: str, before: Sequence[runs.Run], latest: runs.Run, band: RunnerBand) -> runs.Verdict | None:
    """The verdict on a best at the first runs of its history, from the runner band and
    this run's windows; None when they cannot give one (no earlier run of it, fewer
    than 2 windows, or no compute calibration kernel), and the history's own rule
    decides.

    The reference is the median over the earlier runs of their figure (`run_figure`:
    the fastest window, over the compute calibration kernel of the same window). The
    edge is the runner band, widened by how far the set's own earlier runs spread once
    it has two, and at least `runs.MIN_CHANGE`. "drift" when every window of this run
    lies beyond it on one side (its fastest window too: like for like with the
    reference) by one move (the windows within twice the edge of each other;
    "inconclusive" when they are not: the runner moved under the kernel within the job);
    "stable" otherwise, naming a window that alone was beyond (a slow stretch of the
    runner, not a change)."""
    r = _first_reading(workload, before, latest, band)
    if r is None:
        return None
    if r.beyond and r.spread > 2 * r.edge:
        # Every window beyond, but not by one move: the runner changed speed under the
        # kernel within the job (bench_drift under load: 1.13x, 1.26x and 2.13x in one run,
        # the compute calibration kernel flipping between two modes 2x apart).
        return _windows_disagree(r)
    if r.beyond:
        return _drift_in_every_window(r)
    odd = [i + 1 for i, x in enumerate(r.ratios) if abs(x - 1) > r.edge]
    if odd:
        return _slow_stretch(r, odd)
    return _within_band(r, band)


@dataclass(frozen=True)
class _FirstReading:
    """This run's windows against the earlier runs of a young history: what
    `judge_first`'s verdicts share."""

    workload: str
    ratios: list[float]  # each window's figure over the earlier runs' median
    edge: float  # the runner band, widened by the set's own, at least runs.MIN_CHANGE
    rest: str  # the earlier runs, in words
    used: str  # the band used, in words
    whole: float | None  # this run's figure over the whole run (`runs.value`)
    count: int  # runs so far: the earlier ones and this one

    @property
    def shown(self) -> str:
        return ", ".join(f"{x:.3f}x" for x in self.ratios)

    @property
    def beyond(self) -> bool:
        """Every window beyond the edge, on one side."""
        return all(x > 1 + self.edge for x in self.ratios) or all(x < 1 - self.edge for x in self.ratios)

    @property
    def spread(self) -> float:
        """How far the windows lie apart: the slowest over the fastest, less 1."""
        return max(self.ratios) / min(self.ratios) - 1

    def verdict(self, state: str, sentence: str, direction: str | None = None) -> runs.Verdict:
        return runs.Verdict(
            self.workload, state, sentence, None, self.whole, statistics.median(self.ratios), self.count, direction
        )


def _first_reading(
    workload: str, before: Sequence[runs.Run], latest: runs.Run, band: RunnerBand
) -> _FirstReading | None:
    """The reference (the earlier runs' median `run_figure`), the edge and this run's
    windows over the reference; None when there is no earlier run of the workload, fewer
    than 2 windows, or a window without the compute calibration kernel."""
    ref_pts = [(r.at, v) for r in before if (v := run_figure(r, workload))]
    now = [_normalised(w.workloads.get(workload), w.calibration.get("compute")) for w in latest.windows]
    if not ref_pts or len(now) < 2 or not all(now):
        return None
    ref = statistics.median(v for _, v in ref_pts)
    own = runs.band_of(ref_pts)
    own_half = own.halfwidth if own is not None and own.runs >= 2 else 0.0
    edge = max(band.halfwidth, own_half, runs.MIN_CHANGE)
    ratios = [v / ref for v in now if v]
    rest = f"{len(before)} earlier run{'s' if len(before) != 1 else ''} of this set"
    used = band.describe() + (f", widened to this set's own ±{own_half:.1%}" if own_half > band.halfwidth else "")
    return _FirstReading(workload, ratios, edge, rest, used, runs.value(latest, workload), len(before) + 1)


def _windows_disagree(r: _FirstReading) -> runs.Verdict:
    return r.verdict(
        "inconclusive",
        f"every window of this run is beyond ±{r.edge:.1%} of the {r.rest} ({r.shown} their figure, over "
        f"the compute calibration kernel), but they disagree by {r.spread:.0%}, more than twice that: "
        f"the runner's speed moved under the kernel within this job, not one change; the next "
        f"remeasure tells ({r.used})",
    )


def _drift_in_every_window(r: _FirstReading) -> runs.Verdict:
    d = "slower" if r.ratios[0] > 1 else "faster"
    return r.verdict(
        "drift",
        f"all {len(r.ratios)} windows of this run are {d} than the {r.rest} ({r.shown} their figure, "
        f"over the compute calibration kernel measured in turns with it), beyond ±{r.edge:.1%} and "
        f"within {r.spread:.0%} of each other: {r.used}; a change that lasted the whole job",
        d,
    )


def _slow_stretch(r: _FirstReading, odd: list[int]) -> runs.Verdict:
    """Stable: some windows beyond the edge (`odd`, 1-based), the others within it."""
    inside = [i + 1 for i in range(len(r.ratios)) if i + 1 not in odd]
    return r.verdict(
        "stable",
        f"no change that lasts: this run's {len(r.ratios)} windows are {r.shown} the {r.rest} (over the "
        f"compute calibration kernel); window{'s' if len(odd) > 1 else ''} {', '.join(map(str, odd))} "
        f"beyond ±{r.edge:.1%}, window{'s' if len(inside) > 1 else ''} {', '.join(map(str, inside))} "
        f"within it: a slow stretch of the runner, not a change ({r.used})",
    )


def _within_band(r: _FirstReading, band: RunnerBand) -> runs.Verdict:
    return r.verdict(
        "stable",
        f"within the {'early' if band.early else 'runner'} band: this run's {len(r.ratios)} windows are {r.shown} the {r.rest} (over "
        f"the compute calibration kernel), within ±{r.edge:.1%}: {r.used}",
    )
