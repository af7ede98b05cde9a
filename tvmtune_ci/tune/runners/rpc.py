"""The RPC runner: measurements on devices behind a TVM tracker.

`RpcDeviceRunner` (`rpc_runner_class()`) follows MetaSchedule's `RPCRunner` recipe
(one `PopenPoolExecutor` worker per device, `RPCConfig`, its `default_upload_module`,
`default_alloc_argument`, `default_cleanup`) with three things the stock runner
lacks: a client-side bound on every measurement (the stock pool has none, so a hung
device hangs the run), the address of the server that measured (`device_of`), and
one retry of a measurement whose device was lost or hung (on another server: the
tracker never hands out a dead or stuck one again). Its work is `RpcSessions`, a
TVM-free mixin; the factory binds TVM's classes, so that importing this module does
not import TVM. `open_session` is shared with the numerics check on a device.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from ...core.configschema import MeasureOptions, RpcRunner
from ...core.errors import DeviceError
from .. import tvmsetup
from ..devices import request_server, tracker_summary
from ..rpclimits import RPC_GRACE_S, SESSION_EXPIRED, last_line, rpc_where
from ..sampling import RunTiming, Sampled, sample_loop
from .controls import SamplingControls
from .local import worker_ping


def open_session(
    tracker: tuple[str, int, str], priority: int, timeout_s: float, note_path: str, out: dict[str, Any]
) -> Any:
    """In an RPC worker: a free server of the key from the tracker (bounded: the stock
    TrackerSession.request waits forever for a busy key), its address written to
    `note_path` at once (a measurement the parent kills still names its device) and to
    `out["device"]`, and a session on it; None (with `out["error"]`) when no server
    was handed out in time. `out["stage"]` says how far it got."""
    from tvm import rpc as tvm_rpc

    out["stage"] = "request"
    match = request_server(tracker[0], tracker[1], tracker[2], priority, timeout_s)
    if match is None:
        out["error"] = f"no free server within {timeout_s:g}s"
        return None
    url, port, matchkey = match
    out["device"] = f"{url}:{port}"
    with open(note_path, "w", encoding="utf-8") as f:
        f.write(out["device"])
    out["stage"] = "connect"
    return tvm_rpc.connect(url, port, matchkey, session_timeout=timeout_s)


def _rpc_measure(
    rpc_config: Any, policy: dict[str, Any], artifact_path: str, device: str, args_info: list[Any], note_path: str
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
        session = open_session(tracker, int(rpc_config.session_priority), timeout, note_path, out)
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
                rt_mod.entry_name, dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, f_preproc=pre
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
        out["error"] = last_line(e)
    # Returning drops the session and the remote objects that hold it: the connection
    # closes and the server registers with the tracker as free again.
    return out


class RpcSessions(SamplingControls):
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

    The runner's work, apart from TVM's classes: `rpc_runner_class` mixes it into
    TVM's `PyRunner` once TVM is loaded, and hands it the TVM classes it makes.
    """

    def init_sessions(
        self, measure: MeasureOptions, rpc: RpcRunner, config_class: Callable[..., Any], pool_class: Callable[..., Any]
    ) -> None:
        """`__init__`'s work (`config_class` and `pool_class`: TVM's `RPCConfig` and
        `PopenPoolExecutor`)."""
        self.rpc = rpc
        self.init_controls(measure)
        self.retries: list[dict[str, Any]] = []  # {"first", "then", "error"}, in order
        self.devices_used: set[str] = set()  # servers that returned a measurement
        self._devices: dict[str, str | None] = {}  # artifact path -> server that measured
        self.lost: str | None = None  # set when no server is left: the rest fail fast
        self._lock = threading.Lock()
        self._count = 0
        self._notes = tempfile.mkdtemp(prefix="tvmtune-rpc-")
        self.rpc_config = config_class(
            tracker_host=rpc.tracker_host,
            tracker_port=rpc.tracker_port,
            tracker_key=rpc.key,
            session_priority=1,
            session_timeout_sec=rpc.session_timeout_s,
        )
        self.pool_timeout_s = 2 * rpc.session_timeout_s + RPC_GRACE_S
        n = max(1, rpc.devices)
        self.pool = pool_class(max_workers=n, timeout=self.pool_timeout_s, stderr=subprocess.DEVNULL)
        # One thread per device runs a measurement and its retry, so that a batch
        # left without servers stops taking new ones as soon as one finds out.
        self.threads = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="tvmtune-rpc")
        for _ in range(n):  # start the workers (they import TVM) while we build
            self.pool.submit(worker_ping)

    def device_of(self, artifact_path: str) -> str | None:
        """The server that measured `artifact_path` ("host:port"); None if none did."""
        return self._devices.get(str(artifact_path))

    def _gone(self) -> str | None:
        """Why no measurement can succeed now (the tracker lists no server for the key,
        or does not answer); None if servers are listed."""
        try:
            queue = tracker_summary(
                self.rpc.tracker_host, self.rpc.tracker_port, timeout_s=min(10.0, self.rpc.session_timeout_s)
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
                "error": f"timeout: no answer within {self.pool_timeout_s:g}s (server stopped, frozen or unreachable)",
            }
        except Exception as e:  # noqa: BLE001 - the worker process died
            out = {"device": None, "stage": "worker", "secs": None, "error": last_line(e)}
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

    def submit_each(self, runner_inputs: list[Any], future_class: Callable[..., Any]) -> list[Any]:
        """`run`'s work: each input's measurement submitted to the runner's threads, as
        a future of `future_class` (the TVM future `rpc_runner_class` makes)."""
        self.lost = None  # each batch asks the tracker afresh
        evaluator = self.policy.to_json()
        return [future_class(self, inp, self.threads.submit(self._measure, inp, evaluator)) for inp in runner_inputs]

    def collected(self, inp: Any, out: dict[str, Any]) -> tuple[Any, str | None]:
        """`collect`'s work: a finished measurement's (run_secs, error), for TVM's
        `RunnerResult`; notes its device and timings."""
        self._devices[str(inp.artifact_path)] = out["device"]
        if out["error"] is not None:
            return None, out["error"]
        self.devices_used.add(str(out["device"]))
        sampled = out.get("sampled") or {}
        self._info[str(inp.artifact_path)] = Sampled(
            int(sampled.get("number", 0)), bool(sampled.get("raced")), bool(sampled.get("converged"))
        )
        self.timings.append(RunTiming(out["load_s"], out["eval_s"], out["session_s"]))
        return out["secs"], None

    def close(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)
        self.pool.shutdown()
        shutil.rmtree(self._notes, ignore_errors=True)


@functools.cache  # one class per process: TVM registers it by name
def rpc_runner_class() -> Any:
    """`RpcSessions` as TVM's `PyRunner`, made when first asked for (TVM loaded then):
    importing this module does not import TVM."""
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
    class RpcDeviceRunner(PyRunner, RpcSessions):
        """Measures on the servers of one tracker key (`RpcSessions`)."""

        def __init__(self, measure: MeasureOptions, rpc: RpcRunner) -> None:
            super().__init__()
            self.init_sessions(measure, rpc, RPCConfig, PopenPoolExecutor)

        def run(self, runner_inputs: list[Any]) -> list[Any]:
            return self.submit_each(runner_inputs, RpcRunnerFuture)

        def collect(self, inp: Any, out: dict[str, Any]) -> Any:
            """The RunnerResult of a finished measurement; notes its device and timings."""
            return RunnerResult(*self.collected(inp, out))

    return RpcDeviceRunner
