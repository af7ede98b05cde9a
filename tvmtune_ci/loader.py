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
from .tune.builder import build_config
from .tune.hostcheck import check_host
from .tune.workload import resolve


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


def target_dict(target: Any) -> dict[str, Any]:
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
    want = target_dict(target)
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


def check_runs_here(best: Best, allow_foreign_host: bool) -> None:
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
    check_runs_here(best, allow_foreign_host)
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
