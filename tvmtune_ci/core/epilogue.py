"""Epilogues: the elementwise work after a template's kernel that the kernel can do on
its output tile before storing it (TVM-free: `check` and the contract read it).

A template declares, in an IMPLEMENTS entry, the epilogues its kernel absorbs:

    "epilogues": {"bias": ["N"], "residual": true, "gelu": true}

- `bias`: an add of a tensor of that shape (workload keys and integers, as `args`
  writes shapes): `[N]` for a dense layer's bias, `[1, "K", 1, 1]` for a convolution's;
- `residual`: an add of a tensor of the output's own shape (a skip connection);
- `scale`: a multiply by a scalar (attention's 1/sqrt(d));
- `relu`, `gelu` (erf form): the activations.

A workload runs a chain of them when it says so: `"epilogue": ["bias", "gelu"]` among
its params. The epilogue is part of the workload, so a fused variant is a workload of
its own: tuned, logged, fingerprinted (WORKLOADS values) and judged stale on its own,
and a log tuned for `bert_ffn1` says nothing about `bert_ffn1` + bias + GELU. The
kernel of such a workload takes the template's inputs, then one operand per `bias`,
`residual` and `scale` in chain order, then its output (tune/epilogue.py builds it).

Weights packed once: an entry's `"prepack": [1]` says that tensor argument 1 may
arrive in the packed layout the template's schedule makes of it (a whole-tensor copy
into a layout of its own, such as the GEMM's `pack_b="global"` panels), and a workload
with `"prepack": true` is tuned so: that copy is split out of the kernel and not
measured (MetaSchedule's layout-rewrite preprocessing), and a model build whose
argument is a weight runs it once, at load. A call whose argument is not a weight runs
the plain workload, which packs on every call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

KINDS = ("bias", "residual", "scale", "relu", "gelu")
PREPACK = "prepack"  # the workload key of a variant whose weight arrives packed
OPERAND_KINDS = frozenset({"bias", "residual", "scale"})  # those that take a tensor
PARAM = "epilogue"  # the workload key that names a fused variant's chain


def chain(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The epilogue chain a workload's params declare (() for a plain workload)."""
    value = params.get(PARAM) or ()
    return tuple(str(k) for k in value)


def operand_shape(kind: str, declared: Any, params: Mapping[str, Any], out_shape: Sequence[int]) -> tuple[int, ...]:
    """The shape of `kind`'s operand for a workload with `params` whose kernel writes
    `out_shape`: a bias's declared shape with the workload's values put in, the
    output's shape for a residual, a scalar for a scale."""
    if kind == "residual":
        return tuple(int(d) for d in out_shape)
    if kind == "scale":
        return ()
    return tuple(int(params[d]) if isinstance(d, str) else int(d) for d in declared)


def declared_epilogues(implements: Any) -> dict[str, Any]:
    """{kind: its declared operand shape (or True)} over every IMPLEMENTS entry as
    written (the first entry that declares a kind gives its shape)."""
    out: dict[str, Any] = {}
    for entry in implements or ():
        if isinstance(entry, Mapping):
            for kind, shape in dict(entry.get("epilogues") or {}).items():
                out.setdefault(kind, shape)
    return out


def prepacked(params: Mapping[str, Any]) -> bool:
    """A workload whose packable arguments arrive packed (`"prepack": true`): the
    layout transform the template's schedule makes of them runs once, outside the
    kernel (tune/epilogue.py `mark_prepack`), and is not measured."""
    return params.get(PREPACK) is True


def declared_prepack(implements: Any) -> tuple[int, ...]:
    """The tensor arguments some IMPLEMENTS entry (as written) declares packable."""
    out: set[int] = set()
    for entry in implements or ():
        if isinstance(entry, Mapping):
            out.update(int(i) for i in entry.get(PREPACK) or ())
    return tuple(sorted(out))
