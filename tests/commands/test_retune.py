"""`tvmtune-ci retune` end to end, on real TVM, real git and real files.

One small matmul is tuned once per session (`tuned`); tests that change things
work on copies of that repository.
"""

from __future__ import annotations

import datetime
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import GIT_ENV, commit_all, edit_results, git, git_env, make_repo, manifest_at, manifest_of, run_cli
from small_mm import SMALL_MM
from test_log_invariants import INCONSISTENT, edit_set, problems

from tvmtune_ci.core import stats
from tvmtune_ci.core.fsutil import sha256_bytes
from tvmtune_ci.core.git.read import blob_id
from tvmtune_ci.core.manifestformat import MANIFEST_FORMAT

tvm = pytest.importorskip("tvm")

from tvmtune_ci.pipeline.words import previous_sentence  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402

TARGET = host_target(2)

CONFIG = f"""\
format: 1
trials: 16
batch_size: 8
measure: {{time_cap_s: 1.0, usable_precision: 10, history_s: 1}}  # a busy machine is no reason to fail here
targets:
  host:
    target: {json.dumps(TARGET)}
    runs-on: [linux, x64]
"""


FOLDER = Path("tuning_logs/mm/host")


def _set(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / FOLDER).iterdir())}


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "repo"
    shutil.copytree(src, dst, symlinks=True)
    return dst


@pytest.fixture(scope="session")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    # Runs of the history of 3 s (the others' 1 s): a fastest 1-s stretch to find in each,
    # for the remeasure tests that compare runs of separate processes.
    config = CONFIG.replace("history_s: 1}", "history_s: 3}")
    assert config != CONFIG
    root = make_repo(
        tmp_path_factory.mktemp("tuned"), config=config, files={"operators/mm.py": SMALL_MM}, operators=False
    )
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    commit_all(root, "tuned")
    return root, r


def test_retune_writes_log_manifest_readme_and_plot(tuned: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    root, r = tuned
    # The effective settings come first, before any tuning.
    assert r.stdout.index("trials per workload: 16") < r.stdout.index("best")
    files = _set(root)
    m = manifest_of(files)
    # Named by the day it was tuned: today, or yesterday when the suite crossed midnight.
    assert (datetime.date.today() - datetime.date.fromisoformat(m["tuned_on"])).days in (0, 1)
    log_name = f"mm_host_{m['tuned_on']}.json"
    assert set(files) == {"manifest.json", "results.json", "runs.jsonl", "README.md", "curve.png", log_name}
    assert files["curve.png"].startswith(b"\x89PNG")
    assert (
        m["format"] == MANIFEST_FORMAT
        and "carried" not in m
        and "partial" not in m
        and m["log"] == log_name
        and m["target"] == TARGET
    )
    # The blob id git gives the log: `check` trusts git's index for it once committed.
    git_id = subprocess.run(
        ["git", "hash-object", "--", str(root / FOLDER / log_name)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert m["log_git_blob"] == git_id

    def git_blob(path: Path) -> str:
        return subprocess.run(
            ["git", "hash-object", "--", str(path)], capture_output=True, text=True, check=True
        ).stdout.strip()

    # results.json, named and hashed like the log; and what the template's fingerprint
    # was computed from, so that `check` need not parse it while git vouches for it.
    assert m["files_git_blob"] == {name: git_blob(root / FOLDER / name) for name in ("results.json", "runs.jsonl")}
    src = m["sources"]
    assert src["blobs"] == {"operators/mm.py": git_blob(root / "operators/mm.py")}
    assert src["fingerprint"] == m["fingerprint"] and src["template_line"] > 1
    assert src["probes"]["tvm.py"] == src["probes"]["tvm/__init__.py"] == "absent"
    res_space = m["results"]["s64"]
    spaces = res_space["design_spaces"]
    assert src["space_sizes"] == {"s64": [res_space["space_size"] // spaces, spaces]}
    t = m["trials"]["s64"]
    assert t["requested"] == 16 and 0 < t["run"] <= 16 and t["valid"] + t["failed"] == t["run"]
    res = m["results"]["s64"]
    assert res["best"]["latency_s"] < res["baseline"]["latency_s"]
    # Best and default from the same interleaved finals, each with its interval.
    for who in ("best", "baseline"):
        x = res[who]
        assert x["stage"] == "finals" and x["n"] >= 11
        assert x["ci_lo_s"] <= x["latency_s"] <= x["ci_hi_s"]
    # The log's best record is the manifest's best: TVM's own ranking agrees.
    log = json.loads(files[log_name])
    assert log["workloads"]["s64"]["records"][0][1] == [res["best"]["latency_s"]]
    readme = files["README.md"].decode()
    rel = (res["best"]["ci_hi_s"] - res["best"]["ci_lo_s"]) / 2 / res["best"]["latency_s"]
    assert f"± {rel * 100:.1f}%" in readme
    assert readme.startswith("<!-- generated by tvmtune-ci retune; do not edit, regenerate with: tvmtune-ci readme mm")
    # Every knob by name with its chosen value.
    for name in ("tile_i", "tile_j", "unroll", "cache"):
        assert f"{name} = {res['best']['knobs'][name]!r}" in readme, name
    assert json.dumps(TARGET, sort_keys=True) in readme and "0.27" in readme
    # Measured on the target's own CPU: recorded, and nothing to warn about.
    assert m["host"]["llvm_cpu"] == TARGET["mcpu"] and m["host"]["runner"] == "local"
    assert "the target builds for" not in r.stdout and "**Measured on" not in readme
    # The noise check, the best of the search's first batch, against the same
    # configuration in the finals: how far the runner moved (said when it is a finalist).
    nc = res["noise_check"]
    assert nc["stage"] == "first_batch" and nc["ci_lo_s"] <= nc["latency_s"] <= nc["ci_hi_s"]
    again = [x for x in res["top"] if x["stage"] == "finals" and x["knobs"] == nc["knobs"]]
    if again:
        ratio = again[0]["latency_s"] / nc["latency_s"]
        assert "- runner drift: the best of the first batch measured " in readme
        assert f"in the finals ({ratio:.2f}x)" in readme
    else:
        assert "runner drift" not in readme
    assert run_cli(root, "check").returncode == 0
    # The invariants every committed set must keep hold for a format-4 set too.
    assert problems(root / FOLDER, {"host"}) == []


@pytest.mark.parametrize(("edit", "expected"), INCONSISTENT)
def test_the_invariants_catch_an_inconsistent_format_4_set(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path, edit: Any, expected: str
) -> None:
    """The committed-set invariants, on the set a real retune writes (results.json)."""
    folder = _copy(tuned[0], tmp_path) / FOLDER
    assert problems(folder, {"host"}) == []
    edit_set(folder, edit)
    found = problems(folder, {"host"})
    assert any(expected in p for p in found), found


def test_log_loads_into_tvms_own_json_database(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    from tvm.s_tir import meta_schedule as ms

    from tvmtune_ci.core.records import to_json_database

    root, _ = tuned
    m = manifest_at(root / FOLDER)
    wl, rec = to_json_database(root / FOLDER / m["log"], tmp_path)
    db = ms.database.JSONDatabase(path_workload=str(wl), path_tuning_record=str(rec))
    assert len(db) >= 1
    best = db.get_all_tuning_records()
    assert min(sum(float(x) for x in r.run_secs) / len(r.run_secs) for r in best) < 1.0


def test_readme_command_regenerates_identical_files(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    root = _copy(tuned[0], tmp_path)
    before = _set(root)
    (root / FOLDER / "README.md").write_text("hand-edited\n")
    r = run_cli(root, "readme", "mm")
    assert r.returncode == 0, r.stderr
    assert _set(root) == before


@pytest.mark.slow
def test_second_retune_archives_old_set_and_never_gets_slower(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    root = _copy(tuned[0], tmp_path)
    old = _set(root)
    old_manifest = manifest_of(old)
    r = run_cli(root, "retune", "--all", "--trials", "8")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the previous log's best" in r.stdout  # re-measured beside this run's
    new = _set(root)
    date = old_manifest["tuned_on"]
    # Old files live on under their archived names, byte for byte.
    assert new[f"{old_manifest['log']}.bak"] == old[old_manifest["log"]]
    assert new[f"manifest_{date}.json.bak"] == old["manifest.json"]
    assert new[f"README_{date}.md.bak"] == old["README.md"]
    m = manifest_of(new)
    res = m["results"]["s64"]
    assert res["previous_best"] is not None
    assert res["best"]["latency_s"] <= res["previous_best"]["latency_s"]
    # A statistical decision, from the same interleaved finals. Which way it goes is the
    # machine's noise, so the verdict is recomputed here from the finals the set records
    # (this run's best search finalist against the previous best) and the published set
    # held to it: switched exactly when this run's best is faster beyond the noise. (The
    # decision's every case, without noise: test_tuner's table of _decide.)
    prev = res["previous_best"]
    assert prev["stage"] == res["best"]["stage"] == "finals"
    news = [
        x for x in res["top"] if x["stage"] == "finals" and x["knobs"] not in (prev["knobs"], res["baseline"]["knobs"])
    ]
    assert news, res["top"]
    new_best = min(news, key=lambda x: x["latency_s"])
    verdict = stats.compare(stats.from_json(new_best), stats.from_json(prev))
    assert res["previous_verdict"] == verdict, (new_best, prev)
    switched = verdict == "faster"
    assert res["best_source"] == ("search" if switched else "previous")
    assert res["best"]["knobs"] == (new_best if switched else prev)["knobs"]
    assert previous_sentence(res["best_source"], verdict) in r.stdout
    assert run_cli(root, "check").returncode == 0


@pytest.mark.slow
def test_sigkill_mid_run_keeps_old_set_and_rerun_resumes(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    root = _copy(tuned[0], tmp_path)
    old = _set(root)
    journal = root / "tuning_logs/mm/.host.tvmtune-work/s64/journal.jsonl"
    env = git_env()
    for k in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "CI"):
        env.pop(k, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tvmtune_ci", "retune", "--all", "--trials", "24"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        # Wait for the first measured batch (header line + 8 trials).
        while not (journal.exists() and len(journal.read_text().splitlines()) >= 9):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "no batch measured within 120 s"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    measured = len(journal.read_text().splitlines()) - 1
    assert 8 <= measured < 24
    assert _set(root) == old  # the last good set, untouched
    assert run_cli(root, "check").returncode == 0
    r = run_cli(root, "retune", "--all", "--trials", "24")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resuming from {measured} trials" in r.stdout
    m = manifest_at(root / FOLDER)
    assert m["trials"]["s64"]["run"] <= 24
    assert not journal.parent.exists()  # the work dir is dropped once the set is published


def test_wrong_template_stops_at_the_correctness_step(tmp_path: Path) -> None:
    wrong = SMALL_MM.replace("return A @ B", "return A @ B.T")
    root = make_repo(tmp_path, config=CONFIG, files={"operators/mm.py": wrong}, operators=False)
    r = run_cli(root, "retune")
    assert r.returncode == 7, r.stdout + r.stderr
    assert "mismatch" in r.stderr.lower() or "mismatch" in r.stdout.lower()
    assert not (root / FOLDER).exists()
    assert not (root / "tuning_logs/mm/.host.tvmtune-work/s64/journal.jsonl").exists()


def test_a_template_that_changes_its_workloads_at_import_is_refused_before_tuning(tmp_path: Path) -> None:
    """The tuner reads the imported WORKLOADS, the manifest and fingerprint the literal:
    a template that adds a workload at import would tune what its log does not say."""
    grown = SMALL_MM + '\nWORKLOADS["s32"] = {"M": 32, "N": 32, "K": 32, "dtype": "float32"}\n'
    root = make_repo(tmp_path, config=CONFIG, files={"operators/mm.py": grown}, operators=False)
    r = run_cli(root, "retune")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "operators/mm.py" in r.stderr and "WORKLOADS after import differs from the literal" in r.stderr
    assert "'s32'" in r.stderr and "Keep WORKLOADS a plain literal" in r.stderr
    assert not (root / FOLDER).exists()


def test_second_writer_of_the_same_entry_is_refused(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    root = _copy(tuned[0], tmp_path)
    lock = root / "tuning_logs/mm/.host.tvmtune-lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\nfrom pathlib import Path\nfrom tvmtune_ci.core.lock import hold\n"
                "with hold(Path(sys.argv[1]), 'mm/host'):\n    print('locked', flush=True)\n    time.sleep(60)\n"
            ),
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        r = run_cli(root, "retune", "--all", "--trials", "8")
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 6, r.stdout + r.stderr
    assert f"pid {holder.pid}" in r.stderr


def test_target_this_host_cannot_run_is_refused_before_any_trial(tmp_path: Path) -> None:
    """On an AVX2-only host (synthetic, whatever CPU runs this test), an AVX-512 target
    is refused with exit 5, naming the feature, before any trial or work folder."""
    from tvmtune_ci.tune.hostcheck import HOST_ENV

    cpu = "znver4"
    config = CONFIG.replace(json.dumps(TARGET), json.dumps({"kind": "llvm", "mcpu": str(cpu)}))
    root = make_repo(tmp_path, config=config, files={"operators/mm.py": SMALL_MM}, operators=False)
    r = run_cli(root, "retune", env={HOST_ENV: "znver3"})
    assert r.returncode == 5, r.stdout + r.stderr
    assert "znver3 (TVMTUNE_TEST_HOST_CPU) lacks: " in r.stderr and "avx512f" in r.stderr and cpu in r.stderr
    assert not (root / "tuning_logs/mm/.host.tvmtune-work").exists()


def test_a_target_for_another_cpu_this_machine_runs_is_tuned_with_a_warning(tmp_path: Path) -> None:
    """A runner of a newer CPU passes the host check of an older CPU's target (a Zen 5
    runs znver4 code), and its timings would go under that target's name unsaid."""
    from tvmtune_ci.tune.tvmsetup import host_cpu

    here = host_cpu()
    assert here != "core2"  # every x86-64 CPU since 2006 runs core2's code; none is one
    target = {"kind": "llvm", "mcpu": "core2", "num-cores": 2}
    config = CONFIG.replace(json.dumps(TARGET), json.dumps(target))
    root = make_repo(tmp_path, config=config, files={"operators/mm.py": SMALL_MM}, operators=False)
    dry = run_cli(root, "retune", "--dry-run")
    assert (
        dry.returncode == 0
        and (
            f"  mm/host: would be measured on this machine's {here}, not the target's core2 (a warning, not a refusal)"
        )
        in dry.stdout
    ), dry.stdout
    r = run_cli(root, "retune", "--trials", "8")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"warning: mm/host: the target builds for mcpu=core2 and this machine's CPU is {here} (" in r.stdout, (
        r.stdout
    )
    assert "Re-tune it on a runner with that CPU" in r.stdout
    m = manifest_at(root / FOLDER)
    assert m["host"]["llvm_cpu"] == here
    readme = (root / FOLDER / "README.md").read_text()
    assert f"**Measured on {here}, not the target's core2**" in readme


def test_build_best_builds_the_committed_best_and_refuses_a_mismatch(
    tuned: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    import numpy as np

    from tvmtune_ci import build_best
    from tvmtune_ci.core.errors import StaleLogError
    from tvmtune_ci.loader import FallbackWarning, best_config

    root, _ = tuned
    m = manifest_at(root / FOLDER)
    best = best_config("mm", target=tvm.target.Target(TARGET), root=root)
    assert best.knobs == m["results"]["s64"]["best"]["knobs"] and not best.fallback
    ex = build_best("mm", target=TARGET, root=root)
    a = np.random.rand(64, 64).astype("float32")
    b = np.random.rand(64, 64).astype("float32")
    dev = tvm.cpu()
    c = tvm.runtime.tensor(np.zeros((64, 64), "float32"), dev)
    ex["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)
    # One flag differs: no silent default schedule.
    other = {**TARGET, "num-cores": 4}
    with pytest.raises(StaleLogError) as e:
        build_best("mm", target=other, root=root)
    assert "num-cores" in str(e.value)
    with pytest.warns(FallbackWarning):
        fb = best_config("mm", target=other, root=root, allow_fallback=True)
    assert fb.fallback and fb.knobs == {}


@pytest.mark.slow
def test_retune_commit_push_puts_one_logs_only_commit_on_origin(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """The steps of the `retune` job: template commit -> matrix lists it -> retune --commit --push."""
    src = tuned[0]
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(src), str(origin))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(origin), str(work))
    tpl = work / "operators/mm.py"
    tpl.write_text(tpl.read_text().replace('define_knob("unroll", [0, 16])', 'define_knob("unroll", [0, 16, 64])'))
    before = commit_all(work, "widen the unroll knob")
    git(work, "push", "-q", "origin", "HEAD:main")
    out = tmp_path / "gh_output"
    r = run_cli(work, "matrix", "--changed-since", "HEAD~1", env={"GITHUB_OUTPUT": str(out)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["include"] == [
        {"operator": "mm", "target": "host", "runs-on": ["self-hosted", "linux", "x64"], "extras": "tune"}
    ]
    assert "has-work=true" in out.read_text()
    # Dirt in the work tree must not be committed.
    (work / "scratch.txt").write_text("not mine\n")
    # Files of the log folder that tvmtune-ci did not write stay as they are.
    mine = {".gitattributes": "*.json -diff\n", "notes/keep.txt": "keep\n", "NOTES.md": "# notes\n"}
    for rel, text in mine.items():
        (work / FOLDER / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / FOLDER / rel).write_text(text)
    git(work, "add", "--", *(str(FOLDER / rel) for rel in mine))
    git(work, "commit", "-q", "-m", "notes beside the log")
    git(work, "push", "-q", "origin", "HEAD:main")
    before = git(work, "rev-parse", "HEAD").strip()
    r = run_cli(work, "retune", "mm", "--target", "host", "--trials", "8", "--commit", "--push")
    assert r.returncode == 0, r.stdout + r.stderr
    log = git(origin, "log", "--format=%H %s", f"{before}..main").splitlines()
    assert len(log) == 1 and "re-tune mm on host" in log[0]
    touched = git(origin, "show", "--name-only", "--format=", "main").split()
    assert touched and all(p.startswith("tuning_logs/mm/host/") for p in touched)
    for rel, text in mine.items():
        assert (work / FOLDER / rel).read_text() == text, rel
        assert git(origin, "show", f"main:{FOLDER / rel}") == text, rel
        assert str(FOLDER / rel) not in touched
    assert not [p for p in touched if "NOTES" in p or "gitattributes" in p], touched
    assert git(work, "status", "--porcelain", "--", str(FOLDER)) == ""
    assert (work / "scratch.txt").exists() and "scratch.txt" in git(work, "status", "--porcelain")
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(origin), str(fresh))
    r = run_cli(fresh, "check", "--format", "json")
    assert r.returncode == 0, r.stdout
    # The committed log is the blob its manifest records: git vouches, nothing re-read;
    # and for the template's sources: nothing parsed.
    assert json.loads(r.stdout)["logs_trusted"] == 1
    assert json.loads(r.stdout)["templates_trusted"] == 1


@pytest.mark.slow
def test_previous_best_that_no_longer_builds_does_not_stop_the_retune(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    # E.g. after a TVM upgrade (tvm_changed) the old configuration may not build.
    root = _copy(tuned[0], tmp_path)
    edit_results(
        root / FOLDER,  # not a tiling of 64
        lambda res: res["s64"]["best"]["knobs"].update(tile_i=[3, 5]),
    )
    r = run_cli(root, "retune", "--all", "--trials", "8")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "could not be re-measured" in r.stdout
    new = manifest_at(root / FOLDER)
    assert new["results"]["s64"]["previous_best"] is None
    assert run_cli(root, "check").returncode == 0


def test_one_commit_failing_does_not_stop_the_others_and_what_was_committed_is_pushed(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_github: None
) -> None:
    """Two entries; committing the first fails (its new files are git-ignored): the
    second is still re-tuned, committed and pushed, and the exit status is git's (8)."""
    from tvmtune_ci import cli, pipeline
    from tvmtune_ci.pipeline.job import RetuneResult
    from tvmtune_ci.publish.swap import publish

    origin = tmp_path / "origin.git"
    (repo / ".gitignore").write_text("tuning_logs/matmul/avx512/*.bak\n")
    commit_all(repo, "ignore avx512 backups")
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(origin))
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "fetch", "-q", "origin")
    git(repo, "branch", "-q", "--set-upstream-to", "origin/main")
    before = git(repo, "rev-parse", "HEAD").strip()
    tuned: list[str] = []

    def fake_retune_entry(config, entry, **kw):  # noqa: ANN001, ANN003, ANN202 - the real one tunes with TVM
        tuned.append(entry.target_name)
        data = json.loads(entry.logset.manifest.read_text())
        data["seed"] += 1
        files = {
            data["log"]: b'{"format": 1, "workloads": [], "records": [], "new": true}\n',
            "manifest.json": json.dumps(data, sort_keys=True).encode(),
        }
        files["results.json"] = (entry.logset.folder / "results.json").read_bytes()
        return RetuneResult(entry, entry.manifest, publish(entry.logset.folder, files))

    monkeypatch.setattr(pipeline, "retune_entry", fake_retune_entry)
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    rc = cli.main(["retune", "--all", "--commit", "--push", "--config", str(repo / "tvmtune.yaml")])
    assert rc == 8
    assert tuned == ["avx512", "avx2"]
    err = capsys.readouterr().err
    assert "matmul/avx512: the new log set is written but not committed" in err and "1 failure" in err
    subjects = git(origin, "log", "--format=%s", f"{before}..main").splitlines()
    assert len(subjects) == 1 and "matmul on avx2" in subjects[0], subjects
    # The failed entry's set is published (nothing lost), just not committed.
    assert "tuning_logs/matmul/avx512/" in git(repo, "status", "--porcelain", "--ignored")


def test_retune_finishes_an_interrupted_publish_first_and_dry_run_only_reports_it(repo: Path) -> None:
    """A publish killed after its swap leaves a fresh set: without this, nothing would
    ever re-tune it and its leftovers would stay. (No tuning: every entry is fresh.)"""
    from tvmtune_ci.publish.swap import KILL_AT_ENV

    folder = repo / "tuning_logs/matmul/avx2"
    (folder / "NOTES.md").write_text("mine\n")
    r = subprocess.run(
        [sys.executable, "-m", "tvmtune_ci", "readme", "matmul", "--target", "avx2"],
        cwd=repo,
        env={**git_env(), KILL_AT_ENV: "after_swap"},
        start_new_session=True,
        capture_output=True,
        text=True,
    )
    assert r.returncode == -9, r.stdout + r.stderr
    staging = folder.with_name(".avx2.tvmtune-new")
    assert staging.is_dir()
    r = run_cli(repo, "retune", "--dry-run")
    assert r.returncode == 0 and "interrupted: matmul/avx2" in r.stdout, r.stdout + r.stderr
    assert staging.is_dir()  # a dry run changes nothing
    r = run_cli(repo, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recovered matmul/avx2" in r.stdout and "nothing to re-tune" in r.stdout
    assert not staging.exists() and not folder.with_name(".avx2.tvmtune-old").exists()
    assert (folder / "README.md").is_file() and (folder / "NOTES.md").read_text() == "mine\n"
    assert not (folder / ".tvmtune-publish.json").exists()


# --------------------------------------------------------------------------- remeasure


def _runs(root: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (root / FOLDER / "runs.jsonl").read_text().splitlines()]


def test_a_retune_starts_the_run_history(tuned: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """The first run of the history is measured by the re-tune itself, as every later
    remeasure measures: the bests and the calibration kernels in turns; the manifest
    hashes it and the README's headline is that run's figure, its band not known yet."""
    root, _ = tuned
    (first,) = _runs(root)
    assert first["by"] == "retune" and first["calibration_version"] == 1 and first["window_s"] == 3.0
    # In separate windows, each with the calibration kernels in turns, and who measured it.
    assert len(first["windows"]) == 3 and all(
        set(w["calibration"]) == {"compute", "memory"} and set(w["workloads"]) == {"s64"} for w in first["windows"]
    )
    assert first["host"]["llvm_cpu"] == TARGET["mcpu"] and len(first["host"]["isa"]) == 16
    assert set(first["workloads"]) == {"s64"} and set(first["calibration"]) == {"compute", "memory"}
    for k in [first["workloads"]["s64"], *first["calibration"].values()]:
        assert k["n"] >= 3 and k["fast_s"] <= k["p25_s"] * 1.001 and k["fast_s"] <= k["slow_s"]
    m = manifest_at(root / FOLDER)
    assert m["files"]["runs.jsonl"] == sha256_bytes((root / FOLDER / "runs.jsonl").read_bytes())
    readme = (root / FOLDER / "README.md").read_text()
    assert "| `s64` | **" in readme and "| 1 run; the band is known after 7 more |" in readme


def test_remeasure_on_a_fresh_label_judges_the_first_run_on_its_early_band_and_writes_nothing(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """The runner label `linux,x64` has no pooled band (no other set, no pool file): the
    first remeasure after the re-tune is judged on its early band (the re-tune's run's
    windows), not "6 more runs needed" (issue 67, 5)."""
    root = _copy(tuned[0], tmp_path)
    before = _set(root)
    assert not (root / "tuning_logs/.runners").exists()
    r = run_cli(root, "remeasure", "mm")
    assert "mm/host/s64: best " in r.stdout, r.stdout + r.stderr
    assert "mm on host: a run of the history: 1 best(s) and the calibration kernels" in r.stdout
    # A verdict, on the early band; drift only when every window was beyond it (this
    # 2-us parallel kernel on a shared CI machine), never "N more runs needed".
    assert "more runs needed" not in r.stdout and "the early band of `linux,x64`: ±" in r.stdout, r.stdout
    drift = "DRIFT" in r.stdout
    assert r.returncode == int(drift), r.stdout + r.stderr
    assert "inconclusive: inconclusive" not in r.stdout, r.stdout  # the word once
    # A reader checking the README: this run against its headline, which one run makes.
    assert "x the README's headline" in r.stdout and "(it rests on 1 run: no band yet)" in r.stdout, r.stdout
    assert _set(root) == before  # without --record nothing is written
    j = run_cli(root, "remeasure", "--format", "json")
    (res,) = json.loads(j.stdout)["results"]
    v = res["verdicts"][0]
    assert res["recorded"] is False and _set(root) == before
    assert res["runner_band"]["basis"] == "early" and res["runner_band"]["halfwidth"] >= 0.2, res["runner_band"]
    assert v["state"] != "inconclusive" or "they disagree by" in v["sentence"], v
    assert j.returncode == int(v["state"] == "drift"), j.stderr


def test_a_fresh_label_gives_a_verdict_at_each_of_its_first_recorded_runs(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """Real kernels, real files, a label with no pooled band: the 2nd and 3rd runs of
    the history (the first two `remeasure --record` after the re-tune) each give a
    verdict on the early band, which the run and the README name; the pool file keeps
    each run's windows."""
    from tvmtune_ci.core import runnerband, runs

    root = _copy(tuned[0], tmp_path)
    for n in (2, 3):
        r = run_cli(root, "remeasure", "mm", "--record", "--format", "json")
        (res,) = json.loads(r.stdout)["results"]
        (v,) = res["verdicts"]
        assert len(res["history"]) == n and res["runner_band"]["basis"] == "early", res["runner_band"]
        assert "more runs needed" not in v["sentence"] and "early band of `linux,x64`" in v["sentence"], v
        assert v["state"] != "inconclusive" or (
            "they disagree by" in v["sentence"] or v["sentence"].startswith("not judged")
        ), v
        assert r.returncode == int(v["state"] == "drift"), r.stderr
        assert _runs(root)[-1]["band"]["basis"] == "early"
    pool = runnerband.read_pool(runnerband.pool_path(root / "tuning_logs", "linux,x64"), "linux,x64")
    (mine,) = pool.series.values()
    history = runs.parse_runs((root / FOLDER / "runs.jsonl").read_bytes(), "runs.jsonl")
    kept = 3 - len(runs.disturbed(history, "s64"))  # a run the runner disturbed is left out
    assert len(mine.points) == kept and [len(w) for _, w in mine.windows] == [3] * kept, mine
    readme = (root / FOLDER / "README.md").read_text()
    assert "use the early band of `linux,x64`" in readme and "weaker than a pooled band" in readme
    assert run_cli(root, "check").returncode == 0


def test_remeasure_record_appends_a_run_and_check_vouches_for_it(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    root = _copy(tuned[0], tmp_path)
    old = (root / FOLDER / "runs.jsonl").read_bytes()
    r = run_cli(root, "remeasure", "mm", "--record", "--commit")
    # 1 when every window is beyond the early band (see the test above).
    assert r.returncode == int("DRIFT" in r.stdout), r.stdout + r.stderr
    new = (root / FOLDER / "runs.jsonl").read_bytes()
    assert new.startswith(old) and [x["by"] for x in _runs(root)] == ["retune", "remeasure"]
    assert "| 2 runs; the band is known after 6 more |" in (root / FOLDER / "README.md").read_text()
    assert "record a remeasure run of 1 entry" in git(root, "log", "-1", "--format=%s")
    assert git(root, "status", "--porcelain", "--", str(FOLDER)).strip() == ""  # all of it committed
    for args in (("check",), ("check", "--rehash")):
        c = run_cli(root, *args)
        assert c.returncode == 0, c.stdout + c.stderr
    # A run removed or edited by hand is caught like a hand-edited log.
    (root / FOLDER / "runs.jsonl").write_bytes(old)
    c = run_cli(root, "check")
    assert c.returncode == 1 and "log_modified" in c.stdout and "runs.jsonl" in c.stdout
    r = run_cli(root, "remeasure", "mm", "--record")  # nothing is appended to a doubtful set
    assert r.returncode == 0 and "mm/host: stale, not re-measured" in r.stdout
    assert (root / FOLDER / "runs.jsonl").read_bytes() == old


def test_remeasure_judges_the_first_run_on_its_runner_s_band_and_never_another_s(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """Real kernels, real files: the runner label `linux,x64` has a pooled band (other
    sets' series, this machine's identity), so the first remeasure after the re-tune
    gives a verdict, not "N more runs needed", and names that band; a wider band of
    another label beside it is never used. --record adds this set's series to the pool
    and the README says which band the verdict used."""
    from tvmtune_ci.core import runnerband
    from tvmtune_ci.pipeline.remeasure import runner_identity

    root = _copy(tuned[0], tmp_path)
    here = runner_identity()
    quiet = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0]

    def pool(label: str, scale: float) -> runnerband.Pool:
        return runnerband.Pool(
            label,
            {
                k: runnerband.Series(
                    k,
                    here,
                    here["llvm_cpu"],
                    tuple((f"2026-11-{i + 1:02d}T00:00:00Z", 1 + (v - 1) * scale) for i, v in enumerate(quiet)),
                )
                for k in ("a/host/w@2026-11-01", "b/host/w@2026-11-01")
            },
        )

    logs = root / "tuning_logs"
    runnerband.write_pool(runnerband.pool_path(logs, "linux,x64"), pool("linux,x64", 1.0))
    runnerband.write_pool(runnerband.pool_path(logs, "linux,x64,big"), pool("linux,x64,big", 20.0))
    r = run_cli(root, "remeasure", "mm", "--record", "--format", "json")
    (res,) = json.loads(r.stdout)["results"]
    (v,) = res["verdicts"]
    assert res["runner_band"]["label"] == "linux,x64" and res["runner_band"]["pairs"] == 56, res["runner_band"]
    # Stable or drift; inconclusive only for the job's own reasons (its windows disagreeing,
    # the runner disturbed: a loaded machine), never "N more runs needed".
    assert "more runs needed" not in v["sentence"] and "runner band of `linux,x64`:" in v["sentence"], v
    assert v["state"] != "inconclusive" or (
        "they disagree by" in v["sentence"] or v["sentence"].startswith("not judged")
    ), v
    assert r.returncode == int(v["state"] == "drift"), r.stderr
    grown = runnerband.read_pool(runnerband.pool_path(logs, "linux,x64"), "linux,x64")
    (mine,) = [s for k, s in grown.series.items() if k.startswith("mm/host/s64@")]
    assert len(mine.points) == 2 and mine.host["isa"] == here["isa"]
    readme = (root / FOLDER / "README.md").read_text()
    assert "**Drift verdicts** (`tvmtune-ci remeasure`) use the runner band of `linux,x64`" in readme
    assert _runs(root)[-1]["band"]["label"] == "linux,x64"
    assert run_cli(root, "check").returncode == 0


@pytest.mark.slow
def test_remeasure_nothing_changed_is_stable_and_a_swapped_slower_best_is_drift(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """Real kernels, real runs: with nothing changed the history grows to a band and
    stays stable; the committed best swapped for a slower configuration (hashes
    re-recorded, so check still vouches for the set) is drift, annotated on GitHub."""
    from tvmtune_ci.check.staleness import find_stale
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.pipeline.remeasure import remeasure_target

    # Its own 128^3 matmul, not the session's 64^3: on a runner whose other tenant takes
    # a core, every call of a parallel kernel waits ~0.1 ms at its barrier, and CI saw
    # the 64^3 best (2 us here) and its default (50 us) both measure ~0.1 ms, 1.2x apart.
    # At 128^3 the default is ~0.85 ms against the best's ~10 us.
    src = SMALL_MM.replace('"s64": {"M": 64, "N": 64, "K": 64', '"s128": {"M": 128, "N": 128, "K": 128')
    assert src != SMALL_MM
    # Runs of 8 s, not the fixture's 3: the headline is the fastest 1-s stretch, and with
    # three stretches a run on a shared machine could miss every fast one. CI saw a 3-s
    # run, nothing changed, measure this ~10 us parallel kernel 1.36x its median while
    # both calibration kernels ran as usual: a far run, reported at once.
    config = (tuned[0] / "tvmtune.yaml").read_text().replace("history_s: 3}", "history_s: 8}")
    assert "history_s: 8}" in config
    root = make_repo(tmp_path, config=config, files={"operators/mm.py": src}, operators=False)
    assert run_cli(root, "retune").returncode == 0
    commit_all(root, "tuned")
    base = manifest_at(root / FOLDER)["results"]["s128"]
    # The premise, measured side by side in the re-tune: the default is far slower.
    assert base["baseline"]["latency_s"] > 3 * base["best"]["latency_s"], base
    config = load_config(root / "tvmtune.yaml")
    from tvmtune_ci.core import runs

    def read_history() -> list[runs.Run]:
        return runs.parse_runs((root / FOLDER / "runs.jsonl").read_bytes(), "runs.jsonl")

    states, sentences = [], []
    # 8 runs with the re-tune's make a band of 5 and 3 recent runs; a run the runner
    # disturbed (a calibration kernel >30% off its median: these runs last 8 s on a
    # shared machine) is left out, and then one more run is needed.
    for _ in range(20):
        (r,) = remeasure_target(config, find_stale(config).entries, record=True, say=lambda s: None)
        v = r.verdicts[0]
        states.append(v.state)
        sentences.append(v.sentence)
        if v.state == "drift" and v.band is None:  # the early band's: every window beyond it
            assert r.band is not None and r.band.early is not None and "windows of this run are" in v.sentence, v
        elif v.state == "drift":  # a move beyond the band it quotes (or far), never one inside it
            assert v.band is not None and v.ratio is not None, v
            edge = max(runs.MARGIN * v.band.halfwidth, runs.MIN_CHANGE)
            assert abs(v.ratio - 1) > min(runs.FAR, edge), v
        # Four verdicts at least, so that a rule that calls every slower run drift is seen.
        # And the history's own band reached (8 runs the runner did not disturb): on a
        # fresh label the early band gives the first verdicts, stable from the start.
        own = len(r.history) - len(runs.disturbed(list(r.history), "s128"))
        if v.state == "stable" and len(states) >= 10 and own >= 8:
            break
    # These runs follow each other by 8 s, weeks of a real history squeezed into two
    # minutes, and a runner's slow stretch can outlast three of them: then the last three
    # are slower than the band, and the verdict says drift by design (a slower runner is
    # a slower kernel to whoever runs it). CI saw it three times in noisy hours, the last
    # 1.121x beyond a band of ±7.8%, with this ~10 us parallel kernel slowed more than the
    # 256^3 calibration kernel (its barrier waits on a shared core). How often a runner
    # does that is bench_drift's question, over hours of runs; this test's is that with
    # nothing changed the verdict settles: a stretch the runner caused does not last,
    # because its runs join the band the next runs are read against.
    # A fresh label: the early band judges the first runs, no "N more runs needed".
    assert not any("more runs needed" in x for x in sentences[:6]), sentences
    assert states[-1] == "stable", (states, sentences)
    history = read_history()
    left = len(runs.disturbed(history, "s128"))  # the runs whose disturbance moved the kernel
    assert len(history) == 1 + len(states) and len(history) - left >= 8
    readme = (root / FOLDER / "README.md").read_text()
    assert "runs spread ±" in readme and f"({len(history) - left} runs," in readme, readme
    assert (f"{left} left out: the runner was disturbed" in readme) == (left > 0)

    default_knobs = manifest_at(root / FOLDER)["results"]["s128"]["baseline"]["knobs"]

    def swap(results: dict[str, Any]) -> None:
        results["s128"]["best"]["knobs"] = default_knobs  # the default: far slower

    edit_results(root / FOLDER, swap)
    assert run_cli(root, "check").returncode == 0
    r = run_cli(root, "remeasure", "mm", "--format", "github")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"::warning file={FOLDER}/README.md,title=tuning log drifted::mm/host/s128" in r.stdout
    assert "DRIFT" in r.stdout and "slower" in r.stdout and "1 of 1 bests drifted" in r.stdout
    assert "the compute calibration kernel measured" in r.stdout  # the runner's own speed
    assert "x the README's headline" in r.stdout and "outside its band" in r.stdout, r.stdout


def test_remeasure_refuses_another_machine_and_skips_a_stale_entry(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    from conftest import change_function

    root = _copy(tuned[0], tmp_path)
    path = root / FOLDER / "runs.jsonl"
    data = path.read_bytes().replace(b'"cpu":"', b'"cpu":"Another CPU, not ', 1)
    path.write_bytes(data)
    m = json.loads((root / FOLDER / "manifest.json").read_text())
    m["files"]["runs.jsonl"], m["files_git_blob"]["runs.jsonl"] = sha256_bytes(data), blob_id(data)
    (root / FOLDER / "manifest.json").write_text(json.dumps(m))
    r = run_cli(root, "remeasure", "mm")
    assert r.returncode == 5 and "its run history is a property of that runner" in r.stderr
    # The same model name on another generation of CPU (a VM's "AMD EPYC"): refused too.
    other = path.read_bytes().replace(b'"cpu":"Another CPU, not ', b'"cpu":"', 1)
    assert b'"cpu_id":"' in other  # recorded by the run that tuned it
    other = other.replace(b'"cpu_id":"', b'"cpu_id":"family 0 model 0, not ', 1)
    path.write_bytes(other)
    m["files"]["runs.jsonl"], m["files_git_blob"]["runs.jsonl"] = sha256_bytes(other), blob_id(other)
    (root / FOLDER / "manifest.json").write_text(json.dumps(m))
    r = run_cli(root, "remeasure", "mm")
    assert r.returncode == 5 and "family 0 model 0, not " in r.stderr, r.stdout + r.stderr
    change_function(root / "operators" / "mm.py")
    r = run_cli(root, "remeasure")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mm/host: stale, not re-measured" in r.stdout


@pytest.mark.slow
def test_staleness_is_decided_again_under_the_lock(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """A run that saw the entry stale, and got the lock after another run re-tuned it,
    does not tune it a second time over the fresh set."""
    from conftest import change_function

    from tvmtune_ci.check.staleness import find_stale
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.errors import LockError
    from tvmtune_ci.pipeline import retune_entry

    root = _copy(tuned[0], tmp_path)
    change_function(root / "operators" / "mm.py")
    commit_all(root, "edit the template")
    config = load_config(root / "tvmtune.yaml")
    (seen_stale,) = find_stale(config).stale  # what this run saw before waiting
    other = run_cli(root, "retune", "--trials", "8")  # meanwhile, another run re-tunes it
    assert other.returncode == 0, other.stdout + other.stderr
    before = _set(root)
    with pytest.raises(LockError, match="re-tuned by another run while this one waited"):
        retune_entry(config, seen_stale, trials=8, say=lambda s: None)
    assert _set(root) == before


# --------------------------------------------------------------------------- history replay


def _edit_template(root: Path, old: str, new: str) -> None:
    path = root / "operators/mm.py"
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))
    commit_all(root, "edit the template")


@pytest.mark.slow
def test_a_template_edit_replays_the_old_configurations_first(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """A new candidate for a knob: every old configuration is still a point of the new
    space. Dry run says what would be replayed; the re-tune replays them (built,
    checked, measured: the first trials), starts the search from them, puts the old
    best in the finals, and the README's History section and the commit say so."""
    root = _copy(tuned[0], tmp_path)
    old_manifest = manifest_at(root / FOLDER)
    old_log = json.loads((root / FOLDER / old_manifest["log"]).read_text())
    _edit_template(root, 'define_knob("unroll", [0, 16])', 'define_knob("unroll", [0, 16, 64])')
    dry = run_cli(root, "retune", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "changed unroll: knob [0, 16] -> knob [0, 16, 64]" in dry.stdout
    assert "would be replayed first" in dry.stdout
    r = run_cli(root, "retune", "--trials", "24", "--commit")
    assert r.returncode == 0, r.stdout + r.stderr
    m = manifest_at(root / FOLDER)
    h = m["results"]["s64"]["history"]
    assert h["source"] == old_manifest["log"]
    assert h["offered"] >= 2 and h["whole"] == h["offered"]  # nothing reset
    assert h["built"] == h["correct"] == h["offered"] and h["seeded"]
    assert h["knob_diff"]["changed"] == ["unroll: knob [0, 16] -> knob [0, 16, 64]"]
    # Every other valid record of the old log (decoded with the template as committed
    # with it) trained the cost model first.
    assert h["prior"] == len(old_log["workloads"]["s64"]["records"]) - h["offered"] > 0
    assert h["old_best_s"] is not None and h["verdict"] in ("faster", "equal", "slower")
    # The replayed configurations are the run's first trials, in the log's journal order.
    log = json.loads((root / FOLDER / m["log"]).read_text())
    assert len(log["workloads"]["s64"]["records"]) >= h["offered"]
    readme = (root / FOLDER / "README.md").read_text()
    assert f"### History: the template was edited since `{old_manifest['log']}`" in readme
    assert "computed the right result" in readme and "old best on the new template" in readme
    assert f"the cost model also learned from {h['prior']} other record(s)" in readme
    body = git(root, "log", "-1", "--format=%B")
    assert "mm/host/s64: history: knobs: changed unroll" in body
    assert "old best on the new template" in body
    assert "carried" not in m  # a knob value opened: measured, not carried forward
    assert run_cli(root, "check").returncode == 0


@pytest.mark.slow
def test_an_edit_that_changed_no_kernel_stops_after_the_replay_and_says_why(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """A dead statement in schedule(): the fingerprint changes, no program does. The old
    template (from git, in the priors' child process) and the new one make the same
    module of every old record, and no knob value opened: the replay re-measures the
    old best and the search is not run; the manifest, README and commit say why."""
    root = _copy(tuned[0], tmp_path)
    _edit_template(
        root, '    b = sch.get_sblock("C")\n', '    b = sch.get_sblock("C")\n    _unused = None  # a no-op edit\n'
    )
    assert "template_changed" in run_cli(root, "check").stdout
    r = run_cli(root, "retune", "--trials", "24", "--commit", "--no-carry")
    assert r.returncode == 0, r.stdout + r.stderr
    m = manifest_at(root / FOLDER)
    assert "carried" not in m
    t = m["trials"]["s64"]
    assert t["stop_reason"] == "history_unchanged", t
    assert t["stop_detail"].startswith("the edit changed none of the ")
    h = m["results"]["s64"]["history"]
    assert t["run"] == h["measured"] == h["offered"]  # the replay only
    assert not h["seeded"]  # no search to seed
    # The old best re-measured, not re-ranked against its old runners-up (the old finals
    # ranked the same programs): no verdict, the finals were the old best and the default.
    assert h["verdict"] is None and h["old_best_s"] is not None
    top = m["results"]["s64"]["top"]
    assert [c["knobs"] for c in top if c["stage"] == "finals"] == [m["results"]["s64"]["best"]["knobs"]], top
    readme = (root / FOLDER / "README.md").read_text()
    assert "stopped because the edit changed none of the " in readme
    assert "the search started from them" not in readme
    assert "the edit changed none of the " in git(root, "log", "-1", "--format=%B")
    assert run_cli(root, "check").returncode == 0


@pytest.mark.slow
def test_an_old_search_measured_on_another_cpu_does_not_stand(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """The same no-op edit, but the old set was measured on another generation of CPU
    under the same model name (its family and model differ): its ranking says nothing of
    this runner, so the search runs and the run says why."""
    root = _copy(tuned[0], tmp_path)
    m = manifest_at(root / FOLDER)
    assert m["host"].get("cpu_id"), m["host"]  # recorded by the run that tuned it
    m["host"]["cpu_id"] = "AuthenticAMD family 0 model 0"
    (root / FOLDER / "manifest.json").write_text(json.dumps(m))
    commit_all(root, "the set as another generation of CPU measured it")
    _edit_template(
        root, '    b = sch.get_sblock("C")\n', '    b = sch.get_sblock("C")\n    _unused = None  # a no-op edit\n'
    )
    assert "template_changed" in run_cli(root, "check").stdout
    r = run_cli(root, "retune", "--trials", "24", "--no-carry")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(AuthenticAMD family 0 model 0) x" in r.stdout and "its search does not stand here" in r.stdout, r.stdout
    t = manifest_at(root / FOLDER)["trials"]["s64"]
    assert t["stop_reason"] != "history_unchanged", t


def _as_format_2(root: Path) -> None:
    """The set rewritten as a format-2 manifest (results inline, no git blob ids), as
    this repository's oldest committed sets are, and committed."""
    folder = root / FOLDER
    m = manifest_at(folder)
    m.update(format=2, log_git_blob="")
    del m["files"]["results.json"], m["files_git_blob"]
    (folder / "results.json").unlink()
    (folder / "manifest.json").write_text(json.dumps(m))
    commit_all(root, "a format-2 set")
    assert run_cli(root, "check").returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [5, 2])
def test_an_edit_that_changed_no_kernel_carries_the_set_forward_unmeasured(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path, fmt: int
) -> None:
    """The same dead statement, by default: nothing is measured. The log, its results
    and its run history stay byte for byte (no .bak: nothing was replaced), the manifest
    is re-stamped with the new fingerprint and says why, keeping the date the set was
    measured; README, commit and `check` agree. A format-2 set (results inline) is
    carried in the current format, its results moved to results.json. `--all` (the yearly
    re-tune) measures."""
    root = _copy(tuned[0], tmp_path)
    if fmt == 2:
        _as_format_2(root)
    before, old = _set(root), manifest_at(root / FOLDER)
    _edit_template(
        root, '    b = sch.get_sblock("C")\n', '    b = sch.get_sblock("C")\n    _unused = None  # a no-op edit\n'
    )
    r = run_cli(root, "retune", "--commit")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mm/host/s64: carried forward, 0 trials" in r.stdout, r.stdout
    after = _set(root)
    new = {"results.json"} if fmt == 2 else set()
    assert set(after) == set(before) | new
    assert {n for n in after if after.get(n) != before.get(n)} == {"manifest.json", "README.md", *new}
    m = manifest_at(root / FOLDER)
    assert m["results"] == old["results"]
    assert m["format"] == MANIFEST_FORMAT and m["tuned_on"] == old["tuned_on"] and m["log"] == old["log"]
    assert m["fingerprint"] != old["fingerprint"]
    assert m["carried"]["from_fingerprint"] == old["fingerprint"]
    assert m["carried"]["sentence"].startswith("the template edit changed none of the ")
    assert (
        f"Carried forward on {m['carried']['on']} onto the edited template" in (root / FOLDER / "README.md").read_text()
    )
    assert "carried forward unmeasured: the template edit changed none" in git(root, "log", "-1", "--format=%B")
    assert run_cli(root, "check").returncode == 0
    if fmt == 2:
        return
    # The next edit of the same template replays the carried set as any other.
    _edit_template(root, "    _unused = None  # a no-op edit\n", "    _unused = 1  # another\n")
    r = run_cli(root, "retune", "--all", "--trials", "8")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "carried forward" not in r.stdout and "carried" not in manifest_at(root / FOLDER)


@pytest.mark.slow
def test_an_edit_that_invalidates_every_old_configuration_searches_cold_and_says_so(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """Every knob renamed: no old configuration keeps anything, so none is replayed."""
    root = _copy(tuned[0], tmp_path)
    text = (root / "operators/mm.py").read_text()
    for name in ("tile_i", "tile_j", "unroll", "cache"):
        text = text.replace(f'"{name}"', f'"{name}2"')
    (root / "operators/mm.py").write_text(text)
    commit_all(root, "rename every knob")
    r = run_cli(root, "retune", "--trials", "8")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replaying 0 configuration(s)" in r.stdout
    assert "could be mapped: a cold search" in r.stdout
    h = manifest_at(root / FOLDER)["results"]["s64"]["history"]
    assert h["offered"] == 0 and not h["seeded"] and h["old_best_s"] is None
    assert h["prior"] == 0  # no record keeps a knob: nothing to learn from
    assert set(h["knob_diff"]["added"]) == {"tile_i2", "tile_j2", "unroll2", "cache2"}


@pytest.mark.parametrize("damage", ["tvm", "corrupt"])
@pytest.mark.slow
def test_an_old_log_of_another_tvm_or_corrupt_is_not_replayed_and_nothing_is_lost(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path, damage: str
) -> None:
    root = _copy(tuned[0], tmp_path)
    mpath = root / FOLDER / "manifest.json"
    if damage == "tvm":
        m = json.loads(mpath.read_text())
        m["tvm_version"] = "0.19.0"
        mpath.write_text(json.dumps(m))
        expect = "history replay skipped: the previous log was tuned with TVM 0.19.0"
    else:
        # Tuned some days ago (another log name), its manifest damaged since.
        log = next((root / FOLDER).glob("mm_host_*.json"))
        log.rename(log.with_name("mm_host_2026-01-01.json"))
        mpath.write_text("{ not json")
        expect = "history replay skipped: no readable previous log"
    before = _set(root)
    _edit_template(root, 'define_knob("unroll", [0, 16])', 'define_knob("unroll", [0, 16, 64])')
    r = run_cli(root, "retune", "--trials", "8")
    assert r.returncode == 0, r.stdout + r.stderr
    assert expect in r.stdout
    after = {p.name: p.read_bytes() for p in (root / FOLDER).iterdir()}
    # Every old file is still there, byte for byte: archived as .bak, or (a file the
    # unreadable manifest does not vouch for) left as it was.
    for name, data in before.items():
        kept = [k for k, v in after.items() if v == data and (k == name or k.endswith(".bak"))]
        assert kept, name
    assert manifest_of(after)["results"]["s64"]["history"] is None


@pytest.mark.parametrize("mode", ["named", "nearest", "off"])
@pytest.mark.slow
def test_a_new_target_seeds_from_another_targets_log_unless_told_not_to(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path, mode: str
) -> None:
    """A second target (one core: other hardware, as far as the log knows) has no log.
    Named (`seed-from: host`) or by default (host is the nearest configured target of
    its architecture), its first search replays host's configurations and learns from
    host's records, says so, and stops by the cold rule (another target's log is a weaker
    prior); with `seed-from: false` it starts cold."""
    root = _copy(tuned[0], tmp_path)
    other = {**TARGET, "num-cores": 1}
    extra = {"named": "\n    seed-from: host", "nearest": "", "off": "\n    seed-from: false"}[mode]
    (root / "tvmtune.yaml").write_text(
        CONFIG + f"  host1:\n    target: {json.dumps(other)}\n    runs-on: [linux, x64]{extra}\n"
    )
    commit_all(root, "a second target")
    host_set = _set(root)
    seeded = mode != "off"
    dry = run_cli(root, "retune", "--dry-run", "--target", "host1")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert ("would be replayed first" in dry.stdout) == seeded
    r = run_cli(root, "retune", "--target", "host1", "--trials", "24")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _set(root) == host_set  # the source log is only read
    m = manifest_at(root / "tuning_logs/mm/host1")
    h = m["results"]["s64"]["history"]
    readme = (root / "tuning_logs/mm/host1/README.md").read_text()
    if not seeded:
        assert h is None and "seeding" not in r.stdout and "### History" not in readme
        return
    host_log = json.loads((root / FOLDER / json.loads(host_set["manifest.json"])["log"]).read_text())
    assert h["from_target"] == "host" and h["offered"] >= 2 and h["correct"] == h["offered"]
    assert h["prior"] == len(host_log["workloads"]["s64"]["records"]) - h["offered"] > 0
    said = (
        "history: seeding from the host log"
        if mode == "named"
        else "history: a new target: seeding from the nearest configured target's log, host's"
    )
    assert said in r.stdout, r.stdout
    assert f"### History: seeded from the host log `{h['source']}` (another target: a weaker prior)" in readme
    assert "the best of the host log on this target" in readme
    # The cold rule ended it: the warm rule's reasons (matched the old best) never apply.
    assert m["trials"]["s64"]["stop_reason"] not in ("matched_history", "nowhere_near")
    assert run_cli(root, "check").returncode == 0


def test_dry_run_exits_as_the_real_run_would(tmp_path: Path) -> None:
    """A dry run that lists a run which would fail says so and exits as it would: 5 for
    a target this host cannot run, 2 for a template that cannot be read; 0 otherwise."""
    arm = "  arm:\n    target: {kind: llvm, mtriple: aarch64-linux-gnu, mcpu: cortex-a72}\n"
    root = make_repo(tmp_path, config=CONFIG + arm, files={"operators/mm.py": SMALL_MM}, operators=False)
    r = run_cli(root, "retune", "--dry-run", "--target", "arm")
    assert r.returncode == 5 and "would stop before any trial" in r.stderr, r.stdout + r.stderr
    r = run_cli(root, "retune", "--dry-run", "--target", "host")
    assert r.returncode == 0 and "would be re-tuned" in r.stdout, r.stdout + r.stderr
    (root / "operators/mm.py").write_text(SMALL_MM.replace('"tile_i", "M"', '"tile_i", "MM"'))
    r = run_cli(root, "retune", "--dry-run", "--target", "host")
    assert r.returncode == 2 and "would stop: the template cannot be read" in r.stderr, r.stdout + r.stderr
    assert not (root / "tuning_logs").exists()


def test_the_run_and_its_dry_run_try_a_carry_forward_by_one_rule() -> None:
    """`pipeline.may_carry`, which the run (before it refuses a target it cannot measure)
    and the dry run (in what it says it would do) both ask: carrying is on, a template
    edit is the only reason, and the manifest records the programs (format 2 on)."""
    from dataclasses import replace

    from tvmtune_ci.check.staleness.model import Entry, Reason
    from tvmtune_ci.core.layout import LogSet
    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.reasons import Code
    from tvmtune_ci.pipeline import may_carry

    repo = Path(__file__).resolve().parents[2]
    real = read_manifest(repo / "tuning_logs/matmul/zen4-2c/manifest.json")
    edit = Reason(Code.TEMPLATE_CHANGED, "operators/matmul.py changed")

    def entry(manifest: Any, *reasons: Reason) -> Entry:
        return Entry(
            "matmul",
            "zen4-2c",
            "operators/matmul.py",
            1,
            reasons,
            manifest,
            LogSet.of(Path("tuning_logs"), "matmul", "zen4-2c"),
            {},
        )

    assert real.format >= 2 and may_carry(entry(real, edit))
    assert not may_carry(entry(real, edit), carry=False)  # --no-carry, --all
    assert not may_carry(entry(replace(real, format=1), edit))  # no programs recorded
    assert not may_carry(entry(None, edit))
    assert not may_carry(entry(real, edit, Reason(Code.TVM_CHANGED, "0.26 -> 0.27")))


@pytest.mark.slow
def test_a_time_budget_is_shared_by_the_weights(tmp_path: Path) -> None:
    """retune --budget: the lighter workload goes first with its floor and its weight's
    part of what lies beyond the floors, the heavier last with what is left; each README
    says what share it got, why, and what it took."""
    two = SMALL_MM.replace(
        'WORKLOADS = {"s64": {"M": 64, "N": 64, "K": 64, "dtype": "float32"}}',
        'WORKLOADS = {"s64": {"M": 64, "N": 64, "K": 64, "dtype": "float32"},\n'
        '             "s32": {"M": 32, "N": 64, "K": 32, "dtype": "float32"}}',
    )
    assert two != SMALL_MM
    # No early stop: each search runs to the end of its share.
    config = (
        CONFIG.replace("trials: 16", "trials: 2000\nearly_stop: {patience: 0}")
        + "operators:\n  mm: {workloads: {s64: 3, s32: 1}}\n"
    )
    root = make_repo(tmp_path, config=config, files={"operators/mm.py": two}, operators=False)
    r = run_cli(root, "retune", "--budget", "50s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "budget: 50 s across 2 workloads, the lightest first: mm/host/s32 0.25, mm/host/s64 0.75" in r.stdout
    assert r.stdout.index("s32: budget: ") < r.stdout.index("s64: budget: ")
    m = manifest_at(root / FOLDER)
    heavy, light = m["trials"]["s64"], m["trials"]["s32"]
    # Its share ends the lighter's search (the heavier's is ahead: its gradient must beat
    # it), unless its small space runs out first (a fast runner).
    assert light["stop_reason"] in ("time_budget", "space_exhausted"), light
    if light["stop_reason"] == "time_budget":  # the budget was asked, past the share: why it stopped
        assert "; then its gradient " in light["stop_detail"] or "floors of the 1 item" in light["stop_detail"], light
    assert "weight 0.25 of the 1.00" in light["budget_note"]
    assert "weight 0.75 of the 0.75" in heavy["budget_note"]
    assert "its floor (" in heavy["budget_note"]
    # The first item's share was recomputed from the floor its own warm-up measured (the
    # settings' estimate is a ceiling); the second's floor is the first's, measured.
    assert "s32: budget, its floor measured: " in r.stdout
    assert "measured in its own warm-up" in light["budget_note"], light
    assert "measured in its own warm-up" not in heavy["budget_note"], heavy
    # What each spent, and the whole run against its budget.
    assert "; it took " in heavy["budget_note"] and "; it took " in light["budget_note"]
    assert "budget: spent " in r.stdout and "of 50 s (" in r.stdout and "on 2 of 2 workloads" in r.stdout
    # Whatever is left, each runs its warm-up (32 trials): the floor. How the shares
    # follow the weights is test_budget's (the arithmetic, no clock).
    assert light["run"] >= 32 and heavy["run"] >= 32, (light, heavy)
    readme = (root / FOLDER / "README.md").read_text()
    assert "- budget: " in readme and "weight 0.75 of the 0.75 still to tune" in readme
