"""The coverage contract: which Relax calls a template implements (`IMPLEMENTS`), and
whether a model's call is one of them. TVM-free: `check` runs it on recorded calls.

A template declares, at module level, a literal read from its source like WORKLOADS:

    IMPLEMENTS = [
        {"op": "relax.matmul",
         "args": [["*M", "K"], {"permute_dims": ["N", "K"]}],
         "dtype": "dtype"},
    ]

- `op`: the Relax operator's name (`relax.matmul`, `relax.nn.conv2d`, ...), as listed
  before legalization.
- `args`: one entry per *tensor* argument of the call, in order. An entry is a shape:
  a list whose items are workload keys (bound to that dimension) or integers (the
  dimension must be that). A first item `"*KEY"` takes every leading dimension the
  others leave, and binds their product: `["*M", "K"]` matches x[1, 128, 768] with
  M = 128 and K = 768 (and x[128, 768] alike). `{"permute_dims": SHAPE}` says the
  argument is the output of a `relax.permute_dims` of a tensor of SHAPE (nn.Linear's
  transposed weight), the axes reversed unless `"axes": [...]` says otherwise; the
  template then takes the tensor before the transpose. `{"transposed": SHAPE}` says
  the argument is a plain tensor of SHAPE that the template reads transposed (axes
  reversed): the form exporters write `nn.Linear` in (ONNX `MatMul` over a weight
  stored [K, N]). The model build passes the kernel `permute_dims` of it, which
  constant folding computes once at build when the argument is a weight constant.
- `attrs` (optional): op attribute -> value, with the same rule: a string that is a
  workload key binds, any other value (an integer, a string such as "NCHW", a list of
  them) must equal the attribute. Attributes not listed are not compared: list every
  one that changes what the op computes.
- `dtype` (optional): the workload key holding the dtype; every tensor argument and
  the output must have it.

A call is `covered` by (template, workload) when an entry matches it and a workload
has every bound value; `uncovered_shape` when an entry matches but no workload has
those values (the `params` it would need, to paste into WORKLOADS); `uncovered_op`
when no entry of any template matches. Calls that move no data (`relax.reshape`) are
`shape_only`, and a `relax.permute_dims` that a covered call takes through a
`permute_dims` pattern is `absorbed`: both are recorded as such, never dropped.

Over 400 lines: one literal's parsing (IMPLEMENTS, with its epilogues) and the per-call matching it feeds; the chains over a model's call sites are `core/chains.py`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .epilogue import KINDS, PARAM, PREPACK, chain, prepacked
from .errors import TemplateError

COVERED = "covered"
UNCOVERED_SHAPE = "uncovered_shape"
UNCOVERED_OP = "uncovered_op"
SHAPE_ONLY = "shape_only"  # moves no data: a view (reshape and kin)
ABSORBED = "absorbed"  # a permute_dims a covered call takes through its pattern
FUSED = "fused"  # an epilogue op run inside a covered call's kernel (core/epilogue.py)
STATUSES = (COVERED, UNCOVERED_SHAPE, UNCOVERED_OP, SHAPE_ONLY, ABSORBED, FUSED)

# Ops that only change how a tensor's shape is read (a zero-copy view in the VM).
SHAPE_OPS = frozenset({"relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten"})
PERMUTE = "relax.permute_dims"

EXAMPLE = 'IMPLEMENTS = [{"op": "relax.matmul", "args": [["*M", "K"], {"permute_dims": ["N", "K"]}], "dtype": "dtype"}]'


# --------------------------------------------------------------------------- calls


@dataclass(frozen=True)
class CallArg:
    """One tensor argument of a call: its shape and dtype, and, when it is the output
    of a `relax.permute_dims`, the shape before it and the axes."""

    shape: tuple[int, ...]
    dtype: str
    permute_of: tuple[int, ...] | None = None
    axes: tuple[int, ...] | None = None
    # A weight: a constant, or a parameter of the function past its inputs
    # (`num_input`), or a transpose of one. Only a weight can arrive prepacked.
    weight: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.permute_of is not None:
            out["permute_of"] = list(self.permute_of)
            out["axes"] = list(self.axes) if self.axes is not None else None
        if self.weight:
            out["weight"] = True
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CallArg:
        p = d.get("permute_of")
        axes = d.get("axes")
        return cls(
            tuple(d["shape"]),
            d["dtype"],
            tuple(p) if p is not None else None,
            tuple(axes) if axes is not None else None,
            bool(d.get("weight", False)),
        )

    def describe(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        if self.permute_of is not None:
            before = "x".join(map(str, self.permute_of))
            return f"permute_dims({before}{'' if self.axes is None else f', {list(self.axes)}'})"
        return shape


@dataclass(frozen=True)
class CallSig:
    """What a call is, as coverage sees it: op, tensor arguments, attributes (as JSON),
    output shape and dtype. Equal signatures are one line of a coverage file."""

    op: str
    args: tuple[CallArg, ...]
    attrs: Mapping[str, Any]
    shape: tuple[int, ...]
    dtype: str

    def key(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "args": [a.to_json() for a in self.args],
            "attrs": dict(self.attrs),
            "shape": list(self.shape),
            "dtype": self.dtype,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CallSig:
        return cls(
            d["op"], tuple(CallArg.from_json(a) for a in d["args"]), dict(d["attrs"]), tuple(d["shape"]), d["dtype"]
        )

    def describe(self) -> str:
        """`relax.matmul(1x128x768, permute_dims(768x768)) -> 1x128x768 float32`."""
        args = ", ".join(a.describe() for a in self.args)
        out = "x".join(map(str, self.shape)) or "scalar"
        return f"{self.op}({args}) -> {out} {self.dtype}"


@dataclass(frozen=True)
class Coverage:
    """How one call is covered. `params`: the workload values it binds (covered or
    uncovered_shape: what to paste into WORKLOADS); `note`: why, in words."""

    status: str
    template: str | None = None
    workload: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    # A covered call: the epilogues its kernel runs (the workload's chain), and the
    # elementwise ops after it that could be epilogues but still run alone.
    epilogue: tuple[str, ...] = ()
    alone: tuple[str, ...] = ()
    prepacked: bool = False  # its kernel takes its weight packed, the pack run once

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.template is not None:
            out["template"] = self.template
        if self.workload is not None:
            out["workload"] = self.workload
        if self.params:
            out["params"] = dict(self.params)
        if self.note:
            out["note"] = self.note
        if self.epilogue:
            out["epilogue"] = list(self.epilogue)
        if self.alone:
            out["alone"] = list(self.alone)
        if self.prepacked:
            out["prepacked"] = True
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Coverage:
        return cls(
            d["status"],
            d.get("template"),
            d.get("workload"),
            dict(d.get("params", {})),
            d.get("note", ""),
            tuple(d.get("epilogue", ())),
            tuple(d.get("alone", ())),
            bool(d.get("prepacked", False)),
        )


# --------------------------------------------------------------------------- contract


@dataclass(frozen=True)
class ArgPattern:
    dims: tuple[str | int, ...]  # the first may be "*KEY" (leading dimensions folded)
    permute: bool = False  # the argument is permute_dims(tensor of `dims`)
    axes: tuple[int, ...] | None = None  # None: reversed
    transpose: bool = False  # a plain tensor of `dims` that the kernel takes transposed

    @property
    def fold(self) -> bool:
        return bool(self.dims) and isinstance(self.dims[0], str) and self.dims[0].startswith("*")


@dataclass(frozen=True)
class Implements:
    """One IMPLEMENTS entry."""

    op: str
    args: tuple[ArgPattern, ...]
    attrs: Mapping[str, Any]
    dtype: str | None
    line: int = 0
    # The epilogues the kernel absorbs: kind -> the operand's shape (bias) or True.
    epilogues: Mapping[str, Any] = field(default_factory=dict)
    prepack: tuple[int, ...] = ()  # the tensor arguments that may arrive packed


@dataclass(frozen=True)
class Contract:
    """What one template implements and the workloads it declares (what matching needs)."""

    template: str  # operator name (file stem)
    file: str  # repo-relative posix path, for messages
    implements: tuple[Implements, ...]
    workloads: Mapping[str, Mapping[str, Any]]
    kinds: tuple[str, ...] = ("llvm", "c")
    raw: Any = None  # the IMPLEMENTS literal as written (for the coverage file)

    def digest(self) -> str:
        """A hash of what matching reads: IMPLEMENTS, WORKLOADS and the target kinds."""
        text = json.dumps([self.raw, self.workloads, list(self.kinds)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def _keys(workloads: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The keys every workload has (a pattern may name only those)."""
    sets = [set(w) for w in workloads.values()]
    return set.intersection(*sets) if sets else set()


def parse_implements(
    value: Any, workloads: Mapping[str, Mapping[str, Any]], path: Path | str, line: int, lines: Sequence[int] = ()
) -> tuple[Implements, ...]:
    """IMPLEMENTS as written -> entries; TemplateError at `path`:line naming the fix."""

    def err(msg: str, at: int = line) -> TemplateError:
        return TemplateError(f"IMPLEMENTS: {msg}; e.g. {EXAMPLE} (docs/models.md)", file=path, line=at)

    if not isinstance(value, (list, tuple)):
        raise err('must be a list of {"op": ..., "args": [...]} entries')
    keys = _keys(workloads)
    out = []
    for i, entry in enumerate(value):
        at = lines[i] if i < len(lines) else line
        if not isinstance(entry, dict):
            raise err(f"entry {i} is {type(entry).__name__}, not a dict", at)
        unknown = sorted(set(entry) - {"op", "args", "attrs", "dtype", "epilogues", PREPACK})
        if unknown:
            raise err(
                f"entry {i} has unknown key(s) {', '.join(map(repr, unknown))} "
                "(allowed: op, args, attrs, dtype, epilogues, prepack)",
                at,
            )
        op = entry.get("op")
        if not isinstance(op, str) or not op.startswith("relax."):
            raise err(f"entry {i}: 'op' must name a Relax op such as \"relax.matmul\", got {op!r}", at)
        args = entry.get("args")
        if not isinstance(args, (list, tuple)) or not args:
            raise err(f"entry {i} ({op}): 'args' must list one shape per tensor argument", at)
        patterns = tuple(_arg_pattern(a, i, j, op, keys, err, at) for j, a in enumerate(args))
        attrs = entry.get("attrs", {})
        if not isinstance(attrs, dict) or not all(isinstance(k, str) for k in attrs):
            raise err(f"entry {i} ({op}): 'attrs' must map attribute names to workload keys or values", at)
        dtype = entry.get("dtype")
        if dtype is not None and (not isinstance(dtype, str) or dtype not in keys):
            raise err(
                f"entry {i} ({op}): 'dtype' must name the workload key holding the dtype "
                f"(keys every workload has: {', '.join(sorted(keys)) or 'none'}), got {dtype!r}",
                at,
            )
        epilogues = _epilogues(entry.get("epilogues", {}), i, op, keys, err, at)
        packs = entry.get(PREPACK, [])
        if (
            not isinstance(packs, (list, tuple))
            or not all(isinstance(k, int) and not isinstance(k, bool) for k in packs)
            or not all(0 <= k < len(patterns) for k in packs)
        ):
            raise err(
                f"entry {i} ({op}): 'prepack' lists the tensor arguments that may arrive packed, "
                f"by index (0 to {len(patterns) - 1}), e.g. [1]; got {packs!r}",
                at,
            )
        out.append(Implements(op, patterns, dict(attrs), dtype, at, epilogues, tuple(packs)))
    _check_workload_epilogues(out, workloads, path, line)
    return tuple(out)


def _epilogues(value: Any, i: int, op: str, keys: set[str], err: Any, at: int) -> dict[str, Any]:
    """An entry's `epilogues` (core/epilogue.py): kind -> the bias's shape, or true."""
    if not isinstance(value, dict):
        raise err(
            f'entry {i} ({op}): \'epilogues\' must map epilogue kinds to true (or a bias to its shape), e.g. {{"bias": ["N"], "gelu": true}}',
            at,
        )
    out: dict[str, Any] = {}
    for kind, v in value.items():
        if kind not in KINDS:
            raise err(f"entry {i} ({op}): unknown epilogue {kind!r} (known: {', '.join(KINDS)})", at)
        if kind == "bias":
            if not isinstance(v, (list, tuple)):
                raise err(f'entry {i} ({op}): a bias takes its shape, such as ["N"], got {v!r}', at)
            out[kind] = _arg_pattern(v, i, 0, op, keys, err, at).dims
            if any(isinstance(d, str) and d.startswith("*") for d in out[kind]):
                raise err(f"entry {i} ({op}): a bias's shape cannot fold leading dimensions ({v!r})", at)
        elif v is not True:
            raise err(f"entry {i} ({op}): epilogue {kind!r} takes true, got {v!r}", at)
        else:
            out[kind] = True
    return out


def _check_workload_epilogues(
    entries: Sequence[Implements], workloads: Mapping[str, Mapping[str, Any]], path: Path | str, line: int
) -> None:
    """Each workload's `epilogue` names kinds some entry declares, as a list."""
    declared = {k for e in entries for k in e.epilogues}
    for name, wl in workloads.items():
        packed = wl.get(PREPACK)
        if packed is not None and (packed is not True or not any(e.prepack for e in entries)):
            raise TemplateError(
                f'WORKLOADS[{name!r}]["prepack"] must be true, and an IMPLEMENTS entry must say which '
                f'argument arrives packed ("prepack": [1]); got {packed!r} (docs/models.md)',
                file=path,
                line=line,
            )
        value = wl.get(PARAM)
        if value is None:
            continue
        if not isinstance(value, (list, tuple)) or not all(isinstance(k, str) for k in value) or not value:
            raise TemplateError(
                f'WORKLOADS[{name!r}]["epilogue"] must be a non-empty list of epilogue kinds '
                f'such as ["bias", "gelu"], got {value!r} (docs/models.md)',
                file=path,
            )
        missing = [k for k in value if k not in declared]
        if missing:
            raise TemplateError(
                f"WORKLOADS[{name!r}] runs the epilogue {', '.join(map(repr, missing))}, which no "
                f'IMPLEMENTS entry declares: add it to an entry\'s "epilogues" (known: '
                f"{', '.join(KINDS)}) or remove it from the workload (docs/models.md)",
                file=path,
                line=line,
            )


def _arg_pattern(a: Any, i: int, j: int, op: str, keys: set[str], err: Any, at: int) -> ArgPattern:
    permute, transpose, axes = False, False, None
    if isinstance(a, dict) and set(a) == {"transposed"}:
        transpose, dims = True, a["transposed"]
    elif isinstance(a, dict):
        unknown = sorted(set(a) - {"permute_dims", "axes"})
        if unknown or "permute_dims" not in a:
            raise err(
                f'entry {i} ({op}), argument {j}: a dict must be {{"permute_dims": SHAPE}} '
                '(optionally with "axes": [...]) or {"transposed": SHAPE}',
                at,
            )
        permute, dims, axes = True, a["permute_dims"], a.get("axes")
        if axes is not None and (not isinstance(axes, (list, tuple)) or sorted(axes) != list(range(len(axes)))):
            raise err(f"entry {i} ({op}), argument {j}: axes must be a permutation such as [1, 0], got {axes!r}", at)
    else:
        dims = a
    if not isinstance(dims, (list, tuple)):
        raise err(f"entry {i} ({op}), argument {j}: a shape is a list of workload keys and integers, got {dims!r}", at)
    for n, d in enumerate(dims):
        if isinstance(d, bool) or not isinstance(d, (int, str)):
            raise err(f"entry {i} ({op}), argument {j}: dimension {d!r} is neither a workload key nor an integer", at)
        if isinstance(d, str):
            name = d[1:] if d.startswith("*") else d
            if d.startswith("*") and n != 0:
                raise err(
                    f"entry {i} ({op}), argument {j}: only the first dimension may fold the leading ones ({d!r})", at
                )
            if name not in keys:
                raise err(
                    f"entry {i} ({op}), argument {j}: {name!r} is not a key of every workload "
                    f"(keys: {', '.join(sorted(keys)) or 'none'})",
                    at,
                )
    folded = bool(dims) and isinstance(dims[0], str) and dims[0].startswith("*")
    # A folded shape stands for any rank: its axes give the rank of the call's tensor.
    if axes is not None and len(axes) != len(dims) and not (folded and len(axes) > len(dims)):
        raise err(f"entry {i} ({op}), argument {j}: axes {list(axes)} and shape {list(dims)} differ in rank", at)
    return ArgPattern(tuple(dims), permute, tuple(axes) if axes is not None else None, transpose)


def contract_from_tree(tree: ast.Module, path: Path, rel: str) -> Contract | None:
    """The template's contract read from its AST (no import); None without IMPLEMENTS."""
    found: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name) and t.id in ("IMPLEMENTS", "WORKLOADS", "TARGET_KINDS"):
                    found[t.id] = stmt.value
    node = found.get("IMPLEMENTS")
    if node is None:
        return None

    def lit(n: ast.AST, what: str) -> Any:
        try:
            return ast.literal_eval(n)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            raise TemplateError(
                f"{what} must be a literal so `check` can read it without running the module",
                file=path,
                line=getattr(n, "lineno", None),
            ) from None

    raw = lit(node, "IMPLEMENTS")
    workloads = lit(found["WORKLOADS"], "WORKLOADS") if "WORKLOADS" in found else {}
    if not isinstance(workloads, dict) or not all(isinstance(w, dict) for w in workloads.values()):
        raise TemplateError("WORKLOADS must be a dict of name -> {param: value}", file=path)
    kinds = tuple(lit(found["TARGET_KINDS"], "TARGET_KINDS")) if "TARGET_KINDS" in found else ("llvm", "c")
    lines = [e.lineno for e in node.elts] if isinstance(node, (ast.List, ast.Tuple)) else []
    implements = parse_implements(raw, workloads, path, node.lineno, lines)
    return Contract(path.stem, rel, implements, workloads, kinds, raw)


def read_contract(path: Path, rel: str) -> Contract | None:
    """`contract_from_tree` of the file at `path` (parsed here)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as e:
        raise TemplateError(f"syntax error: {e.msg}", file=path, line=e.lineno) from None
    return contract_from_tree(tree, path, rel)


# --------------------------------------------------------------------------- matching


class _NoMatch(Exception):
    pass


def _bind(binding: dict[str, Any], key: str, value: Any) -> None:
    if key in binding and binding[key] != value:
        raise _NoMatch
    binding[key] = value


def _unify_dims(dims: Sequence[str | int], shape: Sequence[int], binding: dict[str, Any]) -> None:
    if dims and isinstance(dims[0], str) and dims[0].startswith("*"):
        lead = len(shape) - len(dims) + 1
        if lead < 1:
            raise _NoMatch
        _bind(binding, dims[0][1:], math.prod(shape[:lead]))
        dims, shape = dims[1:], shape[lead:]
    if len(dims) != len(shape):
        raise _NoMatch
    for d, s in zip(dims, shape, strict=True):
        if isinstance(d, int):
            if d != s:
                raise _NoMatch
        else:
            _bind(binding, d, s)


def _unify_value(pattern: Any, value: Any, keys: set[str], binding: dict[str, Any]) -> None:
    if isinstance(pattern, str) and pattern in keys:
        _bind(binding, pattern, value)
    elif isinstance(pattern, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(pattern):
            raise _NoMatch
        for p, v in zip(pattern, value, strict=True):
            _unify_value(p, v, keys, binding)
    elif pattern != value or isinstance(pattern, bool) != isinstance(value, bool):
        raise _NoMatch


def unify(entry: Implements, call: CallSig, keys: set[str]) -> dict[str, Any] | None:
    """The workload values `entry` binds for `call`; None when its form does not fit."""
    if entry.op != call.op or len(entry.args) != len(call.args):
        return None
    binding: dict[str, Any] = {}
    try:
        for p, a in zip(entry.args, call.args, strict=True):
            if p.permute:
                if a.permute_of is None:
                    raise _NoMatch
                want = p.axes if p.axes is not None else tuple(reversed(range(len(a.permute_of))))
                have = a.axes if a.axes is not None else tuple(reversed(range(len(a.permute_of))))
                if tuple(want) != tuple(have):
                    raise _NoMatch
                _unify_dims(p.dims, a.permute_of, binding)
            elif p.transpose:
                if a.permute_of is not None:  # nn.Linear's form: its own pattern takes it through
                    raise _NoMatch
                _unify_dims(p.dims, a.shape, binding)
            else:
                _unify_dims(p.dims, a.shape, binding)
        for name, pattern in entry.attrs.items():
            if name not in call.attrs:
                raise _NoMatch
            _unify_value(pattern, call.attrs[name], keys, binding)
        if entry.dtype is not None:
            dtypes = {a.dtype for a in call.args} | {call.dtype}
            if len(dtypes) != 1:
                raise _NoMatch
            _bind(binding, entry.dtype, call.dtype)
    except _NoMatch:
        return None
    return binding


def match(call: CallSig, contracts: Sequence[Contract]) -> Coverage:
    """How `call` is covered by `contracts` (see the module docstring). The first
    template (by name) and workload (by name) that fits wins; the first entry whose form
    fits gives an uncovered_shape its params, unless a template declares the shape as a
    fused or prepacked variant only: then that template's (`coverage_of` picks the
    variant). Reshapes are shape_only; a permute_dims is judged by its consumer
    (`coverage_of`)."""
    if call.op in SHAPE_OPS:
        return Coverage(SHAPE_ONLY, note="a view: moves no data")
    first: Coverage | None = None
    variants: Coverage | None = None  # the first template declaring this shape as a variant
    same_op: list[str] = []
    for c in sorted(contracts, key=lambda c: c.template):
        keys = _keys(c.workloads)
        for entry in c.implements:
            if entry.op == call.op and c.template not in same_op:
                same_op.append(c.template)
            binding = unify(entry, call, keys)
            if binding is None:
                continue
            variant = False
            for w in sorted(c.workloads):
                wl = c.workloads[w]
                if not all(wl.get(k) == v for k, v in binding.items()):
                    continue
                # A fused or prepacked variant covers a call only as such (`coverage_of`).
                if not chain(wl) and not prepacked(wl):
                    return Coverage(COVERED, c.template, w, dict(sorted(binding.items())))
                variant = True
            params = dict(sorted(binding.items()))
            if variant and variants is None:
                # Two templates implement the form (conv2d and conv2d_1x1 both take a 1x1
                # convolution): the one that declares the shape, if only with an epilogue
                # or packed, is the one whose variants `coverage_of` chooses from.
                variants = Coverage(
                    UNCOVERED_SHAPE,
                    c.template,
                    None,
                    params,
                    f"{c.file} declares this shape only with an epilogue or a packed weight that this "
                    "call does not take: add a workload of these params without them to its WORKLOADS",
                )
            if first is None:
                first = Coverage(
                    UNCOVERED_SHAPE,
                    c.template,
                    None,
                    params,
                    f"{c.file} implements {call.op} in this form but declares no "
                    "workload of this shape: add these params to its WORKLOADS",
                )
    if variants is not None:
        return variants
    if first is not None:
        return first
    if same_op:
        return Coverage(
            UNCOVERED_OP,
            note=f"{', '.join(same_op)} implement(s) {call.op}, "
            "but not in this form (rank, layout, transposes or attributes)",
        )
    return Coverage(UNCOVERED_OP, note=f"no template implements {call.op}")


def covering_entry(c: Contract, call: CallSig) -> Implements | None:
    keys = _keys(c.workloads)
    for entry in c.implements:
        if unify(entry, call, keys) is not None:
            return entry
    return None
