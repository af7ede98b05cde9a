"""One search's records on disk, and the resume from them: the journal (`journal.py`)
and the JSONDatabase in work_dir that MetaSchedule reads. A run that finds a journal
of the same request rebuilds the database from it and goes on from its trials; every
batch is committed to both, the database writing the exact record JSON the log keeps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.records import FAILED_RUN_SECS, RECORD_FILE, WORKLOAD_FILE
from ..core.tunetypes import Trial
from .journal import Journal, request_fingerprint
from .request import TuneRequest


class Store:
    """The journal, loaded when made (`resumed`: the trials a killed run left), and the
    database, opened once the search has its module (`open`)."""

    def __init__(self, req: TuneRequest) -> None:
        self.work_dir = Path(req.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.work_dir, request_fingerprint(req))
        self._found = self.journal.load()
        self.resumed = len(self.journal.trials)
        self.batches = 0  # committed by this process
        self.db: Any = None
        self.workload_json: list[str] = []
        self._ms: Any = None
        self._mod: Any = None
        self._target: Any = None

    @property
    def trials(self) -> list[Trial]:
        return self.journal.trials

    def open(self, ms: Any, mod: Any, target: Any, header: dict[str, Any]) -> None:
        """The JSONDatabase for `mod`, rebuilt from the journal on a resume; a fresh
        journal starts with `header` and the workload's JSON."""
        self._ms, self._mod, self._target = ms, mod, target
        wl_path, rec_path = self.work_dir / WORKLOAD_FILE, self.work_dir / RECORD_FILE
        if self._found:
            assert self.journal.header is not None
            wl_path.write_text(json.dumps(self.journal.header["workload"]) + "\n", "utf-8")
            rec_path.write_text("".join(json.dumps([0, t["record"]]) + "\n" for t in self.journal.trials), "utf-8")
        else:
            for p in (wl_path, rec_path):
                p.unlink(missing_ok=True)
        self.db = ms.database.JSONDatabase(path_workload=str(wl_path), path_tuning_record=str(rec_path))
        self.db.commit_workload(mod)
        self.workload_json = json.loads(wl_path.read_text(encoding="utf-8").splitlines()[0])
        if not self._found:
            self.journal.start({**header, "workload": self.workload_json})

    def valid_records(self) -> list[Any]:
        """The database's records that measured (a resumed run's, for the cost model)."""
        return [
            r
            for r in self.db.get_all_tuning_records()
            if r.run_secs and any(float(x) < FAILED_RUN_SECS for x in r.run_secs)
        ]

    def commit(self, items: Sequence[tuple[Any, Any, list[float]]]) -> list[Any]:
        """Commit (trace, args_info, run seconds) records; the record JSON of each, as
        the JSONDatabase wrote it (the exact line the log keeps)."""
        ms = self._ms
        # JSONDatabase appends one line per record.
        rec_path = self.work_dir / RECORD_FILE
        offset = rec_path.stat().st_size
        workload = self.db.commit_workload(self._mod)
        for trace, args_info, secs in items:
            self.db.commit_tuning_record(ms.database.TuningRecord(trace, workload, secs, self._target, args_info))
        with open(rec_path, "rb") as f:
            f.seek(offset)
            return [json.loads(x)[1] for x in f.read().decode("utf-8").splitlines() if x.strip()]

    def record_json(self, sch: Any) -> list[Any]:
        """The TuningRecord JSON (as a log line holds it) of a fixed configuration's
        schedule; run_secs are filled in by the caller."""
        info = self._ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        return self.commit([(sch.trace, info, [FAILED_RUN_SECS])])[0]

    def append(self, entries: Sequence[Trial]) -> None:
        """A measured batch's trials into the journal."""
        self.journal.append(entries)
        self.batches += 1
