"""The runners that measure: `make_runner(measure, rpc)` is the one seam.

`runners/local.py` measures on this machine, `runners/rpc.py` on devices behind a TVM
tracker. Both sample with `sampling.py` where the kernel runs.
"""

from __future__ import annotations

from ...core.configschema import MeasureOptions, RpcRunner
from ...core.errors import DeviceError
from ..devices import split_tracker, tracker_summary
from ..rpclimits import check_session_timeout
from .controls import Runner
from .local import local_runner_class
from .rpc import rpc_runner_class

__all__ = ["Runner", "make_runner"]


def make_runner(measure: MeasureOptions, rpc: RpcRunner | None = None) -> Runner:
    """The MetaSchedule `Runner` that measures for `target`: the one seam for RPC.

    Every runner returned has `run(inputs) -> futures`, `set_options(measure)`,
    `timings`, `device_of(artifact_path)` (who measured it: "local", a server's
    "host:port", or None), `rpc` (the RpcRunner or None) and `close()`.

    With `rpc`, checks first that `session_timeout_s` can hold a measurement and that
    the tracker answers and knows the key (DeviceError otherwise); `devices.preflight`
    checks more (free servers, real round trips) before a re-tune.
    """
    if rpc is None:
        return local_runner_class()(measure)
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
    return rpc_runner_class()(measure, rpc)
