"""Real TVM RPC fleets for tests: one tracker and N `rpc_server` processes on 127.0.0.1.

    from rpcfleet import rpc_fleet  # noqa: F401  (the fixture; or start_fleet / RpcFleet)

    def test_something(rpc_fleet):
        fleet = rpc_fleet(servers=2)            # tracker + 2 servers, registered and free
        rpc = fleet.rpc(devices=2)              # tvmtune_ci.core.config.RpcRunner pointing at it
        fleet.kill_server(0)                    # SIGKILL; returns once the tracker dropped it
        fleet.pause_server(1)                   # SIGSTOP: a hung board, still listed as free
        fleet.add_ghost()                       # a registration whose server is gone

Every process is started as `python -m tvm.exec.rpc_tracker` / `rpc_server` with
sys.executable, in its own process group (TVM's server runs its listen loop in a
PopenWorker child, and each session in a forked grandchild: killing the group is
the only way to take a server down for real). Ports are free ports picked by
the OS, retried when taken in between. TMPDIR of the servers (session work dirs)
and every log lie under the fleet's folder. `close()` (the fixture calls it)
SIGKILLs every group; a finalizer does the same if a test forgets.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tvmtune_ci.core.configschema import RpcRunner
from tvmtune_ci.core.errors import DeviceError
from tvmtune_ci.tune.devices import TrackerQueue, tracker_summary

HOST = "127.0.0.1"
DEFAULT_KEY = "tvmtune-test"
READY_TIMEOUT_S = 30.0
_BIND_FAILED = ("cannot bind", "Address already in use")


def free_port(host: str = HOST) -> int:
    """A port the OS considers free now (another process may take it before we bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _kill_groups(pgids: list[int]) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class FleetServer:
    index: int
    key: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    state: str = "running"  # running | paused | killed

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


class RpcFleet:
    """A tracker and its servers. Use `start_fleet()` or the `rpc_fleet` fixture."""

    def __init__(self, root: Path, *, no_fork: bool = False, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.root = root
        self.no_fork = no_fork
        self.ready_timeout_s = ready_timeout_s
        self.tracker_port = 0
        self.tracker_proc: subprocess.Popen[bytes] | None = None
        self.servers: list[FleetServer] = []
        self._ghosts: list[socket.socket] = []
        self._pgids: list[int] = []
        self._tmp = root / "tmp"
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._finalizer = weakref.finalize(self, _kill_groups, self._pgids)

    # ---------------------------------------------------------------- addresses

    @property
    def tracker(self) -> str:
        """`127.0.0.1:PORT`, as `runner.rpc.tracker` and `--tracker` take it."""
        return f"{HOST}:{self.tracker_port}"

    def rpc(self, devices: int | None = None, key: str | None = None, session_timeout_s: float = 60.0) -> RpcRunner:
        """An RpcRunner config for this fleet (devices: the live servers of the key)."""
        key = key or self._default_key()
        n = devices if devices is not None else len(self.live(key))
        return RpcRunner(tracker=self.tracker, key=key, devices=n, session_timeout_s=session_timeout_s)

    def live(self, key: str | None = None) -> list[FleetServer]:
        """Servers not killed (paused ones included: the tracker still lists them)."""
        return [s for s in self.servers if s.state != "killed" and (key is None or s.key == key)]

    def _default_key(self) -> str:
        return self.servers[0].key if self.servers else DEFAULT_KEY

    # ---------------------------------------------------------------- processes

    def _spawn(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        env = dict(os.environ, TMPDIR=str(self._tmp), PYTHONUNBUFFERED="1")
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
                start_new_session=True,
            )
        self._pgids.append(proc.pid)
        return proc

    def start_tracker(self, attempts: int = 5) -> None:
        """Start the tracker and return once it answers a summary."""
        log = self.root / "tracker.log"
        for _ in range(attempts):
            port = free_port()
            proc = self._spawn(
                ["tvm.exec.rpc_tracker", "--host", HOST, "--port", str(port), "--port-end", str(port + 1)], log
            )
            deadline = time.monotonic() + self.ready_timeout_s
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                try:
                    tracker_summary(HOST, port, timeout_s=2.0)
                except DeviceError:
                    time.sleep(0.05)
                    continue
                self.tracker_port, self.tracker_proc = port, proc
                return
            if proc.poll() is None:
                self._kill(proc)
                raise RuntimeError(f"the tracker did not answer within {self.ready_timeout_s:g}s\n{self.logs()}")
            if not any(m in log.read_text(errors="replace") for m in _BIND_FAILED):
                raise RuntimeError(f"the tracker exited with {proc.returncode}\n{self.logs()}")
        raise RuntimeError(f"no free port for the tracker after {attempts} tries\n{self.logs()}")

    def _spawn_server(self, index: int, key: str) -> FleetServer:
        port = free_port()
        log = self.root / f"server-{index}.log"
        args = [
            "tvm.exec.rpc_server",
            "--tracker",
            self.tracker,
            "--key",
            key,
            "--host",
            HOST,
            "--port",
            str(port),
            "--port-end",
            str(port + 1),
        ]
        if self.no_fork:
            args.append("--no-fork")
        return FleetServer(index=index, key=key, port=port, proc=self._spawn(args, log), log=log)

    def add_servers(
        self, n: int = 1, key: str = DEFAULT_KEY, wait: bool = True, attempts: int = 5
    ) -> list[FleetServer]:
        """Start `n` servers for `key` in parallel; with `wait`, return once all are free."""
        if self.tracker_proc is None:
            raise RuntimeError("start the tracker first (start_fleet does)")
        new = [self._spawn_server(len(self.servers) + i, key) for i in range(n)]
        self.servers.extend(new)
        if not wait:
            return new
        deadline = time.monotonic() + self.ready_timeout_s
        retries = 0
        while True:
            for s in new:  # a server that lost its port to another process: start it again
                if s.proc.poll() is None:
                    continue
                text = s.log.read_text(errors="replace")
                if retries >= attempts or not any(m in text for m in _BIND_FAILED):
                    raise RuntimeError(f"rpc_server {s.index} exited with {s.proc.returncode}\n{self.logs()}")
                retries += 1
                again = self._spawn_server(s.index, key)
                s.port, s.proc = again.port, again.proc
            q = self.summary().get(key)
            if {s.address for s in new} <= set(q.servers) and q.free >= len(self.live(key)):
                return new
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"servers {[s.address for s in new]} did not register with "
                    f"{self.tracker} within {self.ready_timeout_s:g}s; tracker "
                    f"has {q.describe()}\n{self.logs()}"
                )
            time.sleep(0.05)

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def kill_server(self, index: int = 0, wait: bool = True) -> float:
        """SIGKILL server `index` and its children (a crash, a board unplugged cleanly).

        With `wait`, returns once the tracker no longer lists it: the seconds it took
        (the tracker drops a dead server as soon as its connection closes).
        """
        s = self.servers[index]
        t0 = time.monotonic()
        self._kill(s.proc)
        s.state = "killed"
        if wait:
            self.wait_until(
                lambda q: s.address not in q.get(s.key).servers, f"the tracker to drop killed server {s.address}"
            )
        return time.monotonic() - t0

    def pause_server(self, index: int = 0) -> None:
        """SIGSTOP server `index`: a hung device. The tracker keeps it as free."""
        os.killpg(self.servers[index].proc.pid, signal.SIGSTOP)
        self.servers[index].state = "paused"

    def resume_server(self, index: int = 0) -> None:
        os.killpg(self.servers[index].proc.pid, signal.SIGCONT)
        self.servers[index].state = "running"

    def add_ghost(self, key: str = DEFAULT_KEY) -> str:
        """Register a server that does not exist; returns its "host:port" (nothing listens).

        What a board that lost power leaves in a remote tracker: its tracker
        connection never closed, so it stays listed as free, and a session on it
        fails at connect. Stays registered until `close()`.
        """
        from tvm.rpc import base

        port = free_port()
        sock = socket.create_connection((HOST, self.tracker_port), timeout=5)
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        base.recvall(sock, 4)
        base.sendjson(sock, [base.TrackerCode.UPDATE_INFO, {"key": f"server:{key}", "addr": [HOST, port]}])
        base.recvjson(sock)
        base.sendjson(sock, [base.TrackerCode.PUT, key, [port, f"{key}:ghost{port}"], HOST])
        base.recvjson(sock)
        self._ghosts.append(sock)
        return f"{HOST}:{port}"

    # ---------------------------------------------------------------- tracker

    def summary(self, timeout_s: float = 5.0) -> TrackerQueue:
        return tracker_summary(HOST, self.tracker_port, timeout_s=timeout_s)

    def wait_until(
        self, cond: Callable[[TrackerQueue], bool], what: str, timeout_s: float | None = None
    ) -> TrackerQueue:
        """Poll the summary until `cond` holds; RuntimeError (with logs) after `timeout_s`."""
        deadline = time.monotonic() + (timeout_s or self.ready_timeout_s)
        while True:
            q = self.summary()
            if cond(q):
                return q
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"timed out waiting for {what}; tracker {self.tracker} has {q.describe()}\n{self.logs()}"
                )
            time.sleep(0.05)

    def wait_free(self, n: int | None = None, key: str | None = None, timeout_s: float | None = None) -> TrackerQueue:
        """Until the key has `n` free servers (default: every live one), e.g. after a session."""
        key = key or self._default_key()
        want = n if n is not None else len(self.live(key))
        return self.wait_until(lambda q: q.get(key).free == want, f"{want} free servers for key {key!r}", timeout_s)

    # ---------------------------------------------------------------- teardown

    def logs(self, tail: int = 20) -> str:
        out = []
        for log in sorted(self.root.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def close(self) -> None:
        """SIGKILL every process group (paused ones too) and reap the processes."""
        for sock in self._ghosts:
            sock.close()
        self._ghosts.clear()
        _kill_groups(self._pgids)
        for p in [self.tracker_proc, *(s.proc for s in self.servers)]:
            if p is not None:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        self._pgids.clear()

    def __enter__(self) -> RpcFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_fleet(
    root: Path,
    servers: int = 2,
    key: str = DEFAULT_KEY,
    *,
    no_fork: bool = False,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> RpcFleet:
    """A tracker and `servers` servers for `key`, all registered and free on return.

    The tracker is started first and awaited: a server that finds no tracker
    waits 5 s before retrying (TVM's connect_with_retry). About 2-3 s in all.
    """
    root.mkdir(parents=True, exist_ok=True)
    fleet = RpcFleet(root, no_fork=no_fork, ready_timeout_s=ready_timeout_s)
    try:
        fleet.start_tracker()
        if servers:
            fleet.add_servers(servers, key)
    except BaseException:
        fleet.close()
        raise
    return fleet


@pytest.fixture
def rpc_fleet(tmp_path: Path) -> Iterator[Callable[..., RpcFleet]]:
    """Factory: `rpc_fleet(servers=2, key=DEFAULT_KEY, no_fork=False)` -> a started RpcFleet.

    Every fleet it made is torn down after the test.
    """
    fleets: list[RpcFleet] = []

    def make(
        servers: int = 2, key: str = DEFAULT_KEY, *, no_fork: bool = False, ready_timeout_s: float = READY_TIMEOUT_S
    ) -> RpcFleet:
        fleet = start_fleet(
            tmp_path / f"rpcfleet-{len(fleets)}", servers, key, no_fork=no_fork, ready_timeout_s=ready_timeout_s
        )
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()
