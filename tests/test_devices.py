"""tvmtune_ci.tune.devices against a real tracker and real rpc_server processes (tests/rpcfleet.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rpcfleet import DEFAULT_KEY, RpcFleet, free_port, rpc_fleet, start_fleet  # noqa: F401

from tvmtune_ci.core.configschema import MeasureOptions, RpcRunner
from tvmtune_ci.core.errors import DeviceError
from tvmtune_ci.tune.devices import KeyQueue, TrackerQueue, parse_summary, preflight, split_tracker, tracker_summary


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RpcFleet]:
    """Two servers for DEFAULT_KEY, shared by the tests that leave them as they found them."""
    with start_fleet(tmp_path_factory.mktemp("fleet"), servers=2) as f:
        yield f


# --------------------------------------------------------------------------- no processes


def test_importing_devices_does_not_import_tvm() -> None:
    code = "import sys, tvmtune_ci.tune.devices; assert 'tvm' not in sys.modules, 'tvm imported'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_parse_summary_counts_servers_per_key_and_drops_empty_keys() -> None:
    raw = {
        "queue_info": {
            "a": {"free": 1, "pending": 0},
            "b": {"free": 0, "pending": 2},
            "gone": {"free": 0, "pending": 0},
            "old-app": {"free": 1, "pending": 0},
        },
        "server_info": [
            {"key": "server:a", "addr": ["10.0.0.2", 9091]},
            {"key": "server:a", "addr": ["10.0.0.1", 9091]},
            {"key": "server:b", "addr": ["10.0.0.3", 9092]},
        ],
    }
    q = parse_summary("h:1", raw)
    assert [k.key for k in q.keys] == ["a", "b", "old-app"]
    assert q.get("a") == KeyQueue("a", free=1, total=2, pending=0, servers=("10.0.0.1:9091", "10.0.0.2:9091"))
    assert q.get("a").busy == 1
    assert (q.get("b").free, q.get("b").total, q.get("b").pending) == (0, 1, 2)
    assert q.get("old-app").total == 1  # free but never reported itself: still a server
    assert q.get("nope") == KeyQueue("nope", 0, 0, 0)
    assert q.to_json()["keys"][0] == {
        "key": "a",
        "free": 1,
        "total": 2,
        "pending": 0,
        "servers": ["10.0.0.1:9091", "10.0.0.2:9091"],
    }
    assert parse_summary("h:1", {"queue_info": {}, "server_info": []}) == TrackerQueue("h:1")


def test_session_timeout_must_outlast_the_measurement() -> None:
    from tvmtune_ci.tune.rpclimits import check_session_timeout

    rpc = RpcRunner(tracker="127.0.0.1:1", key="k", session_timeout_s=10)
    check_session_timeout(rpc, MeasureOptions(time_cap_s=2, timeout_s=12))  # 7.2 s + 1 s
    # A slow kernel may sample for 0.6 x timeout_s: 9.6 s + ~1 s does not fit in 10 s.
    with pytest.raises(
        DeviceError,
        match=r"session_timeout_s \(10s\).*cannot hold one measurement"
        r".*sampling may last 9.6s.*raise runner.rpc.session_timeout_s above 10.6",
    ):
        check_session_timeout(rpc, MeasureOptions(time_cap_s=2, timeout_s=16))
    # Checked before anything touches the (here unreachable) tracker.
    with pytest.raises(DeviceError, match="session_timeout_s"):
        preflight(rpc, MeasureOptions(time_cap_s=2, timeout_s=45))


def test_split_tracker() -> None:
    assert split_tracker("10.1.2.3:9190") == ("10.1.2.3", 9190)
    with pytest.raises(DeviceError, match="HOST:PORT"):
        split_tracker("10.1.2.3")


def test_unreachable_tracker_names_the_address_and_how_to_start_one() -> None:
    import tvm.rpc  # noqa: F401 - imported outside the timing

    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(DeviceError) as e:
        tracker_summary("127.0.0.1", port, timeout_s=2)
    assert time.monotonic() - t0 < 5  # not TVM's 60 s connect retry
    msg = str(e.value)
    assert f"127.0.0.1:{port}" in msg and "python -m tvm.exec.rpc_tracker" in msg
    assert e.value.exit_code == 9
    with pytest.raises(DeviceError, match=f"cannot reach the RPC tracker at 127.0.0.1:{port}"):
        preflight(RpcRunner(tracker=f"127.0.0.1:{port}", key="k"))


def test_a_port_that_is_no_tracker_is_told_apart() -> None:
    import tvm.rpc  # noqa: F401 - imported outside the timing

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(DeviceError, match="is not a TVM RPC tracker"):
            tracker_summary("127.0.0.1", port, timeout_s=0.5)
        assert time.monotonic() - t0 < 3


# --------------------------------------------------------------------------- shared fleet


def test_summary_shows_the_fleet(fleet: RpcFleet) -> None:
    q = fleet.summary()
    assert q.tracker == fleet.tracker
    k = q.get(DEFAULT_KEY)
    assert (k.free, k.total, k.pending) == (2, 2, 0)
    assert set(k.servers) == {s.address for s in fleet.servers}


def test_preflight_passes_when_the_fleet_is_big_enough(fleet: RpcFleet) -> None:
    result = preflight(fleet.rpc(devices=2), MeasureOptions(timeout_s=10), timeout_s=5)
    # Two sessions at once: each server answered one remote call.
    assert {c.server for c in result.checked} == {s.address for s in fleet.servers}
    assert result.queue.free == 2
    assert fleet.summary().get(DEFAULT_KEY).free == 2  # sessions closed, servers back


def test_preflight_stops_when_devices_exceed_the_fleet(fleet: RpcFleet) -> None:
    with pytest.raises(DeviceError) as e:
        preflight(fleet.rpc(devices=3))
    assert str(e.value).startswith(
        f"tracker {fleet.tracker} has 2 free servers for key '{DEFAULT_KEY}' (2 total, 0 pending); "
        f"tvmtune.yaml asks for devices: 3. "
    )
    start = f"python -m tvm.exec.rpc_server --tracker {fleet.tracker} --key {DEFAULT_KEY}"
    assert start in str(e.value)


def test_preflight_for_an_unknown_key_lists_what_the_tracker_has(fleet: RpcFleet) -> None:
    with pytest.raises(DeviceError) as e:
        preflight(fleet.rpc(devices=1, key="tvmtune-tst"))
    msg = str(e.value)
    assert "has 0 free servers for key 'tvmtune-tst' (0 total, 0 pending)" in msg
    assert f"Keys it has: '{DEFAULT_KEY}' (2 free / 2 total / 0 pending)" in msg
    assert f"Did you mean key '{DEFAULT_KEY}'?" in msg


def test_busy_servers_are_not_free(fleet: RpcFleet) -> None:
    from tvm import rpc

    tracker = rpc.connect_tracker("127.0.0.1", fleet.tracker_port)
    session = tracker.request(DEFAULT_KEY, priority=1, session_timeout=20)
    try:
        k = fleet.summary().get(DEFAULT_KEY)
        assert (k.free, k.total, k.busy) == (1, 2, 1)
        with pytest.raises(
            DeviceError,
            match=r"1 free server for key .* 1 of its servers is in "
            r"other sessions",
        ):
            preflight(fleet.rpc(devices=2))
    finally:
        del session
        tracker.close()
    fleet.wait_free(2, timeout_s=10)


# --------------------------------------------------------------------------- own fleet


def test_killed_server_drops_out_and_preflight_for_two_fails(rpc_fleet) -> None:  # noqa: F811
    fleet = rpc_fleet(servers=2)
    gone = fleet.servers[0].address
    seconds = fleet.kill_server(0)  # returns once the tracker no longer lists it
    assert seconds < 5
    k = fleet.summary().get(DEFAULT_KEY)
    assert (k.free, k.total, k.pending) == (1, 1, 0) and gone not in k.servers
    with pytest.raises(
        DeviceError,
        match=r"has 1 free server for key .*\(1 total, 0 pending\); "
        r"tvmtune.yaml asks for devices: 2",
    ):
        preflight(fleet.rpc(devices=2))
    assert preflight(fleet.rpc(devices=1)).checked[0].server == fleet.servers[1].address


@pytest.mark.slow
def test_hung_server_is_listed_free_but_preflight_finds_it(rpc_fleet) -> None:  # noqa: F811
    fleet = rpc_fleet(servers=1)
    fleet.pause_server(0)
    assert fleet.summary().get(DEFAULT_KEY).free == 1  # the tracker cannot tell
    t0 = time.monotonic()
    with pytest.raises(DeviceError) as e:
        preflight(fleet.rpc(devices=1), timeout_s=1.5)
    assert time.monotonic() - t0 < 8  # 1.5 s, plus a loaded machine's slack
    assert f"RPC server {fleet.servers[0].address} (key '{DEFAULT_KEY}')" in str(e.value)
    assert "did not complete a trivial session within 1.5s" in str(e.value)
    # Handed out once, the hung server stays busy in the tracker until it wakes up.
    assert fleet.summary().get(DEFAULT_KEY).free == 0
    fleet.resume_server(0)
    fleet.wait_free(1, timeout_s=15)


def test_a_registration_without_a_server_is_named(rpc_fleet) -> None:  # noqa: F811
    fleet = rpc_fleet(servers=0)
    ghost = fleet.add_ghost("board")
    assert fleet.summary().get("board").servers == (ghost,)
    with pytest.raises(DeviceError) as e:
        preflight(fleet.rpc(devices=1, key="board"), timeout_s=3)
    assert str(e.value).startswith(f"RPC server {ghost} (key 'board') failed a trivial session: ")
    assert f"Connect to {ghost} failed" in str(e.value)


def test_fleet_teardown_leaves_no_process(tmp_path: Path) -> None:
    import psutil
    from tvm import rpc

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    with start_fleet(tmp_path / "f", servers=1) as fleet:
        # A session open at teardown: its forked session process must go too.
        session = rpc.connect_tracker("127.0.0.1", fleet.tracker_port).request(DEFAULT_KEY)
        procs = [fleet.tracker_proc.pid, fleet.servers[0].proc.pid]  # type: ignore[union-attr]
        pids = procs + [c.pid for p in procs for c in psutil.Process(p).children(recursive=True)]
        assert len(pids) >= 5  # tracker + worker, server + worker + session
    del session
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)]
    assert list((tmp_path / "f").glob("*.log"))  # logs stay in the fleet's folder
