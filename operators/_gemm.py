"""The CPU GEMM schedule shared by `matmul` and `dense` (a helper, not a template).

One fp32 micro-kernel for the target's vectors (`cfg.vector_lanes`: 16 fp32 lanes
on AVX-512, 8 on AVX2, 4 on NEON): an `mr x nr` register tile (`nr` a multiple of
the lanes) updated once per k by `mr` broadcasts of A, `nr/lanes` vector loads of B
and `mr*nr/lanes` FMAs. The templates bound `nr/lanes` by VREGS//8 (AVX-512 and
NEON: 4, AVX2: 2) and `mr` by 8, so the tile stays near the register file (32
vector registers on AVX-512 and NEON, 16 on AVX2). Around it:

    parallel  fuse(i0, j0)                       2 cores share the outer tiles
    "register": i1, j1 | k0, k1, kk | i2, j2, lanes
                the tile is accumulated over all of K in a local buffer
                (cache_write) and stored once
    "memory":   k0 | j1, i1 | k1, kk | i2, j2, lanes
                BLAS-like: K is blocked by kc = k1*16 so the packed B
                micro-panel (kc x nr) stays in L1 across the i1 loop; the C tile
                is updated in memory once per kc block

`pack_b` removes the 4 KiB-stride cache-set conflicts of walking B down k (and,
for a [N, K] weight, the strided loads along N): "tile" copies the B panel one
parallel tile needs into a compact buffer inside that tile (cache-hot, but once
per row tile); "global" copies B once, in a parallel pass, into lane-wide column
panels [N/lanes, K, lanes] (each vector load contiguous, k after k); "none" reads
B in place.

Every dimension is padded to a multiple of 16 (`sch.pad_einsum`; 16 is a multiple
of every target's fp32 lanes) when it is not one already, so awkward sizes (1000,
the prime 1021) tile like their round neighbours instead of collapsing to a 1 x N
split. That is why the KNOBS of the templates declare their extents as
`(M + 15)//16*16`, `(N + 15)//16*16//LANES` and so on. The padding is a property of
the workload, not a knob: a split's declared extent is one expression per workload
(and target), so it cannot change between design spaces.
"""

from __future__ import annotations

from typing import Any

PAD = 16  # every GEMM dimension is padded to a multiple of this (and of the lanes)


def padded(n: int) -> int:
    return (n + PAD - 1) // PAD * PAD


def _parallel_vectorize(sch: Any, block: Any, lanes_n: int) -> None:
    """A padding/copy stage on its own: rows over the cores, columns vectorised."""
    loops = sch.get_loops(block)
    if len(loops) > 2:
        outer = sch.fuse(*loops[:-1])
    else:
        outer = loops[0]
    sch.parallel(outer)
    inner = loops[-1]
    extent = int(sch.get(inner).extent)
    if extent % lanes_n == 0:
        _, lanes = sch.split(inner, [None, lanes_n])
        sch.vectorize(lanes)


def schedule_gemm(sch: Any, cfg: Any, block_name: str, *, b_transposed: bool = False) -> None:
    """Tile `block_name` (loops [batch..., i, j, k]) with the knobs tile_i, tile_j,
    tile_k and the structural knobs accumulate and pack_b.

    b_transposed: B is stored as [N, K] (a dense layer's weight), not [K, N].
    """
    lanes_n = cfg.vector_lanes(cfg["dtype"])
    block = sch.get_sblock(block_name)
    nbatch = len(sch.get_loops(block)) - 3
    padding = [1] * nbatch + [PAD, PAD, PAD]
    extents = [int(sch.get(lp).extent) for lp in sch.get_loops(block)]
    needs_pad = any(e % PAD for e in extents[nbatch:])
    if needs_pad:
        sch.pad_einsum(block, padding)
    loops = sch.get_loops(block)
    batch, (i, j, k) = loops[:nbatch], loops[nbatch:]

    jv, lanes = sch.split(j, [None, lanes_n])
    k_rest, kk = sch.split(k, [None, PAD])
    i_tiles = cfg.split(sch, i, "tile_i")
    # A 2-part tile_i ([mc/mr, mr]) leaves the rows out of the parallel loop: for
    # a dense layer's few rows (tokens), the columns give the parallelism.
    i0, i1, i2 = ([] if len(i_tiles) == 2 else [i_tiles[0]]), i_tiles[-2], i_tiles[-1]
    j0, j1, j2 = cfg.split(sch, jv, "tile_j")
    k0, k1 = cfg.split(sch, k_rest, "tile_k")
    register = cfg["accumulate"] == "register"
    if register:
        sch.reorder(*batch, *i0, j0, i1, j1, k0, k1, kk, i2, j2, lanes)
    else:
        sch.reorder(*batch, *i0, j0, k0, j1, i1, k1, kk, i2, j2, lanes)
    outer = sch.fuse(*batch, *i0, j0) if batch or i0 else j0
    sch.parallel(outer)

    pack_b = cfg["pack_b"]
    if pack_b != "none":
        pack = sch.cache_read(block, 1, "global")
        for producer in sch.get_producers(pack):
            # B was padded: the pack reads B itself and zero-fills, no extra pass.
            sch.compute_inline(producer)
        if pack_b == "tile":
            # A compact [kc or K, nc] copy of the B panel this tile needs, made
            # inside the tile (so in cache), once per tile.
            if b_transposed:
                sch.transform_layout(pack, ("write", 0), lambda n, kx: (kx, n))
            sch.compute_at(pack, outer if register else k0, preserve_unit_loops=True)
            if b_transposed:
                # Read the weight along k (contiguous), write the panel along j.
                n_loop, k_loop = sch.get_loops(pack)[-2:]
                sch.reorder(k_loop, n_loop)
            # The panel row is nc wide (up to N): one register at a time, not one
            # nc-lane vector (LLVM takes minutes to legalise those).
            _, lanes_p = sch.split(sch.get_loops(pack)[-1], [None, lanes_n])
            sch.vectorize(lanes_p)
        else:
            # "global": B once, as lane-wide column panels [N/lanes, K, lanes]:
            # each vector load of the kernel is contiguous, k after k.
            if b_transposed:
                sch.transform_layout(pack, ("write", 0), lambda n, kx: (n // lanes_n, kx, n % lanes_n))
                n_loop, k_loop = sch.get_loops(pack)[-2:]
            else:
                sch.transform_layout(pack, ("write", 0), lambda kx, n: (n // lanes_n, kx, n % lanes_n))
                k_loop, n_loop = sch.get_loops(pack)[-2:]
            n_out, n_lane = sch.split(n_loop, [None, lanes_n])
            sch.reorder(n_out, k_loop, n_lane)
            sch.parallel(n_out)
            sch.vectorize(n_lane)
    if register:
        cache = sch.cache_write(block, 0, "global")
        sch.reverse_compute_at(cache, j1, preserve_unit_loops=True)
        c_loops = sch.get_loops(cache)
        sch.vectorize(c_loops[-1])

    # The register tile: i2 and j2 unrolled, one vector register per vector op.
    sch.vectorize(lanes)
    sch.unroll(j2)
    sch.unroll(i2)
    init = sch.decompose_reduction(block, k0)
    sch.vectorize(sch.get_loops(init)[-1])

    if needs_pad:
        # A (and B when not packed) padded once, in a parallel pass of its own.
        for producer in sch.get_producers(block):
            if sch.get(producer).name_hint.endswith("_pad"):
                _parallel_vectorize(sch, producer, lanes_n)
        if register:
            # The tile is stored straight into C, clipped to its bounds: no
            # padded C, no copy pass.
            for consumer in sch.get_consumers(cache):
                sch.reverse_compute_inline(consumer)
        else:
            for consumer in sch.get_consumers(block):
                _parallel_vectorize(sch, consumer, lanes_n)
