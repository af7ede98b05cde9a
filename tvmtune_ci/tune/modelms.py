"""MetaSchedule on a whole model for a given number of runner seconds: the anchor a
model's README sets beside the build with the committed logs (`profile
--metaschedule-seconds`, docs/models.md).

The tasks are `tune_relax`'s (`relax_integration.extract_tasks` on the model as TVM's
CPU pipeline legalizes and fuses it), searched by its evolutionary search and XGBoost
cost model, `num_trials_per_iter` 16 (this product's batch). What differs from stock
`tune_relax`: MetaSchedule's task schedulers stop at a trial count, not at a time,
so a deadline scheduler visits the tasks in turns (as its round-robin scheduler
does) and ends the search when the seconds are spent; the batch under way is
finished, so the search can overrun by one batch; and the builder's and runner's
timeouts are 120 s, not 30 (TIMEOUT_S). The seconds count from the call: task
extraction and the search spaces' generation are runner time too.

The database is kept in `work_dir`; a later call with the same module and seconds
reuses it without searching again (`done.json`), so a profile run after the first
re-times the same MetaSchedule build: the band across runs is then the band of its
measurement, not of its search.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.fsutil import atomic_write_text
from . import tvmsetup

BATCH = 16  # trials per task visit: the product's batch_size, so both search alike
# MetaSchedule's builder starts fresh worker processes for every batch, and its 30-s
# default timeout counts their start (importing TVM): on a loaded 2-core runner a 64^2
# matmul's whole batch timed out, leaving no valid record. A timeout is a failed
# candidate, not a slow one, so a longer one costs nothing where builds are quick.
TIMEOUT_S = 120.0
DONE_FORMAT = 1


@dataclass(frozen=True)
class SearchSpent:
    """What the MetaSchedule search cost and covered."""

    seconds: float  # asked for
    spent_s: float  # wall seconds the search took (reused: the first call's)
    trials: int  # measured candidates in the database
    tasks: int  # functions MetaSchedule extracted
    untuned: tuple[str, ...]  # functions left without a valid record (TVM's naive loops)
    reused: bool

    def words(self) -> str:
        s = (
            f"MetaSchedule over the whole model, {self.seconds:.0f} s of this runner asked "
            f"({self.spent_s:.0f} s spent): {self.trials} trials over {self.tasks} functions"
        )
        if self.untuned:
            s += f"; {len(self.untuned)} got no valid record and run TVM's default loops"
        return s


def deadline_scheduler(deadline: float, clock: Callable[[], float] = time.monotonic) -> Any:
    """A MetaSchedule task scheduler that visits the unfinished tasks in turns (as
    RoundRobin does) and gives no next task once `clock()` passes `deadline`."""
    ms = tvmsetup.ms()
    from tvm.ir.utils import derived_object

    @derived_object
    class Deadline(ms.task_scheduler.PyTaskScheduler):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.last = -1

        def next_task_id(self) -> int:
            outer = self._outer()
            n = len(outer.tasks_)
            for i in range(n):
                outer.touch_task(i)
            if outer.remaining_tasks_ == 0 or clock() >= deadline:
                return -1
            for _ in range(n):
                self.last = (self.last + 1) % n
                task = outer.tasks_[self.last]
                if not task.is_terminated:
                    if task.runner_futures is not None:
                        self.join_running_task(self.last)
                    return self.last
            return -1

    return Deadline()


@contextlib.contextmanager
def _foreign_handlers_detached() -> Iterator[None]:
    """MetaSchedule configures its logger anew for every search (logging.config.dictConfig,
    listing the handlers the logger has by name), and fails on a handler it did not make
    (an unnamed one: AttributeError; another: ValueError). One left on it by anything
    else in the process (a caller, an earlier search elsewhere) stays off during ours."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    foreign = [h for h in ms_logger.handlers if not (h.get_name() or "").startswith("tvm.s_tir.meta_schedule")]
    for h in foreign:
        ms_logger.removeHandler(h)
    try:
        yield
    finally:
        for h in foreign:
            ms_logger.addHandler(h)


def tune_model(
    mod: Any,
    target: Any,
    seconds: float,
    work_dir: Path,
    *,
    seed: int = 42,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Any, SearchSpent]:
    """Schedule every PrimFunc of `mod` (legalized and fused) with MetaSchedule within
    `seconds` of `clock`; returns the scheduled module and what the search spent."""
    import tvm_ffi
    from tvm import relax, tirx

    ms = tvmsetup.ms()
    key = f"{int(tvm_ffi.structural_hash(mod)) & 0xFFFFFFFFFFFF:012x}"
    work = work_dir / f"metaschedule-{seconds:.0f}s-{key}"
    done_path = work / "done.json"
    done = json.loads(done_path.read_text()) if done_path.is_file() else None
    reused = done is not None and done.get("format") == DONE_FORMAT
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if reused:
            db = ms.database.JSONDatabase(work_dir=str(work), allow_missing=False)
        else:
            with _foreign_handlers_detached():
                db = ms.relax_integration.tune_relax(
                    mod=mod,
                    params={},
                    target=target,
                    work_dir=str(work),
                    max_trials_global=1_000_000,
                    num_trials_per_iter=BATCH,
                    seed=seed,
                    builder=ms.builder.LocalBuilder(timeout_sec=TIMEOUT_S),
                    runner=ms.runner.LocalRunner(timeout_sec=TIMEOUT_S),
                    task_scheduler=deadline_scheduler(clock() + seconds, clock),
                )
        with target, db:
            scheduled = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
    funcs = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
    untuned = tuple(
        sorted(
            gv.name_hint
            for gv, f in scheduled.functions.items()
            if isinstance(f, tirx.PrimFunc) and not (f.attrs and f.attrs.get("tirx.is_scheduled", False))
        )
    )
    trials = sum(1 for r in db.get_all_tuning_records() if r.run_secs and all(float(s) < 1e9 for s in r.run_secs))
    if done is not None and reused:
        spent = float(done["spent_s"])
    else:
        spent = time.monotonic() - t0
        atomic_write_text(
            done_path, json.dumps({"format": DONE_FORMAT, "seconds": seconds, "spent_s": spent, "seed": seed}) + "\n"
        )
    return scheduled, SearchSpent(seconds, spent, trials, len(funcs), untuned, reused)
