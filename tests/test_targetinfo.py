"""Target facts (`tvmtune_ci.core.targetinfo`): derived from the target dict alone, and
in agreement with TVM's own LLVM about which vector ISA each CPU name enables."""

from __future__ import annotations

from typing import Any

import pytest

from tvmtune_ci.core import targetinfo
from tvmtune_ci.core.errors import TemplateError
from tvmtune_ci.core.targetinfo import scope, target_facts

X86_CPUS = sorted(targetinfo._X86_AVX512 | targetinfo._X86_AVX2 | targetinfo._X86_AVX | targetinfo._X86_SSE)


def _llvm(target: dict[str, Any], feature: str) -> bool:
    import tvm

    return bool(tvm.target.codegen.llvm_cpu_has_features([feature], tvm.target.Target(target)))


@pytest.mark.parametrize("mcpu", X86_CPUS)
def test_the_x86_table_agrees_with_tvms_llvm(mcpu: str) -> None:
    import tvm

    target = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": mcpu}
    if not tvm.target.codegen.llvm_is_valid_cpu(mcpu, "x86_64-linux-gnu"):
        pytest.skip(f"this TVM's LLVM does not know {mcpu}")
    isa = target_facts(target).isa
    assert (isa == "avx512") == _llvm(target, "avx512f"), mcpu
    assert (isa in ("avx2", "avx512")) == _llvm(target, "avx2"), mcpu
    assert (isa in ("avx", "avx2", "avx512")) == _llvm(target, "avx"), mcpu


@pytest.mark.parametrize(
    ("mattr", "isa"), [(["-avx512f"], "avx2"), (["+avx512f"], "avx512"), (["-avx2"], "avx"), (["-avx"], "sse")]
)
def test_mattr_overrides_the_cpu_as_llvm_does(mattr: list[str], isa: str) -> None:
    base = "znver4" if mattr[0] != "+avx512f" else "haswell"
    target = {"kind": "llvm", "mcpu": base, "mattr": mattr}
    assert target_facts(target).isa == isa
    assert (isa == "avx512") == _llvm(target, "avx512f")
    assert (isa in ("avx2", "avx512")) == _llvm(target, "avx2")


def test_lanes_and_registers_per_isa() -> None:
    avx512 = target_facts({"kind": "llvm", "mcpu": "sapphirerapids"})
    avx2 = target_facts({"kind": "llvm", "mcpu": "znver3"})
    neon = target_facts({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    assert (avx512.lanes(), avx512.lanes("float16"), avx512.vector_registers) == (16, 32, 32)
    assert (avx2.lanes(), avx2.lanes("float64"), avx2.vector_registers) == (8, 4, 16)
    assert (neon.arch, neon.lanes(), neon.vector_registers) == ("aarch64", 4, 32)
    assert target_facts({"kind": "llvm", "mcpu": "cortex-a72"}).arch == "aarch64"
    assert target_facts({"kind": "vulkan"}).lanes() == 1
    assert avx2.describe() == "avx2: 256-bit vectors (8 fp32 lanes), 16 registers"


def test_an_unknown_cpu_says_how_to_name_its_isa() -> None:
    with pytest.raises(TemplateError, match=r"mattr: \['\+avx2'\]"):
        target_facts({"kind": "llvm", "mcpu": "futurelake"})
    assert target_facts({"kind": "llvm", "mcpu": "futurelake", "mattr": ["+avx2"]}).isa == "avx2"


def test_the_extent_scope_has_the_facts_in_the_workloads_dtype() -> None:
    wl = {"N": 64, "dtype": "float16"}
    assert scope(wl, {"kind": "llvm", "mcpu": "znver3"})["LANES"] == 16
    assert scope(wl, None) == wl
    with pytest.raises(TemplateError, match="shadow"):
        scope({"LANES": 3}, {"kind": "llvm", "mcpu": "znver3"})


# --------------------------------------------------------------------------- GPU targets

H100 = {
    "kind": "cuda",
    "arch": "sm_90a",
    "max_shared_memory_per_block": 49152,
    "max_threads_per_block": 1024,
    "thread_warp_size": 32,
    "registers_per_block": 65536,
}


def _cuda_tags() -> list[str]:
    from tvmtune_ci.core.cudatags import tag_names

    return tag_names()


def test_every_cuda_tag_of_tvm_is_in_the_table() -> None:
    import tvm
    from tvm.target import list_tags

    theirs = sorted(str(k) for k in list_tags().keys() if tvm.target.Target(str(k)).kind.name == "cuda")
    assert theirs == _cuda_tags(), "regenerate: .venv/bin/python scripts/gen_cuda_tags.py"


@pytest.mark.parametrize("tag", _cuda_tags())
def test_gpu_facts_of_each_tag_agree_with_tvms_target(tag: str) -> None:
    """The expanded dict is the tag's target, and its facts are that target's
    attributes: derived from the target alone, as TVM's own tag says."""
    import tvm

    from tvmtune_ci.core.cudatags import expand_tag

    expanded = expand_tag(tag)
    assert expanded is not None
    theirs = tvm.target.Target(tag)
    ours = tvm.target.Target(expanded)
    assert {k: v for k, v in ours.export().items() if k != "tag"} == {
        k: v for k, v in theirs.export().items() if k != "tag"
    }
    facts = target_facts(expanded)
    attrs = theirs.attrs
    assert facts.isa == "cuda" and facts.arch == str(attrs["arch"])
    names = facts.names()
    assert names["SMEM"] == int(attrs["max_shared_memory_per_block"])
    assert names["THREADS"] == int(attrs["max_threads_per_block"])
    assert names["WARP"] == int(attrs["thread_warp_size"])
    assert names["REGS"] == int(attrs["registers_per_block"])


def test_gpu_facts_in_the_extent_scope_and_lanes_of_a_16_byte_load() -> None:
    names = scope({"M": 64, "dtype": "float32"}, H100)
    assert (names["SMEM"], names["THREADS"], names["WARP"], names["REGS"]) == (49152, 1024, 32, 65536)
    assert names["LANES"] == 4
    assert scope({"M": 64, "dtype": "float16"}, H100)["LANES"] == 8
    assert "SMEM" not in scope({"M": 64}, {"kind": "llvm", "mcpu": "znver3"})
    facts = target_facts(H100)
    assert facts.describe().startswith("cuda sm_90a: 49,152 bytes of shared memory")
    # A CPU target's recorded facts keep their form (committed manifests compare them).
    assert set(target_facts({"kind": "llvm", "mcpu": "znver4"}).to_json()) == {
        "arch",
        "isa",
        "vector_bits",
        "vector_registers",
    }
    assert target_facts(H100).to_json()["SMEM"] == 49152


def test_a_cuda_target_without_its_limits_names_them() -> None:
    with pytest.raises(TemplateError, match="lacks max_shared_memory_per_block.*nvidia/nvidia-h100"):
        target_facts(
            {
                "kind": "cuda",
                "arch": "sm_90",
                "max_threads_per_block": 1024,
                "thread_warp_size": 32,
                "registers_per_block": 65536,
            }
        )
