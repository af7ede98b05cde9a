from __future__ import annotations

import os
from pathlib import Path

import pytest

from tvmtune_ci import publish as pub


def _set(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_first_publish_creates_folder(tmp_path: Path) -> None:
    folder = tmp_path / "matmul" / "cpu"
    p = pub.publish(folder, {"manifest.json": b"{}", "matmul_cpu_2026-01-02.json": b"log"})
    assert _set(folder) == {"manifest.json": b"{}", "matmul_cpu_2026-01-02.json": b"log"}
    assert p.archived == {}
    assert {x.name for x in p.changed_paths} == {"manifest.json", "matmul_cpu_2026-01-02.json"}


def test_old_set_is_archived_with_its_date_and_never_overwritten(tmp_path: Path) -> None:
    folder = tmp_path / "matmul" / "cpu"
    pub.publish(folder, {"manifest.json": b"m1", "matmul_cpu_2025-01-02.json": b"log1", "README.md": b"r1"})
    pub.publish(folder, {"manifest.json": b"m2", "matmul_cpu_2026-01-02.json": b"log2", "README.md": b"r2"})
    files = _set(folder)
    assert files["matmul_cpu_2025-01-02.json.bak"] == b"log1"
    assert files["manifest_2025-01-02.json.bak"] == b"m1"
    assert files["README_2025-01-02.md.bak"] == b"r1"
    assert files["manifest.json"] == b"m2" and files["matmul_cpu_2026-01-02.json"] == b"log2"
    assert "matmul_cpu_2025-01-02.json" not in files
    # Same-day re-tune: the earlier .bak of that day is kept, the new one numbered.
    pub.publish(folder, {"manifest.json": b"m3", "matmul_cpu_2026-01-02.json": b"log3", "README.md": b"r3"})
    pub.publish(folder, {"manifest.json": b"m4", "matmul_cpu_2026-01-02.json": b"log4", "README.md": b"r4"})
    files = _set(folder)
    assert files["matmul_cpu_2026-01-02.json.bak"] == b"log2"
    assert files["matmul_cpu_2026-01-02.json.2.bak"] == b"log3"
    assert files["matmul_cpu_2025-01-02.json.bak"] == b"log1"
    assert files["matmul_cpu_2026-01-02.json"] == b"log4"
    assert not any(p.name.startswith(".") for p in folder.parent.iterdir())


@pytest.mark.parametrize("fail_at", ["write", "exchange"])
def test_failure_before_the_swap_leaves_the_old_set_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: str) -> None:
    folder = tmp_path / "matmul" / "cpu"
    pub.publish(folder, {"manifest.json": b"m1", "matmul_cpu_2025-01-02.json": b"log1"})
    before = _set(folder)

    class Killed(Exception):
        pass

    if fail_at == "write":
        real_fsync = os.fsync
        calls = {"n": 0}

        def fsync(fd: int) -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                raise Killed
            real_fsync(fd)

        monkeypatch.setattr(pub.os, "fsync", fsync)
    else:
        def boom(a: Path, b: Path) -> bool:
            raise Killed

        monkeypatch.setattr(pub, "_exchange", boom)
    with pytest.raises(Killed):
        pub.publish(folder, {"manifest.json": b"m2", "matmul_cpu_2026-01-02.json": b"log2"})
    assert _set(folder) == before
    monkeypatch.undo()
    # The next publish cleans the staging folder up and succeeds.
    pub.publish(folder, {"manifest.json": b"m2", "matmul_cpu_2026-01-02.json": b"log2"})
    assert _set(folder)["manifest.json"] == b"m2"
    assert not pub.staging_folder(folder).exists()


def test_fallback_without_renameat2_is_recovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "op" / "t"
    pub.publish(folder, {"manifest.json": b"m1"})
    # Simulate a kill between the two renames of the fallback path: only the
    # staging folder (the complete new set) exists.
    staging = pub.staging_folder(folder)
    staging.mkdir()
    (staging / "manifest.json").write_bytes(b"m2")
    (staging / "manifest_undated.json.bak").write_bytes(b"m1")
    old = folder.with_name(f".{folder.name}.tvmtune-old")
    os.replace(folder, old)
    pub.recover(folder)
    assert (folder / "manifest.json").read_bytes() == b"m2"
