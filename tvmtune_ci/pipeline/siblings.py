"""A workload the set's log has not tuned (added to WORKLOADS, or its parameters
changed) seeded from its siblings in that log (`sibling_seed`; the mapping is
core/siblings.py): their bests and top tables mapped onto its legal knob values are
replayed first, their other records teach the cost model, and the search stops by the
warm rule (matched the replayed best, then a batch with nothing expected beyond the
noise), with the cold rule as its ceiling.

Everything here is a prior: a sibling configuration that fails to map, build or
compute right is left out, and records that cannot be read cost the prior, never the
re-tune."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import siblings
from ..core.history import Mapped
from ..core.siblings import map_siblings, nearest, same_params, scaled_prior, sibling_configs
from ..tune.workload import Workload
from .job import Job


@dataclass(frozen=True)
class SiblingSeed:
    """What seeds one new workload: the siblings (the mapped configurations' sources
    first, in their order), the mapped configurations, the cost model's prior."""

    siblings: tuple[str, ...]
    mapped: tuple[Mapped, ...]
    prior: tuple[tuple[dict[str, Any], float], ...]

    def sentence(self, log: str) -> str:
        return (
            f"a new shape: seeded from its siblings in {log} ({', '.join(self.siblings)}; nearest "
            f"first): {len(self.mapped)} of their configurations mapped onto its legal knob "
            f"values are replayed first, and the cost model learns {len(self.prior)} of their "
            "records, latencies scaled by the FLOPs ratio"
        )


def is_new_shape(job: Job, wname: str) -> bool:
    """Whether `wname` has no history of its own shape in the replayed log (this
    target's own): added since, or its parameters changed."""
    hist, tpl = job.history, job.template
    if hist is None or hist.from_target is not None or tpl is None:
        return False
    return siblings.is_new_shape(hist.manifest, wname, tpl.decl.workloads[wname])


def sibling_seed(job: Job, wname: str) -> SiblingSeed | None:
    """The seed of a new shape from the replayed log's other workloads (and its own
    earlier shape, when its parameters changed); None when it has none to go by."""
    hist, tpl, target = job.history, job.template, job.target.target
    assert hist is not None and tpl is not None
    old = hist.manifest
    params = dict(tpl.decl.workloads[wname])
    shapes = {s: dict(old.workloads[s]) for s in old.results if isinstance(old.workloads.get(s), dict)}
    if not shapes:
        return None
    order = nearest(params, shapes)
    mapped = map_siblings(sibling_configs(old, order), tpl.decl.knobs, params, target)
    sources = list(dict.fromkeys(s for s, _ in mapped))
    names = (*sources, *(s for s in order if s not in sources))
    prior: tuple[tuple[dict[str, Any], float], ...] = ()
    with_records = [s for s in order if hist.records.get(s)]
    if with_records:
        try:
            # The FLOPs of the shape each sibling's records measured: a sibling whose
            # parameters changed too is resolved again with its old ones.
            flops = {
                s: job.workloads[s].flops
                if s in job.workloads and same_params(tpl.decl.workloads.get(s), shapes[s])
                else Workload(tpl.module, s, shapes[s], target).flops
                for s in with_records
            }
            prior = scaled_prior(
                {s: hist.records[s] for s in with_records},
                flops,
                job.workloads[wname].flops,
                tpl.decl.knobs,
                params,
                target,
                [m.knobs for _, m in mapped],
            )
        except Exception as e:  # a prior, never a reason to refuse: say what it cost
            job.say(f"{wname}: the siblings' records do not teach the cost model ({type(e).__name__}: {e})")
    return SiblingSeed(names, tuple(m for _, m in mapped), prior)
