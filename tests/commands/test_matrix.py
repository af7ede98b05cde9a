"""`tvmtune-ci matrix` on a throwaway repository whose logs are all fresh."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CONFIG, change_function, commit_all, freshen_all, git, make_repo, write_fresh

from tvmtune_ci.check.staleness import Entry, Reason, Report
from tvmtune_ci.cli import main
from tvmtune_ci.commands import matrix as matrix_cmd
from tvmtune_ci.core.config import parse_config
from tvmtune_ci.core.layout import LogSet

# matmul (copied from operators/) runs on avx512 and avx2; add only on avx2.
CONFIG_ADD = CONFIG + "operators:\n  add:\n    targets: [avx2]\n"

ADD = '''\
"""c = a + b, a second template so that one edit concerns one entry."""

from tvmtune_ci.template import define_knob, define_split

WORKLOADS = {"n4096": {"N": 4096, "dtype": "float32"}}

KNOBS = [
    define_split("tile", "N", parts=2, max_factor=64),
    define_knob("unroll", [0, 16]),
]


def compute(N, dtype):
    from tvm import te

    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    C = te.compute((N,), lambda i: A[i] + B[i], name="C")
    return te.create_prim_func([A, B, C])


def reference(A, B):
    return A + B


def schedule(sch, cfg):
    (i,) = sch.get_loops(sch.get_sblock("C"))
    _, inner = cfg.split(sch, i, "tile")
    sch.vectorize(inner)
'''

AVX2 = ["self-hosted", "linux", "x64"]
AVX512 = ["self-hosted", "linux", "x64", "avx512"]


@pytest.fixture
def tuned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_github: None) -> Path:
    """Every (operator, target) fresh and committed; the CLI runs inside the repo."""
    root = make_repo(tmp_path, config=CONFIG_ADD, files={"operators/add.py": ADD})
    freshen_all(root)
    commit_all(root, "tune")
    monkeypatch.chdir(root)
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    return root


@pytest.fixture
def outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    out, summary = tmp_path / "github_output", tmp_path / "step_summary"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    return out, summary


def run_matrix(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    code = main(["matrix", *args])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) <= 1, "stdout is the matrix line only"
    return code, (json.loads(lines[0]) if lines else {}), err


def pairs(m: dict) -> list[tuple[str, str]]:
    return [(j["operator"], j["target"]) for j in m["include"]]


def read_outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def edit(root: Path, rel: str, old: str, new: str) -> None:
    p = root / rel
    assert old in p.read_text()
    p.write_text(p.read_text().replace(old, new, 1))


def test_all_fresh_means_no_work(tuned: Path, outputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, m, err = run_matrix(capsys)
    assert (code, m) == (0, {"include": []})
    assert read_outputs(outputs[0]) == {"matrix": '{"include":[]}', "has-work": "false"}
    assert "Nothing to re-tune" in outputs[1].read_text()
    assert "nothing to re-tune" in err


def test_template_commit_lists_exactly_that_entry(
    tuned: Path, outputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = git(tuned, "rev-parse", "HEAD").strip()
    edit(tuned, "operators/add.py", '"unroll", [0, 16]', '"unroll", [0, 16, 64]')
    commit_all(tuned, "add: one more unroll candidate")

    code, m, err = run_matrix(capsys, "--changed-since", before)

    expected = {"include": [{"operator": "add", "target": "avx2", "runs-on": AVX2, "extras": "tune"}]}
    assert (code, m) == (0, expected)
    written = read_outputs(outputs[0])
    assert set(written) == {"matrix", "has-work"}
    assert json.loads(written["matrix"]) == expected
    assert written["has-work"] == "true"
    summary = outputs[1].read_text()
    assert "| add | avx2 | self-hosted, linux, x64 | template_changed:" in summary
    assert "add on avx2 -> runs-on" in err


def test_changed_since_leaves_out_entries_stale_for_other_reasons(
    tuned: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fresh(tuned, "matmul", "avx2", tuned_on="2020-01-01")  # expired
    commit_all(tuned, "old log")
    _, m, _ = run_matrix(capsys, "--changed-since", "HEAD")
    assert m == {"include": []}
    _, m, _ = run_matrix(capsys)
    assert m == {"include": [{"operator": "matmul", "target": "avx2", "runs-on": AVX2, "extras": "tune"}]}


def test_config_change_concerns_every_entry_it_makes_stale(tuned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = git(tuned, "rev-parse", "HEAD").strip()
    edit(tuned, "tvmtune.yaml", "mcpu: haswell", "mcpu: broadwell")
    commit_all(tuned, "avx2 runner is a broadwell now")
    _, m, _ = run_matrix(capsys, "--changed-since", before)
    assert m["include"] == [
        {"operator": "add", "target": "avx2", "runs-on": AVX2, "extras": "tune"},
        {"operator": "matmul", "target": "avx2", "runs-on": AVX2, "extras": "tune"},
    ]


def test_all_lists_every_configured_entry_fresh_or_not(
    tuned: Path, outputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, m, _ = run_matrix(capsys, "--all")
    assert m["include"] == [
        {"operator": "add", "target": "avx2", "runs-on": AVX2, "extras": "tune"},
        {"operator": "matmul", "target": "avx2", "runs-on": AVX2, "extras": "tune"},
        {"operator": "matmul", "target": "avx512", "runs-on": AVX512, "extras": "tune"},
    ]
    assert read_outputs(outputs[0])["has-work"] == "true"
    assert "fresh (--all)" in outputs[1].read_text()
    _, m, _ = run_matrix(capsys, "--all", "--operator", "matmul", "--target", "avx512")
    assert pairs(m) == [("matmul", "avx512")]
    _, m, _ = run_matrix(capsys, "--all", "--target", "avx2", "--operator", "add", "--operator", "matmul")
    assert pairs(m) == [("add", "avx2"), ("matmul", "avx2")]


def test_unknown_names_exit_2_with_a_suggestion(tuned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--operator", "matmull"]) == 2
    assert "did you mean 'matmul'" in capsys.readouterr().err
    assert main(["matrix", "--target", "avx3"]) == 2
    assert "unknown target 'avx3'" in capsys.readouterr().err
    assert main(["matrix", "--changed-since", "no-such-ref"]) == 2
    assert "unknown git ref 'no-such-ref'" in capsys.readouterr().err


def test_all_and_changed_since_exclude_each_other(tuned: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["matrix", "--all", "--changed-since", "HEAD"])
    assert exc.value.code == 2


def _entry(op: str, target: str, *reasons: Reason) -> Entry:
    return Entry(
        op, target, f"operators/{op}.py", 1, tuple(reasons), None, LogSet.of(Path("tuning_logs"), op, target), {}
    )


def test_too_many_jobs_is_an_error(
    tuned: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    many = tuple(_entry(f"op{i:03}", "avx2", Reason("missing", "no log", None, None)) for i in range(257))
    monkeypatch.setattr("tvmtune_ci.check.staleness.find_stale", lambda config, **kw: Report(many, (), ()))
    assert main(["matrix"]) == 2
    assert "257 entries" in capsys.readouterr().err


def test_runs_on_is_self_hosted_plus_labels_in_order_without_duplicates(tmp_path: Path) -> None:
    config = parse_config(
        "targets:\n"
        "  a: {target: {kind: llvm}, runs-on: [linux, self-hosted, x64, gpu, x64]}\n"
        "  b: {target: {kind: llvm}}\n",
        tmp_path / "tvmtune.yaml",
    )
    assert matrix_cmd.runs_on(config, "a") == ["self-hosted", "linux", "x64", "gpu"]
    assert matrix_cmd.runs_on(config, "b") == ["self-hosted"]


def test_matrix_never_imports_tvm(tuned: Path) -> None:
    code = (
        "import sys\n"
        "from tvmtune_ci.cli import main\n"
        "assert main(['matrix', '--all']) == 0\n"
        "tvm = sorted(m for m in sys.modules if m == 'tvm' or m.startswith('tvm.'))\n"
        "print('tvm modules:', tvm)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tuned, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "tvm modules: []" in r.stdout


def test_template_invalid_entries_are_not_runner_work(
    tuned: Path, outputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    p = tuned / "operators/add.py"
    p.write_text(p.read_text() + "\ndef broken(:\n")
    change_function(tuned / "operators/matmul.py")  # a real stale entry, still listed
    for args in ((), ("--all",)):
        code, m, err = run_matrix(capsys, *args)
        assert code == 0
        assert ("add", "avx2") not in pairs(m), args
        assert "skipped add on avx2: its template does not read" in err and "fix the template" in err
    code, m, _ = run_matrix(capsys)
    assert pairs(m) == [("matmul", "avx2"), ("matmul", "avx512")]


def test_a_gpu_entry_installs_the_cuda_extra_and_goes_to_a_gpu_runner(tmp_path: Path) -> None:
    """`--gpu-only` lists the GPU entries (the PR check's question), each for a runner
    labelled gpu, with the [cuda] extra its build needs."""
    from conftest import make_repo, run_cli

    config = CONFIG + (
        "  h100:\n    target: nvidia/nvidia-h100\n"
        "    runs-on: [linux, x64, gpu, h100]\n"
        "operators:\n  matmul: {targets: [avx2]}\n"
        "  matmul_cuda: {targets: [h100]}\n"
    )
    root = make_repo(tmp_path, config=config, operators=["matmul", "matmul_cuda"])
    r = run_cli(root, "matrix", "--all", "--gpu-only")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "include": [
            {
                "operator": "matmul_cuda",
                "target": "h100",
                "runs-on": ["self-hosted", "linux", "x64", "gpu", "h100"],
                "extras": "tune,cuda",
            }
        ]
    }
    both = json.loads(run_cli(root, "matrix", "--all").stdout)["include"]
    assert [j["extras"] for j in both] == ["tune", "tune,cuda"]


def test_a_budget_is_split_between_the_jobs_by_their_weights(tuned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`matrix --all --budget 6h`: each job carries its share for `retune --budget`,
    in proportion to its workloads' weights (operators.NAME.weight)."""
    (tuned / "tvmtune.yaml").write_text(
        CONFIG_ADD.replace("  add:\n    targets: [avx2]\n", "  add:\n    targets: [avx2]\n    weight: 2\n")
    )
    code, m, _ = run_matrix(capsys, "--all", "--budget", "6h")
    assert code == 0
    shares = {(j["operator"], j["target"]): int(j["budget"].removesuffix("s")) for j in m["include"]}
    # matmul weighs 1 on each of two targets, add 2 on its one: 1 : 1 : 2 of 21,600 s.
    assert shares == {("add", "avx2"): 10800, ("matmul", "avx2"): 5400, ("matmul", "avx512"): 5400}
    code, m, _ = run_matrix(capsys, "--all")
    assert code == 0 and all("budget" not in j for j in m["include"])
