"""The resume journal of one workload's search: `work_dir/journal.jsonl`.

Every measured batch is appended (fsync) as it is measured; a rerun after a kill
reads it back (a line cut short by the kill is dropped), rebuilds the JSONDatabase
from it and goes on from there. The header holds `request_fingerprint`: trials
measured under another template, workload, target, TVM, seed or measurement setting
are never resumed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.fsutil import atomic_write_text
from . import tvmsetup
from .workload import workload_params

if TYPE_CHECKING:
    from ..core.tunetypes import Trial
    from .request import TuneRequest

JOURNAL_FORMAT = 2  # 2: estimates (lower quartile + interval) per trial
JOURNAL_NAME = "journal.jsonl"


def request_fingerprint(req: TuneRequest) -> str:
    """What must match for a work_dir's trials to be reused: the template's semantic
    fingerprint (with its in-repo helpers), the workload, the target, the TVM version,
    the seed and every measurement setting (over RPC also the device key; not the
    tracker's address or the number of devices)."""
    source = req.fingerprint
    if not source:
        try:
            source = inspect.getsource(req.template)
        except (OSError, TypeError):
            source = repr([getattr(req.template, n, None) for n in ("WORKLOADS", "KNOBS")])
    payload = {
        "journal": JOURNAL_FORMAT,
        "tvm": str(tvmsetup.load().__version__),
        "template": req.template.__name__,
        "source": hashlib.sha256(source.encode()).hexdigest(),
        "workload": req.workload_name,
        "params": (
            dict(req.workload.params) if req.workload is not None else workload_params(req.template, req.workload_name)
        ),
        "target": req.target,
        "seed": req.seed,
        "measure": sorted(vars(req.measure).items()),
        "population": req.population_size,
        "batch_size": req.batch_size,
    }
    if req.rpc is not None:  # trials measured on other hardware are not resumed
        payload["rpc_key"] = req.rpc.key
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class Journal:
    """`work_dir/journal.jsonl`: a header line, then one line per measured trial.

    Appended and fsynced after every batch; a line cut short by a kill is dropped on
    the next open. The JSONDatabase files next to it are rebuilt from the journal.
    """

    def __init__(self, work_dir: Path, fingerprint: str) -> None:
        self.work_dir = Path(work_dir)
        self.path = self.work_dir / JOURNAL_NAME
        self.fingerprint = fingerprint
        self.header: dict[str, Any] | None = None
        self.trials: list[Trial] = []

    def load(self) -> bool:
        """Read a matching journal; False (and nothing kept) if absent or for another request."""
        if not self.path.exists():
            return False
        good: list[str] = []
        entries: list[Trial] = []
        header = None
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut short by a kill: everything after it is lost
            if header is None:
                header = obj
            else:
                entries.append(obj)
            good.append(line)
        if (
            not isinstance(header, dict)
            or header.get("format") != JOURNAL_FORMAT
            or header.get("fingerprint") != self.fingerprint
        ):
            return False
        atomic_write_text(self.path, "".join(g + "\n" for g in good))
        self.header, self.trials = header, entries
        return True

    def start(self, header: dict[str, Any]) -> None:
        self.header = {"format": JOURNAL_FORMAT, "fingerprint": self.fingerprint, **header}
        self.trials = []
        atomic_write_text(self.path, json.dumps(self.header, sort_keys=True) + "\n")

    def append(self, entries: Sequence[Trial]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            for e in entries:
                f.write(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.trials.extend(entries)
