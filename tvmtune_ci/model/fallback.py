"""The built-in schedule of a model's untemplated functions: never TVM's naive loops.

TVM 0.27 has no default CPU schedule for matmul or elementwise functions: a PrimFunc
that nothing scheduled runs as a single-threaded, scalar loop nest. A model build
therefore gives every function a schedule (`schedule_rest`), in this order:

1. the template kernels (model/build.py swaps them in, already scheduled);
2. MetaSchedule's records, where the build asks for a search (model/metaschedule.py);
3. this module, for every function left: dlight's CPU `Reduction` rule for the
   normalisations and softmax (parallel rows, vectorized injective stages), then
   `Spatial` for everything else: elementwise chains inlined into one pass, the
   leading spatial loops fused and parallel, the innermost spatial loop vectorized
   (a reduction loop is moved outside it, so a matmul's inner loop is the vector one).

`Spatial` is a floor, not a tuned schedule: it has no cache tiling. It makes an
untemplated matmul parallel and vectorized, where the naive loops ran BERT's attention
matmuls at 3-4 GFLOPS on one thread (measured against them: benchmarks/bench_fallback.py,
docs/models.md).

Before legalization the build also rewrites exp, erf, tanh, softmax and GELU to their
fast forms (`fast_math`: TVM's FastMathTransform, and GELU, which it leaves alone): TVM
0.27 lowers the plain ones to scalar libm calls even inside a vectorized loop (GELU
took 1.54 ms for 393k elements).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tvm import s_tir, tirx
from tvm.s_tir import dlight
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import ScheduleRule, try_inline

# What `schedule_rest` says each function got (the README's words for the schedule).
BY_REDUCTION = "dlight CPU Reduction (parallel rows, vectorized)"
BY_SPATIAL = "built-in parallel, vectorized loops"


class Spatial(ScheduleRule):
    """Parallel and vectorized loops for any function of spatial and reduction blocks,
    `lanes` fp32 elements a vector (the target's: core/targetinfo.py)."""

    def __init__(self, lanes: int) -> None:
        self.lanes = lanes

    def apply(self, func: tirx.PrimFunc, target: Any, _tunable: bool) -> s_tir.Schedule | None:
        if not isinstance(func, tirx.PrimFunc):
            return None
        try:
            sch = s_tir.Schedule(func)
            infos = normalize_prim_func(sch)
            if not infos:
                return None
            # An elementwise chain becomes one pass over memory: each injective stage
            # that can be is inlined into its consumer (what FuseOps fused, run as one).
            left = try_inline(sch, infos)
            if any(set(b.dom_kind()) - {"S", "R"} for b in left):
                return None
            lanes = max(self.lanes * 32 // _dtype_bits(sch, left[-1].block_rv), 1)
            for b in left:
                _parallel_vectorized(sch, b.block_rv, b.dom_kind(), lanes)
            return sch
        except s_tir.ScheduleError:
            return None


def _dtype_bits(sch: s_tir.Schedule, block: Any) -> int:
    writes = sch.get(block).writes  # TVM 0.27: a BufferRegion's buffer is its `source`
    return int(writes[0].source.dtype.bits) if writes else 32


def _extent(sch: s_tir.Schedule, loop: Any) -> int | None:
    ext = sch.get(loop).extent
    return int(ext) if isinstance(ext, tirx.IntImm) else None


def _vector_width(ext: int | None, lanes: int) -> int | None:
    """The widest vector, of `lanes` or a power-of-two fraction of it (at least 4), that
    divides `ext`: a 56-wide image row goes in vectors of 8 where it has 16 lanes."""
    width = lanes
    while ext is not None and width >= 4 and ext % width:
        width //= 2
    return width if ext is not None and width >= 4 and ext % width == 0 else None


def _parallel_vectorized(sch: s_tir.Schedule, block: Any, kinds: str, lanes: int) -> None:
    """One block's loops: the outer spatial loops fused and parallel, then the innermost
    spatial loop's outer part, the reductions, and its `lanes`-wide part vectorized (a
    matmul keeps a vector of its output in a register across the whole reduction)."""
    loops = sch.get_loops(block)
    if len(loops) != len(kinds) or "S" not in kinds:
        return  # a block nested under another's loops, or all reduction: leave it serial
    spatial = [lp for lp, k in zip(loops, kinds, strict=True) if k == "S"]
    reduce = [lp for lp, k in zip(loops, kinds, strict=True) if k == "R"]
    outer, inner = spatial[:-1], spatial[-1]
    ext = _extent(sch, inner)
    width = _vector_width(ext, lanes)
    if ext is not None and width and ext > width:
        chunk, vec = sch.split(inner, factors=[None, width])
        if outer:
            sch.reorder(*outer, chunk, *reduce, vec)
        else:  # one spatial loop: its chunks are the parallel work
            sch.reorder(chunk, *reduce, vec)
            outer = [chunk]
    elif ext is not None and 2 <= ext <= lanes:
        vec = inner
        if reduce:
            sch.reorder(*outer, *reduce, vec)
    else:
        vec = None  # not a multiple of the lanes: scalar inner loop, still parallel
    if outer:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    if vec is not None:
        sch.vectorize(vec)


class RowReduction(ScheduleRule):
    """dlight's CPU `Reduction`, for the functions it is written for: a row reduced to
    a scalar and broadcast back (softmax, layer norm). A matmul followed by its bias
    also matches dlight's pattern, but its rows are not the parallel work a matmul
    needs: `Spatial` vectorizes its output instead (measured: dlight's rule ran BERT's
    FFN matmul+GELU 0.7x as fast as the naive loops)."""

    def apply(self, func: tirx.PrimFunc, target: Any, tunable: bool) -> s_tir.Schedule | None:
        if not isinstance(func, tirx.PrimFunc):
            return None
        infos = normalize_prim_func(s_tir.Schedule(func))
        if not infos or len(infos) < 2:
            return None
        out_rank = infos[-1].dom_kind().count("S")
        if not any("R" in b.dom_kind() and b.dom_kind().count("S") < out_rank for b in infos):
            return None
        sch = dlight.cpu.Reduction().apply(func, target, tunable)
        return sch if isinstance(sch, s_tir.Schedule) else None


def rules(lanes: int) -> tuple[tuple[ScheduleRule, str], ...]:
    """The rules `schedule_rest` tries, in order, each with its words."""
    return ((RowReduction(), BY_REDUCTION), (Spatial(lanes), BY_SPATIAL))


@dataclass(frozen=True)
class Fallback:
    """What `schedule_rest` did: each function it scheduled, by which rule."""

    by_rule: tuple[tuple[str, str], ...]  # (function, BY_REDUCTION | BY_SPATIAL)
    left: tuple[str, ...]  # functions no rule could schedule (TVM's loops): a bug to report


def schedule_rest(mod: Any, target: Any, names: Sequence[str], lanes: int) -> tuple[Any, Fallback]:
    """Schedule the functions `names` of `mod` with `rules(lanes)`, the first that applies."""
    mod = mod.clone()  # the caller's module stays as it was
    by_rule: list[tuple[str, str]] = []
    left: list[str] = []
    for name in names:
        gv = mod.get_global_var(name)
        func = mod[gv]
        for rule, words in rules(lanes):
            try:
                sch = rule.apply(func, target, False)
            except Exception:  # a dlight rule that trips over a shape it does not handle
                sch = None
            if sch is not None:
                sched = sch[0] if isinstance(sch, list) else sch
                mod[gv] = sched.mod["main"].with_attr("tirx.is_scheduled", True)
                by_rule.append((name, words))
                break
        else:
            left.append(name)
    return mod, Fallback(tuple(by_rule), tuple(left))


def fast_math(mod: Any) -> Any:
    """exp, erf, tanh, softmax and GELU rewritten to their vectorizable fast forms:
    TVM's FastMathTransform, plus GELU, which it leaves to legalization's erf."""
    from tvm import relax, te, tirx, topi
    from tvm.relax.transform.fast_math import FastMathCodeGenerator

    def fast_gelu(x: Any) -> Any:
        erf = topi.fast_erf(topi.multiply(x, tirx.const(0.7071067811865476, x.dtype)))
        half, one = tirx.const(0.5, x.dtype), tirx.const(1.0, x.dtype)
        return te.compute(x.shape, lambda *i: x(*i) * half * (one + erf(*i)), name="fast_gelu")

    @relax.expr_functor.mutator
    class FastGelu(FastMathCodeGenerator._cls):  # the decorated class itself: TVM refuses the wrapper
        def visit_call_(self, call: Any) -> Any:
            if getattr(call.op, "name", None) == "relax.nn.gelu":
                return self.builder_.call_te(fast_gelu, self.visit_expr(call.args[0]))
            return super().visit_call_(call)

    gen = FastGelu(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            gen.builder_.update_func(gv, gen.visit_expr(func))
    return gen.builder_.get()
