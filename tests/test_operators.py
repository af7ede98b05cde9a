"""The operator templates of this repository (operators/*.py).

Each template is read statically as `check` reads it (space sizes in range), then
built on a small test-only workload: the default configuration and one
non-trivial configuration of every design space must match `reference()`, every
declared knob must be sampled in every design space (so the reported space size
is true), a search-mode (traced, randomly sampled) schedule must build too, and
the real workloads must schedule (their declared split extents match the loops).

Templates read their target (`cfg.vector_lanes`, LANES/VREGS in KNOBS): the numerics
run on this machine's own CPU, whichever ISA it has, and every template also builds
(TVM's LLVM, not run) for an AVX-512 CPU, an AVX2 CPU and an aarch64 triple, whose
object code is checked to be aarch64 ELF.
"""

from __future__ import annotations

import zlib
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tvmtune_ci.core.extents import eval_extent
from tvmtune_ci.core.targetinfo import scope, target_facts
from tvmtune_ci.core.template import (
    Categorical,
    Knobs,
    Split,
    call_with_workload,
    design_spaces,
    discover_templates,
    import_template,
    read_template,
)

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ROOT / "operators"


# This host's CPU, not the repo's tuning target: CI may run on another x86 CPU,
# and code built for a CPU the host lacks dies with SIGILL.
def _host_target() -> dict[str, Any]:
    from tvmtune_ci.tune.hostcheck import host_target

    return host_target(2)


# Build-only targets: each ISA family the templates must schedule for.
BUILD_TARGETS: dict[str, dict[str, Any]] = {
    "avx512": {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2},
    "avx2": {"kind": "llvm", "mcpu": "znver3", "num-cores": 2},
    "aarch64": {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "num-cores": 4},
}
# Points per design space: enough to be worth a search, few enough for 300 trials.
MIN_SPACE, MAX_SPACE = 100, 8192  # NEON's 4 lanes make 4x more column splits

# template -> (a small workload, a non-trivial configuration that is valid for it)
SMALL: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # 40 x 56 x 20 pads to 48 x 64 x 32: exercises the padding path too.
    "matmul": (
        {"M": 40, "N": 56, "K": 20, "dtype": "float32"},
        {"tile_i": [2, 3, 8], "tile_j": [1, 2, 2], "tile_k": [2, 1]},
    ),
    # 3 heads of 20 x 24 x 40, padded to 32 x 32 x 48
    "batch_matmul": (
        {"B": 3, "M": 20, "N": 24, "K": 40, "dtype": "float32"},
        {"tile_i": [1, 4, 8], "tile_j": [2, 1, 2], "tile_k": [1, 3]},
    ),
    "dense": (
        {"M": 24, "N": 64, "K": 48, "dtype": "float32"},
        {"tile_i": [4, 8], "tile_j": [2, 1, 2], "tile_k": [1, 3]},
    ),
    "conv2d": (
        {"N": 1, "C": 8, "H": 10, "W": 12, "K": 8, "R": 3, "S": 3, "pad": 1, "stride": 1, "dtype": "float32"},
        {"tile_k": [2, 4], "tile_h": [5, 2], "tile_w": [1, 12], "unroll": 16},
    ),
    # 64 positions (8 x 8) in vectors across rows of 8, 32 -> 16 channels
    "conv2d_1x1": (
        {"N": 1, "C": 32, "H": 8, "W": 8, "K": 16, "dtype": "float32"},
        {"tile_i": [1, 2, 8], "tile_j": [1, 2, 2], "tile_k": [1, 2]},
    ),
    # 4 x 4 tiles of 2 x 2 outputs (one 16-tile column block), 16 -> 16 channels
    "conv2d_winograd": (
        {"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "pad": 1, "m": 2, "dtype": "float32"},
        {"tile_i": [1, 2, 8], "tile_j": [1, 1, 1], "tile_k": [1, 1]},
    ),
    "softmax": (
        {"R": 12, "N": 128, "dtype": "float32"},
        {"tile_r": [3, 4], "acc_max": [2, 4], "acc_sum": [4, 2], "unroll": 16},
    ),
}

# CPU templates; the GPU ones (TARGET_KINDS = ["cuda"]) are tests/test_operators_cuda.py's.
TEMPLATES = sorted(p.stem for p in discover_templates(OPERATORS) if "llvm" in read_template(p).kinds)


@cache
def load(name: str) -> Any:
    return import_template(OPERATORS / f"{name}.py", ROOT)


def spaces(name: str) -> list[tuple[str, dict[str, Any]]]:
    decl = read_template(OPERATORS / f"{name}.py")
    return [(name, s) for s in design_spaces(decl.knobs)]


def space_id(case: tuple[str, dict[str, Any]]) -> str:
    name, structure = case
    return "-".join([name, *(f"{k}={v}" for k, v in structure.items())])


ALL_SPACES = [case for name in TEMPLATES for case in spaces(name)]


def for_target(module: Any, workload: dict[str, Any], values: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """SMALL's values on `target`: a split whose extent depends on LANES gets its
    outermost factor scaled so that the product is the target's extent."""
    names = scope(workload, target)
    out = dict(values)
    for knob in module.KNOBS:
        if isinstance(knob, Split) and knob.name in out:
            v = list(out[knob.name])
            extent, rest = eval_extent(knob.extent, names), int(np.prod(v[1:]))
            if extent % rest == 0:
                v[0] = extent // rest
            out[knob.name] = v
    return out


def check_values(module: Any, workload: dict[str, Any], values: dict[str, Any], target: dict[str, Any]) -> None:
    """The test's configuration must be a point of the declared space."""
    names = scope(workload, target)
    for knob in module.KNOBS:
        if knob.name not in values:
            continue
        v = values[knob.name]
        if isinstance(knob, Split):
            extent = eval_extent(knob.extent, names)
            assert len(v) == knob.parts and int(np.prod(v)) == extent, (knob, v)
            assert v[-1] <= eval_extent(knob.max_factor, names), (knob, v)
        elif isinstance(knob, Categorical):
            assert v in knob.candidates, (knob, v)


def build_and_compare(module: Any, workload: dict[str, Any], cfg: Knobs, seed: int = 1) -> None:
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    func = call_with_workload(module.compute, workload)
    sch = tvm.s_tir.Schedule(func, seed=seed)
    module.schedule(sch, cfg)
    exe = tvm.compile(sch.mod, target=tvm.target.Target(_host_target()))
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, [int(s) for s in a.shape]).astype(str(a.dtype)) for a in ArgInfo.from_prim_func(func)]
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    exe.mod.get_function(exe.mod.entry_name)(*tensors)
    expected = call_with_workload(module.reference, workload, *arrays[:-1])
    np.testing.assert_allclose(tensors[-1].numpy(), expected, rtol=1e-4, atol=1e-5)


def test_every_template_has_a_small_workload() -> None:
    assert {"matmul", "conv2d", "softmax"} <= set(TEMPLATES)
    assert set(TEMPLATES) == set(SMALL), "add a small workload for each new template to SMALL"


@pytest.mark.parametrize("isa", sorted(BUILD_TARGETS))
@pytest.mark.parametrize("name", TEMPLATES)
def test_declared_space_sizes(name: str, isa: str, capsys: pytest.CaptureFixture[str]) -> None:
    decl = read_template(OPERATORS / f"{name}.py")
    sizes = decl.space_sizes(BUILD_TARGETS[isa])
    with capsys.disabled():
        for wl, (per_space, n_spaces) in sizes.items():
            print(f"\n  {name}/{wl} ({isa}): {per_space} points x {n_spaces} spaces", end="")
    for wl, (per_space, n_spaces) in sizes.items():
        assert MIN_SPACE <= per_space <= MAX_SPACE, f"{name}/{wl}: {per_space} points per space"
        assert 1 <= n_spaces <= 8


@pytest.mark.parametrize("case", ALL_SPACES, ids=space_id)
def test_design_space_builds_and_matches_reference(case: tuple[str, dict[str, Any]]) -> None:
    name, structure = case
    module = load(name)
    target = _host_target()
    workload, values = SMALL[name]
    values = for_target(module, workload, values, target)
    check_values(module, workload, values, target)
    sampled = {k.name for k in module.KNOBS if isinstance(k, (Split, Categorical))}
    for vals in ({}, values):
        cfg = Knobs(module.KNOBS, workload, structure, mode="fixed", values=vals, target=target)
        build_and_compare(module, workload, cfg)
        assert set(cfg.order) == sampled, f"declared, never sampled: {sampled - set(cfg.order)}"


@pytest.mark.parametrize("case", ALL_SPACES, ids=space_id)
def test_search_mode_schedule_builds(case: tuple[str, dict[str, Any]]) -> None:
    """MetaSchedule replays the schedule with sampled decisions: no Python value
    may depend on a sampled factor. A random point of each design space."""
    name, structure = case
    module = load(name)
    workload, _ = SMALL[name]
    cfg = Knobs(module.KNOBS, workload, structure, mode="search", target=_host_target())
    build_and_compare(module, workload, cfg, seed=zlib.crc32(space_id(case).encode()) % 1000 + 1)


@pytest.mark.parametrize("name", TEMPLATES)
def test_real_workloads_schedule(name: str) -> None:
    """The declared extents match the loops of every real workload (no build): each
    split knob tiles a loop of exactly its declared extent (a wrong extent raises in
    fixed mode), and the schedule changes the program."""
    import tvm
    import tvm_ffi

    module = load(name)
    n_splits = sum(isinstance(k, Split) for k in module.KNOBS)
    for workload in module.WORKLOADS.values():
        for structure in design_spaces(module.KNOBS):
            sch = tvm.s_tir.Schedule(call_with_workload(module.compute, workload))
            for target in BUILD_TARGETS.values():
                s = sch.copy()
                cfg = Knobs(module.KNOBS, workload, structure, mode="fixed", target=target)
                module.schedule(s, cfg)
                splits = [i for i in s.trace.insts if i.kind.name == "Split"]
                assert len(splits) >= n_splits, (name, structure, [i.kind.name for i in s.trace.insts])
                assert not tvm_ffi.structural_equal(s.mod, sch.mod), (name, structure)


def _elf_machine(path: Path) -> int:
    """e_machine of an ELF file (62: x86-64, 183: aarch64)."""
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is not ELF"
    return int.from_bytes(head[18:20], "little")


@pytest.mark.parametrize("isa", sorted(BUILD_TARGETS))
@pytest.mark.parametrize("case", ALL_SPACES, ids=space_id)
def test_every_design_space_builds_for_every_isa(case: tuple[str, dict[str, Any]], isa: str, tmp_path: Path) -> None:
    """Scheduled for the ISA's lanes and registers and compiled by TVM's LLVM for it,
    not run (this host may lack AVX-512; aarch64 is cross-compiled): the object code
    is that architecture's."""
    import tvm

    name, structure = case
    module = load(name)
    target = BUILD_TARGETS[isa]
    workload, values = SMALL[name]
    values = for_target(module, workload, values, target)
    check_values(module, workload, values, target)
    sch = tvm.s_tir.Schedule(call_with_workload(module.compute, workload))
    module.schedule(sch, Knobs(module.KNOBS, workload, structure, mode="fixed", values=values, target=target))
    exe = tvm.compile(sch.mod, target=tvm.target.Target(target))
    obj = tmp_path / "kernel.o"
    exe.mod.write_to_file(str(obj))
    expected = {"aarch64": 183}.get(target_facts(target).arch, 62)
    assert _elf_machine(obj) == expected


def test_the_lanes_follow_the_target_not_the_host() -> None:
    """The same template reads 16 fp32 lanes for AVX-512, 8 for AVX2, 4 for NEON,
    on whatever machine the schedule is built."""
    module = load("softmax")
    workload, _ = SMALL["softmax"]
    lanes = {
        isa: Knobs(module.KNOBS, workload, {}, target=t).vector_lanes("float32") for isa, t in BUILD_TARGETS.items()
    }
    assert lanes == {"avx512": 16, "avx2": 8, "aarch64": 4}


CROSS_CC = "aarch64-linux-gnu-gcc"


@pytest.mark.tool(CROSS_CC)
def test_the_builder_links_an_aarch64_target_with_the_cross_compiler(tmp_path: Path) -> None:
    """The tuner's own builder (what the RPC runner uploads) makes an aarch64 shared
    object for an aarch64 triple: ELF machine 183, type ET_DYN."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tvmtune_ci.tune.builder import make_builder, schedule_config

    target = BUILD_TARGETS["aarch64"]
    sch = schedule_config(load("matmul"), "m1024", None, target)
    builder = make_builder(str(tmp_path))
    try:
        (res,) = builder.build([ms.builder.BuilderInput(sch.mod, tvm.target.Target(target))])
    finally:
        builder.close()
    assert res.error_msg is None, res.error_msg
    so = Path(res.artifact_path)
    assert _elf_machine(so) == 183
    assert int.from_bytes(so.read_bytes()[16:18], "little") == 3  # ET_DYN: a shared object


def test_a_missing_cross_compiler_is_named_with_its_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tvmtune_ci.core.errors import HostError
    from tvmtune_ci.tune.hostcheck import check_toolchain, cross_cc

    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler at all
    assert cross_cc(BUILD_TARGETS["avx2"]) is None  # the host's own compiler links x86
    assert cross_cc({"kind": "llvm", "mtriple": "aarch64-unknown-linux-gnu"}) == CROSS_CC
    with pytest.raises(HostError, match="apt-get install gcc-aarch64-linux-gnu"):
        check_toolchain(BUILD_TARGETS["aarch64"])
