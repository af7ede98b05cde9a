"""`tvmtune.yaml`'s schema: the frozen dataclasses a parsed config is made of, with
their defaults and the constants that go with them.

`config.py` reads the file into them (`load_config`, `parse_config`);
`configerrors.py` holds the line-numbered errors and the checks that raise them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .targets import slug

# The runner label a GPU target's runs-on must name (its re-tune measures on that GPU).
GPU_LABEL = "gpu"


@dataclass(frozen=True)
class EarlyStop:
    """Stop a search after `patience` batches without an improvement beyond the noise
    and `min_improvement` (0 disables early stop)."""

    # Stop when the best has not improved by more than `min_improvement` (a
    # fraction) for `patience` consecutive batches. patience 0 disables it.
    patience: int = 3
    min_improvement: float = 0.01


@dataclass(frozen=True)
class MeasureOptions:
    """How a configuration is measured: adaptive sampling to a stated precision.

    One sample is as many runs as fill `sample_ms` (calibrated once per measurement);
    samples are taken until the lower quartile's 95% confidence interval is within
    `precision` (relative half-width) or `time_cap_s` is spent. See `stats.py` and
    docs/measurement.md for the estimator and why.
    """

    sample_ms: float = 10.0
    # Target precision of the finals, the baseline and `remeasure`.
    precision: float = 0.01
    # The search ranks contenders at this precision, within search_cap_s each.
    search_precision: float = 0.03
    search_cap_s: float = 0.4
    # Sampling of one configuration stops after this long, converged or not.
    time_cap_s: float = 2.0
    # A runner that cannot get the baseline within this after time_cap_s is refused
    # (1 or more: never; for a runner known to be shared).
    usable_precision: float = 0.25
    # Racing: a candidate whose `probe` samples are all slower than `race` x the
    # incumbent gets no more samples (recorded as measured-slow).
    race: float = 1.25
    probe: int = 3
    # Configurations re-measured in interleaved rounds at the end (plus the default
    # and the previous best).
    finalists: int = 5
    enable_cpu_cache_flush: bool = False
    timeout_s: float = 30.0
    # Seconds of one run of the history (runs.py): every best and the calibration kernels
    # in turns, after a re-tune and per remeasure. A shared VM visits its fast mode
    # within a minute or two: over 120 s the figure held to ±6% (docs/measurement.md).
    history_s: float = 120.0


# Keys of the fixed-repeat measurement (tvmtune-ci 0.1) and what replaced them.
LEGACY_MEASURE_KEYS = {
    "number": "runs per sample are calibrated to fill measure.sample_ms",
    "repeat": "samples are taken until measure.precision or measure.time_cap_s",
    "min_repeat_ms": "use measure.sample_ms (the least duration of one sample)",
    "max_cv": "a noisy runner gets more samples; it is refused only when the baseline "
    "cannot reach measure.usable_precision within measure.time_cap_s",
}


@dataclass(frozen=True)
class RpcRunner:
    """Measure on devices behind a TVM tracker: `tracker` (host:port), the servers'
    `key`, how many `devices` a run uses at once, and each session's timeout."""

    tracker: str  # host:port
    key: str
    devices: int = 1
    session_timeout_s: float = 60.0

    @property
    def tracker_host(self) -> str:
        return self.tracker.rpartition(":")[0]

    @property
    def tracker_port(self) -> int:
        return int(self.tracker.rpartition(":")[2])


@dataclass(frozen=True)
class TargetConfig:
    """One configured target: its TVM target dict, the runner labels of a machine that
    has it, and where it is measured (this machine, or an RPC runner)."""

    name: str
    target: dict[str, Any]  # canonical dict
    runs_on: tuple[str, ...] = ()
    rpc: RpcRunner | None = None  # None: measure on this machine
    line: int = 0
    # Another target whose log of the same operator seeds a re-tune of this one that
    # has no log of its own to replay (e.g. a new CPU of the same family). None: the
    # nearest configured target of the same architecture with such a log
    # (`pipeline.history.nearest_source`), unless `seed_nearest` is off
    # (`seed-from: false`). Either is a weaker prior: its configurations are replayed
    # first and its records teach the cost model, and the cold stop rule ends the search.
    seed_from: str | None = None
    seed_nearest: bool = True
    # `retired: "2026-12-07: ..."`: its runner is gone. Its logs stay, are served while
    # they still describe their templates, and are frozen: `retune` and the CI matrix
    # skip it, and `check` reports what no longer fits it as unrunnable, not stale
    # (docs/retune.md, "A target whose runner is gone"). None: a live target.
    retired: str | None = None

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def kind(self) -> str:
        """Its TVM target kind (llvm, c, cuda...): a tag's comes from its expanded dict."""
        return str(self.target.get("kind", ""))


@dataclass(frozen=True)
class OperatorConfig:
    """Per-operator overrides: a trial budget, the targets it is tuned for (none listed:
    every target of a kind its template declares, `Config.targets_for`), and its weight
    in a time budget (`retune --budget`): its share of the end-to-end time a profile
    gives, split among its workloads by `workload_weights` (equally by default)."""

    name: str
    trials: int | None = None
    targets: tuple[str, ...] | None = None  # None: every target of the template's kinds
    line: int = 0
    weight: float | None = None  # None: not typed (Config.weight_of)
    workload_weights: dict[str, float] = field(default_factory=dict)
    # Files its template reads that static reading cannot see: (glob relative to the
    # repository root, its line in tvmtune.yaml). Hashed into its fingerprint.
    inputs: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ModelConfig:
    """A model whose Relax calls the templates should cover (`models:`; docs/models.md):
    its source, relative to the repository root (a `.py` module exposing MODEL and
    SPEC, or an `.onnx` file, the [onnx] extra), and the targets it is built for (None:
    every configured target)."""

    name: str
    source: str  # repo-relative posix path
    targets: tuple[str, ...] | None = None
    line: int = 0

    @property
    def kind(self) -> str:
        """ "python" or "onnx", from the source's suffix."""
        return "onnx" if self.source.endswith(".onnx") else "python"

    @property
    def coverage_file(self) -> str:
        """Where `tvmtune-ci models` writes its coverage: beside the source, named
        after the model (`models/bert_layer.coverage.json`)."""
        folder = self.source.rpartition("/")[0]
        return f"{folder}/{self.name}.coverage.json" if folder else f"{self.name}.coverage.json"


@dataclass(frozen=True)
class GitIdentity:
    """Author and committer of the commits `retune --commit` makes."""

    name: str = "tvmtune-ci"
    email: str = "tvmtune-ci@users.noreply.github.com"


@dataclass(frozen=True)
class Config:
    """`tvmtune.yaml`, parsed and checked: frozen, with every path resolved against
    the file's folder (`root`). Read it with `load_config`."""

    root: Path
    targets: tuple[TargetConfig, ...]
    operators_dir: str = "operators"
    logs_dir: str = "tuning_logs"
    trials: int = 300
    # The background write-up's 4.1: trials by a workload's share of a profiled model's
    # time, (least share, trials), the largest share first. Used where the target has a
    # model profile and the operator no `trials:` of its own (`trials_of`); () is off.
    trial_tiers: tuple[tuple[float, int], ...] = ((0.30, 1500), (0.05, 500), (0.0, 150))
    batch_size: int = 16
    seed: int = 42
    max_age_days: int = 365
    tvm_version: str | None = None  # major.minor the logs must match; None: installed
    early_stop: EarlyStop = field(default_factory=EarlyStop)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    operators: tuple[OperatorConfig, ...] = ()
    pr_check: str = "fail"
    git: GitIdentity = field(default_factory=GitIdentity)
    # Log folders kept on purpose (history of targets or operators no longer
    # configured): a target name (any operator), OPERATOR/TARGET, or an operator name.
    # `check` and `status` do not warn about them.
    keep: tuple[str, ...] = ()
    path: Path | None = None
    # What parsing warned about, as "tvmtune.yaml:LINE: ...; fix" lines.
    warnings: tuple[str, ...] = ()
    # Top-level key -> its line in tvmtune.yaml, for errors found after parsing.
    lines: dict[str, int] = field(default_factory=dict)
    # `models:`: the models whose calls the templates should cover (docs/models.md).
    models: tuple[ModelConfig, ...] = ()

    @property
    def operators_path(self) -> Path:
        return self.root / self.operators_dir

    @property
    def logs_path(self) -> Path:
        return self.root / self.logs_dir

    def target(self, name: str) -> TargetConfig:
        for t in self.targets:
            if t.name == name:
                return t
        raise ConfigError(
            f"unknown target {name!r}; configured targets: {', '.join(t.name for t in self.targets) or '(none)'}"
        )

    def operator(self, name: str) -> OperatorConfig:
        for o in self.operators:
            if o.name == name:
                return o
        return OperatorConfig(name=name)

    def kept(self, operator: str, target: str | None = None) -> bool:
        """Whether the log folder of `operator` (or of one `target` of it) is kept on purpose."""
        if operator in self.keep:
            return True
        return target is not None and (target in self.keep or f"{operator}/{target}" in self.keep)

    def weight_of(
        self,
        operator: str,
        workload: str,
        workloads: Sequence[str],
        shares: Mapping[tuple[str, str], float] | None = None,
    ) -> float:
        """An (operator, workload)'s weight in a time budget: its share of a model's time
        where a model's profile measured it (`shares`, core/profiles.model_shares), else
        the operator's hand weight times the workload's share of it (`workloads:`
        weights, else equal shares).

        An operator with no typed weight weighs 1.0 where no model is profiled. Beside
        a profile's shares (fractions of a model's time) 1.0 would outweigh every
        workload the model calls, so there it weighs as the lightest share: a marginal
        operator, 4.1's "100-200 trials or the default", not the heaviest."""
        if shares and (operator, workload) in shares:
            return shares[(operator, workload)]
        o = self.operator(operator)
        weight = o.weight
        if weight is None:
            weight = min(shares.values()) if shares else 1.0
        ws = o.workload_weights
        if ws:
            total = sum(ws.get(w, 0.0) for w in workloads) or 1.0
            return weight * ws.get(workload, 0.0) / total
        return weight / max(1, len(workloads))

    def declared_inputs(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """operator -> its `inputs:` globs with their lines (fingerprint.SourceCache)."""
        return {o.name: o.inputs for o in self.operators if o.inputs}

    def trials_for(self, operator: str) -> int:
        o = self.operator(operator)
        return o.trials if o.trials is not None else self.trials

    def trials_of(
        self, operator: str, workload: str, shares: Mapping[tuple[str, str], float] | None = None
    ) -> tuple[int, str]:
        """A workload's trials and why: the operator's `trials:`; else, where a model is
        profiled on the target (`shares`, core/profiles.model_shares), the tier of its
        share of the model's time (`trial_tiers`; a workload no model calls is
        marginal: share 0); else `trials:` at the top."""
        o = self.operator(operator)
        if o.trials is not None:
            return o.trials, f"operators.{operator}.trials"
        if shares and self.trial_tiers:
            share = shares.get((operator, workload), 0.0)
            for least, n in self.trial_tiers:
                if share >= least:
                    return n, f"{share * 100:.0f}% of the profiled models' time: the {least * 100:.0f}%+ tier"
        return self.trials, "trials"

    def targets_for(self, operator: str, kinds: Collection[str] | None) -> tuple[TargetConfig, ...]:
        """The targets `operator` is tuned for: its `targets:` list, else every target
        of a kind its template schedules for (`kinds`: its TARGET_KINDS,
        template.declared_kinds), so that a GPU target leaves the CPU templates alone.
        A listed target of another kind stays listed: `check` reports the template
        invalid for it. kinds None (a template whose TARGET_KINDS cannot be read):
        every target, so that the error reaches each."""
        o = self.operator(operator)
        if o.targets is not None:
            return tuple(self.target(n) for n in o.targets)
        if kinds is None:
            return self.targets
        return tuple(t for t in self.targets if t.kind in kinds)

    def coverage(self, kinds: Mapping[str, Collection[str] | None]) -> dict[str, tuple[str, ...]]:
        """Target name -> the operators it is tuned for, in `kinds`' order (operator ->
        its template's TARGET_KINDS, as targets_for takes them); every configured
        target, those that cover none with ()."""
        out: dict[str, list[str]] = {t.name: [] for t in self.targets}
        for op, k in kinds.items():
            for t in self.targets_for(op, k):
                out[t.name].append(op)
        return {name: tuple(ops) for name, ops in out.items()}


# Target attributes TVM reads as integers (a float 2.0 would compare equal to 2 here).
_INT_ATTRS = ("num-cores", "max_num_threads", "thread_warp_size", "max_threads_per_block", "opt-level")


def target_value_problem(target: dict[str, Any], where: str = "") -> tuple[str, str] | None:
    """(what is wrong, the fix) for a target dict TVM would reject; None when fine.

    TVM target attributes are integers, strings, booleans, lists and dicts: a float
    is never valid, and the integer attributes must be integers.
    """
    for key, value in target.items():
        here = f"{where}{key}"
        if key in _INT_ATTRS and (not isinstance(value, int) or isinstance(value, bool)):
            fix = (
                f"write `{key}: {int(value)}`"
                if isinstance(value, float) and value.is_integer()
                else f"write an integer, e.g. `{key}: 4`"
            )
            return f"{here} is {value!r}, TVM takes an integer", fix
        if isinstance(value, float):
            return (
                f"{here} is the float {value!r}; TVM target attributes are integers, strings, booleans or lists",
                "write it without a fraction, or quoted if it is a string",
            )
        if isinstance(value, dict):
            inner = target_value_problem(value, f"{here}.")
            if inner is not None:
                return inner
        if isinstance(value, list) and any(isinstance(v, float) for v in value):
            return (
                f"{here} holds a float ({value!r}); TVM target attributes are integers, strings, booleans or lists",
                "write integers or quoted strings",
            )
    return None
