"""Numerics: does a configuration compute what `reference` computes?

`check_correct` builds the configuration, runs it on random inputs where the kernel
runs (this machine, or the RPC device of the target: a cross-compiled kernel is never
run on the host) and compares every output with the template's numpy `reference`
within a tolerance per dtype (`tolerance`); a mismatch names the worst element.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ..core import epilogue
from ..core.configschema import RpcRunner
from ..core.errors import DeviceError, TemplateError, TuningError
from ..core.template import call_with_workload, template_name
from . import tvmsetup
from .builder import export_kernel, schedule_config
from .hostcheck import check_host
from .nvrtc import install_hook
from .rpclimits import RPC_GRACE_S, last_line, rpc_where
from .runners.local import WORKER_START_S, wait_or_kill
from .runners.rpc import open_session
from .sampling import device_type
from .workload import Workload, resolve

# (rtol, atol) per dtype; atol is scaled by max(1, max |reference|) because a
# reduction's rounding error grows with the magnitude of what it sums.
_TOLERANCE = {"float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2), "float32": (1e-4, 1e-4), "float64": (1e-9, 1e-9)}


def tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) for comparing an output of `dtype` with numpy's reference."""
    if dtype in _TOLERANCE:
        return _TOLERANCE[dtype]
    if dtype.startswith("float"):
        return 1e-3, 1e-3
    return 0.0, 0.0  # integers and bool: exact


def _reference_arity(reference: Any, workload: Mapping[str, Any]) -> int:
    import inspect

    n = 0
    for p in inspect.signature(reference).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty and p.name not in workload:
            n += 1
        elif p.kind is p.VAR_POSITIONAL:
            return -1
    return n


def _param_names(func: Any) -> list[str]:
    """The PrimFunc's parameters by their buffers' names (A, B, C: as compute() named
    its placeholders), in order."""
    # TVM 0.27's params are the buffers themselves; older ones map them in buffer_map.
    buffers = getattr(func, "buffer_map", None)
    out = []
    for p in func.params:
        buf = buffers.get(p) if buffers is not None else p
        out.append(str(getattr(buf, "name", None) or p))
    return out


def _reference_inputs(reference: Any, workload: Mapping[str, Any]) -> list[str]:
    import inspect

    return [
        p.name
        for p in inspect.signature(reference).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in workload
    ]


def _swap_that_matches(
    template: ModuleType,
    workload: Mapping[str, Any],
    arrays: list[np.ndarray],
    got: list[np.ndarray],
    names: list[str],
    n_in: int,
    infos: Any,
) -> str | None:
    """A hint when swapping two same-shaped inputs makes reference() agree with the
    kernel: reference() most likely lists its parameters in another order."""
    for i in range(n_in):
        for j in range(i + 1, n_in):
            a, b = arrays[i], arrays[j]
            if a.shape != b.shape or a.dtype != b.dtype:
                continue
            swapped = list(arrays)
            swapped[i], swapped[j] = b, a
            try:
                want = _reference(template, workload, swapped)
            except Exception:  # noqa: BLE001 - a reference that fails this way says nothing
                continue
            want = want if isinstance(want, (tuple, list)) else [want]
            if len(want) != len(got):
                continue
            if all(
                mismatch_report("", g, np.asarray(w), *_tol(str(infos[n_in + k].dtype), np.asarray(w))) is None
                for k, (g, w) in enumerate(zip(got, want, strict=True))
            ):
                return (
                    f"swapping {names[i]} and {names[j]} makes them match: does reference() "
                    "take its inputs in another order than compute()'s parameters?"
                )
    return None


def _reference(template: ModuleType, workload: Mapping[str, Any], arrays: list[np.ndarray]) -> Any:
    """reference() on the kernel's inputs; for a fused workload, on the template's
    inputs, then its epilogue chain on the output with the operands after them."""
    kinds = epilogue.chain(workload)
    if not kinds:
        return call_with_workload(template.reference, workload, *arrays)
    n_ops = sum(k in epilogue.OPERAND_KINDS for k in kinds)
    own, operands = arrays[: len(arrays) - n_ops], arrays[len(arrays) - n_ops :]
    out = call_with_workload(template.reference, workload, *own)
    return _chain_reference(np.asarray(out), kinds, operands)


def _chain_reference(out: np.ndarray, kinds: Sequence[str], operands: Sequence[np.ndarray]) -> np.ndarray:
    """`out` with the chain applied in float64, as numpy reads it (the numerics check's
    reference for a fused workload); `operands` in chain order."""
    erf = np.vectorize(math.erf, otypes=[np.float64])
    y = out.astype(np.float64)
    it = iter(operands)
    for kind in kinds:
        if kind in ("bias", "residual"):
            y = y + np.asarray(next(it), dtype=np.float64)
        elif kind == "scale":
            y = y * float(np.asarray(next(it)))
        elif kind == "relu":
            y = np.maximum(y, 0.0)
        elif kind == "gelu":
            y = 0.5 * y * (1.0 + erf(y / math.sqrt(2.0)))
        else:
            raise ValueError(f"unknown epilogue {kind!r} (known: {', '.join(epilogue.KINDS)})")
    return y.astype(out.dtype)


def _tol(dtype: str, exp: np.ndarray) -> tuple[float, float]:
    rtol, atol = tolerance(dtype)
    scale = max(1.0, float(np.nanmax(np.abs(exp.astype("float64"))))) if exp.size else 1.0
    return rtol, atol * scale


def _random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype("bool")
    if dtype.startswith("uint"):
        return rng.integers(0, 8, size=shape).astype(dtype)
    if dtype.startswith("int"):
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def mismatch_report(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when `got` matches `want` within (rtol, atol x max(1, max |want|));
    else where and by how much the worst element differs."""
    if got.shape != want.shape:
        return f"output {name} has shape {got.shape} but reference() returned {want.shape}"
    g = got.astype("float64")
    w = want.astype("float64")
    err = np.abs(g - w)
    bad = ~(err <= atol + rtol * np.abs(w))  # NaN counts as a mismatch
    if not bad.any():
        return None
    rel = err / np.maximum(np.abs(w), np.finfo("float64").tiny)
    idx = np.argwhere(bad)
    abs_i = np.unravel_index(np.nanargmax(np.where(np.isnan(err), np.inf, err)), err.shape)
    rel_i = np.unravel_index(np.nanargmax(np.where(np.isnan(rel), np.inf, rel)), rel.shape)
    few = ", ".join(f"{list(map(int, i))}: got {g[tuple(i)]:.6g}, expected {w[tuple(i)]:.6g}" for i in idx[:5])
    return (
        f"output {name}: {len(idx)} of {bad.size} elements differ (rtol={rtol:g}, atol={atol:g}); "
        f"max abs error {err[abs_i]:.6g} at {list(map(int, abs_i))}, "
        f"max rel error {rel[rel_i]:.6g} at {list(map(int, rel_i))}; first mismatches: {few}"
    )


# The last (inputs, reference outputs) computed: a history replay checks ten or more
# configurations of one workload on the same seeded inputs, and reference() on them
# took 4-55 ms of each check (plus 1-30 ms to draw the inputs) on this repo's workloads.
_LAST: list[tuple[Any, list[np.ndarray], list[Any]]] = []


def _inputs_and_reference(
    template: ModuleType, workload: Mapping[str, Any], seed: int, specs: tuple[tuple[tuple[int, ...], str], ...]
) -> tuple[list[np.ndarray], list[Any]]:
    """The seeded random inputs of `specs` and reference()'s outputs on them, reused
    while the template (this module object), workload, seed and inputs stay the same."""
    import json

    key = (id(template), template, json.dumps(dict(workload), sort_keys=True, default=str), seed, specs)
    if _LAST and _LAST[0][0] == key:
        return _LAST[0][1], _LAST[0][2]
    rng = np.random.default_rng(seed)
    arrays = [_random_input(rng, shape, dtype) for shape, dtype in specs]
    # On copies: a reference() that writes into its inputs must not change what the
    # kernel is given.
    want = _reference(template, workload, [a.copy() for a in arrays])
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    _LAST[:] = [(key, arrays, want)]
    return arrays, want


def check_correct(
    template: ModuleType,
    wl: Workload,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    rpc: RpcRunner | None = None,
    library: str | None = None,
) -> None:
    """Build the template at `knobs` (None: default configuration), run it on random
    inputs and compare every output with `reference`. Raises TuningError on mismatch.

    `library`: the shared object the search's builder already made of these knobs (on
    this machine, without `rpc`): it is loaded and checked instead of compiling again,
    so the check is of the very kernel that is measured. A history replay checks ten
    or more old configurations; compiling each a second time (tvm.compile, then its
    JIT) made check + build 0.24-0.39 s a configuration, against 0.15-0.25 s this way
    (benchmarks/bench_replay.py, this repository's 4 templates, Zen 3).

    It runs where the kernel is measured: with `rpc`, on a device of that tracker key
    (the library uploaded as the runner uploads it, cross-linked for its architecture);
    without, on this machine, which must be able to run the target (HostError for a
    cross-compiled target: it never runs on the host).
    """
    tvm = tvmsetup.load()
    case = _prepare(template, wl, target, knobs, seed)
    if epilogue.prepacked(case.workload):
        # The search's library takes the weight packed (its pack was split out); the
        # check compiles the whole function, pack included, and feeds it plain inputs.
        library = None
    if rpc is None:
        check_host(
            dict(target),
            advice="its numerics can only be checked on such a device: "
            "configure an RPC runner for this target (runner: rpc in tvmtune.yaml)",
        )
    ex = _executable(tvm, case, target, knobs, library, rpc)
    fills = _output_fills(case)
    if rpc is None:
        got_all = _run_here(tvm, ex, target, case.arrays, fills)
        on = ""
    else:
        got_all, server = _run_on_device(ex, target, rpc, [*case.arrays, *fills], case.n_in, case.where)
        on = f" on {server}"
    _compare(case, got_all, knobs, on)


@dataclass(frozen=True)
class _Case:
    """One numerics check's setup (`_prepare`): the template and its workload, the
    scheduled module and its parameters, the seeded inputs and reference()'s outputs."""

    template: ModuleType
    workload: dict[str, Any]
    where: str
    sch: Any
    infos: Any  # the PrimFunc's ArgInfos: the n_in inputs, then the outputs
    n_in: int
    arrays: list[np.ndarray]
    want: list[Any]


def _prepare(
    template: ModuleType, wl: Workload, target: Mapping[str, Any], knobs: Mapping[str, Any] | None, seed: int
) -> _Case:
    """The configuration scheduled, reference()'s inputs counted against the PrimFunc's
    parameters (TemplateError when they cannot be), the inputs drawn and reference()
    run on them."""
    ms = tvmsetup.ms()
    wl = resolve(template, wl, target)  # a name too, from callers outside the package
    workload = dict(wl.params)
    where = f"{template_name(template)} workload {wl.name!r}"
    sch = schedule_config(template, wl, knobs, target)
    infos = ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])
    n_in = _reference_arity(template.reference, workload)
    if n_in < 0:
        n_in = len(infos) - 1
    elif epilogue.chain(workload):
        n_in += sum(k in epilogue.OPERAND_KINDS for k in epilogue.chain(workload))
    if not 0 < n_in < len(infos):
        raise TemplateError(
            f"{where}: reference() takes {n_in} input(s) but compute() has {len(infos)} "
            "parameters; reference(*inputs) must take the PrimFunc's inputs, the remaining "
            "parameters are its outputs"
        )
    specs = tuple((tuple(int(x) for x in a.shape), str(a.dtype)) for a in infos)
    arrays, want = _inputs_and_reference(template, workload, seed, specs[:n_in])
    return _Case(template, workload, where, sch, infos, n_in, arrays, want)


def _executable(
    tvm: Any,
    case: _Case,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None,
    library: str | None,
    rpc: RpcRunner | None,
) -> Any:
    """The kernel to run: the search builder's `library` loaded (on this machine), else
    the scheduled module compiled."""
    if library is not None and rpc is None:
        if device_type(tvmsetup.make_target(dict(target))) == "cuda":
            install_hook()  # before the load: the library holds CUDA source, the hook its cubin
        try:
            return tvm.runtime.load_module(library)
        except Exception as e:
            raise TuningError(
                f"{case.where}: the library built of configuration {dict(knobs or {})} does not load: {e}"
            ) from None
    try:
        return tvm.compile(case.sch.mod, target=tvmsetup.make_target(dict(target)))
    except Exception as e:
        raise TuningError(
            f"{case.where}: the {'default' if not knobs else 'given'} configuration does not build: {e}"
        ) from None


def _output_fills(case: _Case) -> list[np.ndarray]:
    """The output parameters' first contents: NaN for floats (an element the kernel
    never writes does not match), else zeros."""
    fills = []
    for a in case.infos[case.n_in :]:
        dtype = str(a.dtype)
        shape = tuple(int(x) for x in a.shape)
        fills.append(np.full(shape, np.nan, dtype) if dtype.startswith("float") else np.zeros(shape, dtype))
    return fills


def _run_here(
    tvm: Any, ex: Any, target: Mapping[str, Any], arrays: list[np.ndarray], fills: list[np.ndarray]
) -> list[np.ndarray]:
    """Run the kernel once on this machine: its outputs."""
    # This machine's device of the target: its CPU, or its GPU (check_host made sure
    # it has the target's); a CUDA kernel's cubin comes through nvrtc's load hook.
    kind = device_type(tvmsetup.make_target(dict(target)))
    if kind == "cuda":
        install_hook()
    dev = tvm.device(kind, 0)
    outs_t = [tvm.runtime.tensor(f, dev) for f in fills]
    ex["main"](*[tvm.runtime.tensor(x, dev) for x in arrays], *outs_t)
    dev.sync()
    return [t.numpy() for t in outs_t]


def _compare(case: _Case, got_all: list[np.ndarray], knobs: Mapping[str, Any] | None, on: str) -> None:
    """Every output against reference()'s within its dtype's tolerance: TemplateError
    when their counts differ, TuningError naming each mismatch and a hint."""
    template, workload, where, sch, infos, n_in = (
        case.template,
        case.workload,
        case.where,
        case.sch,
        case.infos,
        case.n_in,
    )
    want = case.want
    if len(want) != len(got_all):
        raise TemplateError(
            f"{where}: reference() returned {len(want)} array(s) for {len(got_all)} output parameter(s)"
        )
    problems = []
    for i, (got, exp) in enumerate(zip(got_all, want, strict=True)):
        exp = np.asarray(exp)
        dtype = str(infos[n_in + i].dtype)
        rtol, atol = _tol(dtype, exp)
        name = _param_names(sch.mod["main"])[n_in + i]
        msg = mismatch_report(f"{name} ({dtype}{list(exp.shape)})", got, exp, rtol, atol)
        if msg:
            problems.append(msg)
    if problems:
        config = "the default configuration" if not knobs else f"configuration {dict(knobs)}"
        names = _param_names(sch.mod["main"])
        ref_names = _reference_inputs(template.reference, workload)
        order = (
            f"; reference({', '.join(ref_names)}) was given compute()'s inputs in the "
            f"PrimFunc's parameter order: {', '.join(names[:n_in])}"
        )
        swap = _swap_that_matches(template, workload, case.arrays, got_all, names, n_in, infos)
        raise TuningError(
            f"{where}: {config} does not match reference(){on}: "
            + "; ".join(problems)
            + order
            + (f"; {swap}" if swap else "")
            + "; fix compute(), reference() or schedule() so they agree before tuning"
        )


def _rpc_check_run(
    tracker: tuple[str, int, str],
    timeout_s: float,
    so_path: str,
    device: str,
    arrays: list[np.ndarray],
    n_in: int,
    note_path: str,
) -> dict[str, Any]:
    """Runs in a worker process: one session on a device of the key, the library
    uploaded and run once on `arrays`; {"device", "stage", "error", "outputs"}. The
    server's address goes to `note_path` at once (a killed check still names it)."""
    import os as _os

    import tvm

    out: dict[str, Any] = {"device": None, "stage": "request", "error": None, "outputs": None}
    try:
        session = open_session(tracker, 1, timeout_s, note_path, out)
        if session is None:
            return out
        out["stage"] = "upload"
        name = _os.path.basename(so_path)
        session.upload(so_path, name)
        out["stage"] = "load"
        rmod = session.load_module(name)
        dev = session.device(device, 0)
        out["stage"] = "run"
        tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
        rmod[rmod.entry_name or "main"](*tensors)
        dev.sync()
        out["outputs"] = [t.numpy() for t in tensors[n_in:]]
        out["stage"] = "done"
        try:
            session.remove(name)
        except Exception:  # noqa: BLE001 - the server removes its session folder anyway
            pass
    except Exception as e:  # noqa: BLE001 - reported, never raised across the process
        out["error"] = last_line(e)
    return out


def _run_on_device(
    ex: Any, target: Mapping[str, Any], rpc: RpcRunner, arrays: list[np.ndarray], n_in: int, where: str
) -> tuple[list[np.ndarray], str]:
    """Run a built kernel once on a device of `rpc`'s key: (outputs, "server host:port").

    In a worker process with a parent-side limit, as every RPC measurement: a stopped
    or unreachable device costs `2 x session_timeout_s`, never the run."""
    import shutil
    import tempfile

    from tvm.support.popen_pool import PopenPoolExecutor

    tmp = tempfile.mkdtemp(prefix="tvmtune-check-")
    try:
        so = os.path.join(tmp, "tvmtune_check.so")
        export_kernel(ex, so, target)
        device = device_type(tvmsetup.make_target(dict(target)))
        limit = 2 * rpc.session_timeout_s + RPC_GRACE_S
        pool = PopenPoolExecutor(max_workers=1, timeout=limit, stderr=subprocess.DEVNULL)
        try:
            note = os.path.join(tmp, "server")
            fut = pool.submit(
                _rpc_check_run,
                (rpc.tracker_host, rpc.tracker_port, rpc.key),
                float(rpc.session_timeout_s),
                so,
                device,
                arrays,
                n_in,
                note,
            )
            try:
                out = wait_or_kill(pool, fut, limit + WORKER_START_S)
            except TimeoutError:
                out = {
                    "device": None,
                    "stage": "session",
                    "outputs": None,
                    "error": f"timeout: no answer within {limit:g}s (server stopped, frozen or unreachable)",
                }
            except Exception as e:  # noqa: BLE001 - the worker died
                out = {"device": None, "stage": "worker", "error": last_line(e), "outputs": None}
            if out["device"] is None and os.path.exists(note):
                with open(note, encoding="utf-8") as f:
                    out["device"] = f.read() or None
        finally:
            pool.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if out["error"] is not None:
        server = f"server {out['device']}" if out["device"] else "no server"
        raise DeviceError(
            f"{where}: the numerics check runs on the device ({rpc_where(rpc)}) and failed: "
            f"{server}, {out['stage']}: {out['error']}; check the device with "
            "`tvmtune-ci devices`"
        )
    return list(out["outputs"]), f"server {out['device']}"
