"""A model's profile: where its time goes, per call, on each target (TVM-free).

`tvmtune-ci profile` builds the model with the committed logs, runs it on the runner
with the Relax VM's per-call instrument, and appends one run to
`models/<name>.profile.json`: each kernel's seconds per inference, the template and
workload behind it (or none: a call no template covers), and the end-to-end latency.
The runs are the model's history on that target; the newest gives the shares.

The shares are the background write-up's habit 5.2 made a file: profile the network,
then tune what takes its time. They are the time budget's weights (`retune --budget`)
for the workloads a model calls; hand weights in tvmtune.yaml stay for the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CorruptFileError
from .fsutil import atomic_write_json

FORMAT = 1
KEEP_RUNS = 50  # the history kept per target: enough for a band across runs
# A MetaSchedule search whose runner had more than this share of its cores busy outside
# the search (or stolen by the hypervisor) is disturbed: its trials ranked configurations
# on another machine than the one its build is timed on, so its ratio is not published.
# A 2-core VM at rest shows 1-3% (the watch itself, the kernel's housekeeping).
DISTURBED_SHARE = 0.10


@dataclass(frozen=True)
class CallTime:
    """One kernel of the model on one run: seconds per inference (all its calls)."""

    symbol: str  # the VM function's name
    calls: int  # per inference
    seconds: float
    template: str | None = None  # None: a call no template covers (TVM's kernel)
    workload: str | None = None
    # A shape no workload declares, run at this sibling's best mapped onto it
    # (`profile --uncovered-shapes sibling`): a workload worth declaring.
    mapped_from: str | None = None
    # A template kernel's seconds per inference at the template's default configuration
    # (the default build, instrumented alike): what its tuning saved end to end.
    default_seconds: float | None = None
    # A kernel no template made: the schedule it got (MetaSchedule, the built-in one,
    # TVM's naive loops); None: a template's, or a run recorded before it was said.
    schedule: str | None = None
    # Its floating-point operations a call (TVM's estimate; 0: it only moves data;
    # None: not recorded): GFLOPS = calls x flops / seconds.
    flops: float | None = None
    # A template kernel's epilogue: the ops after its call that it runs (fused), and
    # those after it that still run as kernels of their own (core/epilogue.py).
    epilogue: tuple[str, ...] = ()
    alone: tuple[str, ...] = ()

    def gflops(self) -> float | None:
        if not self.flops or self.seconds <= 0:
            return None
        return self.calls * self.flops / self.seconds / 1e9

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"symbol": self.symbol, "calls": self.calls, "seconds": self.seconds}
        if self.schedule is not None:
            out["schedule"] = self.schedule
        if self.flops is not None:
            out["flops"] = self.flops
        if self.template is not None:
            out["template"], out["workload"] = self.template, self.workload
        if self.mapped_from is not None:
            out["mapped_from"] = self.mapped_from
        if self.default_seconds is not None:
            out["default_seconds"] = self.default_seconds
        if self.epilogue:
            out["epilogue"] = list(self.epilogue)
        if self.alone:
            out["alone"] = list(self.alone)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CallTime:
        return cls(
            str(d["symbol"]),
            int(d["calls"]),
            float(d["seconds"]),
            d.get("template"),
            d.get("workload"),
            d.get("mapped_from"),
            d.get("default_seconds"),
            d.get("schedule"),
            d.get("flops"),
            tuple(d.get("epilogue", ())),
            tuple(d.get("alone", ())),
        )


@dataclass(frozen=True)
class Anchor:
    """Another way to run the same model on the same runner, timed in turns with the
    build with the committed logs: MetaSchedule at given runner seconds, ONNX Runtime."""

    name: str  # "metaschedule", "onnxruntime"
    latency_s: float  # its samples' fastest quartile (p25; runs before 2026-12-07: median)
    ratio: float  # its latency / the committed logs' latency (>1: ours faster)
    ratio_range: tuple[float, float]  # min and max over the rounds
    detail: str  # what it was: seconds asked and spent, trials; version and threads
    # A search's conditions (MetaSchedule: seed, seconds, trials, untuned functions, the
    # runner's load, what it fused); None: not a search.
    search: Mapping[str, Any] | None = None
    # Why its ratio is not published (a disturbed or incomplete search); None: it is.
    withheld: str | None = None
    # ONNX Runtime's: what its graph optimizer fused ({"made": {op: n}, "gone": {op: n}},
    # model/timing.py ort_fusions); None: not recorded.
    fused: Mapping[str, Mapping[str, int]] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "latency_s": self.latency_s,
            "ratio": self.ratio,
            "ratio_range": list(self.ratio_range),
            "detail": self.detail,
        }
        if self.search is not None:
            out["search"] = dict(self.search)
        if self.withheld is not None:
            out["withheld"] = self.withheld
        if self.fused is not None:
            out["fused"] = {k: dict(v) for k, v in self.fused.items()}
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Anchor:
        lo, hi = d["ratio_range"]
        # A MetaSchedule anchor written before its conditions were recorded: one search
        # of unknown load, re-timed run after run, so not a published ratio.
        unrecorded = d["name"] == "metaschedule" and "search" not in d
        return cls(
            str(d["name"]),
            float(d["latency_s"]),
            float(d["ratio"]),
            (float(lo), float(hi)),
            str(d.get("detail", "")),
            d.get("search"),
            d.get("withheld") or ("the search's conditions were not recorded" if unrecorded else None),
            d.get("fused"),
        )


@dataclass(frozen=True)
class ProfileRun:
    """One profile of the model on a target."""

    date: str
    host: Mapping[str, Any]
    untemplated: str  # how the calls no template covers were scheduled
    latency_s: float  # end to end, the fastest quartile (p25) of `samples` timed inferences (no instrument)
    latency_spread: float  # (max - min) / median of those samples
    samples: int
    calls: tuple[CallTime, ...]
    # The same model with every template kernel at its default configuration, timed in
    # turns with the tuned build: what tuning did end to end (None: not measured).
    default_latency_s: float | None = None
    speedup: float | None = None  # default / tuned, each its p25
    speedup_range: tuple[float, float] | None = None  # its min and max over the rounds
    anchors: tuple[Anchor, ...] = ()  # timed in turns with it (profile --metaschedule-seconds, ORT)
    # TVM's thread pool every build was timed on, read back on the timing thread (None:
    # a run recorded before it was: TVM's default pool, half the cores on x86).
    threads: int | None = None
    # The runner's fp32 peak on those threads, measured in the timing process
    # (model/peak.py): (GFLOPS, its samples' spread); None: a run before it was.
    peak: tuple[float, float] | None = None

    def anchor(self, name: str) -> Anchor | None:
        return next((a for a in self.anchors if a.name == name), None)

    def kernel_seconds(self) -> float:
        return sum(c.seconds for c in self.calls)

    def shares(self) -> dict[tuple[str, str], float]:
        """(template, workload) -> its share of the model's kernel time (declared
        workloads: a mapped shape is no workload a re-tune has)."""
        total = self.kernel_seconds() or 1.0
        out: dict[tuple[str, str], float] = {}
        for c in self.calls:
            if c.template is not None and c.workload is not None and c.mapped_from is None:
                key = (c.template, c.workload)
                out[key] = out.get(key, 0.0) + c.seconds / total
        return out

    def uncovered_share(self) -> float:
        total = self.kernel_seconds() or 1.0
        return sum(c.seconds for c in self.calls if c.template is None) / total

    def to_json(self) -> dict[str, Any]:
        out = {
            "date": self.date,
            "host": dict(self.host),
            "untemplated": self.untemplated,
            "latency_s": self.latency_s,
            "latency_spread": self.latency_spread,
            "samples": self.samples,
            "calls": [c.to_json() for c in self.calls],
        }
        if self.default_latency_s is not None:
            out["default_latency_s"] = self.default_latency_s
            out["speedup"] = self.speedup
            out["speedup_range"] = list(self.speedup_range or ())
        if self.anchors:
            out["anchors"] = [a.to_json() for a in self.anchors]
        if self.threads is not None:
            out["threads"] = self.threads
        if self.peak is not None:
            out["peak_gflops"], out["peak_spread"] = self.peak
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProfileRun:
        rng = d.get("speedup_range")
        return cls(
            str(d["date"]),
            dict(d.get("host", {})),
            str(d.get("untemplated", "")),
            float(d["latency_s"]),
            float(d.get("latency_spread", 0.0)),
            int(d.get("samples", 0)),
            tuple(CallTime.from_json(c) for c in d["calls"]),
            d.get("default_latency_s"),
            d.get("speedup"),
            (float(rng[0]), float(rng[1])) if rng else None,
            tuple(Anchor.from_json(a) for a in d.get("anchors", ())),
            d.get("threads"),
            (float(d["peak_gflops"]), float(d.get("peak_spread", 0.0))) if "peak_gflops" in d else None,
        )


@dataclass(frozen=True)
class Profile:
    """`models/<name>.profile.json`: target name -> its runs, oldest first."""

    model: str
    runs: Mapping[str, tuple[ProfileRun, ...]] = field(default_factory=dict)

    def latest(self, target: str) -> ProfileRun | None:
        runs = self.runs.get(target, ())
        return runs[-1] if runs else None

    def with_run(self, target: str, run: ProfileRun) -> Profile:
        runs = dict(self.runs)
        runs[target] = (*runs.get(target, ()), run)[-KEEP_RUNS:]
        return Profile(self.model, runs)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": self.model,
            "generated": "by `tvmtune-ci profile`; do not edit",
            "targets": {t: [r.to_json() for r in runs] for t, runs in sorted(self.runs.items())},
        }


def profile_path(source_path: Path, model: str) -> Path:
    """Beside the model's source: `models/<name>.profile.json`."""
    return source_path.parent / f"{model}.profile.json"


def read_profile(path: Path, model: str) -> Profile:
    """The profile at `path`; an empty one when there is none yet."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Profile(model)
    except OSError as e:
        raise CorruptFileError(f"{path}: cannot be read ({e}); fix its permissions") from None
    try:
        d = json.loads(raw)
        if d.get("format") != FORMAT:
            raise ValueError(f"format {d.get('format')!r}, this tvmtune-ci reads {FORMAT}")
        runs = {str(t): tuple(ProfileRun.from_json(r) for r in rs) for t, rs in d["targets"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptFileError(
            f"{path}: not a profile this tvmtune-ci can read ({e}); delete it "
            "and run `tvmtune-ci profile` again (it is generated)"
        ) from None
    return Profile(str(d.get("model", model)), runs)


def write_profile(path: Path, profile: Profile) -> None:
    atomic_write_json(path, profile.to_json())


def model_shares(profiles: Iterable[Profile], target: str) -> dict[tuple[str, str], float]:
    """(operator, workload) -> its share of the time of the models that call it on
    `target` (the newest run of each; summed over models)."""
    out: dict[tuple[str, str], float] = {}
    for p in profiles:
        run = p.latest(target)
        if run is None:
            continue
        for key, share in run.shares().items():
            out[key] = out.get(key, 0.0) + share
    return out


def breakdown(run: ProfileRun) -> list[tuple[str, float, int, str]]:
    """(label, seconds, calls, template/workload or "") per kernel, the slowest first."""
    rows = [
        (
            c.symbol,
            c.seconds,
            c.calls,
            (
                f"{c.template}/{c.workload}"
                + (f" + {', '.join(c.epilogue)} fused" if c.epilogue else "")
                + (f" (undeclared; {c.mapped_from}'s best mapped)" if c.mapped_from else "")
                + (f"; {', '.join(c.alone)} alone" if c.alone else "")
            )
            if c.template
            else "",
        )
        for c in run.calls
    ]
    return sorted(rows, key=lambda r: -r[1])


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(min, max) of `values` relative to their median: the band across runs."""
    xs = sorted(values)
    mid = xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
    return xs[0] / mid, xs[-1] / mid


def model_shares_by_target(config: Any, targets: Iterable[str]) -> dict[str, dict[tuple[str, str], float]]:
    """target -> `model_shares` of every model of `config` (a core.config.Config) that
    is profiled there; a target no model was profiled on is left out."""
    profiles = [read_profile(profile_path(config.root / m.source, m.name), m.name) for m in config.models]
    out = {}
    for t in targets:
        shares = model_shares(profiles, t)
        if shares:
            out[t] = shares
    return out


@dataclass(frozen=True)
class RunnerPeak:
    """A target's runner's fp32 peak on its num-cores threads, as `profile` measured it
    beside the models (model/peak.py): the median over every profile run on that target
    that measured it. A kernel README's "of peak" is read against it."""

    gflops: float
    threads: int | None
    runs: int
    first: str  # the dates of the oldest and the newest of those runs
    last: str

    def percent(self, gflops: float) -> str:
        return f"{100 * gflops / self.gflops:.0f}% of peak"

    def explained(self) -> str:
        on = f"on its {self.threads} threads" if self.threads else "on TVM's thread pool"
        when = self.first if self.first == self.last else f"{self.first} to {self.last}"
        return (
            f"**Of peak**: the GFLOPS over this runner's fp32 peak {on}, {self.gflops:.0f} GFLOPS, "
            f"measured by `tvmtune-ci profile` beside the models (fused multiply-add chains in "
            f"registers, model/peak.py): the median of {self.runs} run(s), {when}. The GFLOPS count "
            "every operation of the kernel (a fused epilogue's too), and the peak was measured in "
            "other minutes of a VM whose speed moves by several percent: a best within a few "
            "percent of 100% (or above it) is at the peak."
        )


def runner_peak(config: Any, target: str) -> RunnerPeak | None:
    """The measured peak of `target`'s runner from the models' profile files; None where
    no profile run on it measured one. An unreadable profile is passed over."""
    t = next((x for x in config.targets if x.name == target), None)
    if t is None:
        return None
    cores = t.target.get("num-cores")
    threads = int(cores) if isinstance(cores, int) else None
    found: list[tuple[str, float]] = []
    for m in config.models:
        try:
            p = read_profile(profile_path(config.root / m.source, m.name), m.name)
        except CorruptFileError:
            continue
        for r in p.runs.get(target, ()):
            if r.peak is not None and (threads is None or r.threads == threads):
                found.append((r.date[:10], r.peak[0]))
    if not found:
        return None
    values = sorted(g for _, g in found)
    n = len(values)
    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    dates = sorted(d for d, _ in found)
    return RunnerPeak(median, threads, n, dates[0], dates[-1])
