"""Re-measure each committed best on its target's runner and say what drifted.

Per (operator, target, workload): the manifest's best and the default configuration
are measured in interleaved finals (`measure.finals`), on the target's own runner
(this machine or its RPC devices), and compared with what the README states:

- the best's latency now against the recorded one, beyond the noise or not (the two
  95% intervals overlap: "equal"; a recorded latency without an interval, a format-1
  log, counts as exact);
- the speedup over the default now against the recorded speedup: a ratio measured
  side by side, so it survives a machine that is uniformly faster or slower.

Seconds per entry; no search, nothing written. Used by the yearly workflow before it
re-tunes and as a cheap monthly job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from . import stats
from .config import Config
from .manifest import Measured
from .staleness import Entry

Say = Callable[[str], None]


@dataclass(frozen=True)
class Drift:
    operator: str
    target: str
    workload: str
    recorded: Measured
    recorded_speedup: float
    now: stats.Estimate | None = None
    now_speedup: float | None = None
    verdict: str = "error"  # "equal", "slower", "faster" (now vs recorded), "error"
    error: str | None = None
    readme: str = ""  # the README that states the recorded latency (repo-relative)

    @property
    def drifted(self) -> bool:
        return self.verdict in ("slower", "faster")

    @property
    def ratio(self) -> float | None:
        return self.now.value / self.recorded.latency_s if self.now is not None else None

    def to_json(self) -> dict[str, object]:
        return {
            "operator": self.operator, "target": self.target, "workload": self.workload,
            "recorded": {"latency_s": self.recorded.latency_s, "ci_lo_s": self.recorded.ci_lo_s,
                         "ci_hi_s": self.recorded.ci_hi_s, "speedup": self.recorded_speedup},
            "now": self.now.to_json() | {"speedup": self.now_speedup} if self.now else None,
            "ratio": self.ratio, "verdict": self.verdict, "error": self.error,
            "readme": self.readme,
        }


def _recorded(m: Measured) -> stats.Estimate:
    lo = m.ci_lo_s if m.ci_lo_s is not None else m.latency_s
    hi = m.ci_hi_s if m.ci_hi_s is not None else m.latency_s
    return stats.Estimate(m.latency_s, lo, hi, m.n)


def remeasure_entry(config: Config, entry: Entry, say: Say = print) -> list[Drift]:
    """Re-measure every workload's best of a log set (see the module docstring)."""
    from .builder import make_builder
    from .hostcheck import check_host
    from .measure import Finalist, finals
    from .pipeline import measure_threads, tvm_threads
    from .runners import make_runner
    from .template import import_template

    assert entry.manifest is not None
    target = config.target(entry.target_name)
    check_host(target.target, remote=target.rpc is not None)
    if target.rpc is not None:
        from .devices import preflight

        preflight(target.rpc, config.measure)
    readme = f"{config.logs_dir}/{entry.operator}/{entry.logset.target_slug}/README.md"
    out: list[Drift] = []
    with tvm_threads(measure_threads(target)):
        module = import_template(config.root / entry.template_file, config.root)
        runner = make_runner(config.measure, target.rpc)
        builder = make_builder()
        try:
            for w, res in sorted(entry.manifest.results.items()):
                base = Drift(entry.operator, entry.target_name, w, res.best, res.speedup, readme=readme)
                say(f"{entry.operator}/{entry.target_name}/{w}: re-measuring the best and the default")
                best, default = finals(
                    module, w, target.target,
                    [Finalist("best", dict(res.best.knobs), "best"), Finalist("default", None, "default")],
                    config.measure, runner=runner, builder=builder,
                )
                if best.estimate is None or default.estimate is None:
                    err = best.error or default.error or "not measured"
                    out.append(Drift(**{**vars(base), "error": err}))
                    continue
                now = best.estimate
                verdict = stats.compare(now, _recorded(res.best))
                verdict = {"faster": "faster", "slower": "slower"}.get(verdict, "equal")
                out.append(Drift(**{**vars(base), "now": now,
                                    "now_speedup": default.estimate.value / now.value,
                                    "verdict": verdict}))
        finally:
            builder.close()
            runner.close()
    return out


def describe(d: Drift) -> str:
    """One line: what the README says, what was measured now, and the verdict."""
    rec = stats.fmt_latency(
        d.recorded.latency_s,
        d.recorded.rel_halfwidth if d.recorded.rel_halfwidth is not None else math.inf,
    )
    head = f"{d.operator}/{d.target}/{d.workload}: recorded {rec}"
    if d.now is None:
        return f"{head}; could not be re-measured: {d.error}"
    words = {"equal": "equal within noise", "slower": "SLOWER beyond the noise",
             "faster": "faster beyond the noise"}[d.verdict]
    return (f"{head}, now {stats.fmt_latency(d.now)} ({d.ratio:.3f}x): {words}; speedup vs "
            f"default {d.recorded_speedup:.1f}x recorded, {d.now_speedup:.1f}x now (same run)")
