"""`tvmtune-ci devices`: the real CLI in a subprocess against a real tracker and servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rpcfleet import DEFAULT_KEY, RpcFleet, free_port, start_fleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RpcFleet]:
    with start_fleet(tmp_path_factory.mktemp("fleet"), servers=2) as f:
        yield f


def devices(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "CI")}
    return subprocess.run(
        [sys.executable, "-m", "tvmtune_ci", "devices", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_text_table(fleet: RpcFleet, tmp_path: Path) -> None:
    r = devices(tmp_path, "--tracker", fleet.tracker)  # no tvmtune.yaml needed
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"tracker {fleet.tracker}"
    assert lines[1].split() == ["key", "free", "total", "pending", "servers"]
    row = lines[2].split(maxsplit=4)
    assert row[:4] == [DEFAULT_KEY, "2", "2", "0"]
    assert set(row[4].split(", ")) == {s.address for s in fleet.servers}


def test_json(fleet: RpcFleet, tmp_path: Path) -> None:
    r = devices(tmp_path, "--tracker", fleet.tracker, "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["format"] == 1 and data["tracker"] == fleet.tracker
    [key] = data["keys"]
    assert {k: key[k] for k in ("key", "free", "total", "pending")} == {
        "key": DEFAULT_KEY,
        "free": 2,
        "total": 2,
        "pending": 0,
    }
    assert sorted(key["servers"]) == sorted(s.address for s in fleet.servers)


def test_trackers_and_needs_come_from_tvmtune_yaml(fleet: RpcFleet, tmp_path: Path) -> None:
    (tmp_path / "tvmtune.yaml").write_text(f"""\
format: 1
targets:
  board:
    target: {{kind: llvm, mtriple: aarch64-linux-gnu}}
    runner: {{rpc: {{tracker: "{fleet.tracker}", key: {DEFAULT_KEY}, devices: 2}}}}
  phone:
    target: {{kind: llvm, mtriple: aarch64-linux-android}}
    runner: {{rpc: {{tracker: "{fleet.tracker}", key: pixel, devices: 1}}}}
  local:
    target: {{kind: llvm}}
""")
    r = devices(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"tracker {fleet.tracker}\n")
    assert f"target board: key '{DEFAULT_KEY}', devices: 2, 2 free: ok" in r.stdout
    assert "target phone: key 'pixel', devices: 1, 0 free: NOT ENOUGH" in r.stdout
    assert "local" not in r.stdout


def test_unreachable_tracker_exits_9(tmp_path: Path) -> None:
    tracker = f"127.0.0.1:{free_port()}"
    for fmt in ("text", "json"):
        r = devices(tmp_path, "--tracker", tracker, "--format", fmt)
        assert r.returncode == 9, r.stdout + r.stderr
        assert r.stdout == ""
        assert f"cannot reach the RPC tracker at {tracker}" in r.stderr
        assert "python -m tvm.exec.rpc_tracker" in r.stderr


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    r = devices(tmp_path, "--tracker", "nohost")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr
    (tmp_path / "tvmtune.yaml").write_text("targets:\n  cpu:\n    target: {kind: llvm}\n")
    r = devices(tmp_path)
    assert r.returncode == 2 and "no target in" in r.stderr and "--tracker" in r.stderr
