"""A model's committed MetaSchedule records for its untemplated functions
(core/modelrecords.py, issue 65 part 1): `check` judges them as it judges a log (the
model, TVM, the target), and a build applies fresh ones instead of searching."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import LINEAR_GELU, TINY_DENSE, dense_model_repo, run_cli, write_fresh

from tvmtune_ci.core.fsutil import sha256_file
from tvmtune_ci.core.modelrecords import ModelRecords, read_records, records_path, write_records

TINY = TINY_DENSE
HOST = {"kind": "llvm", "mcpu": "x86-64-v3", "num-cores": 2}  # check never runs it


def _records(root: Path, **change: object) -> Path:
    r = ModelRecords("lin", "host", HOST, "0.27.0", sha256_file(root / "models/lin.py"), ('["w"]',), ('["r"]',))
    r = ModelRecords(**{**r.__dict__, **change})  # type: ignore[arg-type]
    path = records_path(root, "models/lin.py", "lin", "host")
    write_records(path, r)
    return path


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"tvm_version": "0.26.1"}, "searched with TVM 0.26.1"),
        ({"target_dict": {**HOST, "mcpu": "znver4"}}, "searched for target"),
        ({"model_sha256": "0" * 64}, "the model's source changed"),
    ],
)
def test_check_fails_on_records_searched_for_another_model_tvm_or_target(
    tmp_path: Path, change: dict[str, object], why: str
) -> None:
    pytest.importorskip("tvm")  # `models` builds the model to write its coverage file
    root = dense_model_repo(tmp_path, HOST, TINY, "lin", LINEAR_GELU)
    write_fresh(root, "dense", "host")
    assert run_cli(root, "models").returncode == 0
    _records(root)
    r = run_cli(root, "check")
    assert r.returncode == 0 and "records" not in r.stdout, r.stdout + r.stderr
    path = _records(root, **change)
    r = run_cli(root, "check")
    line = next((x for x in r.stdout.splitlines() if "records_stale" in x), "")
    assert r.returncode == 1 and why in line and "models/lin.host.records.json" in r.stdout, r.stdout
    assert "tvmtune-ci profile lin --target host --untemplated metaschedule" in r.stdout
    assert read_records(path).workloads == ('["w"]',)  # nothing lost


def test_the_untemplated_ops_warning_ends_once_fresh_records_schedule_them(tmp_path: Path) -> None:
    """The model's sigmoid has no template: `check` warns while no committed records
    schedule it on the model's target, says nothing once fresh ones do, and warns again
    (besides failing) when they go stale."""
    pytest.importorskip("tvm")
    root = dense_model_repo(tmp_path, HOST, TINY, "lin", LINEAR_GELU)
    write_fresh(root, "dense", "host")
    assert run_cli(root, "models").returncode == 0

    def ops_warning() -> str:
        out = run_cli(root, "check", "--verbose").stdout
        return next((x for x in out.splitlines() if "no template implements" in x and "relax.sigmoid" in x), "")

    assert "no committed records on host" in ops_warning()
    _records(root)
    assert ops_warning() == ""
    _records(root, tvm_version="0.26.1")
    assert "no committed records on host" in ops_warning()


def test_a_corrupt_records_file_names_itself_and_the_fix(tmp_path: Path) -> None:
    from tvmtune_ci.core.errors import CorruptFileError

    path = tmp_path / "m.host.records.json"
    path.write_text(json.dumps({"format": 1, "model": "m"}))
    with pytest.raises(CorruptFileError, match=r"m\.host\.records\.json: malformed .*tvmtune-ci profile"):
        read_records(path)


@pytest.mark.slow
def test_a_build_applies_fresh_committed_records_instead_of_searching(tmp_path: Path) -> None:
    """The search's database kept as the model's records (what `profile` writes), then a
    build in a new work folder: no search, the same schedules, the same output; once
    the model changes, the records are stale: said, not applied, searched again."""
    pytest.importorskip("tvm")
    import tvm

    from tvmtune_ci.commands.profile import keep_records
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.model.build import BY_METASCHEDULE, build_model
    from tvmtune_ci.model.metaschedule import RecordsWarning
    from tvmtune_ci.tune.hostcheck import host_target

    target = host_target(2)
    root = dense_model_repo(tmp_path, target, TINY, "lin", LINEAR_GELU)
    kw = dict(target=target, root=root, untemplated="metaschedule", trials=16, configs="default")
    first = build_model("lin", work_dir=tmp_path / "w1", **kw)  # type: ignore[arg-type]
    assert first.untemplated.startswith("MetaSchedule tune_relax"), first.untemplated
    config = load_config(root)
    spec = config.models[0]
    path = keep_records(config, spec, config.target("host"), tmp_path / "w1")
    assert read_records(path).records
    again = build_model("lin", work_dir=tmp_path / "w2", **kw)  # type: ignore[arg-type]
    assert again.untemplated.startswith("MetaSchedule records committed in lin.host.records.json (no search)")
    searched = {f for f, how in first.schedules.items() if how == BY_METASCHEDULE}
    assert {f for f, how in again.schedules.items() if how == BY_METASCHEDULE} == searched
    x = np.random.default_rng(8).standard_normal((1, 16, 32)).astype("float32")
    w = np.random.default_rng(9).standard_normal((48, 32)).astype("float32")
    b = np.random.default_rng(10).standard_normal(48).astype("float32")
    outs = []
    for built in (first, again):
        vm = tvm.relax.VirtualMachine(built.executable, tvm.cpu())
        outs.append(vm["forward"](*[tvm.runtime.tensor(a) for a in (x, w, b)]).numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6)
    (root / "models/lin.py").write_text(LINEAR_GELU + "\n# an edit\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        third = build_model("lin", work_dir=tmp_path / "w3", **kw)  # type: ignore[arg-type]
    assert any(issubclass(c.category, RecordsWarning) and "stale" in str(c.message) for c in caught)
    assert third.untemplated.startswith("MetaSchedule tune_relax")
