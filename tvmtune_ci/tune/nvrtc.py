"""CUDA source to a cubin with NVRTC from PyPI wheels, and what ptxas reports.

TVM 0.27 builds a CUDA kernel into a module that holds its CUDA C++ source; the
source becomes a cubin only when the module is loaded, through the
`tvm_callback_cuda_compile` hook. tvmtune-ci compiles it itself, on the machine that
builds (a CPU-only PR runner too): `compile_source` runs NVRTC (`cuda-bindings`,
`nvidia-cuda-nvrtc`, with the headers of `nvidia-cuda-runtime` and `nvidia-cuda-cccl`:
`pip install 'tvmtune-ci[cuda]'`), finds those headers itself (`toolkit`, through
`cuda.pathfinder`; `CUDA_PATH` is only read, never needed) and reads ptxas's report
(`-v`) of each kernel: registers per thread, shared memory, stack, spills. A kernel
over its target's limits (`Resources.over`) is a build failure of kind `resources`.

`install_hook()` registers the same compile as TVM's load-time hook, with a cache
keyed by the source and arch, so a library the builder compiled loads without a
second compile on the machine that measures it.

Nothing here imports TVM or NVRTC at module level.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import HostError, TuningError
from . import tvmsetup

INSTALL_HINT = "pip install 'tvmtune-ci[cuda]'"

# What TVM's own NVRTC path prepends (tvm/support/nvcc.py): NVRTC has no host headers.
_PREAMBLE = """#include <cuda/std/cstdint>
#include <cuda/std/limits>
#ifndef INFINITY
#define INFINITY (::cuda::std::numeric_limits<float>::infinity())
#endif
"""


class CudaCompileError(TuningError):
    """NVRTC rejected the generated CUDA source; `log` is its message."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Toolkit:
    """Where NVRTC's headers are, and where they were found."""

    includes: tuple[str, ...]
    origin: str  # "CUDA_PATH" or "wheels"


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel, and its threads per block (TVM's
    `__launch_bounds__`)."""

    kernel: str
    registers: int  # per thread
    smem_bytes: int  # static shared memory per block
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    threads: int  # 0: unknown

    @property
    def registers_per_block(self) -> int:
        return self.registers * max(1, self.threads)

    def over(self, target: Mapping[str, Any]) -> list[str]:
        """The limits of `target` this kernel exceeds, in words (none: it fits)."""
        out = []
        smem = int(target.get("max_shared_memory_per_block") or 0)
        regs = int(target.get("registers_per_block") or 0)
        if smem and self.smem_bytes > smem:
            out.append(f"{self.smem_bytes} bytes of shared memory > {smem}")
        if regs and self.registers_per_block > regs:
            out.append(
                f"{self.registers} registers x {self.threads} threads = {self.registers_per_block} > {regs} per block"
            )
        if self.spill_stores or self.spill_loads:
            out.append(f"spills {self.spill_stores} bytes stored, {self.spill_loads} loaded")
        return out

    def to_json(self) -> dict[str, int | str]:
        return {
            "kernel": self.kernel,
            "registers": self.registers,
            "threads": self.threads,
            "registers_per_block": self.registers_per_block,
            "smem_bytes": self.smem_bytes,
            "stack_bytes": self.stack_bytes,
            "spill_stores": self.spill_stores,
            "spill_loads": self.spill_loads,
        }


@dataclass(frozen=True)
class Cubin:
    """A compiled module: the cubin, each kernel's resources, NVRTC's log."""

    data: bytes
    arch: str
    kernels: tuple[Resources, ...]
    log: str
    seconds: float

    def over(self, target: Mapping[str, Any]) -> list[str]:
        return [f"{r.kernel}: {why}" for r in self.kernels for why in r.over(target)]

    def summary(self) -> dict[str, int]:
        """The largest per-block figures over the module's kernels (what a README shows)."""
        return {
            "smem_bytes": max((r.smem_bytes for r in self.kernels), default=0),
            "registers_per_block": max((r.registers_per_block for r in self.kernels), default=0),
            "registers": max((r.registers for r in self.kernels), default=0),
            "threads": max((r.threads for r in self.kernels), default=0),
            "spill_bytes": sum(r.spill_stores + r.spill_loads for r in self.kernels),
        }


def missing() -> str | None:
    """Why NVRTC cannot compile here (None: it can)."""
    try:
        toolkit()
    except HostError as e:
        return str(e)
    return None


@functools.cache
def toolkit() -> Toolkit:
    """NVRTC's include folders: `$CUDA_PATH/include` when it has the headers (a full
    toolkit), else the pip wheels' (found by `cuda.pathfinder`). HostError naming the
    install otherwise."""
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError:
        raise HostError(
            f"compiling CUDA needs NVRTC (cuda-bindings, nvidia-cuda-nvrtc), which is not installed; {INSTALL_HINT}"
        ) from None
    cuda_path = os.environ.get("CUDA_PATH")
    if cuda_path and (Path(cuda_path) / "include" / "cuda_runtime.h").is_file():
        base = Path(cuda_path) / "include"
        cccl = [
            p for p in (base / "cccl", *Path(cuda_path).glob("targets/*/include/cccl")) if (p / "cuda" / "std").is_dir()
        ]
        return Toolkit((str(base), *(str(p) for p in cccl[:1])), "CUDA_PATH")
    try:
        from cuda import pathfinder
    except ImportError:
        raise HostError(f"finding the CUDA headers needs cuda-pathfinder; {INSTALL_HINT}") from None
    found = {}
    for lib in ("cudart", "cccl"):
        try:
            found[lib] = pathfinder.find_nvidia_header_directory(lib)
        except Exception:  # noqa: BLE001 - an unsupported platform is as good as absent
            found[lib] = None
    absent = [lib for lib, path in found.items() if not path]
    if absent:
        wheels = {"cudart": "nvidia-cuda-runtime", "cccl": "nvidia-cuda-cccl"}
        raise HostError(
            f"NVRTC needs the CUDA headers of {', '.join(wheels[a] for a in absent)}, not installed; {INSTALL_HINT}"
        )
    return Toolkit((str(found["cudart"]), str(found["cccl"])), "wheels")


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BOUNDS = re.compile(r"__launch_bounds__\((\d+)\)\s+(\w+)\s*\(")


def parse_report(log: str, source: str = "") -> tuple[Resources, ...]:
    """Each kernel's resources from ptxas's `-v` report (and `source`'s launch bounds)."""
    threads = {name: int(n) for n, name in _BOUNDS.findall(source)}
    out: list[Resources] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is not None:
            out.append(
                Resources(
                    current["name"],
                    current.get("regs", 0),
                    current.get("smem", 0),
                    current.get("stack", 0),
                    current.get("st", 0),
                    current.get("ld", 0),
                    threads.get(current["name"], 0),
                )
            )

    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            close()
            current = {"name": m.group(1)}
            continue
        if current is None:
            continue
        m = _STACK.search(line)
        if m:
            current["stack"], current["st"], current["ld"] = map(int, m.groups())
        m = _USED.search(line)
        if m:
            current["regs"] = int(m.group(1))
            s = _SMEM.search(line)
            current["smem"] = int(s.group(1)) if s else 0
    close()
    return tuple(out)


def _short(log: str) -> str:
    """The errors of an NVRTC log (its warnings left out), on one line."""
    lines = [x.strip() for x in log.splitlines() if "error" in x.lower()]
    return " | ".join(lines[:4]) or (log.strip().splitlines() or ["no log"])[-1]


def compile_source(code: str, arch: str) -> Cubin:
    """Compile TVM's CUDA source for `arch` (`sm_90a`) with NVRTC; CudaCompileError with
    NVRTC's log when it fails (a shared-memory overflow is ptxas's error here)."""
    from cuda.bindings import nvrtc

    kit = toolkit()
    src = _PREAMBLE + "\n".join(x for x in code.splitlines() if x.strip() != "#include <cuda.h>")
    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"tvmtune_kernels.cu", 0, None, None)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaCompileError(f"NVRTC could not take the source: {err}", "")
    opts = [
        f"--gpu-architecture={arch}".encode(),
        b"-default-device",
        b"--use_fast_math",
        b"--ptxas-options=-v",
        b"--ptxas-options=--warn-on-local-memory-usage",
        *(f"-I{p}".encode() for p in kit.includes),
    ]
    t0 = time.perf_counter()
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        seconds = time.perf_counter() - t0
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = bytearray(size)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.decode("utf-8", "replace").rstrip("\x00")
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CudaCompileError(f"NVRTC ({arch}): {_short(log)}", log)
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = bytearray(size)
        nvrtc.nvrtcGetCUBIN(prog, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return Cubin(bytes(cubin), arch, parse_report(log, code), log, seconds)


def cuda_source(module: Any) -> str:
    """The CUDA C++ of a module TVM built for a CUDA target (its device import)."""
    todo, seen = [module], set()
    while todo:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if getattr(m, "kind", "") == "cuda":
            return str(m.inspect_source("cuda"))
        todo.extend(getattr(m, "imports", ()))
    raise TuningError("the built module has no CUDA device code (was the target a cuda one?)")


# --------------------------------------------------------------------------- the load hook


def cache_dir() -> Path:
    """Cubins by source and arch, shared by the builder and the measuring worker."""
    return Path(tempfile.gettempdir()) / f"tvmtune-cubins-{os.getuid()}"


def _key(code: str, arch: str) -> str:
    return hashlib.sha256(f"{arch}\n{code}".encode()).hexdigest()


def compile_cached(code: str, arch: str) -> Cubin:
    """`compile_source`, its cubin also written where the load hook finds it."""
    cubin = compile_source(code, arch)
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_key(code, arch)}.cubin"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(cubin.data)
    os.replace(tmp, path)
    return cubin


def load_hook(code: str, target: Any = None) -> bytes:
    """TVM's `tvm_callback_cuda_compile`: the cubin of `code` for the target's arch,
    from the builder's cache when it compiled it, else compiled now."""
    tvm = tvmsetup.load()
    if target is None:
        target = tvm.target.Target.current(allow_none=True)
    arch = str(target.attrs["arch"]) if target is not None and "arch" in target.attrs else ""
    if not arch:
        raise TuningError("no CUDA arch to compile for: the target has no 'arch'")
    path = cache_dir() / f"{_key(code, arch)}.cubin"
    if path.is_file():
        return path.read_bytes()
    return compile_cached(code, arch).data


def install_hook() -> None:
    """Make TVM compile CUDA at load time with `load_hook` (replacing TVM's own, which
    needs CUDA_PATH set by hand)."""
    tvmsetup.load()
    import tvm_ffi

    try:
        import tvm.support.nvcc  # noqa: F401 - registers TVM's hook first, which ours replaces
    except ImportError:
        pass
    tvm_ffi.register_global_func("tvm_callback_cuda_compile", load_hook, override=True)
