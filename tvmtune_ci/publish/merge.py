"""Merge logs measured on several devices of one kind: the best record per configuration.

Logs from different targets are never merged: a configuration that is best on a
phone says nothing about a board, and MetaSchedule's database would not tell
them apart (it ignores the target on lookup). Reads and writes JSON only; no TVM.
"""

from __future__ import annotations

import json
import math
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import CorruptFileError, UsageError
from ..core.records import GENERATED_BY, LOG_FORMAT, read_log, record_mean_secs, render_log
from ..core.targets import canonical_target, target_json


@dataclass(frozen=True)
class MergeResult:
    log: dict[str, Any]
    records_in: int
    records_out: int  # distinct configurations kept
    replaced: int  # configurations measured more than once; the faster kept


# A log is a few MB; anything far bigger is not one (and must not be read whole).
MAX_LOG_BYTES = 512 << 20
_FIX = "pass logs that `tvmtune-ci retune` wrote (tuning_logs/<operator>/<target>/<operator>_<target>_<date>.json)"


def _read(path: Path) -> dict[str, Any]:
    """The log at `path`, or UsageError (exit 2) naming the file and the fix."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; {_FIX}") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e.strerror}); {_FIX}") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UsageError(f"{path} is {what}, not a tuning log; {_FIX}")
    if st.st_size > MAX_LOG_BYTES:
        raise UsageError(f"{path} is {st.st_size >> 20} MiB, too big for a tuning log; {_FIX}")
    try:
        log = read_log(path)
    except CorruptFileError as e:
        why = str(e).removeprefix(f"{path}: ").split("; inspect it")[0]
        raise UsageError(f"{path} is not a tvmtune-ci tuning log ({why}); {_FIX}") from None
    for name, w in log["workloads"].items():
        for i, rec in enumerate(w["records"]):
            secs = rec[1]
            if not (
                isinstance(secs, list)
                and secs
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in secs)
            ):
                raise UsageError(
                    f"{path}: workload {name!r} record {i} has run_secs {secs!r}, not a list of "
                    f"seconds; the log was edited by hand: restore it from git, then {_FIX}"
                )
    return log


def _config_key(record: list[Any]) -> str:
    # A record's trace (instructions + decisions) is its configuration.
    return json.dumps(record[0], sort_keys=True, separators=(",", ":"))


def merge_logs(paths: Sequence[Path]) -> MergeResult:
    if len(paths) < 2:
        raise UsageError("merge needs at least two logs")
    logs = [(Path(p), _read(Path(p))) for p in paths]
    first_path, first = logs[0]
    target = canonical_target(first["target"])
    for path, log in logs[1:]:
        if canonical_target(log["target"]) != target:
            raise UsageError(
                f"{path} was tuned for {target_json(log['target'])} but {first_path} for {target_json(target)}; "
                "only logs of the same target (devices of one kind) can be merged"
            )
        if log["operator"] != first["operator"]:
            raise UsageError(
                f"{path} is a log of {log['operator']!r}, {first_path} of {first['operator']!r}; merge logs of one operator"
            )
    workloads: dict[str, Any] = {}
    n_in = replaced = 0
    for path, log in logs:
        for name, w in log["workloads"].items():
            cur = workloads.setdefault(name, {"workload": w["workload"], "records": {}, "failures": []})
            if cur["workload"] != w["workload"]:
                raise UsageError(
                    f"{path}: workload {name!r} differs from the one in {first_path} (another template version); re-tune instead of merging"
                )
            for rec in w["records"]:
                n_in += 1
                key = _config_key(rec)
                old = cur["records"].get(key)
                if old is not None:
                    replaced += 1
                    if record_mean_secs(old) <= record_mean_secs(rec):
                        continue
                cur["records"][key] = rec
            for f in w.get("failures", []):
                if f not in cur["failures"]:
                    cur["failures"].append(f)
    out = {
        "format": LOG_FORMAT,
        "generated_by": GENERATED_BY,
        "operator": first["operator"],
        "target": target,
        "workloads": {
            name: {
                "workload": w["workload"],
                "records": sorted(w["records"].values(), key=record_mean_secs),
                "failures": w["failures"],
            }
            for name, w in sorted(workloads.items())
        },
    }
    n_out = sum(len(w["records"]) for w in out["workloads"].values())
    return MergeResult(out, n_in, n_out, replaced)


def render(result: MergeResult) -> str:
    return render_log(result.log)
