"""What a template may ask about its target, derived from the target alone.

`schedule(sch, cfg)` reads `cfg.vector_lanes("float32")`, `cfg.vector_registers`
and so on, and a KNOBS extent or `max_factor` may name `LANES`, `VREGS` or `VBITS`.
The facts come from the canonical target dict (`mtriple`, `mcpu`, `mattr`), never
from the machine that builds or checks: a log for an AVX2 runner is scheduled for
AVX2 wherever it is re-tuned, and `check` (no TVM) computes the same space size
everywhere. `tests/test_targetinfo.py` compares this table with TVM's own LLVM.

A CUDA target's facts are its own attributes (`arch`, `max_shared_memory_per_block`,
`max_threads_per_block`, `thread_warp_size`, `registers_per_block`: what TVM's
`nvidia/...` tags carry, `cudatags.py`), named `SMEM`, `THREADS`, `WARP` and `REGS`
in KNOBS and CONSTRAINTS; its `LANES` are those of a 16-byte load (`max_vector_bytes`,
which MetaSchedule's `VerifyGPUCode` allows), 4 fp32.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import TemplateError

# x86 `mcpu` -> widest vector ISA LLVM enables for it (its feature table; the
# test checks every row against TVM's LLVM).
_X86_AVX512 = {
    "skylake-avx512",
    "cascadelake",
    "cooperlake",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
    "emeraldrapids",
    "graniterapids",
    "graniterapids-d",
    "diamondrapids",
    "knl",
    "knm",
    "znver4",
    "znver5",
    "x86-64-v4",
}
_X86_AVX2 = {
    "haswell",
    "broadwell",
    "skylake",
    "alderlake",
    "raptorlake",
    "meteorlake",
    "arrowlake",
    "arrowlake-s",
    "lunarlake",
    "pantherlake",
    "gracemont",
    "sierraforest",
    "grandridge",
    "clearwaterforest",
    "znver1",
    "znver2",
    "znver3",
    "bdver4",
    "x86-64-v3",
}
_X86_AVX = {"sandybridge", "ivybridge", "bdver1", "bdver2", "bdver3", "btver2"}
_X86_SSE = {
    "x86-64",
    "x86-64-v2",
    "generic",
    "nehalem",
    "westmere",
    "core2",
    "penryn",
    "silvermont",
    "goldmont",
    "goldmont-plus",
    "tremont",
    "btver1",
    "k8",
    "amdfam10",
}
_ARM64_CPUS_PREFIX = ("cortex-a", "cortex-x", "neoverse", "apple-", "ampere", "carmel", "a64fx")

_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

# ISA -> (vector bits, vector registers an operation can use)
_ISAS = {
    "avx512": (512, 32),
    "avx2": (256, 16),
    "avx": (256, 16),
    "sse": (128, 16),
    "neon": (128, 32),  # aarch64 Advanced SIMD: v0-v31
    "neon32": (128, 16),  # 32-bit Arm: q0-q15
}

_DTYPE_BITS = {
    "float64": 64,
    "float32": 32,
    "float16": 16,
    "bfloat16": 16,
    "int64": 64,
    "int32": 32,
    "int16": 16,
    "int8": 8,
    "uint8": 8,
    "uint16": 16,
    "uint32": 32,
}

# The names a KNOBS extent / max_factor may use besides the workload's keys: every
# target's, and a GPU target's (its limits per thread block).
CPU_FACT_NAMES = ("LANES", "VREGS", "VBITS")
GPU_FACT_NAMES = ("SMEM", "THREADS", "WARP", "REGS")
FACT_NAMES = CPU_FACT_NAMES + GPU_FACT_NAMES

# A CUDA target's attribute -> the fact it gives. TVM's VerifyGPUCode needs the first
# two; the rest are what a template bounds its thread blocks with.
CUDA_FACT_KEYS = {
    "max_shared_memory_per_block": "SMEM",
    "max_threads_per_block": "THREADS",
    "thread_warp_size": "WARP",
    "registers_per_block": "REGS",
}
# The widest load a CUDA thread issues (VerifyGPUCode's max_vector_bytes: 16).
CUDA_VECTOR_BITS = 128


@dataclass(frozen=True)
class GpuLimits:
    """What one CUDA thread block may use: shared memory (bytes), threads, the warp
    size and registers (32-bit, for the whole block)."""

    smem: int
    threads: int
    warp: int
    regs: int

    def names(self) -> dict[str, int]:
        return {"SMEM": self.smem, "THREADS": self.threads, "WARP": self.warp, "REGS": self.regs}


@dataclass(frozen=True)
class TargetFacts:
    """The vector facts of one target: `isa` "avx512", "avx2", "avx", "sse", "neon",
    "neon32", "cuda" (with `gpu`: its limits per thread block), or the kind of another
    non-CPU target, which has no vectors. `arch` is the CPU architecture ("x86_64") or
    the GPU's (`sm_90a`)."""

    arch: str
    isa: str
    vector_bits: int
    vector_registers: int
    gpu: GpuLimits | None = None

    def lanes(self, dtype: str = "float32") -> int:
        """Elements of `dtype` in one vector register (1 on a target without vectors)."""
        bits = _DTYPE_BITS.get(str(dtype))
        if bits is None:
            raise TemplateError(f"vector_lanes({dtype!r}): unknown dtype; one of {', '.join(_DTYPE_BITS)}")
        return max(1, self.vector_bits // bits)

    def names(self, dtype: str = "float32") -> dict[str, int]:
        """LANES (of `dtype`), VREGS, VBITS, and on a GPU SMEM, THREADS, WARP, REGS:
        what KNOBS and CONSTRAINTS expressions may name."""
        out = {"LANES": self.lanes(dtype), "VREGS": self.vector_registers, "VBITS": self.vector_bits}
        if self.gpu is not None:
            out.update(self.gpu.names())
        return out

    def describe(self) -> str:
        """`avx512: 512-bit vectors (16 fp32 lanes), 32 registers`."""
        if self.gpu is not None:
            g = self.gpu
            return (
                f"cuda {self.arch}: {g.smem:,} bytes of shared memory, {g.threads} threads, "
                f"{g.regs:,} registers per block, {g.warp}-thread warps"
            )
        if not self.vector_bits:
            return f"{self.isa}: no CPU vector registers"
        return (
            f"{self.isa}: {self.vector_bits}-bit vectors ({self.lanes()} fp32 lanes), {self.vector_registers} registers"
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "arch": self.arch,
            "isa": self.isa,
            "vector_bits": self.vector_bits,
            "vector_registers": self.vector_registers,
        }
        if self.gpu is not None:  # CPU facts keep the form their manifests recorded
            out.update(self.gpu.names())
        return out


def _arch(target: Mapping[str, Any], mcpu: str) -> str:
    triple = target.get("mtriple")
    if triple:
        arch = str(triple).split("-")[0]
        return _ARCH_ALIASES.get(arch, arch)
    if mcpu in _X86_AVX512 | _X86_AVX2 | _X86_AVX | _X86_SSE:
        return "x86_64"
    if mcpu.startswith(_ARM64_CPUS_PREFIX):
        return "aarch64"
    # No triple: LLVM compiles for the machine that builds, and so do we.
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


def _mattr(target: Mapping[str, Any]) -> dict[str, bool]:
    raw = target.get("mattr") or []
    if isinstance(raw, str):
        raw = [x for x in raw.split(",") if x]
    out: dict[str, bool] = {}
    for a in raw:
        a = str(a)
        if a[:1] in "+-":
            out[a[1:]] = a[0] == "+"
    return out


_X86_LEVELS = ("sse", "avx", "avx2", "avx512")
_X86_LEVEL_OF_FEATURE = {"avx": 1, "avx2": 2, "avx512f": 3}


def _x86_isa(mcpu: str, mattr: Mapping[str, bool], where: str) -> str:
    if mcpu in _X86_AVX512:
        level = 3
    elif mcpu in _X86_AVX2:
        level = 2
    elif mcpu in _X86_AVX:
        level = 1
    elif mcpu in _X86_SSE or not mcpu or any(f in _X86_LEVEL_OF_FEATURE for f in mattr):
        level = 0
    else:
        raise TemplateError(
            f"{where}: mcpu {mcpu!r} is not in tvmtune-ci's x86 table, so its vector width is "
            "unknown without running LLVM; name its widest ISA in the target's mattr (e.g. "
            "mattr: ['+avx2'] or ['+avx512f']) or use a known mcpu such as znver3, znver4, "
            "skylake-avx512, sapphirerapids, haswell"
        )
    # As in LLVM: an enabled feature brings what it needs (avx512f -> avx2 -> avx), a
    # disabled one takes what needs it along (-avx2 -> no avx512f); disabling wins.
    for feature, on in mattr.items():
        if on and feature in _X86_LEVEL_OF_FEATURE:
            level = max(level, _X86_LEVEL_OF_FEATURE[feature])
    for feature, on in mattr.items():
        if not on and feature in _X86_LEVEL_OF_FEATURE:
            level = min(level, _X86_LEVEL_OF_FEATURE[feature] - 1)
    return _X86_LEVELS[level]


def target_facts(target: Mapping[str, Any], where: str = "target") -> TargetFacts:
    """The facts of a canonical target dict (TemplateError for an x86 mcpu the table
    does not know and no mattr names the ISA)."""
    kind = str(target.get("kind", "llvm"))
    if kind == "cuda":
        return _cuda_facts(target, where)
    if kind not in ("llvm", "c"):
        return TargetFacts(kind, kind, 0, 0)
    mcpu = str(target.get("mcpu") or "")
    arch = _arch(target, mcpu)
    mattr = _mattr(target)
    if arch in ("x86_64", "i386", "i686"):
        isa = _x86_isa(mcpu, mattr, where)
    elif arch == "aarch64":
        isa = "neon"
    elif arch.startswith(("arm", "thumb")):
        isa = "neon32" if mattr.get("neon") is not False else "scalar"
    else:
        isa = "scalar"
    if isa == "scalar":
        return TargetFacts(arch, isa, 0, 0)
    bits, regs = _ISAS[isa]
    return TargetFacts(arch, isa, bits, regs)


def missing_cuda_keys(target: Mapping[str, Any]) -> list[str]:
    """The attributes a CUDA target dict lacks for its facts (`arch` and the limits)."""

    def ok(key: str, value: Any) -> bool:
        if key == "arch":
            return isinstance(value, str) and value.startswith("sm_")
        return isinstance(value, int) and not isinstance(value, bool) and value > 0

    return [k for k in ("arch", *CUDA_FACT_KEYS) if not ok(k, target.get(k))]


def _cuda_facts(target: Mapping[str, Any], where: str) -> TargetFacts:
    missing = missing_cuda_keys(target)
    if missing:
        raise TemplateError(
            f"{where}: the cuda target lacks {', '.join(missing)}; a template's GPU facts "
            "(SMEM, THREADS, WARP, REGS) come from the target alone. Write them, or name a "
            "TVM tag such as `target: nvidia/nvidia-h100` (tvmtune_ci/cudatags_table.py)"
        )
    limits = GpuLimits(**{CUDA_FACT_KEYS[k].lower(): int(target[k]) for k in CUDA_FACT_KEYS})
    return TargetFacts(str(target["arch"]), "cuda", CUDA_VECTOR_BITS, 0, limits)


def scope(workload: Mapping[str, Any], target: Mapping[str, Any] | None) -> dict[str, Any]:
    """The names a KNOBS extent may use: the workload's keys, and with a target its
    facts (LANES counted in the workload's `dtype`, float32 when it has none; SMEM,
    THREADS, WARP, REGS on a GPU)."""
    out = dict(workload)
    if target is not None:
        facts = target_facts(target)
        clash = sorted(set(FACT_NAMES) & set(workload))
        if clash:
            raise TemplateError(f"workload key(s) {', '.join(clash)} shadow the target facts of that name; rename them")
        out.update(facts.names(str(workload.get("dtype", "float32"))))
    return out
