"""A re-tune that costs what changed (pipeline/partial.py, pipeline/siblings.py), end to
end on real TVM, real git and real files: a workload added to a tuned set is the only
one tuned, seeded from its siblings; the others are carried byte for byte with their
run history; a removed workload's records are archived, a changed one is tuned again;
a broken sibling prior costs the prior, never the re-tune."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import commit_all, git, make_repo, manifest_at, run_cli
from small_mm import SMALL_MM

tvm = pytest.importorskip("tvm")

from tvmtune_ci.tune.hostcheck import HOST_ENV, host_target  # noqa: E402

TARGET = host_target(2)
CONFIG = f"""\
format: 1
trials: 8
batch_size: 8
measure: {{time_cap_s: 1.0, usable_precision: 10, history_s: 2}}  # a busy machine is no reason to fail here
targets:
  host:
    target: {json.dumps(TARGET)}
    runs-on: [linux, x64]
"""
FOLDER = Path("tuning_logs/mm/host")
TWO = '{"s64": {"M": 64, "N": 64, "K": 64, "dtype": "float32"}, "s48": {"M": 48, "N": 48, "K": 48, "dtype": "float32"}}'
START = SMALL_MM.replace('{"s64": {"M": 64, "N": 64, "K": 64, "dtype": "float32"}}', TWO)
assert START != SMALL_MM


def _set_workloads(root: Path, workloads: str) -> None:
    path = root / "operators/mm.py"
    text = re.sub(r"^WORKLOADS = .*$", f"WORKLOADS = {workloads}", path.read_text(), flags=re.M)
    path.write_text(text)
    commit_all(root, "change the workloads")


def _block(log_text: str, workload: str) -> str:
    """One workload's lines of a rendered log (records.render_log), without the comma
    that depends on whether another workload follows."""
    lines = log_text.splitlines()
    start = lines.index(f'    "{workload}": {{')
    end = next(i for i in range(start + 1, len(lines)) if lines[i] in ("    }", "    },"))
    return "\n".join(lines[start:end]) + "\n    }"


def _log(root: Path) -> tuple[dict[str, Any], str]:
    m = manifest_at(root / FOLDER)
    return m, (root / FOLDER / m["log"]).read_text()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_repo(
        tmp_path_factory.mktemp("partial"), config=CONFIG, files={"operators/mm.py": START}, operators=False
    )
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    commit_all(root, "tuned")
    return root


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "repo"
    shutil.copytree(src, dst, symlinks=True)
    return dst


@pytest.mark.slow
def test_an_added_workload_is_the_only_one_tuned_and_seeded_from_its_siblings(tuned: Path, tmp_path: Path) -> None:
    """s96 added: only it is searched, its first trials are s64's and s48's bests mapped
    onto it (nearest first) and the cost model learned their records first. s64 and s48
    keep their log entries byte for byte, their results, trials and run history; the
    set's date stays theirs; README, commit and `check` agree."""
    root = _copy(tuned, tmp_path)
    old, old_text = _log(root)
    old_runs = (root / FOLDER / "runs.jsonl").read_bytes()
    _set_workloads(root, TWO[:-1] + ', "s96": {"M": 96, "N": 96, "K": 96, "dtype": "float32"}}')
    dry = run_cli(root, "retune", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "partial re-tune: only workloads changed (added s96): tuned s96" in dry.stdout, dry.stdout
    assert "history s96: a new shape: " in dry.stdout and "(s64, s48; nearest first)" in dry.stdout
    assert "history s64" not in dry.stdout  # carried: nothing replayed
    # Figures measured another way would not sit beside the carried ones: the whole set.
    config = (root / "tvmtune.yaml").read_text()
    (root / "tvmtune.yaml").write_text(config.replace("time_cap_s: 1.0", "time_cap_s: 1.5"))
    dry = run_cli(root, "retune", "--dry-run")
    assert (
        "every workload would be re-tuned: the measurement settings changed since it was tuned "
        "(time_cap_s)" in dry.stdout
    ), dry.stdout
    (root / "tvmtune.yaml").write_text(config)
    r = run_cli(root, "retune", "--commit")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert (
        f"partial re-tune: only workloads changed (added s96): tuned s96; carried unmeasured from {old['log']}" in out
    ), out
    assert "s96: a new shape: seeded from its siblings" in out
    assert "mm/host/s64: carried unmeasured" in out and "mm/host/s48: carried unmeasured" in out
    assert "s64: " not in out.replace("mm/host/s64: carried", "")  # s64 not tuned: no line of its own
    m, text = _log(root)
    for w in ("s64", "s48"):
        assert _block(text, w) == _block(old_text, w)
        assert m["results"][w] == old["results"][w] and m["trials"][w] == old["trials"][w]
    assert m["tuned_on"] == old["tuned_on"] and m["format"] == 6
    assert m["partial"]["tuned"] == ["s96"] and m["partial"]["carried"] == ["s64", "s48"]
    assert m["partial"]["removed"] == [] and m["partial"]["from_log"] == old["log"]
    h = m["results"]["s96"]["history"]
    assert h["siblings"] == ["s64", "s48"] and h["offered"] >= 1 and h["correct"] >= 1
    assert h["prior"] >= 1  # their other records, labelled at the new shape's FLOPs
    # The replayed sibling configurations were the run's first trials.
    assert m["trials"]["s96"]["run"] >= h["measured"]
    # The run history goes on: the old lines as they were, then one run of s96 alone.
    runs = (root / FOLDER / "runs.jsonl").read_bytes()
    assert runs.startswith(old_runs)
    last = json.loads(runs[len(old_runs) :].decode().splitlines()[-1])
    assert set(last["workloads"]) == {"s96"} and last["by"] == "retune"
    assert "of the 2 s a run of all" in out
    readme = (root / FOLDER / "README.md").read_text()
    assert f"Re-tuned in part on {m['partial']['on']}: only workloads changed (added s96)" in readme
    assert "### History: a new shape, seeded from its siblings" in readme
    body = git(root, "log", "-1", "--format=%B")
    assert "mm/host/s64: carried unmeasured from" in body and "(s96 tuned, 2 carried)" in body
    assert any(p.name.endswith(".bak") for p in (root / FOLDER).iterdir())  # the old set archived
    assert run_cli(root, "check").returncode == 0
    # And the set is whole again: a second re-tune has nothing to do.
    assert "nothing" in run_cli(root, "retune").stdout.lower()


@pytest.mark.slow
def test_a_removed_workload_is_archived_and_a_changed_one_tuned_again(tuned: Path, tmp_path: Path) -> None:
    """s48 removed and s64 changed to 80^3: s64 is tuned (its old shape a sibling), s48's
    records leave the set and stay in the archived log, and the run history keeps no
    figure of either old kernel."""
    root = _copy(tuned, tmp_path)
    old, old_text = _log(root)
    _set_workloads(root, '{"s64": {"M": 80, "N": 80, "K": 80, "dtype": "float32"}}')
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    # Nothing unchanged is left to carry: the whole set is re-tuned, and says why.
    assert "every workload re-tuned: no workload of the previous set is left unchanged" in r.stdout
    root = _copy(tuned, tmp_path / "b")
    _set_workloads(
        root,
        '{"s64": {"M": 80, "N": 80, "K": 80, "dtype": "float32"}, '
        '"s48": {"M": 48, "N": 48, "K": 48, "dtype": "float32"}, '
        '"s32": {"M": 32, "N": 32, "K": 32, "dtype": "float32"}}',
    )
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(added s32; parameters changed: s64)" in r.stdout
    m, text = _log(root)
    assert m["partial"]["changed"] == ["s64"] and m["partial"]["carried"] == ["s48"]
    assert _block(text, "s48") == _block(old_text, "s48")
    assert "s48" in m["results"]["s64"]["history"]["siblings"]
    assert "s64" in m["results"]["s64"]["history"]["siblings"]  # its own old shape
    runs = [json.loads(x) for x in (root / FOLDER / "runs.jsonl").read_text().splitlines()]
    assert all("s64" not in x["workloads"] for x in runs[:-1])  # the old 64^3 kernel's figures left
    assert set(runs[-1]["workloads"]) == {"s64", "s32"}
    # Now remove s48: nothing to tune; its records are archived, not re-tuned. Nothing is
    # measured, so neither a host that cannot run the target (core2: no AVX) nor a set
    # measured on another machine stops it, and the manifest keeps the machine and the
    # settings that measured every figure it holds.
    commit_all(root, "partial")
    m = manifest_at(root / FOLDER)
    m["host"]["cpu_id"] = "AuthenticAMD family 0 model 0"
    (root / FOLDER / "manifest.json").write_text(json.dumps(m))
    commit_all(root, "the set as another generation of CPU measured it")
    before = {p.name for p in (root / FOLDER).iterdir()}
    _set_workloads(
        root,
        '{"s64": {"M": 80, "N": 80, "K": 80, "dtype": "float32"}, '
        '"s32": {"M": 32, "N": 32, "K": 32, "dtype": "float32"}}',
    )
    prev, prev_text = _log(root)
    cannot = {HOST_ENV: "core2"}
    dry = run_cli(root, "retune", "--dry-run", env=cannot)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "only workloads were removed: archiving their records measures nothing" in dry.stdout, dry.stdout
    r = run_cli(root, "retune", env=cannot)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "core2 (TVMTUNE_TEST_HOST_CPU) lacks" in r.stdout  # refused, and the refusal did not stand
    assert "(removed s48)" in r.stdout and "a run of the history" not in r.stdout
    m, text = _log(root)
    assert set(m["results"]) == {"s64", "s32"} and '"s48"' not in text
    assert (m["host"], m["measure"], m["seed"]) == (prev["host"], prev["measure"], prev["seed"])
    for w in ("s64", "s32"):
        assert _block(text, w) == _block(prev_text, w)
    new_baks = {p.name for p in (root / FOLDER).iterdir()} - before
    archived = [n for n in new_baks if n.endswith(".bak") and n.startswith(prev["log"])]
    assert archived and '"s48"' in (root / FOLDER / archived[0]).read_text()
    assert run_cli(root, "check").returncode == 0


@pytest.mark.slow
def test_a_broken_sibling_prior_costs_the_prior_not_the_re_tune(tuned: Path, tmp_path: Path) -> None:
    """The old log's records cannot be decoded: s64's parameters changed, so its old
    shape's records decode only with the template as it was committed with the log, and
    that commit is gone (the repository was re-created from an export, the set never
    committed here). s64 is still seeded from the manifest's bests (its own old shape's
    and s48's), its prior is empty, and the re-tune publishes. (An added shape's records
    decode in this process with the template as imported, and need no commit:
    test_priors.py holds what that path does when it fails.)"""
    root = _copy(tuned, tmp_path)
    shutil.rmtree(root / ".git")  # a repository re-created from an export: no history
    git(root, "init", "-q", "-b", "main")
    (root / ".git/info/exclude").write_text("tuning_logs/\n")  # the set stays out of git
    mpath = root / FOLDER / "manifest.json"
    m = json.loads(mpath.read_text())
    m["template_commit"] = "0123456789abcdef0123456789abcdef01234567"
    mpath.write_text(json.dumps(m))
    _set_workloads(
        root,
        '{"s64": {"M": 80, "N": 80, "K": 80, "dtype": "float32"}, "s48": {"M": 48, "N": 48, "K": 48, "dtype": "float32"}}',
    )
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the cost model is not trained on the previous log's other records" in r.stdout, r.stdout
    m = manifest_at(root / FOLDER)
    h = m["results"]["s64"]["history"]
    assert set(h["siblings"]) == {"s64", "s48"} and h["prior"] == 0 and h["offered"] >= 1
    assert m["partial"]["changed"] == ["s64"] and m["partial"]["carried"] == ["s48"]


@pytest.mark.slow
def test_a_set_tuned_under_another_history_s_tunes_only_the_added_workload(tuned: Path, tmp_path: Path) -> None:
    """measure.history_s raised since the set was tuned (issue 67): the length of a run
    of the history does not change what a figure means, so s96 alone is tuned and s64
    and s48 are carried; the manifest records this run's settings and, in its partial,
    the history_s the carried ones were tuned with."""
    root = _copy(tuned, tmp_path)
    old, old_text = _log(root)
    assert old["measure"]["history_s"] == 2
    config = (root / "tvmtune.yaml").read_text()
    (root / "tvmtune.yaml").write_text(config.replace("history_s: 2}", "history_s: 3}"))
    _set_workloads(root, TWO[:-1] + ', "s96": {"M": 96, "N": 96, "K": 96, "dtype": "float32"}}')
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "partial re-tune: only workloads changed (added s96): tuned s96; carried unmeasured" in r.stdout, r.stdout
    assert "(history_s 2)" in r.stdout
    m, text = _log(root)
    assert m["partial"]["tuned"] == ["s96"] and m["partial"]["carried"] == ["s64", "s48"]
    assert m["partial"]["carried_settings"] == {"history_s": 2}
    assert m["measure"]["history_s"] == 3
    for w in ("s64", "s48"):
        assert _block(text, w) == _block(old_text, w)
        assert m["results"][w] == old["results"][w]
    assert "of the 3 s a run of all" in r.stdout
    assert run_cli(root, "check").returncode == 0
