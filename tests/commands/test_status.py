"""`tvmtune-ci status`: the table of every (operator, target)."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import make_repo, run_cli, tuned_on, write_fresh

from tvmtune_ci.cli import main
from tvmtune_ci.commands.status import human_count
from tvmtune_ci.core import runs
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.template import read_template
from tvmtune_ci.publish.readme import render_readme


@pytest.fixture
def status(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_github: None):  # noqa: ANN201
    def run(root: Path, *args: str) -> tuple[int, list[list[str]], str]:
        monkeypatch.chdir(root)
        code = main(["status", *args])
        out = capsys.readouterr().out
        # Columns are separated by two or more spaces.
        import re

        return code, [re.split(r"\s{2,}", line) for line in out.splitlines()], out

    return run


def _run(i: int, workloads: dict[str, float], compute: float, band: dict[str, Any] | None = None) -> runs.Run:
    """The i-th hourly `remeasure` run: each workload's best at its seconds, the compute
    calibration kernel at `compute` s and the memory one at 3 s; judged on `band`."""

    def kf(s: float) -> runs.KernelFigure:
        return runs.KernelFigure(s, s * 0.99, s * 1.01, 33, s * 0.98, s * 1.3)

    return runs.Run(
        f"2026-12-01T{i:02d}:00:00Z",
        "remeasure",
        {"cpu": "Test CPU", "cores": 2},
        "0.27.0",
        90.0,
        {w: kf(s) for w, s in workloads.items()},
        {"compute": kf(compute), "memory": kf(3.0)},
        1,
        band=band,
    )


def test_table_of_fresh_and_stale_entries(tmp_path: Path, status) -> None:  # noqa: ANN001
    root = make_repo(tmp_path)
    ten_days_ago = (datetime.date.today() - datetime.timedelta(days=10)).isoformat()
    write_fresh(root, "matmul", "avx512", tuned_on=ten_days_ago)
    code, rows, _ = status(root)
    assert code == 0  # stale entries are not an error for status
    assert rows[0] == ["ENTRY", "STATE", "AGE", "TRIALS", "BEST", "RUN TO RUN", "SPACE", "REASONS"]
    decl = read_template(root / "operators/matmul.py")
    targets = {t.name: t.target for t in load_config(root / "tvmtune.yaml").targets}

    def space_on(target: str) -> str:  # KNOBS name the target's LANES and VREGS
        return human_count(sum(p * s for p, s in decl.space_sizes(targets[target]).values()))

    space = space_on("avx512")
    n = len(decl.workloads)
    # write_fresh records best = 1.25 ms x (position in WORKLOADS + 1); manifests keep keys sorted.
    order = list(decl.workloads)
    best = ", ".join(f"{w} {1.25 * (order.index(w) + 1):.3g} ms" for w in sorted(order))
    by_entry = {r[0]: r for r in rows[1:] if r[0].startswith("matmul/")}
    assert by_entry["matmul/avx512"] == [
        "matmul/avx512",
        "fresh",
        "10d",
        f"{60 * n}/{64 * n}",
        best,
        "0 runs",  # a set with no run history yet
        space,
        "-",
    ]
    assert by_entry["matmul/avx2"] == ["matmul/avx2", "STALE", "-", "-", "-", "-", space_on("avx2"), "missing"]
    assert space_on("avx2") != space
    assert rows[-1][0].endswith(
        " entries stale; run `tvmtune-ci retune` to re-tune the stale entries and rewrite their logs, then commit them"
    )


def test_the_best_is_the_figure_the_readme_states(tmp_path: Path, status) -> None:  # noqa: ANN001
    """One figure per workload: with a run history, status's BEST is the README's headline
    (the median over the runs, `runwords.headline`), not this re-tune's finals figure."""
    root = make_repo(tmp_path)
    workloads = list(read_template(root / "operators/matmul.py").workloads)
    # Ten runs at 2-3 ms (the finals write_fresh records: 1.25 ms x position), the compute
    # calibration kernel in each: the headline at the runner's usual speed.
    history = [
        _run(i, {w: 0.002 + 0.0001 * (i % 4) + 0.0004 * j for j, w in enumerate(workloads)}, 0.3 + 0.01 * (i % 3))
        for i in range(10)
    ]
    m = write_fresh(root, "matmul", "avx512", extra_files={runs.RUNS_NAME: runs.encode_runs(history)})
    readme = render_readme(m, history)
    heads = dict(re.findall(r"^\| `(\w+)` \| \*\*([^*]+)\*\*", readme, re.M))
    assert sorted(heads) == sorted(workloads), readme
    code, rows, _ = status(root, "--target", "avx512", "--operator", "matmul")
    assert code == 0
    (entry,) = [r for r in rows if r[0] == "matmul/avx512"]
    best = entry[rows[0].index("BEST")]
    assert best == ", ".join(f"{w} {heads[w]}" for w in sorted(workloads))
    finals = {w: r.best.latency_s for w, r in m.results.items()}
    assert all(heads[w] != f"{finals[w] * 1e3:.4g} ms" for w in workloads), (heads, finals)


def test_reasons_and_as_of(repo: Path, status) -> None:  # noqa: ANN001
    later = (tuned_on(repo) + datetime.timedelta(days=400)).isoformat()
    code, rows, _ = status(repo, "--as-of", later, "--target", "avx2", "--operator", "matmul")
    assert code == 0
    # Header, the one entry, the selected target's templates (2 lines), the summary.
    assert len(rows) == 5 and rows[3] == ["", "avx2 (llvm): matmul"]
    assert rows[1][:3] == ["matmul/avx2", "STALE", "400d"] and rows[1][-1] == "expired"


def test_markdown(repo: Path, status) -> None:  # noqa: ANN001
    code, _, out = status(repo, "--format", "markdown", "--as-of", tuned_on(repo).isoformat())
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "| entry | state | age | trials | best | run to run | space | reasons |"
    row = next(x for x in lines if x.startswith("| matmul/avx512 |")).split(" | ")
    assert row[1:3] == ["fresh", "0d"] and row[4].endswith(" ms") and row[-1] == "- |"


def test_human_count() -> None:
    assert [human_count(n) for n in (7, 1000, 50_688, 2_500_000, 3 * 10**9)] == ["7", "1k", "50.7k", "2.5M", "3G"]


def test_cli_status_config_error_exits_2(repo: Path) -> None:
    (repo / "tvmtune.yaml").write_text("targets:\n  cpu: {target: {kind: llvm}}\nbatch_size: -1\n")
    r = run_cli(repo, "status")
    assert r.returncode == 2
    assert r.stderr.startswith("error: tvmtune.yaml:3: batch_size is -1, it must be positive")


def test_cli_status_unknown_operator_exits_2(repo: Path) -> None:
    r = run_cli(repo, "status", "--operator", "matmal")
    assert r.returncode == 2 and "unknown operator 'matmal'; did you mean 'matmul'?" in r.stderr


def test_an_unknown_space_says_why_and_an_odd_size_is_advised(tmp_path: Path, status) -> None:  # noqa: ANN001
    """SPACE is '?' with the reason to read when KNOBS cannot be evaluated; a design
    space outside the advised 100-10,000 points is a warning naming what to change."""
    small = (
        "from tvmtune_ci.template import define_knob, define_split\n"
        "WORKLOADS = {'w': {'R': 64, 'C': 32, 'dtype': 'float32'}}\n"
        "KNOBS = [\n"
        "    define_split('tile_r', 'R', parts=2, max_factor=4),\n"
        "    define_knob('unroll', [0, 16]),\n"
        "]\n"
        "def compute(R, C, dtype):\n    pass\n"
        "def reference(x):\n    pass\n"
        "def schedule(sch, cfg):\n    pass\n"
    )
    root = make_repo(
        tmp_path, files={"operators/tiny.py": small, "operators/broken.py": small.replace("'R', parts", "'RR', parts")}
    )
    code, rows, out = status(root)
    by_entry = {r[0]: r for r in rows[1:] if len(r) > 5}
    assert by_entry["broken/avx512"][6] == "? (template_invalid)"
    assert by_entry["tiny/avx512"][6] == "6"  # tile_r [64,1] [32,2] [16,4] x unroll 2 = 6 points
    warnings = [line for line in out.splitlines() if line.startswith("warning: operators/tiny.py:4:")]
    assert len(warnings) == 2, out  # one per target
    assert "6 points per design space (tile_r 3 x unroll 2), below the advised 100" in warnings[0]


def test_each_target_lists_the_templates_it_covers(tmp_path: Path, status) -> None:  # noqa: ANN001
    """Below the table: per target, its kind and the templates it pairs with (by
    TARGET_KINDS, or an operator's targets: list), whatever the table selected; a
    target that covers nothing says why."""
    config = """\
format: 1
tvm_version: "0.27"
targets:
  cpu:
    target: {kind: llvm, mcpu: haswell}
  h100:
    target: nvidia/nvidia-h100
    runs-on: [self-hosted, linux, x64, gpu, h100]
  a100:
    target: nvidia/nvidia-a100
    runs-on: [self-hosted, linux, x64, gpu, a100]
operators:
  softmax_cuda: {targets: [h100]}
"""
    root = make_repo(tmp_path, config=config, operators=["matmul", "matmul_cuda", "softmax_cuda"])
    code, _, out = status(root)
    assert code == 0
    lines = out.splitlines()
    at = lines.index("templates each target covers:")
    assert lines[at + 1 : at + 4] == [
        "  cpu (llvm): matmul",
        "  h100 (cuda): matmul_cuda, softmax_cuda",
        "  a100 (cuda): matmul_cuda",
    ]
    _, rows, out = status(root, "--target", "a100", "--operator", "matmul_cuda")
    assert [r[0] for r in rows[1:-1]] == ["matmul_cuda/a100", "templates each target covers:", ""]
    assert out.splitlines()[-2] == "  a100 (cuda): matmul_cuda"
    (root / "operators/matmul_cuda.py").unlink()
    _, _, out = status(root, "--target", "a100")
    assert (
        "  a100 (cuda): none: no template's TARGET_KINDS include cuda, and no "
        "operators.NAME.targets in tvmtune.yaml lists a100"
    ) in out.splitlines()


def test_a_young_history_shows_the_runner_band_its_readme_names(tmp_path: Path, status) -> None:  # noqa: ANN001
    """Two runs are too few for a set's own band: RUN TO RUN shows the runner band the
    latest run was judged against (the one its README names), then the run count."""
    root = make_repo(tmp_path)
    workloads = list(read_template(root / "operators/matmul.py").workloads)
    band = {"label": "linux-x64", "halfwidth": 0.081, "pairs": 40, "series": 6, "sets": 3}
    history = [_run(i, dict.fromkeys(workloads, 0.002), 0.3, band=band if i else None) for i in range(2)]
    m = write_fresh(root, "matmul", "avx512", extra_files={runs.RUNS_NAME: runs.encode_runs(history)})
    assert "the runner band of `linux-x64`: ±8.1%" in render_readme(m, history)
    code, rows, _ = status(root, "--target", "avx512", "--operator", "matmul")
    assert code == 0
    (entry,) = [r for r in rows if r[0] == "matmul/avx512"]
    assert entry[rows[0].index("RUN TO RUN")] == "±8.1% (runner; 2 runs)"
    # The earlier run alone was judged on no runner band: the count only.
    m = write_fresh(root, "matmul", "avx512", extra_files={runs.RUNS_NAME: runs.encode_runs(history[:1])})
    (entry,) = [r for r in status(root, "--target", "avx512", "--operator", "matmul")[1] if r[0] == "matmul/avx512"]
    assert entry[rows[0].index("RUN TO RUN")] == "1 run"
