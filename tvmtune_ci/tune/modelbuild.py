"""A model built with the committed logs: the product's `apply_history_best`.

Every call a template covers (`tvmtune-ci models`, core/contract.py) is swapped, at the
Relax level before legalization, for a `call_tir` to its template's best kernel from the
committed log. The kernel's inputs are the call's tensor arguments in order (a
`permute_dims` argument the contract names is taken before the transpose), reshaped to
the kernel's buffers (leading dimensions folded), and its output is reshaped back.

Why before legalization, not through MetaSchedule's database: a database record matches
only a PrimFunc written exactly as legalization writes it (rank, int64 indices, topi's
block name), and a near miss fails the whole build (shared/research/relax-model-path.md
§5). The kernel is marked opaque (op_pattern 8) so FuseOps leaves it whole, and
`tirx.is_scheduled` so neither MetaSchedule nor dlight touches it.

Everything else goes through TVM's own pipeline. TVM 0.27 has no default CPU schedule:
an unscheduled call runs as a naive single-threaded loop nest, which would swamp any
figure, so the calls no template covers get MetaSchedule (`tune_relax`, a small budget,
its database kept in `work_dir` so a rebuild reuses it) unless the caller asks for the
naive loops (`untemplated="none"`). `ModelBuild.untemplated` says which.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.contract import (
    COVERED,
    PERMUTE,
    SHAPE_OPS,
    UNCOVERED_SHAPE,
    Contract,
    Coverage,
    _covering_entry,
    coverage_of,
)
from ..core.errors import UsageError
from .modelcalls import ModelCall

UNTEMPLATED = ("metaschedule", "none")
# Calls that are not kernels of their own once the build is done: views, and the
# transposes a swapped kernel takes through (DeadCodeElimination drops those).
VIEWS = SHAPE_OPS | {PERMUTE}


@dataclass(frozen=True)
class Swap:
    """One call replaced by a template's kernel."""

    function: str  # the Relax function ("forward")
    binding: str  # the var the call was bound to
    call: str  # the call, described (CallSig.describe)
    template: str
    workload: str
    kernel: str  # the kernel's function name in the module (what a VM profile sees)
    knobs: Mapping[str, Any]  # {}: the default configuration (an opted-in fallback)
    latency_s: float | None  # the log's figure for the kernel alone
    fallback: bool
    # A shape no workload declares, run at a sibling workload's best mapped onto it
    # (uncovered_shapes="sibling"): that sibling's name. None: the workload's own best.
    mapped_from: str | None = None


@dataclass(frozen=True)
class ModelBuild:
    """What `build_model` returns: the VM executable and what went into it."""

    executable: Any  # relax.VMExecutable: relax.VirtualMachine(executable, dev)["forward"](...)
    module: Any  # the model's Relax module before the build (its functions' parameters)
    swaps: tuple[Swap, ...]
    untemplated: str  # how the calls no template covers were scheduled, in words
    uncovered: tuple[str, ...]  # those calls, described (shape-only views are not listed)
    search: Any = None  # metaschedule_model's: what MetaSchedule spent (modelms.SearchSpent)


@dataclass(frozen=True)
class Kernel:
    """A scheduled PrimFunc for one (template, workload), ready to be called."""

    func: Any  # tirx.PrimFunc
    name: str
    knobs: Mapping[str, Any]
    latency_s: float | None
    fallback: bool
    mapped_from: str | None = None


def kernel_func(prim: Any) -> Any:
    """The schedule's PrimFunc as a callee inside a model: no global symbol (two kernels
    would both be "main"), opaque to FuseOps, and already scheduled."""
    return prim.without_attr("global_symbol").with_attr("op_pattern", 8).with_attr("tirx.is_scheduled", True)


def covered(
    calls: Sequence[ModelCall], contracts: Sequence[Contract], *, shapes: bool = False
) -> list[tuple[ModelCall, Coverage]]:
    """The calls a template covers, with their coverage, in program order; with
    `shapes`, also those whose op and form a template implements at a shape no workload
    declares (uncovered_shape), given the workload name `shape_name(params)`."""
    covs = coverage_of([(c.sig, c.producers) for c in calls], contracts)
    out = []
    for c, cov in zip(calls, covs, strict=True):
        if cov.status == COVERED:
            out.append((c, cov))
        elif shapes and cov.status == UNCOVERED_SHAPE and cov.template is not None:
            out.append((c, replace(cov, workload=shape_name(cov.params))))
    return out


def shape_name(params: Mapping[str, Any]) -> str:
    """A workload name for undeclared params: `M128_N768_K768` (dtype left out)."""
    return "_".join(f"{k}{v}" for k, v in sorted(params.items()) if isinstance(v, int))


def nearest_sibling(workloads: Mapping[str, Mapping[str, Any]], params: Mapping[str, Any]) -> str | None:
    """The declared workload nearest to `params`: the same non-numeric values (dtype),
    the least summed |log ratio| over the integer ones (128 vs 256 as far as 256 vs
    512); ties by name. None when none has the same dtype."""
    best: tuple[float, str] | None = None
    for name, wl in sorted(workloads.items()):
        if any(wl.get(k) != v for k, v in params.items() if not isinstance(v, int)):
            continue
        d = sum(
            abs(math.log(max(int(wl[k]), 1) / max(v, 1)))
            for k, v in params.items()
            if isinstance(v, int) and isinstance(wl.get(k), int)
        )
        if best is None or d < best[0]:
            best = (d, name)
    return best[1] if best else None


def swap_covered(
    mod: Any,
    todo: Sequence[tuple[ModelCall, Coverage]],
    contracts: Sequence[Contract],
    kernels: Mapping[tuple[str, str], Kernel],
) -> tuple[Any, list[Swap]]:
    """`mod` with every call of `todo` (`covered`) replaced by a call_tir to its
    (template, workload)'s kernel; the swaps made, in program order. The kernels are
    resolved before: an error raised inside the mutator reaches Python as TVM's."""
    from tvm import relax
    from tvm.script import relax as R

    by_name = {c.template: c for c in contracts}
    swaps: list[Swap] = []
    added: dict[tuple[str, str], Any] = {}

    @relax.expr_functor.mutator
    class _Swapper(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            found = next(((c, cov) for c, cov in todo if c.call.same_as(call)), None)
            new = super().visit_call_(call)
            if found is None:
                return new
            c, cov = found
            assert cov.template is not None and cov.workload is not None
            kernel = kernels[(cov.template, cov.workload)]
            entry = _covering_entry(by_name[cov.template], c.sig)
            assert entry is not None  # coverage_of found one
            key = (cov.template, cov.workload)
            gv = added.get(key)
            if gv is None:
                gv = added[key] = self.builder_.add_func(kernel.func, kernel.name)
            buffers = list(kernel.func.params)  # TVM 0.27: each a buffer with shape and dtype
            tensors = [a for a in new.args if isinstance(a.ty, relax.TensorType)]
            if len(tensors) + 1 != len(buffers):
                raise UsageError(
                    f"{by_name[cov.template].file}: its kernel takes {len(buffers) - 1} input(s) and "
                    f"the call {c.sig.describe()} has {len(tensors)}: a template's PrimFunc takes "
                    "the call's tensor arguments in order, then its output (docs/models.md)"
                )
            inputs = []
            for arg, pattern, buf in zip(tensors, entry.args, buffers[:-1], strict=True):
                if pattern.permute:
                    arg = self.lookup_binding(arg).args[0]  # the tensor before the transpose
                inputs.append(self._as(arg, buf, R))
            out_buf = buffers[-1]
            out_shape = tuple(int(d) for d in out_buf.shape)
            y = self.builder_.emit(relax.call_tir(gv, inputs, relax.TensorType(out_shape, str(out_buf.dtype))))
            want = tuple(int(d) for d in c.sig.shape)
            if math.prod(want) != math.prod(out_shape):
                raise UsageError(
                    f"{cov.template}: its kernel's output {out_shape} does not hold the "
                    f"call's {want} ({c.sig.describe()})"
                )
            swaps.append(
                Swap(
                    c.function,
                    c.binding,
                    c.sig.describe(),
                    cov.template,
                    cov.workload,
                    gv.name_hint,
                    dict(kernel.knobs),
                    kernel.latency_s,
                    kernel.fallback,
                    kernel.mapped_from,
                )
            )
            return y if want == out_shape else R.reshape(y, want)

        def _as(self, arg: Any, buf: Any, R: Any) -> Any:
            have = tuple(int(d) for d in arg.ty.shape.values)
            want = tuple(int(d) for d in buf.shape)
            if have == want:
                return arg
            if math.prod(have) != math.prod(want):
                raise UsageError(f"an argument of shape {have} cannot be the kernel's {want}")
            return self.builder_.emit(R.reshape(arg, want))  # a view: no copy

        def run(self) -> Any:
            for gv, func in mod.functions.items():
                if isinstance(func, relax.Function):
                    self.builder_.update_func(gv, self.visit_expr(func))
            return self.builder_.finalize()

    out = _Swapper(mod).run()
    out = relax.transform.DeadCodeElimination()(out)  # the transposes the kernels absorbed
    return out, swaps


def fuse(mod: Any, target: Any) -> Any:
    """Legalize and fuse as TVM's CPU pipeline does (relax.get_default_pipeline's first
    half): the swapped kernels stay whole (opaque), the rest fuses, and a reshape left
    on its own becomes a view."""
    from tvm import relax

    # RewriteDataflowReshape: a reshape left alone is a view, not a copy kernel to tune.
    seq = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.RewriteDataflowReshape(),
        relax.transform.DeadCodeElimination(),
    ]
    with target:
        for p in seq:
            mod = p(mod)
    return mod


def schedule_untemplated(mod: Any, target: Any, how: str, *, trials: int, work_dir: Path | None) -> tuple[Any, str]:
    """Schedule the PrimFuncs no template made (`how`: "metaschedule" or "none");
    returns the module and how, in words."""
    from tvm import relax, tirx

    from . import tvmsetup

    if how not in UNTEMPLATED:
        raise UsageError(f"untemplated={how!r}: use one of {', '.join(UNTEMPLATED)}")
    pending = [
        gv.name_hint
        for gv, f in mod.functions.items()
        if isinstance(f, tirx.PrimFunc) and not (f.attrs and f.attrs.get("tirx.is_scheduled", False))
    ]
    if how == "none" or not pending:
        return mod, (
            "TVM's default loops (naive, single-threaded), as asked"
            if pending
            else "none left: every PrimFunc is a template's"
        )
    ms = tvmsetup.ms()
    if work_dir is None:
        raise UsageError("untemplated='metaschedule' needs a work_dir for its database")
    work_dir.mkdir(parents=True, exist_ok=True)
    # Every function gets at least one batch: a global budget smaller than that leaves
    # some with no record at all (64 trials over BERT's 13 left 7 naive).
    per_task = max(trials // len(pending), 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        db = ms.relax_integration.tune_relax(
            mod=mod,
            params={},
            target=target,
            work_dir=str(work_dir),
            max_trials_global=per_task * len(pending),
            max_trials_per_task=per_task,
            num_trials_per_iter=min(per_task, 16),
        )
        with target, db:
            mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
    naive = [
        gv.name_hint
        for gv, f in mod.functions.items()
        if isinstance(f, tirx.PrimFunc) and not (f.attrs and f.attrs.get("tirx.is_scheduled", False))
    ]
    how = f"MetaSchedule tune_relax, {per_task} trials for each of {len(pending)} function(s) (database: {work_dir})"
    if naive:
        how += f"; {len(naive)} got no valid record and run TVM's default loops: {', '.join(sorted(naive))}"
    return mod, how


def compile_model(mod: Any, target: Any) -> Any:
    import tvm

    return tvm.compile(mod, target=target)
