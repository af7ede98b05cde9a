"""The peak kernel (model/peak.py, benchmarks/bench_peak.py) counts the FMAs it runs: the
recurrence it claims, for the iterations it is credited with."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvmtune_ci.model.peak import ACC, UNROLL, flops, peak_kernel  # noqa: E402
from tvmtune_ci.tune import tvmsetup  # noqa: E402


@pytest.mark.parametrize(("threads", "lanes", "iters"), [(1, 4, 3), (2, 8, 5)])
def test_the_kernel_runs_the_fused_multiply_adds_it_is_credited_with(threads: int, lanes: int, iters: int) -> None:
    lib = tvm.compile(
        tvm.IRModule({"main": peak_kernel(threads, lanes, iters)}), target=tvmsetup.make_target({"kind": "llvm"})
    )
    x = np.random.default_rng(0).random((threads, ACC, lanes)).astype("float32")
    out = tvm.runtime.tensor(np.zeros_like(x))
    lib.mod["main"](tvm.runtime.tensor(x), out)
    got = out.numpy()

    def chain(steps: int) -> np.ndarray:  # one multiply-add per accumulator element per step
        v = x.copy()
        for _ in range(steps):
            v = v * np.float32(0.999999) + np.float32(1e-7)
        return v

    # fp32 roundings differ from an FMA's by an ulp a step at most; one unrolled block
    # fewer (8 steps) moves the value 8e-6, beyond that
    np.testing.assert_allclose(got, chain(iters * UNROLL), rtol=3e-6)
    assert not np.allclose(got, chain((iters - 1) * UNROLL), rtol=3e-6, atol=0)
    assert flops(threads, lanes, iters) == 2 * threads * ACC * lanes * iters * UNROLL
