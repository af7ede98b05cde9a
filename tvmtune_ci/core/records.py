"""The tuning log: one JSON file per operator and target, several workloads in it.

    {
      "format": 2,
      "generated_by": "tvmtune-ci; do not edit, regenerate with: tvmtune-ci retune",
      "operator": "matmul",
      "target": {"kind": "llvm", "mcpu": "znver5", "num-cores": 2},
      "workloads": {
        "m512": {
          "workload": [SHASH, BASE64],   # one line of JSONDatabase's database_workload.json
          "records": [                   # TuningRecord JSON, as a line of
            [TRACE, RUN_SECS, TARGET, ARGS_INFO],   # database_tuning_record.json minus the
            ...                          # workload index; valid ones only, best first
          ],
          "measurements": [              # one per record, same order: how its latency
            {"n": 33, "ci": [lo, hi], "stage": "finals"},   # was measured
            ...
          ],
          "failures": [{"knobs": {...}, "error": "..."}]   # failed builds/runs, trial order
        }
      }
    }

MetaSchedule's databases ignore the target when they look a record up, which is why
there is one log per operator and target. `to_json_database` writes the two files
TVM's own `JSONDatabase(path_workload=..., path_tuning_record=...)` reads;
`loader.load_database` returns a `MemoryDatabase` holding the same records (TVM:
the tuning side). Each record sits
on one line of the log so git diffs stay readable.

RUN_SECS is one number, the estimate of `stats.py` (the lower quartile of the
samples, seconds): TVM ranks records by the mean of run_secs, so its
`get_top_k`/`query_schedule` rank exactly as tvmtune-ci does. A finalist's number
comes from the interleaved finals; any other was measured by the search ("probe":
measured slow after its first samples and not sampled further) and is logged on
the finals' scale, `measured_s` x `scale` (the winner's finals estimate / the best
search estimate), so that it ranks below the winner, in the search's order; one the
search ranked above the finalists (an old program left out of them) is logged at the
winner's value, after it. Format 1 logs (fixed-repeat
samples, ranked by their mean) still read.

Reading a log (`read_log`) never imports TVM; the two converters do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import CorruptFileError
from .fsutil import atomic_write_text

if TYPE_CHECKING:
    from .tunetypes import TuneOutcome

LOG_FORMAT = 2
READ_FORMATS = (1, 2)
GENERATED_BY = "tvmtune-ci; do not edit, regenerate with: tvmtune-ci retune"
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
FAILED_RUN_SECS = 1e10  # MetaSchedule's stub for "no measurement" (an invalid record)


def _compact(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def record_mean_secs(record: list[Any]) -> float:
    """The mean of a TuningRecord JSON's run_secs (how MetaSchedule ranks records)."""
    secs = record[1] or []
    return sum(secs) / len(secs) if secs else FAILED_RUN_SECS


def record_is_valid(record: list[Any]) -> bool:
    """Whether a log record holds a measurement (not MetaSchedule's failure stub)."""
    secs = record[1] or []
    return any(s != FAILED_RUN_SECS for s in secs)


def workload_entry(outcome: TuneOutcome) -> dict[str, Any]:
    """The log's entry for one tuned workload."""
    if not outcome.workload_json:
        raise ValueError(f"outcome for {outcome.workload_name!r} carries no workload JSON")
    valid = [r for r in outcome.records if r.get("error") is None and record_is_valid(r["record"])]
    # Finals before search trials of the same value: a tie with a kept previous best
    # is logged at the kept value and must not overtake it.
    valid.sort(key=lambda r: (record_mean_secs(r["record"]), r.get("stage") != "finals", r.get("trial", 0)))
    failed = [r for r in outcome.records if r not in valid]
    failed.sort(key=lambda r: r.get("trial", 0))
    return {
        "workload": list(outcome.workload_json),
        "records": [r["record"] for r in valid],
        "measurements": [_measurement(r) for r in valid],
        "failures": [{"knobs": r.get("knobs", {}), "error": r.get("error") or "invalid measurement"} for r in failed],
    }


def _measurement(r: Mapping[str, Any]) -> dict[str, Any]:
    """How a record's number was measured. A search record (not in the finals) is
    logged on the finals' scale: `measured_s` x `scale` (see tuner.tune_workload)."""
    out = {"n": int(r.get("n", 0)), "ci": r.get("ci"), "stage": r.get("stage") or "search"}
    if "scale" in r:
        out["measured_s"], out["scale"] = r["measured_s"], r["scale"]
    return out


def render_log(log: Mapping[str, Any]) -> str:
    """Deterministic text: sorted keys, one record per line."""
    lines = ["{"]
    head = [
        ("format", log["format"]),
        ("generated_by", log.get("generated_by", GENERATED_BY)),
        ("operator", log["operator"]),
        ("target", log["target"]),
    ]
    for key, value in head:
        lines.append(f"  {json.dumps(key)}: {_compact(value)},")
    lines.append('  "workloads": {')
    names = sorted(log["workloads"])
    for wi, name in enumerate(names):
        w = log["workloads"][name]
        lines.append(f"    {json.dumps(name)}: {{")
        lines.append(f'      "workload": {_compact(w["workload"])},')
        keys = [k for k in ("records", "measurements", "failures") if k in w or k != "measurements"]
        for key in keys:
            items = w.get(key, [])
            comma = "," if key != keys[-1] else ""
            if not items:
                lines.append(f'      "{key}": []' + comma)
                continue
            lines.append(f'      "{key}": [')
            for i, item in enumerate(items):
                lines.append("        " + _compact(item) + ("," if i < len(items) - 1 else ""))
            lines.append("      ]" + comma)
        lines.append("    }" + ("," if wi < len(names) - 1 else ""))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def make_log(operator: str, target: Mapping[str, Any], outcomes: Iterable[TuneOutcome]) -> dict[str, Any]:
    """The log (format 2) of one operator and target from its workloads' outcomes."""
    workloads: dict[str, Any] = {}
    for o in outcomes:
        if o.workload_name in workloads:
            raise ValueError(f"two outcomes for workload {o.workload_name!r}")
        workloads[o.workload_name] = workload_entry(o)
    return {
        "format": LOG_FORMAT,
        "generated_by": GENERATED_BY,
        "operator": operator,
        "target": dict(target),
        "workloads": workloads,
    }


def write_log(path: Path, operator: str, target: Mapping[str, Any], outcomes: Iterable[TuneOutcome]) -> dict[str, Any]:
    """Write the log for `outcomes` (one per workload) atomically; returns what was written."""
    log = make_log(operator, target, outcomes)
    atomic_write_text(Path(path), render_log(log))
    return log


def _corrupt(path: Path, what: str) -> CorruptFileError:
    return CorruptFileError(f"{path}: {what}; inspect it, or delete it and re-tune (tvmtune-ci retune)")


def validate_log(data: Any, path: Path) -> dict[str, Any]:
    """Check a parsed log's shape; CorruptFileError naming `path` and what is wrong."""
    if not isinstance(data, dict):
        raise _corrupt(path, "not a JSON object")
    fmt = data.get("format")
    if fmt not in READ_FORMATS:
        raise CorruptFileError(
            f"{path}: log format {fmt!r} is not understood (this tvmtune-ci reads formats "
            f"{', '.join(map(str, READ_FORMATS))}); upgrade tvmtune-ci or re-tune"
        )
    for key, kind in (("operator", str), ("target", dict), ("workloads", dict)):
        if not isinstance(data.get(key), kind):
            raise _corrupt(path, f"missing or mistyped {key!r}")
    for name, w in data["workloads"].items():
        if not isinstance(w, dict):
            raise _corrupt(path, f"workload {name!r} is not an object")
        wj = w.get("workload")
        if not (isinstance(wj, list) and len(wj) == 2 and all(isinstance(x, str) for x in wj)):
            raise _corrupt(path, f"workload {name!r}: 'workload' is not [shash, base64]")
        recs = w.get("records")
        if not isinstance(recs, list) or not all(isinstance(r, list) and len(r) == 4 for r in recs):
            raise _corrupt(path, f"workload {name!r}: 'records' must be a list of [trace, run_secs, target, args_info]")
        meas = w.get("measurements")
        if meas is not None and not (
            isinstance(meas, list) and len(meas) == len(recs) and all(isinstance(m, dict) for m in meas)
        ):
            raise _corrupt(path, f"workload {name!r}: 'measurements' must be one object per record")
        fails = w.get("failures", [])
        if not isinstance(fails, list) or not all(isinstance(f, dict) for f in fails):
            raise _corrupt(path, f"workload {name!r}: 'failures' must be a list of objects")
    return data


def read_log(path: Path) -> dict[str, Any]:
    """Parse and validate a log; CorruptFileError naming `path` if it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _corrupt(path, f"cannot parse the tuning log ({e})") from None
    return validate_log(data, path)


def to_json_database(log_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write `database_workload.json` and `database_tuning_record.json` into `out_dir`
    (what `ms.database.JSONDatabase(path_workload=..., path_tuning_record=...)` loads).
    Workloads are numbered in name order. Returns (workload_path, record_path)."""
    log = read_log(Path(log_path))
    out_dir = Path(out_dir)
    wl_lines: list[str] = []
    rec_lines: list[str] = []
    for idx, name in enumerate(sorted(log["workloads"])):
        w = log["workloads"][name]
        wl_lines.append(_compact(w["workload"]))
        rec_lines.extend(_compact([idx, r]) for r in w["records"])
    wl_path, rec_path = out_dir / WORKLOAD_FILE, out_dir / RECORD_FILE
    atomic_write_text(wl_path, "".join(line + "\n" for line in wl_lines))
    atomic_write_text(rec_path, "".join(line + "\n" for line in rec_lines))
    return wl_path, rec_path
