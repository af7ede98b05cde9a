"""fp32 softmax over the last axis of a [R, N] matrix, for the target CPU's vectors.

Reduction- and bandwidth-bound, so the choices are not GEMM's: how many rows one
parallel step handles (all four stages run on those rows while they are in L1/L2),
how many independent vector accumulators the max and the sum reductions keep
(rfactor over vectors of the target's lanes, `cfg.vector_lanes`: 16 fp32 on
AVX-512, 8 on AVX2, 4 on NEON; more accumulators hide the add/max latency), the
unrolling of the elementwise loops, and whether exp(x - max) is stored once and
re-read by the normalisation (`store`) or computed twice (`recompute`: no
buffer, twice the exp work).

exp is TVM's `topi.fast_exp` (a polynomial, vectorisable; `te.exp` becomes one
libm call per element on x86), accurate to a few ulp in float32.
"""

from __future__ import annotations

import numpy as np

from tvmtune_ci.template import define_knob, define_split, define_structure

WORKLOADS = {
    # attention probabilities: 16 heads x 512 queries, over 512 keys
    "attn_512": {"R": 8192, "N": 512, "dtype": "float32"},
    # a language-model head over a 32000-token vocabulary, 64 positions
    "vocab_32k": {"R": 64, "N": 32000, "dtype": "float32"},
    # BERT-base attention, 128 tokens: 12 heads x 128 queries, over 128 keys
    "bert_attn": {"R": 1536, "N": 128, "dtype": "float32"},
}

# The Relax calls this kernel implements (docs/models.md): softmax over the last
# axis of x[..., N], the leading dimensions folded into R rows. Not part of the
# fingerprint: it does not change the kernel.
IMPLEMENTS = [{"op": "relax.nn.softmax", "args": [["*R", "N"]], "attrs": {"axis": -1}, "dtype": "dtype"}]

KNOBS = [
    # rows: parallel steps x rows per step
    define_split("tile_r", "R", parts=2, max_factor=16),
    # the max and sum reductions: N/LANES vectors = passes x independent accumulators
    define_split("acc_max", "N//LANES", parts=2, max_factor=8),
    define_split("acc_sum", "N//LANES", parts=2, max_factor=8),
    define_knob("unroll", [0, 16, 64]),
    define_structure("exp_mode", ["store", "recompute"]),
]


def compute(R: int, N: int, dtype: str):
    from tvm import te, topi

    x = te.placeholder((R, N), dtype, name="x")
    j = te.reduce_axis((0, N), name="j")
    row_max = te.compute((R,), lambda r: te.max(x[r, j], axis=j), name="row_max")
    shifted = te.compute((R, N), lambda r, c: x[r, c] - row_max[r], name="shifted")
    e = topi.fast_exp(shifted)  # block "T_fast_exp"
    j2 = te.reduce_axis((0, N), name="j2")
    row_sum = te.compute((R,), lambda r: te.sum(e[r, j2], axis=j2), name="row_sum")
    # One reciprocal per row (hoisted by LLVM), a multiply per element: a zmm
    # division costs several times a multiply.
    out = te.compute((R, N), lambda r, c: e[r, c] * (te.const(1.0, dtype) / row_sum[r]), name="out")
    return te.create_prim_func([x, out])


def reference(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return (z / z.sum(axis=-1, keepdims=True)).astype(x.dtype)


def _rfactor(sch, block, name: str, cfg):
    """Split a row reduction over `acc` independent vector accumulators.

    Returns (partial block, final block): the partial one reduces each of the
    acc*lanes lanes over N/(acc*lanes) passes; the final one reduces the lanes.
    """
    j = sch.get_loops(block)[-1]
    jv, lanes = sch.split(j, [None, cfg.vector_lanes(cfg["dtype"])])
    _, acc = cfg.split(sch, jv, name)
    return sch.rfactor(sch.fuse(acc, lanes), 0), block


def _vectorize_partial(sch, rf) -> None:
    # compute_at laid the partial block out as [acc*lanes, row, passes].
    acc_lanes, _, passes = sch.get_loops(rf)[-3:]
    sch.reorder(passes, acc_lanes)
    sch.vectorize(acc_lanes)
    init = sch.decompose_reduction(rf, passes)
    sch.vectorize(sch.get_loops(init)[-1])


def schedule(sch, cfg) -> None:
    sch.compute_inline(sch.get_sblock("shifted"))
    max_rf, row_max = _rfactor(sch, sch.get_sblock("row_max"), "acc_max", cfg)
    sum_rf, row_sum = _rfactor(sch, sch.get_sblock("row_sum"), "acc_sum", cfg)

    out = sch.get_sblock("out")
    r, c = sch.get_loops(out)
    r0, r1 = cfg.split(sch, r, "tile_r")
    sch.parallel(r0)
    lanes = cfg.vector_lanes(cfg["dtype"])
    _, c1 = sch.split(c, [None, lanes])
    sch.vectorize(c1)

    # Every stage of a row runs right before the normalisation of that row.
    sch.compute_at(row_sum, r1, preserve_unit_loops=True)
    sch.compute_at(sum_rf, r1, preserve_unit_loops=True)
    e = sch.get_sblock("T_fast_exp")
    if cfg["exp_mode"] == "store":
        sch.compute_at(e, r1, preserve_unit_loops=True)
        _, e1 = sch.split(sch.get_loops(e)[-1], [None, lanes])
        sch.vectorize(e1)
    else:
        sch.compute_inline(e)
    sch.compute_at(row_max, r1, preserve_unit_loops=True)
    sch.compute_at(max_rf, r1, preserve_unit_loops=True)
    _vectorize_partial(sch, max_rf)
    _vectorize_partial(sch, sum_rf)
    sch.annotate(r1, "pragma_auto_unroll_max_step", cfg.knob(sch, "unroll"))
    sch.annotate(r1, "pragma_unroll_explicit", 1)
