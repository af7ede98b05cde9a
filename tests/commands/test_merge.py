from __future__ import annotations

import copy
import json
from pathlib import Path

from conftest import run_cli

from tvmtune_ci.merge import merge_logs
from tvmtune_ci.records import read_log, render_log

TARGET = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}


def _trace(tile: int) -> list:
    return [[["SamplePerfectTile", ["l1"], [2, 8], ["v4", "v5"]]], [[0, [tile, 64 // tile]]]]


def _rec(tile: int, secs: float) -> list:
    return [_trace(tile), [secs, secs], {"kind": "llvm"}, []]


def _log(path: Path, records: list, target: dict = TARGET, workload: list | None = None) -> Path:
    log = {"format": 1, "operator": "mm", "target": target,
           "workloads": {"s64": {"workload": workload or ["0x1", "AAAA"], "records": records,
                                 "failures": [{"knobs": {"tile_i": [1, 64]}, "error": "timeout"}]}}}
    path.write_text(render_log(log))
    return path


def test_merge_keeps_the_best_measurement_of_each_configuration(tmp_path: Path) -> None:
    a = _log(tmp_path / "a.json", [_rec(2, 1e-3), _rec(4, 5e-4)])
    b = _log(tmp_path / "b.json", [_rec(4, 4e-4), _rec(8, 6e-4)])
    r = merge_logs([a, b])
    recs = r.log["workloads"]["s64"]["records"]
    assert (r.records_in, r.records_out, r.replaced) == (4, 3, 1)
    assert [x[1][0] for x in recs] == [4e-4, 6e-4, 1e-3]  # best first; tile 4 from b
    assert r.log["workloads"]["s64"]["failures"] == [{"knobs": {"tile_i": [1, 64]}, "error": "timeout"}]
    out = tmp_path / "merged.json"
    p = run_cli(tmp_path, "merge", str(a), str(b), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert read_log(out)["workloads"]["s64"]["records"] == copy.deepcopy(recs)


def test_merge_refuses_logs_of_different_targets(tmp_path: Path) -> None:
    a = _log(tmp_path / "a.json", [_rec(2, 1e-3)])
    b = _log(tmp_path / "b.json", [_rec(2, 1e-3)], target={**TARGET, "num-cores": 4})
    p = run_cli(tmp_path, "merge", str(a), str(b), "-o", str(tmp_path / "m.json"))
    assert p.returncode == 2
    assert "num-cores" in p.stderr and "same target" in p.stderr
    assert not (tmp_path / "m.json").exists()


def test_merge_refuses_another_template_version(tmp_path: Path) -> None:
    a = _log(tmp_path / "a.json", [_rec(2, 1e-3)])
    b = _log(tmp_path / "b.json", [_rec(2, 1e-3)], workload=["0x2", "BBBB"])
    p = run_cli(tmp_path, "merge", str(a), str(b), "-o", str(tmp_path / "m.json"))
    assert p.returncode == 2 and "re-tune" in p.stderr
    assert json.loads(a.read_text())["workloads"]  # inputs untouched
