"""The run history of a log set: every measurement of its bests on its runner, and the
verdicts drawn from it.

A single run says what this run measured and how precisely (`± 0.8%`); what a reader
will measure next week on the same runner is another number, because a shared runner
changes speed for seconds to minutes at a time (`docs/measurement.md`). So each log set
keeps `runs.jsonl` beside its log: one line per run (the re-tune that wrote the set,
then each `tvmtune-ci remeasure --record`), append-only, hashed in the manifest like
the log and checked by `check`. From it come:

- the **headline figure** of each workload and its **band**: how far that figure
  spread between the runs on this runner, measured, never chosen (`Band`);
- the **drift verdict**: a persistent change beyond that band, decided over the
  series, not from one run (`judge`).

A run measures every best of the set and two fixed calibration kernels
(`calibration.py`) in turns, for `measure.history_s` seconds in all, so each kernel's
visits are spread over the whole run. Per kernel it records the lower quartile of all
its samples (with interval), of its fastest 1-s stretch and of its slowest. The study
in docs/measurement.md found the fastest stretch over such a run the figure that holds
from run to run (a shared VM visits its fast mode within a minute or two); the lines
keep the rest, so the choice can be revisited on the history already recorded.

Pure Python, no TVM: `check`, `status` and `readme` read it.

Over 400 lines: two jobs not yet cut apart, the record format (a run; `runs.jsonl`
read, checked and written) and the figures, band and verdict drawn from it. The cut
between them is clean, but their callers (`pipeline/remeasure.py`, `core/runnerband.py`,
the tests) reach both through the one module name `runs.`, so making it means editing
each such call. The README's and status's sentences drawn from them are
`publish/runwords.py`.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CorruptFileError
from .fsutil import NotRegularFileError, read_regular_file, sha256_bytes

RUNS_NAME = "runs.jsonl"
RUNS_FORMAT = 1
MAX_RUNS_BYTES = 16 << 20


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class KernelFigure:
    """One kernel in one run: the lower quartile of all its samples with the 95%
    interval, and the lower quartiles of its fastest and its slowest 1-s stretch."""

    p25_s: float
    lo_s: float
    hi_s: float
    n: int
    fast_s: float
    slow_s: float

    @property
    def rel_halfwidth(self) -> float:
        if self.p25_s <= 0 or not (math.isfinite(self.lo_s) and math.isfinite(self.hi_s)):
            return math.inf
        return (self.hi_s - self.lo_s) / 2 / self.p25_s

    def to_json(self) -> dict[str, Any]:
        return {
            "p25_s": self.p25_s,
            "lo_s": self.lo_s,
            "hi_s": self.hi_s,
            "n": self.n,
            "fast_s": self.fast_s,
            "slow_s": self.slow_s,
        }


@dataclass(frozen=True)
class Window:
    """One of a run's separate windows (`remeasure.WINDOWS`): each kernel's fastest 1-s
    stretch in it, the calibration kernels measured in turns with the bests as in the
    whole run. A change lasts within one job when every window shows it."""

    workloads: dict[str, float]
    calibration: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {
            "workloads": dict(sorted(self.workloads.items())),
            "calibration": dict(sorted(self.calibration.items())),
        }


def _window(d: Any, where: str) -> Window:
    if not isinstance(d, dict) or not all(isinstance(d.get(k), dict) for k in ("workloads", "calibration")):
        raise ValueError(f"{where} is not a window (workloads and calibration objects)")
    out = []
    for part in ("workloads", "calibration"):
        figs = {}
        for name, v in d[part].items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ValueError(f"{where}.{part}.{name} is {v!r}, expected a positive number of seconds")
            figs[name] = float(v)
        out.append(figs)
    return Window(out[0], out[1])


@dataclass(frozen=True)
class Run:
    """One line of runs.jsonl: when, by what, on which machine, each workload's best and
    the calibration kernels (empty on a target without them)."""

    at: str  # ISO 8601 UTC, seconds
    by: str  # "retune" or "remeasure"
    host: dict[str, Any]
    tvm: str
    window_s: float  # the run's length: every kernel's visits spread over it
    workloads: dict[str, KernelFigure]  # workload -> its best
    calibration: dict[str, KernelFigure]  # "compute"/"memory" -> the calibration kernel
    calibration_version: int  # calibration.CALIBRATION_VERSION (0: none measured)
    format: int = RUNS_FORMAT
    # The run's separate windows, oldest first (none in runs recorded before 2026-12-06,
    # and then the line is written as before: an old line re-encodes byte for byte).
    windows: tuple[Window, ...] = ()
    # The runner band this run's verdicts were judged against, when one was
    # (`runnerband.RunnerBand.to_json`): the README says which band a verdict used.
    band: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "format": self.format,
            "at": self.at,
            "by": self.by,
            "host": self.host,
            "tvm": self.tvm,
            "window_s": self.window_s,
            "workloads": {w: f.to_json() for w, f in sorted(self.workloads.items())},
            "calibration": {k: f.to_json() for k, f in sorted(self.calibration.items())},
            "calibration_version": self.calibration_version,
        }
        if self.windows:
            out["windows"] = [w.to_json() for w in self.windows]
        if self.band is not None:
            out["band"] = self.band
        return out

    def line(self) -> bytes:
        return (json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")) + "\n").encode()

    @property
    def machine(self) -> str:
        """The runner's hardware in words: CPU model (its family and model where known) and cores."""
        return machine_words(self.host)


def machine_words(host: Mapping[str, Any]) -> str:
    """A host description (`hostcheck.host_description`) in words."""
    cpu_id = host.get("cpu_id")
    return f"{host.get('cpu', '?')}{f' ({cpu_id})' if cpu_id else ''} x{host.get('cores', '?')}"


# What a run records of its runner's identity beyond its model name and cores (since
# 2026-12-06 all three; `cpu_id` since 2026-12-04): vendor, family and model from
# /proc/cpuinfo, LLVM's name for the CPU, and a hash of the ISA features LLVM's host
# detection reports (`remeasure.runner_identity`).
IDENTITY = ("cpu_id", "llvm_cpu", "isa")


def same_machine(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two host descriptions are one kind of runner: the same CPU model name and
    cores, and the same identity fields (`IDENTITY`) where both record them. Lenient for
    histories written before `cpu_id` (the re-tune's "does the old search stand");
    `match_machine` is the check that fails closed."""
    if (a.get("cpu"), a.get("cores")) != (b.get("cpu"), b.get("cores")):
        return False
    return not any(a.get(k) and b.get(k) and a[k] != b[k] for k in IDENTITY)


def match_machine(here: Mapping[str, Any], theirs: Mapping[str, Any], mcpu: str | None = None) -> tuple[bool, str]:
    """Whether a run measured `here` may join a history (or a pooled band) measured on
    `theirs`, failing closed: (True, "") when every identity field both record agrees
    and `theirs` records its vendor, family and model; (False, why) when one differs.
    A history recorded before `cpu_id` is matched only when its stored fields pin the
    CPU: the same model name and cores, and the set's target CPU (`mcpu`, which a
    re-tune on another CPU warns about) is LLVM's name for this one; then (True, a
    warning saying so). Otherwise it is refused: a VM's "Intel(R) Xeon(R) Processor"
    names every Xeon generation."""
    if (here.get("cpu"), here.get("cores")) != (theirs.get("cpu"), theirs.get("cores")):
        return False, f"measured on {machine_words(theirs)}, this machine is {machine_words(here)}"
    for key in IDENTITY:
        if here.get(key) and theirs.get(key) and here[key] != theirs[key]:
            return False, (
                f"measured on {machine_words(theirs)} ({key} {theirs[key]}), this machine is "
                f"{machine_words(here)} ({key} {here[key]})"
            )
    if theirs.get("cpu_id"):
        return True, ""
    if mcpu and here.get("llvm_cpu") == mcpu:
        return True, (
            f"recorded before runs named their CPU's vendor, family and model: matched by its "
            f"name ({theirs.get('cpu')!r}), {theirs.get('cores')} cores and the target's CPU "
            f"{mcpu}, which is LLVM's name for this one"
        )
    return False, (
        f"measured on {machine_words(theirs)}, recorded before runs named their CPU's vendor, "
        f"family and model, and its target's CPU ({mcpu or 'none named'}) is not this "
        f"machine's ({here.get('llvm_cpu') or 'unknown'}): the name alone cannot tell that "
        f"this {machine_words(here)} is the same kind of CPU"
    )


def _figure(d: Any, where: str) -> KernelFigure:
    if not isinstance(d, dict):
        raise ValueError(f"{where} is not an object")
    vals = []
    for key in ("p25_s", "lo_s", "hi_s", "fast_s", "slow_s"):
        v = d.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise ValueError(f"{where}.{key} is {v!r}, expected a positive number of seconds")
        vals.append(float(v))
    n = d.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{where}.n is {n!r}, expected a sample count")
    return KernelFigure(vals[0], vals[1], vals[2], n, vals[3], vals[4])


def run_from_json(obj: Any, where: str = "run") -> Run:
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is not an object")
    if obj.get("format") != RUNS_FORMAT:
        raise ValueError(f"{where}.format is {obj.get('format')!r}; this tvmtune-ci reads format {RUNS_FORMAT}")
    for key in ("at", "by", "tvm"):
        if not isinstance(obj.get(key), str):
            raise ValueError(f"{where}.{key} is {obj.get(key)!r}, expected a string")
    host, wls, cal = obj.get("host"), obj.get("workloads"), obj.get("calibration")
    if not isinstance(host, dict) or not isinstance(wls, dict) or not isinstance(cal, dict):
        raise ValueError(f"{where}: host, workloads and calibration must be objects")
    version, win = obj.get("calibration_version"), obj.get("window_s")
    if not isinstance(version, int) or not isinstance(win, (int, float)):
        raise ValueError(f"{where}: calibration_version must be an integer and window_s a number")
    windows, band = obj.get("windows", []), obj.get("band")
    if not isinstance(windows, list) or not (band is None or isinstance(band, dict)):
        raise ValueError(f"{where}: windows must be a list and band an object")
    return Run(
        obj["at"],
        obj["by"],
        dict(host),
        obj["tvm"],
        float(win),
        {w: _figure(f, f"{where}.workloads.{w}") for w, f in wls.items()},
        {k: _figure(f, f"{where}.calibration.{k}") for k, f in cal.items()},
        version,
        windows=tuple(_window(d, f"{where}.windows[{i}]") for i, d in enumerate(windows)),
        band=None if band is None else dict(band),
    )


def parse_runs(data: bytes, path: Path | str) -> list[Run]:
    """The runs of a runs.jsonl's bytes, oldest first; CorruptFileError naming the file,
    the line and the fix."""
    runs = []
    for i, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            runs.append(run_from_json(json.loads(raw), f"line {i}"))
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
            raise CorruptFileError(
                f"{path}:{i}: not a run record ({e}); the run history was edited by hand: "
                "restore it from git (each line is appended by tvmtune-ci remeasure --record)"
            ) from None
    if data and not data.endswith(b"\n"):
        raise CorruptFileError(f"{path}: its last line is cut short; restore it from git")
    return runs


def is_runs_file(data: bytes) -> bool:
    """Whether bytes are a run history tvmtune-ci wrote (publish uses it to know a
    runs.jsonl is ours when its manifest is unreadable)."""
    try:
        parse_runs(data, RUNS_NAME)
    except CorruptFileError:
        return False
    return bool(data)


def read_runs(folder: Path, files: Mapping[str, str]) -> list[Run]:
    """The run history of the log set in `folder` whose manifest records `files`: [] when
    it names none (a set from before histories); CorruptFileError when the file is
    missing, is not what the manifest hashed, or does not parse."""
    data = read_runs_bytes(folder, files)
    return parse_runs(data, folder / RUNS_NAME) if data else []


def read_runs_bytes(folder: Path, files: Mapping[str, str]) -> bytes:
    """runs.jsonl's bytes, checked against the manifest's sha256 (b"" when it names none)."""
    expected = files.get(RUNS_NAME)
    if expected is None:
        return b""
    path = folder / RUNS_NAME
    try:
        data = read_regular_file(path, MAX_RUNS_BYTES)
    except (OSError, NotRegularFileError) as e:
        raise CorruptFileError(
            f"{path}: cannot read the run history the manifest names ({e}); restore it from git"
        ) from None
    if sha256_bytes(data) != expected:
        raise CorruptFileError(
            f"{path} was modified since it was recorded (its sha256 is not "
            "the manifest's); restore it from git: runs are appended only by "
            "tvmtune-ci remeasure --record"
        )
    return data


def encode_runs(history: Sequence[Run]) -> bytes:
    return b"".join(r.line() for r in history)


# --------------------------------------------------------------------------- figures

# name -> (one run's figure for one workload, what it is in words). Lower is faster.
FIGURES: dict[str, tuple[Any, str]] = {
    "fast": (
        lambda r, w: r.workloads[w].fast_s,
        "the best's latency in its fastest 1-s stretch of the run (lower quartile)",
    ),
    "p25": (
        lambda r, w: r.workloads[w].p25_s,
        "the best's latency over the whole run (lower quartile of all its samples)",
    ),
    "fast_vs_compute": (
        lambda r, w: r.workloads[w].fast_s / r.calibration["compute"].fast_s,
        "the fastest-stretch latency over the compute calibration kernel's",
    ),
}
# The figure a README publishes as its headline and `remeasure` judges: the one the
# study in docs/measurement.md found to hold best from run to run.
FIGURE = "fast"


def value(run: Run, workload: str, figure: str = FIGURE) -> float | None:
    """One run's figure for one workload (None when that run did not measure it)."""
    try:
        return float(FIGURES[figure][0](run, workload))
    except (KeyError, ZeroDivisionError):
        return None


def series(runs: Sequence[Run], workload: str, figure: str = FIGURE) -> list[tuple[str, float]]:
    """(date, figure) of every run that measured `workload`, oldest first."""
    out = []
    for r in runs:
        v = value(r, workload, figure)
        if v is not None and v > 0:
            out.append((r.at, v))
    return out


# --------------------------------------------------------------------------- band and verdict

# Runs a band rests on before the recent ones are judged against it.
MIN_REF = 5
# Recent runs that must all lie beyond the band, on one side, to call a change persistent.
PERSIST = 3
# The recent runs must all lie beyond the reference band (the largest distance of any
# reference run from their median) and beyond MIN_CHANGE. Chosen on the study's
# values (docs/measurement.md: the rule on resampled runs): a margin over the band
# cost detections of a 15% slowdown without sparing false alarms.
MARGIN = 1.0
# A change smaller than this is not reported as drift however narrow the band: a few
# percent is within what a runner's mode mix moves a figure over weeks, and not worth
# a failed job.
MIN_CHANGE = 0.05
# A single run this far from the median of the runs before it is reported at once,
# whatever the history: 2.5 times the widest run-to-run band the study measured for
# this figure on a shared 2-core VM (±12%, docs/measurement.md).
FAR = 0.30


@dataclass(frozen=True)
class Band:
    """How far a figure spread between runs on one runner: the median and the largest
    relative distance of any run from it, over `runs` runs between `first` and `last`."""

    median: float
    halfwidth: float  # relative: 0.031 is ±3.1%
    runs: int
    first: str
    last: str

    def describe(self) -> str:
        return f"runs on this runner spread ±{100 * self.halfwidth:.1f}% ({self.runs} runs)"


def band_of(points: Sequence[tuple[str, float]]) -> Band | None:
    if not points:
        return None
    values = [v for _, v in points]
    med = statistics.median(values)
    half = max(abs(v / med - 1) for v in values)
    dates = [d for d, _ in points]
    return Band(med, half, len(values), min(dates)[:10], max(dates)[:10])


@dataclass(frozen=True)
class Verdict:
    """What the history says of one workload's figure: "inconclusive" (too few runs, or
    the latest beyond the band for fewer runs than a change must last), "stable", or
    "drift" (`direction` "slower"/"faster"), with the band it rests on."""

    workload: str
    state: str
    sentence: str
    band: Band | None = None
    latest: float | None = None
    ratio: float | None = None  # latest / the reference median
    runs: int = 0
    direction: str | None = None

    @property
    def drifted(self) -> bool:
        return self.state == "drift"

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "state": self.state,
            "sentence": self.sentence,
            "runs": self.runs,
            "latest": self.latest,
            "ratio": self.ratio,
            "direction": self.direction,
            "band": None
            if self.band is None
            else {
                "median": self.band.median,
                "halfwidth": self.band.halfwidth,
                "runs": self.band.runs,
                "first": self.band.first,
                "last": self.band.last,
            },
        }


def _words(ratio: float) -> str:
    return f"{ratio:.3f}x" + (" (slower)" if ratio > 1 else " (faster)" if ratio < 1 else "")


def _explains(move: float, runner_move: float, far: float) -> bool:
    """Whether the runner's move in a run (a calibration kernel's figure over its usual
    one) accounts for a kernel's `move` in the same run: divided out, the kernel is
    within `far` of its usual figure. The one test of "the runner, not the kernel",
    for the bands (`disturbed`) and for the drift reported at once (`judge`)."""
    return (move - 1) * (runner_move - 1) > 0 and abs(move / runner_move - 1) <= far


def _runner_moves(runs: Sequence[Run], far: float) -> dict[str, dict[str, float]]:
    """Per run (its `at`): each calibration kernel that was more than `far` off its median
    over the history in it, with its figure over that median (a kernel needs 3 runs for
    a median that one odd run cannot pull)."""
    out: dict[str, dict[str, float]] = {}
    for kind in ("compute", "memory"):
        pts = [(r.at, r.calibration[kind].fast_s) for r in runs if kind in r.calibration]
        if len(pts) < 3:
            continue
        med = statistics.median(v for _, v in pts)
        for at, v in pts:
            if abs(v / med - 1) > far:
                out.setdefault(at, {})[kind] = v / med
    return out


def disturbed(runs: Sequence[Run], workload: str | None = None, far: float = FAR) -> dict[str, str]:
    """The runs the runner itself disturbed, with why: a calibration kernel (fixed code,
    measured in the same run) more than `far` off its median over the history.

    With `workload`, only the runs in which that workload's figure moved with the runner
    (`_explains`: its figure over its own median, divided by the kernel's move, within
    `far` of 1). Such a figure says how busy the runner was, not how fast the kernel
    is, so it is left out of the workload's band and verdict (a re-tune measured while
    other jobs shared the runner came out 2x slow on every kernel, calibration
    included). A figure the runner's move does not explain stays: the kernel measured
    as usual while a calibration kernel was off (a bimodal memory-bound kernel), or it
    moved far more, or the other way (a real change in a disturbed run: `judge`'s
    at-once rule sees it)."""
    moves = _runner_moves(runs, far)
    if not moves:
        return {}
    own: dict[str, float] = {}
    if workload is not None:
        pts = series(runs, workload)
        if not pts:
            return {}
        med = statistics.median(v for _, v in pts)
        own = {at: v / med for at, v in pts}
    out: dict[str, str] = {}
    for r in runs:
        for kind, move in moves.get(r.at, {}).items():
            if workload is None or (r.at in own and _explains(own[r.at], move, far)):
                out[r.at] = f"the {kind}-bound calibration kernel ran {_words(move)} its median"
                break
    return out


def steady_series(runs: Sequence[Run], workload: str, figure: str = FIGURE) -> list[tuple[str, float]]:
    """`series` without the runs in which the runner's disturbance moved this workload
    (`disturbed`)."""
    skip = disturbed(runs, workload)
    return [(at, v) for at, v in series(runs, workload, figure) if at not in skip]


def runner_jump(runner: Mapping[str, Sequence[tuple[str, float]]], at: str) -> dict[str, float]:
    """Per calibration kernel: its figure in the run at `at` over the median of its runs
    before; how much faster or slower the runner itself was in that run."""
    out = {}
    for kind, pts in runner.items():
        now = [v for d, v in pts if d == at]
        before = [v for d, v in pts if d < at]
        if now and before:
            out[kind] = now[-1] / statistics.median(before)
    return out


def _far(
    points: Sequence[tuple[str, float]], runner: Mapping[str, Sequence[tuple[str, float]]] | None, far: float
) -> tuple[float, str | None, float] | None:
    """When the latest run is more than `far` from the median of the runs before it: its
    jump, and the calibration kernel that was off as far the same way in that run (the
    runner, not the kernel) with that kernel's jump, if one was. None for a run within
    `far`."""
    if len(points) < 2:
        return None
    jump = points[-1][1] / statistics.median(v for _, v in points[:-1])
    if abs(jump - 1) <= far:
        return None
    cal = runner_jump(runner or {}, points[-1][0])
    kind = next((k for k, j in sorted(cal.items()) if _explains(jump, j, far)), None)
    return jump, kind, cal[kind] if kind is not None else math.nan


def _drift_at_once(workload: str, points: Sequence[tuple[str, float]], jump: float, far: float) -> Verdict:
    d = "slower" if jump > 1 else "faster"
    return Verdict(
        workload,
        "drift",
        f"the latest run is {_words(jump)} the median of "
        f"the {len(points) - 1} before it, beyond ±{far:.0%}: a change far beyond any "
        "band seen, reported at once",
        band_of(points[:-1]),
        points[-1][1],
        jump,
        len(points),
        d,
    )


def judge(
    workload: str,
    points: Sequence[tuple[str, float]],
    *,
    far: float = FAR,
    runner: Mapping[str, Sequence[tuple[str, float]]] | None = None,
) -> Verdict:
    """Decide on one workload's series of (date, figure), oldest first (lower: faster).

    - A run more than `far` from the median of the runs before it is a drift at once:
      a change far beyond any band seen. Unless the runner moved as much: `runner` has
      the calibration kernels' series (fixed code, measured in the same runs), and when
      one of them was off in the same direction by as much (the kernel's jump over
      theirs within `far`), the run was a slow or fast runner, not a changed kernel,
      and the persistence rule below decides.
    - Otherwise the runs before the last PERSIST form the reference: their median and
      their band (the largest distance of any of them from it). With fewer than
      MIN_REF of them the verdict is "inconclusive" and says how many more runs are
      needed.
    - "drift" when each of the last PERSIST runs lies beyond MARGIN x the reference
      band on the same side (a persistent change, not one odd run); "inconclusive" when
      the latest lies beyond it but not yet all PERSIST (it says how many more runs
      tell); else "stable".
      Faster runs that the runner's speed explains (`_faster_with_runner`: over the
      compute calibration kernel the kernel did not move) are "stable", saying so.
    """
    n = len(points)
    if n == 0:
        return Verdict(workload, "inconclusive", "no run has measured it yet", runs=0)
    found = _far(points, runner, far)
    if found is not None:
        return _judge_far(workload, points, found, far)
    ref = points[: n - PERSIST]
    if len(ref) < MIN_REF:
        return _too_few_runs(workload, points)
    band = band_of(ref)
    assert band is not None
    r = _Reading(workload, points, ref, band, max(MARGIN * band.halfwidth, MIN_CHANGE))
    if all(x > 1 + r.edge for x in r.recent) or all(x < 1 - r.edge for x in r.recent):
        return _lasting_change(r, runner)
    not_yet = _not_lasting_yet(r)
    return not_yet if not_yet is not None else _within_band(r)


def _judge_far(
    workload: str, points: Sequence[tuple[str, float]], found: tuple[float, str | None, float], far: float
) -> Verdict:
    """The latest run is more than `far` from the median before it (`_far`): drift at
    once, unless a calibration kernel was off as far the same way; then the runner
    moved, and the persistence rule decides, saying so."""
    jump, kind, cal = found
    if kind is None:
        return _drift_at_once(workload, points, jump, far)
    # Far, but a calibration kernel was off as far the same way: the runner.
    note = (
        f" The latest run was {_words(jump)} the median before it, and the "
        f"{kind}-bound calibration kernel {_words(cal)} its own: the runner, not the kernel."
    )
    v = judge(workload, points, far=math.inf)
    return Verdict(v.workload, v.state, v.sentence + note, v.band, v.latest, v.ratio, v.runs, v.direction)


def _too_few_runs(workload: str, points: Sequence[tuple[str, float]]) -> Verdict:
    """Inconclusive: fewer than MIN_REF runs before the last PERSIST, and how many more
    a verdict needs."""
    n = len(points)
    need = MIN_REF + PERSIST - n
    return Verdict(
        workload,
        "inconclusive",
        f"{need} more run{'s' if need > 1 else ''} needed "
        f"({n} so far; a band rests on {MIN_REF} runs and a change must last "
        f"{PERSIST})",
        band_of(points),
        points[-1][1],
        None,
        n,
    )


@dataclass(frozen=True)
class _Reading:
    """A series with enough runs, read against the band of its reference runs (all but
    the last PERSIST): what `judge`'s last steps share."""

    workload: str
    points: Sequence[tuple[str, float]]
    ref: Sequence[tuple[str, float]]
    band: Band
    edge: float  # how far from 1 a run's ratio must lie: MARGIN x the band, at least MIN_CHANGE

    @property
    def n(self) -> int:
        return len(self.points)

    @property
    def latest(self) -> float:
        return self.points[-1][1]

    @property
    def ratio(self) -> float:
        """The latest run over the reference median."""
        return self.latest / self.band.median

    @property
    def recent(self) -> list[float]:
        """The last PERSIST runs over the reference median."""
        return [v / self.band.median for _, v in self.points[self.n - PERSIST :]]


def _lasting_change(r: _Reading, runner: Mapping[str, Sequence[tuple[str, float]]] | None) -> Verdict:
    """Each of the last PERSIST runs lies beyond the band on one side: drift, unless they
    are faster and the runner's speed explains it (`_faster_with_runner`)."""
    d = "slower" if r.recent[-1] > 1 else "faster"
    with_runner = _faster_with_runner(r.points, runner) if d == "faster" else None
    if with_runner is not None:
        return Verdict(
            r.workload,
            "stable",
            f"faster than the band of the {len(r.ref)} runs before (now "
            f"{_words(r.ratio)} their median, beyond their ±{r.band.halfwidth:.1%}), "
            f"and so was the runner: {with_runner}",
            r.band,
            r.latest,
            r.ratio,
            r.n,
        )
    return Verdict(
        r.workload,
        "drift",
        f"the last {PERSIST} runs are all {d} than the band of the {len(r.ref)} "
        f"runs before them (beyond {MARGIN:g} x their ±{r.band.halfwidth:.1%} around "
        f"their median; now {_words(r.ratio)})",
        r.band,
        r.latest,
        r.ratio,
        r.n,
        d,
    )


def _not_lasting_yet(r: _Reading) -> Verdict | None:
    """Inconclusive when the latest runs lie beyond the band on the latest's side, but
    fewer than PERSIST of them; None when the latest is within it."""
    edge, ratio = r.edge, r.ratio
    beyond = sum(
        1 for _ in itertools.takewhile(lambda x: x > 1 + edge if ratio > 1 else x < 1 - edge, reversed(r.recent))
    )
    if not beyond:
        return None
    # Not (yet) a lasting change, but not "within the band" either: the next runs
    # tell (bench_drift: a swapped 1.12x kernel read 1.21x, 1.20x, then drift).
    more = PERSIST - beyond
    return Verdict(
        r.workload,
        "inconclusive",
        f"beyond the band in the last {'run' if beyond == 1 else f'{beyond} runs'}: now "
        f"{_words(ratio)} the median of {len(r.ref)} earlier runs, which spread "
        f"±{r.band.halfwidth:.1%}; a change must last {PERSIST} runs: {more} more "
        f"run{'s' if more > 1 else ''} will tell",
        r.band,
        r.latest,
        ratio,
        r.n,
    )


def _within_band(r: _Reading) -> Verdict:
    return Verdict(
        r.workload,
        "stable",
        f"within the band: now {_words(r.ratio)} the median of {len(r.ref)} earlier "
        f"runs, which spread ±{r.band.halfwidth:.1%}",
        r.band,
        r.latest,
        r.ratio,
        r.n,
    )


def _faster_with_runner(
    points: Sequence[tuple[str, float]], runner: Mapping[str, Sequence[tuple[str, float]]] | None
) -> str | None:
    """Why a workload's last PERSIST runs, faster than its band, are the runner's speed
    and not a faster kernel, in words; None when they are not, or it cannot be told.

    The figure over the compute calibration kernel measured in turns with it (the
    runner's speed in each run divided out) against the same split of runs: when the
    last PERSIST are not all beyond its band, the kernel did not change. Only for
    faster runs: a slower runner is a slower kernel to whoever runs it (a process given
    less CPU, which the verdict must report), while a faster one asks nothing of anyone.
    Seen on a Zen 4 (bench_drift, zen4-avx2-2c, 2026-12-03): 3 of the first 8 runs in a
    whole-run slow mode (every kernel and the calibration 1.24x) put the median between
    two modes, and 3 later runs at usual speed read 0.80x, "faster" beyond ±17.8%;
    over the calibration kernel they were 0.97x, within ±19%."""
    cal = dict((runner or {}).get("compute", ()))
    if any(at not in cal for at, _ in points):
        return None
    over = [(at, v / cal[at]) for at, v in points]
    n = len(over)
    band = band_of(over[: n - PERSIST])
    if band is None:
        return None
    recent = [v / band.median for _, v in over[n - PERSIST :]]
    if all(r < 1 - max(MARGIN * band.halfwidth, MIN_CHANGE) for r in recent):
        return None
    return (
        f"over the compute calibration kernel measured in turns with it the kernel is now "
        f"{_words(recent[-1])} the median of those runs, within their ±{band.halfwidth:.1%}: "
        "no change of the kernel"
    )


# --------------------------------------------------------------------------- README helpers


def usual_speed(runs: Sequence[Run], workload: str) -> float | None:
    """The compute calibration kernel's median figure over the runs that measured
    `workload`: the runner's usual speed, the scale of the headline's series
    (`headline_basis`). None when one of those runs lacks it."""
    pts = series(runs, workload)
    ats = {at for at, _ in pts}
    cal = [r.calibration["compute"].fast_s for r in runs if r.at in ats and "compute" in r.calibration]
    if not pts or len(cal) != len(pts):
        return None
    return statistics.median(cal)


@dataclass(frozen=True)
class HeadlineBasis:
    """What the README's headline of one workload rests on."""

    points: list[tuple[str, float]]  # its series (date, figure), oldest first
    absolute: list[tuple[str, float]]  # the same runs' figures as measured
    usual: float | None  # the runner's usual speed when `points` divide it out, else None
    left_out: int  # runs left out: the runner was disturbed


def headline_basis(runs: Sequence[Run], workload: str) -> HeadlineBasis:
    """The headline's series over the runs the runner did not disturb (`disturbed`): each
    run's fastest-stretch figure over the compute calibration kernel's in the same run
    (measured in turns with it), times that kernel's median over these runs: the kernel
    at the runner's usual speed, the runner's own speed in a run divided out; as
    measured where a run lacks the compute kernel (a target without calibration
    kernels). Measured on every history we have (`benchmarks/study_headline.py`,
    docs/measurement.md): published after 8 runs, the median of the next 5 landed
    inside this figure's band in 47 of 50 windows, the absolute figure's in 35."""
    skip = disturbed(runs, workload)
    kept = [r for r in runs if r.at not in skip]
    absolute = series(kept, workload)
    usual = usual_speed(kept, workload)
    if usual is None:
        return HeadlineBasis(absolute, absolute, None, len(skip))
    pts = [(at, v * usual) for at, v in series(kept, workload, "fast_vs_compute")]
    return HeadlineBasis(pts, absolute, usual, len(skip))


def headline_series(runs: Sequence[Run], workload: str) -> list[tuple[str, float]]:
    """The series the README's headline and its band rest on: the runs the runner did
    not disturb (`disturbed`), at the runner's usual speed where they measured the
    compute calibration kernel, else as measured."""
    return headline_basis(runs, workload).points
