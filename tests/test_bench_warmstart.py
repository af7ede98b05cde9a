"""benchmarks/bench_warmstart.py's report: each to-quality reading its own median."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_warmstart as bw  # noqa: E402 - benchmarks/ is not a package


def _arm(s: float, **t: float | None) -> dict:
    """One run: wall seconds `s`, 32 trials, and its trials to cold's quality per reading
    (tq on the curves, tq2 side by side, tq3 within the noise), their seconds pro rata."""
    out: dict = {"s": s, "run": 32, "best": 1.0, "correct": 10, "incumbents": 4}
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
    # Within the noise: 2/8 and 2/4.
    assert "to cold's quality side by side, equal within the noise counted (the slowest" in out
    assert (
        "seconds prior/cold median 0.38 over 2 pairs, a run that never reached it counted as slower than any; 0 never did"
        in out
    )
