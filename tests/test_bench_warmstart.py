"""benchmarks/bench_warmstart.py's report: each to-quality reading its own median."""

from __future__ import annotations

import math

import pytest

from benchmarks import bench_warmstart as bw
from benchmarks._common import against_spread, side_passes
from tvmtune_ci.core.stats import Estimate


def _e(ms: float, rel: float) -> Estimate:
    """An estimate of `ms` milliseconds with a 95% half-width of `rel`."""
    return Estimate(ms * 1e-3, ms * 1e-3 * (1 - rel), ms * 1e-3 * (1 + rel), 40)


def _arm(s: float, **t: float | None) -> dict:
    """One run: wall seconds `s`, 32 trials, and its trials to cold's quality per reading
    (tq on the curves, tq2 side by side, tq3 within the noise), their seconds pro rata."""
    out: dict = {"s": s, "run": 32, "best": 1.0, "best_lo": 0.99, "best_hi": 1.01, "correct": 10, "incumbents": 4}
    for key in ("tq", "tq2", "tq3"):
        trial = t.get(key)
        out[key] = trial
        out["s" + key[1:]] = s * trial / 32 if trial else math.nan
    return out


def test_the_report_gives_each_side_by_side_reading_its_own_median(capsys: pytest.CaptureFixture[str]) -> None:
    row = {
        "n": 2,
        "edit": "dense-from-another-target",
        "what": "no edit",
        "entry": "dense/bert_ffn1",
        "mapped": 10,
        "whole": 0,
        "prior": 97,
        "arms": {
            "cold@0": _arm(40.0, tq=8, tq2=8, tq3=8),
            "cold@1": _arm(40.0, tq=16, tq2=16, tq3=4),
            "prior@0": _arm(40.0, tq=2, tq2=4, tq3=2),
            "prior@1": _arm(40.0, tq=4, tq2=None, tq3=2),
        },
    }
    bw.report([row], ["cold", "prior"], 2)
    out = capsys.readouterr().out
    # Side by side: seed 0 4/8, seed 1 never (counted as slower than any): median inf.
    assert "to cold's quality side by side (the slowest" in out
    assert (
        "seconds prior/cold median inf over 2 pairs, a run that never reached it counted as slower than any; 1 never did"
        in out
    )
    # Within the noise: 2/8 and 2/4; over cold's whole runs' 40 s, 2.5/40 both.
    assert "to cold's quality side by side, equal within the noise counted (the slowest" in out
    assert (
        "seconds prior/cold median 0.38 over 2 pairs, a run that never reached it counted as slower than any; "
        "0 never did; over cold's whole run's seconds, median 0.06" in out
    )
    # Side by side over the whole runs: 5/40, and never.
    assert "1 never did; over cold's whole run's seconds, median inf" in out


def test_a_best_beyond_cold_s_spread_only_on_its_point_figure_is_not_a_regression() -> None:
    """The second side-by-side pass: cold's seeds agreed within 0.7%, the seeded runs'
    one best measured 1.025x cold's at +-6.4% in a noisy stretch. That is beyond cold's
    spread on the point figure, not beyond the noise; the same best at +-0.5% is."""
    cold = [_e(10.6, 0.008), _e(10.52, 0.009), _e(10.53, 0.009)]
    wide = against_spread([_e(10.79, 0.064)] * 3, cold)
    assert wide.spread == pytest.approx(10.6 / 10.52)
    assert wide.ratio == pytest.approx(10.79 / 10.53)
    assert wide.lo == pytest.approx(10.79 * 0.936 / (10.53 * 1.009))
    assert wide.verdict == "point"
    assert against_spread([_e(10.79, 0.005)] * 3, cold).verdict == "slower"
    assert against_spread([_e(10.55, 0.005)] * 3, cold).verdict == "within"
    assert against_spread([_e(10.0, 0.005)] * 3, cold).verdict == "within"  # faster
    assert against_spread([_e(10.79, 0.005)] * 3, [*cold[:2], None]).verdict == "not measured"


def test_the_report_lists_point_only_regressions_apart(capsys: pytest.CaptureFixture[str]) -> None:
    def arm(ms: float, rel: float) -> dict:
        e = _e(ms, rel)
        return {**_arm(40.0, tq=4, tq2=4, tq3=4), "best": e.value, "best_lo": e.lo, "best_hi": e.hi}

    def row(n: int, edit: str, rel: float) -> dict:
        return {
            "n": n,
            "edit": edit,
            "what": "no edit",
            "entry": f"matmul/{edit}",
            "mapped": 10,
            "whole": 0,
            "prior": 75,
            "arms": {
                "cold@0": arm(10.6, 0.008),
                "cold@1": arm(10.52, 0.009),
                "prior@0": arm(10.79, rel),
                "prior@1": arm(10.79, rel),
            },
        }

    bw.report([row(3, "noisy", 0.064), row(4, "tight", 0.002)], ["cold", "prior"], 2)
    out = capsys.readouterr().out
    assert (
        "prior: edits whose median best is slower than cold's beyond cold's own spread, and beyond the noise: tight (1.022)"
        in out
    )
    assert "prior: edits beyond it on the point figure only (the interval reaches within it): noisy (1.022, " in out
    assert "| 1.022 (0.948-1.096; beyond it on the point figure, not beyond the noise) |" in out


def test_seconds_to_a_trial_charge_what_comes_before_it_and_no_finals() -> None:
    """A seeded run: its old log's read, checks, prior and whole replay come before its
    first trial's figure; its search's seconds spread over its own trials, a trial's
    figure known at its batch's end; its finals count for none. A cold run: its checks,
    then its search the same way."""
    from types import SimpleNamespace

    stats = {"correctness_s": 0.5, "prior_s": 0.25, "replay_s": 4.0, "search_s": 20.0, "finals_s": 9.0}
    seeded = SimpleNamespace(stats=stats, replay=SimpleNamespace(measured=10), trials=SimpleNamespace(run=90))
    assert bw.seconds_to(seeded, 1, read_s=2.0) == 6.75  # 2 + 0.5 + 0.25 + 4
    assert bw.seconds_to(seeded, 10, read_s=2.0) == 6.75  # the replay's results come together
    assert bw.seconds_to(seeded, 50, read_s=2.0) == 6.75 + 20.0 * 40 / 80
    assert bw.seconds_to(seeded, 50, read_s=2.0, batch=16) == 6.75 + 20.0 * 48 / 80  # its batch: 43-58
    assert bw.seconds_to(seeded, 90, read_s=2.0, batch=16) == 26.75  # the last batch is short; no finals
    assert math.isnan(bw.seconds_to(seeded, None))
    cold = SimpleNamespace(stats={"correctness_s": 0.5, "search_s": 32.0}, replay=None, trials=SimpleNamespace(run=96))
    assert bw.seconds_to(cold, 3) == 0.5 + 32.0 * 3 / 96
    assert bw.seconds_to(cold, 3, batch=16) == 0.5 + 32.0 * 16 / 96  # known when its first batch is


def test_side_by_side_runs_keep_each_configuration_s_fastest_and_reverse_every_other() -> None:
    """A slow mode of the runner lasting one configuration's turn in one run (2x) is not
    its speed: the second run, in reverse order, measures it again, and its faster
    figure is kept; a configuration one run failed to measure keeps the other's."""
    orders: list[list[str]] = []
    figures = iter(
        [
            {"a": _e(1.0, 0.01), "b": _e(2.2, 0.1), "c": None},
            {"a": _e(1.1, 0.01), "b": _e(1.1, 0.01), "c": _e(3.0, 0.01)},
        ]
    )

    def measure(order: list[str]) -> dict:
        orders.append(order)
        return next(figures)

    best, runs = side_passes(measure, ["a", "b", "c"], 2)
    assert orders == [["a", "b", "c"], ["c", "b", "a"]]
    assert best["a"].value == pytest.approx(1.0e-3) and best["b"].value == pytest.approx(1.1e-3)
    assert best["c"].value == pytest.approx(3.0e-3) and len(runs) == 2
    assert side_passes(lambda o: {k: _e(1.0, 0.01) for k in o}, ["a"], 1)[1] == [{"a": _e(1.0, 0.01)}]
