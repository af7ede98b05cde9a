from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import run_cli

from tvmtune_ci.core.records import read_log, render_log
from tvmtune_ci.publish.merge import merge_logs

TARGET = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}


def _trace(tile: int) -> list:
    return [[["SamplePerfectTile", ["l1"], [2, 8], ["v4", "v5"]]], [[0, [tile, 64 // tile]]]]


def _rec(tile: int, secs: float) -> list:
    return [_trace(tile), [secs, secs], {"kind": "llvm"}, []]


def _log(path: Path, records: list, target: dict = TARGET, workload: list | None = None) -> Path:
    log = {
        "format": 1,
        "operator": "mm",
        "target": target,
        "workloads": {
            "s64": {
                "workload": workload or ["0x1", "AAAA"],
                "records": records,
                "failures": [{"knobs": {"tile_i": [1, 64]}, "error": "timeout"}],
            }
        },
    }
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


# ----------------------------------------------------------------- issue 11: errors, not crashes


def test_merge_of_a_missing_file_exits_2_naming_it(tmp_path: Path) -> None:
    a = _log(tmp_path / "a.json", [_rec(2, 1e-3)])
    p = run_cli(tmp_path, "merge", str(a), str(tmp_path / "nope.json"), "-o", str(tmp_path / "m.json"))
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(
        f"error: {tmp_path / 'nope.json'}: no such file; pass logs that `tvmtune-ci retune` wrote"
    )
    assert len(p.stderr.splitlines()) == 1 and not (tmp_path / "m.json").exists()


@pytest.mark.parametrize(
    "content,why",
    [
        ("{not json", "cannot parse the tuning log"),
        ('{"hello": 1}', "log format None is not understood"),
        ("[1, 2]", "not a JSON object"),
        (None, "is a folder"),
    ],
    ids=["not-json", "other-json", "a-list", "a-folder"],
)
def test_merge_of_a_non_log_exits_2_naming_it(tmp_path: Path, content: str | None, why: str) -> None:
    a = _log(tmp_path / "a.json", [_rec(2, 1e-3)])
    b = tmp_path / "b.json"
    if content is None:
        b.mkdir()
    else:
        b.write_text(content)
    p = run_cli(tmp_path, "merge", str(a), str(b), "-o", str(tmp_path / "m.json"))
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"error: {b}") and why in line and "tvmtune-ci retune" in line, line


def test_merge_of_a_hand_edited_record_exits_2(tmp_path: Path) -> None:
    a = _log(tmp_path / "a.json", [_rec(2, 1e-3)])
    b = _log(tmp_path / "b.json", [[_trace(4), "abc", {"kind": "llvm"}, []]])
    p = run_cli(tmp_path, "merge", str(a), str(b), "-o", str(tmp_path / "m.json"))
    assert p.returncode == 2 and "record 0 has run_secs 'abc'" in p.stderr, p.stderr


def test_merge_into_a_folder_exits_2(tmp_path: Path) -> None:
    a = _log(tmp_path / "a.json", [_rec(2, 1e-3)])
    b = _log(tmp_path / "b.json", [_rec(4, 1e-3)])
    (tmp_path / "out").mkdir()
    p = run_cli(tmp_path, "merge", str(a), str(b), "-o", str(tmp_path / "out"))
    assert p.returncode == 2 and f"{tmp_path / 'out'}: cannot write the merged log" in p.stderr, p.stderr
