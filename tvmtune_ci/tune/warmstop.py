"""The stop rule of a re-tune with history (`WarmStop`): the search stops once its own
proposals have matched the old best (as the replay measured it) and the cost model
expects nothing more beyond the noise; or when its own proposals come nowhere near the
old configurations; and it stands down for the cold rule when its own best beats the old
best by more than one search differs from another (the old log was weak). It owns what
it counts (the match, its flat batches, the batches it judged, the side-by-side
re-measures) and is fed, batch by batch, the journal's trials and the search's progress.

The loop (`search.Search`) creates one when the replay measured the old best, and asks
it after every batch; the cold rule (patience batches without a gain) still applies
there, as the ceiling. Measuring an own best beside the old best is the loop's
(`measure_beside`: the runner, the builder and the finals are its own).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..core import stats
from ..core.stats import Estimate
from ..core.tunetypes import Trial
from .request import TuneRequest
from .space import knobs_key
from .trials import Progress, entry_estimate, own_entries, trials_of_its_own

# Flat batches after matching the old best before a re-tune with history stops
# (`WarmStop.judge`; early_stop.patience, if smaller, wins).
WARM_PATIENCE = 1
# A warm search's own best this much slower than the old best (as the replay measured
# it) is re-measured beside it before the match is refused: this runner's speed modes
# (1.00/1.09/1.30x, for 1-24 s: benchmarks/study_modes.py) move one figure against
# another taken seconds apart by more than either's band (`WarmStop._side_by_side`).
SIDE_BY_SIDE_WITHIN = 0.35
# Batches judged after the match before the cost model's hope is discounted by how far
# its hopes overshot what those batches measured (`WarmStop.hope_bias`). Its hope is the
# largest of a batch of noisy predictions, so it is biased high: on a noisy Zen 3 the
# model expected gains beyond the noise in 3 of 5 judged softmax batches (median
# +13.6%, +3.9%) and one was measured (median -1.0%, +1.0%; bench_warmstart run N).
HOPE_EVIDENCE = 2
# How much faster than the old best, side by side, the search's own best must be before
# the old log counts as weak and the warm rule stands down for the cold rule
# (`WarmStop._beats_history`). One search's best against another's moves with the seed:
# over the 82 (edit, pass) cases in benchmarks/results/bench_warmstart.txt, cold's
# slowest / fastest best over 3 seeds was a median 1.041, within 1.10 in 58. At the
# noise band alone (±3%), matmul edits' own bests beat strong old logs by 1.04x in
# 3 of 6 runs, which then ran 85-100 trials for bests within 2.5% of the same seeds'
# without it (bench_warmstart run Z2, Zen 5); a weak softmax log was beaten by
# 1.14-1.35x (runs Z1-Z3).
WEAK_HISTORY = 1.10

# Measures an own best's knobs and the old best's, interleaved, now: (own, old), each
# None when it failed.
MeasureBeside = Callable[[Mapping[str, Any], Mapping[str, Any]], tuple["Estimate | None", "Estimate | None"]]


@dataclass(frozen=True)
class WarmOptions:
    """What the warm rule needs of the request: the search precision (the least noise
    band), the cold rule's patience (the warm rule's is at most that), the trial budget,
    the race factor (for its words) and the cost model's warm-up (`search.WARMUP_SAMPLES`)."""

    precision: float
    patience: int
    trials: int
    race: float
    warmup: int

    @classmethod
    def of(cls, req: TuneRequest, warmup: int) -> WarmOptions:
        return cls(
            precision=req.measure.search_precision,
            patience=req.early_stop.patience,
            trials=req.trials,
            race=req.measure.race,
            warmup=warmup,
        )


class Verdict(NamedTuple):
    """The warm rule's answer after a batch: whether to stop, the noise band it judged
    with (`WarmStop.record` counts the batch against the same band), and why it stopped,
    in words ("" when it did not)."""

    stop: bool
    band: float
    detail: str = ""


def own_best(trials: Sequence[Trial]) -> tuple[Estimate, Trial] | None:
    """The best of the search's own proposals (its estimate and journal entry): not
    the replay, nor the probes of an opened region (the old best with one knob
    moved, equal to it within the noise by construction). Counting the probes let
    the softmax new-candidate edit 'match' after its first batch and stop at 21
    trials; two of three such stops ended slower than cold (bench_warmstart runs D
    and F, Zen 4)."""
    own = [(est, e) for e in own_entries(trials) if (est := entry_estimate(e)) is not None]
    return min(own, key=lambda x: x[0].value, default=None)


class WarmStop:
    """The stop rule of one re-tune with history, against `old_best` (the old best on the
    new template, as the replay measured it, and its knobs)."""

    def __init__(
        self, options: WarmOptions, old_best: Estimate, old_best_knobs: Mapping[str, Any], measure_beside: MeasureBeside
    ) -> None:
        self.options = options
        self.old_best = old_best
        self.old_best_knobs = dict(old_best_knobs)
        self._measure_beside = measure_beside
        self.matched_at: int | None = None  # own trials when the search matched it
        self.stale = 0  # batches the warm rule counted flat (the cold rule: progress)
        # Each batch the warm rule judged after the match: (the cost model's predicted gain
        # of the batch's best candidate, the noise band, the gain the batch measured over
        # the incumbent). How often the model's hope of a gain came true is what a
        # cheaper rule would have to know (`hopes`, the bench prints it).
        self.judged: list[tuple[float, float, float]] = []
        # The own bests re-measured beside the old best, and how that went:
        # (own / old, side by side; matched).
        self.beside: dict[str, tuple[Estimate, Estimate] | None] = {}
        self.side_asked: set[str] = set()
        self.side_by_side: list[tuple[float, bool]] = []
        # When the search's own best beat the old best beyond the noise, side by side:
        # (its own trials then, own / old). From then on the old log vouches for nothing
        # and the cold rule alone stops the run (`_beats_history`).
        self.beaten: tuple[int, float] | None = None
        self.beaten_note = ""
        self.match_note = ""

    # ---- after each batch

    def judge(self, improved: bool, gain: float | None, trials: Sequence[Trial], progress: Progress) -> Verdict:
        """A re-tune with history stops once its own search has matched the old best
        within the noise and then, for one batch (`WARM_PATIENCE`), neither improved on
        the incumbent nor has a candidate the cost model expects to beat it beyond the
        noise. Its model learned from the old log's records and the replay, so it needs
        none of the cold rule's warm-up of the search's own samples, nor its patience:
        with the cold rule's 3 batches a no-op edit cost 1.24x a cold run on a Xeon
        (bench_warmstart, 3 seeds), where cold stopped at its 64-trial minimum. Counting
        the replayed old best as the match (no own match needed when the edit opened no
        knob values) was tried on a Zen 5 and not kept: 0.65x cold's seconds, but one
        seed of a loop-order edit stopped after 24 trials at 6.75 ms, against cold's
        4.86-5.18 ms (benchmarks/results/bench_warmstart.txt, run C). The cold rule
        still applies (`Search._loop`): a model that keeps expecting gains cannot make a
        warm run longer than a cold one. After HOPE_EVIDENCE judged batches the model's
        hope is discounted by how far its hopes overshot what was measured (`hope_bias`).
        `gain`: the cost model's best predicted gain of the batch (None: not trained)."""
        o = self.options
        best = progress.best
        band = self._band(best) if best is not None else o.precision
        if self._beats_history(trials):
            return Verdict(False, band)
        bias = self.hope_bias()
        flat = gain is not None and gain - bias < band
        found = own_best(trials) if self.matched_at is None else None
        if found is not None:
            own, entry = found
            old = self.old_best.value
            # Within the noise of the replay's figure; or, when the model expects nothing
            # more, near enough that a speed mode could be the difference: then asked
            # side by side.
            if own.value <= old * (1 + self._band(self.old_best)) or (
                flat and not improved and own.value <= old * (1 + SIDE_BY_SIDE_WITHIN) and self._side_by_side(entry)
            ):
                self.matched_at = trials_of_its_own(trials)
        if (why := self.nowhere_near(found, gain, band, trials, progress)) is not None:
            return Verdict(True, band, why)
        if improved or self.matched_at is None or not flat:
            self.stale = 0
        else:
            self.stale += 1
        patience = min(o.patience, WARM_PATIENCE)
        if patience > 0 and self.stale >= patience and len(trials) < o.trials:
            batches = f"for {patience} batches" if patience > 1 else "for a batch"
            discounted = ""
            if bias > 0 and gain is not None and gain >= band:
                n = len(self.judged)
                discounted = (
                    f" once its hope (+{gain:.1%}) was discounted by how far its hopes "
                    f"overshot the {n} batches before (a median {bias:.1%})"
                )
            return Verdict(
                True,
                band,
                f"matched the old best after {self.matched_at} trials of its own"
                f"{self.match_note}; "
                f"{batches} the cost model expected no gain beyond "
                f"the noise (±{band:.1%}){discounted} and none was measured",
            )
        return Verdict(False, band)

    def reason(self) -> str:
        """The stop reason of a run this rule stopped."""
        return "matched_history" if self.matched_at is not None else "nowhere_near"

    def record(self, gain: float, band: float, incumbent: Estimate, batch: Sequence[Trial]) -> None:
        """Keep what the warm rule saw (`gain` against `band`) in a batch after the match,
        with what that batch (its journal entries) measured against `incumbent`."""
        ests = [entry_estimate(e) for e in batch if e["error"] is None]
        got = min((e.value for e in ests if e is not None), default=math.inf)
        self.judged.append((gain, band, incumbent.value / got - 1))

    def cold_stop_words(self, patience: int) -> str:
        """Why the cold rule stopped a re-tune with history, in words: after the old log
        was beaten, or after the match though the model still expected a gain; "" else."""
        batches = f"{patience} batch{'es' if patience > 1 else ''}"
        if self.beaten is not None:
            return (
                f"{self.beaten_note}; then {batches} without a gain beyond the noise (early stop, the cold run's rule)"
            )
        if self.matched_at is not None:
            return (
                f"matched the old best after {self.matched_at} trials of its own; then "
                f"{batches} without a gain beyond the "
                "noise (early stop, the cold run's rule), though the cost model still "
                "expected one"
            )
        return ""

    # ---- what it counted

    def hopes(self) -> dict[str, float]:
        """The warm rule's batches after the match, in numbers: how many, in how many
        the cost model expected a gain beyond the noise (which kept the run going), in
        how many of those a gain beyond the noise was measured, and the medians of both
        gains in those batches. {} when the rule judged none."""
        if not self.judged:
            return {}
        hoped = [(g, m) for g, band, m in self.judged if g >= band]
        met = sum(m >= band for g, band, m in self.judged if g >= band)
        out = {"warm_batches": float(len(self.judged)), "warm_hoped": float(len(hoped)), "warm_hoped_met": float(met)}
        if hoped:
            out["warm_hoped_predicted"] = statistics.median(g for g, _ in hoped)
            out["warm_hoped_measured"] = statistics.median(m for _, m in hoped)
        return out

    def hope_bias(self) -> float:
        """How far the cost model's predicted gains overshot the gains measured, in the
        batches the warm rule judged after the match: the median of (predicted - measured),
        once HOPE_EVIDENCE batches were judged; 0 before, and never below 0 (a model that
        under-promised is not taken at more than its word). A model whose hopes come true
        (an edit that opened a better region) keeps them; one that keeps hoping in the
        noise stops being waited for."""
        if len(self.judged) < HOPE_EVIDENCE:
            return 0.0
        return max(0.0, statistics.median(g - m for g, _, m in self.judged))

    def stats(self) -> dict[str, float]:
        """The rule's counts for the search's stats (warm_*): its hopes, the bias once
        judged, when the old log was beaten, and the side-by-side re-measures."""
        return {
            **self.hopes(),
            **({"warm_hope_bias": self.hope_bias()} if len(self.judged) >= HOPE_EVIDENCE else {}),
            **(
                {"warm_beaten_at": float(self.beaten[0]), "warm_beaten_ratio": self.beaten[1]}
                if self.beaten is not None
                else {}
            ),
            # Own bests measured beside the old best (for the match or `_beats_history`).
            **({"warm_beside": float(len(self.beside))} if self.beside else {}),
            **(
                {
                    "warm_side_by_side": float(len(self.side_by_side)),
                    "warm_side_by_side_matched": float(sum(ok for _, ok in self.side_by_side)),
                }
                if self.side_by_side
                else {}
            ),
        }

    # ---- the rule's parts

    def nowhere_near(
        self,
        found: tuple[Estimate, Trial] | None,
        gain: float | None,
        band: float,
        trials: Sequence[Trial],
        progress: Progress,
    ) -> str | None:
        """Why the run stops, in words, when a re-tune with history's search cannot come
        near the old configurations; None when it can (or may yet). Then: WARMUP_SAMPLES
        of its own proposals (the evidence the cold rule asks before it counts a flat
        batch), none of which matched the incumbent, a replayed old configuration
        (`found`, the own best, is slower beyond the noise, side by side where it was near),
        and the cost model, trained on the old log, the replay and those proposals, expects
        even its best next candidate slower beyond the noise. Without a match the warm rule
        has nothing to count, and the cold rule then ran 3 more batches: both conv2d edits
        of bench_warmstart run S (Zen 5, this CPU's own logs) searched 80 trials where every
        own proposal was raced out and the model's best predicted gain stayed at -46% to
        -64% (cold ran 98-132 trials on them). Stopping those (every own proposal raced out)
        ended 3 of 6 such runs at 48 trials, in 21-24 s against 31-33 s, their bests within
        cold's own spread (run T); the other 3 had an own best inside the race margin, which
        the rule did not count before run V. Before it stops, the nearest own proposal is
        measured beside the old best (`_side_by_side`): one that matches there is the match.
        Not when the incumbent is the search's own or a probe of an opened region: there the
        search is where the edit made room, not behind the old log."""
        o = self.options
        if self.matched_at is not None or gain is None or gain >= -band:
            return None
        entries = own_entries(trials)
        own = len(entries)
        best = progress.best_knobs
        if own < o.warmup or best is None or len(trials) >= o.trials:
            return None
        key = knobs_key(best)
        if not any(e.get("source") == "replay" and knobs_key(e["knobs"]) == key for e in trials):
            return None
        # The race and the incumbent's figure are of different moments: asked side by side
        # before giving up, the nearest own proposal may match the old best after all (a
        # replay measured in a fast stretch raced a softmax seed's 55 proposals against
        # 519 us; its best re-measured at 593 us; run V). Then it is the match.
        nearest = found[1] if found is not None else min(entries, key=lambda e: e.get("latency_s") or math.inf)
        if self._side_by_side(nearest):
            self.matched_at = trials_of_its_own(trials)
            return None
        incumbent = progress.best
        assert incumbent is not None
        old = stats.fmt_latency(incumbent.value, incumbent.rel_halfwidth)
        if found is None:
            near = f"all ran more than {o.race:g}x slower than the old configurations' best ({old})"
        else:
            est = found[0]
            near = (
                f"came no nearer than {est.value / incumbent.value:.2f}x the old configurations' "
                f"best ({old}; its own best {stats.fmt_latency(est.value, est.rel_halfwidth)})"
            )
        return (
            f"its own {own} proposals {near}, and the cost model expected its next candidates "
            f"slower still (its best {gain:+.1%}, beyond the noise of ±{band:.1%}): the old "
            "configurations stand as the search's best"
        )

    def _beside(self, entry: Trial) -> tuple[Estimate, Estimate] | None:
        """The own best `entry` and the old best, measured now, interleaved
        (`measure_beside`): (own, old); None when either failed. Each own best is
        measured once (the answer is kept)."""
        key = knobs_key(entry["knobs"])
        if key in self.beside:
            return self.beside[key]
        own, old = self._measure_beside(entry["knobs"], self.old_best_knobs)
        pair = (own, old) if own is not None and old is not None else None
        self.beside[key] = pair
        return pair

    def _side_by_side(self, entry: Trial) -> bool:
        """Whether the own best `entry` matches the old best when both are measured
        now, interleaved (`_beside`: each own best is measured once). Without this, a
        replay measured in a fast stretch of the runner kept a warm search from ever
        matching: on a noisy Zen 3 one softmax seed searched on to the cold rule
        (80 trials, 1.59x cold's seconds; run M)."""
        key = knobs_key(entry["knobs"])
        pair = self._beside(entry)
        if pair is None:
            return False
        own, old = pair
        ok = own.value <= old.value * (1 + self._band(old))
        if key not in self.side_asked:
            self.side_asked.add(key)
            self.side_by_side.append((own.value / old.value, ok))
        if ok:
            self.match_note = (
                f" (re-measured beside it: {stats.fmt_latency(own.value, own.rel_halfwidth)} "
                f"against {stats.fmt_latency(old.value, old.rel_halfwidth)})"
            )
        return ok

    def _beats_history(self, trials: Sequence[Trial]) -> bool:
        """Whether the search's own best has beaten the old best beyond the noise and
        beyond what one search's best differs from another's by the seed (WEAK_HISTORY),
        both measured side by side (a figure taken in a fast stretch of the runner does
        not count). Then the old log was not the optimum of the space it searched, or
        the edit made a better one: either way it no longer vouches that the rest of the
        space is searched, and the warm rule, which trusts that, stands down for the
        cold rule. Without this a weak old log passed its weakness on: its softmax
        attn_512 best (a 67-trial search on a noisy runner) was matched after 17 own
        trials and the warm rule stopped one batch later, at 1.08-1.22x cold's best,
        beyond cold's spread between seeds, in 5 of 10 runs; with this, 1.021x, 0.999x and
        1.031x, within it in 3 of 3 A/B runs (bench_warmstart, Zen 5, edit 2; runs Z1, Z3,
        Z6)."""
        if self.beaten is not None:
            return True
        found = own_best(trials)
        if found is None:
            return False
        own, entry = found

        def beats(a: Estimate, b: Estimate) -> bool:
            return a.value < b.value * min(1 - self._band(b), 1 / WEAK_HISTORY)

        if not beats(own, self.old_best):
            return False
        pair = self._beside(entry)
        if pair is None or not beats(*pair):
            return False
        mine, old = pair
        self.beaten = (trials_of_its_own(trials), mine.value / old.value)
        self.beaten_note = (
            f"its own best beat the old best by {old.value / mine.value:.2f}x after {self.beaten[0]} "
            f"trials of its own ({stats.fmt_latency(mine.value, mine.rel_halfwidth)} "
            f"against {stats.fmt_latency(old.value, old.rel_halfwidth)}, side by side), "
            "so the old log no longer vouched for the rest of the space"
        )
        return True

    def _band(self, a: Estimate) -> float:
        """The relative noise band around `a`: its interval, at least the search precision."""
        rel = a.rel_halfwidth if math.isfinite(a.rel_halfwidth) else 0.0
        return max(rel, self.options.precision)
