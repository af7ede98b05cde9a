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

The database is kept in `work_dir`, one per seed; a later call with the same module,
seconds and seed reuses it without searching again (`done.json`). Independent searches
are different seeds (`profile --metaschedule-searches`): the band of the comparison is
over those, never over one search re-timed.

A search records its conditions (`SearchSpent`): trials, seconds, the functions left
without a valid record, and the runner's load while it ran (`LoadWatch`: the share of
the cores busy outside the search's own processes, and the hypervisor's steal). A search
that a load disturbed, or that left a function on TVM's naive loops, is not published as
a ratio (`withheld`), and is searched again by the next call rather than reused.

Over 400 lines: MetaSchedule for a model, both ways it runs: the search (its helper, the whole-model comparison with its conditions) and the committed records applied without one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.fsutil import atomic_write_text, sha256_file
from ..core.modelrecords import ModelRecords, read_records, records_path, stale_reasons, write_database
from ..core.profiles import DISTURBED_SHARE
from ..tune import tvmsetup

# What a function a model build's search (or its committed records) scheduled got, in words.
BY_METASCHEDULE = "MetaSchedule"

BATCH = 16  # trials per task visit: the product's batch_size, so both search alike
# MetaSchedule's builder starts fresh worker processes for every batch, and its 30-s
# default timeout counts their start (importing TVM): on a loaded 2-core runner a 64^2
# matmul's whole batch timed out, leaving no valid record. A timeout is a failed
# candidate, not a slow one, so a longer one costs nothing where builds are quick.
TIMEOUT_S = 120.0
DONE_FORMAT = 2  # 2: the seed is in the folder's name; the load and the functions recorded
SEED = 42
# The operators a template kernel computes; a MetaSchedule function named for one of
# them and another op fuses that op into it (TVM's FuseOps names a fused function by its
# ops in order: fused_conv2d_add_relu).
HEAVY_OPS = ("conv2d", "matmul", "dense", "batch_matmul")


@dataclass(frozen=True)
class Load:
    """The runner's load while a search ran, as shares of its cores (0-1)."""

    foreign: float  # mean share busy outside the search's processes
    steal: float  # mean share the hypervisor took
    peak: float  # the busiest window's foreign + steal share
    windows: int

    def disturbed(self) -> bool:
        return self.foreign + self.steal > DISTURBED_SHARE

    def words(self) -> str:
        return (
            f"runner {'DISTURBED' if self.disturbed() else 'quiet'}: {self.foreign * 100:.0f}% of its cores "
            f"busy outside the search, {self.steal * 100:.0f}% stolen (busiest window {self.peak * 100:.0f}%)"
        )

    def to_json(self) -> dict[str, Any]:
        return {"foreign": self.foreign, "steal": self.steal, "peak": self.peak, "windows": self.windows}

    @classmethod
    def from_json(cls, d: Any) -> Load | None:
        if not isinstance(d, dict):
            return None
        return cls(float(d["foreign"]), float(d["steal"]), float(d["peak"]), int(d["windows"]))


@dataclass(frozen=True)
class SearchSpent:
    """What the MetaSchedule search cost and covered, and under which conditions."""

    seconds: float  # asked for
    spent_s: float  # wall seconds the search took (reused: the first call's)
    trials: int  # measured candidates in the database
    tasks: int  # functions MetaSchedule extracted
    untuned: tuple[str, ...]  # functions left without a valid record (TVM's naive loops)
    reused: bool
    seed: int = SEED
    load: Load | None = None  # None: not watched (a search recorded before format 2)
    functions: tuple[str, ...] = field(default=())  # the model's PrimFuncs as it searched them

    def words(self) -> str:
        s = (
            f"MetaSchedule over the whole model, {self.seconds:.0f} s of this runner asked "
            f"({self.spent_s:.0f} s spent): {self.trials} trials over {self.tasks} functions"
        )
        if self.untuned:
            s += f"; {len(self.untuned)} got no valid record and run TVM's default loops"
        return s

    def withheld(self) -> str | None:
        """Why this search's build must not be published as a ratio (None: it may)."""
        if self.untuned:
            return (
                f"{len(self.untuned)} of its {self.tasks} functions got no valid record in "
                f"{self.trials} trials ({', '.join(self.untuned)}): they ran TVM's naive loops"
            )
        if self.load is None:
            return "the runner's load during the search was not recorded"
        if self.load.disturbed():
            return f"the runner was disturbed during the search ({self.load.words()})"
        return None

    def fused(self) -> tuple[str, ...]:
        """Its functions that fuse another op into a heavy one (what a template kernel,
        opaque to fusion, leaves to separate passes)."""
        out = []
        for f in self.functions:
            ops = [re.sub(r"\d+$", "", o) for o in f.split("_")[1:]]  # reshape1 -> reshape
            if f.startswith("fused_") and any(o in HEAVY_OPS for o in ops) and len(ops) > 1:
                out.append(f)
        return tuple(sorted(set(out)))

    def conditions(self) -> dict[str, Any]:
        """The search's conditions as the profile file keeps them."""
        out: dict[str, Any] = {
            "seed": self.seed,
            "seconds": self.seconds,
            "spent_s": self.spent_s,
            "trials": self.trials,
            "tasks": self.tasks,
            "untuned": list(self.untuned),
            "fused": list(self.fused()),
        }
        if self.load is not None:
            out["load"] = self.load.to_json()
        return out


def _cpu_of_tree(proc: Any) -> float:
    """CPU seconds of `proc` and every live descendant, their reaped children included."""
    import psutil

    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


class LoadWatch:
    """Samples, every `interval` seconds on a thread, how busy the runner's cores are
    outside this process tree (and what the hypervisor steals) while a search runs."""

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._windows: list[tuple[float, float, float]] = []  # (seconds, foreign, steal) core-seconds
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LoadWatch:
        self._thread = threading.Thread(target=self._run, name="tvmtune-loadwatch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        import psutil

        me = psutil.Process()

        def read() -> tuple[float, float, float, float]:
            c = psutil.cpu_times()
            # guest time is inside user already
            busy = c.user + c.nice + c.system + getattr(c, "irq", 0.0) + getattr(c, "softirq", 0.0)
            return time.monotonic(), busy, getattr(c, "steal", 0.0), _cpu_of_tree(me)

        last = read()
        while True:
            done = self._stop.wait(self.interval)
            now = read()
            dt = now[0] - last[0]
            if dt > 0.5 or (done and dt > 0):
                foreign = max(0.0, (now[1] - last[1]) - (now[3] - last[3]))
                self._windows.append((dt, foreign, max(0.0, now[2] - last[2])))
                last = now
            if done:
                return

    def load(self, cores: int | None = None) -> Load:
        import psutil

        n = cores or psutil.cpu_count() or 1
        seconds = sum(w[0] for w in self._windows) or 1.0
        peak = max(((w[1] + w[2]) / (w[0] * n) for w in self._windows), default=0.0)
        return Load(
            sum(w[1] for w in self._windows) / (seconds * n),
            sum(w[2] for w in self._windows) / (seconds * n),
            min(1.0, peak),
            len(self._windows),
        )


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


def unscheduled(mod: Any) -> list[str]:
    """The PrimFuncs of `mod` no schedule was applied to (TVM's naive loops)."""
    from tvm import tirx

    return sorted(
        gv.name_hint
        for gv, f in mod.functions.items()
        if isinstance(f, tirx.PrimFunc) and not (f.attrs and f.attrs.get("tirx.is_scheduled", False))
    )


def search(
    mod: Any,
    target: Any,
    work_dir: Path,
    *,
    max_trials_global: int,
    max_trials_per_task: int | None = None,
    batch: int = BATCH,
    seed: int = SEED,
    task_scheduler: Any = "gradient",
) -> Any:
    """`tune_relax` over `mod` as this product runs it, for the untemplated functions of
    a model build and the whole-model comparison alike: the builder's and runner's
    timeouts TIMEOUT_S, and MetaSchedule's logger free of handlers it did not make.
    Returns its database."""
    ms = tvmsetup.ms()
    with warnings.catch_warnings(), _foreign_handlers_detached():
        warnings.simplefilter("ignore")
        return ms.relax_integration.tune_relax(
            mod=mod,
            params={},
            target=target,
            work_dir=str(work_dir),
            max_trials_global=max_trials_global,
            max_trials_per_task=max_trials_per_task,
            num_trials_per_iter=batch,
            seed=seed,
            builder=ms.builder.LocalBuilder(timeout_sec=TIMEOUT_S),
            runner=ms.runner.LocalRunner(timeout_sec=TIMEOUT_S),
            task_scheduler=task_scheduler,
        )


def apply(mod: Any, target: Any, db: Any) -> Any:
    """`mod` with the best record of `db` applied to each function that has one."""
    from tvm import relax

    with warnings.catch_warnings(), target, db:
        warnings.simplefilter("ignore")
        return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)


def tune_model(
    mod: Any,
    target: Any,
    seconds: float,
    work_dir: Path,
    *,
    seed: int = SEED,
    clock: Callable[[], float] = time.monotonic,
    watch: Callable[[], Any] = LoadWatch,
) -> tuple[Any, SearchSpent]:
    """Schedule every PrimFunc of `mod` (legalized and fused) with MetaSchedule within
    `seconds` of `clock`; returns the scheduled module and what the search spent.
    `watch()` makes the context manager that watches the runner's load during the
    search (its `load()` read after it): a test's hook."""
    import tvm_ffi
    from tvm import tirx

    ms = tvmsetup.ms()
    key = f"{int(tvm_ffi.structural_hash(mod)) & 0xFFFFFFFFFFFF:012x}"
    work = work_dir / f"metaschedule-{seconds:.0f}s-{key}-seed{seed}"
    done_path = work / "done.json"
    done = json.loads(done_path.read_text()) if done_path.is_file() else None
    # A search that was disturbed or left a function untuned is searched again.
    reused = done is not None and done.get("format") == DONE_FORMAT and done.get("publishable") is True
    if done is not None and not reused:
        for f in work.glob("*.json"):
            f.unlink()
    work.mkdir(parents=True, exist_ok=True)
    load: Load | None = Load.from_json(done.get("load")) if reused and done else None
    t0 = time.monotonic()
    if reused:
        db = ms.database.JSONDatabase(work_dir=str(work), allow_missing=False)
    else:
        with watch() as watching:
            db = search(
                mod,
                target,
                work,
                max_trials_global=1_000_000,
                seed=seed,
                task_scheduler=deadline_scheduler(clock() + seconds, clock),
            )
        load = watching.load()
    scheduled = apply(mod, target, db)
    funcs = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
    untuned = tuple(unscheduled(scheduled))
    trials = sum(1 for r in db.get_all_tuning_records() if r.run_secs and all(float(s) < 1e9 for s in r.run_secs))
    spent = float(done["spent_s"]) if done is not None and reused else time.monotonic() - t0
    out = SearchSpent(seconds, spent, trials, len(funcs), untuned, reused, seed, load, tuple(sorted(funcs)))
    if not reused:
        record = {"format": DONE_FORMAT, **out.conditions(), "publishable": out.withheld() is None}
        atomic_write_text(done_path, json.dumps(record) + "\n")
    return scheduled, out


def apply_committed(
    mod: Any, target: Any, pending: Sequence[str], records: tuple[Path, ModelRecords], work_dir: Path | None
) -> tuple[Any, dict[str, str], str]:
    """The committed records applied to the untemplated functions, without a search."""
    from tempfile import mkdtemp

    path, r = records
    where = (work_dir / "committed-records") if work_dir is not None else Path(mkdtemp(prefix="tvmtune-records-"))
    write_database(where, r.workloads, r.records)
    db = tvmsetup.ms().database.JSONDatabase(work_dir=str(where), allow_missing=False)
    mod = apply(mod, target, db)
    left = set(unscheduled(mod))
    searched = {f: BY_METASCHEDULE for f in pending if f not in left}
    return (
        mod,
        searched,
        f"MetaSchedule records committed in {path.name} (no search), for {len(searched)} of {len(pending)} function(s)",
    )


def committed_records(config: Any, spec: Any, want: Mapping[str, Any]) -> tuple[Path, ModelRecords] | None:
    """The model's committed records for the configured target `want` is, when they
    are fresh (core/modelrecords.py); None where there are none. Stale ones are said
    once (a RecordsWarning) and not applied: the build searches."""
    name = next((t.name for t in config.targets if dict(t.target) == dict(want)), None)
    if name is None:
        return None
    path = records_path(config.root, spec.source, spec.name, name)
    if not path.is_file():
        return None
    r = read_records(path)
    import tvm

    why = stale_reasons(
        r,
        model_sha256=sha256_file(config.root / spec.source),
        tvm_version=config.tvm_version or str(tvm.__version__),
        target_dict=want,
    )
    if why:
        warnings.warn(
            f"{path}: stale ({'; '.join(why)}): not applied, the build searches again; re-run "
            f"`tvmtune-ci profile {spec.name} --target {name}` on its runner to rewrite it",
            RecordsWarning,
            stacklevel=3,
        )
        return None
    return path, r


class RecordsWarning(UserWarning):
    """A model's committed MetaSchedule records are stale and were not applied."""
