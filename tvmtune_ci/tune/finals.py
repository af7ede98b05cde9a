"""The finals and what follows them (steps 4 and 5 of `tuner.tune_workload`): who is a
finalist (`run_finals`: the search's best, the default, the previous best; the old
programs left out while the old best's program is unchanged, `_new_programs`), the
winner on the finals' data (`_decide`), and the finals turned into the log's records,
the top table and the verdict on the previous best (`assemble`: plain data work)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core import stats
from ..core.errors import TuningError
from ..core.manifest import Measured
from ..core.template import template_name
from ..core.tunetypes import Trial
from .builder import Builder
from .measure import Finalist, FinalResult, finals, full_knobs, gflops, measured
from .numerics import check_correct
from .programs import same_program
from .request import TuneRequest
from .runners import Runner
from .space import knobs_key
from .workload import Workload, resolve


def _valid_sorted(entries: Sequence[Trial]) -> list[Trial]:
    return sorted((e for e in entries if e["error"] is None), key=lambda e: (e["latency_s"], e["trial"]))


def _all_failed(where: str, entries: Sequence[Trial]) -> TuningError:
    errors = sorted({e["error"].splitlines()[0][:200] for e in entries if e["error"]})
    return TuningError(
        f"{where}: every one of {len(entries)} trials failed; first errors: "
        + "; ".join(errors[:3])
        + "; fix the template's schedule() for those knob values"
    )


@dataclass
class FinalsOutcome:
    results: list[FinalResult]
    winner: FinalResult
    tied: set[int]  # indexes into results: equal within noise to a kept previous best
    # The search's finalists left out as programs the old log measured (`_new_programs`).
    left_out: int = 0


def _new_programs(
    req: TuneRequest, wl: Workload, keys: list[str], by_key: Mapping[str, Trial], entries: Sequence[Trial]
) -> tuple[list[str], int]:
    """The search's finalists (`keys`) less those that are programs the old log measured,
    unchanged by the edit, and how many were left out. The old log's search and finals
    ranked them below its best on this target; when the edit left that best's program
    unchanged too, measuring them again only re-rolls the noise (as when the whole old
    search stands: `run_finals`), and the finals' question is whether a program the old
    search never measured beats it. Each finalist costs the finals up to `time_cap_s`,
    and a warm run's top is mostly the replayed old configurations. At least one search
    finalist stays, the verdict compares it with the previous best: the best new program
    of the whole search, else the first finalist (the search measured only old ones)."""
    assert req.previous_knobs is not None
    template, target = req.template, req.target
    old = {knobs_key(full_knobs(template, wl, kv, target)): key for kv, key in req.old_programs if key}

    def measured_before(knobs: Mapping[str, Any]) -> bool:
        key = old.get(knobs_key(full_knobs(template, wl, knobs, target)))
        return key is not None and same_program(template, wl, target, knobs, key)

    if not measured_before(req.previous_knobs):
        return keys, 0  # the edit changed the old best's program: the old ranking is moot
    kept = [k for k in keys if not measured_before(by_key[k]["knobs"])]
    if not kept:
        best_new = next(
            (knobs_key(e["knobs"]) for e in _valid_sorted(entries) if not measured_before(e["knobs"])), None
        )
        kept = [best_new] if best_new is not None else keys[:1]
    return kept, len([k for k in keys if k not in kept])


def _decide(results: Sequence[FinalResult]) -> tuple[FinalResult | None, set[int]]:
    """The winner: the lowest estimate, except that a previous best equal to it within
    noise is kept (a re-tune switches only for a difference outside the noise)."""
    ok = [r for r in results if r.estimate is not None and r.error is None]
    if not ok:
        return None, set()
    lead = min(ok, key=lambda r: r.estimate.value)  # type: ignore[union-attr]
    prev = next((r for r in ok if r.finalist.role == "previous"), None)
    if prev is None or prev is lead:
        return lead, set()
    assert prev.estimate is not None and lead.estimate is not None
    if stats.compare(lead.estimate, prev.estimate) != "equal":
        return lead, set()
    tied = {
        i
        for i, r in enumerate(results)
        if r in ok and r is not prev and r.estimate.value < prev.estimate.value  # type: ignore[union-attr]
    }
    return prev, tied


def run_finals(
    req: TuneRequest, entries: list[Trial], runner: Runner, builder: Builder, *, stands: bool = False
) -> FinalsOutcome:
    """The search's top `finalists`, the default and the previous best, interleaved;
    the winner's numerics checked (a wrong one becomes a failed trial and the next
    is taken).

    When the old search stands (`stands`: the edit changed none of the programs the old
    log measured, `programs.old_search_stands`), the field is the previous best and the
    default only. The old log's finals already ranked these same programs side by side
    on this target; its runners-up, replayed, would only re-roll that noise (and with
    four of them, a kept best lost to one by chance now and then). The previous best is
    re-measured for a fresh figure and the default for the speedup. Six finalists took
    13.0-13.5 s of a 26-27-s no-op re-tune on a noisy Zen 3 (bench_warmstart run H, 2 s
    each, time-capped); these two 7.7-7.9 s in a quiet stretch, against 9.9-11.4 s for
    six (runs I-K, docs/benchmarks.md).

    Otherwise, when the edit left the old best's program unchanged, the search's
    finalists that are programs the old log measured are left out for the same reason
    (`_new_programs`)."""
    template, name = req.template, req.workload_name
    wl = req.workload if req.workload is not None else resolve(template, name, req.target)
    where = f"{template_name(template)}/{name}"
    by_key = {knobs_key(e["knobs"]): e for e in entries if e["error"] is None}
    finalists, left_out = _finalists(req, wl, entries, by_key, where, stands)
    results = finals(template, wl, req.target, finalists, req.measure, runner=runner, builder=builder)
    return _checked_winner(req, wl, results, by_key, left_out, where)


def _finalists(
    req: TuneRequest, wl: Workload, entries: list[Trial], by_key: Mapping[str, Trial], where: str, stands: bool
) -> tuple[list[Finalist], int]:
    """Who runs in the finals (`run_finals`), and how many of the search's finalists
    were left out as old programs (`_new_programs`)."""
    template = req.template
    keys = [knobs_key(e["knobs"]) for e in _valid_sorted(entries)[: req.measure.finalists]]
    if not keys:
        raise _all_failed(where, entries)
    prev_key = "previous"
    if req.previous_knobs is not None:
        # A re-tune with history replayed the old best as a search trial: measured once
        # here, as the previous best, not twice (the same kernel took a finalist's
        # share of the finals, and the verdict compared it with itself). The verdict
        # then asks the question it is for: did the search find anything better?
        # Its record is found among all the trials (it need not be in the search's top);
        # at least one search finalist stays: the verdict compares one with it.
        prev_full = full_knobs(template, wl, req.previous_knobs, req.target)
        if stands:
            keys = []
        same = next(
            (k for k, e in by_key.items() if full_knobs(template, wl, e["knobs"], req.target) == prev_full), None
        )
        if same is not None and (same not in keys or len(keys) > 1):
            if same in keys:
                keys.remove(same)
            prev_key = same
    left_out = 0
    if req.previous_knobs is not None and req.old_programs and keys:
        keys, left_out = _new_programs(req, wl, keys, by_key, entries)
    finalists = [Finalist("search", by_key[key]["knobs"], key) for key in keys]
    finalists.append(Finalist("default", None, "default"))
    if req.previous_knobs is not None:
        finalists.append(Finalist("previous", dict(req.previous_knobs), prev_key))
    return finalists, left_out


def _checked_winner(
    req: TuneRequest, wl: Workload, results: list[FinalResult], by_key: dict[str, Trial], left_out: int, where: str
) -> FinalsOutcome:
    """The winner on the finals' data (`_decide`), its numerics checked: a wrong one
    becomes a failed trial (when it is one) and a failed finalist, and the next is taken."""
    while True:
        winner, tied = _decide(results)
        if winner is None:
            raise TuningError(
                f"{where}: no finalist could be measured; first errors: "
                + "; ".join(sorted({str(r.error)[:200] for r in results if r.error})[:3])
            )
        if winner.finalist.role == "default":
            return FinalsOutcome(results, winner, tied, left_out)
        try:
            check_correct(req.template, wl, req.target, winner.finalist.knobs, rpc=req.rpc)
            return FinalsOutcome(results, winner, tied, left_out)
        except TuningError as err:
            if winner.finalist.key in by_key:  # a search trial (or the replayed previous best)
                e = by_key.pop(winner.finalist.key)
                e["error"], e["latency_s"] = f"wrong result: {err}", None
            results = [
                r if r is not winner else FinalResult(r.finalist, None, error=f"wrong result: {err}") for r in results
            ]


@dataclass(frozen=True)
class Assembled:
    """The finals turned into what the log and the manifest say (`assemble`)."""

    records: list[Trial]  # every trial on the finals' scale, plus a winner not searched
    best: Measured
    baseline: Measured  # the default in the finals (else the noise check's, when it was the default)
    previous: Measured | None
    top: list[Measured]  # best first, the other finalists, then the search's on the finals' scale
    final_results: tuple[dict[str, Any], ...]
    previous_verdict: str | None  # this run's best search finalist vs the previous best


def assemble(
    entries: Sequence[Trial],
    fin: FinalsOutcome,
    extra: Mapping[str, Any],
    flop: float,
    noise: Measured | None,
    full: Callable[[Mapping[str, Any] | None], dict[str, Any]],
) -> Assembled:
    """Plain data work after the finals: the search's trials put on the finals' scale,
    the finalists' records given their finals estimates (a search finalist tied with a
    kept previous best at the kept value), the winner's record added when the search did
    not measure it (`extra`: its record JSON by role), the top table and the verdict of
    this run's best against the previous best. `full` fills a configuration's defaults."""
    records = [e.copy() for e in entries]
    rec_by_key = {knobs_key(e["knobs"]): e for e in records}
    first_trial = _first_trials(records)
    scale = _on_the_finals_scale(records, rec_by_key, fin)
    final_json, finals_measured, best, baseline, previous = _the_finalists(
        fin, records, rec_by_key, first_trial, extra, flop, full
    )
    assert best is not None
    if baseline is None and noise is not None and noise.knobs == full(None):
        baseline = noise  # the default could not be measured in the finals
    if baseline is None:
        # A re-tune with history sampled the old best, not the default, before the search.
        raise TuningError(
            "the default configuration ran in the correctness check but could not be measured "
            "in the finals ("
            + "; ".join(str(r.error)[:200] for r in fin.results if r.finalist.role == "default")
            + "), so the speedup over it is unknown and nothing is written; re-run "
            "`tvmtune-ci retune` on an idle runner, or raise measure.timeout_s in tvmtune.yaml "
            "if it timed out"
        )
    search_top = _search_top(records, first_trial, scale, flop, full)
    top = sorted(finals_measured, key=lambda m: m.latency_s)
    top = [best] + [m for m in top if m is not best] + search_top
    return Assembled(records, best, baseline, previous, top, tuple(final_json), _verdict(fin))


def _first_trials(records: Sequence[Trial]) -> dict[str, int]:
    """The trial that first measured each configuration: the top table says when the
    search found it (bench_transfer reads a run's time to a quality from it)."""
    first_trial: dict[str, int] = {}
    for e in sorted(records, key=lambda e: e["trial"]):
        if e["trial"] >= 1:
            first_trial.setdefault(knobs_key(e["knobs"]), e["trial"])
    return first_trial


def _on_the_finals_scale(records: list[Trial], rec_by_key: Mapping[str, Trial], fin: FinalsOutcome) -> float:
    """The records the finals give no figure logged on the finals' scale; the scale."""
    # The search's numbers and the finals' come from different minutes of a machine
    # whose speed drifts. The log ranks them in one list (TVM's), so a configuration
    # left out of the finals is logged on the finals' scale: its search estimate x
    # (the winner's finals estimate / the best search estimate). The best is usually a
    # finalist's; when it is not (an old program left out, `_new_programs`, or the old
    # search's runners-up when it stands), that record is logged at the winner's value,
    # after it (finals sort first at a tie): nothing left out overtakes the winner in the
    # list TVM takes its best from, and the search's order is kept.
    assert fin.winner.estimate is not None
    searched = [e["latency_s"] for e in records if e["error"] is None and e["latency_s"] is not None]
    scale = fin.winner.estimate.value / min(searched) if searched else 1.0
    # Records the finals give a figure (one that failed there keeps its search figure, scaled).
    final_keys = {r.finalist.key for r in fin.results if r.finalist.key in rec_by_key and r.estimate is not None}
    for e in records:
        lat = e["latency_s"]  # set whenever `error` is None
        if e["error"] is None and lat is not None and knobs_key(e["knobs"]) not in final_keys:
            e["measured_s"], e["scale"] = lat, scale
            # x * (winner / x_min) is the winner's value for x_min only up to rounding
            # (one ulp below it once in CI): never below it.
            logged = max(lat * scale, fin.winner.estimate.value)
            e["record"] = [e["record"][0], [logged], *e["record"][2:]]
    return scale


def _the_finalists(
    fin: FinalsOutcome,
    records: list[Trial],
    rec_by_key: Mapping[str, Trial],
    first_trial: Mapping[str, int],
    extra: Mapping[str, Any],
    flop: float,
    full: Callable[[Mapping[str, Any] | None], dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[Measured], Measured | None, Measured | None, Measured | None]:
    """Each finalist as the finals measured it: its JSON (`final_results`), its record
    given its finals estimate (`_log_finalist`), and (final JSON, the finalists measured
    that have a record or won, best, baseline, previous)."""
    final_json: list[dict[str, Any]] = []
    finals_measured: list[Measured] = []
    best = baseline = previous = None
    for i, r in enumerate(fin.results):
        f = r.finalist
        knobs = full(f.knobs)
        final_json.append(
            {
                "role": f.role,
                "knobs": knobs,
                "estimate": r.estimate.to_json() if r.estimate else None,
                "error": r.error,
                "tied": i in fin.tied,
            }
        )
        if r.estimate is None:
            continue
        m = replace(measured(knobs, r.estimate, flop, "finals", r.stopped), trial=first_trial.get(f.key))
        if f.role == "default":
            baseline = m
        elif f.role == "previous":
            previous = m
        if r is fin.winner:
            best = m
        rec: Trial | None = rec_by_key.get(f.key)
        if rec is not None or r is fin.winner:
            finals_measured.append(m)
        _log_finalist(fin, records, rec, r, i in fin.tied, extra)
    return final_json, finals_measured, best, baseline, previous


def _log_finalist(
    fin: FinalsOutcome, records: list[Trial], rec: Trial | None, r: FinalResult, tied: bool, extra: Mapping[str, Any]
) -> None:
    """A measured finalist's record (`rec`) given its finals estimate; the winner's
    record added to `records` when the search did not measure it (`extra`: its record
    JSON by role)."""
    assert r.estimate is not None
    f = r.finalist
    # The log's value of a finalist is its finals estimate; one tied with a kept
    # previous best is logged at the kept value, so TVM's ranking keeps it too.
    value = r.estimate.value
    if tied:
        assert fin.winner.estimate is not None
        value = fin.winner.estimate.value
    if rec is None and r is fin.winner:
        rec = {
            "trial": 0,
            "batch": 0,
            "space": None,
            "knobs": f.knobs or {},
            "error": None,
            "device": None,
            "record": extra[f.role],
            "latency_s": value,
        }
        records.append(rec)
    if rec is not None:
        rec["latency_s"] = value
        rec["ci"] = [r.estimate.lo, r.estimate.hi]
        rec["n"] = r.estimate.n
        rec["stage"] = "finals" + (" (tied with the kept previous best)" if tied else "")
        rec["record"] = [rec["record"][0], [value], *rec["record"][2:]]


def _search_top(
    records: Sequence[Trial],
    first_trial: Mapping[str, int],
    scale: float,
    flop: float,
    full: Callable[[Mapping[str, Any] | None], dict[str, Any]],
) -> list[Measured]:
    """The search's records that were not finalists, on the finals' scale, as the log
    ranks them; the search's own number kept."""
    return [
        Measured(
            full(e["knobs"]),
            e["record"][1][0],  # as logged, on the finals' scale
            gflops(flop, e["record"][1][0]),
            ci_lo_s=ci[0] * scale if (ci := e.get("ci")) else None,
            ci_hi_s=ci[1] * scale if ci else None,
            n=int(e.get("n", 0)),
            stage=e.get("stage") or "search",
            search_s=e["latency_s"],
            trial=first_trial.get(knobs_key(e["knobs"])),
        )
        for e in _valid_sorted(records)
        if not str(e.get("stage", "")).startswith("finals")
    ]


def _verdict(fin: FinalsOutcome) -> str | None:
    """This run's best search finalist against the previous best (`stats.compare`);
    None without both."""
    verdict = None
    pr = next((r for r in fin.results if r.finalist.role == "previous" and r.estimate), None)
    news = [r for r in fin.results if r.finalist.role == "search" and r.estimate]
    if pr is not None and news:
        nb = min(news, key=lambda r: r.estimate.value)  # type: ignore[union-attr]
        verdict = stats.compare(nb.estimate, pr.estimate)  # type: ignore[arg-type]
    return verdict
