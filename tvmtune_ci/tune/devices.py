"""RPC devices: what a TVM tracker offers, and whether it can serve a tuning run.

`tracker_summary(host, port)` reads the tracker's queue into frozen dataclasses;
`preflight(rpc, measure)` stops a run before its first trial when the tracker
is unreachable, has fewer free servers than `runner.rpc.devices`, a server does
not complete a session, or `session_timeout_s` cannot hold one measurement.

TVM is imported inside the functions only: importing this module stays instant.

Tracker facts this module relies on (TVM 0.27, `tvm/rpc/tracker.py`):

- `summary()` gives `queue_info` (per key: `free`, `pending`) and `server_info`
  (one `{"key": "server:KEY", "addr": [host, port]}` per connected server).
  A server in a session is connected but not free.
- A server that dies (process killed) closes its tracker connection and drops
  out of the summary at once; a server that hangs (stopped, frozen board) keeps
  its connection and still counts as free. Only a real session finds it.
- `connect_tracker()` retries a refused connection for 60 s, and a request for
  a busy key waits forever: both are bounded here.
"""

from __future__ import annotations

import difflib
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.configschema import MeasureOptions, RpcRunner
from ..core.errors import DeviceError
from .rpclimits import check_session_timeout

DEFAULT_TIMEOUT_S = 10.0
_PROBE_FILE = "tvmtune-ci-preflight.bin"


@dataclass(frozen=True)
class KeyQueue:
    """One device key on a tracker."""

    key: str
    free: int  # servers waiting for a session
    total: int  # servers connected (free + in a session)
    pending: int  # requests waiting for a free server
    servers: tuple[str, ...] = ()  # "host:port" of the connected servers, sorted

    @property
    def busy(self) -> int:
        return max(self.total - self.free, 0)

    def describe(self) -> str:
        """`1 free server for key 'mydev' (1 total, 0 pending)`."""
        s = "" if self.free == 1 else "s"
        return f"{self.free} free server{s} for key {self.key!r} ({self.total} total, {self.pending} pending)"

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "free": self.free,
            "total": self.total,
            "pending": self.pending,
            "servers": list(self.servers),
        }


@dataclass(frozen=True)
class TrackerQueue:
    """The queue of one tracker, keys sorted by name."""

    tracker: str  # host:port
    keys: tuple[KeyQueue, ...] = ()

    def get(self, key: str) -> KeyQueue:
        """The queue of `key`; all zeros when the tracker has never seen it."""
        for k in self.keys:
            if k.key == key:
                return k
        return KeyQueue(key=key, free=0, total=0, pending=0)

    def describe(self) -> str:
        """`'a' (2 free / 2 total / 0 pending), 'b' (...)` or `no servers`."""
        if not self.keys:
            return "no servers"
        return ", ".join(f"{k.key!r} ({k.free} free / {k.total} total / {k.pending} pending)" for k in self.keys)

    def to_json(self) -> dict[str, Any]:
        return {"format": 1, "tracker": self.tracker, "keys": [k.to_json() for k in self.keys]}


@dataclass(frozen=True)
class ServerCheck:
    """One round trip of `preflight`: a session on a server and a trivial remote call."""

    server: str  # host:port the tracker handed out
    seconds: float


@dataclass(frozen=True)
class Preflight:
    tracker: str
    queue: KeyQueue
    checked: tuple[ServerCheck, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- summary


def split_tracker(tracker: str) -> tuple[str, int]:
    """`"host:port"` -> `("host", port)`; a DeviceError names the expected form."""
    host, sep, port = tracker.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise DeviceError(f"tracker {tracker!r} is not HOST:PORT; write for example 127.0.0.1:9190")
    return host, int(port)


def _start_hint(where: str) -> str:
    port = where.rpartition(":")[2]
    return (
        f"start one with `python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port {port}` "
        f"and its device servers with "
        f"`python -m tvm.exec.rpc_server --tracker {where} --key NAME`, "
        f"or fix runner.rpc.tracker in tvmtune.yaml"
    )


def _probe(host: str, port: int, timeout_s: float, magic: int) -> None:
    """A bounded TCP connect + tracker handshake (TVM's own connect retries for 60 s)."""
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise DeviceError(f"cannot reach the RPC tracker at {where} ({reason}); {_start_hint(where)}") from None
    try:
        sock.sendall(struct.pack("<i", magic))
        answer = _recv_exact(sock, 4)
    except OSError:
        answer = b""
    finally:
        sock.close()
    if len(answer) != 4 or struct.unpack("<i", answer)[0] != magic:
        raise DeviceError(
            f"{where} accepts connections but is not a TVM RPC tracker (no tracker handshake "
            f"within {timeout_s:g}s); point runner.rpc.tracker at the tracker's port (the "
            f"--port of `python -m tvm.exec.rpc_tracker`, 9190 by default), not at an rpc_server"
        )


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def parse_summary(tracker: str, raw: dict[str, Any]) -> TrackerQueue:
    """TrackerQueue from the dict of TVM's `TrackerSession.summary()`.

    `total` counts the servers in `server_info`, as `text_summary()` does; a
    server that reports no info (old RPC apps) is still counted while free.
    Keys with nothing free, connected or waiting (left over after their servers
    went away) are left out.
    """
    addrs: dict[str, list[str]] = {}
    for item in raw.get("server_info") or []:
        role, _, key = str(item.get("key", "")).partition(":")
        if role != "server" or not key:
            continue
        addr = item.get("addr") or [None, None]
        addrs.setdefault(key, []).append(f"{addr[0]}:{addr[1]}")
    queue_info: dict[str, dict[str, int]] = raw.get("queue_info") or {}
    keys = []
    for key in sorted(set(queue_info) | set(addrs)):
        q = queue_info.get(key, {})
        free, pending = int(q.get("free", 0)), int(q.get("pending", 0))
        servers = tuple(sorted(addrs.get(key, [])))
        total = max(len(servers), free)
        if free or total or pending:
            keys.append(KeyQueue(key=key, free=free, total=total, pending=pending, servers=servers))
    return TrackerQueue(tracker=tracker, keys=tuple(keys))


def tracker_summary(host: str, port: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> TrackerQueue:
    """The tracker's queue: per key free / total / pending and the servers' addresses.

    Raises DeviceError, naming host:port and how to start a tracker, when
    nothing answers there within `timeout_s` or what answers is no tracker.
    """
    from tvm import rpc
    from tvm.rpc import base

    where = f"{host}:{port}"
    _probe(host, port, timeout_s, base.RPC_TRACKER_MAGIC)
    session = None
    try:
        session = rpc.connect_tracker(host, port)
        sock = getattr(session, "_sock", None)
        if sock is not None:
            sock.settimeout(timeout_s)
        raw = session.summary()
    except (OSError, RuntimeError, ValueError) as e:
        raise DeviceError(
            f"the RPC tracker at {where} did not answer a summary request ({e}); check it is "
            f"running (`python -m tvm.exec.query_rpc_tracker --host {host} --port {port}`) "
            f"or restart it"
        ) from None
    finally:
        if session is not None:
            session.close()
    return parse_summary(where, raw)


# --------------------------------------------------------------------------- preflight


def _not_enough(rpc: RpcRunner, queue: TrackerQueue) -> DeviceError:
    k = queue.get(rpc.key)
    server_cmd = f"`python -m tvm.exec.rpc_server --tracker {rpc.tracker} --key {rpc.key}`"
    msg = f"tracker {queue.tracker} has {k.describe()}; tvmtune.yaml asks for devices: {rpc.devices}. "
    if k.total == 0:
        others = [q.key for q in queue.keys]
        close = difflib.get_close_matches(rpc.key, others, n=1)
        msg += f"Keys it has: {queue.describe()}. "
        if close:
            msg += f"Did you mean key {close[0]!r}? "
    elif k.busy:
        verb = "is" if k.busy == 1 else "are"
        msg += f"{k.busy} of its servers {verb} in other sessions (another tuning job?); wait for them to finish, or "
    return DeviceError(msg + f"Start more {server_cmd} or lower devices")


class _Slot:
    """The state of one concurrent round trip."""

    def __init__(self) -> None:
        self.server: str | None = None
        self.matched_at: float | None = None  # time.monotonic() when the tracker handed it out
        self.seconds: float | None = None
        self.error: str | None = None


def request_server(host: str, port: int, key: str, priority: int, timeout_s: float) -> tuple[str, int, str] | None:
    """One server from the tracker (url, port, matchkey), or None if none is handed out in time.

    TVM's `TrackerSession.request` waits forever for a busy key; this asks with
    a bounded socket.
    """
    from tvm.rpc import base

    sock = socket.create_connection((host, port), timeout=timeout_s)
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
            raise OSError("not an RPC tracker")
        base.sendjson(sock, [base.TrackerCode.REQUEST, key, "tvmtune-ci", priority])
        try:
            value = base.recvjson(sock)
        except TimeoutError:
            return None
    finally:
        sock.close()
    if not isinstance(value, list) or value[0] != base.TrackerCode.SUCCESS:
        raise OSError(f"unexpected tracker answer {value!r}")
    url, sport, matchkey = value[1]
    return str(url), int(sport), str(matchkey)


def _round_trip(rpc: RpcRunner, slot: _Slot, timeout_s: float, release: threading.Event) -> None:
    from tvm import rpc as tvm_rpc

    try:
        match = request_server(rpc.tracker_host, rpc.tracker_port, rpc.key, 1, timeout_s)
    except OSError as e:
        slot.error = f"the tracker failed a session request: {e}"
        return
    if match is None:
        return
    url, port, matchkey = match
    slot.server = f"{url}:{port}"
    t0 = slot.matched_at = time.monotonic()
    try:
        session = tvm_rpc.connect(url, port, matchkey, session_timeout=rpc.session_timeout_s)
        path = session.get_function("tvm.rpc.server.workpath")(_PROBE_FILE)
        if not isinstance(path, str) or not path:
            raise RuntimeError(f"tvm.rpc.server.workpath returned {path!r}")
        session.upload(bytearray(b"tvmtune-ci"), _PROBE_FILE)
        session.remove(_PROBE_FILE)
    except Exception as e:  # noqa: BLE001 - TVM raises InternalError, RuntimeError, OSError, ...
        lines = str(e).strip().splitlines()
        slot.error = f"{type(e).__name__}: {lines[-1] if lines else e!r}"
        return
    slot.seconds = time.monotonic() - t0
    # Hold the session until every slot has its server, so that each checks a different one.
    release.wait(timeout_s)
    del session


_Worker = Callable[[RpcRunner, _Slot, float, threading.Event], None]


def check_servers(
    rpc: RpcRunner, count: int, timeout_s: float = DEFAULT_TIMEOUT_S, worker: _Worker = _round_trip
) -> tuple[ServerCheck, ...]:
    """Open `count` sessions at once (so on `count` servers) and make one remote call on each.

    A server that the tracker lists but that hangs (a stopped process, a frozen
    board, a firewall) is only found this way. Raises DeviceError naming it.
    """
    slots = [_Slot() for _ in range(count)]
    release = threading.Event()
    threads = [
        threading.Thread(
            target=worker, args=(rpc, s, timeout_s, release), daemon=True, name=f"tvmtune-ci-preflight-{i}"
        )
        for i, s in enumerate(slots)
    ]
    for t in threads:
        t.start()

    def waiting(s: _Slot, t: threading.Thread) -> bool:
        if s.seconds is not None or s.error is not None or not t.is_alive():
            return False
        # The request is bounded by its socket timeout; the session by this.
        return s.matched_at is None or time.monotonic() - s.matched_at < timeout_s

    deadline = time.monotonic() + 2 * timeout_s + 1  # only if a thread misbehaves
    while any(waiting(s, t) for s, t in zip(slots, threads, strict=True)):
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    release.set()
    for s, t in zip(slots, threads, strict=True):
        if s.seconds is not None:
            t.join(timeout_s)  # closes its session, so the server is free again on return
    server_cmd = f"`python -m tvm.exec.rpc_server --tracker {rpc.tracker} --key {rpc.key}`"
    problems = []
    for s in slots:
        if s.error is not None:
            where = f"RPC server {s.server}" if s.server else f"tracker {rpc.tracker}"
            problems.append(f"{where} (key {rpc.key!r}) failed a trivial session: {s.error}")
        elif s.seconds is None and s.server is not None:
            problems.append(
                f"RPC server {s.server} (key {rpc.key!r}) was handed out by the tracker but did "
                f"not complete a trivial session within {timeout_s:g}s "
                f"(hung, stopped or unreachable)"
            )
    if problems:
        raise DeviceError(
            "; ".join(problems) + f"; restart {server_cmd} on that device (a killed "
            f"server leaves the tracker at once, a hung one stays listed as free)"
        )
    done = tuple(ServerCheck(s.server, s.seconds) for s in slots if s.server is not None and s.seconds is not None)
    if not done:
        raise DeviceError(
            f"tracker {rpc.tracker} listed free servers for key {rpc.key!r} but handed none out "
            f"within {timeout_s:g}s (taken by another client?); retry, or start more {server_cmd}"
        )
    return done


def preflight(
    rpc: RpcRunner, measure: MeasureOptions | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Preflight:
    """Stop before the first trial unless the tracker can serve `rpc.devices` devices for `rpc.key`.

    In order: `session_timeout_s` holds one measurement (`rpclimits.
    check_session_timeout`, when `measure` is given); the tracker answers; it has at least `rpc.devices` free servers
    for the key; `rpc.devices` sessions opened at once each complete a remote
    call (workpath, upload, remove). Each failure is a DeviceError (exit 9)
    saying what the tracker has and what to change.
    """
    if measure is not None:
        check_session_timeout(rpc, measure)
    queue = tracker_summary(rpc.tracker_host, rpc.tracker_port, timeout_s)
    k = queue.get(rpc.key)
    if k.free < rpc.devices:
        raise _not_enough(rpc, queue)
    checked = check_servers(rpc, rpc.devices, timeout_s)
    # The servers re-register after their session (~0.1 s): leave the queue as found, if
    # no other client takes them meanwhile (then tuning waits for them anyway).
    deadline = time.monotonic() + min(timeout_s, 2.0)
    while time.monotonic() < deadline:
        now = tracker_summary(rpc.tracker_host, rpc.tracker_port, timeout_s)
        if now.get(rpc.key).free >= k.free:
            break
        time.sleep(0.02)
    return Preflight(tracker=queue.tracker, queue=k, checked=checked)
