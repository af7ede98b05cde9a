"""`tvmtune.yaml`: read with PyYAML into frozen dataclasses, every error with file:line.

The YAML is composed into nodes (not loaded) so that each value keeps the line it
came from; unknown keys get a "did you mean" from difflib.

Over 400 lines: one parser, every key with its line-numbered error and fix.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .cudatags import close_tags, expand_tag
from .errors import ConfigError
from .stats import MIN_SAMPLES
from .targetinfo import missing_cuda_keys
from .targets import canonical_target, parse_legacy_string, slug

CONFIG_NAME = "tvmtune.yaml"
# The runner label a GPU target's runs-on must name (its re-tune measures on that GPU).
GPU_LABEL = "gpu"


class ConfigWarning(UserWarning):
    """tvmtune.yaml works but should change (e.g. a legacy string target).

    Also kept in `Config.warnings`, so that `check` can report it in every format.
    """


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


# --------------------------------------------------------------------------- parsing


class _Ctx:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.display = path.name
        self.warnings: list[str] = []

    def warn(self, node: yaml.Node, what: str, fix: str) -> None:
        message = f"{self.display}:{node.start_mark.line + 1}: {what}; {fix}"
        self.warnings.append(message)
        warnings.warn(message, ConfigWarning, stacklevel=4)

    def error(self, node: yaml.Node | None, what: str, fix: str) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else 1
        return ConfigError(f"{self.display}:{line}: {what}; {fix}")


def _construct(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _mapping(ctx: _Ctx, node: yaml.Node, where: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        raise ctx.error(node, f"{where} must be a mapping", f"write `{where}:` followed by indented `key: value` lines")
    out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for k, v in node.value:
        key = _construct(k)
        if not isinstance(key, str):
            raise ctx.error(k, f"key {key!r} in {where} is not a string", "quote it or rename it")
        if key in out:
            raise ctx.error(k, f"duplicate key {key!r} in {where}", "keep only one of them")
        out[key] = (k, v)
    return out


def _check_keys(ctx: _Ctx, items: dict[str, tuple[yaml.Node, yaml.Node]], allowed: list[str], where: str) -> None:
    for key, (knode, _) in items.items():
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
            raise ctx.error(knode, f"unknown key {key!r} in {where}", fix)


def _typed(
    ctx: _Ctx,
    node: yaml.Node,
    key: str,
    kind: type | tuple[type, ...],
    example: str,
    check: Callable[[Any], bool] | None = None,
    rule: str = "",
) -> Any:
    value = _construct(node)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    # YAML reads `timeout_s: 30` as an int; a float field takes it.
    if not ok and float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ctx.error(
            node,
            f"{key} is {value!r} ({type(value).__name__}), expected {' or '.join(k.__name__ for k in kinds)}",
            f"write for example `{example}`",
        )
    if check is not None and not check(value):
        raise ctx.error(node, f"{key} is {value!r}, {rule}", f"write for example `{example}`")
    return value


_POS = (lambda v: v > 0, "it must be positive")
_NONNEG = (lambda v: v >= 0, "it must not be negative")


def _parse_early_stop(ctx: _Ctx, node: yaml.Node) -> EarlyStop:
    items = _mapping(ctx, node, "early_stop")
    _check_keys(ctx, items, ["patience", "min_improvement"], "early_stop")
    kw: dict[str, Any] = {}
    if "patience" in items:
        kw["patience"] = _typed(ctx, items["patience"][1], "early_stop.patience", int, "patience: 3", *_NONNEG)
    if "min_improvement" in items:
        kw["min_improvement"] = _typed(
            ctx, items["min_improvement"][1], "early_stop.min_improvement", float, "min_improvement: 0.01", *_NONNEG
        )
    return EarlyStop(**kw)


def _parse_measure(ctx: _Ctx, node: yaml.Node) -> MeasureOptions:
    items = _mapping(ctx, node, "measure")
    frac = (lambda v: 0 < v < 1, "it must be a fraction between 0 and 1 (0.01 is 1%)")
    spec: dict[str, tuple[type | tuple[type, ...], str, tuple[Callable[[Any], bool], str]]] = {
        "sample_ms": (float, "sample_ms: 10", _POS),
        "precision": (float, "precision: 0.01", frac),
        "search_precision": (float, "search_precision: 0.03", frac),
        "search_cap_s": (float, "search_cap_s: 0.4", _POS),
        "time_cap_s": (float, "time_cap_s: 2", _POS),
        # 1 or more never refuses: a runner known to be shared (the test suite's).
        "usable_precision": (float, "usable_precision: 0.25", _POS),
        "race": (float, "race: 1.25", (lambda v: v >= 1.0, "it must be at least 1 (1.25: 25% slower)")),
        "probe": (int, "probe: 3", (lambda v: v >= 1, "it must be at least 1")),
        "finalists": (int, "finalists: 5", (lambda v: v >= 1, "it must be at least 1")),
        "enable_cpu_cache_flush": (bool, "enable_cpu_cache_flush: false", (lambda v: True, "")),
        "timeout_s": (float, "timeout_s: 30", _POS),
        "history_s": (float, "history_s: 120", _POS),
    }
    for key, why in LEGACY_MEASURE_KEYS.items():
        if key in items:
            raise ctx.error(
                items[key][0],
                f"measure.{key} is gone: measurement is adaptive now ({why})",
                f"remove `{key}:` (see README, Measurement)",
            )
    _check_keys(ctx, items, list(spec), "measure")
    kw = {k: _typed(ctx, items[k][1], f"measure.{k}", t, ex, *chk) for k, (t, ex, chk) in spec.items() if k in items}
    m = MeasureOptions(**kw)

    def at(key: str) -> yaml.Node:
        return items[key][1] if key in items else node

    # A cap that cannot hold the samples one interval needs would never converge.
    need_s = MIN_SAMPLES * m.sample_ms / 1000.0
    for cap in ("time_cap_s", "search_cap_s"):
        if getattr(m, cap) < need_s:
            raise ctx.error(
                at(cap),
                f"measure.{cap} ({getattr(m, cap):g}s) is shorter than the {MIN_SAMPLES} samples of "
                f"measure.sample_ms ({m.sample_ms:g} ms) one confidence interval needs ({need_s:g}s)",
                f"raise measure.{cap} to at least {need_s:g} or lower measure.sample_ms",
            )
    if m.precision > m.usable_precision:
        raise ctx.error(
            at("precision"),
            f"measure.precision ({m.precision:g}) is looser than measure.usable_precision ({m.usable_precision:g})",
            "the target must be at least as tight as what is usable: lower precision",
        )
    # A slow kernel samples past time_cap_s until it has an interval, up to 0.6 x timeout_s.
    if m.timeout_s < 1.5 * m.time_cap_s:
        raise ctx.error(
            at("timeout_s"),
            f"measure.timeout_s ({m.timeout_s:g}s) would kill a measurement before its "
            f"time_cap_s ({m.time_cap_s:g}s) is spent",
            f"raise measure.timeout_s to at least {1.5 * m.time_cap_s:g} (e.g. 30)",
        )
    return m


def _parse_target_value(ctx: _Ctx, name: str, node: yaml.Node) -> dict[str, Any]:
    value = _construct(node)
    if isinstance(value, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", value.strip()):
        # A TVM tag (`nvidia/nvidia-h100`): its dict, from TVM's registry (cudatags.py).
        tag = expand_tag(value.strip())
        if tag is None:
            close = close_tags(value.strip())
            raise ctx.error(
                node,
                f"target {name!r}: {value!r} is not a TVM CUDA tag tvmtune-ci knows",
                f"did you mean {close[0]!r}?"
                if close
                else "write the target dict, e.g. `{kind: cuda, arch: sm_90a, max_shared_memory_per_block: 49152, max_threads_per_block: 1024, thread_warp_size: 32, registers_per_block: 65536}`",
            )
        value = tag
    elif isinstance(value, str):
        try:
            converted = parse_legacy_string(value)
        except ValueError as e:
            raise ctx.error(
                node, f"target {name!r}: {e}", "write a dict such as {kind: llvm, mcpu: skylake-avx512}"
            ) from None
        ctx.warn(
            node,
            f"target {name!r} uses the removed string form {value!r}; read as {canonical_target(converted)}",
            "write that dict instead",
        )
        value = converted
    if not isinstance(value, dict) or "kind" not in value:
        raise ctx.error(
            node,
            f"target {name!r} must be a TVM target dict with a 'kind'",
            "write for example `target: {kind: llvm, mcpu: skylake-avx512, num-cores: 4}`",
        )
    problem = target_value_problem(value)
    if problem is not None:
        raise ctx.error(node, f"target {name!r}: {problem[0]}", problem[1])
    if value.get("kind") == "cuda":
        missing = missing_cuda_keys(value)
        if missing:
            raise ctx.error(
                node,
                f"target {name!r} (kind cuda) lacks {', '.join(missing)}: the GPU's limits per thread block, which MetaSchedule's VerifyGPUCode and the template's constraints need (never read from a GPU)",
                "name a TVM tag instead (`target: nvidia/nvidia-h100`), or write every one, e.g. `{kind: cuda, arch: sm_90a, max_shared_memory_per_block: 49152, max_threads_per_block: 1024, thread_warp_size: 32, registers_per_block: 65536}`",
            )
    return canonical_target(value)


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


def _parse_runner(ctx: _Ctx, name: str, node: yaml.Node) -> RpcRunner | None:
    value = _construct(node)
    if value == "local":
        return None
    items = _mapping(ctx, node, f"targets.{name}.runner") if not isinstance(value, str) else None
    if items is None:
        raise ctx.error(
            node,
            f"runner {value!r} of target {name!r} is unknown",
            "write `runner: local` or `runner: {rpc: {tracker: HOST:PORT, key: NAME, devices: N}}`",
        )
    _check_keys(ctx, items, ["rpc"], f"targets.{name}.runner")
    if "rpc" not in items:
        raise ctx.error(
            node, f"runner of target {name!r} has no 'rpc'", "write `runner: {rpc: {tracker: HOST:PORT, key: NAME}}`"
        )
    rpc = _mapping(ctx, items["rpc"][1], f"targets.{name}.runner.rpc")
    _check_keys(ctx, rpc, ["tracker", "key", "devices", "session_timeout_s"], f"targets.{name}.runner.rpc")
    for req in ("tracker", "key"):
        if req not in rpc:
            raise ctx.error(
                items["rpc"][1],
                f"runner.rpc of target {name!r} needs {req!r}",
                "write `rpc: {tracker: 127.0.0.1:9190, key: mydevice}`",
            )
    tracker = _typed(
        ctx,
        rpc["tracker"][1],
        "rpc.tracker",
        str,
        "tracker: 127.0.0.1:9190",
        lambda v: ":" in v and v.rpartition(":")[2].isdigit(),
        "it must be HOST:PORT",
    )
    kw: dict[str, Any] = {"tracker": tracker, "key": _typed(ctx, rpc["key"][1], "rpc.key", str, "key: mydevice")}
    if "devices" in rpc:
        kw["devices"] = _typed(ctx, rpc["devices"][1], "rpc.devices", int, "devices: 2", *_POS)
    if "session_timeout_s" in rpc:
        kw["session_timeout_s"] = _typed(
            ctx, rpc["session_timeout_s"][1], "rpc.session_timeout_s", float, "session_timeout_s: 60", *_POS
        )
    return RpcRunner(**kw)


def _parse_targets(ctx: _Ctx, node: yaml.Node) -> tuple[TargetConfig, ...]:
    items = _mapping(ctx, node, "targets")
    if not items:
        # No target means no entries: `check` would pass on anything.
        raise ctx.error(
            node,
            "targets is empty, so nothing would be checked",
            "add one, e.g. `targets: {cpu: {target: {kind: llvm, mcpu: skylake-avx512}}}`",
        )
    out = []
    for name, (knode, vnode) in items.items():
        try:
            slug(name)
        except ValueError:
            raise ctx.error(
                knode, f"target name {name!r} cannot name a folder", "use letters, digits, '-', '_' or '.'"
            ) from None
        if not isinstance(vnode, yaml.MappingNode) or not any(_construct(k) == "target" for k, _ in vnode.value):
            raise ctx.error(
                vnode,
                f"target {name!r} needs a 'target' entry",
                f"write `{name}: {{target: {{kind: llvm, mcpu: ...}}, runs-on: [self-hosted]}}`",
            )
        t = _mapping(ctx, vnode, f"targets.{name}")
        _check_keys(ctx, t, ["target", "runs-on", "runner", "seed-from"], f"targets.{name}")
        seed_from, seed_nearest = None, True
        if "seed-from" in t:
            snode = t["seed-from"][1]
            seed_from = _construct(snode)
            fix = (
                "name the target whose logs should seed this one's first search, e.g. `seed-from: zen4-2c`, "
                "write `seed-from: false` to start it cold, or remove the key (the nearest configured target)"
            )
            if seed_from is False:
                seed_from, seed_nearest = None, False
            elif not isinstance(seed_from, str) or not seed_from:
                raise ctx.error(snode, f"seed-from of target {name!r} must be a target name or false", fix)
            elif seed_from == name:
                raise ctx.error(snode, f"target {name!r} cannot seed from itself (its own log is replayed anyway)", fix)
            try:
                if seed_from is not None:
                    slug(seed_from)
            except ValueError:
                raise ctx.error(
                    snode, f"seed-from {seed_from!r} of target {name!r} cannot name a log folder", fix
                ) from None
        runs_on: tuple[str, ...] = ()
        if "runs-on" in t:
            labels = _construct(t["runs-on"][1])
            if isinstance(labels, str):
                labels = [labels]
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                raise ctx.error(
                    t["runs-on"][1],
                    f"runs-on of target {name!r} must be a list of runner labels",
                    "write `runs-on: [self-hosted, linux, x64, avx512]`",
                )
            runs_on = tuple(labels)
        target = _parse_target_value(ctx, name, t["target"][1])
        rpc = _parse_runner(ctx, name, t["runner"][1]) if "runner" in t else None
        if target.get("kind") == "cuda" and rpc is None and GPU_LABEL not in runs_on:
            # Measured where it is re-tuned: the fan-out must reach a runner with a GPU.
            where = t["runs-on"][1] if "runs-on" in t else vnode
            raise ctx.error(
                where,
                f"target {name!r} is a GPU ({target.get('arch')}) measured on its runner, and its runs-on does not name the {GPU_LABEL!r} label of GPU runners",
                f"write e.g. `runs-on: [linux, x64, {GPU_LABEL}, h100]` and register the GPU runner with those labels (docs/adopting.md), or measure through RPC (`runner: {{rpc: ...}}`)",
            )
        out.append(
            TargetConfig(
                name=name,
                target=target,
                runs_on=runs_on,
                rpc=rpc,
                line=knode.start_mark.line + 1,
                seed_from=seed_from,
                seed_nearest=seed_nearest,
            )
        )
    return tuple(out)


def _parse_operators(ctx: _Ctx, node: yaml.Node, target_names: list[str]) -> tuple[OperatorConfig, ...]:
    items = _mapping(ctx, node, "operators")
    out = []
    for name, (knode, vnode) in items.items():
        o = (
            _mapping(ctx, vnode, f"operators.{name}")
            if not (isinstance(vnode, yaml.ScalarNode) and _construct(vnode) is None)
            else {}
        )
        _check_keys(ctx, o, ["trials", "targets", "weight", "workloads", "inputs"], f"operators.{name}")
        kw: dict[str, Any] = {"name": name, "line": knode.start_mark.line + 1}
        if "weight" in o:
            kw["weight"] = _typed(ctx, o["weight"][1], f"operators.{name}.weight", float, "weight: 0.6", *_POS)
        if "workloads" in o:
            ws = _mapping(ctx, o["workloads"][1], f"operators.{name}.workloads")
            kw["workload_weights"] = {
                w: _typed(ctx, ws[w][1], f"operators.{name}.workloads.{w}", float, f"{w}: 0.5", *_POS) for w in ws
            }
        if "trials" in o:
            kw["trials"] = _typed(ctx, o["trials"][1], f"operators.{name}.trials", int, "trials: 200", *_POS)
        if "targets" in o:
            tnode = o["targets"][1]
            names = _construct(tnode)
            if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
                raise ctx.error(
                    tnode,
                    f"operators.{name}.targets must be a list of target names",
                    f"write `targets: [{', '.join(target_names) or 'cpu'}]`",
                )
            for n in names:
                if n not in target_names:
                    close = difflib.get_close_matches(n, target_names, n=1)
                    fix = (
                        f"did you mean {close[0]!r}?"
                        if close
                        else f"configured targets: {', '.join(target_names) or '(none)'}"
                    )
                    raise ctx.error(tnode, f"operators.{name}.targets names unknown target {n!r}", fix)
            kw["targets"] = tuple(names)
        if "inputs" in o:
            kw["inputs"] = _parse_inputs(ctx, o["inputs"][1], name)
        out.append(OperatorConfig(**kw))
    return tuple(out)


def _parse_inputs(ctx: _Ctx, node: yaml.Node, operator: str) -> tuple[tuple[str, int], ...]:
    """`inputs: [operators/data/*.json]`: globs of files the template reads, relative to
    the repository root and inside it."""
    example = f"inputs: [operators/data/{operator}_*.json]"
    if not isinstance(node, yaml.SequenceNode):
        raise ctx.error(
            node,
            f"operators.{operator}.inputs must be a list of globs of files its template reads",
            f"write for example `{example}`",
        )
    out = []
    for item in node.value:
        v = _construct(item)
        parts = v.replace("\\", "/").split("/") if isinstance(v, str) else []
        if not v or not parts or v.startswith("/") or ".." in parts or not all(parts):
            raise ctx.error(
                item,
                f"operators.{operator}.inputs entry {v!r} is not a glob relative to the repository root",
                f"write for example `{example}` (no leading '/', no '..')",
            )
        out.append((v, item.start_mark.line + 1))
    return tuple(out)


_TOP_KEYS = [
    "format",
    "targets",
    "operators_dir",
    "logs_dir",
    "trials",
    "trial_tiers",
    "batch_size",
    "seed",
    "max_age_days",
    "tvm_version",
    "early_stop",
    "measure",
    "operators",
    "pr_check",
    "git",
    "keep",
    "models",
]


def parse_config(text: str, path: Path) -> Config:
    """Parse the text of a tvmtune.yaml found at `path`; ConfigError (exit 2) naming
    `path:LINE`, what is wrong and what to write instead."""
    ctx = _Ctx(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(
            f"{ctx.display}:{line}: invalid YAML: {problem}; fix the syntax (indentation, a missing ':' or an unclosed bracket)"
        ) from None
    if root is None:
        raise ConfigError(f"{ctx.display}:1: the file is empty; declare at least `targets:`")
    items = _mapping(ctx, root, "the top level")
    _check_keys(ctx, items, _TOP_KEYS, "the top level")
    if "format" in items and _construct(items["format"][1]) != 1:
        raise ctx.error(
            items["format"][1],
            f"format {_construct(items['format'][1])!r} is not understood by this tvmtune-ci",
            "write `format: 1` or upgrade tvmtune-ci",
        )
    if "targets" not in items:
        raise ConfigError(
            f"{ctx.display}:1: no `targets:`; add e.g. `targets: {{cpu: {{target: {{kind: llvm, mcpu: skylake-avx512}}}}}}`"
        )
    targets = _parse_targets(ctx, items["targets"][1])
    lines = {key: knode.start_mark.line + 1 for key, (knode, _) in items.items()}
    kw: dict[str, Any] = {"root": path.parent, "targets": targets, "path": path, "lines": lines}
    for key, kind, example, chk in [
        ("operators_dir", str, "operators_dir: operators", None),
        ("logs_dir", str, "logs_dir: tuning_logs", None),
        ("trials", int, "trials: 300", _POS),
        ("batch_size", int, "batch_size: 16", _POS),
        ("seed", int, "seed: 42", _NONNEG),
        ("max_age_days", int, "max_age_days: 365", _POS),
    ]:
        if key in items:
            kw[key] = _typed(ctx, items[key][1], key, kind, example, *(chk or (None, "")))
    if "tvm_version" in items:
        vnode = items["tvm_version"][1]
        v = _construct(vnode)
        # Unquoted `0.30` is the float 0.3: keep the text as written, not the float.
        v = str(vnode.value) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
        # As staleness.major_minor reads it: "a.b" would silently skip tvm_changed.
        if not isinstance(v, str) or not re.match(r"v?\d+\.\d+(?![\d])", v.strip()):
            raise ctx.error(
                items["tvm_version"][1], f"tvm_version {v!r} is not MAJOR.MINOR", 'write `tvm_version: "0.27"` (quoted)'
            )
        kw["tvm_version"] = v
    if "trial_tiers" in items:
        kw["trial_tiers"] = _parse_tiers(ctx, items["trial_tiers"][1])
    if "early_stop" in items:
        kw["early_stop"] = _parse_early_stop(ctx, items["early_stop"][1])
    if "measure" in items:
        kw["measure"] = _parse_measure(ctx, items["measure"][1])
    if "operators" in items:
        kw["operators"] = _parse_operators(ctx, items["operators"][1], [t.name for t in targets])
    if "pr_check" in items:
        kw["pr_check"] = _typed(
            ctx,
            items["pr_check"][1],
            "pr_check",
            str,
            "pr_check: fail",
            lambda v: v in ("fail", "warn"),
            "it must be 'fail' or 'warn'",
        )
    if "keep" in items:
        kw["keep"] = _parse_keep(ctx, items["keep"][1])
    if "git" in items:
        g = _mapping(ctx, items["git"][1], "git")
        _check_keys(ctx, g, ["name", "email"], "git")
        kw["git"] = GitIdentity(**{k: _typed(ctx, g[k][1], f"git.{k}", str, f"{k}: tvmtune-ci") for k in g})
    if "models" in items:
        kw["models"] = _parse_models(ctx, items["models"][1], [t.name for t in targets])
    kw["warnings"] = tuple(ctx.warnings)
    return Config(**kw)


def _parse_tiers(ctx: _Ctx, node: yaml.Node) -> tuple[tuple[float, int], ...]:
    """`trial_tiers: {0.30: 1500, 0.05: 500, 0: 150}` (least share: trials), or `off`."""
    example = "trial_tiers: {0.30: 1500, 0.05: 500, 0: 150} (least share of a model's time: trials), or `off`"
    value = _construct(node)
    if value is False or value == "off":  # YAML reads a bare `off` as False
        return ()
    if not isinstance(value, dict) or not value:
        raise ctx.error(node, f"trial_tiers {value!r} is not a mapping of shares to trials", f"write `{example}`")
    tiers = []
    for share, n in value.items():
        if (
            isinstance(share, bool)
            or not isinstance(share, (int, float))
            or not 0 <= share <= 1
            or isinstance(n, bool)
            or not isinstance(n, int)
            or n < 1
        ):
            raise ctx.error(
                node,
                f"trial_tiers entry {share!r}: {n!r} is not a share in [0, 1] and a positive trial count",
                f"write `{example}`",
            )
        tiers.append((float(share), n))
    if min(t[0] for t in tiers) != 0:
        raise ctx.error(
            node, "trial_tiers has no tier for the smallest shares", "add `0: 150` (every share falls in a tier)"
        )
    return tuple(sorted(tiers, reverse=True))


def _parse_models(ctx: _Ctx, node: yaml.Node, target_names: list[str]) -> tuple[ModelConfig, ...]:
    """`models: {bert_layer: {source: models/bert_layer.py, targets: [zen4-2c]}}`."""
    items = _mapping(ctx, node, "models")
    out = []
    for name, (knode, vnode) in items.items():
        example = f"{name}: {{source: models/{name}.py}}"
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
            raise ctx.error(knode, f"model name {name!r} cannot name a file", "use letters, digits, '-', '_' or '.'")
        if not isinstance(vnode, yaml.MappingNode):
            raise ctx.error(vnode, f"model {name!r} must be a mapping with a source", f"write `{example}`")
        m = _mapping(ctx, vnode, f"models.{name}")
        _check_keys(ctx, m, ["source", "targets"], f"models.{name}")
        if "source" not in m:
            raise ctx.error(vnode, f"model {name!r} has no source", f"write `{example}`")
        snode = m["source"][1]
        source = _construct(snode)
        parts = source.replace("\\", "/").split("/") if isinstance(source, str) else []
        if (
            not parts
            or source.startswith("/")
            or ".." in parts
            or not all(parts)
            or not source.endswith((".py", ".onnx"))
        ):
            raise ctx.error(
                snode,
                f"models.{name}.source {source!r} is not a .py or .onnx file relative to the repository root",
                f"write `source: models/{name}.py` (a module exposing MODEL and SPEC) or "
                f"`source: models/{name}.onnx` (no leading '/', no '..')",
            )
        targets = None
        if "targets" in m:
            tnode = m["targets"][1]
            names = _construct(tnode)
            if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
                raise ctx.error(
                    tnode,
                    f"models.{name}.targets must be a list of target names",
                    f"write `targets: [{', '.join(target_names) or 'cpu'}]`",
                )
            for n in names:
                if n not in target_names:
                    close = difflib.get_close_matches(n, target_names, n=1)
                    fix = f"did you mean {close[0]!r}?" if close else f"configured targets: {', '.join(target_names)}"
                    raise ctx.error(tnode, f"models.{name}.targets names unknown target {n!r}", fix)
            targets = tuple(names)
        out.append(ModelConfig(name, source.replace("\\", "/"), targets, knode.start_mark.line + 1))
    return tuple(out)


def _parse_keep(ctx: _Ctx, node: yaml.Node) -> tuple[str, ...]:
    """`keep: [zen3-2c, matmul/zen5-2c, old_op]`: log folders kept on purpose."""
    example = "keep: [zen3-2c, matmul/zen5-2c]"
    if not isinstance(node, yaml.SequenceNode):
        raise ctx.error(node, "keep must be a list of log folders kept on purpose", f"write for example `{example}`")
    out = []
    for item in node.value:
        v = _construct(item)
        parts = v.split("/") if isinstance(v, str) else []
        if not parts or len(parts) > 2 or not all(parts) or any(p in (".", "..") for p in parts):
            raise ctx.error(
                item,
                f"keep entry {v!r} is not a target name, OPERATOR/TARGET or an operator name",
                f"write for example `{example}`",
            )
        out.append(v)
    return tuple(out)


def find_config(start: Path) -> Path:
    """The nearest tvmtune.yaml at or above `start`."""
    start = start.resolve()
    for d in (start, *start.parents):
        if (d / CONFIG_NAME).is_file():
            return d / CONFIG_NAME
    raise ConfigError(
        f"no {CONFIG_NAME} in {start} or any folder above it; create one at the repository root (see README: Configuration)"
    )


def load_config(path: Path | None = None) -> Config:
    """Read tvmtune.yaml: `path`, or the first one found from the current folder up."""
    path = find_config(Path.cwd()) if path is None else path
    if path.is_dir():
        path = find_config(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}; check the path") from None
    return parse_config(text, path)
