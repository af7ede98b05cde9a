"""The PR status check on a fork's change: flagged, annotated, never executed.

What `tvmtune-pr-check.yml` runs on a GitHub-hosted runner without TVM:
`tvmtune-ci check --format github --changed-since <base> --pr`. The fork's code
is hostile: importing it would write a marker file, and `tvm` on the path
refuses to import. Neither may happen in `check`, `check --pr`, `status` or
`matrix`, and each must still see the entry as stale.

The payloads are valid Python placed where an import runs them (the test proves
it by importing the template once at the end): after the `__future__` import of
a template, at module level of an in-repo helper module, inside a KNOBS
expression.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import commit_all, freshen_all, git, make_repo, run_cli, write

FUTURE = "from __future__ import annotations\n"
OPERATORS = ("batch_matmul", "conv2d", "conv2d_1x1", "conv2d_winograd", "dense", "matmul", "softmax")


@pytest.fixture(scope="module")
def _all_fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Every operator, not just matmul: "the others are not reported" must be able to fail.
    root = make_repo(tmp_path_factory.mktemp("pr"), operators=True)
    assert {p.stem for p in (root / "operators").glob("[!_]*.py")} == set(OPERATORS)
    freshen_all(root)
    commit_all(root, "tune")
    return root


@pytest.fixture
def repo(tmp_path: Path, _all_fresh: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(_all_fresh, root, symlinks=True)
    return root


def payload(marker: Path) -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).write_text('fork code ran')\n"


def after_future(path: Path, code: str) -> str:
    """Insert `code` right after the file's `from __future__` import (still valid Python)."""
    src = path.read_text()
    assert src.count(FUTURE) == 1, path
    return src.replace(FUTURE, FUTURE + "\n" + code, 1)


def hostile_template(root: Path, marker: Path) -> set[str]:
    tpl = root / "operators/matmul.py"
    tpl.write_text(after_future(tpl, payload(marker)))
    return {"matmul"}


def hostile_helper(root: Path, marker: Path) -> set[str]:
    helper = root / "operators/_gemm.py"
    helper.write_text(after_future(helper, payload(marker)))
    return {"batch_matmul", "conv2d_1x1", "conv2d_winograd", "matmul", "dense"}  # all five import operators._gemm


def hostile_knobs(root: Path, marker: Path) -> set[str]:
    tpl = root / "operators/matmul.py"
    src = tpl.read_text()
    knobs = "KNOBS = [\n"
    assert src.count(knobs) == 1
    knob = f'    define_knob("x", [__import__("os").system("touch {marker}") or 1]),\n'
    src = src.replace(knobs, knobs + knob, 1)
    if "define_knob" not in src.split("KNOBS")[0]:
        src = src.replace("from tvmtune_ci.template import ", "from tvmtune_ci.template import define_knob, ", 1)
    tpl.write_text(src)
    return {"matmul"}


HOSTILE = {"template": hostile_template, "helper": hostile_helper, "knobs": hostile_knobs}


@pytest.mark.parametrize("where", list(HOSTILE))
def test_hostile_fork_code_is_flagged_and_never_run(repo: Path, tmp_path: Path, where: str) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    marker = tmp_path / "fork-code-ran"
    tvm_marker = tmp_path / "tvm-imported"
    fake = tmp_path / "fake"
    write(fake, "tvm/__init__.py", f"open({str(tvm_marker)!r}, 'w').close()\nraise RuntimeError('no TVM here')\n")
    stale_ops = HOSTILE[where](repo, marker)
    commit_all(repo, f"fork: hostile code in the {where}")
    changed = git(repo, "diff", "--name-only", base, "HEAD").split()
    for rel in changed:
        ast.parse((repo / rel).read_text(), filename=rel)  # valid Python, so it could run
    env = {"PYTHONPATH": str(fake)}
    summary = tmp_path / "summary.md"
    gh = {**env, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}

    def ran() -> str:
        return f"the fork's code ran (marker written) in {where}"

    # check: exit 1, the stale operators and no others, for the code that changed.
    r = run_cli(repo, "check", "--format", "json", env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not marker.exists(), ran()
    entries = json.loads(r.stdout)["entries"]
    assert {e["operator"] for e in entries if not e["fresh"]} == stale_ops, r.stdout
    codes = {x["code"] for e in entries for x in e["reasons"]}
    assert codes == {"template_invalid" if where == "knobs" else "template_changed"}, r.stdout

    # check --pr, as the PR workflow runs it: errors on the changed files only.
    r = run_cli(repo, "check", "--format", "github", "--changed-since", base, "--pr", env=gh)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not marker.exists(), ran()
    errors = [line for line in r.stdout.splitlines() if line.startswith("::error ")]
    assert errors, r.stdout
    assert all(any(f"file={rel}" in e for rel in changed) for e in errors), r.stdout
    for op in set(OPERATORS) - stale_ops:
        # as a whole name: conv2d is fresh where conv2d_1x1 is reported
        assert not re.search(rf"(?<!\w){op}(?!\w)", r.stdout), f"{op} is fresh but reported:\n{r.stdout}"
    assert all(op in summary.read_text() for op in stale_ops)

    # status: every entry shown, the stale ones as STALE.
    r = run_cli(repo, "status", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists(), ran()
    states = {line.split()[0].split("/")[0] for line in r.stdout.splitlines() if line.split()[1:2] == ["STALE"]}
    assert states == stale_ops, r.stdout

    # matrix (as the push trigger runs it): a job per stale entry, no others. A
    # template that does not read (a call in KNOBS) is named as skipped instead:
    # a runner cannot tune it, and check already fails.
    invalid = where == "knobs"
    for args in ([], ["--changed-since", base]):
        r = run_cli(repo, "matrix", *args, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not marker.exists(), ran()
        jobs = json.loads(r.stdout.splitlines()[0])["include"]
        assert {j["operator"] for j in jobs} == (set() if invalid else stale_ops), r.stdout
        assert len(jobs) == (0 if invalid else 2 * len(stale_ops))  # two configured targets
        skipped = {line.split()[1] for line in r.stderr.splitlines() if line.startswith("skipped ")}
        assert skipped == (stale_ops if invalid else set()), r.stderr

    assert not tvm_marker.exists(), "tvm was imported"

    # The payload is live: importing the template (what retune does) runs it.
    subprocess.run(
        [sys.executable, "-c", "import runpy, sys; sys.path.insert(0, '.'); runpy.run_path('operators/matmul.py')"],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    assert marker.exists(), f"the {where} payload would never run: the test proves nothing"


def test_pr_check_warns_only_when_configured(repo: Path, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    cfg = repo / "tvmtune.yaml"
    cfg.write_text(cfg.read_text() + "pr_check: warn\n")
    tpl = repo / "operators/matmul.py"
    tpl.write_text(tpl.read_text().replace("max_factor=", "max_factor=2*", 1))
    commit_all(repo, "fork: widen a split")
    r = run_cli(repo, "check", "--format", "github", "--changed-since", base, "--pr", env={"GITHUB_ACTIONS": "true"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "::warning " in r.stdout and "::error " not in r.stdout
