"""The tuning log: format, round trip, and TVM's own databases loading it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tuner import BROKEN_CODE, BROKEN_KNOB, TARGET, make_template, request

from tvmtune_ci import loader
from tvmtune_ci.core import records
from tvmtune_ci.core.errors import CorruptFileError
from tvmtune_ci.core.manifest import Measured, Trials
from tvmtune_ci.tune.tuner import TuneOutcome, tune_workload


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory):
    """Two workloads of one template (one with failing knob values) and their log."""
    folder = tmp_path_factory.mktemp("records")
    template = make_template(folder, "mm_log", extra=BROKEN_CODE, knobs_extra=BROKEN_KNOB)
    outs = [tune_workload(request(template, folder / f"work-{w}", workload_name=w, trials=16)) for w in ("m64", "m32")]
    log = folder / "mm_log_cpu.json"
    records.write_log(log, "mm_log", TARGET, outs)
    return template, outs, log


def fake_outcome(name: str = "w") -> TuneOutcome:
    m = Measured({"t": [2, 4]}, 1e-3, 1.0)
    rec = [[[["GetSBlock", [], ["C", "main"], ["b0"]]], []], [2e-3, 4e-3], {"kind": "llvm"}, []]
    fast = [[[["GetSBlock", [], ["C", "main"], ["b0"]]], []], [1e-3], {"kind": "llvm"}, []]
    return TuneOutcome(
        workload_name=name,
        records=[
            {"trial": 1, "knobs": {"t": [8, 1]}, "latency_s": 3e-3, "error": None, "record": rec},
            {
                "trial": 2,
                "knobs": {"t": [1, 8]},
                "latency_s": None,
                "error": "InProcessBuilder: boom",
                "record": [rec[0], [1e10], rec[2], rec[3]],
            },
            {"trial": 3, "knobs": {"t": [2, 4]}, "latency_s": 1e-3, "error": None, "record": fast},
        ],
        best=m,
        baseline=m,
        top=(m,),
        trials=Trials(3, 3, 2, 1, "budget"),
        curve=((1, 1.0),),
        space_size=4,
        design_spaces=1,
        noise_check=m,
        workload_json=["123", "YmFzZTY0"],
    )


def test_log_format_is_versioned_sorted_and_one_record_per_line(tmp_path: Path) -> None:
    path = tmp_path / "op_cpu.json"
    written = records.write_log(path, "op", {"kind": "llvm", "mcpu": "x"}, [fake_outcome("b"), fake_outcome("a")])
    text = path.read_text()
    log = records.read_log(path)
    assert log == written and log["format"] == 2 and log["operator"] == "op"
    assert list(log["workloads"]) == ["a", "b"]  # sorted on disk
    w = log["workloads"]["a"]
    assert w["workload"] == ["123", "YmFzZTY0"]
    assert [r[1] for r in w["records"]] == [[1e-3], [2e-3, 4e-3]]  # best first, failures out
    assert len(w["measurements"]) == 2  # one per record, same order
    assert w["failures"] == [{"knobs": {"t": [1, 8]}, "error": "InProcessBuilder: boom"}]
    assert text.count("\n") < 40 and "do not edit" in text
    records.write_log(
        tmp_path / "again.json", "op", {"kind": "llvm", "mcpu": "x"}, [fake_outcome("a"), fake_outcome("b")]
    )
    assert (tmp_path / "again.json").read_text() == text  # deterministic


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "cannot parse the tuning log"),
        ('{"format": 3, "operator": "x", "target": {}, "workloads": {}}', "log format 3 is not understood"),
        ('{"format": 1, "operator": "x", "target": {}}', "missing or mistyped 'workloads'"),
        (
            '{"format": 1, "operator": "x", "target": {}, "workloads": {"w": {"workload": [1], "records": []}}}',
            "'workload' is not",
        ),
    ],
)
def test_corrupt_logs_name_the_path(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CorruptFileError, match=match) as info:
        records.read_log(path)
    assert str(path) in str(info.value)


def test_log_of_a_real_tune(tuned) -> None:
    _, outs, log_path = tuned
    log = records.read_log(log_path)
    assert set(log["workloads"]) == {"m64", "m32"}
    for out in outs:
        w = log["workloads"][out.workload_name]
        assert w["workload"] == out.workload_json
        # A default or previous best that won the finals is a record of its own.
        extra = out.best_source != "search"
        assert len(w["records"]) == out.trials.valid + extra
        assert len(w["failures"]) == out.trials.failed
        assert all(f["knobs"]["broken"] is True for f in w["failures"])
        means = [records.record_mean_secs(r) for r in w["records"]]
        assert means == sorted(means)


def _query(db, template, name):
    from tvmtune_ci.tune.tvmsetup import make_target
    from tvmtune_ci.tune.workload import workload_module

    return db.query_schedule(workload_module(template, name), make_target(TARGET), name)


def _best_knobs(out) -> dict:
    # The published best (from the finals), which the log ranks first. Not the
    # fastest search sample: the finals re-measure, and may rank a close second first.
    return out.best.knobs


def test_tvm_json_database_loads_the_log(tuned, tmp_path: Path) -> None:
    import tvm

    from tvmtune_ci.tune.builder import schedule_config
    from tvmtune_ci.tune.tvmsetup import ms

    template, outs, log_path = tuned
    wl_path, rec_path = records.to_json_database(log_path, tmp_path / "db")
    assert wl_path.read_text().count("\n") == 2
    db = ms().database.JSONDatabase(path_workload=str(wl_path), path_tuning_record=str(rec_path), allow_missing=False)
    assert len(db) == sum(o.trials.valid + (o.best_source != "search") for o in outs)
    for out in outs:
        sch = _query(db, template, out.workload_name)
        assert sch is not None
        best = schedule_config(template, out.workload_name, _best_knobs(out), TARGET)
        tvm.ir.assert_structural_equal(sch.mod, best.mod)


def test_load_database_returns_the_best(tuned) -> None:
    import tvm

    from tvmtune_ci.tune.builder import schedule_config

    template, outs, log_path = tuned
    db = loader.load_database(log_path)
    for out in outs:
        sch = _query(db, template, out.workload_name)
        best = schedule_config(template, out.workload_name, _best_knobs(out), TARGET)
        tvm.ir.assert_structural_equal(sch.mod, best.mod)
        assert best.mod is not None and out.best.knobs["broken"] is False


def test_load_database_reports_a_broken_record(tuned, tmp_path: Path) -> None:
    _, _, log_path = tuned
    log = json.loads(log_path.read_text())
    w = log["workloads"]["m64"]
    w["records"][0][0][0][0][0] = "NoSuchInstruction"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(log))
    with pytest.raises(CorruptFileError, match="TVM cannot load a record") as info:
        loader.load_database(bad)
    assert str(bad) in str(info.value)
