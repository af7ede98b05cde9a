"""The rules of an RPC measurement that need no TVM: how long a session must hold one
measurement, what a lost or hung device's error says, how a run that failed on every
device stops.

Apart from `runners/rpc.py` (TVM's RPC client) so that `devices.py` (the tracker
protocol and the preflight, TVM-free) checks the same session rule without importing
the runner, and the runner asks the tracker without a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.configschema import MeasureOptions, RpcRunner
from ..core.errors import DeviceError, TuningError
from .sampling import hard_cap

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
    """The longest one measurement may keep a session: sampling up to `hard_cap` (a
    slow kernel samples past time_cap_s until it has an interval), the calibration
    sample, and connecting, uploading and loading."""
    return hard_cap(measure) + measure.sample_ms / 1000.0 + RPC_OVERHEAD_S


def check_session_timeout(rpc: RpcRunner, measure: MeasureOptions) -> None:
    """DeviceError unless `session_timeout_s` exceeds what one measurement may take:
    the server ends a session at session_timeout_s, so a longer measurement would be
    recorded as an error. The one rule, checked by `make_runner` and the preflight."""
    need = min_session_s(measure)
    if rpc.session_timeout_s > need:
        return
    raise DeviceError(
        f"runner.rpc.session_timeout_s ({rpc.session_timeout_s:g}s) for {rpc_where(rpc)} cannot "
        f"hold one measurement: sampling may last {hard_cap(measure):g}s (measure.time_cap_s, or "
        f"0.6 x measure.timeout_s for a slow kernel) plus ~{RPC_OVERHEAD_S:g}s to connect and "
        f"upload ({need:g}s), and the server ends the session at session_timeout_s, so "
        f"measurements would time out; raise runner.rpc.session_timeout_s above {need:g} "
        f"(e.g. {max(60, 2 * need):g}) or lower measure.timeout_s and measure.time_cap_s in "
        "tvmtune.yaml"
    )


def last_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else repr(e)}"


def rpc_failure(rpc: RpcRunner, errors: Sequence[str], what: str) -> TuningError:
    """The error that stops a run whose measurements all failed on the RPC devices."""
    prefix = f"RPCRunner ({rpc_where(rpc)}): "
    first = sorted(dict.fromkeys(e.splitlines()[0].removeprefix(prefix)[:500] for e in errors))[:3]
    expired = any(SESSION_EXPIRED in e for e in errors)
    advice = (
        f"raise runner.rpc.session_timeout_s ({rpc.session_timeout_s:g}s) so that a session outlasts a measurement"
        if expired
        else f"check the servers of {rpc_where(rpc)} (`tvmtune-ci devices`): restart a stopped or "
        "crashed `python -m tvm.exec.rpc_server`, or lower runner.rpc.devices"
    )
    return TuningError(
        f"{what} failed on the RPC devices ({rpc_where(rpc)}); first errors: "
        + " | ".join(first)
        + f"; {advice}; no log was written, rerun once the devices answer"
    )
