"""Tuning through RPC devices: a real tracker and real `rpc_server` processes on
127.0.0.1 (tests/rpcfleet.py), the small matmul of tests/commands/test_retune.py.

Both servers share this machine's cores, so the latencies are only fit to pick a
winner among themselves; what is checked is who measured what and how the run ends.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from conftest import commit_all, make_repo, run_cli
from rpcfleet import DEFAULT_KEY, RpcFleet, rpc_fleet  # noqa: F401 - the fixture
from small_mm import SMALL_MM

from tvmtune_ci.core.configschema import MeasureOptions, RpcRunner
from tvmtune_ci.core.errors import DeviceError, TuningError
from tvmtune_ci.core.tunetypes import BatchEvent
from tvmtune_ci.tune.tuner import TuneOutcome, TuneRequest, tune_workload

# Long (a real tracker and servers, several tunes: minutes); `make test` and CI run them, `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

tvm = pytest.importorskip("tvm")

from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402

TARGET = host_target()
FAST = MeasureOptions(
    sample_ms=2,
    precision=0.05,
    search_precision=0.1,
    search_cap_s=0.1,
    time_cap_s=0.5,
    usable_precision=10,
    finalists=2,
    timeout_s=20,
)


@pytest.fixture(scope="module")
def small_mm(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    import importlib.util

    path = tmp_path_factory.mktemp("ops") / "rpc_small_mm.py"
    path.write_text(SMALL_MM, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("rpc_small_mm", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tune(
    template: ModuleType, work_dir: Path, rpc: RpcRunner, measure: MeasureOptions = FAST, **kw: object
) -> TuneOutcome:
    return tune_workload(
        TuneRequest(
            template=template,
            workload_name="s64",
            target=TARGET,
            trials=16,
            batch_size=8,
            work_dir=work_dir,
            measure=measure,
            rpc=rpc,
            **kw,  # type: ignore[arg-type]
        )
    )


def _journal(work_dir: Path) -> list[dict[str, object]]:
    lines = (work_dir / "journal.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines[1:]]


def _check_valid(out: TuneOutcome) -> None:
    """Results are real, and a failed trial is never the winner."""
    assert out.trials.run == 16 and out.trials.valid + out.trials.failed == 16
    valid = [r for r in out.records if r["error"] is None]
    assert valid and all(r["latency_s"] and r["latency_s"] > 0 for r in valid)
    winners = [r for r in valid if r["knobs"] == {k: out.best.knobs[k] for k in r["knobs"]}]
    assert winners, "the winner must be a valid trial"
    assert 0 < out.best.latency_s < 1e-2 and out.best.gflops > 0


def test_tunes_on_two_devices_in_parallel(rpc_fleet, small_mm: ModuleType, tmp_path: Path) -> None:  # noqa: F811
    fleet: RpcFleet = rpc_fleet(servers=2)
    servers = {s.address for s in fleet.servers}
    out = _tune(small_mm, tmp_path / "work", fleet.rpc(devices=2))
    _check_valid(out)
    assert out.trials.failed == 0
    # Every trial names the server that measured it; both servers measured.
    assert {r["device"] for r in out.records} == servers
    assert set(out.devices) == servers and out.stats["devices_used"] == 2
    assert out.stats["device_retries"] == 0
    # The journal (what a resume reads) keeps the device too.
    assert [e["device"] for e in _journal(tmp_path / "work")] == [r["device"] for r in out.records]
    fleet.wait_free(2)  # every session was closed: the servers are free again


def _kill_when_in_session(fleet: RpcFleet, index: int, timeout_s: float = 60.0) -> threading.Thread:
    """A thread that SIGKILLs server `index` while it is in a session: a device lost
    mid-measurement. Its log says "connected from" more often than "finish serving"
    then; the server is stopped (SIGSTOP) before the log is read again, so that the
    session cannot end between that reading and the kill."""
    log = fleet.servers[index].log

    def in_session() -> bool:
        text = log.read_text(errors="replace")
        return text.count("connected from") > text.count("finish serving")

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if in_session():
                fleet.pause_server(index)
                if in_session():
                    fleet.kill_server(index, wait=False)
                    return
                fleet.resume_server(index)
            time.sleep(0.001)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_losing_a_device_mid_run_retries_on_the_other_and_finishes(
    rpc_fleet,  # noqa: F811
    small_mm: ModuleType,
    tmp_path: Path,
) -> None:
    """Server 0 is killed while it measures (during batch 2): that measurement is
    retried once on server 1, and the run finishes there. (It finishes rather than
    stops because a device is left: every later session goes to server 1.)"""
    fleet: RpcFleet = rpc_fleet(servers=2)
    lost, left = fleet.servers[0].address, fleet.servers[1].address
    watchers: list[threading.Thread] = []

    def on_batch(e: BatchEvent) -> None:
        if e.batch == 1:
            watchers.append(_kill_when_in_session(fleet, 0))

    # Longer runs (>= 60 ms a measurement) so that the kill lands inside a session.
    slow = replace(FAST, sample_ms=20)
    out = _tune(small_mm, tmp_path / "work", fleet.rpc(devices=2), slow, on_batch=on_batch)
    watchers[0].join(5)
    assert fleet.servers[0].state == "killed"
    _check_valid(out)
    batch1 = [r for r in out.records if r["batch"] == 1]
    batch2 = [r for r in out.records if r["batch"] == 2]
    assert {r["device"] for r in batch1} == {lost, left}
    # The measurement in flight on the killed server was measured again on the other.
    assert out.stats["device_retries"] >= 1
    # After the kill everything went to the surviving server; a measurement that still
    # failed is a failure (never the winner, see _check_valid), not a lost trial.
    assert batch2[-1]["device"] == left
    for r in batch2:
        assert r["device"] in (lost, left)
        if r["error"] is not None:
            assert "RPCRunner" in r["error"] and r["latency_s"] is None
    assert set(out.devices) == {lost, left} and out.stats["devices_used"] == 2
    assert fleet.summary().get(DEFAULT_KEY).servers == (left,)


def test_every_device_lost_stops_cleanly(rpc_fleet, small_mm: ModuleType, tmp_path: Path) -> None:  # noqa: F811
    """Both servers killed after batch 1 (search.FIRST_BATCH: 4 random draws):
    batch 2 cannot measure anything, so the run stops with a TuningError (no log of
    failures); the journal keeps batch 1."""
    fleet: RpcFleet = rpc_fleet(servers=2)

    def on_batch(e: BatchEvent) -> None:
        if e.batch == 1:
            fleet.kill_server(0)
            fleet.kill_server(1)

    rpc = fleet.rpc(devices=2, session_timeout_s=3)
    t0 = time.monotonic()
    quick = replace(FAST, timeout_s=3)  # a session of 3 s holds 1.8 s of sampling
    with pytest.raises(TuningError) as err:
        _tune(small_mm, tmp_path / "work", rpc, quick, on_batch=on_batch)
    msg = str(err.value)
    assert f"key {DEFAULT_KEY!r} at tracker {fleet.tracker}" in msg
    assert re.search(r"all [1-8] measurements of a batch \(after 4 trials\) failed", msg), msg
    assert "no server" in msg and "tvmtune-ci devices" in msg
    # The first failures find the tracker empty; the rest of the batch fails at once.
    assert time.monotonic() - t0 < 60
    assert len(_journal(tmp_path / "work")) == 4
    # Devices back (new servers, new addresses): a rerun resumes after batch 1.
    fleet.add_servers(2)
    out = _tune(small_mm, tmp_path / "work", fleet.rpc(devices=2), quick)  # same settings: resumes
    _check_valid(out)
    assert out.stats["resumed"] == 4 and out.stats["search_trials"] == 12
    new = {s.address for s in fleet.live()}
    assert {r["device"] for r in out.records[4:]} <= new and out.stats["devices_used"] >= 3


def test_journal_of_other_hardware_is_not_resumed(small_mm: ModuleType, tmp_path: Path) -> None:
    from tvmtune_ci.tune.journal import request_fingerprint

    def fp(rpc: RpcRunner | None) -> str:
        req = TuneRequest(template=small_mm, workload_name="s64", target=TARGET, trials=16, work_dir=tmp_path)
        return request_fingerprint(replace(req, rpc=rpc))

    local = fp(None)
    board = fp(RpcRunner(tracker="10.0.0.1:9190", key="board", devices=2))
    assert board != local and board != fp(RpcRunner(tracker="10.0.0.1:9190", key="other"))
    # Another tracker address or device count for the same key: the same hardware.
    assert board == fp(RpcRunner(tracker="10.0.0.2:9191", key="board", devices=4))


def test_a_hung_only_device_stops_with_a_clear_error(
    rpc_fleet,  # noqa: F811
    small_mm: ModuleType,
    tmp_path: Path,
) -> None:
    """The only server is stopped (SIGSTOP: still listed as free): nothing answers the
    numerics check, which runs on the device before anything is measured; the client
    gives up after 2 x session_timeout_s + grace and the run stops before searching,
    naming the tracker, the key and the server."""
    fleet: RpcFleet = rpc_fleet(servers=1)
    fleet.pause_server(0)
    rpc = fleet.rpc(devices=1, session_timeout_s=1.5)
    t0 = time.monotonic()
    with pytest.raises(DeviceError) as err:
        _tune(small_mm, tmp_path / "work", rpc, replace(FAST, time_cap_s=0.3, timeout_s=0.8))
    assert time.monotonic() - t0 < 60
    msg = str(err.value)
    assert f"key {DEFAULT_KEY!r} at tracker {fleet.tracker}" in msg
    assert f"server {fleet.servers[0].address}" in msg and "timeout" in msg
    assert "numerics check" in msg
    assert not (tmp_path / "work" / "journal.jsonl").exists()  # stopped before the search


def test_numerics_are_checked_on_the_device(rpc_fleet, small_mm: ModuleType) -> None:  # noqa: F811
    """The correctness check runs where the kernel is measured: through a session on a
    device of the key, and a wrong result names that device."""
    from tvmtune_ci.tune.numerics import check_correct

    fleet: RpcFleet = rpc_fleet(servers=1)
    rpc = fleet.rpc(devices=1)
    check_correct(small_mm, "s64", TARGET, rpc=rpc)
    wrong = ModuleType("wrong_mm")
    wrong.__dict__.update(small_mm.__dict__)
    wrong.reference = lambda A, B: A @ B + 1.0  # type: ignore[attr-defined]
    with pytest.raises(TuningError) as err:
        check_correct(wrong, "s64", TARGET, rpc=rpc)
    assert f"does not match reference() on server {fleet.servers[0].address}" in str(err.value)


@pytest.mark.tool("aarch64-linux-gnu-gcc")
def test_a_cross_compiled_target_never_runs_on_the_host(
    rpc_fleet,  # noqa: F811
    small_mm: ModuleType,
) -> None:
    """An aarch64 target is cross-compiled and linked here: without an RPC runner its
    numerics are refused (never run on this x86 host); with one, the aarch64 library is
    uploaded and the x86 loopback server cannot load it, which is the device's error."""
    from tvmtune_ci.core.errors import HostError
    from tvmtune_ci.tune.numerics import check_correct

    arm = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}
    with pytest.raises(HostError, match="RPC runner"):
        check_correct(small_mm, "s64", arm)
    fleet: RpcFleet = rpc_fleet(servers=1)
    with pytest.raises(DeviceError) as err:
        check_correct(small_mm, "s64", arm, rpc=fleet.rpc(devices=1))
    msg = str(err.value)
    assert f"server {fleet.servers[0].address}, load:" in msg, msg


def test_session_timeout_must_hold_a_measurement(rpc_fleet, small_mm: ModuleType) -> None:  # noqa: F811
    from tvmtune_ci.tune.runners import make_runner

    fleet: RpcFleet = rpc_fleet(servers=0)
    with pytest.raises(DeviceError, match=r"session_timeout_s \(1s\).*cannot hold one measurement"):
        make_runner(replace(FAST, time_cap_s=2), fleet.rpc(session_timeout_s=1))
    with pytest.raises(DeviceError, match="has no server for key 'nope'"):
        make_runner(FAST, fleet.rpc(devices=1, key="nope"))


CONFIG = """\
format: 1
trials: 16
batch_size: 8
measure: {{sample_ms: 2, precision: 0.05, search_precision: 0.1, search_cap_s: 0.1, time_cap_s: 0.5, usable_precision: 10, history_s: 1}}
targets:
  host:
    target: {target}
    runs-on: [linux, x64]
    runner: {{rpc: {{tracker: "{tracker}", key: {key}, devices: 2, session_timeout_s: 60}}}}
"""


def test_retune_command_through_rpc_devices(rpc_fleet, tmp_path: Path) -> None:  # noqa: F811
    fleet: RpcFleet = rpc_fleet(servers=2)
    config = CONFIG.format(target=json.dumps(TARGET), tracker=fleet.tracker, key=DEFAULT_KEY)
    root = make_repo(tmp_path, config=config, files={"operators/mm.py": SMALL_MM}, operators=False)
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    folder = root / "tuning_logs" / "mm" / "host"
    m = json.loads((folder / "manifest.json").read_text())
    assert m["host"]["runner"] == f"rpc {DEFAULT_KEY}@{fleet.tracker} x2"
    assert m["host"]["devices"] == sorted(s.address for s in fleet.servers)  # both measured
    assert m["trials"]["s64"]["run"] == 16 and m["trials"]["s64"]["valid"] > 0
    assert (folder / m["log"]).is_file()
    commit_all(root, "tuned")
    check = run_cli(root, "check")
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
def test_a_set_whose_devices_are_gone_is_carried_forward_after_an_edit_that_changed_no_kernel(
    rpc_fleet,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A carry forward measures nothing, so it needs no device: with the tracker and its
    servers gone, a dead statement in the template still carries the set forward (exit
    0, `check` fresh); an edit that opens a knob value must be measured, and the
    tracker's refusal stands (exit 9), the set untouched."""
    fleet: RpcFleet = rpc_fleet(servers=2)
    config = CONFIG.format(target=json.dumps(TARGET), tracker=fleet.tracker, key=DEFAULT_KEY)
    root = make_repo(tmp_path, config=config, files={"operators/mm.py": SMALL_MM}, operators=False)
    r = run_cli(root, "retune", "--commit")
    assert r.returncode == 0, r.stdout + r.stderr
    fleet.close()
    folder = root / "tuning_logs" / "mm" / "host"
    log = json.loads((folder / "manifest.json").read_text())["log"]
    before = (folder / log).read_bytes()

    def edit(old: str, new: str) -> None:
        path = root / "operators/mm.py"
        path.write_text(path.read_text().replace(old, new))
        commit_all(root, "edit the template")

    edit('    b = sch.get_sblock("C")\n', '    b = sch.get_sblock("C")\n    _unused = None  # a no-op edit\n')
    r = run_cli(root, "retune", "--commit")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trying to carry the set forward first, which measures nothing" in r.stdout, r.stdout
    assert "mm/host/s64: carried forward, 0 trials" in r.stdout, r.stdout
    m = json.loads((folder / "manifest.json").read_text())
    assert m["carried"]["sentence"].startswith("the template edit changed none of the ")
    assert (folder / log).read_bytes() == before
    assert run_cli(root, "check").returncode == 0
    # A knob value opened: it must be measured, and there is nothing to measure on.
    edit('define_knob("unroll", [0, 16])', 'define_knob("unroll", [0, 16, 64])')
    manifest = (folder / "manifest.json").read_bytes()
    r = run_cli(root, "retune", "--commit")
    assert r.returncode == 9, r.stdout + r.stderr
    assert "not carried forward" in r.stdout and "tracker" in r.stderr, r.stdout + r.stderr
    assert (folder / "manifest.json").read_bytes() == manifest and (folder / log).read_bytes() == before
