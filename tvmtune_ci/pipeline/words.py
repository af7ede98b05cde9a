"""The words a re-tune reports: the history replay's report, the sentence on the
previous best, the commit message."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.replayreport import ReplayReport
from ..core.stats import fmt_latency
from .job import RetuneResult

if TYPE_CHECKING:
    pass


def replay_report(
    source: str,
    mapped: Sequence[Any],
    diff: Any,
    outcome: Any,
    from_target: str | None = None,
    siblings: Sequence[str] = (),
) -> Any:
    """The history report of one workload: the replay's counts and the old best's
    place in the finals (it was the "previous" finalist when it still worked)."""
    rs = outcome.replay
    resets = Counter(name for m in mapped for name in m.reset)
    old = outcome.previous if rs is not None and rs.old_best_correct else None
    return ReplayReport(
        source=source,
        offered=len(mapped),
        whole=sum(not m.reset for m in mapped),
        built=rs.built if rs else 0,
        correct=rs.correct if rs else 0,
        measured=rs.measured if rs else 0,
        knob_diff=diff,
        reset_counts=dict(resets),
        failures=rs.failures if rs else (),
        old_best_s=old.latency_s if old is not None else None,
        old_best_rel=old.rel_halfwidth if old is not None else None,
        verdict=outcome.previous_verdict if old is not None else None,
        # No search to seed when the old one stood (search.old_search_stands).
        seeded=bool(rs and rs.measured) and outcome.trials.stop_reason != "history_unchanged",
        prior=rs.prior if rs else 0,
        from_target=from_target,
        probes=rs.probes if rs else 0,
        finals_left_out=rs.finals_left_out if rs else 0,
        siblings=tuple(siblings),
    )


def previous_sentence(source: str, verdict: str) -> str:
    """What happened to the previous best, in words (console, README, commit)."""
    if verdict == "faster":
        return "this run's best is faster than the previous best beyond the noise; switched"
    if verdict == "slower":
        if source == "previous":
            return "the previous best is faster beyond the noise; kept it"
        return "the previous best is faster beyond the noise, but another finalist won"
    if source == "previous":
        return "this run's best and the previous best are equal within noise; kept the previous best"
    return "this run's best and the previous best are equal within noise"


def commit_message(results: Sequence[RetuneResult]) -> str:
    """The re-tune commit: per workload the best with its precision, the speedup
    against the default from the same finals, and what became of the previous best."""

    parts = []
    body = []
    for r in results:
        m = r.manifest
        if m.carried:
            parts.append(f"{m.operator} on {m.target_name} carried forward")
            body.append(f"- {m.operator}/{m.target_name}: carried forward unmeasured: {m.carried['sentence']}")
            continue
        carried = set(m.partial.get("carried", ())) if m.partial else set()
        parts.append(
            f"{m.operator} on {m.target_name}"
            + (f" ({', '.join(m.partial['tuned']) or 'nothing'} tuned, {len(carried)} carried)" if m.partial else "")
        )
        if m.partial:
            body.append(f"- {m.operator}/{m.target_name}: {m.partial['sentence']}")
        for w, res in sorted(m.results.items()):
            if w in carried:
                body.append(
                    f"- {m.operator}/{m.target_name}/{w}: carried unmeasured from "
                    f"{m.partial['from_log']}, best {fmt_latency(res.best.latency_s, res.best.rel_halfwidth)}"
                )
                continue
            if res.history is not None:
                for line in ReplayReport.from_json(res.history).sentences():
                    body.append(f"- {m.operator}/{m.target_name}/{w}: history: {line}")
            prev = ""
            if res.previous_best is not None and res.previous_verdict is not None:
                prev = (
                    f"; previous best {fmt_latency(res.previous_best.latency_s, res.previous_best.rel_halfwidth)}: "
                    + previous_sentence(res.best_source, res.previous_verdict)
                )
            t = m.trials[w]
            budget = f"; budget: {t.budget_note}" if t.budget_note else ""
            body.append(
                f"- {m.operator}/{m.target_name}/{w}: {t.run} trials ({t.stop_detail or t.stop_reason}{budget}), "
                f"best {fmt_latency(res.best.latency_s, res.best.rel_halfwidth)} ({res.best.stage or 'measured'}), "
                f"{res.speedup:.1f}x vs default{prev}"
            )
    total = sum(
        t.run
        for r in results
        if not r.manifest.carried
        for w, t in r.manifest.trials.items()
        if w not in (r.manifest.partial.get("carried", ()) if r.manifest.partial else ())
    )
    speed = min((s for r in results for s in r.speedups().values()), default=1.0)
    head = f"tvmtune: re-tune {', '.join(parts)} ({total} trials, {speed:.1f}x vs default)"
    return (
        head
        + "\n\n"
        + "\n".join(body)
        + (
            "\n\nLatencies: lower quartile of the samples ± half its 95% interval. "
            "Written by tvmtune-ci retune; logs only, this commit does not trigger a re-tune.\n"
        )
    )
