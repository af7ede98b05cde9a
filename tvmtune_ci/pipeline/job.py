"""The re-tune's data (`pipeline/steps.py`): the `Job` each step takes and returns, what
it holds (the loaded `Template`, the `History` replayed, the `Partial` re-tune of a set
whose workloads alone changed), and an entry's `RetuneResult`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..check.fingerprint import Fingerprint
from ..check.sources import Sources
from ..check.staleness import Entry
from ..core.configschema import Config, TargetConfig
from ..core.errors import TvmtuneError
from ..core.manifest import Manifest, WorkloadResult
from ..core.template import Knob, TemplateDecl
from ..publish.swap import Published

if TYPE_CHECKING:
    from ..tune.tuner import TuneOutcome
    from ..tune.workload import Workload
    from .budget import Budget


Say = Callable[[str], None]


@dataclass(frozen=True)
class RetuneResult:
    """One entry re-tuned: the entry as it was, the new manifest, what was published."""

    entry: Entry
    manifest: Manifest
    published: Published

    def speedups(self) -> dict[str, float]:
        return {w: r.speedup for w, r in self.manifest.results.items()}


@dataclass(frozen=True)
class Template:
    """An operator template loaded once: its declarations (read without running it),
    its semantic fingerprint, and the imported module."""

    path: Path
    decl: TemplateDecl
    fingerprint: Fingerprint
    module: ModuleType
    sources: Sources  # what decl and fingerprint were computed from (for `check`)


@dataclass(frozen=True)
class History:
    """The log a re-tune replays (history.py, priors.py): this entry's own after a
    template edit, or another target's with seed-from."""

    manifest: Manifest
    manifest_path: Path
    from_target: str | None  # None: this entry's own log
    old_knobs: tuple[Knob, ...] | None  # the KNOBS it was tuned with (None: unknown)
    records: dict[str, list[Any]]  # workload -> its records as (knobs, latency, program key)


@dataclass(frozen=True)
class Job:
    """What one entry's re-tune steps pass along; each step returns the next Job."""

    config: Config
    entry: Entry
    target: TargetConfig
    trials: int
    seed: int
    say: Say
    # The profiled models' shares on this target where the trials were not given on the
    # command line: each workload's trials follow them (Config.trials_of, trial_tiers).
    shares: Mapping[tuple[str, str], float] | None = None
    progress: Callable[[str], Callable[[Any], None]] | None = None
    threads: int | None = None  # TVM_NUM_THREADS while measuring locally (None: TVM's own)
    template: Template | None = None
    history: History | None = None
    # Each workload resolved once (`load_step`): the carry, the tuner and the first
    # history run take its module and FLOPs from here.
    workloads: dict[str, Workload] = field(default_factory=dict)
    outcomes: dict[str, TuneOutcome] = field(default_factory=dict)
    results: dict[str, WorkloadResult] = field(default_factory=dict)
    manifest: Manifest | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # the set's log, results, manifest
    history_runs: tuple[Any, ...] = ()  # the new set's run history (runs.Run)
    budget: Budget | None = None  # shared by the entries of one `retune --budget`
    carry: bool = True  # whether a set whose programs an edit left alone is carried forward
    carried: str | None = None  # why the set was carried forward (carry_step), in words
    # Only workloads changed: which are tuned, carried and removed (`partial_step`).
    partial: Partial | None = None
    published: Published | None = None
    # Why this machine cannot measure the target, held back while a carry forward (which
    # measures nothing) is tried; raised if the set is not carried (`refused_step`).
    refusal: TvmtuneError | None = None


@dataclass(frozen=True)
class Partial:
    """Which of a set's workloads a re-tune searches, which it carries, and which left
    the set; the old log's entries of the carried ones, as they were."""

    tuned: tuple[str, ...]  # added or changed: searched (the siblings seed them)
    changed: tuple[str, ...]  # of `tuned`, those whose parameters changed
    carried: tuple[str, ...]  # unchanged: log entries, results and run history kept
    removed: tuple[str, ...]  # no longer declared: archived with the old log
    old_log: str  # the previous set's log file
    old_date: str  # when the previous set was tuned
    entries: dict[str, Any]  # carried workload -> its entry in the old log, as parsed
    # Settings the carried ones were tuned with that differ from this run's and leave a
    # figure's meaning alone (`NEUTRAL`): key -> the old value (None: not recorded then).
    settings: dict[str, Any] = field(default_factory=dict)

    def sentence(self) -> str:
        """What the re-tune did with each workload, in words (README, commit, console)."""
        added = [w for w in self.tuned if w not in self.changed]
        parts = []
        if added:
            parts.append(f"added {', '.join(added)}")
        if self.changed:
            parts.append(f"parameters changed: {', '.join(self.changed)}")
        if self.removed:
            parts.append(f"removed {', '.join(self.removed)}")
        out = f"only workloads changed ({'; '.join(parts)})"
        if self.tuned:
            out += f": tuned {', '.join(self.tuned)}"
        out += (
            f"; carried unmeasured from {self.old_log} (tuned {self.old_date}): "
            f"{', '.join(self.carried)}, whose template, target, TVM and parameters did not "
            "change (their records, figures and run history are kept)"
        )
        if self.settings:
            out += (
                "; the carried ones were tuned with other settings that do not change what a figure means ("
                + ", ".join(f"{k} {_word(v)}" for k, v in sorted(self.settings.items()))
                + ")"
            )
        if self.removed:
            out += (
                f"; the records of {', '.join(self.removed)} stay in {self.old_log}, archived "
                "beside the new log as a .bak file"
            )
        return out

    def to_json(self, on: str) -> dict[str, Any]:
        return {
            "on": on,
            "tuned": list(self.tuned),
            "changed": list(self.changed),
            "carried": list(self.carried),
            "removed": list(self.removed),
            "from_log": self.old_log,
            "from_date": self.old_date,
            "sentence": self.sentence(),
            **({"carried_settings": dict(self.settings)} if self.settings else {}),
        }


def _word(v: Any) -> str:
    return "not recorded" if v is None else f"{v:g}" if isinstance(v, float) else str(v)
