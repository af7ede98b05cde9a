"""A kernel README reads each best's GFLOPS against the runner's measured fp32 peak
(issue 66 part 4): the peak `profile` measured beside the models on that target, on the
target's num-cores threads (core/profiles.runner_peak), never a spec sheet's clock."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import run_cli

from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.profiles import Profile, ProfileRun, profile_path, runner_peak, write_profile

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "tuning_logs" / "dense" / "zen4-2c"

CONFIG = """\
format: 1
tvm_version: "0.27"
operators_dir: operators
logs_dir: tuning_logs
targets:
  zen4-2c:
    target: {kind: llvm, mcpu: znver4, num-cores: 2}
models:
  m1: {source: models/m1.py}
  m2: {source: models/m2.py}
"""


def _run(date: str, peak: float | None, threads: int | None = 2) -> ProfileRun:
    return ProfileRun(
        date=date,
        host={"cpu": "AMD EPYC", "cores": 2},
        untemplated="fallback",
        latency_s=0.01,
        latency_spread=0.05,
        samples=20,
        calls=(),
        threads=threads,
        peak=None if peak is None else (peak, 0.02),
    )


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "models").mkdir(parents=True)
    (root / "operators").mkdir()
    shutil.copy(ROOT / "operators" / "dense.py", root / "operators" / "dense.py")
    shutil.copy(ROOT / "operators" / "_gemm.py", root / "operators" / "_gemm.py")
    shutil.copytree(SET, root / "tuning_logs" / "dense" / "zen4-2c")
    (root / "tvmtune.yaml").write_text(CONFIG)
    for m in ("m1", "m2"):
        (root / "models" / f"{m}.py").write_text("")
    return root


def test_the_peak_is_the_median_of_the_profile_runs_on_the_target_s_threads(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    config = load_config(root / "tvmtune.yaml")
    assert runner_peak(config, "zen4-2c") is None  # no profile yet: no fraction is made up
    p1 = Profile("m1").with_run("zen4-2c", _run("2026-12-05T10:00:00Z", 230.0))
    p1 = p1.with_run("zen4-2c", _run("2026-12-06T10:00:00Z", None))  # a run before peaks were measured
    p1 = p1.with_run("zen4-2c", _run("2026-12-06T11:00:00Z", 120.0, threads=1))  # TVM's default pool
    p2 = Profile("m2").with_run("zen4-2c", _run("2026-12-07T10:00:00Z", 240.0))
    p2 = p2.with_run("zen4-2c", _run("2026-12-07T11:00:00Z", 236.0))
    write_profile(profile_path(root / "models" / "m1.py", "m1"), p1)
    write_profile(profile_path(root / "models" / "m2.py", "m2"), p2)
    peak = runner_peak(load_config(root / "tvmtune.yaml"), "zen4-2c")
    assert peak is not None
    assert (peak.gflops, peak.threads, peak.runs, peak.first, peak.last) == (236.0, 2, 3, "2026-12-05", "2026-12-07")
    assert peak.percent(212.4) == "90% of peak"
    assert runner_peak(config, "no-such-target") is None


def test_the_readme_gives_each_best_s_fraction_of_the_measured_peak(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    readme = root / "tuning_logs" / "dense" / "zen4-2c" / "README.md"
    r = run_cli(root, "readme", "dense", "--target", "zen4-2c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "of peak" not in readme.read_text()  # nothing measured: no fraction
    write_profile(
        profile_path(root / "models" / "m1.py", "m1"), Profile("m1").with_run("zen4-2c", _run("2026-12-07", 200.0))
    )
    r = run_cli(root, "readme", "dense", "--target", "zen4-2c")
    assert r.returncode == 0, r.stdout + r.stderr
    text = readme.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `bert_ffn") and " GFLOPS" in line]
    assert rows and all("% of peak)" in row for row in rows), rows
    # bert_ffn1's row: its GFLOPS over 200, as the table prints both
    gflops = float(rows[0].split(" GFLOPS")[0].rsplit("| ", 1)[1])
    assert f"({100 * gflops / 200:.0f}% of peak)" in rows[0]
    assert "this runner's fp32 peak on its 2 threads, 200 GFLOPS" in text
