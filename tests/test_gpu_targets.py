"""GPU targets on a machine without a GPU: refused before any trial (exit 5), never
silently; and the measuring path is the CPU's, tested at its seams (the device type,
the runner given a real CUDA library, the compile hook the worker loads it with)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_repo, run_cli

from tvmtune_ci.core.cudatags import expand_tag
from tvmtune_ci.core.errors import HostError
from tvmtune_ci.tune.hostcheck import arch_version, gpu_arch_problem

H100 = expand_tag("nvidia/nvidia-h100")
assert H100 is not None
GPU_CONFIG = """\
format: 1
tvm_version: "0.27"
trials: 16
targets:
  h100:
    target: nvidia/nvidia-h100
    runs-on: [self-hosted, linux, x64, gpu, h100]
operators:
  matmul_cuda: {targets: [h100]}
"""


def test_a_gpu_target_on_this_host_exits_5_before_any_trial(tmp_path: Path) -> None:
    import tvm

    assert not tvm.cuda(0).exist, "this test is for a machine without a GPU"
    root = make_repo(tmp_path, config=GPU_CONFIG, operators=["matmul_cuda"])
    for args in (["retune", "--dry-run"], ["retune"], ["retune", "matmul_cuda", "--target", "h100"]):
        r = run_cli(root, *args)
        assert r.returncode == 5, (args, r.stdout, r.stderr)
        out = r.stdout + r.stderr
        assert "needs a cuda device (sm_90a)" in out or "[cuda]" in out, out
    assert "no trial was spent" in out
    assert not (root / "tuning_logs").exists()  # nothing tuned, nothing written


def test_the_numerics_on_a_gpu_are_refused_here_not_skipped() -> None:
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.numerics import check_correct

    root = Path(__file__).resolve().parents[1]
    module = import_template(root / "operators" / "matmul_cuda.py", root)
    with pytest.raises(HostError, match="needs a cuda device.*numerics can only be checked"):
        check_correct(module, "m1024", H100)


@pytest.mark.parametrize(
    ("arch", "gpu", "ok"),
    [
        ("sm_90a", "9.0", True),
        ("sm_90a", "8.0", False),
        ("sm_80", "8.6", True),
        ("sm_86", "8.0", False),
        ("sm_80", "9.0", False),
        ("sm_90", "9.0", True),
    ],
)
def test_a_gpu_of_another_arch_is_refused(arch: str, gpu: str, ok: bool) -> None:
    problem = gpu_arch_problem({"arch": arch}, gpu)
    assert (problem is None) == ok, problem
    assert arch_version("sm_90a") == "9.0" and arch_version("sm_100a") == "10.0"


def test_the_device_type_of_a_cuda_target_is_cuda() -> None:
    import tvm

    from tvmtune_ci.tune.sampling import device_type

    assert device_type(tvm.target.Target(H100)) == "cuda"


@pytest.mark.extra("cuda")
def test_the_runner_takes_a_real_cuda_library_and_says_why_it_cannot_run_it(tmp_path: Path) -> None:
    """The builder's CUDA library goes to the same local runner as a CPU kernel, with
    device type cuda; the worker loads it through the compile hook (which finds the
    builder's cubin) and, without a GPU, the measurement fails with the reason: a
    failed trial, not a crash."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tvmtune_ci.core.configschema import MeasureOptions
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune import nvrtc
    from tvmtune_ci.tune.builder import make_builder, schedule_config
    from tvmtune_ci.tune.runners import make_runner
    from tvmtune_ci.tune.sampling import device_type

    root = Path(__file__).resolve().parents[1]
    module = import_template(root / "operators" / "softmax_cuda.py", root)
    sch = schedule_config(module, "attn_512", None, H100)
    target = tvm.target.Target(H100)
    builder = make_builder(str(tmp_path))
    runner = make_runner(MeasureOptions(time_cap_s=0.2, timeout_s=60))
    try:
        (built,) = builder.build([ms.builder.BuilderInput(sch.mod, target)])
        assert built.error_msg is None, built.error_msg
        # The worker's hook returns the cubin the builder compiled (no second compile).
        src = nvrtc.cuda_source(tvm.compile(sch.mod, target=target).mod)
        cached = nvrtc.cache_dir() / f"{nvrtc._key(src, 'sm_90a')}.cubin"  # noqa: SLF001
        assert cached.is_file() and nvrtc.load_hook(src, target) == cached.read_bytes()
        args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        (fut,) = runner.run([ms.runner.RunnerInput(built.artifact_path, device_type(target), args)])
        res = fut.result()
    finally:
        runner.close()
        builder.close()
    assert res.run_secs is None and res.error_msg, res
    assert "cuda" in res.error_msg.lower() or "CUDA" in res.error_msg


def test_the_readme_of_a_gpu_log_shows_the_arch_and_the_bests_resources(tmp_path: Path) -> None:
    """What a GPU re-tune records (its builds' report, its `resources` failures) reaches
    results.json and the generated README; a CPU set's results keep their keys."""
    import json

    from conftest import commit_all, edit_results, write_fresh

    root = make_repo(tmp_path, config=GPU_CONFIG, operators=["matmul_cuda"])
    write_fresh(root, "matmul_cuda", "h100")
    folder = root / "tuning_logs" / "matmul_cuda" / "h100"
    gpu = {
        "arch": "sm_90a",
        "smem_bytes": 6144,
        "registers_per_block": 8192,
        "registers": 32,
        "threads": 256,
        "spill_bytes": 0,
        "cubin_bytes": 44920,
    }

    def add(results: dict) -> None:
        results["m1024"]["gpu"] = gpu

    edit_results(folder, add)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["trials"]["m1024"]["failures"] = {"resources": 3}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    commit_all(root, "tuned")
    r = run_cli(root, "readme", "matmul_cuda", "--target", "h100")
    assert r.returncode == 0, r.stdout + r.stderr
    text = (folder / "README.md").read_text()
    assert "# Tuning log: `matmul_cuda` on `h100` (sm_90a)" in text
    assert (
        "GPU build of the best (sm_90a), as ptxas reported it: 6,144 bytes of shared memory "
        "and 8,192 registers per block (32 per thread x 256 threads)"
    ) in text
    assert "resources × 3; resources: built, but over the GPU's limits" in text
    assert "sm_90a (CUDA): 49,152 bytes of shared memory" in text

    from tvmtune_ci.core.manifest import read_manifest

    m = read_manifest(folder / "manifest.json")
    assert m.results["m1024"].gpu == gpu and m.results["m4096"].gpu is None
    assert "gpu" not in m.results_json()["results"]["m4096"]


@pytest.mark.extra("cuda")
def test_the_bests_resources_are_what_its_build_reports() -> None:
    from tvmtune_ci.core.template import import_template
    from tvmtune_ci.tune.gpubuild import gpu_resources

    root = Path(__file__).resolve().parents[1]
    module = import_template(root / "operators" / "matmul_cuda.py", root)
    got = gpu_resources(module, "m1024", H100, None)
    assert got is not None and got["arch"] == "sm_90a" and got["threads"] == 256
    assert got["smem_bytes"] == (64 + 64) * 16 * 4 * 2  # both 64 x 16 tiles, double-buffered
    assert 0 < got["registers_per_block"] <= 65536 and got["cubin_bytes"] > 10_000
    assert gpu_resources(module, "m1024", {"kind": "llvm"}, None) is None
