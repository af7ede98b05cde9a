"""`tvmtune-ci matrix` on a throwaway repository: git history decides what is listed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tvmtune_ci.cli import main
from tvmtune_ci.commands import matrix as matrix_cmd
from tvmtune_ci.config import load_config
from tvmtune_ci.layout import LogSet
from tvmtune_ci.staleness import Entry, Reason, Report

PINNED = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_AUTHOR_DATE": "2026-01-02T03:04:05+00:00",
    "GIT_COMMITTER_DATE": "2026-01-02T03:04:05+00:00",
}

CONFIG = """\
format: 1
tvm_version: "0.27"
trials: 200
targets:
  cpu:
    target: {kind: llvm, mcpu: skylake-avx512}
    runs-on: [linux, self-hosted, x64, avx512, x64]
  arm:
    target: {kind: llvm, mtriple: aarch64-linux-gnu}
    runs-on: [linux, arm64]
operators:
  matmul:
    targets: [cpu]
"""

TEMPLATE = '''\
"""{name}: a template the matrix tests edit."""

from tvmtune_ci.template import define_knob, define_split

WORKLOADS = {{"small": {{"M": 64, "N": 64, "K": 64, "dtype": "float32"}}}}

KNOBS = [
    define_split("tile_i", "M", parts=2, max_factor=8),
    define_knob("unroll", [0, 16]),
]


def compute(M, N, K, dtype):
    from tvm import te

    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def reference(A, B):
    return A @ B


def schedule(sch, cfg):
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    cfg.split(sch, i, "tile_i")
'''


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with two templates and no logs yet: every entry is `missing`.

    matmul runs on cpu only (operators.matmul.targets); add runs on cpu and arm.
    """
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for k, v in PINNED.items():
        monkeypatch.setenv(k, v)
    for var in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "repo"
    (root / "operators").mkdir(parents=True)
    (root / "tuning_logs").mkdir()
    (root / "tuning_logs" / ".keep").write_text("")
    (root / "tvmtune.yaml").write_text(CONFIG)
    for name in ("matmul", "add"):
        (root / "operators" / f"{name}.py").write_text(TEMPLATE.format(name=name))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "templates")
    monkeypatch.chdir(root)
    return root


def run_matrix(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    code = main(["matrix", *args])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    return code, (json.loads(lines[0]) if lines else {}), err


def read_outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_template_commit_lists_exactly_that_entry(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = git(repo, "rev-parse", "HEAD").strip()
    tpl = repo / "operators" / "matmul.py"
    tpl.write_text(tpl.read_text().replace('"unroll", [0, 16]', '"unroll", [0, 16, 64]'))
    git(repo, "commit", "-q", "-am", "matmul: one more unroll candidate")
    outputs = tmp_path / "github_output"
    summary = tmp_path / "step_summary"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))

    code, m, err = run_matrix(capsys, "--changed-since", before)

    expected = {
        "include": [
            {
                "operator": "matmul",
                "target": "cpu",
                "runs-on": ["self-hosted", "linux", "x64", "avx512"],
            }
        ]
    }
    assert code == 0
    assert m == expected
    written = read_outputs(outputs)
    assert set(written) == {"matrix", "has-work"}
    assert json.loads(written["matrix"]) == expected
    assert written["has-work"] == "true"
    assert "| matmul | cpu | self-hosted, linux, x64, avx512 | missing:" in summary.read_text()
    assert "matmul on cpu" in err


def test_nothing_changed_means_no_work(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    code, m, err = run_matrix(capsys, "--changed-since", "HEAD")
    assert code == 0
    assert m == {"include": []}
    assert read_outputs(outputs) == {"matrix": '{"include":[]}', "has-work": "false"}
    assert "nothing to re-tune" in err


def test_config_change_concerns_every_entry(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = git(repo, "rev-parse", "HEAD").strip()
    (repo / "tvmtune.yaml").write_text(CONFIG.replace("trials: 200", "trials: 250"))
    git(repo, "commit", "-q", "-am", "more trials")
    _, m, _ = run_matrix(capsys, "--changed-since", before)
    assert [(j["operator"], j["target"]) for j in m["include"]] == [
        ("add", "arm"),
        ("add", "cpu"),
        ("matmul", "cpu"),
    ]


def test_without_changed_since_every_stale_entry_and_filters(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, m, _ = run_matrix(capsys)
    assert [(j["operator"], j["target"]) for j in m["include"]] == [
        ("add", "arm"),
        ("add", "cpu"),
        ("matmul", "cpu"),
    ]
    assert m["include"][0]["runs-on"] == ["self-hosted", "linux", "arm64"]
    _, m, _ = run_matrix(capsys, "--operator", "add", "--target", "arm")
    assert m == {
        "include": [
            {"operator": "add", "target": "arm", "runs-on": ["self-hosted", "linux", "arm64"]}
        ]
    }
    _, m, _ = run_matrix(capsys, "--target", "cpu", "--operator", "add", "--operator", "matmul")
    assert [(j["operator"], j["target"]) for j in m["include"]] == [
        ("add", "cpu"),
        ("matmul", "cpu"),
    ]


def test_unknown_names_exit_2_with_a_suggestion(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["matrix", "--operator", "matmull"]) == 2
    assert "did you mean 'matmul'" in capsys.readouterr().err
    assert main(["matrix", "--target", "cpuu"]) == 2
    assert "did you mean 'cpu'" in capsys.readouterr().err
    assert main(["matrix", "--changed-since", "no-such-ref"]) == 2
    assert "unknown git ref 'no-such-ref'" in capsys.readouterr().err


def test_all_and_changed_since_exclude_each_other(repo: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["matrix", "--all", "--changed-since", "HEAD"])
    assert exc.value.code == 2


def _entry(op: str, target: str, *reasons: Reason) -> Entry:
    return Entry(
        op,
        target,
        f"operators/{op}.py",
        1,
        tuple(reasons),
        None,
        LogSet.of(Path("tuning_logs"), op, target),
        {},
    )


def test_all_lists_fresh_entries_too(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = _entry("add", "cpu")
    stale = _entry("matmul", "cpu", Reason("expired", "tuned 400 days ago", None, None))
    seen: dict[str, object] = {}

    def fake_find_stale(config, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.update(kw)
        return Report((fresh, stale), (), ())

    monkeypatch.setattr("tvmtune_ci.staleness.find_stale", fake_find_stale)
    _, m, _ = run_matrix(capsys)
    assert [(j["operator"], j["target"]) for j in m["include"]] == [("matmul", "cpu")]
    _, m, _ = run_matrix(capsys, "--all")
    assert [(j["operator"], j["target"]) for j in m["include"]] == [
        ("add", "cpu"),
        ("matmul", "cpu"),
    ]
    assert seen["changed_since"] is None


def test_too_many_jobs_is_an_error(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    many = tuple(
        _entry(f"op{i}", "cpu", Reason("missing", "no log", None, None)) for i in range(257)
    )
    monkeypatch.setattr(
        "tvmtune_ci.staleness.find_stale", lambda config, **kw: Report(many, (), ())
    )
    assert main(["matrix"]) == 2
    assert "257 entries" in capsys.readouterr().err


def test_runs_on_keeps_order_without_duplicates(repo: Path) -> None:
    config = load_config(repo / "tvmtune.yaml")
    assert matrix_cmd.runs_on(config, "cpu") == ["self-hosted", "linux", "x64", "avx512"]


def test_matrix_never_imports_tvm(repo: Path) -> None:
    code = (
        "import sys\n"
        "from tvmtune_ci.cli import main\n"
        "rc = main(['matrix'])\n"
        "assert rc == 0, rc\n"
        "bad = sorted(m for m in sys.modules if m == 'tvm' or m.startswith('tvm.'))\n"
        "print('imported:', bad)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "imported: []" in r.stdout
