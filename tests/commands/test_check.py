"""`tvmtune-ci check`: output formats and exit codes, in-process and as a real CLI."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest
from conftest import (
    CONFIG,
    change_function,
    commit_all,
    double_a_shape,
    double_a_split_bound,
    edit_results,
    freshen_all,
    make_repo,
    run_cli,
    tuned_on,
    write,
)

from tvmtune_ci.core.template import read_template

MATMUL = "operators/matmul.py"


def edit(root: Path, rel: str, old: str, new: str) -> None:
    p = root / rel
    assert old in p.read_text()
    p.write_text(p.read_text().replace(old, new, 1))


def schedule_line(repo: Path) -> int:
    return read_template(repo / MATMUL).line


def test_all_fresh_exits_0(cli, repo: Path) -> None:  # noqa: ANN001
    # As of the day the session's fixture tuned: the suite may cross midnight.
    code, out, _ = cli("check", "--as-of", tuned_on(repo).isoformat())
    lines = out.splitlines()
    assert code == 0
    assert "fresh matmul/avx512 (tuned 0 days ago)" in lines and "fresh matmul/avx2 (tuned 0 days ago)" in lines
    assert all(x.startswith("fresh ") for x in lines[:-1])
    assert lines[-1] == f"all {len(lines) - 1} entries fresh"


def test_stale_exits_1_with_one_line_per_entry_and_the_fix(cli, repo: Path) -> None:  # noqa: ANN001
    change_function(repo / MATMUL, "schedule")
    code, out, _ = cli("check")
    assert code == 1
    lines = out.splitlines()
    stale = [x for x in lines if x.startswith("STALE")]
    assert len(stale) == 2 and len(lines) == 1 + sum(1 for x in lines if x.startswith(("fresh ", "STALE ")))
    line = schedule_line(repo)
    assert stale[0] == f"STALE matmul/avx512: template_changed (operators/matmul.py:schedule changed (line {line}))"
    assert stale[1].startswith("STALE matmul/avx2: template_changed (operators/matmul.py:schedule")
    assert lines[-1] == (
        f"2 of {len(lines) - 1} entries stale; run `tvmtune-ci retune` to re-tune the stale "
        "entries and rewrite their logs, then commit them"
    )


def test_json_format(cli, repo: Path) -> None:  # noqa: ANN001
    edit(repo, "tvmtune.yaml", "mcpu: haswell", "mcpu: znver3")
    (repo / "tuning_logs/gone/avx2").mkdir(parents=True)
    code, out, _ = cli("check", "--format", "json")
    assert code == 1
    data = json.loads(out)
    assert set(data) == {"format", "entries", "orphans", "warnings", "logs_trusted", "templates_trusted", "models"}
    assert data["format"] == 1
    assert data["models"] == []  # no `models:` in this repo's tvmtune.yaml
    # Every log is committed and unmodified: git's index vouches for all of them.
    assert data["logs_trusted"] == len(data["entries"])
    _, out, _ = cli("check", "--format", "json", "--rehash")
    assert json.loads(out)["logs_trusted"] == 0
    fresh, stale = [e for e in data["entries"] if e["operator"] == "matmul"]
    line = schedule_line(repo)
    assert fresh == {
        "operator": "matmul",
        "target": "avx512",
        "fresh": True,
        "reasons": [],
        "template": {"file": MATMUL, "line": line},
        "renamed_from": None,
        "retired": None,
    }
    assert stale["fresh"] is False and set(stale) == set(fresh)
    assert stale["reasons"] == [
        {
            "code": "target_changed",
            "detail": 'tuned for {"kind": "llvm", "mcpu": "haswell"}, '
            'configured now as {"kind": "llvm", "mcpu": "znver3"}',
            "file": "tvmtune.yaml",
            "line": CONFIG.splitlines().index("  avx2:") + 1,
        }
    ]
    assert data["orphans"][0]["code"] == "orphaned" and data["orphans"][0]["file"] == "tuning_logs/gone"


def test_github_format_annotates_the_changed_code_and_writes_the_summary(
    cli,
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    change_function(repo / MATMUL, "schedule")
    log = next((repo / "tuning_logs/matmul/avx512").glob("matmul_*.json"))
    log.write_bytes(log.read_bytes() + b" ")
    (repo / "tuning_logs/gone").mkdir()
    code, out, _ = cli("check", "--format", "github")
    assert code == 1
    line = schedule_line(repo)
    errors = [x for x in out.splitlines() if x.startswith("::error")]
    assert len(errors) == 2
    assert errors[0].startswith(f"::error file={MATMUL},line={line},title=stale tuning log%3A matmul/avx512::")
    assert "template_changed: operators/matmul.py:schedule changed" in errors[0]
    assert "log_modified" in errors[0] and "log_modified" not in errors[1]
    # An orphaned folder is in the step summary, not an annotation of its own.
    assert not [x for x in out.splitlines() if x.startswith("::") and "tuning_logs/gone" in x], out
    text = summary.read_text()
    assert "| entry | state | reasons |" in text and "| matmul/avx512 | **stale** |" in text
    assert "| tuning_logs/gone | orphaned |" in text


def test_many_orphaned_folders_are_one_line_and_kept_ones_none(cli, repo: Path) -> None:  # noqa: ANN001
    """A target switch leaves a folder per operator: one summary line names the command
    that lists them; folders declared under `keep:` are silent, and listed as kept."""
    for t in ("zen3-2c", "zen5-2c", "zen9-2c"):
        (repo / f"tuning_logs/matmul/{t}").mkdir(parents=True)
    code, out, _ = cli("check")
    warnings = [x for x in out.splitlines() if x.startswith("warning:")]
    assert code == 0 and len(warnings) == 1, out
    assert warnings[0].startswith("warning: 3 log folders hold logs") and "status --orphans" in warnings[0]
    _, listed, _ = cli("status", "--orphans")
    assert [x.split()[0] for x in listed.splitlines()] == ["orphaned"] * 3
    (repo / "tvmtune.yaml").write_text((repo / "tvmtune.yaml").read_text() + "keep: [zen3-2c, matmul/zen5-2c]\n")
    code, out, _ = cli("check")
    warnings = [x for x in out.splitlines() if x.startswith("warning:")]
    assert code == 0 and len(warnings) == 1 and "'zen9-2c'" in warnings[0], out
    _, listed, _ = cli("status", "--orphans")
    assert sorted(x.split()[:2] for x in listed.splitlines()) == [
        ["kept", "tuning_logs/matmul/zen3-2c/"],
        ["kept", "tuning_logs/matmul/zen5-2c/"],
        ["orphaned", "tuning_logs/matmul/zen9-2c/:"],
    ]
    _, out, _ = cli("status")
    assert "zen3-2c" not in out and "zen9-2c" in out


def test_github_annotation_for_a_non_code_reason_is_at_the_template(cli, repo: Path) -> None:  # noqa: ANN001
    later = (tuned_on(repo) + datetime.timedelta(days=366)).isoformat()
    code, out, _ = cli("check", "--format", "github", "--as-of", later)
    assert code == 1
    line = schedule_line(repo)
    assert f"::error file={MATMUL},line={line}," in out and "expired: tuned on" in out


def test_as_of_a_year_and_a_day_later_is_expired(cli) -> None:  # noqa: ANN001
    later = (datetime.date.today() + datetime.timedelta(days=366)).isoformat()
    code, out, _ = cli("check", "--as-of", later)
    assert code == 1
    assert "STALE matmul/avx2: expired (tuned on" in out


def test_bad_as_of_is_exit_2_with_the_fix(cli) -> None:  # noqa: ANN001
    code, _, err = cli("check", "--as-of", "2026-13-01")
    assert code == 2
    assert "--as-of '2026-13-01' is not a date; write it as YYYY-MM-DD" in err


def test_warn_only_and_pr_mode(cli, repo: Path) -> None:  # noqa: ANN001
    w, key, old, new = double_a_shape(repo / MATMUL)
    code, out, _ = cli("check", "--warn-only")
    assert code == 0 and f"STALE matmul/avx2: workload_changed (workload {w}: {key} {old} -> {new})" in out
    assert "exiting 0 despite stale entries (--warn-only)" in out
    assert cli("check", "--pr")[0] == 1  # pr_check defaults to fail
    (repo / "tvmtune.yaml").write_text(CONFIG + "pr_check: warn\n")
    code, out, _ = cli("check", "--pr")
    assert code == 0 and "pr_check: warn" in out
    assert cli("check")[0] == 1  # without --pr the config value does not apply


def test_warn_only_github_uses_warnings(cli, repo: Path) -> None:  # noqa: ANN001
    double_a_shape(repo / MATMUL)
    code, out, _ = cli("check", "--format", "github", "--warn-only")
    assert code == 0 and "::error" not in out and out.count("::warning file=operators/matmul.py") == 2


def test_changed_since(cli, repo: Path) -> None:  # noqa: ANN001
    code, out, _ = cli("check", "--changed-since", "HEAD")
    assert (code, out.strip()) == (0, "no entries to check")
    code, _, err = cli("check", "--changed-since", "nope")
    assert code == 2 and "unknown git ref 'nope'" in err


# ----------------------------------------------------------------- the real CLI


def test_cli_fresh_then_stale(repo: Path) -> None:
    r = run_cli(repo, "check")
    assert (r.returncode, r.stderr) == (0, "")
    double_a_split_bound(repo / MATMUL)
    r = run_cli(repo, "check")
    assert r.returncode == 1
    assert "STALE matmul/avx2: template_changed (operators/matmul.py:KNOBS changed" in r.stdout


@pytest.mark.parametrize(
    "config,message",
    [
        (
            CONFIG.replace("trials: 64", "trials: 64\n  bad: [1, 2"),
            "error: tvmtune.yaml:5: invalid YAML: mapping values are not allowed here",
        ),
        (
            CONFIG.replace("max_age_days: 365", "max_age_dys: 365"),
            "error: tvmtune.yaml:3: unknown key 'max_age_dys' in the top level; did you mean 'max_age_days'?",
        ),
        (CONFIG.replace("trials: 64", "trials: lots"), "error: tvmtune.yaml:4: trials is 'lots' (str), expected int"),
    ],
    ids=["bad-yaml", "unknown-key", "wrong-type"],
)
def test_cli_config_errors_exit_2_with_file_and_line(repo: Path, config: str, message: str) -> None:
    (repo / "tvmtune.yaml").write_text(config)
    r = run_cli(repo, "check")
    assert r.returncode == 2
    assert r.stderr.startswith(message), r.stderr
    assert r.stdout == ""


def test_cli_config_option_and_github_env(repo: Path, tmp_path: Path) -> None:
    write(repo, "sub/dir/readme.txt", "x")
    summary = tmp_path / "step.md"
    r = run_cli(
        repo / "sub/dir",
        "check",
        "--config",
        str(repo / "tvmtune.yaml"),
        env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert r.returncode == 0
    assert "entries fresh" in r.stdout and "### tvmtune-ci check" in summary.read_text()


# ----------------------------------------------------------------- issue 11: never green by mistake


@pytest.mark.parametrize(
    "edit,message",
    [
        (
            ("format: 1\n", "format: 1\noperators_dir: nosuchdir\n"),
            "error: tvmtune.yaml:2: operators_dir 'nosuchdir' does not exist",
        ),
        (
            ("targets:\n", "targets: {}\nold_targets:\n"),
            "error: tvmtune.yaml:5: targets is empty, so nothing would be checked; add one",
        ),
    ],
    ids=["operators-dir-typo", "no-targets"],
)
def test_a_config_that_checks_nothing_exits_2(repo: Path, edit: tuple[str, str], message: str) -> None:
    text = CONFIG.replace(*edit, 1)
    if "old_targets" in text:  # drop the real targets block
        text = text.split("old_targets:")[0]
    (repo / "tvmtune.yaml").write_text(text)
    for fmt in ("text", "json", "github"):
        r = run_cli(repo, "check", "--format", fmt)
        assert r.returncode == 2, (fmt, r.stdout, r.stderr)
        assert r.stderr.startswith(message), r.stderr
        assert "no entries to check" not in r.stdout


def test_legacy_target_warning_in_github_and_json(repo: Path) -> None:
    line = CONFIG.splitlines().index("    target: {kind: llvm, mcpu: haswell}") + 1
    (repo / "tvmtune.yaml").write_text(
        CONFIG.replace("target: {kind: llvm, mcpu: haswell}", "target: llvm -mcpu=haswell")
    )
    r = run_cli(repo, "check", "--format", "github")
    assert r.returncode == 0, r.stdout + r.stderr
    (ann,) = [x for x in r.stdout.splitlines() if x.startswith("::warning")]
    assert ann.startswith(f"::warning file=tvmtune.yaml,line={line}::tvmtune.yaml:{line}: target 'avx2'")
    assert "removed string form" in ann
    r = run_cli(repo, "check", "--format", "json")
    (w,) = json.loads(r.stdout)["warnings"]
    assert w.startswith(f"tvmtune.yaml:{line}: target 'avx2' uses the removed string form")
    r = run_cli(repo, "check")
    assert r.stdout.count("removed string form") == 1 and "removed string form" not in r.stderr


def test_template_invalid_annotation_says_to_fix_the_template(cli, repo: Path) -> None:  # noqa: ANN001
    p = repo / MATMUL
    p.write_text(p.read_text() + "\ndef broken(:\n")
    code, out, _ = cli("check", "--format", "github")
    assert code == 1
    errors = [x for x in out.splitlines() if x.startswith("::error")]
    assert errors and all("template_invalid" in x for x in errors)
    for x in errors:
        fix = x.split("Fix: ", 1)[1]
        assert fix.startswith(f"fix the template at {MATMUL}:") and "retune" not in fix, fix


def test_the_step_summary_tells_what_a_retune_after_an_edit_found(
    cli,
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
) -> None:
    """A PR whose log was re-tuned after a template edit: the job summary carries the
    history replay the manifest records."""
    from tvmtune_ci.core.history import KnobDiff
    from tvmtune_ci.core.replayreport import ReplayReport

    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    wl = "m1024"

    def add_history(results: dict) -> None:  # type: ignore[type-arg]
        results[wl]["history"] = history

    history = ReplayReport(
        source="matmul_avx2_2026-01-01.json",
        offered=4,
        whole=3,
        built=4,
        correct=4,
        measured=4,
        knob_diff=KnobDiff(changed=("unroll: knob [0] -> knob [0, 16]",)),
        old_best_s=0.002,
        old_best_rel=0.01,
        verdict="equal",
        seeded=True,
    ).to_json()
    edit_results(repo / "tuning_logs/matmul/avx2", add_history)
    code, _, _ = cli("check", "--format", "github")
    assert code == 0
    text = summary.read_text()
    assert "#### Re-tuned after a template edit: history replay" in text
    assert f"**matmul/avx2/{wl}**" in text and "4 computed the right result" in text
    assert "old best on the new template: 2 ms ± 1.0%; equal within noise" in text


def test_check_pauses_the_collector_and_resumes_it(cli, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """No cyclic collection over the report while check builds and prints it (40-70 ms
    at 2,000 entries, bench_check), and the collector back on after, also when the
    command fails: a process that runs check in-process keeps collecting."""
    import gc

    from tvmtune_ci.check import selection

    seen = []
    real = selection.report_from_args

    def spy(args):  # noqa: ANN001, ANN202
        seen.append(gc.isenabled())
        return real(args)

    monkeypatch.setattr("tvmtune_ci.commands.check.report_from_args", spy)
    assert gc.isenabled()
    code, _, _ = cli("check")
    assert code == 0 and seen == [False] and gc.isenabled()
    code, _, err = cli("check", "--as-of", "yesterday")
    assert code == 2 and "as-of" in err and gc.isenabled()


# A CPU and a GPU target, and no `targets:` list: each template pairs by its TARGET_KINDS.
MIXED = """\
format: 1
tvm_version: "0.27"
targets:
  cpu:
    target: {kind: llvm, mcpu: haswell}
  h100:
    target: nvidia/nvidia-h100
    runs-on: [self-hosted, linux, x64, gpu, h100]
"""


def entries_of(root: Path, *args: str) -> tuple[int, dict[tuple[str, str], list[str]], dict]:
    """`check --format json ARGS` in `root`: exit code, (operator, target) -> reason codes."""
    r = run_cli(root, "check", "--format", "json", *args)
    data = json.loads(r.stdout)
    return (
        r.returncode,
        {(e["operator"], e["target"]): [x["code"] for x in e["reasons"]] for e in data["entries"]},
        data,
    )


def test_a_target_pairs_only_with_the_templates_of_its_kind(tmp_path: Path) -> None:
    """matmul (CPU) and matmul_cuda (TARGET_KINDS cuda), neither with a targets: list:
    matmul pairs with cpu only and matmul_cuda with h100 only, before any log, once
    tuned, and when git vouches for every log (no template read for the pairing). A
    folder of the wrong kind's target is an orphan that says why."""
    root = make_repo(tmp_path, config=MIXED, operators=["matmul", "matmul_cuda"])
    code, entries, _ = entries_of(root)
    assert code == 1 and entries == {("matmul", "cpu"): ["missing"], ("matmul_cuda", "h100"): ["missing"]}
    freshen_all(root)
    assert sorted(p.relative_to(root).as_posix() for p in root.glob("tuning_logs/*/*")) == [
        "tuning_logs/matmul/cpu",
        "tuning_logs/matmul_cuda/h100",
    ]
    code, entries, _ = entries_of(root)
    assert code == 0 and entries == {("matmul", "cpu"): [], ("matmul_cuda", "h100"): []}
    commit_all(root, "tuned")
    code, entries, data = entries_of(root)
    assert code == 0 and entries == {("matmul", "cpu"): [], ("matmul_cuda", "h100"): []}
    assert data["templates_trusted"] == 2 and data["orphans"] == []
    # Selecting the GPU target selects only the GPU template.
    code, entries, _ = entries_of(root, "--target", "h100")
    assert code == 0 and list(entries) == [("matmul_cuda", "h100")]
    shutil.copytree(root / "tuning_logs/matmul/cpu", root / "tuning_logs/matmul/h100")
    code, entries, data = entries_of(root)
    assert code == 0 and list(entries) == [("matmul", "cpu"), ("matmul_cuda", "h100")]
    (orphan,) = data["orphans"]
    assert orphan["file"] == "tuning_logs/matmul/h100"
    assert (
        "holds logs for target 'h100', which is a cuda target, and matmul's template "
        "schedules for llvm or c targets (TARGET_KINDS); delete the folder"
    ) in orphan["detail"]


def test_a_target_listed_for_a_template_of_another_kind_stays_invalid(tmp_path: Path) -> None:
    """An explicit `targets:` list is taken as written: a cuda target named for a CPU
    template is template_invalid (saying why), and the GPU template still pairs by kind."""
    config = MIXED + "operators:\n  matmul: {targets: [cpu, h100]}\n"
    root = make_repo(tmp_path, config=config, operators=["matmul", "matmul_cuda"])
    code, entries, data = entries_of(root)
    assert code == 1 and entries == {
        ("matmul", "cpu"): ["missing"],
        ("matmul", "h100"): ["template_invalid", "missing"],
        ("matmul_cuda", "h100"): ["missing"],
    }
    (invalid,) = [x for e in data["entries"] for x in e["reasons"] if x["code"] == "template_invalid"]
    assert (
        invalid["file"] == MATMUL
        and ("this template schedules for llvm or c targets (TARGET_KINDS), not cuda") in invalid["detail"]
    )


def test_with_cpu_targets_only_a_gpu_template_pairs_with_none_and_fresh_logs_need_no_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This repository's case: CPU targets, a GPU template with no targets: list. It has
    no entry; and a template whose logs git vouches for is not read for its pairing
    (check's cost per operator stays one manifest per entry): only the GPU template,
    whose pairs have no log, is."""
    from tvmtune_ci.check.staleness import find_stale, pairing
    from tvmtune_ci.core.config import load_config

    root = make_repo(tmp_path, operators=["matmul", "matmul_cuda"])
    freshen_all(root)
    commit_all(root, "tuned")
    read = []

    def spy(path: Path) -> tuple[str, ...] | None:
        read.append(path.stem)
        return real(path)

    real = pairing.declared_kinds
    monkeypatch.setattr(pairing, "declared_kinds", spy)
    report = find_stale(load_config(root / "tvmtune.yaml"))
    assert [(e.operator, e.target_name, e.fresh) for e in report.entries] == [
        ("matmul", "avx512", True),
        ("matmul", "avx2", True),
    ]
    assert report.templates_trusted == 2 and not report.orphans
    assert read == ["matmul_cuda"]
