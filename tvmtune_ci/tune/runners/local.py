"""The local runner: one persistent measuring worker process on this machine.

`WorkerRunner` (`local_runner_class()`, its work the TVM-free mixin `WorkerMeasuring`)
is a MetaSchedule `Runner`: TVM's
`PopenPoolExecutor` with one worker, as the stock `LocalRunner`, that loads each built
library, fills its arguments with random data and samples it (`sampling.sample_loop`).
A kernel that crashes or outlives `timeout_s` kills only the worker, which restarts on
the next measurement. TVM's pool times out *inside* the worker, so a stopped or wedged
worker would never answer: `wait_or_kill` bounds every wait from the parent side.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from ...core.configschema import MeasureOptions, RpcRunner
from .. import tvmsetup
from ..nvrtc import install_hook
from ..sampling import LOCAL_DEVICE, RunTiming, Sampled, sample_loop
from .controls import SamplingControls


def worker_ping() -> bool:
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


# A worker process started before this process imported TVM (`prestart_worker`), with
# the parent's ends of its pipes and the TVM_NUM_THREADS it was started with:
# (process, reader, writer, threads). Taken by the first runner whose worker would get
# the same TVM_NUM_THREADS.
_prestarted: list[tuple[subprocess.Popen[bytes], Any, Any, str | None]] = []


def prestart_worker(threads: int | None = None) -> None:
    """Start the measuring worker's process now, before this process imports TVM.

    The worker's own TVM import (1.5-2.6 s on a 2-core Zen 4) then runs beside this
    process's, on the other core, instead of after it, and the first measurement
    does not wait for it. The process is TVM's `PopenWorker` command, started as
    `PopenWorker._start` starts it; the first local runner adopts it. Not adopted (the
    run measured nothing), it sees its pipe close when this process exits, and exits.
    Idempotent; imports nothing of TVM.

    `threads`: the TVM_NUM_THREADS the first measurement will run with
    (`threads.tvm_threads`, which the re-tune sets only around an entry's tuning). TVM sizes its
    thread pool from the environment the worker started with, so one started without it
    measured a 2-core target on one thread: 2x slower (softmax attn_512, Zen 3), and the
    run's history, measured in-process with the pipeline's setting, disagreed with its
    finals. A runner adopts
    it only if its worker would get the same TVM_NUM_THREADS (`_adopt_prestarted`)."""
    if _prestarted:
        return
    env = dict(os.environ)
    if threads is not None:
        env["TVM_NUM_THREADS"] = str(threads)
    main_read, worker_write = os.pipe()
    worker_read, main_write = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.popen_worker", str(worker_read), str(worker_write)],
            pass_fds=(worker_read, worker_write),
            stderr=subprocess.DEVNULL,
            env=env,
        )
    except OSError:  # no process to start: the runner starts its own later
        os.close(main_read)
        os.close(main_write)
        return
    finally:
        os.close(worker_read)  # the worker's ends: its own now
        os.close(worker_write)
    _prestarted.append((proc, os.fdopen(main_read, "rb"), os.fdopen(main_write, "wb"), env.get("TVM_NUM_THREADS")))


def _adopt_prestarted(pool: Any) -> bool:
    """Give a `PopenPoolExecutor` of one worker the prestarted process as that worker
    (its one thread's `PopenWorker`). False: none prestarted, it has died, or it was
    started with another TVM_NUM_THREADS than a worker started now would inherit (it
    is left for a runner that matches, or exits with this process)."""
    if not _prestarted or _prestarted[-1][3] != os.environ.get("TVM_NUM_THREADS"):
        return False
    proc, reader, writer, _ = _prestarted.pop()
    if proc.poll() is not None:
        reader.close()
        writer.close()
        return False
    from tvm.support.popen_pool import PopenWorker

    worker = PopenWorker(stderr=subprocess.DEVNULL)
    worker._proc, worker._reader, worker._writer = proc, reader, writer
    # The pool keys its workers by the thread that runs its jobs; it has one thread.
    pool._threadpool.submit(lambda: pool._worker_map.setdefault(threading.get_ident(), worker)).result()
    return True


class WorkerHung(TimeoutError):
    """The worker gave no answer, not even its own timeout, and was killed."""


def wait_or_kill(pool: Any, future: Any, limit_s: float) -> Any:
    """`future.result()`, but a worker silent for `limit_s` is killed (WorkerHung)."""
    done, _ = concurrent.futures.wait([future], timeout=limit_s)
    if not done:
        _kill_pool_workers(pool)
        concurrent.futures.wait([future], timeout=WORKER_START_S)
        raise WorkerHung(f"timeout: the worker gave no answer within {limit_s:g}s (stopped or hung), killed")
    return future.result()


def _worker_measure(
    artifact_path: str, device: str, args_info: list[Any], policy: dict[str, Any]
) -> tuple[dict[str, Any], float, float]:
    """Runs in the runner's worker process: load, fill arguments, `sample_loop`."""
    import time as _time

    import tvm
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    t0 = _time.perf_counter()
    if device == "cuda":  # the library holds CUDA source: the builder's cubin, by the hook
        install_hook()
    rt_mod = tvm.runtime.load_module(artifact_path)
    t1 = _time.perf_counter()
    # A target kind is not a device name: tvm.runtime.device("llvm") raises.
    dev = tvm.runtime.device("cpu" if device in ("llvm", "c") else device, 0)
    args = default_alloc_argument(dev, args_info, 1)[0]
    pre = "cache_flush_cpu_non_first_arg" if policy.get("cache_flush") else ""

    def evaluator_for(number: int, repeat: int, min_repeat_ms: int) -> Any:
        return rt_mod.time_evaluator(
            rt_mod.entry_name or "main", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, f_preproc=pre
        )

    dev.sync()
    t2 = _time.perf_counter()
    out = sample_loop(evaluator_for, args, policy)
    return out, t1 - t0, _time.perf_counter() - t2


class WorkerMeasuring(SamplingControls):
    """The local runner's work, apart from TVM's classes: `local_runner_class` mixes it
    into TVM's `PyRunner` once TVM is loaded, and hands it the TVM classes it makes."""

    rpc: RpcRunner | None = None

    def init_worker(self, measure: MeasureOptions, pool_class: Callable[..., Any]) -> None:
        """`__init__`'s work: the options, and the pool of one worker (`pool_class`: TVM's
        `PopenPoolExecutor`)."""
        self.init_controls(measure)
        self.pool = pool_class(max_workers=1, timeout=measure.timeout_s, stderr=subprocess.DEVNULL)
        self.prestarted = _adopt_prestarted(self.pool)
        # Start the worker (it imports TVM) while we build, or wait for the prestarted
        # one's import; waited on before the first measurement, so that a
        # measurement's wait is its own.
        self._starting: Any = self.pool.submit(worker_ping)

    def device_of(self, artifact_path: str) -> str | None:
        return LOCAL_DEVICE

    def _started(self) -> None:
        """Wait for a (re)started worker's import, with the start-up allowance."""
        starting, self._starting = self._starting, None
        if starting is None:
            return
        try:
            wait_or_kill(self.pool, starting, WORKER_START_S)
        except Exception:  # noqa: BLE001 - the measurement that follows will say
            pass

    def measure_each(self, runner_inputs: list[Any], future_class: Callable[..., Any]) -> list[Any]:
        """`run`'s work: each input measured in the worker in turn, its future
        (`future_class`: TVM's `LocalRunnerFuture`) holding the samples or the error."""
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
                self._info[str(inp.artifact_path)] = Sampled(out["number"], out["raced"], out["converged"])
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
                self._starting = self.pool.submit(worker_ping)
            futures.append(future_class(res=res, error_message=err))
        return futures

    def close(self) -> None:
        # A worker still starting (closed before any measurement: a builder that
        # could not start) has its process but not yet its pipes, and the pool's
        # shutdown fails on it (AttributeError '_writer', CI): let it finish first.
        self._started()
        self.pool.shutdown()


@functools.cache  # one class per process: TVM registers it by name
def local_runner_class() -> Any:
    """`WorkerMeasuring` as TVM's `PyRunner`, made when first asked for (TVM loaded
    then): importing this module does not import TVM."""
    tvmsetup.load()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture
    from tvm.support.popen_pool import PopenPoolExecutor

    @derived_object
    class WorkerRunner(PyRunner, WorkerMeasuring):
        """Measures in one persistent worker process; results are ready when `run` returns."""

        def __init__(self, measure: MeasureOptions) -> None:
            super().__init__()
            self.init_worker(measure, PopenPoolExecutor)

        def run(self, runner_inputs: list[Any]) -> list[Any]:
            return self.measure_each(runner_inputs, LocalRunnerFuture)

    return WorkerRunner
