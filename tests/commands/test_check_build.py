"""`tvmtune-ci check --build`: the GPU entries compile on a CPU-only runner, and an
edit that breaks one is reported at the template's line with the compiler's message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import commit_all, edit_results, freshen_all, make_repo, run_cli, write_fresh

from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.template import declared_kinds, discover_templates

GPU_CONFIG = """\
format: 1
tvm_version: "0.27"
targets:
  h100:
    target: nvidia/nvidia-h100
    runs-on: [self-hosted, linux, x64, gpu, h100]
  cpu:
    target: {kind: llvm, mcpu: haswell}
operators:
  matmul: {targets: [cpu]}
  matmul_cuda: {targets: [h100]}
"""
TEMPLATE = "operators/matmul_cuda.py"
BEST = {"tile_i": [16, 16, 4], "tile_j": [32, 16, 2], "tile_k": [64, 16], "vec": 2, "unroll": 512, "stages": 1}


@pytest.fixture(scope="module")
def gpu_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_repo(tmp_path_factory.mktemp("gpu"), config=GPU_CONFIG, operators=["matmul", "matmul_cuda"])
    freshen_all(root)

    def set_best(results: dict) -> None:
        results["m1024"]["best"]["knobs"] = dict(BEST)

    edit_results(root / "tuning_logs" / "matmul_cuda" / "h100", set_best)
    commit_all(root, "tuned")
    return root


def test_check_alone_stays_light_and_counts_the_legal_space(gpu_repo: Path) -> None:
    r = run_cli(gpu_repo, "check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fresh matmul_cuda/h100" in r.stdout and "build" not in r.stdout
    status = run_cli(gpu_repo, "status", "matmul_cuda")
    assert "27.4k" in status.stdout, status.stdout  # 13,704 legal points x 2 workloads


@pytest.mark.extra("cuda")
def test_every_gpu_entry_builds_its_default_and_its_best(gpu_repo: Path) -> None:
    r = run_cli(gpu_repo, "check", "--build", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    builds = json.loads(r.stdout)["builds"]
    got = {(b["workload"], b["config"]) for b in builds}
    assert got == {("m1024", "default"), ("m1024", "best"), ("m4096", "default")}
    for b in builds:
        assert b["ok"] and b["cubin_bytes"] > 10_000, b
        assert 0 < b["resources"]["registers_per_block"] <= 65536
    best = next(b for b in builds if b["config"] == "best")
    assert best["resources"]["threads"] == 256 and best["resources"]["smem_bytes"] == 6144


def edited(gpu_repo: Path, tmp_path: Path, old: str, new: str) -> tuple[Path, int]:
    """A copy of the repo with one line of the GPU template changed; (root, its line)."""
    import shutil

    root = tmp_path / "edited"
    shutil.copytree(gpu_repo, root, symlinks=True)
    path = root / TEMPLATE
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return root, path.read_text().splitlines().index(new) + 1


@pytest.mark.extra("cuda")
def test_an_edit_that_no_longer_compiles_is_reported_at_its_line(gpu_repo: Path, tmp_path: Path) -> None:
    """schedule() fails: at the line that raised, with TVM's message."""
    new = '        shared = sch.cache_read(C, operand + 1, "shared")'
    root, line = edited(gpu_repo, tmp_path, '        shared = sch.cache_read(C, operand, "shared")', new)
    r = run_cli(root, "check", "--build")
    assert r.returncode == 1
    assert f"{TEMPLATE}:{line}: build failed: matmul_cuda/h100 m1024 (default)" in r.stdout, r.stdout
    assert "ScheduleError" in r.stdout or "IndexError" in r.stdout  # TVM's own message
    gh = run_cli(root, "check", "--build", "--format", "github", env={"GITHUB_ACTIONS": "true"})
    assert f"::error file={TEMPLATE},line={line}," in gh.stdout, gh.stdout


@pytest.mark.extra("cuda")
def test_an_edit_the_gpu_check_rejects_is_reported_at_the_schedule(gpu_repo: Path, tmp_path: Path) -> None:
    """schedule() runs, but the code breaks a CUDA rule (the copies at the inner k loop
    bind threads inside the k loop of the product): at `def schedule`, with why."""
    root, _ = edited(
        gpu_repo,
        tmp_path,
        "        sch.compute_at(shared, ko, preserve_unit_loops=True)",
        "        sch.compute_at(shared, ki, preserve_unit_loops=True)",
    )
    line = (root / TEMPLATE).read_text().splitlines().index("def schedule(sch, cfg) -> None:") + 1
    r = run_cli(root, "check", "--build")
    assert r.returncode == 1
    assert (
        f"{TEMPLATE}:{line}: build failed: matmul_cuda/h100 m1024 (default): postprocessor VerifyGPUCode rejected"
    ) in r.stdout, r.stdout
    # --warn-only forgives a stale log, not a template that does not build.
    assert run_cli(root, "check", "--build", "--warn-only").returncode == 1
    assert run_cli(root, "check", "--warn-only").returncode == 0


def test_without_the_cuda_extra_the_build_check_exits_5(gpu_repo: Path, tmp_path: Path) -> None:
    """No NVRTC (hidden from this run): refused with the install line, before any build."""
    fake = tmp_path / "hide"
    (fake / "cuda").mkdir(parents=True)
    (fake / "cuda" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    r = run_cli(gpu_repo, "check", "--build", env={"PYTHONPATH": str(fake)})
    assert r.returncode == 5, r.stdout + r.stderr
    assert "pip install 'tvmtune-ci[cuda]'" in r.stderr + r.stdout


def with_the_gpu_target_its_comment_suggests(config: str) -> str:
    """tvmtune.yaml with the GPU target its comment suggests added under `targets:`, as a
    new user would follow it (the comment, not this test, names the target)."""
    comment = " ".join(line.strip().lstrip("#").strip() for line in config.splitlines() if line.startswith("#"))
    found = re.search(r"To tune one, add a GPU target \(e\.g\. `(\w+): (\{target: [^`]+\})`", comment)
    assert found, "tvmtune.yaml's comment no longer says how to add a GPU target"
    name, value = found.groups()
    assert config.count("\ntargets:\n") == 1
    return config.replace("\ntargets:\n", f"\ntargets:\n  {name}: {value}\n", 1)


@pytest.mark.extra("cuda")
def test_a_gpu_target_added_as_tvmtune_yaml_says_builds_only_the_gpu_templates(tmp_path: Path) -> None:
    """This repository's tvmtune.yaml and templates, with the GPU target its comment
    suggests and that target's logs tuned: `check --build --target h100` exits 0, its
    entries and builds are the GPU templates' alone (the CPU templates, with no targets:
    list, leave the GPU target alone) and the CPU targets still cover the CPU templates."""
    project = Path(__file__).resolve().parents[2]
    config = with_the_gpu_target_its_comment_suggests((project / "tvmtune.yaml").read_text())
    ops = [p.stem for p in discover_templates(project / "operators")]
    root = make_repo(tmp_path, config=config, operators=ops)
    cfg = load_config(root / "tvmtune.yaml")
    (gpu,) = [t.name for t in cfg.targets if t.kind == "cuda"]
    gpu_ops = sorted(p.stem for p in discover_templates(root / "operators") if declared_kinds(p) == ("cuda",))
    assert gpu_ops == ["matmul_cuda", "softmax_cuda"]
    for op in gpu_ops:
        write_fresh(root, op, gpu)
    commit_all(root, "tuned")
    r = run_cli(root, "check", "--build", "--target", gpu, "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert sorted((e["operator"], e["target"], e["fresh"]) for e in data["entries"]) == [
        (op, gpu, True) for op in gpu_ops
    ]
    assert data["builds"] and {b["operator"] for b in data["builds"]} == set(gpu_ops)
    assert all(b["ok"] and not b["skipped"] for b in data["builds"]), data["builds"]
    status = run_cli(root, "status", "--target", gpu)
    assert f"  {gpu} (cuda): {', '.join(gpu_ops)}" in status.stdout.splitlines(), status.stdout
