"""The run history (runs.py): its file, its band, and the drift verdict's rules.

The rules on synthetic series here; on real kernels measured by `remeasure` in
tests/commands/test_retune.py (its remeasure section); on the study's measured values in
benchmarks/study_drift.py (docs/measurement.md).
"""

from __future__ import annotations

import json

import pytest

from tvmtune_ci.core import runs
from tvmtune_ci.core.errors import CorruptFileError
from tvmtune_ci.publish import runwords


def kf(p25: float) -> runs.KernelFigure:
    return runs.KernelFigure(p25, p25 * 0.99, p25 * 1.01, 33, p25 * 0.98, p25 * 1.3)


def run(i: int, best: float) -> runs.Run:
    return runs.Run(
        f"2026-12-{1 + i // 24:02d}T{i % 24:02d}:00:00Z",
        "remeasure",
        {"cpu": "Test CPU", "cores": 2},
        "0.27.0",
        90.0,
        {"w": kf(best)},
        {"compute": kf(0.3), "memory": kf(3.0)},
        1,
    )


def pts(values: list[float]) -> list[tuple[str, float]]:
    return [(f"2026-12-01T00:00:{i:02d}Z", v) for i, v in enumerate(values)]


def test_a_history_round_trips_and_lines_are_appended_byte_for_byte() -> None:
    history = [run(0, 1.0), run(1, 1.01)]
    data = runs.encode_runs(history)
    assert runs.parse_runs(data, "runs.jsonl") == history
    more = data + run(2, 0.99).line()
    assert more.startswith(data) and len(runs.parse_runs(more, "runs.jsonl")) == 3
    assert runs.value(history[0], "w") == pytest.approx(0.98)  # the fastest stretch
    assert runs.value(history[0], "w", "fast_vs_compute") == pytest.approx(0.98 / 0.294)
    assert runs.value(history[0], "missing") is None


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d.replace(b'"n":33', b'"n":0', 1), ":1: not a run record (line 1.calibration.compute.n is 0"),
        (lambda d: d + b'{"format": 9}\n', ":3: not a run record (line 3.format is 9"),
        (lambda d: d[:-1], "its last line is cut short"),
        (lambda d: d.replace(b'"p25_s":1.0', b'"p25_s":-1', 1), "p25_s is -1, expected a positive number"),
    ],
)
def test_a_hand_edited_history_names_the_line_and_the_fix(edit, words: str) -> None:  # noqa: ANN001
    data = runs.encode_runs([run(0, 1.0), run(1, 1.0)])
    with pytest.raises(CorruptFileError) as e:
        runs.parse_runs(edit(data), "tuning_logs/x/y/runs.jsonl")
    assert words in str(e.value) and "restore it from git" in str(e.value)


def test_the_band_is_the_largest_distance_from_the_median() -> None:
    band = runs.band_of(pts([1.0, 1.02, 0.97, 1.01]))
    assert band is not None and band.median == pytest.approx(1.005)
    assert band.halfwidth == pytest.approx(0.035 / 1.005)
    assert band.runs == 4


def test_too_short_a_history_is_inconclusive_and_says_how_many_more() -> None:
    for n in range(1, runs.MIN_REF + runs.PERSIST):
        v = runs.judge("w", pts([1.0] * n))
        assert v.state == "inconclusive" and not v.drifted
        need = runs.MIN_REF + runs.PERSIST - n
        # The state is printed before the sentence (remeasure.describe): not in it again.
        assert v.sentence.startswith(f"{need} more run"), v.sentence


def test_a_change_far_beyond_any_band_is_reported_at_once() -> None:
    v = runs.judge("w", pts([1.0, 1.4]))
    assert v.drifted and v.direction == "slower" and "reported at once" in v.sentence
    assert runs.judge("w", pts([1.0, 1.2])).state == "inconclusive"
    assert runs.judge("w", pts([1.0, 0.6])).direction == "faster"


def test_a_far_run_on_a_runner_that_was_as_far_off_is_not_reported_at_once() -> None:
    """One run 40% slower, and the compute-bound calibration kernel 35% slower in the same
    run: the runner was slow, not the kernel; the persistence rule decides instead."""
    kernel = pts([1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 1.4])
    cal = {"compute": pts([2.0, 2.0, 2.02, 1.98, 2.0, 2.0, 2.7]), "memory": pts([3.0] * 7)}
    v = runs.judge("w", kernel, runner=cal)
    assert v.state == "inconclusive" and "compute-bound calibration kernel" in v.sentence
    assert "the runner, not the kernel" in v.sentence
    # The calibration kernels steady (or off the other way): the kernel changed.
    assert runs.judge("w", kernel, runner={"compute": pts([2.0] * 7)}).drifted
    assert runs.judge("w", kernel, runner={"compute": pts([2.0] * 6 + [1.5])}).drifted
    # Off as far as the kernel, and three runs in a row beyond a band: still drift.
    long = pts([1.0, 1.01, 0.99, 1.0, 1.02, 1.3, 1.31, 1.4])
    assert runs.judge("w", long, runner={"compute": pts([2.0] * 7 + [2.7])}).drifted


def test_noise_inside_the_band_is_stable() -> None:
    v = runs.judge("w", pts([1.0, 1.03, 0.98, 1.01, 1.0, 1.02, 0.99, 1.03]))
    assert v.state == "stable" and "within the band" in v.sentence and v.band is not None


def test_a_persistent_change_beyond_the_band_is_drift_and_one_odd_run_is_not() -> None:
    ref = [1.0, 1.02, 0.98, 1.01, 1.0]
    assert runs.judge("w", pts([*ref, 1.15, 1.16, 1.14])).drifted
    v = runs.judge("w", pts([*ref, 1.15, 1.16, 1.14]))
    assert v.direction == "slower" and "last 3 runs are all slower" in v.sentence
    # One run of three back inside: not persistent.
    assert not runs.judge("w", pts([*ref, 1.15, 1.0, 1.14])).drifted
    # Beyond the ±2% band but not beyond MIN_CHANGE (5%): not a drift worth a failed job.
    assert not runs.judge("w", pts([*ref, 1.04, 1.045, 1.04])).drifted
    # A wide band: a change must pass MARGIN x the band.
    wide = [1.0, 1.10, 0.92, 1.05, 1.0]
    assert not runs.judge("w", pts([*wide, 1.09, 1.09, 1.09])).drifted
    assert runs.judge("w", pts([*wide, 1.12, 1.13, 1.12])).drifted
    assert runs.judge("w", pts([*ref, 0.85, 0.86, 0.84])).direction == "faster"


def test_a_latest_run_beyond_the_band_is_not_called_within_it_until_the_next_runs_tell() -> None:
    """bench_drift, Zen 3: a swapped-in 1.12x kernel read 1.21x and 1.20x the band's
    median, and the verdict said "stable: within the band". Beyond it, not yet for
    PERSIST runs: inconclusive (exit 0), saying how many more runs tell."""
    ref = [1.0, 1.02, 0.98, 1.01, 1.0, 1.01, 0.99]
    one = runs.judge("w", pts([*ref, 1.21]))
    assert one.state == "inconclusive" and not one.drifted and one.ratio == pytest.approx(1.21 / 1.0)
    assert one.sentence.startswith("beyond the band in the last run: now 1.210x (slower) the median")
    assert one.sentence.endswith("a change must last 3 runs: 2 more runs will tell"), one.sentence
    two = runs.judge("w", pts([*ref, 1.21, 1.20]))
    assert two.state == "inconclusive" and "in the last 2 runs" in two.sentence
    assert two.sentence.endswith("1 more run will tell")
    assert runs.judge("w", pts([*ref, 1.21, 1.20, 1.15])).drifted
    back = runs.judge("w", pts([*ref, 1.21, 1.20, 1.0]))
    assert back.state == "stable" and back.sentence.startswith("within the band")
    faster = runs.judge("w", pts([*ref, 0.8]))
    assert faster.state == "inconclusive" and "(faster)" in faster.sentence


def test_the_verdict_and_the_run_serialise() -> None:
    v = runs.judge("w", pts([1.0, 1.02, 0.98, 1.01, 1.0, 1.15, 1.16, 1.14]))
    d = json.loads(json.dumps(v.to_json()))
    assert d["state"] == "drift" and d["band"]["runs"] == 5


def test_the_headline_is_the_median_over_the_runs_with_their_spread() -> None:
    history = [run(i, 1.0 + 0.01 * (i % 3)) for i in range(8)]
    value, words = runwords.headline(history[:2], "w")
    assert value == pytest.approx(0.98 * 1.005) and words == "2 runs; the band is known after 6 more"
    value, words = runwords.headline(history, "w")
    assert value == pytest.approx(0.98 * 1.01)
    assert words.startswith("runs spread ±") and "(8 runs, 2026-12-01 to 2026-12-01)" in words
    assert runwords.headline([], "w") == (None, "no run yet")
    table = runwords.history_table(history, ["w"])
    assert len(table) == 4 + 8 and "Test CPU x2" in table[-1] and "compute calibration" in table[2]
    noise = runwords.runner_band(history)
    assert noise is not None and "compute-bound calibration kernel 294 ms (±0.0% over 8 runs" in noise
    assert "up to 1.33x its fastest" in noise


def test_the_headline_divides_the_runners_own_speed_out() -> None:
    """The Zen 4's hour (docs/measurement.md): the whole runner slowed by ~5% in its last
    runs, the compute calibration kernel with every kernel, and the absolute figure left
    the band its first runs had published. At the runner's usual speed (the figure over
    the calibration kernel measured in turns with it, times that kernel's median) the
    slowdown is divided out; the band says how far the absolute figure spread too, and
    a target without calibration kernels publishes the absolute figure."""

    def at(i: int, best: float, cal: float) -> runs.Run:
        r = run(i, best)
        return runs.Run(r.at, r.by, r.host, r.tvm, r.window_s, r.workloads, {"compute": kf(cal), "memory": kf(3.0)}, 1)

    history = [at(i, 1.0 + 0.005 * (i % 2), 0.3) for i in range(8)]
    history += [at(i, 1.05 * (1.0 + 0.005 * (i % 2)), 0.3 * 1.05) for i in range(8, 13)]
    value, words = runwords.headline(history, "w")
    assert value == pytest.approx(0.98, rel=1e-3)  # the fastest stretch at the usual speed
    assert words.startswith("runs spread ±0.5% (13 runs,"), words
    assert "as measured, without the runner's speed divided out: ±5.0%" in words
    assert runs.band_of(runs.series(history, "w")).halfwidth > 0.04  # the absolute figure
    # `status` shows the band of the same series as the README's headline.
    assert runs.band_of(runs.headline_series(history, "w")).halfwidth == pytest.approx(0.005, rel=0.01)
    # No calibration kernels (a target without them): the absolute figure, no second band.
    bare = [runs.Run(r.at, r.by, r.host, r.tvm, r.window_s, r.workloads, {}, 0) for r in history]
    value, words = runwords.headline(bare, "w")
    assert value == pytest.approx(runs.band_of(runs.series(bare, "w")).median)
    assert "as measured" not in words and words.startswith("runs spread ±5.0%")


def test_a_new_run_is_read_against_the_readmes_headline_and_band() -> None:
    """What `remeasure` prints for a reader checking the README: the new run's figure at
    the runner's usual speed of the runs before it, against their headline and band."""

    def at(i: int, best: float, cal: float) -> runs.Run:
        r = run(i, best)
        return runs.Run(r.at, r.by, r.host, r.tvm, r.window_s, r.workloads, {"compute": kf(cal), "memory": kf(3.0)}, 1)

    before = [at(i, 1.0 + 0.01 * (i % 3), 0.3) for i in range(8)]  # headline 0.9898, ±1.0%
    said = runwords.against_headline(before, at(8, 1.05, 0.3 * 1.05), "w")  # the runner 5% slower
    assert said is not None and said.startswith("at the runner's usual speed 980 ms, 0.990x")
    assert said.endswith("inside its band (±1.0%, 8 runs)"), said
    said = runwords.against_headline(before, at(8, 1.05, 0.3), "w")  # the kernel 5% slower
    assert said is not None and "1.040x" in said and "outside its band" in said, said
    said = runwords.against_headline(before[:3], at(3, 1.0, 0.3), "w")
    assert said is not None and said.endswith("(it rests on 3 runs: no band yet)"), said
    assert runwords.against_headline([], at(0, 1.0, 0.3), "w") is None
    # A run without the compute calibration kernel cannot divide the runner's speed out:
    # its figure as measured is not compared with a headline at the usual speed.
    bare = runs.Run(before[0].at, "remeasure", before[0].host, "0.27.0", 90.0, {"w": kf(1.05)}, {"memory": kf(3.0)}, 1)
    said = runwords.against_headline(before, bare, "w")
    assert said is not None and said.startswith("as measured 1.029 s; not compared"), said


def test_faster_runs_the_runners_speed_explains_are_no_drift_but_a_faster_kernel_is() -> None:
    """As on a Zen 4 (zen4-avx2-2c, 2026-12-03): half the reference runs in a whole-run
    slow mode (the kernel and the compute calibration kernel 1.25x) put the median
    between the modes; three runs at the usual speed then read faster than the band.
    Over the calibration kernel the kernel did not move: stable, saying why. A kernel
    that got faster with the runner as usual is still a drift; a slower one always is."""

    def judged(kernel: list[float], cal: list[float]) -> runs.Verdict:
        pts = [(f"2026-12-03T{i:02d}:00:00Z", v) for i, v in enumerate(kernel)]
        return runs.judge("w", pts, runner={"compute": [(at, c) for (at, _), c in zip(pts, cal, strict=True)]})

    slow = 1.25
    ref = [1.0, slow, 1.02, 1.24, 1.01, 1.26, 1.03, slow]
    ref_cal = [0.3 * (v if v > 1.2 else 1.0) for v in ref]
    v = judged(ref + [0.98, 0.985, 0.98], ref_cal + [0.3] * 3)
    assert v.state == "stable" and v.ratio is not None and v.ratio < 0.88, v
    assert "and so was the runner: over the compute calibration kernel" in v.sentence, v.sentence
    v = judged(ref + [0.85, 0.86, 0.85], ref_cal + [0.3] * 3)
    assert v.state == "drift" and v.direction == "faster", v
    v = judged(ref + [1.5, 1.5, 1.5], ref_cal + [0.375] * 3)  # the runner slower: still drift
    assert v.state == "drift" and v.direction == "slower", v


def test_a_runner_noisier_than_the_effects_judged_on_it_is_warned_about_with_fixes() -> None:
    quiet = [run(i, 1.0 + 0.01 * (i % 3)) for i in range(8)]  # ±1%, calibration modes 1.33x
    assert runwords.noise_warning(quiet, ["w"], search_precision=0.5) is None
    # Across runs: a band wider than the smallest drift reported (5%).
    wide = [run(i, 1.0 + 0.15 * (i % 2)) for i in range(8)]  # ±7%
    w = runwords.noise_warning(wide, ["w"], search_precision=0.5)
    assert w is not None and "spread ±" in w and "smallest drift remeasure reports (5%)" in w
    assert "isolcpus" in w and "dedicated runner" in w and "governor" in w
    # Too few runs for a band: only the within-run modes can speak.
    assert runwords.noise_warning(wide[:5], ["w"], search_precision=0.5) is None
    # Within a run: speed modes (calibration slowest/fastest stretch 1.33x) beyond the
    # search's precision.
    w = runwords.noise_warning(quiet[:2], ["w"], search_precision=0.03)
    assert w is not None and "1.33x" in w and "search's precision (±3%)" in w
    assert "spread ±" not in w


def test_a_run_the_runner_disturbed_is_left_out_of_the_band_and_the_verdict() -> None:
    """The re-tune measured while other jobs shared the runner: every kernel 2x slow, the
    calibration kernel too. It says how busy the runner was, not how fast the kernel is."""
    from tvmtune_ci.pipeline.remeasure import judge_history

    def with_cal(i: int, best: float, cal: float) -> runs.Run:
        r = run(i, best)
        return runs.Run(r.at, r.by, r.host, r.tvm, r.window_s, r.workloads, {"compute": kf(cal), "memory": kf(3.0)}, 1)

    history = [with_cal(0, 2.0, 0.6)] + [with_cal(i, 1.0 + 0.01 * (i % 3), 0.3) for i in range(1, 9)]
    assert list(runs.disturbed(history)) == [history[0].at]
    assert "compute-bound calibration kernel ran 2.000x (slower)" in runs.disturbed(history)[history[0].at]
    value, spread = runwords.headline(history, "w")
    assert value == pytest.approx(0.98 * 1.01) and "±1.0%" in spread  # the 2x run is not in the band
    v = judge_history(history, "w")
    assert v.state == "stable" and v.band is not None and v.band.halfwidth < 0.02
    assert "1 run left out: the runner was disturbed" in v.sentence
    # Without the calibration's word, the same history has a band of about ±100%.
    assert runs.band_of(runs.series(history, "w")).halfwidth > 0.9
    # A slowdown of the kernel alone (calibration steady) is never left out.
    slow = history + [with_cal(i, 1.3, 0.3) for i in range(9, 12)]
    assert judge_history(slow, "w").drifted


def test_a_disturbed_latest_run_still_reports_a_far_change_its_calibration_does_not_explain() -> None:
    """CI, a Zen 5: the committed best swapped for the default (60x slower), and in the same
    run the memory-bound calibration kernel ran 0.6x its median (faster: bimodal there).
    When that whole run was left out as disturbed, the swap went unseen. A faster runner
    does not explain a slower kernel: the kernel's figure stays in, reported at once. The
    same run with the kernel unchanged stays in too (the runner's move did not touch it)."""
    from tvmtune_ci.pipeline.remeasure import judge_history

    def with_mem(i: int, best: float, mem: float) -> runs.Run:
        r = run(i, best)
        return runs.Run(r.at, r.by, r.host, r.tvm, r.window_s, r.workloads, {"compute": kf(0.3), "memory": kf(mem)}, 1)

    steady = [with_mem(i, 1.0 + 0.01 * (i % 3), 3.0) for i in range(8)]
    swapped = [*steady, with_mem(8, 60.0, 1.8)]
    assert list(runs.disturbed(swapped)) == [swapped[-1].at]  # the runner was disturbed
    assert runs.disturbed(swapped, "w") == {}  # but it does not explain w's figure
    v = judge_history(swapped, "w")
    assert v.drifted and v.direction == "slower" and "reported at once" in v.sentence, v.sentence
    assert "the runner was disturbed in the latest run" in v.sentence
    assert "which does not explain this kernel's figure" in v.sentence
    same = [*steady, with_mem(8, 1.01, 1.8)]
    assert runs.disturbed(same, "w") == {}
    v = judge_history(same, "w")
    assert v.state == "stable" and v.runs == 9 and "left out" not in v.sentence
    # The runner as slow as the kernel (the memory-bound kernel 60x too): not the kernel.
    both = [*steady, with_mem(8, 60.0, 180.0)]
    assert list(runs.disturbed(both, "w")) == [both[-1].at]
    v = judge_history(both, "w")
    assert not v.drifted and "1 run left out: the runner was disturbed" in v.sentence


def test_a_disturbed_run_is_left_out_only_for_the_workloads_it_moved() -> None:
    """One run in which the runner was 1.5x slow: the parallel kernel it slowed with it is
    left out of that kernel's band; a kernel it did not slow keeps its measurement; the
    README's history table marks the left-out cell, and says the runner was disturbed."""

    def two(i: int, a: float, b: float, cal: float) -> runs.Run:
        r = run(i, a)
        return runs.Run(
            r.at, r.by, r.host, r.tvm, r.window_s, {"a": kf(a), "b": kf(b)}, {"compute": kf(cal), "memory": kf(3.0)}, 1
        )

    history = [
        two(i, 1.5, 2.01, 0.45) if i == 4 else two(i, 1.0 + 0.01 * (i % 3), 2.0 + 0.02 * (i % 2), 0.3) for i in range(9)
    ]
    hit = history[4].at
    assert list(runs.disturbed(history)) == [hit]
    assert list(runs.disturbed(history, "a")) == [hit]
    assert runs.disturbed(history, "b") == {}
    assert [at for at, _ in runs.steady_series(history, "a")] == [r.at for r in history if r.at != hit]
    assert len(runs.steady_series(history, "b")) == 9
    assert "1 left out" in runwords.headline(history, "a")[1]
    assert "left out" not in runwords.headline(history, "b")[1]
    (row,) = [line for line in runwords.history_table(history, ["a", "b"]) if line.startswith(f"| {hit}")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert "runner disturbed: the compute-bound calibration kernel ran 1.500x (slower)" in cells[1]
    assert cells[3].endswith("(left out)") and not cells[4].endswith("(left out)")


def test_one_kind_of_runner_is_one_cpu_model_cores_and_where_recorded_family_and_model() -> None:
    """VMs of three AMD generations all call their CPU "AMD EPYC"; a Zen 4's history says
    nothing of a Zen 5. Histories written before the family and model were recorded
    compare by name and cores."""
    zen4 = {"cpu": "AMD EPYC", "cores": 2, "cpu_id": "AuthenticAMD family 25 model 17"}
    zen5 = {**zen4, "cpu_id": "AuthenticAMD family 26 model 2"}
    older = {"cpu": "AMD EPYC", "cores": 2}
    assert runs.same_machine(zen4, dict(zen4)) and runs.same_machine(older, zen5)
    assert not runs.same_machine(zen4, zen5)
    assert not runs.same_machine(older, {**older, "cores": 4})
    assert not runs.same_machine(older, {**older, "cpu": "Intel Xeon"})
    assert runs.machine_words(zen5) == "AMD EPYC (AuthenticAMD family 26 model 2) x2"
    assert runs.machine_words(older) == "AMD EPYC x2"
