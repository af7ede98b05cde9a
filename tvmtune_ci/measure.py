"""Measuring: numerics against `reference`, the runner, adaptive sampling, the finals.

Every latency is `stats.estimate` of a set of samples: the lower quartile (p25) with its 95%
order-statistic interval. A measurement samples adaptively (`SamplePolicy`): one
sample is as many runs as fill `sample_ms` (calibrated once, the calibration run
doubling as the warm-up), and samples are taken in chunks until the interval is
within the policy's precision, its time cap is spent, or (racing) the first
`probe` samples are all slower than `race_above_s`. The loop runs where the kernel
runs (the local worker, or inside the RPC session), so a measurement costs one
round trip however many samples it takes.

The runner is a MetaSchedule `Runner` behind `make_runner(measure, rpc)`: locally a
`WorkerRunner`, one persistent worker process (TVM's `PopenPoolExecutor`, as the
stock `LocalRunner`) that loads each built library, fills the arguments with random
data and samples it. A kernel that crashes or outlives `timeout_s` kills only the
worker, which restarts on the next measurement. Its `run_secs` are the samples;
`info_of(path)` says how the measurement ended (raced, converged, runs per sample).

With `runner.rpc`, an `RpcDeviceRunner`: MetaSchedule's `RPCRunner` recipe (one
`PopenPoolExecutor` worker per device, `RPCConfig`, its `default_upload_module`,
`default_alloc_argument`, `default_cleanup`) with three things the stock runner
lacks: a client-side bound on every measurement (the stock pool has none, so a hung
device hangs the run), the address of the server that measured (`device_of`), and
one retry of a measurement whose device was lost or hung (on another server: the
tracker never hands out a dead or stuck one again). See `RpcDeviceRunner`.

`finals()` re-measures a few configurations in interleaved rounds (A B C A B C ...)
so that a slow period of the machine hits all of them alike; winners, the previous
best and the default are decided on that data only.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import numpy as np

from . import stats
from .builder import build_config, make_builder, remove_artifact, schedule_config, workload_params
from .config import MeasureOptions, RpcRunner
from .errors import DeviceError, TemplateError, TuningError
from .manifest import Measured
from .template import call_with_workload

DEFAULT_MEASURE = MeasureOptions()

# --------------------------------------------------------------------------- numerics

# (rtol, atol) per dtype; atol is scaled by max(1, max |reference|) because a
# reduction's rounding error grows with the magnitude of what it sums.
_TOLERANCE = {
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float32": (1e-4, 1e-4),
    "float64": (1e-9, 1e-9),
}


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
        if (
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.default is p.empty
            and p.name not in workload
        ):
            n += 1
        elif p.kind is p.VAR_POSITIONAL:
            return -1
    return n


def _random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype("bool")
    if dtype.startswith("uint"):
        return rng.integers(0, 8, size=shape).astype(dtype)
    if dtype.startswith("int"):
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def _mismatch_report(
    name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float
) -> str | None:
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
    few = ", ".join(
        f"{list(map(int, i))}: got {g[tuple(i)]:.6g}, expected {w[tuple(i)]:.6g}" for i in idx[:5]
    )
    return (
        f"output {name}: {len(idx)} of {bad.size} elements differ (rtol={rtol:g}, atol={atol:g}); "
        f"max abs error {err[abs_i]:.6g} at {list(map(int, abs_i))}, "
        f"max rel error {rel[rel_i]:.6g} at {list(map(int, rel_i))}; first mismatches: {few}"
    )


def check_correct(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    rpc: RpcRunner | None = None,
) -> None:
    """Build the template at `knobs` (None: default configuration), run it on random
    inputs and compare every output with `reference`. Raises TuningError on mismatch.

    It runs where the kernel is measured: with `rpc`, on a device of that tracker key
    (the library uploaded as the runner uploads it, cross-linked for its architecture);
    without, on this machine, which must be able to run the target (HostError for a
    cross-compiled target: it never runs on the host).
    """
    from . import tvmsetup

    tvm = tvmsetup.load()
    ms = tvmsetup.ms()
    workload = workload_params(template, workload_name)
    where = f"{template.__name__} workload {workload_name!r}"
    sch = schedule_config(template, workload_name, knobs, target)
    infos = ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])
    n_in = _reference_arity(template.reference, workload)
    if n_in < 0:
        n_in = len(infos) - 1
    if not 0 < n_in < len(infos):
        raise TemplateError(
            f"{where}: reference() takes {n_in} input(s) but compute() has {len(infos)} "
            "parameters; reference(*inputs) must take the PrimFunc's inputs, the remaining "
            "parameters are its outputs"
        )
    rng = np.random.default_rng(seed)
    arrays = [
        _random_input(rng, tuple(int(x) for x in a.shape), str(a.dtype)) for a in infos[:n_in]
    ]
    if rpc is None:
        from .hostcheck import check_host

        check_host(dict(target), advice="its numerics can only be checked on such a device: "
                   "configure an RPC runner for this target (runner: rpc in tvmtune.yaml)")
    try:
        ex = tvm.compile(sch.mod, target=tvmsetup.make_target(dict(target)))
    except Exception as e:
        raise TuningError(
            f"{where}: the {'default' if not knobs else 'given'} configuration does not build: {e}"
        ) from None
    fills = []
    for a in infos[n_in:]:
        dtype = str(a.dtype)
        shape = tuple(int(x) for x in a.shape)
        fills.append(
            np.full(shape, np.nan, dtype) if dtype.startswith("float") else np.zeros(shape, dtype)
        )
    if rpc is None:
        dev = tvm.cpu()
        outs_t = [tvm.runtime.tensor(f, dev) for f in fills]
        ex["main"](*[tvm.runtime.tensor(x, dev) for x in arrays], *outs_t)
        got_all = [t.numpy() for t in outs_t]
        on = ""
    else:
        got_all, server = _run_on_device(ex, target, rpc, [*arrays, *fills], n_in, where)
        on = f" on {server}"
    want = call_with_workload(template.reference, workload, *arrays)
    if not isinstance(want, (tuple, list)):
        want = [want]
    if len(want) != len(got_all):
        raise TemplateError(
            f"{where}: reference() returned {len(want)} array(s) for {len(got_all)} output "
            "parameter(s)"
        )
    problems = []
    for i, (got, exp) in enumerate(zip(got_all, want, strict=True)):
        exp = np.asarray(exp)
        dtype = str(infos[n_in + i].dtype)
        rtol, atol = tolerance(dtype)
        atol *= max(1.0, float(np.nanmax(np.abs(exp.astype("float64")))) if exp.size else 1.0)
        msg = _mismatch_report(f"#{n_in + i} ({dtype}{list(exp.shape)})", got, exp, rtol, atol)
        if msg:
            problems.append(msg)
    if problems:
        config = "the default configuration" if not knobs else f"configuration {dict(knobs)}"
        raise TuningError(
            f"{where}: {config} does not match reference(){on}: "
            + "; ".join(problems)
            + "; fix compute(), reference() or schedule() so they agree before tuning"
        )


def _open_session(
    tracker: tuple[str, int, str], priority: int, timeout_s: float, note_path: str,
    out: dict[str, Any],
) -> Any:
    """In an RPC worker: a free server of the key from the tracker (bounded: the stock
    TrackerSession.request waits forever for a busy key), its address written to
    `note_path` at once (a measurement the parent kills still names its device) and to
    `out["device"]`, and a session on it; None (with `out["error"]`) when no server
    was handed out in time. `out["stage"]` says how far it got."""
    from tvm import rpc as tvm_rpc

    from tvmtune_ci.devices import _request_server

    out["stage"] = "request"
    match = _request_server(tracker[0], tracker[1], tracker[2], priority, timeout_s)
    if match is None:
        out["error"] = f"no free server within {timeout_s:g}s"
        return None
    url, port, matchkey = match
    out["device"] = f"{url}:{port}"
    with open(note_path, "w", encoding="utf-8") as f:
        f.write(out["device"])
    out["stage"] = "connect"
    return tvm_rpc.connect(url, port, matchkey, session_timeout=timeout_s)


def _rpc_check_run(
    tracker: tuple[str, int, str], timeout_s: float, so_path: str, device: str,
    arrays: list[np.ndarray], n_in: int, note_path: str,
) -> dict[str, Any]:
    """Runs in a worker process: one session on a device of the key, the library
    uploaded and run once on `arrays`; {"device", "stage", "error", "outputs"}. The
    server's address goes to `note_path` at once (a killed check still names it)."""
    import os as _os

    import tvm


    out: dict[str, Any] = {"device": None, "stage": "request", "error": None, "outputs": None}
    try:
        session = _open_session(tracker, 1, timeout_s, note_path, out)
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
        out["error"] = _last_line(e)
    return out


def _run_on_device(
    ex: Any, target: Mapping[str, Any], rpc: RpcRunner, arrays: list[np.ndarray], n_in: int,
    where: str,
) -> tuple[list[np.ndarray], str]:
    """Run a built kernel once on a device of `rpc`'s key: (outputs, "server host:port").

    In a worker process with a parent-side limit, as every RPC measurement: a stopped
    or unreachable device costs `2 x session_timeout_s`, never the run."""
    import shutil
    import tempfile

    from tvm.support.popen_pool import PopenPoolExecutor

    from . import tvmsetup
    from .builder import export_kernel

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
                _rpc_check_run, (rpc.tracker_host, rpc.tracker_port, rpc.key),
                float(rpc.session_timeout_s), so, device, arrays, n_in, note,
            )
            try:
                out = wait_or_kill(pool, fut, limit + WORKER_START_S)
            except TimeoutError:
                out = {"device": None, "stage": "session", "outputs": None,
                       "error": f"timeout: no answer within {limit:g}s (server stopped, frozen "
                       "or unreachable)"}
            except Exception as e:  # noqa: BLE001 - the worker died
                out = {"device": None, "stage": "worker", "error": _last_line(e), "outputs": None}
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


# --------------------------------------------------------------------------- runner


@dataclass(frozen=True)
class RunTiming:
    """Where one measurement's time went, in the worker."""

    load_s: float  # locally: dlopen; over RPC: upload + remote load + argument allocation
    eval_s: float  # the time evaluator call: warm-up + number x repeat runs (+ calibration)
    session_s: float = 0.0  # over RPC: the tracker handing out a server + opening the session


@dataclass(frozen=True)
class SamplePolicy:
    """When one measurement stops sampling (see the module docstring)."""

    sample_ms: float = 10.0
    precision: float = 0.01  # target relative half-width of the 95% interval
    cap_s: float = 2.0  # sampling time, excluding loading and calibration
    min_samples: int = stats.MIN_SAMPLES
    max_samples: int = 10_000
    race_above_s: float | None = None  # probe samples all above this: stop (raced)
    probe: int = 3
    chunk: int = 3  # samples per evaluator call (each call runs the kernel once unmeasured)
    number: int = 0  # runs per sample; 0: calibrate to fill sample_ms
    cache_flush: bool = False
    # Past cap_s, sampling goes on only until an interval is possible, and never past
    # this (set below the runner's kill timeout).
    hard_cap_s: float = 20.0

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def search_policy(measure: MeasureOptions, race_above_s: float | None = None) -> SamplePolicy:
    """A candidate during the search: probe, race, then sample to search_precision."""
    return SamplePolicy(
        sample_ms=measure.sample_ms,
        precision=measure.search_precision,
        cap_s=measure.search_cap_s,
        race_above_s=race_above_s,
        probe=measure.probe,
        chunk=measure.probe,
        cache_flush=measure.enable_cpu_cache_flush,
        hard_cap_s=hard_cap(measure),
    )


def full_policy(measure: MeasureOptions) -> SamplePolicy:
    """The baseline and one-off measurements: sample to `precision` within `time_cap_s`."""
    return SamplePolicy(
        sample_ms=measure.sample_ms,
        precision=measure.precision,
        cap_s=measure.time_cap_s,
        cache_flush=measure.enable_cpu_cache_flush,
        hard_cap_s=hard_cap(measure),
    )


def hard_cap(measure: MeasureOptions) -> float:
    """Sampling time a slow kernel may take to get an interval: well inside timeout_s
    (loading, calibration and the warm-up runs need the rest)."""
    return max(measure.time_cap_s, 0.6 * measure.timeout_s)


def sample_loop(evaluator_for: Any, args: Sequence[Any], policy: Mapping[str, Any]) -> dict[str, Any]:
    """Sample one loaded kernel as `policy` says (runs in the worker or RPC client).

    `evaluator_for(number, repeat, min_repeat_ms)` returns a time evaluator; returns
    {"samples", "number", "raced", "converged", "calibrate_s", "sample_s"}.
    """
    import time as _time

    from tvmtune_ci.stats import estimate as _estimate

    p = dict(policy)
    t0 = _time.perf_counter()
    number = int(p["number"])
    if number <= 0:
        # One sample of `sample_ms` with TVM's own calibration; its mean run time sets
        # the runs per sample from now on. It warms caches and the thread pool too.
        cal = evaluator_for(1, 1, int(math.ceil(p["sample_ms"])))
        per_run = float(cal(*args).mean)
        number = max(1, math.ceil(p["sample_ms"] / 1e3 / per_run)) if per_run > 0 else 1
    t1 = _time.perf_counter()
    samples: list[float] = []
    raced = converged = False
    first = max(1, int(p["probe"]) if p["race_above_s"] is not None else int(p["chunk"]))
    ev_first = evaluator_for(number, first, 0)
    ev = evaluator_for(number, max(1, int(p["chunk"])), 0)
    while True:
        call = ev_first if not samples else ev
        samples.extend(float(x) for x in call(*args).results)
        n = len(samples)
        if p["race_above_s"] is not None and n <= first and min(samples) > p["race_above_s"]:
            raced = True
            break
        if n >= p["min_samples"] and _estimate(samples).rel_halfwidth <= p["precision"]:
            converged = True
            break
        # The cap stops sampling once an interval is possible; a slow kernel samples
        # on until it has one, up to hard_cap_s (below the runner's kill timeout).
        spent = _time.perf_counter() - t1
        if n >= p["max_samples"] or (spent >= p["cap_s"] and (
            n >= p["min_samples"] or spent >= p["hard_cap_s"]
        )):
            break
    return {
        "samples": samples,
        "number": number,
        "raced": raced,
        "converged": converged,
        "calibrate_s": t1 - t0,
        "sample_s": _time.perf_counter() - t1,
    }


@dataclass(frozen=True)
class Sampled:
    """How one measurement ended, beside its samples (`runner.info_of(path)`)."""

    number: int
    raced: bool
    converged: bool


def device_type(target: Any) -> str:
    """The runtime device a target's kernels run on ("llvm" and "c" -> "cpu")."""
    kind = str(target.kind.name)
    return "cpu" if kind in ("llvm", "c") else kind


LOCAL_DEVICE = "local"  # what `device_of` says for this machine's runner


def _worker_ping() -> bool:
    import tvm  # noqa: F401 - warms the worker up

    return True


# TVM's PopenPoolExecutor enforces its timeout inside the worker (a timer thread
# there answers "timeout"), so a worker that is stopped (SIGSTOP, a frozen VM slice)
# or wedged with the interpreter locked never answers and its caller waits forever.
# The parent therefore waits at most this much longer than the worker's own timeout,
# then kills the worker: the pool's thread sees the pipe close and starts a new one.
WATCHDOG_GRACE_S = 5.0
# A new worker imports TVM before its first job: slow under load (55 s seen).
WORKER_START_S = 180.0


def _kill_pool_workers(pool: Any) -> None:
    """SIGKILL every worker process of a `PopenPoolExecutor` (and their children).

    Only the OS processes: each worker's own thread notices the closed pipe, fails
    its job with ChildProcessError and restarts the worker at its next job.
    """
    import psutil

    for worker in list(getattr(pool, "_worker_map", {}).values()):
        proc = getattr(worker, "_proc", None)
        if proc is None:
            continue
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
        except psutil.Error:
            pass
        try:
            proc.kill()
        except OSError:
            pass


class WorkerHung(TimeoutError):
    """The worker gave no answer, not even its own timeout, and was killed."""


def wait_or_kill(pool: Any, future: Any, limit_s: float) -> Any:
    """`future.result()`, but a worker silent for `limit_s` is killed (WorkerHung)."""
    done, _ = concurrent.futures.wait([future], timeout=limit_s)
    if not done:
        _kill_pool_workers(pool)
        concurrent.futures.wait([future], timeout=WORKER_START_S)
        raise WorkerHung(
            f"timeout: the worker gave no answer within {limit_s:g}s (stopped or hung), killed"
        )
    return future.result()


def _worker_measure(
    artifact_path: str, device: str, args_info: list[Any], policy: dict[str, Any]
) -> tuple[dict[str, Any], float, float]:
    """Runs in the runner's worker process: load, fill arguments, `sample_loop`."""
    import time as _time

    import tvm
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    t0 = _time.perf_counter()
    rt_mod = tvm.runtime.load_module(artifact_path)
    t1 = _time.perf_counter()
    # A target kind is not a device name: tvm.runtime.device("llvm") raises.
    dev = tvm.runtime.device("cpu" if device in ("llvm", "c") else device, 0)
    args = default_alloc_argument(dev, args_info, 1)[0]
    pre = "cache_flush_cpu_non_first_arg" if policy.get("cache_flush") else ""

    def evaluator_for(number: int, repeat: int, min_repeat_ms: int) -> Any:
        return rt_mod.time_evaluator(
            rt_mod.entry_name or "main", dev, number=number, repeat=repeat,
            min_repeat_ms=min_repeat_ms, f_preproc=pre,
        )

    dev.sync()
    t2 = _time.perf_counter()
    out = sample_loop(evaluator_for, args, policy)
    return out, t1 - t0, _time.perf_counter() - t2


_RUNNER_CLASS: list[Any] = []


def _runner_class() -> Any:
    if _RUNNER_CLASS:
        return _RUNNER_CLASS[0]
    from . import tvmsetup

    tvmsetup.load()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture
    from tvm.support.popen_pool import PopenPoolExecutor

    @derived_object
    class WorkerRunner(PyRunner):
        """Measures in one persistent worker process; results are ready when `run` returns."""

        def __init__(self, measure: MeasureOptions) -> None:
            super().__init__()
            self.options = measure
            self.policy = full_policy(measure)
            self.timings: list[RunTiming] = []
            self._info: dict[str, Sampled] = {}
            self.pool = PopenPoolExecutor(
                max_workers=1, timeout=measure.timeout_s, stderr=subprocess.DEVNULL
            )
            # Start the worker (it imports TVM) while we build; waited on before the
            # first measurement, so that a measurement's wait is its own.
            self._starting: Any = self.pool.submit(_worker_ping)

        rpc: RpcRunner | None = None

        def set_options(self, measure: MeasureOptions) -> None:
            self.options = measure
            self.policy = full_policy(measure)

        def set_policy(self, policy: SamplePolicy) -> None:
            self.policy = policy

        def device_of(self, artifact_path: str) -> str | None:
            return LOCAL_DEVICE

        def info_of(self, artifact_path: str) -> Sampled | None:
            return self._info.get(str(artifact_path))

        def _started(self) -> None:
            """Wait for a (re)started worker's import, with the start-up allowance."""
            starting, self._starting = self._starting, None
            if starting is None:
                return
            try:
                wait_or_kill(self.pool, starting, WORKER_START_S)
            except Exception:  # noqa: BLE001 - the measurement that follows will say
                pass

        def run(self, runner_inputs: list[Any]) -> list[Any]:
            policy = self.policy.to_json()
            futures = []
            limit_s = self.options.timeout_s + WATCHDOG_GRACE_S
            for inp in runner_inputs:
                self._started()
                fut = self.pool.submit(
                    _worker_measure,
                    str(inp.artifact_path),
                    str(inp.device_type),
                    [a.as_json() for a in inp.args_info],
                    policy,
                )
                res, err = None, None
                try:
                    out, load_s, eval_s = wait_or_kill(self.pool, fut, limit_s)
                    res = out["samples"]
                    self._info[str(inp.artifact_path)] = Sampled(
                        out["number"], out["raced"], out["converged"]
                    )
                    self.timings.append(RunTiming(load_s, eval_s))
                except WorkerHung as e:
                    err = f"WorkerRunner: {e}"
                except TimeoutError:
                    err = f"WorkerRunner: timeout, killed after {self.options.timeout_s} s"
                except Exception as e:  # noqa: BLE001 - a crashing kernel is a failed trial
                    err = f"WorkerRunner: {type(e).__name__}: {e}"
                if err is not None:
                    # The pool restarts the worker at the next job: let that job wait
                    # for the import with the start-up allowance, not its own limit.
                    self._starting = self.pool.submit(_worker_ping)
                futures.append(LocalRunnerFuture(res=res, error_message=err))
            return futures

        def close(self) -> None:
            self.pool.shutdown()

    _RUNNER_CLASS.append(WorkerRunner)
    return WorkerRunner


# --------------------------------------------------------------------------- RPC runner

# Client-side margin over a measurement's own bounds (the wait for a free server and
# the session, each at most session_timeout_s) before its device counts as hung.
RPC_GRACE_S = 5.0
# What one RPC measurement needs besides the timed runs: connect, upload, load, allocate.
RPC_OVERHEAD_S = 1.0
# A server-side session timeout: the kernel (not the device) outlived session_timeout_s.
SESSION_EXPIRED = "RPCSessionTimeoutError"


def rpc_where(rpc: RpcRunner) -> str:
    """`key 'pixel' at tracker 10.0.0.2:9190`."""
    return f"key {rpc.key!r} at tracker {rpc.tracker}"


def min_session_s(measure: MeasureOptions) -> float:
    """The longest one measurement may keep a session: sampling up to `time_cap_s`
    (plus the calibration sample) and connecting, uploading and loading."""
    return measure.time_cap_s + measure.sample_ms / 1000.0 + RPC_OVERHEAD_S


def check_session_timeout(rpc: RpcRunner, measure: MeasureOptions) -> None:
    """DeviceError unless `session_timeout_s` exceeds what one measurement may take."""
    need = min_session_s(measure)
    if rpc.session_timeout_s > need:
        return
    raise DeviceError(
        f"runner.rpc.session_timeout_s ({rpc.session_timeout_s:g}s) for {rpc_where(rpc)} cannot "
        f"hold one measurement: sampling may last measure.time_cap_s ({measure.time_cap_s:g}s) "
        f"plus ~{RPC_OVERHEAD_S:g}s to connect and upload ({need:g}s), and the server ends the "
        f"session at session_timeout_s, so measurements would time out; raise "
        f"runner.rpc.session_timeout_s above {need:g} (e.g. {max(60, 4 * need):g}) "
        "or lower measure.time_cap_s in tvmtune.yaml"
    )


def _last_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else repr(e)}"


def _rpc_measure(
    rpc_config: Any,
    policy: dict[str, Any],
    artifact_path: str,
    device: str,
    args_info: list[Any],
    note_path: str,
) -> dict[str, Any]:
    """Runs in one of the RPC runner's worker processes: one measurement in one session.

    The steps of MetaSchedule's `rpc_runner._worker_func`, but the server is requested
    from the tracker here, so that its address is known (and written to `note_path` at
    once: a measurement the parent kills still names its device), and nothing raises:
    {"device", "stage", "error", "secs", "sampled", "session_s", "load_s", "eval_s"}.
    Sampling is `sample_loop` over the remote module's time evaluator.
    """
    import os as _os
    import time as _time

    from tvm.s_tir.meta_schedule.runner import rpc_runner as stock

    out: dict[str, Any] = {"device": None, "stage": "request", "error": None, "secs": None}
    timeout = float(rpc_config.session_timeout_sec)
    try:
        t0 = _time.perf_counter()
        tracker = (rpc_config.tracker_host, int(rpc_config.tracker_port), rpc_config.tracker_key)
        session = _open_session(tracker, int(rpc_config.session_priority), timeout, note_path, out)
        if session is None:
            return out
        dev = session.device(device, 0)
        t1 = _time.perf_counter()
        out["stage"] = "upload"
        remote_path = _os.path.basename(artifact_path)
        rt_mod = stock.default_upload_module(session, artifact_path, remote_path)
        out["stage"] = "alloc"
        args = stock.default_alloc_argument(session, dev, args_info, 1)
        t2 = _time.perf_counter()
        out["stage"] = "run"
        pre = "cache_flush_cpu_non_first_arg" if policy.get("cache_flush") else ""

        def evaluator_for(number: int, repeat: int, min_repeat_ms: int) -> Any:
            return rt_mod.time_evaluator(
                rt_mod.entry_name, dev, number=number, repeat=repeat,
                min_repeat_ms=min_repeat_ms, f_preproc=pre,
            )

        # The remote arguments: the first (and only) set default_alloc_argument made.
        sampled = sample_loop(evaluator_for, args[0], policy)
        t3 = _time.perf_counter()
        out.update(
            stage="done",
            secs=sampled.pop("samples"),
            sampled=sampled,
            session_s=t1 - t0,
            load_s=t2 - t1,
            eval_s=t3 - t2,
        )
        try:
            stock.default_cleanup(session, remote_path)
        except Exception:  # noqa: BLE001 - the server removes its session folder anyway
            pass
    except Exception as e:  # noqa: BLE001 - every failure is reported as a result
        out["error"] = _last_line(e)
    # Returning drops the session and the remote objects that hold it: the connection
    # closes and the server registers with the tracker as free again.
    return out


_RPC_CLASSES: list[Any] = []


def _rpc_runner_class() -> Any:
    if _RPC_CLASSES:
        return _RPC_CLASSES[0]
    import concurrent.futures
    import os
    import shutil
    import tempfile
    import threading

    from . import tvmsetup

    tvmsetup.load()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult
    from tvm.s_tir.meta_schedule.runner.config import RPCConfig
    from tvm.support.popen_pool import PopenPoolExecutor

    @derived_object
    class RpcRunnerFuture(PyRunnerFuture):
        """One measurement (with its retry) running in the runner's threads."""

        def __init__(self, runner: Any, inp: Any, future: Any) -> None:
            super().__init__()
            self._runner = runner
            self._inp = inp
            self._future = future
            self._result: Any = None

        def done(self) -> bool:
            return self._result is not None or bool(self._future.done())

        def result(self) -> Any:
            if self._result is None:
                self._result = self._runner.collect(self._inp, self._future.result())
            return self._result

    @derived_object
    class RpcDeviceRunner(PyRunner):
        """Measures on the servers of one tracker key, `rpc.devices` sessions at a time.

        Each measurement is one session, in a worker process (a `PopenPoolExecutor` of
        `rpc.devices` workers, as MetaSchedule's `RPCRunner`): request a free server from
        the tracker, connect (the server ends the session after `session_timeout_s`),
        upload the `.so`, load it, fill the arguments at random, run the time evaluator,
        clean up. The client gives up on a measurement after `2 * session_timeout_s +
        RPC_GRACE_S` (the wait for a server, then the session) and kills its worker: a
        stopped or frozen server.

        A measurement that fails for any reason but the server's own session timeout
        (the kernel was too slow, not the device) is measured once more, on whatever
        server the tracker hands out next: a killed server has left the tracker, a hung
        one never registers as free again, so that is another device. Its second error
        is the trial's error (a failed trial never wins). When no server was handed out
        and the tracker lists none for the key any more (or stopped answering), nothing
        is retried and the measurements of the batch not started yet fail at once.
        """

        def __init__(self, measure: MeasureOptions, rpc: RpcRunner) -> None:
            super().__init__()
            self.rpc = rpc
            self.options = measure
            self.policy = full_policy(measure)
            self._info: dict[str, Sampled] = {}
            self.timings: list[RunTiming] = []
            self.retries: list[dict[str, Any]] = []  # {"first", "then", "error"}, in order
            self.devices_used: set[str] = set()  # servers that returned a measurement
            self._devices: dict[str, str | None] = {}  # artifact path -> server that measured
            self.lost: str | None = None  # set when no server is left: the rest fail fast
            self._lock = threading.Lock()
            self._count = 0
            self._notes = tempfile.mkdtemp(prefix="tvmtune-rpc-")
            self.rpc_config = RPCConfig(
                tracker_host=rpc.tracker_host,
                tracker_port=rpc.tracker_port,
                tracker_key=rpc.key,
                session_priority=1,
                session_timeout_sec=rpc.session_timeout_s,  # type: ignore[arg-type]
            )
            self.pool_timeout_s = 2 * rpc.session_timeout_s + RPC_GRACE_S
            n = max(1, rpc.devices)
            self.pool = PopenPoolExecutor(
                max_workers=n, timeout=self.pool_timeout_s, stderr=subprocess.DEVNULL
            )
            # One thread per device runs a measurement and its retry, so that a batch
            # left without servers stops taking new ones as soon as one finds out.
            self.threads = concurrent.futures.ThreadPoolExecutor(
                max_workers=n, thread_name_prefix="tvmtune-rpc"
            )
            for _ in range(n):  # start the workers (they import TVM) while we build
                self.pool.submit(_worker_ping)

        def set_options(self, measure: MeasureOptions) -> None:
            self.options = measure
            self.policy = full_policy(measure)

        def set_policy(self, policy: SamplePolicy) -> None:
            self.policy = policy

        def device_of(self, artifact_path: str) -> str | None:
            """The server that measured `artifact_path` ("host:port"); None if none did."""
            return self._devices.get(str(artifact_path))

        def info_of(self, artifact_path: str) -> Sampled | None:
            return self._info.get(str(artifact_path))

        def run(self, runner_inputs: list[Any]) -> list[Any]:
            self.lost = None  # each batch asks the tracker afresh
            evaluator = self.policy.to_json()
            return [
                RpcRunnerFuture(self, inp, self.threads.submit(self._measure, inp, evaluator))
                for inp in runner_inputs
            ]

        def _gone(self) -> str | None:
            """Why no measurement can succeed now (the tracker lists no server for the key,
            or does not answer); None if servers are listed."""
            from .devices import tracker_summary

            try:
                queue = tracker_summary(
                    self.rpc.tracker_host,
                    self.rpc.tracker_port,
                    timeout_s=min(10.0, self.rpc.session_timeout_s),
                )
            except DeviceError:
                return "the tracker does not answer any more"
            if queue.get(self.rpc.key).total == 0:
                return "the tracker lists no server for the key any more"
            return None

        def _attempt(self, inp: Any, evaluator: Any) -> dict[str, Any]:
            """One session in a worker process; a dict as `_rpc_measure` returns."""
            lost = self.lost
            if lost is not None:
                return {"device": None, "stage": "request", "secs": None, "error": lost}
            with self._lock:
                self._count += 1
                note = os.path.join(self._notes, f"m{self._count}")
            fut = self.pool.submit(
                _rpc_measure,
                self.rpc_config,
                evaluator,
                str(inp.artifact_path),
                str(inp.device_type),
                [a.as_json() for a in inp.args_info],
                note,
            )
            try:
                out = dict(fut.result())
            except TimeoutError:
                out = {
                    "device": None,
                    "stage": "session",
                    "secs": None,
                    "error": f"timeout: no answer within {self.pool_timeout_s:g}s "
                    "(server stopped, frozen or unreachable)",
                }
            except Exception as e:  # noqa: BLE001 - the worker process died
                out = {"device": None, "stage": "worker", "secs": None, "error": _last_line(e)}
            try:
                with open(note, encoding="utf-8") as f:
                    out["device"] = out["device"] or f.read() or None
                os.unlink(note)
            except OSError:
                pass
            if out["error"] is not None and out["stage"] == "request" and self.lost is None:
                self.lost = self._gone()  # no server handed out: are any left?
            return out

        @staticmethod
        def _describe(out: dict[str, Any]) -> str:
            server = f"server {out['device']}" if out["device"] else "no server"
            return f"{server}, {out['stage']}: {out['error']}"

        def _measure(self, inp: Any, evaluator: Any) -> dict[str, Any]:
            """A measurement, measured once more on device trouble (in a runner thread)."""
            out = self._attempt(inp, evaluator)
            if out["error"] is None:
                return out
            errors = [self._describe(out)]
            device = out["device"]
            # The server's own session timeout: the kernel was too slow, not the device.
            if SESSION_EXPIRED not in str(out["error"]) and self.lost is None:
                out = self._attempt(inp, evaluator)
                self.retries.append({"first": device, "then": out["device"], "error": errors[0]})
                if out["error"] is not None:
                    errors.append("retried: " + self._describe(out))
            if out["error"] is not None:
                out["device"] = out["device"] or device
                out["error"] = f"RPCRunner ({rpc_where(self.rpc)}): " + "; ".join(errors)
            return out

        def collect(self, inp: Any, out: dict[str, Any]) -> Any:
            """The RunnerResult of a finished measurement; notes its device and timings."""
            self._devices[str(inp.artifact_path)] = out["device"]
            if out["error"] is not None:
                return RunnerResult(None, out["error"])
            self.devices_used.add(str(out["device"]))
            sampled = out.get("sampled") or {}
            self._info[str(inp.artifact_path)] = Sampled(
                int(sampled.get("number", 0)),
                bool(sampled.get("raced")),
                bool(sampled.get("converged")),
            )
            self.timings.append(RunTiming(out["load_s"], out["eval_s"], out["session_s"]))
            return RunnerResult(out["secs"], None)

        def close(self) -> None:
            self.threads.shutdown(wait=False, cancel_futures=True)
            self.pool.shutdown()
            shutil.rmtree(self._notes, ignore_errors=True)

    _RPC_CLASSES.append(RpcDeviceRunner)
    return RpcDeviceRunner


def rpc_failure(rpc: RpcRunner, errors: Sequence[str], what: str) -> TuningError:
    """The error that stops a run whose measurements all failed on the RPC devices."""
    prefix = f"RPCRunner ({rpc_where(rpc)}): "
    first = sorted(dict.fromkeys(e.splitlines()[0].removeprefix(prefix)[:500] for e in errors))[:3]
    expired = any(SESSION_EXPIRED in e for e in errors)
    advice = (
        f"raise runner.rpc.session_timeout_s ({rpc.session_timeout_s:g}s) so that a session "
        "outlasts a measurement"
        if expired
        else f"check the servers of {rpc_where(rpc)} (`tvmtune-ci devices`): restart a stopped or "
        "crashed `python -m tvm.exec.rpc_server`, or lower runner.rpc.devices"
    )
    return TuningError(
        f"{what} failed on the RPC devices ({rpc_where(rpc)}); first errors: "
        + " | ".join(first)
        + f"; {advice}; no log was written, rerun once the devices answer"
    )


def make_runner(measure: MeasureOptions, rpc: RpcRunner | None = None) -> Any:
    """The MetaSchedule `Runner` that measures for `target`: the one seam for RPC.

    Every runner returned has `run(inputs) -> futures`, `set_options(measure)`,
    `timings`, `device_of(artifact_path)` (who measured it: "local", a server's
    "host:port", or None), `rpc` (the RpcRunner or None) and `close()`.

    With `rpc`, checks first that `session_timeout_s` can hold a measurement and that
    the tracker answers and knows the key (DeviceError otherwise); `devices.preflight`
    checks more (free servers, real round trips) before a re-tune.
    """
    if rpc is None:
        return _runner_class()(measure)
    from .devices import split_tracker, tracker_summary

    check_session_timeout(rpc, measure)
    host, port = split_tracker(rpc.tracker)
    queue = tracker_summary(host, port, timeout_s=min(10.0, rpc.session_timeout_s))
    if queue.get(rpc.key).total == 0:
        raise DeviceError(
            f"tracker {rpc.tracker} has no server for key {rpc.key!r} "
            f"(it has: {queue.describe()}); "
            f"start `python -m tvm.exec.rpc_server --tracker {rpc.tracker} --key {rpc.key}` "
            "on each device, or fix runner.rpc.key in tvmtune.yaml"
        )
    return _rpc_runner_class()(measure, rpc)


def flop_count(mod: Any) -> float:
    from . import tvmsetup

    tvmsetup.load()
    from tvm.s_tir.analysis import estimate_tir_flops

    return float(estimate_tir_flops(mod))


def gflops(flops: float, latency_s: float) -> float:
    return flops / latency_s / 1e9 if latency_s > 0 else 0.0


def workload_flops(template: ModuleType, workload_name: str) -> float:
    """The FLOP count of the workload as declared (not of a padded schedule): the one
    count every GFLOPS figure uses."""
    from .builder import workload_module

    return flop_count(workload_module(template, workload_name))


def measured(
    knobs: Mapping[str, Any], est: stats.Estimate, flop: float, stage: str
) -> Measured:
    """A manifest entry from an estimate."""
    return Measured(
        dict(knobs),
        est.value,
        gflops(flop, est.value) if flop else None,
        ci_lo_s=est.lo if math.isfinite(est.lo) else None,
        ci_hi_s=est.hi if math.isfinite(est.hi) else None,
        n=est.n,
        stage=stage,
    )


def run_schedule(
    sch: Any,
    target: Mapping[str, Any],
    runner: Any,
    builder: Any | None = None,
    what: str = "measuring a schedule",
) -> list[float]:
    """Build `sch` in-process, measure it with `runner` (its current policy); the samples
    in seconds. `what` names the measurement in the TuningError of an RPC failure."""
    from . import tvmsetup

    ms = tvmsetup.ms()
    tgt = tvmsetup.make_target(dict(target))
    own = builder is None
    builder = builder or make_builder()
    try:
        (built,) = builder.build([ms.builder.BuilderInput(sch.mod, tgt)])
        if built.error_msg:
            raise TuningError(f"build failed: {built.error_msg}")
        try:
            args_info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            (fut,) = runner.run(
                [ms.runner.RunnerInput(built.artifact_path, device_type(tgt), args_info)]
            )
            res = fut.result()
        finally:
            remove_artifact(built.artifact_path)
        if res.error_msg:
            rpc = getattr(runner, "rpc", None)
            if rpc is not None:
                raise rpc_failure(rpc, [str(res.error_msg)], what)
            raise TuningError(f"measurement failed: {res.error_msg}")
        return [float(x) for x in res.run_secs]
    finally:
        if own:
            builder.close()


@dataclass
class _Session:
    """A runner (and builder) borrowed from the caller or owned for one call."""

    measure: MeasureOptions
    runner: Any = None
    builder: Any = None
    own: bool = False
    own_builder: bool = False

    def __enter__(self) -> _Session:
        if self.runner is None:
            self.runner = make_runner(self.measure)
            self.own = True
        if self.builder is None:
            self.builder = make_builder()
            self.own_builder = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.own:
            self.runner.close()
        if self.own_builder:
            self.builder.close()


def full_knobs(
    template: ModuleType,
    workload_name: str,
    knobs: Mapping[str, Any] | None,
    target: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every knob's value, defaults filled in (what a manifest records)."""
    from .targetinfo import scope
    from .template import Categorical, Split, Structural, eval_extent

    workload = scope(workload_params(template, workload_name), target)
    out: dict[str, Any] = {}
    knobs = knobs or {}
    for k in getattr(template, "KNOBS", []):
        if k.name in knobs:
            v = knobs[k.name]
            out[k.name] = [int(x) for x in v] if isinstance(k, Split) else v
        elif isinstance(k, Split):
            out[k.name] = [eval_extent(k.extent, workload)] + [1] * (k.parts - 1)
        elif isinstance(k, (Categorical, Structural)):
            out[k.name] = k.candidates[0]
    return out


def measure_config(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None,
    measure: MeasureOptions = DEFAULT_MEASURE,
    *,
    runner: Any = None,
    policy: SamplePolicy | None = None,
) -> Measured:
    """Build and measure one configuration (knobs by name; None: the default), sampled
    to `measure.precision` within `measure.time_cap_s` (or as `policy` says)."""
    with _Session(measure, runner) as s:
        sch = schedule_config(template, workload_name, knobs, target)
        s.runner.set_policy(policy or full_policy(measure))
        config = "a tuned configuration" if knobs else "the default configuration"
        what = f"{template.__name__}/{workload_name}: measuring {config}"
        try:
            secs = run_schedule(sch, target, s.runner, s.builder, what)
        finally:
            s.runner.set_options(measure)
        full = full_knobs(template, workload_name, knobs, target)
        est = stats.estimate(secs)
        return measured(full, est, workload_flops(template, workload_name), "single")


def measure_baseline(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    measure: MeasureOptions = DEFAULT_MEASURE,
    *,
    runner: Any = None,
    warn: Any = None,
) -> Measured:
    """The noise check: the default configuration sampled to `measure.precision` within
    `time_cap_s`. Short of it, `warn` is told and it is sampled on for up to
    NOISY_EXTRA x `time_cap_s` more (all samples pooled); still worse than
    `usable_precision` -> TuningError (the runner cannot measure usefully at all)."""
    where = f"{template.__name__}/{workload_name}"
    flop = workload_flops(template, workload_name)
    with _Session(measure, runner) as s:
        sch = schedule_config(template, workload_name, None, target)
        what = f"{where}: measuring the default configuration"
        try:
            s.runner.set_policy(full_policy(measure))
            secs = run_schedule(sch, target, s.runner, s.builder, what)
            est = stats.estimate(secs)
            if est.rel_halfwidth > measure.precision:
                if warn is not None:
                    warn(
                        f"{where}: noisy runner: the default configuration reached "
                        f"{_reached(est)} in {measure.time_cap_s:g}s, short of measure.precision "
                        f"±{measure.precision:.1%}; measuring on with more samples"
                    )
                more = replace(full_policy(measure), cap_s=NOISY_EXTRA * measure.time_cap_s)
                s.runner.set_policy(more)
                secs += run_schedule(sch, target, s.runner, s.builder, what)
                est = stats.estimate(secs)
        finally:
            s.runner.set_options(measure)
    base = measured(full_knobs(template, workload_name, None, target), est, flop, "single")
    if est.rel_halfwidth <= measure.usable_precision:
        return base
    spent = (1 + NOISY_EXTRA) * measure.time_cap_s
    raise TuningError(
        f"runner too noisy: the default configuration of {where} reached only "
        f"{_reached(est)} (95% interval of the {stats.ESTIMATOR}) in {est.n} samples within "
        f"{spent:g}s ({1 + NOISY_EXTRA} x measure.time_cap_s), worse than "
        f"measure.usable_precision ±{measure.usable_precision:.1%}; run on an idle runner (stop "
        "other jobs; `tvmtune-ci retune` alone on a dedicated self-hosted runner), or give it "
        "more time: raise measure.time_cap_s in tvmtune.yaml"
    )


# A noisy runner's baseline gets this many more time caps of samples.
NOISY_EXTRA = 3


def _reached(est: stats.Estimate) -> str:
    if math.isfinite(est.rel_halfwidth):
        return f"±{est.rel_halfwidth:.1%}"
    return f"no interval at all ({est.n} samples; one needs {stats.MIN_SAMPLES})"


def _rel(m: Measured) -> float:
    if m.ci_lo_s is None or m.ci_hi_s is None or m.latency_s <= 0:
        return math.inf
    return (m.ci_hi_s - m.ci_lo_s) / 2.0 / m.latency_s


# --------------------------------------------------------------------------- finals


@dataclass(frozen=True)
class Finalist:
    """A configuration in the finals: `role` is "search", "default" or "previous"."""

    role: str
    knobs: dict[str, Any] | None  # None: the default configuration
    key: str = ""  # the search's identity of it (its knobs as JSON)
    sch: Any = None  # a schedule to measure instead of building from knobs


@dataclass(frozen=True)
class FinalResult:
    finalist: Finalist
    estimate: stats.Estimate | None
    samples: tuple[float, ...] = ()
    error: str | None = None


def finals(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    finalists: Sequence[Finalist],
    measure: MeasureOptions,
    *,
    runner: Any,
    builder: Any,
) -> list[FinalResult]:
    """Re-measure `finalists` in interleaved rounds (A B C, B C A, ...) until each is
    within `measure.precision`, or separated from the leader (its interval entirely
    above the leader's: out of the race, no more samples), or the finals' time
    (`time_cap_s` per finalist) is spent. One result per finalist, in order."""
    from . import tvmsetup

    ms = tvmsetup.ms()
    tgt = tvmsetup.make_target(dict(target))
    results: list[FinalResult | None] = [None] * len(finalists)
    schs: list[Any] = []
    for i, f in enumerate(finalists):
        try:
            schs.append(f.sch or schedule_config(template, workload_name, f.knobs, target))
        except Exception as e:  # noqa: BLE001 - e.g. an old configuration the template refuses
            schs.append(None)
            results[i] = FinalResult(f, None, error=f"{type(e).__name__}: {e}")
    todo = [i for i, sch in enumerate(schs) if sch is not None]
    built = builder.build([ms.builder.BuilderInput(schs[i].mod, tgt) for i in todo])
    inputs: dict[int, Any] = {}
    for i, b in zip(todo, built, strict=True):
        if b.error_msg:
            results[i] = FinalResult(finalists[i], None, error=f"build failed: {b.error_msg}")
        else:
            info = ms.arg_info.ArgInfo.from_entry_func(schs[i].mod, remove_preproc=True)
            inputs[i] = ms.runner.RunnerInput(b.artifact_path, device_type(tgt), info)
    # An RPC measurement is a session (connect, upload): fewer, longer visits there.
    chunk = 3 if getattr(runner, "rpc", None) is None else 12
    samples: dict[int, list[float]] = {i: [] for i in inputs}
    number: dict[int, int] = {}
    active = list(inputs)
    budget_s = measure.time_cap_s * max(2, len(inputs))
    t0 = time.perf_counter()
    rnd = 0
    try:
        while active:
            order = active[rnd % len(active):] + active[: rnd % len(active)]
            for i in order:
                runner.set_policy(
                    SamplePolicy(
                        sample_ms=measure.sample_ms, precision=0.0, cap_s=math.inf,
                        min_samples=chunk, max_samples=chunk, chunk=chunk,
                        number=number.get(i, 0), cache_flush=measure.enable_cpu_cache_flush,
                    )
                )
                (fut,) = runner.run([inputs[i]])
                res = fut.result()
                if res.error_msg:
                    results[i] = FinalResult(finalists[i], None, error=str(res.error_msg))
                    active.remove(i)
                    continue
                samples[i].extend(float(x) for x in res.run_secs)
                sampled = runner.info_of(str(inputs[i].artifact_path))
                if sampled is not None and sampled.number:
                    number[i] = sampled.number
            rnd += 1
            ests = {i: stats.estimate(v) for i, v in samples.items() if v}
            if not ests or min(ests[i].n if i in ests else 0 for i in active) < stats.MIN_SAMPLES:
                continue
            leader = min(ests.values(), key=lambda e: e.value)
            active = [
                i for i in active
                if i in ests and ests[i].rel_halfwidth > measure.precision
                and not (ests[i].lo > leader.hi)
            ]
            if time.perf_counter() - t0 >= budget_s:
                break
    finally:
        runner.set_options(measure)
        for inp in inputs.values():
            remove_artifact(inp.artifact_path)
    for i in inputs:
        if results[i] is None:
            results[i] = FinalResult(
                finalists[i], stats.estimate(samples[i]), tuple(samples[i])
            )
    return [r for r in results if r is not None]


def time_compile(
    template: ModuleType,
    workload_name: str,
    target: Mapping[str, Any],
    knobs: Mapping[str, Any] | None = None,
) -> float:
    """Seconds one `tvm.compile` of the configuration takes (for the benchmark)."""
    t0 = time.perf_counter()
    build_config(template, workload_name, target, knobs)
    return time.perf_counter() - t0
