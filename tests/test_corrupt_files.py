"""Nothing lost, nothing crashes: hostile or hand-edited files in a log folder.

Symlinks, devices and FIFOs are refused without being followed or read; a
manifest whose values are not what they claim is `log_modified`, never fresh and
never a crash (exit 70), in check, status, matrix and the loader.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import edit_results, git_env, tuned_on

from tvmtune_ci.check.staleness import Report, find_stale
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.errors import CorruptFileError, StaleLogError
from tvmtune_ci.core.fsutil import sha256_bytes
from tvmtune_ci.loader import best_config

FOLDER = "tuning_logs/matmul/avx2"


def report_of(root: Path) -> Report:
    return find_stale(load_config(root / "tvmtune.yaml"))


def avx2_reasons(root: Path) -> list[tuple[str, str, str | None]]:
    report = report_of(root)
    (e,) = [e for e in report.entries if (e.operator, e.target_name) == ("matmul", "avx2")]
    return [(r.code, r.detail, r.file) for r in e.reasons]


def assert_status_names_it(stdout: str) -> None:
    """`status` shows the broken entry as stale for log_modified, without its (unreadable)
    bests, and the intact one as fresh with them."""
    rows = {line.split()[0]: line.split() for line in stdout.splitlines() if line.startswith("matmul/")}
    assert rows["matmul/avx2"][1] == "STALE" and rows["matmul/avx2"][-1] == "log_modified", stdout
    assert rows["matmul/avx512"][1] == "fresh" and "m1024" in " ".join(rows["matmul/avx512"]), stdout
    assert "1 of 2 entries stale" in stdout


def log_path(root: Path) -> Path:
    return next((root / FOLDER).glob("matmul_avx2_*.json"))


def _limit_memory() -> None:
    # Old code read /dev/zero into memory: fail fast with MemoryError, not swap.
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, bounded in time and memory (a hang is a failure, not a stuck suite)."""
    env = {k: v for k, v in git_env().items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "CI")}
    return subprocess.run(
        [sys.executable, "-m", "tvmtune_ci", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_memory,
    )


# --------------------------------------------------------------------------- special files


def test_a_log_symlinked_to_dev_zero_is_refused_not_hashed_forever(repo: Path) -> None:
    log = log_path(repo)
    log.unlink()
    log.symlink_to("/dev/zero")
    r = cli(repo, "check")
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("STALE matmul/avx2"))
    assert "log_modified" in line and f"{FOLDER}/{log.name} is a symbolic link (to /dev/zero)" in line
    assert "restore it from git" in line or "retune" in line


def test_a_manifest_symlinked_to_dev_zero_is_log_modified_not_a_crash(repo: Path) -> None:
    m = repo / FOLDER / "manifest.json"
    m.unlink()
    m.symlink_to("/dev/zero")
    for args in (("check",), ("check", "--format", "json"), ("status",)):
        r = cli(repo, *args)
        assert r.returncode in (0, 1), (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
    assert_status_names_it(cli(repo, "status").stdout)
    r = cli(repo, "check", "--format", "json")
    (entry,) = [e for e in json.loads(r.stdout)["entries"] if e["target"] == "avx2"]
    (reason,) = entry["reasons"]
    assert reason["code"] == "log_modified" and reason["file"] == f"{FOLDER}/manifest.json"
    assert "symbolic link" in reason["detail"] and "tvmtune-ci retune" in reason["detail"]


def test_a_fifo_in_place_of_the_log_does_not_block(repo: Path) -> None:
    log = log_path(repo)
    log.unlink()
    os.mkfifo(log)
    r = cli(repo, "check")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{FOLDER}/{log.name} is a named pipe" in r.stdout


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_special_file_in_place_of_results_is_refused_by_every_reader(repo: Path, kind: str) -> None:
    results = repo / FOLDER / "results.json"
    results.unlink()
    if kind == "fifo":
        os.mkfifo(results)
    else:
        results.symlink_to("/dev/zero")
    what = "a named pipe" if kind == "fifo" else "a symbolic link (to /dev/zero)"
    r = cli(repo, "check")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{FOLDER}/results.json is {what}" in r.stdout
    # status reads the results of every entry it shows: it must neither hang nor crash.
    r = cli(repo, "status")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert_status_names_it(r.stdout)
    # A reader that needs them names the file and the fix.
    r = cli(repo, "readme", "matmul", "--target", "avx2")
    assert r.returncode != 0 and f"results.json is {what}" in r.stderr, r.stderr
    assert "restore it from git" in r.stderr


def test_a_log_symlinked_to_a_copy_outside_the_repo_is_not_followed(repo: Path, tmp_path: Path) -> None:
    log = log_path(repo)
    outside = tmp_path / "outside.json"
    outside.write_bytes(log.read_bytes())  # same bytes: the sha256 would match
    log.unlink()
    log.symlink_to(outside)
    ((code, detail, file),) = avx2_reasons(repo)
    assert code == "log_modified" and file == f"{FOLDER}/{log.name}"
    assert f"symbolic link (to {outside})" in detail and "regular files inside the log folder" in detail


def test_a_symlinked_log_folder_is_not_followed(repo: Path, tmp_path: Path) -> None:
    folder = repo / FOLDER
    elsewhere = tmp_path / "elsewhere"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere)
    ((code, detail, file),) = avx2_reasons(repo)
    assert code == "log_modified" and file == FOLDER and "symbolic link" in detail


def test_a_symlinked_operator_folder_is_not_followed(repo: Path, tmp_path: Path) -> None:
    folder = repo / "tuning_logs/matmul"
    elsewhere = tmp_path / "elsewhere"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere)
    report = report_of(repo)
    for e in report.entries:
        ((code, detail, file),) = [(r.code, r.detail, r.file) for r in e.reasons]
        assert code == "log_modified" and file == "tuning_logs/matmul" and "symbolic link" in detail
    assert report.orphans == ()  # a link to a folder is a folder to the orphan scan


# --------------------------------------------------------------------------- values that lie


def edit_manifest(root: Path, change: Any) -> dict[str, Any]:
    p = root / FOLDER / "manifest.json"
    data = json.loads(p.read_text())
    change(data)
    p.write_text(json.dumps(data))
    return data


def first_result(results: dict[str, Any]) -> dict[str, Any]:
    return results[sorted(results)[0]]


# (edit, what the reason says, the file it names). The results edits re-record
# results.json's hashes in the manifest, so only its content can give them away.
EDITS = {
    "curve": (lambda r: first_result(r).update(curve=[[1]]), "curve[0] is [1], expected [trial, gflops]"),
    "latency": (lambda r: first_result(r)["best"].update(latency_s="abc"), "best.latency_s is 'abc'"),
    "negative-latency": (lambda r: first_result(r)["best"].update(latency_s=-1.0), "a positive number"),
    "trial": (lambda r: first_result(r)["best"].update(trial=0), "best.trial is 0, expected a trial number >= 1"),
    "dependencies": (lambda d: d.update(dependencies=["x"]), "dependencies is ['x'], expected an object"),
    "trials": (lambda d: next(iter(d["trials"].values())).update(run="many"), ".run is 'many'"),
    "target-float": (lambda d: d["target"].update({"num-cores": 2.0}), "target.num-cores is 2.0"),
    "nul-in-log-name": (lambda d: d.update(log="x\u0000.json"), "not a file in its folder"),
    "dotdot-log": (lambda d: d.update(log=".."), "not a file in its folder"),
    "parent-log": (lambda d: d.update(log="../x.json"), "not a file in its folder"),
    "absolute-log": (lambda d: d.update(log="/etc/passwd"), "not a file in its folder"),
    # A set carried forward onto an edited template (format 5) says why in full.
    "carried-in-format-4": (
        lambda d: d.update(format=4, carried={"on": "2026-12-03"}),
        "carried is {'on': '2026-12-03'}, expected absent before format 5",
    ),
    "carried-without-why": (
        lambda d: d.update(carried={"on": "2026-12-03", "from_fingerprint": "ab"}),
        "carried.sentence is None, expected a string",
    ),
}
RESULTS_EDITS = ("curve", "latency", "negative-latency", "trial")


def apply_edit(root: Path, edit: str) -> str:
    """Make the edit; the file the reason must name."""
    if edit in RESULTS_EDITS:
        edit_results(root / FOLDER, EDITS[edit][0])
        return f"{FOLDER}/results.json"
    edit_manifest(root, EDITS[edit][0])
    return f"{FOLDER}/manifest.json"


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_hand_edited_manifest_is_log_modified(repo: Path, edit: str) -> None:
    expected = EDITS[edit][1]
    file = apply_edit(repo, edit)
    reasons = avx2_reasons(repo)
    assert [c for c, _, _ in reasons] == ["log_modified"], reasons
    assert expected in reasons[0][1] and file in (reasons[0][2] or "") + reasons[0][1]


def test_an_edit_of_results_that_leaves_the_hashes_is_log_modified(repo: Path) -> None:
    path = repo / FOLDER / "results.json"
    path.write_text(path.read_text().replace('"latency_s": ', '"latency_s": 1', 1))
    ((code, detail, file),) = avx2_reasons(repo)
    assert code == "log_modified" and file == f"{FOLDER}/results.json"
    assert "was modified after tuning" in detail


def test_a_tuned_on_date_in_the_future_is_stale(repo: Path) -> None:
    edit_manifest(repo, lambda d: d.update(tuned_on="2999-01-01"))
    ((code, detail, file),) = avx2_reasons(repo)
    assert code == "log_modified" and "2999-01-01 is in the future" in detail
    assert file == f"{FOLDER}/manifest.json"


def test_a_wrong_curve_crashes_none_of_check_status_matrix(repo: Path) -> None:
    apply_edit(repo, "curve")
    for args, want in (
        (("check",), 1),
        (("check", "--format", "json"), 1),
        (("check", "--format", "github"), 1),
        (("status",), 0),
        (("matrix",), 0),
    ):
        r = cli(repo, *args)
        assert r.returncode == want, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        if args == ("status",):
            assert_status_names_it(r.stdout)
    assert '"target":"avx2"' in cli(repo, "matrix").stdout


def test_a_manifest_rehashed_over_a_non_log_is_stale(repo: Path) -> None:
    log = log_path(repo)
    bogus = b'{"not": "a log"}\n'
    log.write_bytes(bogus)
    edit_manifest(repo, lambda d: d.update(log_sha256=sha256_bytes(bogus)))
    ((code, detail, _),) = avx2_reasons(repo)
    assert code == "log_modified" and "is not a tvmtune-ci log" in detail


def test_the_loader_reports_a_corrupt_manifest_as_stale(repo: Path) -> None:
    apply_edit(repo, "curve")
    with pytest.raises(StaleLogError) as e:
        best_config("matmul", target={"kind": "llvm", "mcpu": "haswell"}, root=repo)
    assert "log_modified" in str(e.value) and "curve[0]" in str(e.value)


def test_the_shape_check_accepts_optional_extras(repo: Path) -> None:
    from tvmtune_ci.core.manifest import parse_results

    data = json.loads((repo / FOLDER / "results.json").read_text())
    extra = copy.deepcopy(data)
    for r in extra["results"].values():
        r["best"].update(ci_rel=0.01, samples=[1e-3, 1.1e-3], estimator="median", n=5)
        r["some_future_field"] = {"anything": 1}
    parse_results(json.dumps(extra).encode(), Path("r.json"))
    bad = copy.deepcopy(data)
    first_result(bad["results"])["baseline"]["latency_s"] = float("nan")
    with pytest.raises(CorruptFileError, match=r"r.json: results field results\.\S+\.baseline\.latency_s"):
        parse_results(json.dumps(bad).encode(), Path("r.json"))


def test_an_ordinary_tuned_on_today_is_still_fresh(repo: Path) -> None:
    assert avx2_reasons(repo) == []
    (entry,) = [e for e in report_of(repo).entries if (e.operator, e.target_name) == ("matmul", "avx2")]
    # The session's fixture tuned today, or yesterday when the suite crossed midnight.
    day = tuned_on(repo)
    assert entry.age_days == (datetime.date.today() - day).days in (0, 1)
    assert day.isoformat() in log_path(repo).name
