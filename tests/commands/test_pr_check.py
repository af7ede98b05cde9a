"""The PR status check on a fork's change: flagged, annotated, never executed.

What `tvmtune-pr-check.yml` runs on a GitHub-hosted runner without TVM:
`tvmtune-ci check --format github --changed-since <base> --pr`. The fork's
template is hostile: importing it would write a marker file, and `tvm` on the
path refuses to import. Neither may happen.
"""

from __future__ import annotations

from pathlib import Path

from conftest import change_function, commit_all, git, run_cli, write

HOSTILE = """
import pathlib
pathlib.Path({marker!r}).write_text("template code ran")
"""


def test_fork_change_to_a_template_is_flagged_without_running_it(repo: Path, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    marker = tmp_path / "template-code-ran"
    tvm_marker = tmp_path / "tvm-imported"
    fake = tmp_path / "fake"
    write(fake, "tvm/__init__.py", f"open({str(tvm_marker)!r}, 'w').close()\nraise RuntimeError('no TVM here')\n")
    # The fork: a "fix" to the schedule plus module-level code that must never run.
    tpl = repo / "operators/matmul.py"
    src = tpl.read_text()
    tpl.write_text(HOSTILE.format(marker=str(marker)) + src)
    change_function(tpl, "schedule")
    commit_all(repo, "fork: tweak the matmul schedule")
    summary = tmp_path / "summary.md"
    r = run_cli(repo, "check", "--format", "github", "--changed-since", base, "--pr",
                env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "PYTHONPATH": str(fake)})
    assert r.returncode == 1, r.stdout + r.stderr
    errors = [line for line in r.stdout.splitlines() if line.startswith("::error ")]
    assert errors and all("file=operators/matmul.py" in e for e in errors), r.stdout
    assert any("template_changed" in e for e in errors)
    # Only the changed operator's entries are reported.
    assert "conv2d" not in r.stdout and "softmax" not in r.stdout
    assert "matmul" in summary.read_text()
    assert not marker.exists(), "the fork's template code was executed"
    assert not tvm_marker.exists(), "tvm was imported"


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
