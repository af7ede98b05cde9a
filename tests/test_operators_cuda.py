"""The GPU templates of this repository (operators/*.py with TARGET_KINDS = ["cuda"]),
on this CPU-only machine.

Always: every design space of every GPU template is scheduled and lowered by TVM to
CUDA source for sm_80 (A100) and sm_90a (H100), through the tuner's postprocessors
(MetaSchedule's VerifyGPUCode checks shared memory and threads per block); the legal
space is counted without TVM on both; a point over the shared-memory limit is never
built; the search proposes no point that breaks a constraint.
With the [cuda] extra (NVRTC from PyPI): each design space's default compiles to a
cubin for both archs, what ptxas reports fits the GPU, and a kernel over the GPU's
registers per block fails its build as `resources`. Nothing here runs a kernel: the
numerics run on the GPU at `retune`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tvmtune_ci.core.cudatags import expand_tag
from tvmtune_ci.core.errors import TemplateError
from tvmtune_ci.core.template import default_values, design_spaces, discover_templates, import_template, read_template

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ROOT / "operators"
GPU_TEMPLATES = sorted(p.stem for p in discover_templates(OPERATORS) if "cuda" in read_template(p).kinds)
ARCHS: dict[str, dict[str, Any]] = {
    "sm_80": expand_tag("nvidia/nvidia-a100"),  # type: ignore[dict-item]
    "sm_90a": expand_tag("nvidia/nvidia-h100"),  # type: ignore[dict-item]
}
CASES = [(name, s) for name in GPU_TEMPLATES for s in design_spaces(read_template(OPERATORS / f"{name}.py").knobs)]


def case_id(case: tuple[str, dict[str, Any]]) -> str:
    name, structure = case
    return "-".join([name, *(f"{k}={v}" for k, v in structure.items())])


@cache
def load(name: str) -> Any:
    return import_template(OPERATORS / f"{name}.py", ROOT)


def test_the_gpu_templates_are_there() -> None:
    assert {"matmul_cuda", "softmax_cuda"} <= set(GPU_TEMPLATES)


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("name", GPU_TEMPLATES)
def test_the_legal_space_is_counted_without_tvm(name: str, arch: str) -> None:
    decl = read_template(OPERATORS / f"{name}.py")
    for wl, (points, spaces) in decl.space_sizes(ARCHS[arch]).items():
        assert 50 <= points <= 20_000 and spaces == 1, (wl, points)


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_design_space_lowers_to_cuda_for_the_arch(case: tuple[str, dict[str, Any]], arch: str) -> None:
    """Every workload's default of each design space: scheduled with the tuner's
    postprocessors (VerifyGPUCode: shared memory and threads within the target) and
    built by TVM into CUDA source with its launch bounds."""
    import tvm

    from tvmtune_ci.tune.builder import schedule_config
    from tvmtune_ci.tune.nvrtc import cuda_source

    name, structure = case
    module = load(name)
    target = ARCHS[arch]
    for wl in module.WORKLOADS:
        sch = schedule_config(module, wl, structure, target)
        src = cuda_source(tvm.compile(sch.mod, target=tvm.target.Target(target)).mod)
        assert "__launch_bounds__" in src and "__global__" in src
        if name == "matmul_cuda":
            assert "__shared__" in src


SMEM_CASES = [c for c in CASES if any(x.name == "smem" for x in read_template(OPERATORS / f"{c[0]}.py").constraints)]


@pytest.mark.parametrize("case", SMEM_CASES, ids=case_id)
def test_a_point_over_the_shared_memory_limit_is_never_built(case: tuple[str, dict[str, Any]]) -> None:
    """The same configuration on a GPU with too little shared memory for it: refused
    before TVM lowers it (`check` already did not count it)."""
    from tvmtune_ci.tune.builder import schedule_config

    name, structure = case
    module = load(name)
    wl = next(iter(module.WORKLOADS))
    schedule_config(module, wl, structure, ARCHS["sm_90a"])
    tiny = dict(ARCHS["sm_90a"], max_shared_memory_per_block=64)
    with pytest.raises(TemplateError, match="'smem'"):
        schedule_config(module, wl, structure, tiny)


def test_the_search_proposes_no_point_that_breaks_a_constraint() -> None:
    """MetaSchedule's evolutionary search over the GPU matmul, as the tuner sets it up
    (its postprocessors reject a candidate that breaks a constraint): every proposal
    of three rounds is legal. Nothing is built or measured."""
    from tvmtune_ci.core.constraints import violated
    from tvmtune_ci.core.targetinfo import scope
    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.builder import make_postprocs
    from tvmtune_ci.tune.space import TemplateSpace, constraint_postprocs, decode_knobs, plain, space_info
    from tvmtune_ci.tune.workload import workload_module, workload_params

    ms = tvmsetup.ms()
    module, target, wl = load("matmul_cuda"), ARCHS["sm_90a"], "m1024"
    params = workload_params(module, wl)
    names = scope(params, target)
    space = TemplateSpace(module, params, target)
    infos: list[Any] = []
    ctx = ms.TuneContext(
        mod=workload_module(module, wl),
        target=tvmsetup.make_target(target),
        space_generator=ms.space_generator.ScheduleFn(
            space,
            sch_rules=[],
            postprocs=make_postprocs(target) + constraint_postprocs(module, names, infos),
            mutator_probs={},
        ),
        search_strategy=ms.search_strategy.EvolutionarySearch(population_size=32, init_min_unmeasured=16),
        task_name=wl,
        rand_state=7,
        num_threads=1,
    )
    schedules = ctx.generate_design_space()
    infos.extend(space_info(i, space.structures[i], s, space.orders[i]) for i, s in enumerate(schedules))
    ctx.pre_tuning(
        max_trials=48,
        num_trials_per_iter=16,
        design_spaces=schedules,
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
    )
    seen = 0
    for _ in range(3):
        cands = ctx.generate_measure_candidates()
        assert cands
        for c in cands:
            _, kv = decode_knobs(plain(c.sch.trace.as_json()), infos, module.KNOBS)
            values = default_values(module.KNOBS, names, None, kv)
            assert not violated(module.CONSTRAINTS, values), kv
            seen += 1
        ctx.notify_runner_results(cands, [ms.runner.RunnerResult([1e-3], None)] * len(cands))
    ctx.post_tuning()
    assert seen >= 32


# --------------------------------------------------------------------------- with NVRTC


@pytest.mark.extra("cuda")
@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_design_space_compiles_to_a_cubin(case: tuple[str, dict[str, Any]], arch: str) -> None:
    from tvmtune_ci.tune.gpubuild import compile_cuda_config

    name, structure = case
    module = load(name)
    target = ARCHS[arch]
    wl = next(iter(module.WORKLOADS))
    cubin = compile_cuda_config(module, wl, target, structure)
    assert cubin.data[:4] == b"\x7fELF" and cubin.arch == arch
    (kernel,) = cubin.kernels
    assert 0 < kernel.registers <= 255 and kernel.threads > 0
    assert kernel.registers_per_block <= target["registers_per_block"]
    assert kernel.smem_bytes <= target["max_shared_memory_per_block"]
    assert not cubin.over(target)


@pytest.mark.extra("cuda")
def test_a_kernel_over_the_registers_per_block_fails_its_build_as_resources(tmp_path: Path) -> None:
    """What ptxas reports decides: a GPU with 8,192 registers per block cannot run the
    default matmul (256 threads x ~60 registers), though it fits every constraint
    (its 64 x 64 accumulators are half of 8,192)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tvmtune_ci.tune.builder import make_builder, schedule_config
    from tvmtune_ci.tune.failures import failure_kind

    target = dict(ARCHS["sm_90a"], registers_per_block=8192)
    sch = schedule_config(load("matmul_cuda"), "m1024", None, target)
    builder = make_builder(str(tmp_path))
    try:
        ok, over = builder.build(
            [
                ms.builder.BuilderInput(sch.mod, tvm.target.Target(ARCHS["sm_90a"])),
                ms.builder.BuilderInput(sch.mod, tvm.target.Target(target)),
            ]
        )
    finally:
        builder.close()
    assert ok.error_msg is None, ok.error_msg
    assert builder.resources[ok.artifact_path]["registers_per_block"] > 8192
    assert over.artifact_path is None
    assert "registers" in over.error_msg and "> 8192 per block" in over.error_msg
    assert failure_kind(str(over.error_msg)) == "resources"
