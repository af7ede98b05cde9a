"""The runner band (core/runnerband.py), the runner identity that fails closed
(runs.match_machine, remeasure.check_same_machine) and the verdict at a history's first
runs, on synthetic runs written to and read from real files. On real kernels measured
by `remeasure`: tests/commands/test_retune.py (its remeasure section)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tvmtune_ci.core import runnerband, runs
from tvmtune_ci.core.errors import CorruptFileError

ZEN4 = {
    "cpu": "AMD EPYC",
    "cores": 2,
    "machine": "x86_64",
    "cpu_id": "AuthenticAMD family 25 model 17",
    "llvm_cpu": "znver4",
    "isa": "a" * 16,
}
ZEN5 = {**ZEN4, "cpu_id": "AuthenticAMD family 26 model 2", "llvm_cpu": "znver5", "isa": "b" * 16}
# A history recorded before runs named vendor, family and model: its name and cores only.
OLD = {"cpu": "AMD EPYC", "cores": 2, "machine": "x86_64"}


def kf(v: float) -> runs.KernelFigure:
    return runs.KernelFigure(v, v * 0.99, v * 1.01, 33, v, v * 1.2)


def run(
    i: int, best: float, *, windows: tuple[float, ...] = (), cal: float = 0.3, host: dict | None = None
) -> runs.Run:
    """A run whose best is `best` (fast figure) with the compute calibration kernel at
    `cal`; `windows`: the best's figure in each window, the calibration kernel at `cal`."""
    return runs.Run(
        f"2026-12-{1 + i // 24:02d}T{i % 24:02d}:00:00Z",
        "remeasure",
        dict(host or ZEN4),
        "0.27.0",
        90.0,
        {"w": kf(best)},
        {"compute": kf(cal), "memory": kf(3.0)},
        1,
        windows=tuple(runs.Window({"w": v}, {"compute": cal}) for v in windows),
    )


def series(key: str, values: list[float], host: dict | None = None, mcpu: str | None = "znver4") -> runnerband.Series:
    return runnerband.Series(
        key, dict(host or ZEN4), mcpu, tuple((f"2026-11-{i + 1:02d}T00:00:00Z", v) for i, v in enumerate(values))
    )


# Two sets of the runner, 8 runs each, spread ±3%: 56 pairs, the band a little under 6%.
QUIET = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0]


def pool(label: str = "linux,x64,avx512,znver4", **more: runnerband.Series) -> runnerband.Pool:
    base = {"a/t/w@1": series("a/t/w@1", QUIET), "b/t/w@1": series("b/t/w@1", [2 * v for v in QUIET])}
    return runnerband.Pool(label, {**base, **more})


def test_a_pool_round_trips_through_its_file_and_names_its_label(tmp_path: Path) -> None:
    p = pool()
    path = runnerband.pool_path(tmp_path, p.label)
    assert path == tmp_path / ".runners" / "linux-x64-avx512-znver4.json"
    runnerband.write_pool(path, p)
    assert runnerband.read_pool(path, p.label) == p
    assert runnerband.read_pool(tmp_path / ".runners" / "none.json", "none") == runnerband.Pool("none", {})
    path.write_text("{")
    with pytest.raises(CorruptFileError, match="not a runner band"):
        runnerband.read_pool(path, p.label)


def test_a_pooled_band_of_another_runner_label_is_never_used(tmp_path: Path) -> None:
    """Each label reads its own file; a file of another label put in its place (copied,
    renamed) is refused, never read as this runner's band."""
    zen4, arm = "linux,x64,avx512,znver4", "linux,arm64,neoverse-v2"
    assert runnerband.pool_path(tmp_path, zen4) != runnerband.pool_path(tmp_path, arm)
    runnerband.write_pool(runnerband.pool_path(tmp_path, arm), pool(arm))
    assert runnerband.read_pool(runnerband.pool_path(tmp_path, zen4), zen4).series == {}
    runnerband.pool_path(tmp_path, arm).rename(runnerband.pool_path(tmp_path, zen4))
    with pytest.raises(CorruptFileError, match="is the runner band of 'linux,arm64,neoverse-v2', not of"):
        runnerband.read_pool(runnerband.pool_path(tmp_path, zen4), zen4)
    # The label is what a target's runs-on says, or its RPC key; none: no band at all.
    assert runnerband.runner_label(("linux", "x64")) == "linux,x64"
    assert runnerband.runner_label(("linux",), "pi4") == "rpc:pi4" and runnerband.runner_label(()) is None


def test_the_band_pools_only_series_of_this_machine_s_identity() -> None:
    band, left = pool().band(ZEN4)
    assert band is not None and band.pairs == 56 and band.series == 2 and band.sets == 2
    assert 0.04 < band.halfwidth < 0.065, band
    # A Zen 5's wild series (another machine under the same label) changes nothing.
    wild = series("c/t/w@1", [1.0, 1.5, 0.6, 1.2], ZEN5)
    band2, left2 = pool(**{"c/t/w@1": wild}).band(ZEN4)
    assert band2 == band and len(left2) == 1 and "family 26 model 2" in left2[0]
    # An old series without cpu_id joins only when its target's CPU is LLVM's name for this one.
    old = series("d/t/w@1", [1.0, 1.5, 0.6, 1.2], OLD, mcpu="znver5")
    band3, left3 = pool(**{"d/t/w@1": old}).band(ZEN4)
    assert band3 == band and "recorded before runs named" in left3[0]
    assert pool(**{"d/t/w@1": series("d/t/w@1", QUIET, OLD)}).band(ZEN4)[0].series == 3
    # Too few pairs or series for a band: none.
    only = runnerband.Pool("x", {"a": series("a", QUIET)})
    assert only.band(ZEN4)[0] is None


def test_a_run_from_another_cpu_model_is_refused_even_against_a_history_without_cpu_id() -> None:
    """The Xeon of issue 54: the committed history (no cpu_id) was measured on an Emerald
    Rapids, whose VM and this one are both "Intel(R) Xeon(R) Processor" x2."""
    xeon = "Intel(R) Xeon(R) Processor"
    emr = {"cpu": xeon, "cores": 2, "machine": "x86_64"}
    here = {
        "cpu": xeon,
        "cores": 2,
        "machine": "x86_64",
        "cpu_id": "GenuineIntel family 6 model 167",
        "llvm_cpu": "rocketlake",
        "isa": "c" * 16,
    }
    ok, why = runs.match_machine(here, emr, "emeraldrapids")
    assert not ok and "recorded before runs named" in why and "rocketlake" in why
    assert not runs.match_machine(here, emr, None)[0]  # a target naming no CPU pins nothing
    # The same machine kind: matched by name, cores and the target's CPU, with a warning.
    ok, why = runs.match_machine({**here, "llvm_cpu": "emeraldrapids"}, emr, "emeraldrapids")
    assert ok and "matched by its name" in why
    # With the identity recorded, every field both have must agree; all agreeing: no warning.
    assert runs.match_machine(ZEN4, dict(ZEN4)) == (True, "")
    for key, other in (("cpu_id", "AuthenticAMD family 25 model 97"), ("llvm_cpu", "znver3"), ("isa", "d" * 16)):
        ok, why = runs.match_machine({**ZEN4, key: other}, ZEN4, "znver4")
        assert not ok and key in why, key
    assert not runs.match_machine({**ZEN4, "cores": 4}, ZEN4)[0]


def test_remeasure_refuses_another_cpu_against_an_old_history_with_exit_5() -> None:
    from types import SimpleNamespace

    from tvmtune_ci.core.errors import HostError
    from tvmtune_ci.pipeline.remeasure import check_same_machine

    manifest = SimpleNamespace(operator="matmul", target_name="zen4-2c", target={"mcpu": "znver4"}, host=OLD)
    history = [run(0, 1.0, host=OLD)]
    with pytest.raises(HostError) as e:
        check_same_machine(manifest, history, here=ZEN5)  # a Zen 5 VM, also "AMD EPYC" x2
    assert e.value.exit_code == 5 and "its run history is a property of that runner" in str(e.value)
    assert "recorded before" in check_same_machine(manifest, history, here=ZEN4)


def test_a_persistent_15_percent_move_is_drift_at_the_first_run() -> None:
    """A history of the re-tune's run alone, a runner band of ±5-6%: every window of the
    next run 1.15x slower (over the compute calibration kernel) is drift at once, not
    "N more runs needed"; nothing changed is stable."""
    from tvmtune_ci.pipeline.remeasure import judge_history

    band, _ = pool().band(ZEN4)
    assert band is not None
    slow = [run(0, 1.0, windows=(1.0, 1.01, 0.99)), run(1, 1.15, windows=(1.16, 1.15, 1.14))]
    v = judge_history(slow, "w", band)
    assert v.state == "drift" and v.direction == "slower", v
    assert "all 3 windows" in v.sentence and "runner band of `linux,x64,avx512,znver4`" in v.sentence
    assert v.ratio == pytest.approx(1.15 / 0.99)  # the median window over the fastest window before
    # The runner 1.15x slower too (its calibration kernel with it): the kernel did not change.
    runner_slow = [slow[0], run(1, 1.15, windows=(1.16, 1.15, 1.14), cal=0.345)]
    assert judge_history(runner_slow, "w", band).state == "stable"
    same = [slow[0], run(1, 1.0, windows=(1.01, 0.99, 1.02))]
    v = judge_history(same, "w", band)
    assert v.state == "stable" and "within the runner band" in v.sentence
    # Without a runner band the history's own rule: too few runs.
    assert "more runs needed" in judge_history(slow, "w", None).sentence


def test_a_single_slow_window_is_not_drift() -> None:
    """One of the runner's slow stretches spoils one window (here 1.4x); the run is not
    a change, and the verdict names the window."""
    from tvmtune_ci.pipeline.remeasure import judge_history

    band, _ = pool().band(ZEN4)
    history = [run(0, 1.0, windows=(1.0, 1.01, 0.99)), run(1, 1.02, windows=(1.01, 1.4, 1.02))]
    v = judge_history(history, "w", band)
    assert v.state == "stable" and "window 2 beyond" in v.sentence, v
    history = [run(0, 1.0, windows=(1.0, 1.01, 0.99)), run(1, 1.2, windows=(1.2, 1.22, 1.02))]
    assert judge_history(history, "w", band).state == "stable"  # two of three: not all
    # Every window beyond, but by moves 1.9x apart (bench_drift under load): the runner
    # moved under the kernel within the job, not one change; said, not "more runs needed".
    history = [run(0, 1.0, windows=(1.0, 1.01, 0.99)), run(1, 1.2, windows=(1.13, 1.26, 2.13))]
    v = judge_history(history, "w", band)
    assert v.state == "inconclusive" and "they disagree by" in v.sentence, v


def test_a_run_the_runner_disturbed_is_not_judged_and_the_run_before_is_not_judged_again() -> None:
    """The latest run 2x slow with its compute calibration kernel 2x slow too: left out.
    The run before it is not then judged again (the far rule read it 1.785x in
    bench_drift's loaded phase 1)."""
    from tvmtune_ci.pipeline.remeasure import judge_history

    band, _ = pool().band(ZEN4)
    history = [run(i, v, windows=(v,) * 3) for i, v in enumerate([1.0, 1.02, 0.98, 1.6])]
    history.append(run(4, 2.0, windows=(2.0, 2.0, 2.0), cal=0.6))
    v = judge_history(history, "w", band)
    assert v.state == "inconclusive" and v.sentence.startswith("not judged: the runner was disturbed"), v


def test_the_runner_band_gives_way_to_the_own_band_and_three_runs() -> None:
    from tvmtune_ci.pipeline.remeasure import judge_history

    band, _ = pool().band(ZEN4)
    quiet = [run(i, v, windows=(v, v, v)) for i, v in enumerate(QUIET)]
    # 8 runs of its own: its band and the three-runs rule, even with every window 1.15x.
    v = judge_history([*quiet, run(9, 1.15, windows=(1.15, 1.15, 1.15))], "w", band)
    assert v.state == "inconclusive" and "a change must last 3 runs" in v.sentence, v
    # Its own earlier runs spread wider than the runner's band: the edge widens to theirs.
    wide = [run(0, 1.0, windows=(1.0,) * 3), run(1, 1.2, windows=(1.2,) * 3), run(2, 1.15, windows=(1.15,) * 3)]
    v = judge_history(wide, "w", band)
    assert v.state == "stable" and "widened to this set's own" in v.sentence, v


def test_a_run_records_its_windows_and_the_band_it_was_judged_on(tmp_path: Path) -> None:
    r = runs.Run(**{**run(0, 1.0, windows=(1.0, 1.1)).__dict__, "band": {"label": "x", "halfwidth": 0.05}})
    data = runs.encode_runs([run(1, 1.0), r])
    path = tmp_path / "runs.jsonl"
    path.write_bytes(data)
    back = runs.parse_runs(path.read_bytes(), path)
    assert back[1] == r and back[1].windows[1].workloads == {"w": 1.1}
    assert "windows" not in json.loads(data.splitlines()[0])  # a run without them: written as before
    bad = data.replace(b'"w":1.1', b'"w":-1', 1)
    with pytest.raises(CorruptFileError, match="windows"):
        runs.parse_runs(bad, path)


# --------------------------------------------------------------------------- a new runner label


def _record(tmp_path: Path, label: str, history: list[runs.Run]) -> runnerband.RunnerBand | None:
    """What `remeasure --record` does around one run, on real files: the label's pool
    (its file, with this set's series as its runs.jsonl holds it before the run) gives
    the band; then the history with the run is written and the pool grown with it."""
    path = tmp_path / "runs.jsonl"
    before = runs.parse_runs(path.read_bytes(), path)
    pool = runnerband.read_pool(runnerband.pool_path(tmp_path, label), label)
    if (s := runnerband.series_of("op", "t", "znver4", before, "w")) is not None:
        pool = pool.merged([s])
    band, _ = pool.band(ZEN4)
    path.write_bytes(runs.encode_runs(history))
    grown = runnerband.series_of("op", "t", "znver4", history, "w")
    assert grown is not None
    runnerband.write_pool(runnerband.pool_path(tmp_path, label), pool.merged([grown]))
    return band


def test_a_fresh_runner_label_gives_a_verdict_by_its_third_recorded_run(tmp_path: Path) -> None:
    """Issue 67, 5: a label with no pooled band and one set of one best (the pooled band
    needs 20 pairs of runs from 2 bests: months of monthly runs). The re-tune's run has
    3 windows; its moves between them give the early band, so the first `remeasure
    --record` (the history's 2nd run) already gives a verdict, and so does the 3rd, not
    "6 more runs needed". A 25% slowdown in every window of the 3rd run is drift."""
    from tvmtune_ci.pipeline.remeasure import judge_history

    label = "linux,x64,new"
    history = [run(0, 1.0, windows=(1.0, 1.01, 0.995))]  # the re-tune's run
    (tmp_path / "runs.jsonl").write_bytes(runs.encode_runs(history))
    assert not runnerband.pool_path(tmp_path, label).exists()  # a fresh label
    verdicts = []
    for i, wins in ((1, (1.01, 1.0, 1.02)), (2, (1.25, 1.26, 1.24))):
        history = [*history, run(i, min(wins), windows=wins)]
        band = _record(tmp_path, label, history)
        assert band is not None and band.early is not None and band.pairs < runnerband.MIN_PAIRS, band
        verdicts.append(judge_history(history, "w", band))
    second, third = verdicts
    assert second.state == "stable" and "more runs needed" not in second.sentence, second
    assert "within the early band" in second.sentence and "weaker than a pooled band" in second.sentence
    assert third.state == "drift" and third.direction == "slower" and "early band of `linux,x64,new`" in third.sentence
    # Without the early band (the pooled band alone) the same runs wait for 6 more.
    assert "6 more runs needed" in judge_history(history[:2], "w", None).sentence
    # The pool file keeps each run's windows (format 2), for the next runs and sets.
    obj = json.loads(runnerband.pool_path(tmp_path, label).read_text())
    assert obj["format"] == 2 and [len(w[1]) for w in obj["series"][0]["windows"]] == [3, 3, 3]


def test_the_early_band_is_widened_never_under_its_floor_and_gives_way_to_the_pooled_band() -> None:
    """Moves within a run are seconds apart: the early band is twice their 95th
    percentile, at least the largest move between runs so far and at least ±20% (what a
    first week cannot show); a 10% change is not drift on it. Once the label has 20
    pairs of runs from 2 bests, the pooled band as before."""
    from tvmtune_ci.pipeline.remeasure import judge_history

    def one(key: str, values: list[float], wins: tuple[float, ...]) -> runnerband.Series:
        base = series(key, values)
        return runnerband.Series(key, base.host, base.mcpu, base.points, ((base.points[0][0], wins),))

    quiet = runnerband.Pool("x", {"a": one("a", [1.0], (1.0, 1.01, 0.99))}).band(ZEN4)[0]
    assert quiet is not None and quiet.early is not None
    assert quiet.halfwidth == runnerband.EARLY_FLOOR and quiet.early.within == 3 and quiet.pairs == 0
    noisy = runnerband.Pool("x", {"a": one("a", [1.0], (1.0, 1.15, 1.0))}).band(ZEN4)[0]
    assert noisy is not None and noisy.halfwidth == pytest.approx(2 * 0.15)
    moved = runnerband.Pool("x", {"a": one("a", [1.0, 1.35], (1.0, 1.01, 0.99))}).band(ZEN4)[0]
    assert moved is not None and moved.halfwidth == pytest.approx(0.35) and moved.pairs == 1
    # Fewer than 3 moves within runs: no early band either.
    assert runnerband.Pool("x", {"a": one("a", [1.0], (1.0, 1.01))}).band(ZEN4)[0] is None
    ten = [run(0, 1.0, windows=(1.0, 1.01, 0.99)), run(1, 1.1, windows=(1.1, 1.11, 1.1))]
    assert judge_history(ten, "w", quiet).state == "stable"
    # The pooled band once it has its pairs: the early one's windows change nothing.
    full = pool(**{"c": one("c", [1.0], (1.0, 1.5, 1.0))}).band(ZEN4)[0]
    assert full is not None and full.early is None and full == pool().band(ZEN4)[0]
    assert "basis" not in full.to_json() and full.to_json() == pool().band(ZEN4)[0].to_json()
    # What a run records of an early band, and the README's words for it.
    rec = quiet.to_json()
    assert rec["basis"] == "early" and rec["within"] == 3
    assert runnerband.describe(rec).startswith("the early band of `x`: ±20.0%, weaker than a pooled band")
    h = [runs.Run(**{**r.__dict__, "band": rec}) for r in ten]
    assert "the early band of `x`" in runnerband.verdict_basis(h, ["w"], rec)


def test_a_format_1_pool_is_read_and_written_back_as_format_2(tmp_path: Path) -> None:
    label = "linux,x64,avx512,znver4"
    path = runnerband.pool_path(tmp_path, label)
    old = pool(label).to_json()
    old["format"] = 1
    for s in old["series"]:
        del s["windows"]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    back = runnerband.read_pool(path, label)
    assert back == pool(label) and all(s.windows == () for s in back.series.values())
    runnerband.write_pool(path, back)
    assert json.loads(path.read_text())["format"] == runnerband.POOL_FORMAT == 2
    path.write_text(json.dumps({**old, "format": 3}))
    with pytest.raises(CorruptFileError, match="format 3, this tvmtune-ci reads 1 and 2"):
        runnerband.read_pool(path, label)
