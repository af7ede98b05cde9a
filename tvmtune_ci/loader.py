"""Build the committed best configuration of an operator: never fall back silently.

AutoTVM's `apply_history_best` quietly used the default schedule when the target
string differed by one flag from the log's. Here a mismatch, a stale entry or a
missing log is an error that lists the reasons; the default configuration is
used only with `allow_fallback=True`, and then with a loud warning.

A target this CPU cannot run (AVX-512 code on an AVX2 host) is refused before
anything is built: the executable would die with SIGILL when called. Pass
`allow_foreign_host=True` to cross-compile it for another machine; never run
that result here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .check.staleness import find_stale
from .core.config import load_config
from .core.errors import CorruptFileError, HostError, StaleLogError, UsageError
from .core.records import read_log
from .core.targets import canonical_target, parse_legacy_string
from .core.template import import_template, read_template
from .tune import tvmsetup
from .tune.builder import build_config, schedule_config
from .tune.hostcheck import check_host
from .tune.workload import Workload, resolve


class FallbackWarning(UserWarning):
    """The default configuration was built instead of a tuned one."""


@dataclass(frozen=True)
class Best:
    """The committed best configuration of one workload for one target, after the
    checks (fresh entry, the same target as a dict): what `build_best` builds."""

    operator: str
    workload: str
    target: dict[str, Any]
    knobs: dict[str, Any]  # {} when falling back to the default configuration
    latency_s: float | None
    log: Path | None
    fallback: bool


def _target_dict(target: Any) -> dict[str, Any]:
    if isinstance(target, Mapping):
        return canonical_target(dict(target))
    if isinstance(target, str):
        return canonical_target(parse_legacy_string(target))
    export = getattr(target, "export", None)  # a tvm.target.Target
    if export is not None:
        return canonical_target(dict(export()))
    raise UsageError(f"target {target!r}: pass a dict, a tvm.target.Target or a target string")


def _diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    keys = sorted(set(a) | set(b))
    return ", ".join(f"{k}: {a.get(k, '(absent)')!r} != {b.get(k, '(absent)')!r}" for k in keys if a.get(k) != b.get(k))


def best_config(
    operator: str,
    *,
    target: Any,
    workload: str | None = None,
    root: Path | str | None = None,
    allow_fallback: bool = False,
) -> Best:
    """The committed best of `operator`'s `workload` (the only one when None) for
    `target`, without building it: the lookup AutoTVM's `apply_history_best` did,
    but a stale or missing entry, or a target that differs by one flag, raises
    StaleLogError listing every reason instead of falling back in silence.
    `allow_fallback=True` returns the default configuration (knobs {}) with a
    FallbackWarning. `root`: the repository (default: found from the cwd)."""
    config = load_config(Path(root) if root is not None else None)
    want = _target_dict(target)
    matches = [t for t in config.targets if t.target == want]
    reasons: list[str] = []
    entry = None
    if not matches:
        closest = min(config.targets, key=lambda t: len(_diff(t.target, want)), default=None)
        hint = (
            f" closest configured target {closest.name!r} differs in: {_diff(closest.target, want)}" if closest else ""
        )
        reasons.append(f"target {want} is not a configured target of {config.path}.{hint}")
    else:
        report = find_stale(config, operators=[operator], targets=[matches[0].name])
        if not report.entries:
            reasons.append(f"no operator {operator!r} in {config.operators_path}")
        else:
            entry = report.entries[0]
            reasons += [f"{r.code}: {r.detail}" for r in entry.reasons]
    m = entry.manifest if entry is not None else None
    if entry is not None and m is not None and not reasons:
        wl = workload or (next(iter(m.results)) if len(m.results) == 1 else None)
        if wl is None:
            reasons.append(f"{operator} has several workloads ({', '.join(m.results)}); pass workload=")
        elif wl not in m.results:
            reasons.append(f"workload {wl!r} is not in the log (tuned: {', '.join(m.results)})")
        else:
            r = m.results[wl]
            return Best(operator, wl, want, dict(r.best.knobs), r.best.latency_s, entry.logset.folder / m.log, False)
    message = f"no usable tuned configuration for {operator} on {want}:\n  - " + "\n  - ".join(reasons)
    if not allow_fallback:
        raise StaleLogError(
            message
            + "\nre-tune with `tvmtune-ci retune`, or pass allow_fallback=True to build the (slow) default configuration"
        )
    warnings.warn(
        message + "\nBUILDING THE DEFAULT (UNTUNED) CONFIGURATION because allow_fallback=True",
        FallbackWarning,
        stacklevel=3,
    )
    wl = workload
    if wl is None:
        decl = read_template(config.operators_path / f"{operator}.py")
        wl = next(iter(decl.workloads))
    return Best(operator, wl, want, {}, None, None, True)


_FOREIGN_ADVICE = (
    "a kernel built for it would die with SIGILL when called here. Build and run it on a machine "
    "with that CPU, or pass allow_foreign_host=True to cross-compile it for one (export it and run "
    "it there, never on this machine)"
)


def _check_runs_here(best: Best, allow_foreign_host: bool) -> None:
    """HostError before anything is built for a target this machine cannot run."""
    if allow_foreign_host:
        return
    try:
        check_host(best.target, advice=_FOREIGN_ADVICE)
    except HostError as e:
        raise HostError(f"{best.operator}: {e}") from None


def build_best(
    operator: str,
    *,
    target: Any,
    workload: str | None = None,
    root: Path | str | None = None,
    allow_fallback: bool = False,
    allow_foreign_host: bool = False,
) -> Any:
    """Build the committed best of `operator` for `target`; returns TVM's executable.

    Raises HostError when this machine cannot run code for `target` (e.g. its
    mcpu needs AVX-512 and this CPU has none). `allow_foreign_host=True` builds
    anyway, for cross-compiling: the result must not be called on this machine.
    """
    best = best_config(operator, target=target, workload=workload, root=root, allow_fallback=allow_fallback)
    _check_runs_here(best, allow_foreign_host)
    config = load_config(Path(root) if root is not None else None)
    module = import_template(config.operators_path / f"{operator}.py", config.root)
    return build_config(module, resolve(module, best.workload, best.target), best.target, best.knobs)


def load_database(log_path: Path) -> Any:
    """A MetaSchedule `MemoryDatabase` holding every record of the log.

    `db.query_schedule(workload_module(template, name), target, name)` then returns the
    best schedule of that workload (look up with the target the log was tuned for).
    """
    ms = tvmsetup.ms()
    path = Path(log_path)
    log = read_log(path)
    db = ms.database.MemoryDatabase()
    for name in sorted(log["workloads"]):
        w = log["workloads"][name]
        try:
            workload = db.commit_workload(ms.database.Workload.from_json(w["workload"]).mod)
            for r in w["records"]:
                db.commit_tuning_record(ms.database.TuningRecord.from_json(r, workload))
        except Exception as e:  # TVM raises its own error types on a bad trace
            raise CorruptFileError(
                f"{path}: workload {name!r}: TVM cannot load a record ({str(e).splitlines()[0]}); "
                "inspect it, or delete it and re-tune (tvmtune-ci retune)"
            ) from None
    return db


def _model_kernel(
    config: Any,
    key: tuple[str, str],
    shape: Mapping[str, Any] | None,
    want: dict[str, Any],
    configs: str,
    allow_fallback: bool,
) -> Any:
    """The kernel of `key` (template, workload) for a model build: its committed best
    (or default), or for an undeclared `shape` its nearest sibling's, mapped onto it."""
    from .core.history import map_config
    from .tune import modelbuild

    template, workload = key
    module = import_template(config.operators_path / f"{template}.py", config.root)
    declared = dict(getattr(module, "WORKLOADS", {}) or {})
    source = workload
    if shape is not None:
        sibling = modelbuild.nearest_sibling(declared, shape)
        if sibling is None:
            raise UsageError(
                f"{template}: no declared workload has the dtype of {dict(shape)}; "
                "declare one, or leave uncovered_shapes='untemplated'"
            )
        source = sibling
    if configs == "default":
        best = Best(template, source, want, {}, None, None, False)
    else:
        with warnings.catch_warnings():  # warned by the caller, once for each call it serves
            warnings.simplefilter("ignore", FallbackWarning)
            best = best_config(template, target=want, workload=source, root=config.root, allow_fallback=allow_fallback)
    knobs: Mapping[str, Any] | None = best.knobs or None
    wl: Any = workload
    if shape is not None:
        wl = Workload(module, workload, dict(shape), want)
        if knobs is not None:
            knobs = map_config(knobs, read_template(config.operators_path / f"{template}.py").knobs, shape, want).knobs
    sch = schedule_config(module, wl, knobs, want)
    return modelbuild.Kernel(
        modelbuild.kernel_func(sch.mod["main"]),
        f"{template}_{workload}",
        dict(knobs or {}),
        best.latency_s if shape is None else None,
        best.fallback,
        source if shape is not None else None,
    )


def build_model(
    model: str,
    *,
    target: Any,
    root: Path | str | None = None,
    allow_fallback: bool = False,
    allow_foreign_host: bool = False,
    untemplated: str = "metaschedule",
    trials: int = 64,
    work_dir: Path | str | None = None,
    configs: str = "best",
    uncovered_shapes: str = "untemplated",
) -> Any:
    """Build `model` (a name under `models:` in tvmtune.yaml) for `target` with the
    committed logs: every call a template covers runs that template's best kernel; the
    rest goes through TVM's pipeline, scheduled by MetaSchedule with `trials` trials
    (its database in `work_dir`, reused by the next build) or, with
    `untemplated="none"`, left as TVM's naive loops. Returns a `ModelBuild`: the VM
    executable, every swap made, and how the rest was scheduled.

    A stale or missing log raises StaleLogError, as `build_best` does;
    `allow_fallback=True` builds that call's default configuration instead, with one
    FallbackWarning per call. A target this machine cannot run raises HostError unless
    `allow_foreign_host=True` (cross-compiling: never run the result here).
    `configs="default"` builds every template kernel at its default configuration
    instead (no log read): the baseline that says what tuning did to the model.

    A call a template implements at a shape no workload declares goes the untemplated
    way by default. `uncovered_shapes="sibling"` runs it on that template's kernel at
    the best of the nearest declared workload (`nearest_sibling`), mapped onto the
    shape's legal knob values (`core.history.map_config`, as a replay after an edit):
    untuned for that shape, said once for each call (a FallbackWarning), and a reason
    to declare the workload and tune it."""
    if uncovered_shapes not in ("untemplated", "sibling"):
        raise UsageError(f"uncovered_shapes={uncovered_shapes!r}: use 'untemplated' or 'sibling'")
    if configs not in ("best", "default"):
        raise UsageError(f"configs={configs!r}: use 'best' (the committed logs) or 'default'")
    from .tune import modelbuild
    from .tune.modelcalls import load_model, model_calls, read_contracts

    config = load_config(Path(root) if root is not None else None)
    spec = next((m for m in config.models if m.name == model), None)
    if spec is None:
        raise UsageError(
            f"no model {model!r} in {config.path}; configured models: "
            f"{', '.join(m.name for m in config.models) or '(none)'} (models: in tvmtune.yaml)"
        )
    want = _target_dict(target)
    _check_runs_here(Best(model, "", want, {}, None, None, False), allow_foreign_host)
    tvm_target = tvmsetup.make_target(want)
    mod = load_model(config.root, spec)
    _blobs, contracts = read_contracts(config.root, config.operators_path)
    calls = model_calls(mod)
    todo = modelbuild.covered(calls, contracts, shapes=uncovered_shapes == "sibling")
    kernels: dict[tuple[str, str], modelbuild.Kernel] = {}
    for _call, cov in todo:
        key = (str(cov.template), str(cov.workload))
        if key not in kernels:
            kernels[key] = _model_kernel(
                config, key, cov.params if cov.status != "covered" else None, want, configs, allow_fallback
            )
    swapped, swaps = modelbuild.swap_covered(mod, todo, contracts, kernels)
    for s in swaps:
        if s.mapped_from is not None:
            warnings.warn(
                f"{model}: {s.binding} = {s.call} runs {s.template} at a shape no workload "
                f"declares, with {s.mapped_from}'s {'default' if s.fallback else 'best'} "
                f"mapped onto it (untuned for it); add it to WORKLOADS and re-tune",
                FallbackWarning,
                stacklevel=2,
            )
        elif s.fallback:
            warnings.warn(
                f"{model}: {s.binding} = {s.call} runs the DEFAULT (untuned) configuration "
                f"of {s.template}/{s.workload}: its log is stale or missing "
                "(allow_fallback=True); re-tune with `tvmtune-ci retune`",
                FallbackWarning,
                stacklevel=2,
            )
    fused = modelbuild.fuse(swapped, tvm_target)
    scheduled, how = modelbuild.schedule_untemplated(
        fused, tvm_target, untemplated, trials=trials, work_dir=Path(work_dir) if work_dir is not None else None
    )
    swapped_calls = {(s.function, s.binding) for s in swaps}
    uncovered = tuple(
        c.sig.describe()
        for c in calls
        if (c.function, c.binding) not in swapped_calls and c.sig.op not in modelbuild.VIEWS
    )
    return modelbuild.ModelBuild(modelbuild.compile_model(scheduled, tvm_target), mod, tuple(swaps), how, uncovered)


def metaschedule_model(
    model: str,
    *,
    target: Any,
    seconds: float,
    work_dir: Path | str,
    root: Path | str | None = None,
    seed: int = 42,
    clock: Any = None,
    watch: Any = None,
) -> Any:
    """Build `model` with MetaSchedule alone, given `seconds` of this runner for the
    whole model (tune/modelms.py): no template, no log. The anchor a model's README sets
    beside `build_model` (`profile --metaschedule-seconds`). Returns a `ModelBuild`
    whose `untemplated` says what the search spent; `search` is its SearchSpent.
    `clock` (seconds, time.monotonic by default) decides the deadline, and `watch` makes
    the load watch (modelms.LoadWatch by default): tests' hooks. Each `seed` is an
    independent search, kept under `work_dir` apart from the others'."""
    from .tune import modelbuild, modelms
    from .tune.modelcalls import load_model

    config = load_config(Path(root) if root is not None else None)
    spec = next((m for m in config.models if m.name == model), None)
    if spec is None:
        raise UsageError(
            f"no model {model!r} in {config.path}; configured models: "
            f"{', '.join(m.name for m in config.models) or '(none)'} (models: in tvmtune.yaml)"
        )
    if seconds <= 0:
        raise UsageError(f"MetaSchedule needs a positive number of seconds, not {seconds}")
    want = _target_dict(target)
    _check_runs_here(Best(model, "", want, {}, None, None, False), False)
    tvm_target = tvmsetup.make_target(want)
    mod = load_model(config.root, spec)
    fused = modelbuild.fuse(mod, tvm_target)
    hooks = {k: v for k, v in (("clock", clock), ("watch", watch)) if v is not None}
    scheduled, spent = modelms.tune_model(fused, tvm_target, seconds, Path(work_dir), seed=seed, **hooks)
    return modelbuild.ModelBuild(
        modelbuild.compile_model(scheduled, tvm_target), mod, (), spent.words(), spent.untuned, search=spent
    )
