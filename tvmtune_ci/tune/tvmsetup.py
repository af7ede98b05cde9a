"""Where TVM is loaded first: `load()` imports `tvm` and installs the stub below.

It is not the only TVM import: the `tune/` modules that use TVM also import `tvm`
submodules (and `tvm_ffi`) themselves, inside functions, most of them after calling
`load()` (a few, such as `devices.tracker_summary`, import `tvm.rpc` without it).
MetaSchedule is `ms()`, targets `make_target()`.

`import tvm.s_tir.tensor_intrin` registers every tensor intrinsic TVM ships, CUDA
included, and costs ~30 s; `TuneContext.__init__`, the stock builder and
`default_build` all run that import. MetaSchedule needs only the x86 ones on our
targets (an llvm target whose mcpu has VNNI makes the `from-target` rules ask for
`dot_16x4_vnni`). So before anything imports the package we put a stub package
object in `sys.modules` (its `__path__` is the real folder) and import the one file
`tensor_intrin/x86.py` through it (~0.4 s). The stub makes the later
`import tvm.s_tir.tensor_intrin` statements no-ops; explicit imports of submodules
(`from tvm.s_tir.tensor_intrin.cuda import ...`) still load the real file.

Import this module freely: it imports TVM only when `load()` (or a helper) is called.
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

_INTRIN_PKG = "tvm.s_tir.tensor_intrin"
_state: dict[str, Any] = {}


def _install_intrinsics_stub(tvm: Any) -> None:
    existing = sys.modules.get(_INTRIN_PKG)
    if existing is not None:
        # Already imported (the real package, or our stub): x86 is there or loadable.
        importlib.import_module(_INTRIN_PKG + ".x86")
        return
    import tvm.s_tir as s_tir

    folder = Path(s_tir.__file__).parent / "tensor_intrin"
    stub = types.ModuleType(_INTRIN_PKG, "tvmtune-ci stub: only the intrinsics we register are loaded")
    stub.__path__ = [str(folder)]  # a package: submodules import from the real folder
    stub.__package__ = _INTRIN_PKG
    stub.__file__ = str(folder / "__init__.py")
    stub.__dict__["_tvmtune_stub"] = True

    def __getattr__(name: str) -> Any:  # `tensor_intrin.cuda` loads the real submodule
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return importlib.import_module(f"{_INTRIN_PKG}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(name) from None

    stub.__dict__["__getattr__"] = __getattr__
    sys.modules[_INTRIN_PKG] = stub
    s_tir.tensor_intrin = stub
    importlib.import_module(_INTRIN_PKG + ".x86")


def load() -> Any:
    """Import TVM once, register only the x86 tensor intrinsics, return the `tvm` module."""
    tvm = _state.get("tvm")
    if tvm is None:
        import tvm  # type: ignore[no-redef]  # noqa: F811 - the first TVM import, before the stub

        _install_intrinsics_stub(tvm)
        _state["tvm"] = tvm
    return tvm


def ms() -> Any:
    """`tvm.s_tir.meta_schedule`, after `load()`."""
    load()
    from tvm.s_tir import meta_schedule

    return meta_schedule


def make_target(target: dict[str, Any]) -> Any:
    """A `tvm.target.Target` from our canonical target dict: one object per distinct
    dict in a process (a Target is immutable, and a re-tune asks for its target at every
    build, check and measurement)."""
    return _make_target(json.dumps(target, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _make_target(key: str) -> Any:
    tvm = load()
    return tvm.target.Target(json.loads(key))


def host_cpu() -> str:
    """The LLVM name of this machine's CPU (what `mcpu` should say to tune here)."""
    tvm = load()
    return str(tvm.target.codegen.llvm_get_system_cpu())


def intrinsics_stubbed() -> bool:
    """True when the tensor_intrin package is our stub (the 30 s import was skipped)."""
    mod = sys.modules.get(_INTRIN_PKG)
    return bool(mod is not None and mod.__dict__.get("_tvmtune_stub"))
