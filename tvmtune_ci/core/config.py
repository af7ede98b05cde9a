"""`tvmtune.yaml`: read with PyYAML into frozen dataclasses, every error with file:line.

The YAML is composed into nodes (not loaded) so that each value keeps the line it
came from; unknown keys get a "did you mean" from difflib. The dataclasses are
`configschema.py`; the line-numbered errors and the checks every key shares are
`configerrors.py`.

Over 400 lines: one parser, every key with its line-numbered error and fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .configerrors import NON_NEGATIVE, POSITIVE, ParseContext, check_keys, construct, mapping, typed
from .configschema import (
    GPU_LABEL,
    LEGACY_MEASURE_KEYS,
    Config,
    EarlyStop,
    GitIdentity,
    MeasureOptions,
    ModelConfig,
    OperatorConfig,
    RpcRunner,
    TargetConfig,
    target_value_problem,
)
from .cudatags import close_tags, expand_tag
from .errors import ConfigError
from .stats import MIN_SAMPLES
from .targetinfo import missing_cuda_keys
from .targets import canonical_target, parse_legacy_string, slug

CONFIG_NAME = "tvmtune.yaml"


# --------------------------------------------------------------------------- parsing


def _parse_early_stop(ctx: ParseContext, node: yaml.Node) -> EarlyStop:
    items = mapping(ctx, node, "early_stop")
    check_keys(ctx, items, ["patience", "min_improvement"], "early_stop")
    kw: dict[str, Any] = {}
    if "patience" in items:
        kw["patience"] = typed(ctx, items["patience"][1], "early_stop.patience", int, "patience: 3", *NON_NEGATIVE)
    if "min_improvement" in items:
        kw["min_improvement"] = typed(
            ctx,
            items["min_improvement"][1],
            "early_stop.min_improvement",
            float,
            "min_improvement: 0.01",
            *NON_NEGATIVE,
        )
    return EarlyStop(**kw)


def _parse_measure(ctx: ParseContext, node: yaml.Node) -> MeasureOptions:
    items = mapping(ctx, node, "measure")
    frac = (lambda v: 0 < v < 1, "it must be a fraction between 0 and 1 (0.01 is 1%)")
    spec: dict[str, tuple[type | tuple[type, ...], str, tuple[Callable[[Any], bool], str]]] = {
        "sample_ms": (float, "sample_ms: 10", POSITIVE),
        "precision": (float, "precision: 0.01", frac),
        "search_precision": (float, "search_precision: 0.03", frac),
        "search_cap_s": (float, "search_cap_s: 0.4", POSITIVE),
        "time_cap_s": (float, "time_cap_s: 2", POSITIVE),
        # 1 or more never refuses: a runner known to be shared (the test suite's).
        "usable_precision": (float, "usable_precision: 0.25", POSITIVE),
        "race": (float, "race: 1.25", (lambda v: v >= 1.0, "it must be at least 1 (1.25: 25% slower)")),
        "probe": (int, "probe: 3", (lambda v: v >= 1, "it must be at least 1")),
        "finalists": (int, "finalists: 5", (lambda v: v >= 1, "it must be at least 1")),
        "enable_cpu_cache_flush": (bool, "enable_cpu_cache_flush: false", (lambda v: True, "")),
        "timeout_s": (float, "timeout_s: 30", POSITIVE),
        "history_s": (float, "history_s: 120", POSITIVE),
    }
    for key, why in LEGACY_MEASURE_KEYS.items():
        if key in items:
            raise ctx.error(
                items[key][0],
                f"measure.{key} is gone: measurement is adaptive now ({why})",
                f"remove `{key}:` (see README, Measurement)",
            )
    check_keys(ctx, items, list(spec), "measure")
    kw = {k: typed(ctx, items[k][1], f"measure.{k}", t, ex, *chk) for k, (t, ex, chk) in spec.items() if k in items}
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


def _parse_target_value(ctx: ParseContext, name: str, node: yaml.Node) -> dict[str, Any]:
    value = construct(node)
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


def _parse_runner(ctx: ParseContext, name: str, node: yaml.Node) -> RpcRunner | None:
    value = construct(node)
    if value == "local":
        return None
    items = mapping(ctx, node, f"targets.{name}.runner") if not isinstance(value, str) else None
    if items is None:
        raise ctx.error(
            node,
            f"runner {value!r} of target {name!r} is unknown",
            "write `runner: local` or `runner: {rpc: {tracker: HOST:PORT, key: NAME, devices: N}}`",
        )
    check_keys(ctx, items, ["rpc"], f"targets.{name}.runner")
    if "rpc" not in items:
        raise ctx.error(
            node, f"runner of target {name!r} has no 'rpc'", "write `runner: {rpc: {tracker: HOST:PORT, key: NAME}}`"
        )
    rpc = mapping(ctx, items["rpc"][1], f"targets.{name}.runner.rpc")
    check_keys(ctx, rpc, ["tracker", "key", "devices", "session_timeout_s"], f"targets.{name}.runner.rpc")
    for req in ("tracker", "key"):
        if req not in rpc:
            raise ctx.error(
                items["rpc"][1],
                f"runner.rpc of target {name!r} needs {req!r}",
                "write `rpc: {tracker: 127.0.0.1:9190, key: mydevice}`",
            )
    tracker = typed(
        ctx,
        rpc["tracker"][1],
        "rpc.tracker",
        str,
        "tracker: 127.0.0.1:9190",
        lambda v: ":" in v and v.rpartition(":")[2].isdigit(),
        "it must be HOST:PORT",
    )
    kw: dict[str, Any] = {"tracker": tracker, "key": typed(ctx, rpc["key"][1], "rpc.key", str, "key: mydevice")}
    if "devices" in rpc:
        kw["devices"] = typed(ctx, rpc["devices"][1], "rpc.devices", int, "devices: 2", *POSITIVE)
    if "session_timeout_s" in rpc:
        kw["session_timeout_s"] = typed(
            ctx, rpc["session_timeout_s"][1], "rpc.session_timeout_s", float, "session_timeout_s: 60", *POSITIVE
        )
    return RpcRunner(**kw)


def _parse_targets(ctx: ParseContext, node: yaml.Node) -> tuple[TargetConfig, ...]:
    items = mapping(ctx, node, "targets")
    if not items:
        # No target means no entries: `check` would pass on anything.
        raise ctx.error(
            node,
            "targets is empty, so nothing would be checked",
            "add one, e.g. `targets: {cpu: {target: {kind: llvm, mcpu: skylake-avx512}}}`",
        )
    out = []
    for name, (knode, vnode) in items.items():
        out.append(_parse_target(ctx, name, knode, vnode))
    return tuple(out)


def _parse_target(ctx: ParseContext, name: str, knode: yaml.Node, vnode: yaml.Node) -> TargetConfig:
    """One entry of `targets:`: a name that can name a folder, its keys, and a GPU measured
    on its runner must run on the GPU runners' label."""
    try:
        slug(name)
    except ValueError:
        raise ctx.error(
            knode, f"target name {name!r} cannot name a folder", "use letters, digits, '-', '_' or '.'"
        ) from None
    if not isinstance(vnode, yaml.MappingNode) or not any(construct(k) == "target" for k, _ in vnode.value):
        raise ctx.error(
            vnode,
            f"target {name!r} needs a 'target' entry",
            f"write `{name}: {{target: {{kind: llvm, mcpu: ...}}, runs-on: [self-hosted]}}`",
        )
    t = mapping(ctx, vnode, f"targets.{name}")
    check_keys(ctx, t, ["target", "runs-on", "runner", "seed-from", "retired"], f"targets.{name}")
    retired = _parse_retired(ctx, name, t["retired"][1]) if "retired" in t else None
    seed_from, seed_nearest = _parse_seed_from(ctx, name, t["seed-from"][1]) if "seed-from" in t else (None, True)
    runs_on = _parse_runs_on(ctx, name, t["runs-on"][1]) if "runs-on" in t else ()
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
    return TargetConfig(
        name=name,
        target=target,
        runs_on=runs_on,
        rpc=rpc,
        line=knode.start_mark.line + 1,
        seed_from=seed_from,
        seed_nearest=seed_nearest,
        retired=retired,
    )


def _parse_retired(ctx: ParseContext, name: str, node: yaml.Node) -> str:
    """A target's `retired:`: when and why its runner went, in words."""
    value = construct(node)
    if not isinstance(value, str) or not value.strip():
        raise ctx.error(
            node,
            f"retired of target {name!r} must say when and why its runner went",
            'write e.g. `retired: "2026-12-07: the Emerald Rapids runner was decommissioned"`, '
            "or remove the key while a runner of it is registered",
        )
    return value.strip()


def _parse_seed_from(ctx: ParseContext, name: str, snode: yaml.Node) -> tuple[str | None, bool]:
    """A target's `seed-from:` as (seed_from, seed_nearest): another target's name, or
    false to start it cold."""
    seed_from = construct(snode)
    fix = (
        "name the target whose logs should seed this one's first search, e.g. `seed-from: zen4-2c`, "
        "write `seed-from: false` to start it cold, or remove the key (the nearest configured target)"
    )
    if seed_from is False:
        return None, False
    if not isinstance(seed_from, str) or not seed_from:
        raise ctx.error(snode, f"seed-from of target {name!r} must be a target name or false", fix)
    if seed_from == name:
        raise ctx.error(snode, f"target {name!r} cannot seed from itself (its own log is replayed anyway)", fix)
    try:
        slug(seed_from)
    except ValueError:
        raise ctx.error(snode, f"seed-from {seed_from!r} of target {name!r} cannot name a log folder", fix) from None
    return seed_from, True


def _parse_runs_on(ctx: ParseContext, name: str, node: yaml.Node) -> tuple[str, ...]:
    """A target's `runs-on:`: one runner label or a list of them."""
    labels = construct(node)
    if isinstance(labels, str):
        labels = [labels]
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise ctx.error(
            node,
            f"runs-on of target {name!r} must be a list of runner labels",
            "write `runs-on: [self-hosted, linux, x64, avx512]`",
        )
    return tuple(labels)


def _parse_operators(ctx: ParseContext, node: yaml.Node, target_names: list[str]) -> tuple[OperatorConfig, ...]:
    items = mapping(ctx, node, "operators")
    out = []
    for name, (knode, vnode) in items.items():
        o = (
            mapping(ctx, vnode, f"operators.{name}")
            if not (isinstance(vnode, yaml.ScalarNode) and construct(vnode) is None)
            else {}
        )
        check_keys(ctx, o, ["trials", "targets", "weight", "workloads", "inputs"], f"operators.{name}")
        kw: dict[str, Any] = {"name": name, "line": knode.start_mark.line + 1}
        if "weight" in o:
            kw["weight"] = typed(ctx, o["weight"][1], f"operators.{name}.weight", float, "weight: 0.6", *POSITIVE)
        if "workloads" in o:
            ws = mapping(ctx, o["workloads"][1], f"operators.{name}.workloads")
            kw["workload_weights"] = {
                w: typed(ctx, ws[w][1], f"operators.{name}.workloads.{w}", float, f"{w}: 0.5", *POSITIVE) for w in ws
            }
        if "trials" in o:
            kw["trials"] = typed(ctx, o["trials"][1], f"operators.{name}.trials", int, "trials: 200", *POSITIVE)
        if "targets" in o:
            tnode = o["targets"][1]
            names = construct(tnode)
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


def _parse_inputs(ctx: ParseContext, node: yaml.Node, operator: str) -> tuple[tuple[str, int], ...]:
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
        v = construct(item)
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
    ctx = ParseContext(path)
    items = _top_level(ctx, text)
    targets = _parse_targets(ctx, items["targets"][1])
    lines = {key: knode.start_mark.line + 1 for key, (knode, _) in items.items()}
    kw: dict[str, Any] = {"root": path.parent, "targets": targets, "path": path, "lines": lines}
    kw.update(_parse_settings(ctx, items))
    kw.update(_parse_sections(ctx, items, [t.name for t in targets]))
    kw["warnings"] = tuple(ctx.warnings)
    return Config(**kw)


def _top_level(ctx: ParseContext, text: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """The file's top-level keys: valid YAML, not empty, known keys, a format this
    tvmtune-ci reads, and `targets:` present."""
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
    items = mapping(ctx, root, "the top level")
    check_keys(ctx, items, _TOP_KEYS, "the top level")
    if "format" in items and construct(items["format"][1]) != 1:
        raise ctx.error(
            items["format"][1],
            f"format {construct(items['format'][1])!r} is not understood by this tvmtune-ci",
            "write `format: 1` or upgrade tvmtune-ci",
        )
    if "targets" not in items:
        raise ConfigError(
            f"{ctx.display}:1: no `targets:`; add e.g. `targets: {{cpu: {{target: {{kind: llvm, mcpu: skylake-avx512}}}}}}`"
        )
    return items


def _parse_settings(ctx: ParseContext, items: dict[str, tuple[yaml.Node, yaml.Node]]) -> dict[str, Any]:
    """The top-level scalars: folders, trials, batch size, seed, age, TVM version."""
    kw: dict[str, Any] = {}
    for key, kind, example, chk in [
        ("operators_dir", str, "operators_dir: operators", None),
        ("logs_dir", str, "logs_dir: tuning_logs", None),
        ("trials", int, "trials: 300", POSITIVE),
        ("batch_size", int, "batch_size: 16", POSITIVE),
        ("seed", int, "seed: 42", NON_NEGATIVE),
        ("max_age_days", int, "max_age_days: 365", POSITIVE),
    ]:
        if key in items:
            kw[key] = typed(ctx, items[key][1], key, kind, example, *(chk or (None, "")))
    if "tvm_version" in items:
        vnode = items["tvm_version"][1]
        v = construct(vnode)
        # Unquoted `0.30` is the float 0.3: keep the text as written, not the float.
        v = str(vnode.value) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
        # As staleness.major_minor reads it: "a.b" would silently skip tvm_changed.
        if not isinstance(v, str) or not re.match(r"v?\d+\.\d+(?![\d])", v.strip()):
            raise ctx.error(
                items["tvm_version"][1], f"tvm_version {v!r} is not MAJOR.MINOR", 'write `tvm_version: "0.27"` (quoted)'
            )
        kw["tvm_version"] = v
    return kw


def _parse_sections(
    ctx: ParseContext, items: dict[str, tuple[yaml.Node, yaml.Node]], target_names: list[str]
) -> dict[str, Any]:
    """The top-level sections after the targets, in the order they are checked."""
    kw: dict[str, Any] = {}
    if "trial_tiers" in items:
        kw["trial_tiers"] = _parse_tiers(ctx, items["trial_tiers"][1])
    if "early_stop" in items:
        kw["early_stop"] = _parse_early_stop(ctx, items["early_stop"][1])
    if "measure" in items:
        kw["measure"] = _parse_measure(ctx, items["measure"][1])
    if "operators" in items:
        kw["operators"] = _parse_operators(ctx, items["operators"][1], target_names)
    if "pr_check" in items:
        kw["pr_check"] = typed(
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
        g = mapping(ctx, items["git"][1], "git")
        check_keys(ctx, g, ["name", "email"], "git")
        kw["git"] = GitIdentity(**{k: typed(ctx, g[k][1], f"git.{k}", str, f"{k}: tvmtune-ci") for k in g})
    if "models" in items:
        kw["models"] = _parse_models(ctx, items["models"][1], target_names)
    return kw


def _parse_tiers(ctx: ParseContext, node: yaml.Node) -> tuple[tuple[float, int], ...]:
    """`trial_tiers: {0.30: 1500, 0.05: 500, 0: 150}` (least share: trials), or `off`."""
    example = "trial_tiers: {0.30: 1500, 0.05: 500, 0: 150} (least share of a model's time: trials), or `off`"
    value = construct(node)
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


def _parse_models(ctx: ParseContext, node: yaml.Node, target_names: list[str]) -> tuple[ModelConfig, ...]:
    """`models: {bert_layer: {source: models/bert_layer.py, targets: [zen4-2c]}}`."""
    items = mapping(ctx, node, "models")
    out = []
    for name, (knode, vnode) in items.items():
        example = f"{name}: {{source: models/{name}.py}}"
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
            raise ctx.error(knode, f"model name {name!r} cannot name a file", "use letters, digits, '-', '_' or '.'")
        if not isinstance(vnode, yaml.MappingNode):
            raise ctx.error(vnode, f"model {name!r} must be a mapping with a source", f"write `{example}`")
        m = mapping(ctx, vnode, f"models.{name}")
        check_keys(ctx, m, ["source", "targets"], f"models.{name}")
        if "source" not in m:
            raise ctx.error(vnode, f"model {name!r} has no source", f"write `{example}`")
        snode = m["source"][1]
        source = construct(snode)
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
            names = construct(tnode)
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


def _parse_keep(ctx: ParseContext, node: yaml.Node) -> tuple[str, ...]:
    """`keep: [zen3-2c, matmul/zen5-2c, old_op]`: log folders kept on purpose."""
    example = "keep: [zen3-2c, matmul/zen5-2c]"
    if not isinstance(node, yaml.SequenceNode):
        raise ctx.error(node, "keep must be a list of log folders kept on purpose", f"write for example `{example}`")
    out = []
    for item in node.value:
        v = construct(item)
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
