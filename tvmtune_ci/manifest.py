"""The manifest beside each log: where the log came from, versioned (`format: 1`).

`manifest.json` is also the commit point of a re-tune: a log set is the files the
manifest names, with the hashes it records. See `layout.py` for the file names.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import CorruptFileError
from .fsutil import atomic_write_json

MANIFEST_FORMAT = 1
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class Measured:
    """One configuration's knob values and its measured latency."""

    knobs: dict[str, Any]
    latency_s: float
    gflops: float | None = None


@dataclass(frozen=True)
class WorkloadResult:
    best: Measured
    baseline: Measured  # the default configuration
    # Top configurations, best first (for the README); at most 10.
    top: tuple[Measured, ...] = ()
    space_size: int = 0  # points in all design spaces together
    design_spaces: int = 1
    # (trial index, best-so-far GFLOPS) per measured trial: the tuning curve.
    curve: tuple[tuple[int, float], ...] = ()
    # A previous log's best re-measured on this machine, when one was compared.
    previous_best: Measured | None = None

    @property
    def speedup(self) -> float:
        return self.baseline.latency_s / self.best.latency_s


@dataclass(frozen=True)
class Trials:
    requested: int
    run: int
    valid: int
    failed: int
    stop_reason: str  # "budget", "early_stop", "space_exhausted"
    failures: dict[str, int] = field(default_factory=dict)  # error kind -> count


@dataclass(frozen=True)
class Manifest:
    operator: str
    target_name: str
    target: dict[str, Any]  # canonical dict
    log: str  # file name of the log, in the same folder
    log_sha256: str
    fingerprint: str
    dependencies: dict[str, str]  # "path/to/file.py:qualname" -> hash
    workloads: dict[str, dict[str, Any]]
    tvm_version: str
    tuned_on: str  # YYYY-MM-DD
    seed: int
    trials: dict[str, Trials]  # per workload
    results: dict[str, WorkloadResult]  # per workload
    measure: dict[str, Any]
    template_file: str  # relative to repo root
    template_commit: str | None = None
    host: dict[str, Any] = field(default_factory=dict)  # cpu model, cores, runner kind, devices
    files: dict[str, str] = field(default_factory=dict)  # other files of the set -> sha256
    format: int = MANIFEST_FORMAT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path) -> Manifest:
        if not isinstance(data, dict):
            raise CorruptFileError(f"{path}: not a JSON object; inspect it or delete it and re-tune")
        fmt = data.get("format")
        if fmt != MANIFEST_FORMAT:
            raise CorruptFileError(f"{path}: manifest format {fmt!r} is not understood (this tvmtune-ci reads format {MANIFEST_FORMAT}); upgrade tvmtune-ci or re-tune")
        try:
            d = dict(data)
            d["trials"] = {w: Trials(**t) for w, t in d["trials"].items()}
            d["results"] = {
                w: WorkloadResult(
                    best=Measured(**r["best"]),
                    baseline=Measured(**r["baseline"]),
                    top=tuple(Measured(**m) for m in r.get("top", ())),
                    space_size=r.get("space_size", 0),
                    design_spaces=r.get("design_spaces", 1),
                    curve=tuple((int(a), float(b)) for a, b in r.get("curve", ())),
                    previous_best=Measured(**r["previous_best"]) if r.get("previous_best") else None,
                )
                for w, r in d["results"].items()
            }
            return cls(**d)
        except (KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(f"{path}: manifest is missing or has wrong fields ({e}); inspect it or delete it and re-tune") from None


def read_manifest(path: Path) -> Manifest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(f"{path}: cannot parse manifest ({e}); inspect it or delete it and re-tune") from None
    return Manifest.from_json(data, path)


def write_manifest(path: Path, manifest: Manifest) -> None:
    atomic_write_json(path, manifest.to_json())
