"""Fault injection on real `tvmtune-ci retune` processes: nothing lost, nothing crashes.

Each run tunes the tests' small matmul with 8 trials. A killed run gets
TVMTUNE_CI_TEST_KILL_AT=<step> (see publish.py): it SIGKILLs its own process
group (itself and its measuring workers) at that publish step. Each kill is
followed by `check` and a plain `retune` (what the next scheduled job runs);
afterwards the log folder holds the complete old or the complete new set, the
files that are not tvmtune-ci's untouched, and no staging folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import commit_all, git, git_env, make_repo, run_cli
from small_mm import SMALL_MM

from tvmtune_ci.publish.swap import KILL_AT_ENV, MARKER_NAME, NO_EXCHANGE_ENV

# Long (real retune processes killed at each publish step: minutes); `make test` and CI run them, `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

tvm = pytest.importorskip("tvm")

from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402

TARGET = host_target(2)
CONFIG = f"""\
format: 1
trials: 8
batch_size: 8
measure: {{usable_precision: 10, history_s: 1}}  # never "runner too noisy": these tests are about faults
targets:
  host:
    target: {json.dumps(TARGET)}
    runs-on: [linux, x64]
"""
FOLDER = Path("tuning_logs/mm/host")
# Not tvmtune-ci's: each must survive every scenario byte for byte.
USER_FILES = {".gitattributes": b"*.json -diff\n", "notes/keep.txt": b"keep\n", "NOTES.md": b"# why\n"}
GENERATED = ("manifest.json", "results.json", "runs.jsonl", "README.md", "curve.png")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in git_env().items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "CI")}
    return {**env, **extra}


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leftovers(root: Path) -> list[str]:
    return sorted(
        p.name for p in (root / FOLDER).parent.iterdir() if "tvmtune-new" in p.name or "tvmtune-old" in p.name
    )


def _killed(root: Path, step: str, *args: str, no_exchange: bool = False) -> subprocess.CompletedProcess[str]:
    """A real `retune` in its own process group, killed at `step`."""
    env = _env(**{KILL_AT_ENV: step}, **({NO_EXCHANGE_ENV: "1"} if no_exchange else {}))
    r = subprocess.run(
        [sys.executable, "-m", "tvmtune_ci", "retune", *args],
        cwd=root,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == -9, f"not killed at {step}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def _assert_whole(root: Path, old: dict[str, bytes]) -> str:
    """The folder is the complete old set, or the complete new one with the old
    set archived; user files untouched; no leftovers. Returns "old" or "new"."""
    now = _tree(root / FOLDER)
    assert _leftovers(root) == [] and MARKER_NAME not in now, (_leftovers(root), sorted(now))
    for rel, data in USER_FILES.items():
        assert now.get(rel) == data, rel
    if now == old:
        return "old"
    m = json.loads(now["manifest.json"])
    assert hashlib.sha256(now[m["log"]]).hexdigest() == m["log_sha256"]
    for name in ("results.json", "runs.jsonl"):
        assert hashlib.sha256(now[name]).hexdigest() == m["files"][name]
    assert set(GENERATED) <= set(now)
    om = json.loads(old["manifest.json"]) if old else None
    if om is not None:  # the previous set lives on, archived, byte for byte
        assert old["manifest.json"] != now["manifest.json"]
        archived = {n: d for n, d in now.items() if n.endswith(".bak")}
        for name in (*GENERATED, om["log"]):
            assert old[name] in archived.values(), f"{name} of the old set is lost"
        assert om["log"] == m["log"] or om["log"] not in now
    return "new"


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A first publish killed after staging, then recovered by the next `retune`."""
    root = make_repo(
        tmp_path_factory.mktemp("faults"), config=CONFIG, files={"operators/mm.py": SMALL_MM}, operators=False
    )
    for rel, data in USER_FILES.items():  # a folder with notes but no log yet
        (root / FOLDER / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / FOLDER / rel).write_bytes(data)
    commit_all(root, "notes")
    _killed(root, "after_stage")
    assert not (root / FOLDER / "manifest.json").exists()  # not published yet
    assert run_cli(root, "check").returncode == 1
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recovered mm/host" in r.stdout and "nothing to re-tune" in r.stdout
    assert _assert_whole(root, {}) == "new"
    assert run_cli(root, "check").returncode == 0  # trusted by its hashes, before any commit
    # Committed here, once: every test starts from the same committed set, whatever
    # runs first (-k, order) and whatever each one does to its own copy.
    commit_all(root, "tuned")
    return root


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "repo"
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_first_publish_killed_after_staging(first: Path, tmp_path: Path) -> None:
    """The fixture's recovery, seen from a copy: the whole new set, committed, fresh."""
    root = _copy(first, tmp_path)
    assert _assert_whole(root, {}) == "new"
    assert run_cli(root, "check").returncode == 0
    assert git(root, "status", "--porcelain").strip() == ""


@pytest.mark.parametrize(
    ("step", "no_exchange", "expect"),
    [
        ("mid_stage", False, "old"),  # staging half written: dropped
        ("after_stage", False, "new"),  # staged and marked: the rerun finishes it
        ("after_swap", False, "new"),  # swapped, old set not yet cleaned up
        ("fallback_aside", True, "new"),  # no RENAME_EXCHANGE: live folder moved aside, new not in place
    ],
)
def test_retune_killed_while_publishing(first: Path, tmp_path: Path, step: str, no_exchange: bool, expect: str) -> None:
    root = _copy(first, tmp_path)
    old = _tree(root / FOLDER)
    _killed(root, step, "--all", no_exchange=no_exchange)
    check = run_cli(root, "check")
    if step == "fallback_aside":
        # The one moment the non-atomic fallback has no folder in place.
        assert not (root / FOLDER).exists() and check.returncode == 1
    else:
        assert check.returncode == 0, check.stdout + check.stderr
        if expect == "old":
            assert _tree(root / FOLDER) == old
    r = run_cli(root, "retune")  # the next scheduled job
    assert r.returncode == 0, r.stdout + r.stderr
    assert _assert_whole(root, old) == expect
    assert run_cli(root, "check").returncode == 0


def test_two_retunes_of_one_entry(first: Path, tmp_path: Path) -> None:
    root = _copy(first, tmp_path)
    old = _tree(root / FOLDER)
    lock = root / "tuning_logs/mm/.host.tvmtune-lock"
    one = subprocess.Popen(
        [sys.executable, "-m", "tvmtune_ci", "retune", "--all"],
        cwd=root,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # until the first one holds the lock (it writes its pid into the file)
            try:
                if json.loads(lock.read_text())["pid"] == one.pid:
                    break
            except (OSError, ValueError, KeyError):
                pass
            assert one.poll() is None and time.monotonic() < deadline, "the first retune never took the lock"
            time.sleep(0.05)
        two = run_cli(root, "retune", "--all")
        out, _ = one.communicate(timeout=300)
    finally:
        if one.poll() is None:
            os.killpg(one.pid, 9)
            one.wait()
    assert two.returncode == 6, two.stdout + two.stderr
    assert f"pid {one.pid}" in two.stderr and "mm/host" in two.stderr
    assert one.returncode == 0, out
    assert _assert_whole(root, old) == "new"
    assert run_cli(root, "check").returncode == 0


# Holds each push in the origin until two have arrived, so that both runners
# push from the same base: a real race, every time.
BARRIER = """#!/bin/sh
cat >/dev/null
d="$GIT_DIR/arrived"; mkdir -p "$d"; touch "$d/$$"
i=0
while [ "$(ls "$d" | wc -l)" -lt 2 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
exit 0
"""


def test_two_retune_commit_push_racing_on_one_origin_both_land(first: Path, tmp_path: Path) -> None:
    src = _copy(first, tmp_path)
    # A second target: each runner re-tunes its own (operator, target), as the matrix does.
    cfg = src / "tvmtune.yaml"
    cfg.write_text(
        cfg.read_text() + f"  host1:\n    target: {json.dumps({**TARGET, 'num-cores': 1})}\n    runs-on: [linux, x64]\n"
    )
    base = commit_all(src, "a second target")
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(src), str(origin))
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(BARRIER)
    hook.chmod(0o755)
    runs = []
    for name, target in (("a", "host"), ("b", "host1")):
        work = tmp_path / name
        git(tmp_path, "clone", "-q", str(origin), str(work))
        runs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tvmtune_ci", "retune", "mm", "--target", target, "--all", "--commit", "--push"],
                cwd=work,
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    outs = [p.communicate(timeout=400)[0] for p in runs]
    for p, out in zip(runs, outs, strict=True):
        assert p.returncode == 0, out
    assert any("rebased 1x" in out for out in outs), outs  # one lost the race and retried
    subjects = git(origin, "log", "--format=%s", f"{base}..main").splitlines()
    assert len(subjects) == 2, subjects
    assert {"host", "host1"} == {s.split(" on ")[1].split(" ")[0] for s in subjects}
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(origin), str(fresh))
    assert run_cli(fresh, "check").returncode == 0
    for rel, data in USER_FILES.items():
        assert (fresh / FOLDER / rel).read_bytes() == data
