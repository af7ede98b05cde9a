"""Numerics against `reference`, the noise check, fixed configurations, the TVM seam."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from test_tuner import FAST, TARGET, make_template

from tvmtune_ci import measure
from tvmtune_ci.builder import build_config, split_knobs
from tvmtune_ci.config import MeasureOptions, RpcRunner
from tvmtune_ci.errors import DeviceError, TemplateError, TuningError

GOOD = {"tile_i": [8, 8], "tile_j": [2, 32], "tile_k": [8, 8], "unroll": 16, "write_cache": False}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory):
    return make_template(tmp_path_factory.mktemp("measure"), "mm_measure")


@pytest.fixture(scope="module")
def runner():
    r = measure.make_runner(FAST)
    yield r
    r.close()


def test_only_the_x86_intrinsics_are_imported() -> None:
    from tvmtune_ci import tvmsetup

    tvmsetup.load()
    from tvm.s_tir import TensorIntrin

    assert tvmsetup.intrinsics_stubbed()
    assert TensorIntrin.get("dot_16x4_vnni") is not None
    assert "tvm.s_tir.tensor_intrin.x86" in sys.modules
    assert "tvm.s_tir.tensor_intrin.cuda" not in sys.modules

    assert "tvm.s_tir.tensor_intrin.cuda" not in sys.modules


def test_correct_template_passes(template) -> None:
    measure.check_correct(template, "m64", TARGET)
    measure.check_correct(template, "m64", TARGET, GOOD)
    measure.check_correct(template, "m32", TARGET)  # non-square, K=16


def test_wrong_reference_names_the_error(tmp_path: Path) -> None:
    wrong = make_template(tmp_path, "mm_t", reference="A @ B.T")
    with pytest.raises(TuningError) as info:
        measure.check_correct(wrong, "m64", TARGET)
    msg = str(info.value)
    assert (
        "mm_t workload 'm64'" in msg
        and "the default configuration does not match reference()" in msg
    )
    assert "max abs error" in msg and "max rel error" in msg and "first mismatches: [" in msg
    assert "fix compute(), reference() or schedule()" in msg


def test_reference_with_wrong_arity(tmp_path: Path) -> None:
    bad = make_template(tmp_path, "mm_arity", reference="(A @ B, A @ B)")
    with pytest.raises(TemplateError, match="returned 2 array"):
        measure.check_correct(bad, "m64", TARGET)


def test_a_failing_schedule_is_a_template_error(tmp_path: Path) -> None:
    bad = make_template(tmp_path, "mm_sched", extra='sch.get_sblock("no_such_block")\n')
    with pytest.raises(TemplateError, match=r"mm_sched.schedule\(\) failed for workload 'm64'"):
        measure.check_correct(bad, "m64", TARGET)


def test_tolerance_per_dtype() -> None:
    assert measure.tolerance("float32") == (1e-4, 1e-4)
    assert measure.tolerance("float16")[0] > measure.tolerance("float32")[0]
    assert measure.tolerance("int32") == (0.0, 0.0)


def test_mismatch_report_counts_nan_as_mismatch() -> None:
    want = np.ones((2, 3), "float32")
    got = want.copy()
    assert measure._mismatch_report("out", got, want, 1e-4, 1e-4) is None
    got[1, 2] = np.nan
    got[0, 0] = 3.0
    msg = measure._mismatch_report("out", got, want, 1e-4, 1e-4)
    assert msg and "2 of 6 elements differ" in msg and "[0, 0]: got 3" in msg


def test_measure_config_fills_defaults(template, runner) -> None:
    m = measure.measure_config(template, "m64", TARGET, {"tile_j": [2, 32]}, FAST, runner=runner)
    assert m.knobs == {
        "tile_i": [64, 1],
        "tile_j": [2, 32],
        "tile_k": [64, 1],
        "unroll": 0,
        "write_cache": True,
    }
    assert 0 < m.latency_s < 1 and m.gflops and m.gflops > 0
    assert runner.timings and runner.timings[-1].eval_s > 0


def test_bad_knob_values_are_rejected(template) -> None:
    with pytest.raises(TemplateError, match="product is 64"):
        split_knobs(template, "m64", {"tile_i": [8, 4]})
    with pytest.raises(TemplateError, match="not one of"):
        split_knobs(template, "m64", {"unroll": 7})
    with pytest.raises(TemplateError, match="unknown knob"):
        split_knobs(template, "m64", {"tile_x": [8, 8]})


def test_noise_check(template, runner) -> None:
    base, cv = measure.measure_baseline(template, "m64", TARGET, FAST, runner=runner)
    assert base.knobs["tile_i"] == [64, 1] and cv >= 0
    strict = MeasureOptions(repeat=3, min_repeat_ms=1, max_cv=1e-12)
    n = len(runner.timings)
    with pytest.raises(
        TuningError, match=r"runner too noisy: CV .*% > 0\.0% over 6 repeats"
    ) as info:
        measure.measure_baseline(template, "m64", TARGET, strict, runner=runner)
    assert "min_repeat_ms" in str(info.value) and "max_cv" in str(info.value)
    assert len(runner.timings) == n + 2  # measured, then once more with doubled repeats


def test_verify_and_build_config(template, runner) -> None:
    v = measure.verify(template, "m64", TARGET, GOOD, FAST, runner=runner)
    assert v.best.knobs == GOOD and v.baseline.knobs["unroll"] == 0
    assert v.speedup > 1
    ex = build_config(template, "m64", TARGET, GOOD)
    import tvm

    a = np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype("float32")
    b = np.random.default_rng(1).uniform(-1, 1, (64, 64)).astype("float32")
    c = tvm.runtime.empty((64, 64), "float32", tvm.cpu())
    ex["main"](tvm.runtime.tensor(a, tvm.cpu()), tvm.runtime.tensor(b, tvm.cpu()), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_a_crashing_or_slow_kernel_is_a_failed_run_not_a_crash(template) -> None:
    opts = MeasureOptions(repeat=1, min_repeat_ms=3000, timeout_s=1)
    slow = measure.make_runner(opts)
    try:
        with pytest.raises(TuningError, match="timeout"):
            measure.measure_config(template, "m64", TARGET, None, opts, runner=slow)
        # The worker was killed; the next measurement restarts it.
        assert (
            measure.measure_config(template, "m64", TARGET, None, FAST, runner=slow).latency_s > 0
        )
    finally:
        slow.close()


def test_rpc_runner_needs_a_tracker() -> None:
    from rpcfleet import free_port

    port = free_port()
    with pytest.raises(DeviceError, match=f"cannot reach the RPC tracker at 127.0.0.1:{port}"):
        measure.make_runner(FAST, RpcRunner(tracker=f"127.0.0.1:{port}", key="x"))

