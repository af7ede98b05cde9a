"""What an old log's replay was worth on the new template: the report of one workload
(`ReplayReport`), kept in its results and said in the README, the commit message and
on the console. The replay itself is `history.py` (TVM-free) and the tuner's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .history import KnobDiff
from .stats import fmt_latency


@dataclass(frozen=True)
class ReplayReport:
    """What the old configurations of one workload were worth on the new template."""

    source: str  # the old log's file name
    offered: int  # distinct old configurations mapped (after dedup in the new space)
    whole: int  # mapped with every knob kept
    built: int
    correct: int  # built and matched reference()
    measured: int
    knob_diff: KnobDiff
    reset_counts: dict[str, int] = field(default_factory=dict)  # knob -> configs it was reset in
    failures: tuple[str, ...] = ()  # first errors, short
    old_best_s: float | None = None  # the old best (mapped) in the finals, seconds
    old_best_rel: float | None = None  # its precision (relative half-width)
    verdict: str | None = None  # this run's best vs the old best: faster/equal/slower
    seeded: bool = False  # the search started from the replayed configurations
    prior: int = 0  # the old log's other records the cost model learned from first
    from_target: str | None = None  # seeded from this target's log (seed-from, the nearest), not our own
    probes: int = 0  # points of the region the edit opened, next to the old best, measured
    finals_left_out: int = 0  # search finalists left out: old programs the edit left unchanged
    # A new workload (or one whose parameters changed) seeded from the set's siblings in
    # `source`, nearest shape first (siblings.py); () for an edit's replay.
    siblings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "offered": self.offered,
            "whole": self.whole,
            "built": self.built,
            "correct": self.correct,
            "measured": self.measured,
            "knob_diff": self.knob_diff.to_json(),
            "reset_counts": dict(self.reset_counts),
            "failures": list(self.failures),
            "old_best_s": self.old_best_s,
            "old_best_rel": self.old_best_rel,
            "verdict": self.verdict,
            "seeded": self.seeded,
            "prior": self.prior,
            "from_target": self.from_target,
            "probes": self.probes,
            "finals_left_out": self.finals_left_out,
            **({"siblings": list(self.siblings)} if self.siblings else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReplayReport:
        kd = d.get("knob_diff") or {}
        return cls(
            source=str(d.get("source", "")),
            offered=int(d.get("offered", 0)),
            whole=int(d.get("whole", 0)),
            built=int(d.get("built", 0)),
            correct=int(d.get("correct", 0)),
            measured=int(d.get("measured", 0)),
            knob_diff=KnobDiff(
                tuple(kd.get("added", ())),
                tuple(kd.get("removed", ())),
                tuple(kd.get("changed", ())),
                bool(kd.get("known", True)),
            ),
            reset_counts={str(k): int(v) for k, v in (d.get("reset_counts") or {}).items()},
            failures=tuple(str(x) for x in d.get("failures", ())),
            old_best_s=d.get("old_best_s"),
            old_best_rel=d.get("old_best_rel"),
            verdict=d.get("verdict"),
            seeded=bool(d.get("seeded", False)),
            prior=int(d.get("prior", 0)),
            from_target=d.get("from_target"),
            probes=int(d.get("probes", 0)),
            finals_left_out=int(d.get("finals_left_out", 0)),
            siblings=tuple(str(x) for x in d.get("siblings", ())),
        )

    def sentences(self) -> list[str]:
        """The report in words (README, commit message, console)."""
        if self.siblings:
            return self._sibling_sentences()
        out = [f"knobs: {self.knob_diff.sentence()}"]
        if self.from_target:  # not this target's own history: say whose it is
            out.insert(
                0,
                f"seeded from the {self.from_target} log {self.source} (another target: its configurations "
                "mapped through both targets' facts, a split counted in vectors read both as the same elements "
                "and as the same vectors; a weaker prior; the cold stop rule ends the search)",
            )
        if not self.offered:
            out.append(f"no configuration of {self.source} could be mapped: a cold search")
            return out
        out.append(
            self._counts(f"old configuration(s) of {self.source} replayed", "with every knob kept", "repaired or new")
        )
        if self.correct == 0:
            out.append("none still works on the new template: the search started cold")
        elif self.seeded:
            out.append("the search started from them (seeded population, trained cost model)")
        if self.probes:
            out.append(
                f"{self.probes} point(s) of the region the edit opened, next to the old "
                "best, measured before the search"
            )
        if self.prior:
            out.append(
                f"the cost model also learned from {self.prior} other record(s) of "
                f"{self.source} before the first batch (old latencies, new programs)"
            )
        if self.old_best_s is not None:
            old = fmt_latency(self.old_best_s, self.old_best_rel)
            theirs = f"the {self.from_target} best" if self.from_target else "the old best"
            verdict = {
                "faster": "the new best is faster beyond the noise",
                "slower": f"{theirs} is faster beyond the noise",
                "equal": "equal within noise",
            }.get(self.verdict or "", "")
            where = (
                "the best of the " + self.from_target + " log on this target"
                if self.from_target
                else "old best on the new template"
            )
            out.append(f"{where}: {old}" + (f"; {verdict}" if verdict else ""))
        if self.finals_left_out:
            out.append(
                f"{self.finals_left_out} of the search's finalists were programs {self.source} "
                "measured, which the edit left unchanged as it did the old best's: left out of "
                "the finals, since the old search ranked them below its best; the finals asked "
                "whether a program it never measured beats it"
            )
        if self.failures:
            out.append("first failures: " + "; ".join(self.failures))
        return out

    def _counts(self, what: str, kept: str, moved: str) -> str:
        """How many configurations were offered, kept whole, built, right and measured."""
        resets = ", ".join(f"{k} in {n}" for k, n in sorted(self.reset_counts.items()))
        return (
            f"{self.offered} {what}: {self.whole} {kept}"
            + (f", {moved}: {resets}" if resets else "")
            + f"; {self.built} built, {self.correct} computed the right result"
            + (f", {self.measured} measured" if self.measured != self.correct else "")
        )

    def _sibling_sentences(self) -> list[str]:
        """The report of a new shape seeded from its siblings (siblings.py), in words."""
        names = ", ".join(self.siblings)
        out = [f"a new shape, seeded from its siblings in {self.source} (nearest first): {names}"]
        if not self.offered:
            out.append("no sibling configuration mapped onto this shape beyond its default: a cold search")
            return out
        out.append(
            self._counts(
                "of the siblings' best and top configurations mapped onto this shape's legal knob values",
                "as they were",
                "moved to the nearest legal value",
            )
            + "; measured before the search"
        )
        if self.correct == 0:
            out.append("none works on this shape: the search started cold")
        elif self.seeded:
            out.append("the search started from them (seeded population, trained cost model)")
        if self.prior:
            out.append(
                f"the cost model also learned from {self.prior} other record(s) of the "
                "siblings before the first batch (their latencies scaled by the FLOPs ratio "
                "of the two shapes)"
            )
        if self.old_best_s is not None:
            verdict = {
                "faster": "the new best is faster beyond the noise",
                "slower": "the mapped sibling best is faster beyond the noise",
                "equal": "equal within noise",
            }.get(self.verdict or "", "")
            out.append(
                f"the nearest sibling's best ({self.siblings[0]}'s), mapped onto this shape, "
                f"in the finals: {fmt_latency(self.old_best_s, self.old_best_rel)}"
                + (f"; {verdict}" if verdict else "")
            )
        if self.failures:
            out.append("first failures: " + "; ".join(self.failures))
        return out
