"""A template's workload, resolved once: its declared parameters, its IRModule (the
template's `compute()`) and FLOP count (`Workload`). Its TVM target is
`tvmsetup.make_target`'s, one object per target dict in a process.

A re-tune resolves each (entry, workload) once and hands the object down: the
correctness checks, the baseline, the search, the replay, the finals, the log and the
first run of the history take these facts from it. `resolve` is the one function of
tune/ that takes a workload's name; every other takes the `Workload`. (Those that
resolved a name before still pass what they are given through `resolve`, so callers
outside the type-checked package that hold a name, benchmarks/, keep working; each
such call computes the workload again.)

Nothing here imports TVM at module level; `tvmsetup` does, when a module is computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..core.epilogue import chain, declared_epilogues
from ..core.errors import TemplateError
from ..core.template import call_with_workload, template_name
from . import tvmsetup
from .epilogue import compose_workload


@dataclass(frozen=True, eq=False)
class Workload:
    """One workload of a template on one target, resolved once: its declared parameters,
    and on first use its IRModule (the template's `compute()`) and FLOP count, kept. A
    re-tune builds one per (entry, workload) and hands it down, so the checks, the
    baseline, the search, the finals and the log take these facts from one place
    instead of calling `compute()` at every step. Every
    function here that takes a workload name takes one of these too (`resolve`)."""

    template: ModuleType
    name: str
    params: Mapping[str, Any]
    target: Mapping[str, Any] | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def mod(self) -> Any:
        """The workload as MetaSchedule keys it (see `workload_module`)."""
        if "mod" not in self._cache:
            self._cache["mod"] = _compute_module(self.template, self.params)
        return self._cache["mod"]

    @property
    def flops(self) -> float:
        """The FLOP count of the workload as declared (`flop_count`)."""
        if "flops" not in self._cache:
            self._cache["flops"] = flop_count(self.mod)
        return self._cache["flops"]


def resolve(template: ModuleType, workload: str | Workload, target: Mapping[str, Any] | None = None) -> Workload:
    """`workload` itself when it is resolved already (of this template, for this target),
    else the named workload of `template` resolved for `target`."""
    if isinstance(workload, Workload):
        if workload.template is not template:
            raise TemplateError(
                f"workload {workload.name!r} was resolved for "
                f"{template_name(workload.template)}, not {template_name(template)}"
            )
        if target is not None and workload.target is not None and dict(workload.target) != dict(target):
            raise TemplateError(
                f"workload {workload.name!r} was resolved for target {dict(workload.target)}, not {dict(target)}"
            )
        return workload
    return Workload(template, workload, workload_params(template, workload), target)


def workload_params(template: ModuleType, workload_name: str) -> dict[str, Any]:
    """The parameters of `workload_name` as the template declares them (a lookup in
    WORKLOADS: `resolve` makes it once; a `Workload` has them as `params`)."""
    workloads = getattr(template, "WORKLOADS", None) or {}
    if workload_name not in workloads:
        raise TemplateError(
            f"{template_name(template)}: no workload {workload_name!r}; "
            f"WORKLOADS has {', '.join(workloads) or '(none)'}"
        )
    return dict(workloads[workload_name])


def workload_module(template: ModuleType, wl: Workload) -> Any:
    """The workload as MetaSchedule keys it: an IRModule with one `main` PrimFunc.

    Normalised exactly as `TuneContext` normalises a PrimFunc (global symbol `main`,
    `tirx.noalias`), so `database.query_schedule(workload_module(...), ...)` finds
    the records a tune committed.
    """
    return resolve(template, wl).mod


def flop_count(mod: Any) -> float:
    """Floating-point operations of one run of `mod` (TVM's own count)."""
    tvmsetup.load()
    from tvm.s_tir.analysis import estimate_tir_flops

    return float(estimate_tir_flops(mod))


def _compute_module(template: ModuleType, params: Mapping[str, Any]) -> Any:
    tvm = tvmsetup.load()
    func = call_with_workload(template.compute, dict(params))
    if chain(params):
        # A fused workload (core/epilogue.py): the template's kernel, its epilogue after it.
        if isinstance(func, tvm.ir.IRModule) and len(func.functions) == 1:
            func = next(iter(func.functions.values()))
        if not isinstance(func, tvm.tirx.PrimFunc):
            raise TemplateError(
                f"{template_name(template)}: a workload with an epilogue needs compute() to "
                f"return one PrimFunc, not {type(func).__name__}"
            )
        func = compose_workload(func, params, declared_epilogues(getattr(template, "IMPLEMENTS", None)))
    if isinstance(func, tvm.ir.IRModule):
        return tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")(func)
    if not isinstance(func, tvm.tirx.PrimFunc):
        raise TemplateError(
            f"{template.__name__}.compute() returned {type(func).__name__}; return a PrimFunc "
            "(te.create_prim_func([...]) or a TVMScript @T.prim_func)"
        )
    return tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")(func)
