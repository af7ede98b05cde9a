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
figure, so the calls no template covers get MetaSchedule (`tune_relax`, at least one
batch each, its database kept in `work_dir` so a rebuild reuses it), and what it leaves
without a valid record gets the built-in schedule (model/fallback.py: parallel and
vectorized, never the naive loops); `untemplated="fallback"` gives every one the
built-in schedule without a search. Only `untemplated="none"` leaves the naive loops,
for quick numerical checks. `ModelBuild.untemplated` says which, and
`ModelBuild.schedules` which schedule each function got.

Over 400 lines: the build's pieces (swaps, fusion, the untemplated functions) and the two builds that
assemble them read one `ModelBuild`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.chains import fused_chains
from ..core.config import load_config
from ..core.contract import COVERED, PERMUTE, SHAPE_OPS, UNCOVERED_SHAPE, Contract, Coverage, covering_entry
from ..core.errors import UsageError
from ..core.history import map_config
from ..core.modelrecords import ModelRecords
from ..core.targetinfo import target_facts
from ..core.template import import_template, read_template
from ..loader import Best, FallbackWarning, best_config, check_runs_here, target_dict
from ..tune import tvmsetup
from ..tune.builder import schedule_config
from ..tune.workload import Workload
from .calls import ModelCall, escaping, load_model, model_calls, read_contracts
from .fallback import fast_math, schedule_rest
from .metaschedule import (
    BATCH,
    BY_METASCHEDULE,
    apply,
    apply_committed,
    committed_records,
    search,
    tune_model,
    unscheduled,
)
from .peak import kernel_flops

UNTEMPLATED = ("metaschedule", "fallback", "none")
NAIVE = "TVM's naive loops"
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
    epilogue: tuple[str, ...] = ()  # the ops after the call that its kernel runs
    alone: tuple[str, ...] = ()  # the epilogue ops after it that still run on their own
    prepacked: bool = False  # its weight's pack split out of the kernel (run once where lifted)


@dataclass(frozen=True)
class ModelBuild:
    """What `build_model` returns: the VM executable and what went into it."""

    executable: Any  # relax.VMExecutable: relax.VirtualMachine(executable, dev)["forward"](...)
    module: Any  # the model's Relax module before the build (its functions' parameters)
    swaps: tuple[Swap, ...]
    untemplated: str  # how the calls no template covers were scheduled, in words
    uncovered: tuple[str, ...]  # those calls, described (shape-only views are not listed)
    search: Any = None  # metaschedule_model's: what MetaSchedule spent (metaschedule.SearchSpent)
    # The schedule each function no template made got: {PrimFunc name: BY_METASCHEDULE,
    # fallback.BY_REDUCTION, fallback.BY_SPATIAL or NAIVE} (empty: metaschedule_model's).
    schedules: Mapping[str, str] = field(default_factory=dict)
    # The weights' transforms lifted out of the inference (`lift_weights`): (the function
    # that computes them once, at load, from the weights; the entry's inputs before its
    # weights). None: nothing lifted (the entry takes its weights as they are).
    lifted: tuple[str, int] | None = None
    # Each PrimFunc's floating-point operations a call (peak.kernel_flops; a function
    # that only moves data: 0): the README's GFLOPS per kernel.
    flops: Mapping[str, float] = field(default_factory=dict)


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


@dataclass(frozen=True)
class Todo:
    """One call to swap for a template's kernel, and the epilogue ops after it that the
    kernel runs (a fused workload, core/epilogue.py), in order."""

    call: ModelCall
    coverage: Coverage
    chain: tuple[ModelCall, ...] = ()
    slots: tuple[int, ...] = ()  # the argument at which each chain op takes the one before


def covered(calls: Sequence[ModelCall], contracts: Sequence[Contract], *, shapes: bool = False) -> list[Todo]:
    """The calls a template covers, with their coverage and fused epilogue ops, in
    program order; with `shapes`, also those whose op and form a template implements
    at a shape no workload declares (uncovered_shape), given the workload name
    `shape_name(params)` (their epilogues run alone: no workload declares them)."""
    covs, chains = fused_chains([(c.sig, c.producers) for c in calls], contracts, escaping(calls))
    out = []
    for i, (c, cov) in enumerate(zip(calls, covs, strict=True)):
        if cov.status == COVERED:
            sites = (i, *chains.get(i, ()))
            slots = tuple(list(calls[b].producers).index(a) for a, b in zip(sites, sites[1:], strict=False))
            out.append(Todo(c, cov, tuple(calls[j] for j in sites[1:]), slots))
        elif shapes and cov.status == UNCOVERED_SHAPE and cov.template is not None:
            out.append(Todo(c, replace(cov, workload=shape_name(cov.params))))
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
    mod: Any, todo: Sequence[Todo], contracts: Sequence[Contract], kernels: Mapping[tuple[str, str], Kernel]
) -> tuple[Any, list[Swap]]:
    """`mod` with every call of `todo` (`covered`) replaced by a call_tir to its
    (template, workload)'s kernel; the swaps made, in program order. A fused
    workload's kernel replaces the last op of its chain and takes the chain's operands
    (bias, residual, scale) after the call's own inputs; the call and the ops before
    it are left for DeadCodeElimination. The kernels are resolved before: an error
    raised inside the mutator reaches Python as TVM's."""
    from tvm import relax
    from tvm.script import relax as R

    by_name = {c.template: c for c in contracts}
    swaps: list[Swap] = []
    added: dict[tuple[str, str], Any] = {}
    # The call a kernel replaces: the last op of its chain, or the call itself.
    at_end = {id_of(t.chain[-1] if t.chain else t.call): t for t in todo}
    seen: dict[int, Any] = {}  # a todo call or chain op -> its call as rewritten

    @relax.expr_functor.mutator
    class _Swapper(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            new = super().visit_call_(call)
            key = _key_of(call)
            seen[key] = new
            t = at_end.get(key)
            if t is None:
                return new
            return self._swap(t)

        def _swap(self, t: Todo) -> Any:
            c, cov = t.call, t.coverage
            assert cov.template is not None and cov.workload is not None
            kernel = kernels[(cov.template, cov.workload)]
            entry = covering_entry(by_name[cov.template], c.sig)
            assert entry is not None  # coverage_of found one
            key = (cov.template, cov.workload)
            gv = added.get(key)
            if gv is None:
                gv = added[key] = self.builder_.add_func(kernel.func, kernel.name)
            buffers = list(kernel.func.params)  # TVM 0.27: each a buffer with shape and dtype
            tensors = [a for a in seen[_key_of(c.call)].args if isinstance(a.ty, relax.TensorType)]
            operands = _operands(t, seen)
            if len(tensors) + len(operands) + 1 != len(buffers):
                raise UsageError(
                    f"{by_name[cov.template].file}: its kernel takes {len(buffers) - 1} input(s) and "
                    f"the call {c.sig.describe()} has {len(tensors)} (and {len(operands)} epilogue "
                    "operand(s)): a template's PrimFunc takes the call's tensor arguments in order, "
                    "then its output (docs/models.md)"
                )
            inputs = []
            for arg, pattern, buf in zip(tensors, entry.args, buffers, strict=False):
                if pattern.permute:
                    arg = self.lookup_binding(arg).args[0]  # the tensor before the transpose
                elif pattern.transpose:  # folded at build where it is a weight constant
                    arg = self.builder_.emit(R.permute_dims(arg))
                inputs.append(self._as(arg, buf, R))
            for arg, buf in zip(operands, buffers[len(tensors) : -1], strict=True):
                inputs.append(self._as(arg, buf, R))
            out_buf = buffers[-1]
            out_shape = tuple(int(d) for d in out_buf.shape)
            y = self.builder_.emit(relax.call_tir(gv, inputs, relax.TensorType(out_shape, str(out_buf.dtype))))
            last = t.chain[-1] if t.chain else c
            want = tuple(int(d) for d in last.sig.shape)
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
                    tuple(cov.epilogue),
                    tuple(cov.alone),
                    cov.prepacked,
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
    # the transposes the kernels absorbed, and the calls and epilogue ops they replaced
    out = relax.transform.DeadCodeElimination()(out)
    return out, swaps


def _key_of(call: Any) -> int:
    """A relax.Call's identity: TVM objects hash by their node, as `same_as` compares."""
    return hash(call)


def id_of(c: ModelCall) -> int:
    return _key_of(c.call)


def _operands(t: Todo, seen: Mapping[int, Any]) -> list[Any]:
    """The tensors the chain's ops add or multiply by, in order (as rewritten)."""
    out = []
    for op, slot in zip(t.chain, t.slots, strict=True):
        if op.sig.op in ("relax.add", "relax.multiply"):
            out.append(seen[id_of(op)].args[1 - slot])
    return out


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


def schedule_untemplated(
    mod: Any,
    target: Any,
    how: str,
    *,
    trials: int,
    work_dir: Path | None,
    lanes: int,
    records: tuple[Path, ModelRecords] | None = None,
) -> tuple[Any, str, dict[str, str]]:
    """Schedule the PrimFuncs no template made (`how`: one of UNTEMPLATED). Returns the
    module, how in words, and the schedule each of those functions got ({name: words}).

    "metaschedule" searches them (`trials` in all, at least one batch each), and gives
    a function the search left without a valid record the built-in schedule
    (model/fallback.py); "fallback" gives every one the built-in schedule, no search;
    "none" leaves TVM's naive loops (quick numerical checks only)."""
    if how not in UNTEMPLATED:
        raise UsageError(f"untemplated={how!r}: use one of {', '.join(UNTEMPLATED)}")
    pending = unscheduled(mod)
    if not pending:
        return mod, "none left: every PrimFunc is a template's", {}
    if how == "none":
        return mod, "TVM's default loops (naive, single-threaded), as asked", dict.fromkeys(pending, NAIVE)
    searched: dict[str, str] = {}
    words = ""
    if how == "metaschedule" and records is not None:
        # The records committed beside the model (core/modelrecords.py): applied, no search.
        mod, searched, words = apply_committed(mod, target, pending, records, work_dir)
    elif how == "metaschedule":
        if work_dir is None:
            raise UsageError("untemplated='metaschedule' needs a work_dir for its database")
        work_dir.mkdir(parents=True, exist_ok=True)
        # Every function gets at least one full batch: a global budget smaller than that
        # leaves some with no record at all (64 trials over BERT's 13 left 7 naive).
        per_task = max(trials // len(pending), BATCH)
        db = search(
            mod, target, work_dir, max_trials_global=per_task * len(pending), max_trials_per_task=per_task, batch=BATCH
        )
        mod = apply(mod, target, db)
        searched = {f: BY_METASCHEDULE for f in pending if f not in set(unscheduled(mod))}
        words = (
            f"MetaSchedule tune_relax, {per_task} trials for each of {len(pending)} function(s) (database: {work_dir})"
        )
    rest = unscheduled(mod)
    mod, fb = schedule_rest(mod, target, rest, lanes)
    got = {**searched, **dict(fb.by_rule), **dict.fromkeys(fb.left, NAIVE)}
    if how == "metaschedule" and rest:
        words += f"; {len(rest)} got no valid record and the built-in schedule: {', '.join(rest)}"
    elif how == "fallback":
        words = f"the built-in schedule (model/fallback.py), no search, for {len(pending)} function(s)"
    if fb.left:
        # Not expected: Spatial schedules any block of spatial and reduction loops. Said
        # in the README rather than raised, so the build still runs and numerics hold.
        words += f"; {len(fb.left)} no rule could schedule, on TVM's naive loops: {', '.join(fb.left)}"
    return mod, words, got


def split_prepack(mod: Any) -> Any:
    """The marked weight packing of the swapped kernels as calls of their own, before
    the kernels (TVM's SplitLayoutRewritePreproc: `<kernel>_weight_prepack`)."""
    from tvm import relax

    return relax.transform.SplitLayoutRewritePreproc()(mod)


def lift_weights(mod: Any) -> tuple[Any, tuple[str, int] | None]:
    """What the entry computes from its weights alone (the transposes the swaps put
    before a kernel that reads a weight transposed, and the model's own), lifted into
    `<entry>_transform_params`, run once at load: as ONNX Runtime packs its weights
    once. Only where the entry says which parameters are its inputs (`num_input`, as
    TVM's ONNX frontend writes); else the module is returned as it is."""
    from tvm import relax

    entries = [
        (gv.name_hint, int(f.attrs["num_input"]))
        for gv, f in mod.functions_items()
        if isinstance(f, relax.Function) and f.attrs is not None and "num_input" in f.attrs
    ]
    if len(entries) != 1:
        return mod, None
    name, inputs = entries[0]
    lifted = relax.transform.LiftTransformParams()(mod)
    transform = f"{name}_transform_params"
    if transform not in {gv.name_hint for gv in lifted.get_global_vars()}:
        return mod, None
    return lifted, (transform, inputs)


def compile_model(mod: Any, target: Any) -> Any:
    import tvm

    return tvm.compile(mod, target=target)


# --------------------------------------------------------------------------- the builds


def _model_spec(model: str, root: Path | str | None) -> tuple[Any, Any]:
    """The configuration and `model`'s entry under `models:` in tvmtune.yaml."""
    config = load_config(Path(root) if root is not None else None)
    spec = next((m for m in config.models if m.name == model), None)
    if spec is None:
        raise UsageError(
            f"no model {model!r} in {config.path}; configured models: "
            f"{', '.join(m.name for m in config.models) or '(none)'} (models: in tvmtune.yaml)"
        )
    return config, spec


def tuned_for(config: Any, contracts: Sequence[Contract], want: Mapping[str, Any]) -> list[Contract]:
    """The contracts of the templates tuned for `want`, where it is a configured target
    (a template whose `operators.<name>.targets` leaves it out has no log there: it
    covers no call of this build); every contract for a target the config does not
    name (a build for a machine of one's own)."""
    named = [t for t in config.targets if dict(t.target) == dict(want)]
    if not named:
        return list(contracts)
    return [c for c in contracts if any(dict(t.target) == dict(want) for t in config.targets_for(c.template, c.kinds))]


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

    template, workload = key
    module = import_template(config.operators_path / f"{template}.py", config.root)
    declared = dict(getattr(module, "WORKLOADS", {}) or {})
    source = workload
    if shape is not None:
        sibling = nearest_sibling(declared, shape)
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
    return Kernel(
        kernel_func(sch.mod["main"]),
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
    lift: bool = False,
    reuse_records: bool = True,
) -> Any:
    """Build `model` (a name under `models:` in tvmtune.yaml) for `target` with the
    committed logs: every call a template covers runs that template's best kernel; the
    rest goes through TVM's pipeline, scheduled by MetaSchedule with `trials` trials
    (its database in `work_dir`, reused by the next build) and the built-in schedule
    for what it leaves (`untemplated="fallback"`: the built-in schedule alone; "none":
    TVM's naive loops, for numerical checks). Returns a `ModelBuild`: the VM
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
    to declare the workload and tune it.

    With `untemplated="metaschedule"`, the model's fresh committed records for this
    target (`models/<name>.<target>.records.json`, core/modelrecords.py, written by
    `profile`) are applied instead of a search (`reuse_records=False`: search anyway).

    `lift=True` moves what the entry computes from its weights alone (the transposes
    a `transposed` contract puts before a kernel, the model's own weight reshapes) into
    `<entry>_transform_params`, run once at load (`ModelBuild.lifted`): the entry then
    takes its inputs and that function's results, `timing.entry_args(vm, b.lifted,
    args)`. `profile` builds so; the default keeps the entry's plain signature."""
    if uncovered_shapes not in ("untemplated", "sibling"):
        raise UsageError(f"uncovered_shapes={uncovered_shapes!r}: use 'untemplated' or 'sibling'")
    if configs not in ("best", "default"):
        raise UsageError(f"configs={configs!r}: use 'best' (the committed logs) or 'default'")

    config, spec = _model_spec(model, root)
    want = target_dict(target)
    check_runs_here(Best(model, "", want, {}, None, None, False), allow_foreign_host)
    tvm_target = tvmsetup.make_target(want)
    mod = load_model(config.root, spec)
    _blobs, contracts = read_contracts(config.root, config.operators_path)
    contracts = tuned_for(config, contracts, want)
    calls = model_calls(mod)
    todo = covered(calls, contracts, shapes=uncovered_shapes == "sibling")
    kernels: dict[tuple[str, str], Kernel] = {}
    for t in todo:
        cov = t.coverage
        key = (str(cov.template), str(cov.workload))
        if key not in kernels:
            kernels[key] = _model_kernel(
                config, key, cov.params if cov.status != "covered" else None, want, configs, allow_fallback
            )
    swapped, swaps = swap_covered(mod, todo, contracts, kernels)
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
    if any(s.prepacked for s in swaps):
        # A prepacked workload's kernel marks its weight's packing (tune/epilogue.py
        # mark_prepack): split out here into a function of its own, which lifting (or
        # constant folding, for a constant) runs once instead of on every call.
        swapped = split_prepack(swapped)
        # The kernel a call runs is now `<kernel>_prepacked` (what a VM profile sees).
        names = {gv.name_hint for gv in swapped.get_global_vars()}
        swaps = [
            replace(s, kernel=f"{s.kernel}_prepacked") if s.prepacked and f"{s.kernel}_prepacked" in names else s
            for s in swaps
        ]
    # exp/erf/tanh/softmax as their fast forms, so that they vectorize (not for "none":
    # TVM's own loops and functions, the plain numerical reference).
    fast = fast_math(swapped) if untemplated != "none" else swapped
    lifted, moved = lift_weights(fast) if lift else (fast, None)
    fused = fuse(lifted, tvm_target)
    records = committed_records(config, spec, want) if untemplated == "metaschedule" and reuse_records else None
    scheduled, how, schedules = schedule_untemplated(
        fused,
        tvm_target,
        untemplated,
        trials=trials,
        work_dir=Path(work_dir) if work_dir is not None else None,
        lanes=target_facts(want).lanes("float32"),
        records=records,
    )
    swapped_calls = {(s.function, s.binding) for s in swaps}
    swapped_calls |= {(op.function, op.binding) for t in todo for op in t.chain}  # fused in
    uncovered = tuple(
        c.sig.describe() for c in calls if (c.function, c.binding) not in swapped_calls and c.sig.op not in VIEWS
    )
    return ModelBuild(
        compile_model(scheduled, tvm_target),
        mod,
        tuple(swaps),
        how,
        uncovered,
        schedules=schedules,
        lifted=moved,
        flops=kernel_flops(scheduled),
    )


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
    whole model (model/metaschedule.py): no template, no log. The anchor a model's README sets
    beside `build_model` (`profile --metaschedule-seconds`). Returns a `ModelBuild`
    whose `untemplated` says what the search spent; `search` is its SearchSpent.
    `clock` (seconds, time.monotonic by default) decides the deadline, and `watch` makes
    the load watch (metaschedule.LoadWatch by default): tests' hooks. Each `seed` is an
    independent search, kept under `work_dir` apart from the others'."""

    config, spec = _model_spec(model, root)
    if seconds <= 0:
        raise UsageError(f"MetaSchedule needs a positive number of seconds, not {seconds}")
    want = target_dict(target)
    check_runs_here(Best(model, "", want, {}, None, None, False), False)
    tvm_target = tvmsetup.make_target(want)
    mod = load_model(config.root, spec)
    fused = fuse(mod, tvm_target)
    hooks = {k: v for k, v in (("clock", clock), ("watch", watch)) if v is not None}
    scheduled, spent = tune_model(fused, tvm_target, seconds, Path(work_dir), seed=seed, **hooks)
    return ModelBuild(compile_model(scheduled, tvm_target), mod, (), spent.words(), spent.untuned, search=spent)
