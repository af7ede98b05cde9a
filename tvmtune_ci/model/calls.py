"""A model's Relax calls and their coverage by the templates (TVM side of `tvmtune-ci
models`; the file format and the matching are TVM-free: core/coverage.py,
core/contract.py).

The API the model build (issue 50 part 3) builds on:

- `load_model(root, model) -> IRModule`: the model's Relax module, before legalization;
- `model_calls(mod) -> list[ModelCall]`: every operator call in program order, each
  with its signature (`CallSig`: op, tensor argument shapes looking through
  permute_dims, attributes, dtype), its binding (the Relax var it is bound to, the
  function it is in, the Call itself) and which earlier call produced each tensor
  argument;
- `contract.match(call.sig, contracts) -> Coverage` (or `chains.coverage_of` for all of them,
  which also judges the permute_dims a covered call absorbs): `covered` with the
  template, the workload and the bound `params`, to swap the call for a call_tir to
  that workload's best kernel.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.configschema import Config, ModelConfig
from ..core.contract import CallArg, CallSig, Contract, read_contract
from ..core.coverage import CoverageFile, build
from ..core.errors import ModelError
from ..core.fsutil import sha256_file
from ..core.git.read import blob_id
from ..core.template import CPU_KINDS, discover_templates

ONNX_EXTRA = "pip install 'tvmtune-ci[onnx]'"


@dataclass(frozen=True)
class ModelCall:
    """One operator call of a model, before legalization."""

    sig: CallSig
    function: str  # the Relax function it is in ("forward")
    binding: str  # the name of the var it is bound to
    producers: tuple[int, ...]  # per tensor argument: the index of the call that made it, -1: none
    call: Any = field(default=None, compare=False, repr=False)  # the relax.Call
    var: Any = field(default=None, compare=False, repr=False)  # the relax.Var bound to it
    # Its output is also used other than as an operator call's tensor argument
    # (returned, aliased, put in a tuple): no epilogue is fused past it.
    escapes: bool = False


def escaping(calls: Sequence[ModelCall]) -> tuple[int, ...]:
    """The sites of `calls` whose output is used beyond the calls (`ModelCall.escapes`)."""
    return tuple(i for i, c in enumerate(calls) if c.escapes)


# --------------------------------------------------------------------------- loading


def load_model(root: Path, model: ModelConfig) -> Any:
    """The model's Relax IRModule (weights as parameters of random value: none are read)."""
    path = root / model.source
    if not path.is_file():
        raise ModelError(
            f"models.{model.name}: source {model.source} does not exist; fix "
            "`source:` in tvmtune.yaml (relative to the repository root)"
        )
    if model.kind == "onnx":
        return _load_onnx(path, model)
    return _load_python(root, path, model)


def _import_module(root: Path, path: Path, model: ModelConfig) -> Any:
    root_s = str(root.resolve())
    if root_s not in sys.path:
        sys.path.insert(0, root_s)
    name = f"_tvmtune_model_{model.name.replace('-', '_').replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{model.source}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ModelError(f"{model.source}: importing it failed: {type(e).__name__}: {e}") from e
    return module


def onnx_form(root: Path, model: ModelConfig, weights: Mapping[str, Any], out: Path) -> Path | None:
    """The model as an ONNX graph, for ONNX Runtime beside the build (`profile`): an
    ONNX model's own file; a Python model's `to_onnx(weights, path)` if its module has
    one (`weights`: export_tvm's parameter names -> numpy arrays, the inputs included,
    so both runtimes compute the same function); None otherwise."""
    path = root / model.source
    if model.kind == "onnx":
        return path
    to_onnx = getattr(_import_module(root, path, model), "to_onnx", None)
    if to_onnx is None:
        return None
    try:
        to_onnx(dict(weights), out)
    except Exception as e:
        raise ModelError(f"{model.source}: to_onnx(weights, path) failed: {type(e).__name__}: {e}") from e
    return out


def _load_python(root: Path, path: Path, model: ModelConfig) -> Any:
    from tvm.relax.frontend import nn

    module = _import_module(root, path, model)
    for attr in ("MODEL", "SPEC"):
        if not hasattr(module, attr):
            raise ModelError(
                f"{model.source}: no module-level {attr}; a model module exposes MODEL "
                "(an nn.Module or a zero-argument callable returning one) and SPEC "
                '(export_tvm\'s spec, e.g. {"forward": {"x": nn.spec.Tensor((1, 128, 768), '
                '"float32")}}): docs/models.md'
            )
    m = module.MODEL
    if not isinstance(m, nn.Module):
        m = m() if callable(m) else m
    if not isinstance(m, nn.Module):
        raise ModelError(
            f"{model.source}: MODEL is {type(m).__name__}, not a "
            "tvm.relax.frontend.nn.Module (or a callable returning one)"
        )
    try:
        mod, _params = m.export_tvm(spec=module.SPEC)
    except Exception as e:
        raise ModelError(
            f"{model.source}: export_tvm(spec=SPEC) failed: {type(e).__name__}: {e}; "
            "check SPEC against forward's arguments"
        ) from e
    return mod


def _load_onnx(path: Path, model: ModelConfig) -> Any:
    try:
        import onnx
        from tvm.relax.frontend.onnx import from_onnx
    except ImportError as e:
        raise ModelError(
            f"models.{model.name}: {model.source} is an ONNX model, and the ONNX "
            f"frontend needs onnx ({e}); install the [onnx] extra: {ONNX_EXTRA}"
        ) from None
    try:
        proto = onnx.load(str(path))
        return from_onnx(proto, keep_params_in_input=True)
    except Exception as e:
        raise ModelError(f"{model.source}: the ONNX import failed: {type(e).__name__}: {e}") from e


# --------------------------------------------------------------------------- calls


def _json_value(v: Any) -> Any:
    """An attribute value as JSON: ints, floats, strings, lists, None."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "value") and isinstance(v.value, (int, float)):  # IntImm, FloatImm
        return v.value
    if isinstance(v, (list, tuple)) or type(v).__name__ == "Array":
        return [_json_value(x) for x in v]
    return str(v)


def _attrs(call: Any) -> dict[str, Any]:
    a = call.attrs
    if a is None:
        return {}
    info = getattr(type(a), "__tvm_ffi_type_info__", None)
    names = [f.name for f in info.fields] if info is not None else []
    return {n: _json_value(getattr(a, n)) for n in names}


def _shape(ty: Any) -> tuple[Any, ...]:
    shape = ty.shape
    values = getattr(shape, "values", None)
    if values is None:
        return ()
    return tuple(int(d.value) if hasattr(d, "value") else str(d) for d in values)


def model_calls(mod: Any) -> list[ModelCall]:
    """Every `relax.Call` of an operator in the module's Relax functions (sorted by
    name), in program order, with its signature (see the module docstring)."""
    import tvm
    from tvm import relax

    calls: list[ModelCall] = []
    for gv in sorted(mod.functions, key=lambda g: g.name_hint):
        func = mod[gv]
        if not isinstance(func, relax.Function):
            continue
        made: dict[Any, int] = {}  # var -> index of the call bound to it
        permutes: dict[Any, Any] = {}  # var -> its permute_dims call
        weights = _weights(func)
        body = func.body
        for block in getattr(body, "blocks", ()):
            for b in block.bindings:
                value = b.value
                if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)):
                    continue
                args, producers = [], []
                for a in value.args:
                    if not isinstance(a.ty, relax.TensorType):
                        continue
                    p = permutes.get(a)
                    if p is not None:
                        axes = p.attrs.axes
                        args.append(
                            CallArg(
                                _shape(a.ty),
                                str(a.ty.dtype),
                                _shape(p.args[0].ty),
                                tuple(int(x) for x in axes) if axes is not None else None,
                                _is_weight(p.args[0], weights),
                            )
                        )
                    else:
                        args.append(CallArg(_shape(a.ty), str(a.ty.dtype), weight=_is_weight(a, weights)))
                    producers.append(made.get(a, -1))
                ty = value.ty
                tensor = isinstance(ty, relax.TensorType)
                sig = CallSig(
                    value.op.name,
                    tuple(args),
                    _attrs(value),
                    _shape(ty) if tensor else (),
                    str(ty.dtype) if tensor else "",
                )
                made[b.var] = len(calls)
                if value.op.name == "relax.permute_dims":
                    permutes[b.var] = value
                calls.append(ModelCall(sig, gv.name_hint, b.var.name, tuple(producers), value, b.var))
        _mark_escapes(func, calls, made)
    return calls


def _weights(func: Any) -> set[Any]:
    """The function's weight parameters: those past its inputs (`num_input`, as
    export_tvm and TVM's ONNX frontend write it); none without that attribute."""
    attrs = func.attrs
    if attrs is None or "num_input" not in attrs:
        return set()
    return set(list(func.params)[int(attrs["num_input"]) :])


def _is_weight(expr: Any, weights: set[Any]) -> bool:
    import tvm

    return isinstance(expr, tvm.ir.expr.Constant) or expr in weights  # TVM 0.27: relax constants are ir's


def _mark_escapes(func: Any, calls: list[ModelCall], made: Mapping[Any, int]) -> None:
    """Set `escapes` on the calls of `func` whose output some binding other than an
    operator call's tensor argument, or the function's result, uses."""
    import tvm
    from tvm import relax

    beyond: set[int] = set()

    def note(expr: Any) -> None:
        for v in relax.analysis.free_vars(expr):
            if v in made:
                beyond.add(made[v])

    for block in getattr(func.body, "blocks", ()):
        for b in block.bindings:
            value = b.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                others = [a for a in value.args if not isinstance(a.ty, relax.TensorType)]
                for a in others:
                    note(a)
            else:
                note(value)
    note(func.body.body)
    for i in beyond:
        calls[i] = replace(calls[i], escapes=True)


# --------------------------------------------------------------------------- coverage


def read_contracts(root: Path, operators_dir: Path) -> tuple[dict[str, str], list[Contract]]:
    """(every template file -> its git blob id, the contracts of those with IMPLEMENTS)."""
    blobs: dict[str, str] = {}
    contracts = []
    for path in discover_templates(operators_dir):
        rel = path.resolve().relative_to(root.resolve()).as_posix()
        blobs[rel] = blob_id(path.read_bytes())
        c = read_contract(path, rel)
        if c is not None:
            contracts.append(c)
    return blobs, contracts


def model_kinds(config: Config, model: ModelConfig) -> tuple[str, ...]:
    names = model.targets if model.targets is not None else tuple(t.name for t in config.targets)
    kinds = [config.target(n).target.get("kind", "llvm") for n in names]
    return tuple(dict.fromkeys(str(k) for k in kinds)) or CPU_KINDS


def coverage_for(
    config: Config, model: ModelConfig, contracts: Sequence[Contract] | None = None, blobs: dict[str, str] | None = None
) -> CoverageFile:
    """Build the model and match its calls against the templates' IMPLEMENTS."""
    root = config.root
    if contracts is None or blobs is None:
        blobs, contracts = read_contracts(root, config.operators_path)
    mod = load_model(root, model)
    calls = model_calls(mod)
    source = {"path": model.source, "kind": model.kind, "sha256": sha256_file(root / model.source)}
    return build(
        model.name,
        source,
        model_kinds(config, model),
        blobs,
        contracts,
        [(c.sig, c.producers) for c in calls],
        escaping(calls),
    )
