"""A fused workload's kernel: the template's compute() with its epilogue chain after
it, and the chain folded into the kernel's store once the template has scheduled it.

`compose` appends the chain (core/epilogue.py) to the template's PrimFunc the way
TVM's own pipeline fuses an elementwise tail into the op before it: a Relax function
of the kernel then the chain, through FuseOps and FuseTIR (the kernel marked
out-elementwise-fusable). The template's blocks keep their names, so its schedule()
runs unchanged on the fused function; the chain's blocks are named in the attribute
EPILOGUE_ATTR. GELU is the fast erf (`topi.fast_erf`), which vectorizes where
TVM 0.27's erf is a scalar libm call.

`fold` runs after schedule(): the chain's stages are inlined into one, and that one
into the block that stores the kernel's output tile (a template's `cache_write`
write-back), so the epilogue runs on the tile while it is in registers or L1 and the
output is written once. Where the output is stored by the reduction itself (a GEMM
accumulating in memory), the chain is computed at the innermost loop that completes
a tile, vectorized. The program searched, logged and built is the folded one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.epilogue import OPERAND_KINDS, chain, declared_prepack, operand_shape, prepacked
from ..core.errors import TemplateError
from . import tvmsetup

EPILOGUE_ATTR = "tvmtune_epilogue"  # the chain's block names, in order


def _chain_te(y: Any, *operands: Any, kinds: Sequence[str]) -> Any:
    """The chain as TE stages over the kernel's output `y`."""
    from tvm import topi

    it = iter(operands)
    for kind in kinds:
        if kind in ("bias", "residual"):
            y = topi.add(y, next(it))
        elif kind == "scale":
            y = _scaled(y, next(it))
        elif kind == "relu":
            y = topi.nn.relu(y)
        elif kind == "gelu":
            y = _gelu(y)
        else:
            raise TemplateError(f"unknown epilogue {kind!r}")
    return y


def _scaled(y: Any, s: Any) -> Any:
    from tvm import te

    return te.compute(y.shape, lambda *i: y(*i) * s(), name="epilogue_scale")


def _gelu(x: Any) -> Any:
    """x * (1 + erf(x / sqrt 2)) / 2 with TVM's vectorizable fast erf."""
    from tvm import te, tirx, topi

    erf = topi.fast_erf(topi.multiply(x, tirx.const(0.7071067811865476, x.dtype)))
    half, one = tirx.const(0.5, x.dtype), tirx.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: x(*i) * half * (one + erf(*i)), name="epilogue_gelu")


def compose(prim: Any, kinds: Sequence[str], declared: Mapping[str, Any], params: Mapping[str, Any]) -> Any:
    """`prim` (a template's compute(): inputs, then one output) with the epilogue chain
    `kinds` after it. The result takes prim's inputs, the chain's operands in order
    (shapes: `declared` {kind: the IMPLEMENTS entry's shape for it}), then the output."""
    tvm = tvmsetup.load()
    from tvm import relax

    bufs = list(prim.params)
    if len(bufs) < 2:
        raise TemplateError("a fused workload needs a compute() of inputs and one output")
    out = bufs[-1]
    dtype = str(out.dtype)
    out_shape = tuple(int(d) for d in out.shape)
    inputs = [relax.Var(str(b.name), relax.TensorType([int(d) for d in b.shape], str(b.dtype))) for b in bufs[:-1]]
    operands = [
        relax.Var(k, relax.TensorType(list(operand_shape(k, declared.get(k), params, out_shape)), dtype))
        for k in kinds
        if k in OPERAND_KINDS
    ]
    own = _block_names(prim)
    bb = relax.BlockBuilder()
    with bb.function("main", inputs + operands):
        with bb.dataflow():
            # out-elementwise-fusable: FuseOps puts the chain after it in one function
            gv = bb.add_func(prim.without_attr("global_symbol").with_attr("op_pattern", 4), "kernel")
            y = bb.emit(relax.call_tir(gv, inputs, relax.TensorType(list(out_shape), dtype)))
            y = bb.emit_te(_chain_te, y, *operands, kinds=tuple(kinds), primfunc_name_hint="epilogue")
            result = bb.emit_output(y)
        bb.emit_func_output(result)
    mod = bb.get()
    # The template's buffers are indexed in int32 (te.create_prim_func); Relax's in
    # int64. FuseTIR maps one tensor to one buffer type, so both are narrowed.
    mod = tvm.tirx.transform.ForceNarrowIndexToInt32()(mod)
    for gv_, f in mod.functions_items():
        if gv_.name_hint == "epilogue":
            mod[gv_] = f.with_attr("op_pattern", 0)  # elementwise: what FuseOps fuses after it
    mod = relax.transform.FuseOps()(mod)
    mod = relax.transform.FuseTIR()(mod)
    fused = [f for _gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    if len(fused) != 1:
        raise TemplateError(
            f"the epilogue {list(kinds)} did not fuse with the kernel into one function "
            f"({len(fused)} functions): a fused workload needs compute() to write one output"
        )
    func = fused[0]
    chain_blocks = [n for n in _block_names(func) if n not in own]
    return func.with_attr(EPILOGUE_ATTR, chain_blocks).with_attr("global_symbol", "main")


def _block_names(func: Any) -> list[str]:
    """The names of `func`'s blocks (an unscheduled function: all children of root)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func.with_attr("global_symbol", "main"))
    return [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]


def compose_workload(prim: Any, params: Mapping[str, Any], declared: Mapping[str, Any] | None) -> Any:
    """`compose` for a workload's params, or `prim` itself for a plain workload."""
    kinds = chain(params)
    if not kinds:
        return prim
    return compose(prim, kinds, declared or {}, params)


def fold(sch: Any, lanes: int) -> None:
    """After the template's schedule(): the chain's stages inlined into one, and that
    one into the block that stores the kernel's output (see the module docstring).
    A no-op for a function without a chain."""
    from tvm import s_tir

    attrs = sch.mod["main"].attrs
    names = list(attrs[EPILOGUE_ATTR]) if attrs is not None and EPILOGUE_ATTR in attrs else []
    if not names:
        return
    blocks = [sch.get_sblock(str(n)) for n in names]
    for b in blocks[:-1]:
        sch.compute_inline(b)
    last = blocks[-1]
    try:
        sch.reverse_compute_inline(last)  # into the write-back of the tile
        return
    except s_tir.ScheduleError:
        pass
    # The block that finishes the output: a reduction's update, not its init. The chain
    # goes under the outermost loop that takes it (the parallel tile loop): the same
    # loop whatever the knob values. Searched from the innermost, a tile whose k loop
    # has one step let a deeper loop take it, and a fixed configuration's trace then
    # matched no design space (a replayed or seeded one was refused).
    producers = sch.get_producers(last)
    updates = [p for p in producers if not sch.get(p).name_hint.endswith("_init")]
    producer = (updates or producers)[-1]
    for loop in sch.get_loops(producer):
        try:
            sch.reverse_compute_at(last, loop, preserve_unit_loops=True)
            break
        except s_tir.ScheduleError:
            continue
    # Vectorized in lanes where the tile's columns are whole vectors (a GEMM's always
    # are: its columns are tiled in vectors). The same instructions whatever the knob
    # values: a branch on the extent (vectorize it whole when short) made the design
    # space's trace depend on the factors sampled when it was made.
    inner = sch.get_loops(last)[-1]
    extent = sch.get(inner).extent
    if isinstance(extent, tvmsetup.load().tirx.IntImm) and int(extent) % lanes == 0:
        _, v = sch.split(inner, [None, lanes])
        sch.vectorize(v)


PREPACK_ANNOTATION = "meta_schedule.layout_rewrite_preproc"


def mark_prepack(sch: Any, args: Sequence[int]) -> list[str]:
    """Mark the stages that copy a whole packable argument (tensor argument `args`)
    into a layout of the schedule's own, outside every other stage's loops (the
    GEMM's `pack_b="global"`), as MetaSchedule's layout-rewrite preprocessing: the
    search's builder then removes them and the kernel is measured taking the packed
    tensor (`RemoveWeightLayoutRewriteBlock`, `ArgInfo.from_entry_func(remove_preproc=
    True)`), and a model build splits them out to run once (SplitLayoutRewritePreproc,
    then LiftTransformParams). A stage copied inside the kernel's tiles (`"tile"`)
    stays: it is the kernel's. Returns the marked blocks' names."""
    func = sch.mod["main"]
    params = list(func.params)
    # TVM 0.27: a parameter is its buffer, the very object a block's reads name
    packable = {params[i] for i in args if i < len(params) - 1}
    marked = []
    root = sch.get_sblock("root")
    for b in sch.get_child_blocks(root):
        block = sch.get(b)
        reads = {r.source for r in block.reads}
        if not reads or not reads <= packable:
            continue
        loops = sch.get_loops(b)
        if loops and len(sch.get_child_blocks(loops[0])) != 1:
            continue  # inside a loop nest shared with other stages: the kernel's own copy
        if not _plain_copy(block):
            # A pack that also pads (zero-fills a dimension to the tile) is no plain
            # layout rewrite: MetaSchedule cannot split it out, so it stays the kernel's.
            continue
        sch.annotate(b, PREPACK_ANNOTATION, True)
        marked.append(block.name_hint)
    return marked


def after_schedule(sch: Any, params: Mapping[str, Any], implements: Any, lanes: Callable[[], int]) -> None:
    """What a fused or prepacked workload adds after the template's schedule(): the
    epilogue folded into the tile's store, the packable arguments' packing marked."""
    if chain(params):
        fold(sch, lanes())
    if prepacked(params):
        mark_prepack(sch, declared_prepack(implements))


def _plain_copy(block: Any) -> bool:
    """The block stores one element of one buffer, unchanged: a layout rewrite."""
    body = block.body  # by type name: TVM 0.27 loads are ir.TensorLoad, and tirx.BufferLoad is a function
    load = type(getattr(body, "value", None)).__name__
    return type(body).__name__ == "BufferStore" and load in ("BufferLoad", "TensorLoad")
