"""How a model's call sites are covered, together: the epilogue chains fused into a
covered call's kernel (core/epilogue.py) and the transposes a covered call takes
through its pattern. TVM-free, like the per-call matching in core/contract.py that it
builds on; `check` runs it on the call sites a coverage file recorded.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .contract import (
    ABSORBED,
    COVERED,
    FUSED,
    PERMUTE,
    UNCOVERED_SHAPE,
    CallSig,
    Contract,
    Coverage,
    Implements,
    _keys,
    covering_entry,
    match,
    unify,
)
from .epilogue import chain, prepacked


def coverage_of(
    calls: Sequence[tuple[CallSig, Sequence[int]]], contracts: Sequence[Contract], escapes: Collection[int] = ()
) -> list[Coverage]:
    """The coverage of every call site: `calls` are (signature, the indices of the
    call sites whose outputs it takes as arguments, -1 for a non-call) in program
    order; `escapes`, the sites whose output is also used other than as a call's
    argument (returned, put in a tuple). A permute_dims every consumer of which is
    covered and takes it through a `permute_dims` pattern is absorbed (the template
    reads the tensor before it); otherwise it is matched like any other call (a
    transpose that runs). A covered call's epilogue chain is fused where a workload
    declares it (`fused_chains`)."""
    return fused_chains(calls, contracts, escapes)[0]


def fused_chains(
    calls: Sequence[tuple[CallSig, Sequence[int]]], contracts: Sequence[Contract], escapes: Collection[int] = ()
) -> tuple[list[Coverage], dict[int, tuple[int, ...]]]:
    """`coverage_of`, and {covered call site: the sites of the epilogue ops its kernel
    runs, in order}. The elementwise ops after a covered call (`epilogue_kind`), each
    the only user of the one before, form its chain; the longest start of it that
    the covering entry declares and a workload of the same params runs (`"epilogue":
    [...]`) is fused (those ops are FUSED), the rest is listed as running alone. Ops
    a call before it fused are not taken again. Where the entry declares packable
    arguments (`"prepack"`) and the call's are weights, a prepacked workload is taken
    first."""
    out = [match(sig, contracts) for sig, _ in calls]
    takers: dict[int, list[int]] = {}
    for i, (_, producers) in enumerate(calls):
        for p in producers:
            if p >= 0:
                takers.setdefault(p, []).append(i)
    by_name = {c.template: c for c in contracts}
    escaped = set(escapes)
    claimed: set[int] = set()
    chains: dict[int, tuple[int, ...]] = {}
    for i, (sig, _) in enumerate(calls):
        cov = out[i]
        if cov.status not in (COVERED, UNCOVERED_SHAPE) or cov.template is None:
            continue
        links = _links(i, calls, takers, escaped, claimed)
        c, entry, packable, choice, params = _best_template(sig, cov, contracts, by_name, links, calls)
        if c.template != cov.template:
            cov = out[i] = Coverage(COVERED, c.template, None, params)
        kinds = tuple(k for _, k in links)
        if choice is not None:
            n, w, packed = choice
            out[i] = Coverage(COVERED, c.template, w, cov.params, "", kinds[:n], kinds[n:], packed)
            for site, _ in links[:n]:
                out[site] = Coverage(FUSED, c.template, w, note=f"runs inside {c.template}/{w}'s kernel")
                claimed.add(site)
            chains[i] = tuple(site for site, _ in links[:n])
        if kinds[len(chains.get(i, ())) :] and out[i].status == COVERED:
            left = kinds[len(chains.get(i, ())) :]
            out[i] = replace(out[i], alone=left, note=_alone_note(c, entry, out[i], left, packable))
    _absorb_permutes(calls, out, takers, by_name)
    return out, chains


def _best_template(
    sig: CallSig,
    cov: Coverage,
    contracts: Sequence[Contract],
    by_name: Mapping[str, Contract],
    links: Sequence[tuple[int, str]],
    calls: Sequence[tuple[CallSig, Sequence[int]]],
) -> tuple[Contract, Implements, bool, tuple[int, str, bool] | None, dict[str, Any]]:
    """The template that runs call `sig`, its covering entry, whether the call's weights
    can come packed, its variant (`_variant`) and the workload params it binds. Where
    several templates declare the call's shape (conv2d's direct 3x3 and conv2d_winograd
    both implement a 3x3), the one whose variant runs most of the epilogue chain in its
    kernel wins, then one taking the weights packed (each does less per call); on a
    tie, `match`'s choice (the first by name)."""
    best: tuple[tuple[int, int, int], Contract, Implements, bool, tuple[int, str, bool] | None, dict[str, Any]] | None
    best = None
    first = by_name[str(cov.template)]
    ordered = [first, *(c for c in sorted(contracts, key=lambda c: c.template) if c is not first)]
    for rank, c in enumerate(ordered):
        entry = covering_entry(c, sig)
        if entry is None:
            continue
        bound = unify(entry, sig, _keys(c.workloads))
        params = dict(cov.params) if rank == 0 or bound is None else dict(sorted(bound.items()))
        # Weights packed once where the entry allows it and the arguments are weights;
        # else the plain variants (the kernel packs what it reads, every call).
        packable = bool(entry.prepack) and all(sig.args[k].weight for k in entry.prepack)
        choice = None
        for packed in (True, False) if packable else (False,):
            choice = _variant(c, entry, params, links, calls, packed)
            if choice is not None:
                break
        if rank and choice is None:
            continue  # declares no workload of this shape
        key = (choice[0], int(choice[2]), -rank) if choice is not None else (-1, 0, -rank)
        if best is None or key > best[0]:
            best = (key, c, entry, packable, choice, params)
    assert best is not None  # match() found the first
    return best[1:]


def epilogue_kind(sig: CallSig, slot: int, before: CallSig) -> str | None:
    """Which epilogue `sig` is when it takes `before`'s output as argument `slot`:
    an add of a tensor of the same shape (residual) or another (bias), a multiply by
    a scalar (scale), relu or gelu; None for anything else."""
    if sig.dtype != before.dtype or tuple(sig.shape) != tuple(before.shape):
        return None
    if sig.op == "relax.nn.relu" and len(sig.args) == 1:
        return "relu"
    if sig.op == "relax.nn.gelu" and len(sig.args) == 1:
        return "gelu"
    if len(sig.args) != 2 or sig.op not in ("relax.add", "relax.multiply"):
        return None
    other = sig.args[1 - slot]
    if other.dtype != sig.dtype:
        return None
    if sig.op == "relax.multiply":
        return "scale" if other.shape == () else None
    return "residual" if tuple(other.shape) == tuple(sig.shape) else "bias"


def _links(
    i: int,
    calls: Sequence[tuple[CallSig, Sequence[int]]],
    takers: Mapping[int, Sequence[int]],
    escaped: set[int],
    claimed: set[int],
) -> list[tuple[int, str]]:
    """The epilogue ops after call site `i`: (site, kind), each the only user of the
    output before it."""
    links: list[tuple[int, str]] = []
    cur = i
    while cur not in escaped and len(takers.get(cur, ())) == 1:
        t = takers[cur][0]
        producers = list(calls[t][1])
        if t in claimed or producers.count(cur) != 1:
            break
        kind = epilogue_kind(calls[t][0], producers.index(cur), calls[cur][0])
        if kind is None:
            break
        links.append((t, kind))
        cur = t
    return links


def _variant(
    c: Contract,
    entry: Implements,
    params: Mapping[str, Any],
    links: Sequence[tuple[int, str]],
    calls: Sequence[tuple[CallSig, Sequence[int]]],
    packed: bool,
) -> tuple[int, str, bool] | None:
    """(how many of `links` run fused, the workload, packed): the longest start of the
    chain (none at all included) that `entry` declares, whose bias fits, and that a
    workload of `params`, prepacked or not as `packed` says, runs."""
    for n in range(len(links), -1, -1):
        kinds = tuple(k for _, k in links[:n])
        if not all(k in entry.epilogues for k in kinds):
            continue
        for w in sorted(c.workloads):
            wl = c.workloads[w]
            if chain(wl) != kinds or prepacked(wl) != packed or not all(wl.get(k) == v for k, v in params.items()):
                continue
            if all(_bias_fits(entry, wl, calls, site) for site, k in links[:n] if k == "bias"):
                return n, w, packed
    return None


def _bias_fits(
    entry: Implements, wl: Mapping[str, Any], calls: Sequence[tuple[CallSig, Sequence[int]]], site: int
) -> bool:
    """The bias added at `site` has the shape `entry` declares, at workload `wl`."""
    sig = calls[site][0]
    want = tuple(int(wl[d]) if isinstance(d, str) else int(d) for d in entry.epilogues["bias"])
    return any(tuple(a.shape) == want for a in sig.args)


def _alone_note(c: Contract, entry: Implements, cov: Coverage, left: Sequence[str], packable: bool) -> str:
    """Why the epilogue ops after a covered call run alone, and the fix."""
    undeclared = [k for k in left if k not in entry.epilogues]
    ran = list(cov.epilogue)
    if undeclared:
        return (
            f"{', '.join(left)} after it run(s) alone: {c.file} declares no epilogue "
            f"{', '.join(map(repr, undeclared))} for {entry.op}"
        )
    want = {**dict(cov.params), "epilogue": [*ran, *left], **({"prepack": True} if packable else {})}
    return (
        f"{', '.join(left)} after it run(s) alone: to fuse them, declare a workload with "
        f"these params in {c.file}: {dict(sorted(want.items()))!r}"
    )


def _absorb_permutes(
    calls: Sequence[tuple[CallSig, Sequence[int]]],
    out: list[Coverage],
    takers: Mapping[int, Sequence[int]],
    by_name: Mapping[str, Contract],
) -> None:
    """Mark the permute_dims every covered consumer takes through its pattern."""
    for i, (sig, _) in enumerate(calls):
        if sig.op != PERMUTE or not takers.get(i):
            continue
        through = []
        for t in takers[i]:
            cov = out[t]
            if cov.status != COVERED or cov.template is None:
                break
            slot = list(calls[t][1]).index(i)
            entry = covering_entry(by_name[cov.template], calls[t][0])
            if entry is None or slot >= len(entry.args) or not entry.args[slot].permute:
                break
            through.append(cov.template)
        else:
            out[i] = Coverage(
                ABSORBED,
                through[0],
                note=f"{', '.join(dict.fromkeys(through))} take(s) the tensor before the transpose",
            )
