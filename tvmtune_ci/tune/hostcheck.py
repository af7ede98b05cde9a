"""Refuse a target this machine cannot measure, before any trial is spent.

The classic failure: tuning `-mcpu=skylake-avx512` on an AVX2 box. LLVM then
either fails every build or emits code that dies with SIGILL, and the log fills
with "failures" that say nothing. We compare the ISA features the target's
`mcpu`/`mattr` enable with what this CPU reports.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import HostError

# LLVM feature name -> /proc/cpuinfo flag. Only ISA features that change the code
# LLVM may emit; tuning flags (e.g. "fast-gather") are not hardware features.
_X86_FEATURES = {
    "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2",
    "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2",
    "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi",
    "avx512vbmi2": "avx512_vbmi2", "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
    "avxvnni": "avx_vnni", "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
    "gfni": "gfni", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq", "sha": "sha_ni", "movbe": "movbe",
}

_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def host_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return None


def _target_arch(target: dict[str, Any]) -> str | None:
    triple = target.get("mtriple")
    if not triple:
        return None
    arch = str(triple).split("-")[0]
    return _ARCH_ALIASES.get(arch, arch)


def missing_x86_features(target: dict[str, Any], host_flags: set[str]) -> list[str]:
    """LLVM features the target enables that this CPU lacks (needs TVM's LLVM)."""
    from . import tvmsetup

    tvm = tvmsetup.load()
    features = set(tvm.target.codegen.llvm_get_cpu_features(tvmsetup.make_target(dict(target))))
    return sorted(f for f in features if f in _X86_FEATURES and _X86_FEATURES[f] not in host_flags)


def host_target(cores: int | None = None) -> dict[str, Any]:
    """The target that tunes for this machine's CPU: LLVM's name for it, minus the
    features that name implies and this CPU does not report.

    A VM often hides some of its CPU's features: an Emerald Rapids guest without AMX
    is still `emeraldrapids` to LLVM, whose code (and our host check) would assume
    AMX. Those features are turned off in `mattr`, so the target is one this machine
    runs. `cores`: `num-cores` (None: leave it out)."""
    from . import tvmsetup

    cpu = tvmsetup.host_cpu()
    target: dict[str, Any] = {"kind": "llvm", "mcpu": cpu}
    flags = host_cpu_flags()
    if host_arch() == "x86_64" and flags is not None:
        hidden = missing_x86_features(target, flags)
        if hidden:
            target["mattr"] = [f"-{f}" for f in hidden]
    if cores is not None:
        target["num-cores"] = int(cores)
    return target


def other_cpu(target: Mapping[str, Any]) -> str | None:
    """LLVM's name for this machine's CPU when `target`, measured here, builds for
    another (its `mcpu`); None when they agree or the target names no CPU.

    Not refused: a Zen 5 runs a znver4 build, and `check_host` passes it. But the log
    then holds this machine's timings under the other CPU's target, and its ranking is
    this machine's (a Zen 4's best 1024^3 matmul ran 1.7-1.9x slower on a Zen 5 than
    the Zen 5's own best; bench_warmstart run R)."""
    from . import tvmsetup

    mcpu = target.get("mcpu")
    if target.get("kind") != "llvm" or not mcpu:
        return None
    if _target_arch(dict(target)) not in (None, host_arch()):
        return None  # check_host refuses it
    cpu = tvmsetup.host_cpu()
    return cpu if cpu != str(mcpu) else None


def host_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """What the manifest and the run history record about the measuring machine. A VM's
    model name can hide its generation ("AMD EPYC" on Zen 3, 4 and 5 alike: on a 1024^3
    matmul a Zen 5's own best ran 1.7-1.9x faster than a Zen 4's), so the CPU's vendor, family
    and model go with it (`cpu_id`, where /proc/cpuinfo tells them)."""
    fields: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "vendor_id", "cpu family", "model") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break  # the first processor's block is enough
    except OSError:
        pass
    out: dict[str, Any] = {"machine": platform.machine(), "cpu": fields.get("model name") or platform.processor(),
                           "cores": os.cpu_count()}
    if all(fields.get(k) for k in ("vendor_id", "cpu family", "model")):
        out["cpu_id"] = f"{fields['vendor_id']} family {fields['cpu family']} model {fields['model']}"
    return out


def check_host(target: dict[str, Any], *, remote: bool = False, advice: str | None = None) -> None:
    """Raise HostError when this machine cannot build and measure `target`.

    With an RPC runner (`remote`), the devices measure, so only the build side
    matters and the tracker's pre-flight checks the devices. `advice` replaces
    the re-tune advice (runs-on labels, RPC) for callers that are not re-tuning.
    """
    kind = target.get("kind")
    if remote or kind in ("llvm", "c"):
        check_toolchain(target)  # builds happen here, remote or not
    if remote:
        return
    name = json_target(target)
    host_arch = _ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower())
    if kind in ("llvm", "c"):
        arch = _target_arch(target)
        if arch is not None and arch != host_arch:
            raise HostError(f"target {name} is for {arch}, this machine is {host_arch}; " + (advice or "measure it on a runner of that architecture (runs-on labels in tvmtune.yaml) or through an RPC tracker (runner: rpc)"))
        if host_arch == "x86_64" and kind == "llvm":
            flags = host_cpu_flags()
            if flags is not None:
                lacking = missing_x86_features(target, flags)
                if lacking:
                    raise HostError(
                        f"target {name} needs CPU features this machine lacks: {', '.join(lacking)}; "
                        + (advice or "no trial was spent. Run this entry on a runner with that CPU (set its runs-on labels in tvmtune.yaml) "
                           "or fix the target's mcpu/mattr")
                    )
        return
    import tvm

    try:
        dev = tvm.device(str(kind), 0)
        exists = bool(dev.exist)
    except Exception:  # an unknown device kind is as good as absent
        exists = False
    what = f"a {kind} device" + (f" ({target['arch']})" if kind == "cuda" and target.get("arch") else "")
    if not exists:
        raise HostError(f"target {name} needs {what} and this machine has none; no trial was spent. " + (advice or "run this entry on a runner that has one (runs-on labels, e.g. [self-hosted, gpu, h100]) or through an RPC tracker whose servers have it"))
    if kind == "cuda":
        problem = gpu_arch_problem(target, str(dev.compute_version))
        if problem:
            raise HostError(f"target {name}: {problem}; no trial was spent. " + (advice or "run this entry on a runner with that GPU (runs-on labels) or fix the target's arch"))
    # The device first: on a machine without it, that is what to fix.
    check_toolchain(target)


def arch_version(arch: str) -> str | None:
    """`sm_90a` -> "9.0", `sm_80` -> "8.0" (a GPU's compute capability); None if not sm_."""
    if not arch.startswith("sm_"):
        return None
    digits = arch[3:].rstrip("abcdefghijklmnopqrstuvwxyz")
    if len(digits) < 2 or not digits.isdigit():
        return None
    return f"{digits[:-1]}.{digits[-1]}"


def gpu_arch_problem(target: Mapping[str, Any], compute_version: str) -> str | None:
    """Why this GPU (compute capability `compute_version`, "9.0") cannot run `target`'s
    cubins (None: it can). A cubin runs only on its own major version, and on a minor
    one at least its own; an `a` arch (sm_90a) only on exactly that one."""
    want = arch_version(str(target.get("arch", "")))
    if want is None:
        return f"arch {target.get('arch')!r} is not an sm_XY architecture"
    have_major, _, have_minor = compute_version.partition(".")
    want_major, _, want_minor = want.partition(".")
    exact = str(target.get("arch", "")).endswith("a")
    ok = have_major == want_major and (have_minor == want_minor if exact
                                       else int(have_minor or 0) >= int(want_minor or 0))
    if ok:
        return None
    return (f"its kernels are for {target.get('arch')} (compute capability {want}) and this "
            f"machine's GPU is {compute_version}")


def json_target(target: dict[str, Any]) -> str:
    from ..core.targets import target_json

    return target_json(target)


def host_arch() -> str:
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


def cross_cc(target: Mapping[str, Any]) -> str | None:
    """The C compiler that links `target`'s kernels when they are for another
    architecture than this machine's (`<triple>-gcc`, e.g. aarch64-linux-gnu-gcc);
    None: the host's own compiler links them."""
    if target.get("kind") not in ("llvm", "c"):
        return None
    arch = _target_arch(dict(target))
    if arch is None or arch == host_arch():
        return None
    triple = str(target["mtriple"])
    parts = triple.split("-")
    # aarch64-linux-gnu stays; aarch64-unknown-linux-gnu -> aarch64-linux-gnu (Debian's name)
    prefix = "-".join([parts[0], *parts[-2:]]) if len(parts) >= 3 else f"{arch}-linux-gnu"
    return f"{prefix}-gcc"


# What TVM's `create_shared` looks for to link a kernel built for this machine.
HOST_CC = ("g++", "gcc", "clang++", "clang", "c++", "cc")


def check_toolchain(target: Mapping[str, Any]) -> None:
    """HostError unless the compiler that links `target`'s kernels is on PATH (and, for
    a CUDA target, NVRTC, which compiles its kernels here: the [cuda] extra)."""
    cc = cross_cc(target)
    gpu = target.get("kind") == "cuda"
    if gpu:
        from .nvrtc import missing

        why = missing()
        if why is not None:
            raise HostError(f"target {json_target(dict(target))}: its CUDA kernels are compiled "
                            f"on this machine, and {why}")
    if cc is None:
        if (target.get("kind") not in ("llvm", "c") and not gpu) or os.environ.get("CXX") or os.environ.get("CC"):
            return
        if not any(shutil.which(name) for name in HOST_CC):
            raise HostError(
                f"target {json_target(dict(target))}: its kernels are linked into shared "
                f"libraries by a C compiler, and none of {', '.join(HOST_CC)} is on PATH; "
                "install one (Debian/Ubuntu: `apt-get install g++`) or set CXX, and run again"
            )
        return
    if shutil.which(cc):
        return
    package = "gcc-" + cc.removesuffix("-gcc")
    raise HostError(
        f"target {json_target(dict(target))} is for {_target_arch(dict(target))}: its kernels are "
        f"cross-compiled and linked with {cc}, which is not on PATH; install it (Debian/Ubuntu: "
        f"`apt-get install {package}`, or `make cross-toolchain`) and run again"
    )
