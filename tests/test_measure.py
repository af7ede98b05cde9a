"""Numerics against `reference`, the noise check, fixed configurations, the TVM seam."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_tuner import FAST, TARGET, make_template, write_template

from tvmtune_ci.core import stats
from tvmtune_ci.core.configschema import MeasureOptions, RpcRunner
from tvmtune_ci.core.errors import DeviceError, TemplateError, TuningError
from tvmtune_ci.tune import measure, numerics, runners, sampling
from tvmtune_ci.tune.builder import build_config, split_knobs

GOOD = {"tile_i": [8, 8], "tile_j": [2, 32], "tile_k": [8, 8], "unroll": 16, "write_cache": False}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory):
    return make_template(tmp_path_factory.mktemp("measure"), "mm_measure")


@pytest.fixture(scope="module")
def runner():
    r = runners.make_runner(FAST)
    yield r
    r.close()


def test_only_the_x86_intrinsics_are_imported() -> None:
    from tvmtune_ci.tune import tvmsetup

    tvmsetup.load()
    from tvm.s_tir import TensorIntrin

    assert tvmsetup.intrinsics_stubbed()
    assert TensorIntrin.get("dot_16x4_vnni") is not None
    assert "tvm.s_tir.tensor_intrin.x86" in sys.modules
    assert "tvm.s_tir.tensor_intrin.cuda" not in sys.modules

    assert "tvm.s_tir.tensor_intrin.cuda" not in sys.modules


def test_correct_template_passes(template) -> None:
    numerics.check_correct(template, "m64", TARGET)
    numerics.check_correct(template, "m64", TARGET, GOOD)
    numerics.check_correct(template, "m32", TARGET)  # non-square, K=16


def test_wrong_reference_names_the_error(tmp_path: Path) -> None:
    wrong = make_template(tmp_path, "mm_t", reference="A @ B.T")
    with pytest.raises(TuningError) as info:
        numerics.check_correct(wrong, "m64", TARGET)
    msg = str(info.value)
    assert "mm_t workload 'm64'" in msg and "the default configuration does not match reference()" in msg
    assert "max abs error" in msg and "max rel error" in msg and "first mismatches: [" in msg
    assert "fix compute(), reference() or schedule()" in msg


def test_a_reference_with_its_inputs_swapped_gets_the_order_and_a_hint(tmp_path: Path) -> None:
    """The inputs go to reference() in the PrimFunc's parameter order; the error names
    that order and, when swapping two same-shaped inputs would match, says so. The
    template is named by its file, not the module name tvmtune-ci imports it under."""
    from tvmtune_ci.core.template import import_template

    path = write_template(tmp_path, "mm_swapped", reference="B @ A")
    wrong = import_template(path, tmp_path)
    with pytest.raises(TuningError) as info:
        numerics.check_correct(wrong, "m64", TARGET)
    msg = str(info.value)
    assert msg.startswith("mm_swapped.py workload 'm64'"), msg
    assert "_tvmtune_template_" not in msg
    assert "output C (float32[64, 64])" in msg
    assert "reference(A, B) was given compute()'s inputs in the PrimFunc's parameter order: A, B" in msg
    assert "swapping A and B makes them match" in msg
    # No hint where no swap helps.
    plain = import_template(write_template(tmp_path, "mm_t2", reference="A @ B.T"), tmp_path)
    with pytest.raises(TuningError) as info:
        numerics.check_correct(plain, "m64", TARGET)
    assert "swapping" not in str(info.value)


def test_a_replay_computes_the_reference_once_and_a_reference_may_write_its_inputs(tmp_path: Path) -> None:
    """A history replay checks ten or more configurations of one workload: reference()
    runs once on the seeded inputs, not once per configuration. It runs on copies, so
    one that writes into its inputs (here: zeroes A after using it) neither makes the
    kernel see other inputs nor spoils the next check."""
    from tvmtune_ci.core.template import import_template

    path = write_template(tmp_path, "mm_counted", reference="_count(A, B)")
    path.write_text(
        path.read_text() + "\n\nCALLS = []\n\n\ndef _count(A, B):\n"
        "    CALLS.append(1)\n    C = A @ B\n    A[...] = 0\n    return C\n"
    )
    counted = import_template(path, tmp_path)
    numerics.check_correct(counted, "m64", TARGET)
    numerics.check_correct(counted, "m64", TARGET, GOOD)
    numerics.check_correct(counted, "m64", TARGET, {**GOOD, "unroll": 0})
    assert len(counted.CALLS) == 1
    numerics.check_correct(counted, "m32", TARGET)  # another workload: its own inputs
    numerics.check_correct(counted, "m64", TARGET, seed=1)  # other inputs
    assert len(counted.CALLS) == 3


def test_reference_with_wrong_arity(tmp_path: Path) -> None:
    bad = make_template(tmp_path, "mm_arity", reference="(A @ B, A @ B)")
    with pytest.raises(TemplateError, match="returned 2 array"):
        numerics.check_correct(bad, "m64", TARGET)


def test_a_failing_schedule_is_a_template_error(tmp_path: Path) -> None:
    bad = make_template(tmp_path, "mm_sched", extra='sch.get_sblock("no_such_block")\n')
    with pytest.raises(TemplateError, match=r"mm_sched: schedule\(\) failed for workload 'm64'"):
        numerics.check_correct(bad, "m64", TARGET)


def test_tolerance_per_dtype() -> None:
    assert numerics.tolerance("float32") == (1e-4, 1e-4)
    assert numerics.tolerance("float16")[0] > numerics.tolerance("float32")[0]
    assert numerics.tolerance("int32") == (0.0, 0.0)


def test_mismatch_report_counts_nan_as_mismatch() -> None:
    want = np.ones((2, 3), "float32")
    got = want.copy()
    assert numerics.mismatch_report("out", got, want, 1e-4, 1e-4) is None
    got[1, 2] = np.nan
    got[0, 0] = 3.0
    msg = numerics.mismatch_report("out", got, want, 1e-4, 1e-4)
    assert msg and "2 of 6 elements differ" in msg and "[0, 0]: got 3" in msg


def test_measure_config_fills_defaults(template, runner) -> None:
    m = measure.measure_config(template, "m64", TARGET, {"tile_j": [2, 32]}, FAST, runner=runner)
    assert m.knobs == {"tile_i": [64, 1], "tile_j": [2, 32], "tile_k": [64, 1], "unroll": 0, "write_cache": True}
    assert 0 < m.latency_s < 1 and m.gflops and m.gflops > 0
    assert runner.timings and runner.timings[-1].eval_s > 0


def test_bad_knob_values_are_rejected(template) -> None:
    with pytest.raises(TemplateError, match="product is 64"):
        split_knobs(template, "m64", {"tile_i": [8, 4]})
    with pytest.raises(TemplateError, match="not one of"):
        split_knobs(template, "m64", {"unroll": 7})
    with pytest.raises(TemplateError, match="unknown knob"):
        split_knobs(template, "m64", {"tile_x": [8, 8]})


def test_noise_check_samples_on_and_refuses_only_an_unusable_runner(template, runner) -> None:
    base = measure.measure_baseline(template, "m64", TARGET, FAST, runner=runner)
    assert base.knobs["tile_i"] == [64, 1] and base.n >= 11
    assert base.ci_lo_s <= base.latency_s <= base.ci_hi_s
    # It asks for the search's precision, not the finals': a `precision` no runner
    # reaches neither slows it nor warns (a slow default sampled toward ±1% held back
    # the first trial 9-14 s).
    warned: list[str] = []
    finals_tight = replace(FAST, precision=1e-9, search_precision=0.5, time_cap_s=1.0)
    quick = measure.measure_baseline(template, "m64", TARGET, finals_tight, runner=runner, warn=warned.append)
    assert not warned and quick.stopped == "converged" and quick.n < 40, (quick, warned)
    # A search precision no runner reaches: a warning, and the search goes on while the
    # runner is usable (more samples of the default would only delay the first trial)...
    tight = replace(FAST, search_precision=1e-9, usable_precision=0.9, time_cap_s=0.2)
    noisy = measure.measure_baseline(template, "m64", TARGET, tight, runner=runner, warn=warned.append)
    assert noisy.n >= 11 and warned and "noisy runner" in warned[0], warned
    assert "measure.search_precision" in warned[0] and "tuning goes on" in warned[0]
    # ...past usable_precision it samples on (NOISY_EXTRA more time caps), then, still
    # out of reach, refuses, with the precision reached and how to get a quieter run.
    hopeless = replace(tight, usable_precision=1e-9)
    with pytest.raises(TuningError, match=r"runner too noisy: .* reached only ±[0-9.]+%") as info:
        measure.measure_baseline(template, "m64", TARGET, hopeless, runner=runner, warn=warned.append)
    assert "measuring on with more samples" in warned[-1]
    assert "measure.time_cap_s" in str(info.value) and "idle runner" in str(info.value)
    n = int(re.search(r"in (\d+) samples", str(info.value)).group(1))
    assert n > 2 * noisy.n, (n, noisy.n)  # 1 + NOISY_EXTRA time caps against 1


def test_adaptive_sampling_stops_at_the_precision_or_the_cap(template, runner) -> None:
    loose = measure.measure_config(
        template,
        "m64",
        TARGET,
        GOOD,
        FAST,
        runner=runner,
        policy=sampling.SamplePolicy(sample_ms=2, precision=0.5, cap_s=5.0),
    )
    # ±50% is reached with the fewest samples an interval needs.
    assert loose.n == stats.MIN_SAMPLES + 1  # chunks of 3: 12 samples
    capped = measure.measure_config(
        template,
        "m64",
        TARGET,
        GOOD,
        FAST,
        runner=runner,
        policy=sampling.SamplePolicy(sample_ms=2, precision=1e-9, cap_s=0.3),
    )
    # 0.3 s of >= 2 ms samples: far more samples, never converged.
    assert 40 <= capped.n <= 400


def test_racing_stops_a_clearly_slower_candidate_after_its_probe(template, runner) -> None:
    fast = measure.measure_config(template, "m64", TARGET, GOOD, FAST, runner=runner)
    # The default configuration is far slower than GOOD: raced out after 3 samples.
    raced = measure.measure_config(
        template,
        "m64",
        TARGET,
        None,
        FAST,
        runner=runner,
        policy=sampling.search_policy(FAST, race_above_s=1.25 * fast.latency_s),
    )
    assert raced.n == FAST.probe
    # A threshold it does not exceed: sampled on as a contender.
    kept = measure.measure_config(
        template, "m64", TARGET, None, FAST, runner=runner, policy=sampling.search_policy(FAST, race_above_s=1e3)
    )
    assert kept.n >= stats.MIN_SAMPLES


def test_finals_interleave_and_rank(template, runner) -> None:
    from tvmtune_ci.tune.builder import make_builder

    builder = make_builder()
    try:
        out = measure.finals(
            template,
            "m64",
            TARGET,
            [
                measure.Finalist("search", GOOD, "good"),
                measure.Finalist("default", None, "default"),
                measure.Finalist("previous", {"tile_i": [8, 4]}, "bad"),
            ],
            FAST,
            runner=runner,
            builder=builder,
        )
    finally:
        builder.close()
    good, default, bad = out
    assert bad.estimate is None and "product is 64" in str(bad.error)
    assert good.estimate is not None and default.estimate is not None
    assert stats.compare(good.estimate, default.estimate) == "faster"
    # Each finalist got its samples in rounds of 3 (interleaved), at least an interval's worth.
    assert len(good.samples) % 3 == 0 and len(good.samples) >= stats.MIN_SAMPLES


def test_build_config_computes_the_reference(template) -> None:
    ex = build_config(template, "m64", TARGET, GOOD)
    import tvm

    a = np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype("float32")
    b = np.random.default_rng(1).uniform(-1, 1, (64, 64)).astype("float32")
    c = tvm.runtime.empty((64, 64), "float32", tvm.cpu())
    ex["main"](tvm.runtime.tensor(a, tvm.cpu()), tvm.runtime.tensor(b, tvm.cpu()), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_a_crashing_or_slow_kernel_is_a_failed_run_not_a_crash(template) -> None:
    # One sample of 3 s, killed after 1 s.
    opts = MeasureOptions(sample_ms=3000, time_cap_s=40, search_cap_s=40, timeout_s=1)
    slow = runners.make_runner(opts)
    try:
        with pytest.raises(TuningError, match="timeout"):
            measure.measure_config(template, "m64", TARGET, None, opts, runner=slow)
        # The worker was killed; the next measurement restarts it.
        assert measure.measure_config(template, "m64", TARGET, None, FAST, runner=slow).latency_s > 0
    finally:
        slow.close()


def test_rpc_runner_needs_a_tracker() -> None:
    from rpcfleet import free_port

    port = free_port()
    with pytest.raises(DeviceError, match=f"cannot reach the RPC tracker at 127.0.0.1:{port}"):
        runners.make_runner(FAST, RpcRunner(tracker=f"127.0.0.1:{port}", key="x"))


@pytest.mark.parametrize(
    ("measure_yaml", "message"),
    [
        ("{precision: 0}", "tvmtune.yaml:4: measure.precision is 0.0, it must be a fraction between 0 and 1"),
        ("{time_cap_s: 0.05}", "tvmtune.yaml:4: measure.time_cap_s (0.05s) is shorter than the 11 samples"),
        ("{sample_ms: 100, search_cap_s: 0.4}", "measure.search_cap_s (0.4s) is shorter than the 11 samples"),
        ("{timeout_s: 2}", "measure.timeout_s (2s) would kill a measurement before its time_cap_s"),
        ("{precision: 0.3}", "measure.precision (0.3) is looser than measure.usable_precision"),
        ("{race: 0.9}", "measure.race is 0.9, it must be at least 1"),
        ("{repeat: 5}", "measure.repeat is gone: measurement is adaptive now"),
        ("{max_cv: 0.03}", "measure.max_cv is gone"),
    ],
)
def test_a_measurement_option_that_cannot_work_exits_2_with_the_line(
    tmp_path: Path, measure_yaml: str, message: str
) -> None:
    from conftest import run_cli

    (tmp_path / "tvmtune.yaml").write_text(
        "format: 1\ntargets:\n  cpu: {target: {kind: llvm}}\nmeasure: " + measure_yaml + "\n"
    )
    (tmp_path / "operators").mkdir()
    r = run_cli(tmp_path, "check")
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr, r.stderr
    assert "; " in r.stderr.split(message)[1]  # and the fix


def test_the_estimator_and_its_interval() -> None:
    # The ranks: binomial coverage of the lower quartile, exact.
    assert stats.quantile_ci_ranks(10) is None and stats.quantile_ci_ranks(11) == (1, 7)
    assert stats.quantile_ci_ranks(100) == (17, 34)
    # Additive noise: the lower quartile stays with the quiet samples when a third
    # of them is slowed down, where the mean and the median move.
    quiet = [1.0 + 0.001 * i for i in range(20)]
    noisy = quiet[:14] + [3.0] * 6
    assert abs(stats.estimate(noisy).value - stats.estimate(quiet).value) < 0.01
    e = stats.estimate(noisy)
    assert e.lo <= e.value <= e.hi and e.n == 20
    assert stats.estimate([1.0] * 5).rel_halfwidth == float("inf")  # too few for an interval
    a = stats.Estimate(1.0, 0.99, 1.01, 30)
    assert stats.compare(a, stats.Estimate(1.1, 1.05, 1.12, 30)) == "faster"
    assert stats.compare(a, stats.Estimate(1.005, 1.0, 1.02, 30)) == "equal"
    assert stats.fmt_latency(stats.Estimate(4.455e-3, 4.43e-3, 4.48e-3, 40)) == "4.455 ms ± 0.6%"
