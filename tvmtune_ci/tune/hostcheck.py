"""Refuse a target this machine cannot measure, before any trial is spent.

The classic failure: tuning `-mcpu=skylake-avx512` on an AVX2 box. LLVM then
either fails every build or emits code that dies with SIGILL, and the log fills
with "failures" that say nothing. We compare the ISA features the target's
`mcpu`/`mattr` enable with the ones this CPU has.

The host's features come from LLVM's own host detection (what `-march=native` reads:
CPUID and the OS's XSAVE support), through TVM, so every ISA feature LLVM can emit is
one it can vouch for, with no table of ours to keep up to date. The check fails
closed: a target feature that is neither on the host, nor in its architecture's
baseline, nor one of LLVM's tuning preferences (which never make code fault), nor a
system instruction LLVM emits only for its intrinsic (no TVM kernel calls one) is
refused, named. `archspec` was the other candidate: it reads /proc/cpuinfo flags,
whose names differ from LLVM's, so it would need the very mapping table this replaces.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import HostError
from ..core.targets import target_json
from . import tvmsetup
from .nvrtc import missing

# The host the checks see, for tests: "znver3", "sapphirerapids", "aarch64:neoverse-n1"
# (an LLVM CPU name, optionally after its architecture). Its features are the ones LLVM
# gives that CPU. Nothing is measured differently: kernels still run on the real CPU.
HOST_ENV = "TVMTUNE_TEST_HOST_CPU"

_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
# LLVM's CPU name for each architecture's baseline: what every CPU of it runs.
_BASELINE_CPU = {"x86_64": "x86-64", "aarch64": "generic"}
# LLVM x86 features that are tuning preferences (instruction choice and costs), not
# instructions a CPU may lack: they never make code fault, and host detection does
# not report them. By name, so a new ISA feature is never mistaken for one.
_X86_TUNING = re.compile(
    r"(fast|faster|slow|false-deps|prefer|no-bypass-delay|tuning|use|lea|idiv[a-z]*-to|pad-short)-.*"
    r"|allow-light-256-bit|branch-hint|branchfusion|macrofusion|sbb-dep-breaking|ermsb|fsrm"
)
# x86 system instructions (power management, protection keys, cache control, random
# numbers, enclaves, ...): LLVM emits them only for their own intrinsics, which no TVM
# kernel calls, and VMs hide them (a Zen 4 guest here lacks mwaitx, pku, rdpru and
# wbnoinvd, which LLVM's znver4 enables). A name missing here is refused, never passed.
_X86_SYSTEM = frozenset(
    {
        "cldemote",
        "clflushopt",
        "clwb",
        "clzero",
        "enqcmd",
        "fsgsbase",
        "hreset",
        "invpcid",
        "kl",
        "lwp",
        "movdir64b",
        "movdiri",
        "mwaitx",
        "pconfig",
        "pku",
        "prefetchi",
        "ptwrite",
        "rdpid",
        "rdpru",
        "rdrnd",
        "rdseed",
        "rtm",
        "serialize",
        "sgx",
        "shstk",
        "tsxldtrk",
        "uintr",
        "usermsr",
        "waitpkg",
        "wbnoinvd",
        "widekl",
        "xsave",
        "xsavec",
        "xsaveopt",
        "xsaves",
    }
)


@dataclass(frozen=True)
class Host:
    """The CPU the checks compare targets with: its architecture, LLVM's name for it,
    the ISA features it has (LLVM's names) and, for a detected host, every feature
    detection reports on (None for a synthetic one)."""

    arch: str
    cpu: str
    features: frozenset[str]
    known: frozenset[str] | None = None
    synthetic: bool = False

    def describe(self) -> str:
        return f"{self.cpu} ({HOST_ENV})" if self.synthetic else "this machine"


def _llvm_features(target: Mapping[str, Any], arch: str | None = None) -> set[str]:
    """The LLVM features `target` enables (its mcpu plus mattr), for `arch` when it
    names no triple (a synthetic host of another architecture than the build machine)."""
    tvm = tvmsetup.load()
    t = dict(target)
    if arch is not None and not t.get("mtriple") and arch != _machine_arch():
        t["mtriple"] = f"{arch}-linux-gnu"
    return {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(tvmsetup.make_target(t))}


def synthetic_host(spec: str) -> Host:
    """A host of LLVM CPU `spec` ("znver3", or "aarch64:neoverse-n1"), with the features
    LLVM gives that CPU, as a runner of it would report them."""
    arch, _, cpu = spec.rpartition(":")
    arch = _ARCH_ALIASES.get(arch.lower(), arch.lower()) if arch else "x86_64"
    feats = _llvm_features({"kind": "llvm", "mcpu": cpu}, arch)
    return Host(arch=arch, cpu=cpu, features=frozenset(feats), synthetic=True)


def detect_host() -> Host:
    """This machine's CPU as LLVM's host detection sees it (through TVM)."""
    tvmsetup.load()
    import tvm_ffi

    name = str(tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUName")())
    reported = {
        str(k): bool(v) for k, v in dict(tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()).items()
    }
    return Host(
        arch=_machine_arch(),
        cpu=name,
        features=frozenset(k for k, v in reported.items() if v),
        known=frozenset(reported),
    )


@functools.cache
def _host_from(spec: str | None) -> Host:
    return synthetic_host(spec) if spec else detect_host()


def this_host() -> Host:
    """The host the checks see: this machine, or the synthetic one HOST_ENV names."""
    return _host_from(os.environ.get(HOST_ENV) or None)


def missing_of(features: Iterable[str], host: Host, baseline: Iterable[str] = ()) -> list[str]:
    """Of the LLVM `features` a target enables, those `host` cannot vouch for: not on
    it, not in its architecture's `baseline`, and (x86) neither a tuning preference nor
    a system instruction no kernel uses. On
    other architectures LLVM's names mix ISA, architecture versions and system
    registers, so only a feature the host's detection reports absent is refused there."""
    base = set(baseline)
    out = []
    for f in features:
        if f in host.features or f in base:
            continue
        if host.arch == "x86_64":
            if not _X86_TUNING.fullmatch(f) and f not in _X86_SYSTEM:
                out.append(f)
        elif host.known is not None and f in host.known:
            out.append(f)
    return sorted(out)


def missing_features(target: Mapping[str, Any], host: Host | None = None) -> list[str]:
    """LLVM features `target` enables that `host` (default: this_host()) lacks or
    cannot vouch for. Needs TVM's LLVM."""
    host = host or this_host()
    baseline = _llvm_features({"kind": "llvm", "mcpu": _BASELINE_CPU.get(host.arch, "generic")}, host.arch)
    return missing_of(_llvm_features(target, host.arch), host, baseline)


def _target_arch(target: Mapping[str, Any]) -> str | None:
    triple = target.get("mtriple")
    if not triple:
        return None
    arch = str(triple).split("-")[0]
    return _ARCH_ALIASES.get(arch, arch)


def host_target(cores: int | None = None, host: Host | None = None) -> dict[str, Any]:
    """The target that tunes for this machine's CPU: LLVM's name for it, minus the
    features that name implies and this CPU does not report.

    A VM often hides some of its CPU's features: an Emerald Rapids guest without AMX
    is still `emeraldrapids` to LLVM, whose code (and our host check) would assume
    AMX. Those features are turned off in `mattr`, so the target is one this machine
    runs. `cores`: `num-cores` (None: leave it out)."""
    host = host or this_host()
    target: dict[str, Any] = {"kind": "llvm", "mcpu": host.cpu}
    if host.arch != _machine_arch():
        target["mtriple"] = f"{host.arch}-linux-gnu"
    hidden = missing_features(target, host)
    if hidden:
        target["mattr"] = [f"-{f}" for f in hidden]
    if cores is not None:
        target["num-cores"] = int(cores)
    return target


def other_cpu(target: Mapping[str, Any], host: Host | None = None) -> str | None:
    """LLVM's name for this machine's CPU when `target`, measured here, builds for
    another (its `mcpu`); None when they agree or the target names no CPU.

    Not refused: a Zen 5 runs a znver4 build, and `check_host` passes it. But the log
    then holds this machine's timings under the other CPU's target, and its ranking is
    this machine's (a Zen 4's best 1024^3 matmul ran 1.7-1.9x slower on a Zen 5 than
    the Zen 5's own best; bench_warmstart run R)."""
    mcpu = target.get("mcpu")
    if target.get("kind") != "llvm" or not mcpu:
        return None
    host = host or this_host()
    if _target_arch(target) not in (None, host.arch):
        return None  # check_host refuses it
    return host.cpu if host.cpu != str(mcpu) else None


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
    out: dict[str, Any] = {
        "machine": platform.machine(),
        "cpu": fields.get("model name") or platform.processor(),
        "cores": os.cpu_count(),
    }
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
        check_toolchain(target, this_host().arch)  # builds happen here, remote or not
    if remote:
        return
    name = json_target(target)
    if kind in ("llvm", "c"):
        host = this_host()
        arch = _target_arch(target) or _machine_arch()
        if arch != host.arch:
            raise HostError(
                f"target {name} is for {arch}, {host.describe()} is {host.arch}; "
                + (
                    advice
                    or "measure it on a runner of that architecture (runs-on labels in tvmtune.yaml) or through an RPC tracker (runner: rpc)"
                )
            )
        if kind == "llvm":
            lacking = missing_features(target, host)
            if lacking:
                unknown = [f for f in lacking if host.known is not None and f not in host.known]
                why = (
                    (
                        f" ({', '.join(unknown)}: not a feature LLVM's host detection reports, so it cannot "
                        "be vouched for; refused rather than risk SIGILL)"
                    )
                    if unknown
                    else ""
                )
                raise HostError(
                    f"target {name} needs CPU features {host.describe()} lacks: {', '.join(lacking)}{why}; "
                    + (
                        advice
                        or "no trial was spent. Run this entry on a runner with that CPU (set its runs-on labels in tvmtune.yaml) "
                        "or fix the target's mcpu/mattr"
                    )
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
        raise HostError(
            f"target {name} needs {what} and this machine has none; no trial was spent. "
            + (
                advice
                or "run this entry on a runner that has one (runs-on labels, e.g. [self-hosted, gpu, h100]) or through an RPC tracker whose servers have it"
            )
        )
    if kind == "cuda":
        problem = gpu_arch_problem(target, str(dev.compute_version))
        if problem:
            raise HostError(
                f"target {name}: {problem}; no trial was spent. "
                + (advice or "run this entry on a runner with that GPU (runs-on labels) or fix the target's arch")
            )
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
    ok = have_major == want_major and (
        have_minor == want_minor if exact else int(have_minor or 0) >= int(want_minor or 0)
    )
    if ok:
        return None
    return (
        f"its kernels are for {target.get('arch')} (compute capability {want}) and this "
        f"machine's GPU is {compute_version}"
    )


def json_target(target: dict[str, Any]) -> str:
    return target_json(target)


def host_arch() -> str:
    """The architecture of the machine that builds (never a synthetic host's)."""
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


_machine_arch = host_arch


def cross_cc(target: Mapping[str, Any], build_arch: str | None = None) -> str | None:
    """The C compiler that links `target`'s kernels when they are for another
    architecture than this machine's (`<triple>-gcc`, e.g. aarch64-linux-gnu-gcc);
    None: the host's own compiler links them. `build_arch`: the building machine's
    (default: this one's; the host check passes a synthetic host's)."""
    if target.get("kind") not in ("llvm", "c"):
        return None
    arch = _target_arch(dict(target))
    if arch is None or arch == (build_arch or host_arch()):
        return None
    triple = str(target["mtriple"])
    parts = triple.split("-")
    # aarch64-linux-gnu stays; aarch64-unknown-linux-gnu -> aarch64-linux-gnu (Debian's name)
    prefix = "-".join([parts[0], *parts[-2:]]) if len(parts) >= 3 else f"{arch}-linux-gnu"
    return f"{prefix}-gcc"


# What TVM's `create_shared` looks for to link a kernel built for this machine.
HOST_CC = ("g++", "gcc", "clang++", "clang", "c++", "cc")


def check_toolchain(target: Mapping[str, Any], build_arch: str | None = None) -> None:
    """HostError unless the compiler that links `target`'s kernels is on PATH (and, for
    a CUDA target, NVRTC, which compiles its kernels here: the [cuda] extra)."""
    cc = cross_cc(target, build_arch)
    gpu = target.get("kind") == "cuda"
    if gpu:
        why = missing()
        if why is not None:
            raise HostError(
                f"target {json_target(dict(target))}: its CUDA kernels are compiled on this machine, and {why}"
            )
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
