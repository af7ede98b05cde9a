"""A renamed template keeps its logs: `git mv`, `check` names the fitting folder,
`tvmtune-ci adopt OLD NEW` moves it without re-tuning, `check` is fresh and
`build_best` builds the new name (renames.py, commands/adopt.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import change_function, commit_all, git, make_repo, manifest_at, run_cli, write_fresh
from small_mm import SMALL_MM

from tvmtune_ci.check.staleness import find_stale
from tvmtune_ci.core import runs
from tvmtune_ci.core.config import load_config
from tvmtune_ci.pipeline.history import history_source

TARGETS = ("avx512", "avx2")


def history_line() -> bytes:
    kf = runs.KernelFigure(0.002, 0.00198, 0.00202, 33, 0.00196, 0.0026)
    run = runs.Run(
        "2026-12-01T00:00:00Z",
        "retune",
        {"cpu": "Test CPU", "cores": 2},
        "0.27.0",
        90.0,
        {"bert_ffn1": kf, "bert_ffn2": kf},
        {},
        0,
    )
    return runs.encode_runs([run])


@pytest.fixture
def renamed(tmp_path: Path) -> Path:
    """matmul and dense tuned and committed (dense/avx2 with a run history), then
    `git mv operators/dense.py operators/dense_op.py` committed."""
    root = make_repo(tmp_path, operators=["matmul", "dense"])
    for op in ("matmul", "dense"):
        for t in TARGETS:
            extra = {"runs.jsonl": history_line()} if (op, t) == ("dense", "avx2") else None
            write_fresh(root, op, t, extra_files=extra)
    commit_all(root, "tuned")
    git(root, "mv", "operators/dense.py", "operators/dense_op.py")
    commit_all(root, "rename dense to dense_op")
    return root


def test_rename_round_trip(renamed: Path) -> None:
    root = renamed
    check = run_cli(root, "check")
    assert check.returncode == 1
    for t in TARGETS:
        assert (
            f"STALE dense_op/{t}: missing (no tuned log: tuning_logs/dense_op/{t}/manifest.json "
            f"does not exist; renamed from dense: its log tuning_logs/dense/{t}/ fits this "
            "template: `tvmtune-ci adopt dense dense_op` keeps it without re-tuning)"
        ) in check.stdout
    assert (
        "warning: tuning_logs/dense/ holds logs of operator 'dense', renamed to dense_op "
        "(the same template): run `tvmtune-ci adopt dense dense_op`"
    ) in check.stdout
    entries = json.loads(run_cli(root, "check", "--format", "json").stdout)["entries"]
    assert {e["operator"]: e["renamed_from"] for e in entries} == {"dense_op": "dense", "matmul": None}
    gh = run_cli(root, "check", "dense_op", "--format", "github", env={"GITHUB_ACTIONS": "true"})
    assert "Fix: run `tvmtune-ci adopt dense dense_op`" in gh.stdout

    old_manifest = json.loads((root / "tuning_logs/dense/avx2/manifest.json").read_text())
    adopt = run_cli(root, "adopt", "dense", "dense_op")
    assert adopt.returncode == 0, adopt.stdout + adopt.stderr
    for t in TARGETS:
        assert f"adopted tuning_logs/dense/{t}/ as tuning_logs/dense_op/{t}/" in adopt.stdout
    assert not (root / "tuning_logs/dense").exists()
    folder = root / "tuning_logs/dense_op/avx2"
    m = json.loads((folder / "manifest.json").read_text())
    assert (m["operator"], m["template_file"]) == ("dense_op", "operators/dense_op.py")
    assert m["log"] == old_manifest["log"].replace("dense_", "dense_op_", 1)
    assert (folder / m["log"]).read_bytes() == (b'{"format": 1, "workloads": [], "records": []}\n')
    assert m["log_sha256"] == old_manifest["log_sha256"]  # the log moved, unchanged
    # The run history moved with its hashes; results.json names the new operator.
    assert (folder / "runs.jsonl").read_bytes() == history_line()
    assert m["files"]["runs.jsonl"] == old_manifest["files"]["runs.jsonl"]
    assert json.loads((folder / "results.json").read_text())["operator"] == "dense_op"
    assert "# Tuning log: `dense_op` on `avx2`" in (folder / "README.md").read_text()
    assert "operators/dense_op.py" in m["sources"]["blobs"]
    assert m["tuned_on"] == old_manifest["tuned_on"] and m["fingerprint"] != old_manifest["fingerprint"]

    after = run_cli(root, "check", "--format", "json")
    assert after.returncode == 0, after.stdout
    data = json.loads(after.stdout)
    assert all(e["fresh"] for e in data["entries"]) and data["orphans"] == []
    commit_all(root, "adopt")
    data = json.loads(run_cli(root, "check", "--format", "json").stdout)
    assert all(e["fresh"] for e in data["entries"]) and data["templates_trusted"] == 4

    pytest.importorskip("tvm")
    from tvmtune_ci import build_best

    target = load_config(root / "tvmtune.yaml").target("avx2").target
    ex = build_best("dense_op", target=target, workload="bert_ffn1", root=root)
    assert ex is not None


def test_a_rename_with_an_edit_is_missing_and_its_retune_replays_the_old_log(renamed: Path) -> None:
    root = renamed
    change_function(root / "operators/dense_op.py")
    check = run_cli(root, "check", "dense_op")
    assert check.returncode == 1
    assert "renamed from" not in check.stdout
    assert (
        "STALE dense_op/avx2: missing (no tuned log: tuning_logs/dense_op/avx2/manifest.json "
        "does not exist; run `tvmtune-ci retune` to tune it)" in check.stdout
    )
    adopt = run_cli(root, "adopt", "dense", "dense_op")
    assert adopt.returncode == 4
    assert (
        "tuning_logs/dense/avx2/ was tuned for operators/dense.py as it was then, not for "
        "operators/dense_op.py as it is now"
    ) in adopt.stderr
    assert "`tvmtune-ci retune dense_op --target avx2`, which replays this log first" in adopt.stderr
    assert (root / "tuning_logs/dense/avx2/manifest.json").is_file()  # left where it was

    config = load_config(root / "tvmtune.yaml")
    entry = next(e for e in find_stale(config, operators=["dense_op"]).entries if e.target_name == "avx2")
    said: list[str] = []
    hist, path, from_target = history_source(config, entry, config.target("avx2"), said.append)
    assert hist is not None and hist.operator == "dense" and from_target is None
    assert path == root / "tuning_logs/dense/avx2/manifest.json"
    assert said == [
        f"history: operators/dense_op.py was renamed from operators/dense.py and "
        f"edited; replaying its log {hist.log} (tuning_logs/dense/avx2)"
    ]
    dry = run_cli(root, "retune", "dense_op", "--target", "avx2", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"configuration(s) of {hist.log} would be replayed first" in dry.stdout


def test_only_a_fitting_folder_moves(renamed: Path) -> None:
    root = renamed
    # The avx512 log is of an older dense: it fits no more, avx2's still does.
    m = root / "tuning_logs/dense/avx512/manifest.json"
    data = json.loads(m.read_text())
    data["dependencies"]["operators/dense.py:schedule"] = "0" * 64
    m.write_text(json.dumps(data))
    r = run_cli(root, "adopt", "dense", "dense_op")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "adopted tuning_logs/dense/avx2/ as tuning_logs/dense_op/avx2/" in r.stdout
    assert "left: tuning_logs/dense/avx512/ was tuned for operators/dense.py as it was then" in r.stdout
    assert m.is_file() and not (root / "tuning_logs/dense_op/avx512").exists()


@pytest.mark.parametrize(
    "args,code,words",
    [
        (("matmul", "dense_op"), 2, "operators/matmul.py exists, so matmul was not renamed"),
        (("dense", "dens_op"), 2, "unknown operator 'dens_op'; did you mean 'dense_op'?"),
        (("gone", "dense_op"), 2, "tuning_logs/gone/ does not exist"),
        (("dense", "dense_op", "--target", "avx3"), 2, "unknown target 'avx3'"),
    ],
)
def test_adopt_refuses_what_is_not_a_rename(renamed: Path, args: tuple[str, ...], code: int, words: str) -> None:
    r = run_cli(renamed, "adopt", *args)
    assert r.returncode == code, r.stdout + r.stderr
    assert words in r.stderr


def test_adopt_never_overwrites_a_log_folder(renamed: Path) -> None:
    (renamed / "tuning_logs/dense_op/avx2").mkdir(parents=True)
    r = run_cli(renamed, "adopt", "dense", "dense_op", "--target", "avx2")
    assert r.returncode == 10
    assert "tuning_logs/dense_op/avx2/ exists already" in r.stderr
    assert (renamed / "tuning_logs/dense/avx2/manifest.json").is_file()


def test_a_renamed_and_edited_templates_retune_replays_the_old_folders_log(tmp_path: Path) -> None:
    """The History section of the renamed template's first log is the old folder's."""
    pytest.importorskip("tvm")
    from tvmtune_ci.tune.hostcheck import host_target

    config = (
        "format: 1\ntrials: 16\nbatch_size: 8\n"
        "measure: {time_cap_s: 1.0, usable_precision: 10, history_s: 1}\n"
        f"targets:\n  host:\n    target: {json.dumps(host_target(2))}\n"
    )
    root = make_repo(tmp_path, config=config, files={"operators/mm.py": SMALL_MM}, operators=False)
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    commit_all(root, "tuned")
    old = manifest_at(root / "tuning_logs/mm/host")
    old_records = json.loads((root / "tuning_logs/mm/host" / old["log"]).read_text())
    git(root, "mv", "operators/mm.py", "operators/mm2.py")
    path = root / "operators/mm2.py"
    path.write_text(path.read_text().replace('define_knob("unroll", [0, 16])', 'define_knob("unroll", [0, 16, 64])'))
    commit_all(root, "rename mm to mm2 and give unroll a candidate")
    r = run_cli(root, "retune", "mm2", "--trials", "8")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "history: operators/mm2.py was renamed from operators/mm.py and edited" in r.stdout
    m = manifest_at(root / "tuning_logs/mm2/host")
    h = m["results"]["s64"]["history"]
    assert h["source"] == old["log"]
    assert h["offered"] >= 1 and h["built"] == h["correct"] == h["offered"]
    assert h["knob_diff"]["changed"] == ["unroll: knob [0, 16] -> knob [0, 16, 64]"]
    assert h["prior"] == len(old_records["workloads"]["s64"]["records"]) - h["offered"]
    readme = (root / "tuning_logs/mm2/host/README.md").read_text()
    assert f"### History: the template was edited since `{old['log']}`" in readme
