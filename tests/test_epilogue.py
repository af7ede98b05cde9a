"""Epilogues fused into template kernels (core/epilogue.py, tune/epilogue.py): the
contract that declares them, the chains a model's coverage fuses or leaves alone, the
fused kernel's numerics in every form, and a fused variant's log judged on its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import LINEAR as LINEAR_MODEL
from conftest import LINEAR_GELU, OPERATORS, TINY_DENSE, dense_model_repo, make_repo, run_cli, write_fresh

from tvmtune_ci.core.chains import coverage_of
from tvmtune_ci.core.contract import COVERED, FUSED, UNCOVERED_OP, CallArg, CallSig, Contract, parse_implements
from tvmtune_ci.core.errors import TemplateError

F32 = "float32"
WL = {"M": 16, "N": 48, "K": 32, "dtype": F32}
ENTRY = {
    "op": "relax.matmul",
    "args": [["*M", "K"], {"permute_dims": ["N", "K"]}],
    "dtype": "dtype",
    "epilogues": {"bias": ["N"], "residual": True, "gelu": True},
}


def _contract(workloads: dict[str, Any], entry: dict[str, Any] = ENTRY) -> Contract:
    impl = parse_implements([entry], workloads, "operators/dense.py", 1)
    return Contract("dense", "operators/dense.py", impl, workloads, ("llvm",), [entry])


def _sig(op: str, *shapes: tuple[int, ...], out: tuple[int, ...] = (1, 16, 48)) -> CallSig:
    return CallSig(op, tuple(CallArg(s, F32) for s in shapes), {}, out, F32)


LINEAR = CallSig(
    "relax.matmul", (CallArg((1, 16, 32), F32), CallArg((32, 48), F32, (48, 32), None)), {}, (1, 16, 48), F32
)
BIAS = _sig("relax.add", (1, 16, 48), (48,))
GELU = _sig("relax.nn.gelu", (1, 16, 48))
RELU = _sig("relax.nn.relu", (1, 16, 48))
RESIDUAL = _sig("relax.add", (1, 16, 48), (1, 16, 48))


# --------------------------------------------------------------------------- coverage (TVM-free)


def test_a_chain_a_workload_declares_is_fused_and_what_follows_runs_alone() -> None:
    """matmul -> +bias -> gelu -> relu: the fused workload runs bias and gelu; relu,
    which dense does not declare, stays a call of its own and is named as such."""
    c = _contract({"t": WL, "t_gelu": {**WL, "epilogue": ["bias", "gelu"]}})
    calls = [(LINEAR, (-1, -1)), (BIAS, (0, -1)), (GELU, (1,)), (RELU, (2,))]
    covs = coverage_of(calls, [c])
    assert [(x.status, x.workload) for x in covs] == [
        (COVERED, "t_gelu"),
        (FUSED, "t_gelu"),
        (FUSED, "t_gelu"),
        (UNCOVERED_OP, None),
    ]
    assert covs[0].epilogue == ("bias", "gelu") and covs[0].alone == ("relu",)
    assert "declares no epilogue 'relu'" in covs[0].note


def test_without_a_fused_workload_the_plain_one_runs_and_says_what_to_declare() -> None:
    c = _contract({"t": WL})
    covs = coverage_of([(LINEAR, (-1, -1)), (BIAS, (0, -1)), (GELU, (1,))], [c])
    assert [(x.status, x.workload) for x in covs] == [(COVERED, "t"), (UNCOVERED_OP, None), (UNCOVERED_OP, None)]
    assert covs[0].epilogue == () and covs[0].alone == ("bias", "gelu")
    want = repr(dict(sorted({**WL, "epilogue": ["bias", "gelu"]}.items())))  # to paste into WORKLOADS
    assert want in covs[0].note


def test_the_longest_declared_start_of_the_chain_wins() -> None:
    c = _contract({"t": WL, "tb": {**WL, "epilogue": ["bias"]}, "tbg": {**WL, "epilogue": ["bias", "gelu"]}})
    covs = coverage_of([(LINEAR, (-1, -1)), (BIAS, (0, -1)), (GELU, (1,))], [c])
    assert covs[0].workload == "tbg" and covs[0].epilogue == ("bias", "gelu")
    # The plain call alone (no chain) runs the plain workload, never a fused one.
    assert coverage_of([(LINEAR, (-1, -1))], [c])[0].workload == "t"


def test_a_chain_stops_where_an_output_has_another_user() -> None:
    """The bias add's output is also used by a second call (or returned): the fused
    kernel would not write it, so nothing past it is fused."""
    c = _contract({"t": WL, "tbg": {**WL, "epilogue": ["bias", "gelu"]}, "tb": {**WL, "epilogue": ["bias"]}})
    two_users = [(LINEAR, (-1, -1)), (BIAS, (0, -1)), (GELU, (1,)), (RESIDUAL, (2, 1))]
    covs = coverage_of(two_users, [c])
    assert covs[0].workload == "tb" and covs[2].status == UNCOVERED_OP
    returned = [(LINEAR, (-1, -1)), (BIAS, (0, -1)), (GELU, (1,))]
    assert coverage_of(returned, [c], escapes=[1])[0].workload == "tb"
    assert coverage_of(returned, [c], escapes=[0])[0].epilogue == ()  # the kernel's own output escapes


def test_a_bias_of_another_shape_is_not_the_declared_bias() -> None:
    c = _contract({"t": WL, "tb": {**WL, "epilogue": ["bias"]}})
    row_bias = _sig("relax.add", (1, 16, 48), (1, 16, 1))  # per row, not per output column
    covs = coverage_of([(LINEAR, (-1, -1)), (row_bias, (0, -1))], [c])
    assert covs[0].workload == "t" and covs[1].status == UNCOVERED_OP


def test_an_op_another_kernel_fused_is_not_taken_twice() -> None:
    """relu(conv_a + conv_b): the residual add is the first chain's; the second kernel
    stops before it (its output is the add's operand)."""
    c = _contract({"t": WL, "tr": {**WL, "epilogue": ["residual"]}})
    calls = [(LINEAR, (-1, -1)), (LINEAR, (-1, -1)), (RESIDUAL, (0, 1))]
    covs = coverage_of(calls, [c])
    assert [x.workload for x in covs] == ["tr", "t", "tr"] and covs[2].status == FUSED


@pytest.mark.parametrize(
    ("entry_epilogues", "workloads", "message"),
    [
        ({"sigmoid": True}, {"t": WL}, "unknown epilogue 'sigmoid'"),
        ({"bias": True}, {"t": WL}, 'a bias takes its shape, such as ["N"]'),
        ({"bias": ["Q"]}, {"t": WL}, "'Q' is not a key of every workload"),
        ({"relu": ["N"]}, {"t": WL}, "epilogue 'relu' takes true"),
        ({"bias": ["N"]}, {"t": {**WL, "epilogue": ["bias", "gelu"]}}, "runs the epilogue 'gelu', which no"),
        ({"bias": ["N"]}, {"t": {**WL, "epilogue": "bias"}}, "must be a non-empty list of epilogue kinds"),
    ],
)
def test_a_bad_epilogue_declaration_names_the_file_and_the_fix(
    entry_epilogues: dict[str, Any], workloads: dict[str, Any], message: str
) -> None:
    with pytest.raises(TemplateError) as e:
        _contract(workloads, {**ENTRY, "epilogues": entry_epilogues})
    assert message in str(e.value) and "operators/dense.py" in str(e.value)


# --------------------------------------------------------------------------- the fused kernels (TVM)

tvm = pytest.importorskip("tvm")

from tvmtune_ci.core.targetinfo import target_facts  # noqa: E402
from tvmtune_ci.core.template import import_template  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402
from tvmtune_ci.tune.numerics import check_correct  # noqa: E402
from tvmtune_ci.tune.workload import Workload  # noqa: E402

TARGET = host_target(2)

DENSE_FORMS = [["bias"], ["residual"], ["scale"], ["relu"], ["gelu"], ["bias", "gelu"], ["bias", "residual"]]
CONV_FORMS = [["bias", "relu"], ["bias", "residual", "relu"]]


def _template(tmp_path: Path, name: str) -> Any:
    root = tmp_path / "repo"
    (root / "operators").mkdir(parents=True, exist_ok=True)
    for f in ("_gemm.py", f"{name}.py"):
        (root / "operators" / f).write_text((OPERATORS / f).read_text())
    return import_template(root / "operators" / f"{name}.py", root)


@pytest.mark.parametrize("accumulate", ["register", "memory"])
@pytest.mark.parametrize("form", DENSE_FORMS, ids="+".join)
def test_every_fused_dense_form_matches_its_reference(tmp_path: Path, form: list[str], accumulate: str) -> None:
    """The epilogue folded into the tile's store ("register": the cache write-back) or
    computed after the tile's k loop ("memory"): either way, numpy's answer. 20 x 40 x
    24 is padded to multiples of 16, so the chain also meets the padding."""
    dense = _template(tmp_path, "dense")
    wl = Workload(dense, "x", {"M": 20, "N": 40, "K": 24, "dtype": F32, "epilogue": form}, TARGET)
    check_correct(dense, wl, TARGET, {"accumulate": accumulate}, seed=1)  # raises on a mismatch


@pytest.mark.parametrize("form", CONV_FORMS, ids="+".join)
@pytest.mark.parametrize("stride", [1, 2])
def test_every_fused_conv2d_form_matches_its_reference(tmp_path: Path, form: list[str], stride: int) -> None:
    conv = _template(tmp_path, "conv2d")
    params = {"N": 1, "C": 8, "H": 10, "W": 10, "K": 16, "R": 3, "S": 3, "pad": 1, "stride": stride}
    wl = Workload(conv, "x", {**params, "dtype": F32, "epilogue": form}, TARGET)
    check_correct(conv, wl, TARGET, None, seed=2)


@pytest.mark.parametrize(
    "form", [[], ["bias"], ["bias", "relu"], ["bias", "residual", "relu"]], ids=lambda f: "+".join(f) or "plain"
)
@pytest.mark.parametrize("stride", [1, 2])
def test_the_1x1_path_matches_its_reference(tmp_path: Path, form: list[str], stride: int) -> None:
    """ResNet's 1x1 convolutions (the reduce, the expand, the projection shortcut, which
    strides by 2 in the later stages) through the same template: no padding, one tap,
    an odd input (9 x 9) so that stride 2 leaves a ragged 5 x 5 output."""
    conv = _template(tmp_path, "conv2d")
    params = {"N": 1, "C": 24, "H": 9, "W": 9, "K": 32, "R": 1, "S": 1, "pad": 0, "stride": stride}
    extra = {"epilogue": form} if form else {}
    wl = Workload(conv, "x", {**params, "dtype": F32, **extra}, TARGET)
    for cfg in (None, {"pad": "inline"}, {"pad": "stage"}):
        check_correct(conv, wl, TARGET, cfg, seed=3)


def test_the_chain_is_folded_into_the_tile_s_store_not_left_as_a_pass_of_its_own(tmp_path: Path) -> None:
    """ "register": every chain stage is inlined into the tile's write-back (no block of
    the chain is left); "memory": the chain is one block inside the kernel's parallel
    tile loop, not a second parallel pass over the output."""
    from tvmtune_ci.tune.builder import schedule_config
    from tvmtune_ci.tune.epilogue import EPILOGUE_ATTR

    dense = _template(tmp_path, "dense")
    wl = Workload(dense, "x", {"M": 32, "N": 64, "K": 32, "dtype": F32, "epilogue": ["bias", "gelu"]}, TARGET)
    names = [str(n) for n in wl.mod["main"].attrs[EPILOGUE_ATTR]]
    assert len(names) >= 2  # the bias add, erf's stage, GELU's
    sch = schedule_config(dense, wl, {"accumulate": "register"}, TARGET)
    for n in names:
        with pytest.raises(Exception):  # noqa: B017 - TVM's own error: no such block
            sch.get_sblock(n)
    sch = schedule_config(dense, wl, {"accumulate": "memory"}, TARGET)
    last = sch.get_sblock(names[-1])
    kernel = sch.get_sblock("Y_update")  # decompose_reduction names the update so
    assert sch.get(sch.get_loops(last)[0]).same_as(sch.get(sch.get_loops(kernel)[0]))
    for n in names[:-1]:
        with pytest.raises(Exception):  # noqa: B017
            sch.get_sblock(n)


def test_the_check_catches_a_fused_kernel_that_drops_its_epilogue(tmp_path: Path) -> None:
    """The numerics check holds the fused kernel to the chain: a fold that lost the bias
    (the plain kernel under the fused workload's name) is refused."""
    from tvmtune_ci.core.errors import TuningError
    from tvmtune_ci.tune import epilogue

    dense = _template(tmp_path, "dense")
    wl = Workload(dense, "x", {"M": 16, "N": 32, "K": 16, "dtype": F32, "epilogue": ["bias"]}, TARGET)
    real = epilogue._chain_te
    try:
        epilogue._chain_te = lambda y, *ops, kinds: y + 0 * ops[0]  # type: ignore[assignment]
        with pytest.raises(TuningError, match="does not match reference"):
            check_correct(dense, wl, TARGET, None)
    finally:
        epilogue._chain_te = real


@pytest.mark.parametrize(
    "variant", [{"epilogue": ["bias", "gelu"]}, {"prepack": True}, {"prepack": True, "epilogue": ["residual"]}]
)
def test_a_fused_or_prepacked_workload_tunes_and_its_best_computes_right(
    tmp_path: Path, variant: dict[str, Any]
) -> None:
    """The search measures the variant: every configuration it builds carries the chain
    (and, prepacked, takes the weight packed where the schedule packs it whole), and
    the best it logs passes the numerics check."""
    from test_tuner import request

    from tvmtune_ci.tune.tuner import tune_workload

    dense = _template(tmp_path, "dense")
    dense.WORKLOADS["f"] = {"M": 32, "N": 64, "K": 32, "dtype": F32, **variant}
    out = tune_workload(request(dense, tmp_path / "work", workload_name="f", target=TARGET, trials=8, batch_size=8))
    assert len(out.records) >= 8 and out.best.knobs
    check_correct(dense, Workload(dense, "f", dense.WORKLOADS["f"], TARGET), TARGET, out.best.knobs)


# --------------------------------------------------------------------------- the model build

TINY = TINY_DENSE
FUSED_WLS = {**TINY, "tiny_gelu": {**TINY["tiny"], "epilogue": ["bias", "gelu"]}}


def _expected(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    from math import erf

    h = (x @ w.T + b).astype(np.float64)
    g = 0.5 * h * (1.0 + np.vectorize(erf)(h / np.sqrt(2.0)))
    return (1.0 / (1.0 + np.exp(-g))).astype(np.float32)


def _kernels(executable: Any) -> int:
    """The PrimFuncs the built library exports (each call_tir target one)."""
    return sum(1 for n in executable.mod.imports[0].get_function_names() if not n.startswith("__"))


def _check_output(b: Any) -> None:
    rng = np.random.default_rng(5)
    x, w, bias = (rng.standard_normal(s).astype(F32) for s in ((1, 16, 32), (48, 32), (48,)))
    vm = tvm.relax.VirtualMachine(b.executable, tvm.cpu())
    got = vm["forward"](*[tvm.runtime.tensor(a) for a in (x, w, bias)]).numpy()
    np.testing.assert_allclose(got, _expected(x, w, bias), rtol=1e-4, atol=1e-5)


def test_the_build_swaps_the_whole_chain_for_the_fused_kernel(tmp_path: Path) -> None:
    """nn.Linear + GELU: one kernel runs matmul, bias and GELU; sigmoid, which is no
    epilogue, is the only call left. Without the fused workload, the bias and GELU run
    as calls of their own and the swap says so."""
    from tvmtune_ci.model.build import build_model

    root = dense_model_repo(tmp_path / "fused", TARGET, FUSED_WLS, "lin", LINEAR_GELU)
    b = build_model("lin", target=TARGET, root=root, untemplated="fallback", configs="default")
    assert [(s.workload, s.epilogue, s.alone) for s in b.swaps] == [("tiny_gelu", ("bias", "gelu"), ())]
    assert b.uncovered == ("relax.sigmoid(1x16x48) -> 1x16x48 float32",)
    _check_output(b)

    root = dense_model_repo(tmp_path / "plain", TARGET, TINY, "lin", LINEAR_GELU)
    p = build_model("lin", target=TARGET, root=root, untemplated="fallback", configs="default")
    assert [(s.workload, s.epilogue, s.alone) for s in p.swaps] == [("tiny", (), ("bias", "gelu"))]
    assert len(p.uncovered) == 3  # the bias add, GELU and sigmoid
    _check_output(p)


def test_an_epilogue_the_template_does_not_declare_stays_alone(tmp_path: Path) -> None:
    """dense declaring only the bias: the bias is fused, GELU runs on its own."""
    from tvmtune_ci.model.build import build_model

    root = dense_model_repo(
        tmp_path, TARGET, {**TINY, "tiny_b": {**TINY["tiny"], "epilogue": ["bias"]}}, "lin", LINEAR_GELU
    )
    dense = root / "operators/dense.py"
    dense.write_text(
        dense.read_text().replace('"residual": True, "scale": True, "relu": True, "gelu": True', '"relu": True')
    )
    b = build_model("lin", target=TARGET, root=root, untemplated="fallback", configs="default")
    assert [(s.workload, s.epilogue, s.alone) for s in b.swaps] == [("tiny_b", ("bias",), ("gelu",))]
    assert "relax.nn.gelu(1x16x48) -> 1x16x48 float32" in b.uncovered
    _check_output(b)


def test_a_log_of_a_fused_variant_is_stale_once_its_epilogue_changes(tmp_path: Path) -> None:
    """The epilogue is part of the workload: a log tuned for bias + GELU says nothing
    about bias + ReLU. `check` names the workload, and the model build refuses it."""
    from tvmtune_ci.core.errors import StaleLogError
    from tvmtune_ci.model.build import build_model

    root = dense_model_repo(tmp_path, TARGET, FUSED_WLS, "lin", LINEAR_GELU)
    write_fresh(root, "dense", "host")
    assert run_cli(root, "models").returncode == 0
    assert run_cli(root, "check").returncode == 0
    dense = root / "operators/dense.py"
    text = dense.read_text()
    assert "'epilogue': ['bias', 'gelu']" in text
    dense.write_text(text.replace("'epilogue': ['bias', 'gelu']", "'epilogue': ['bias', 'relu']"))
    res = run_cli(root, "check")
    stale = [line for line in res.stdout.splitlines() if line.startswith("STALE dense/host")]
    assert res.returncode == 1 and len(stale) == 1 and "tiny_gelu" in stale[0]
    with pytest.raises(StaleLogError):
        build_model("lin", target=TARGET, root=root, untemplated="fallback")


def test_a_model_s_coverage_file_records_the_fused_and_the_alone(tmp_path: Path) -> None:
    root = dense_model_repo(tmp_path, TARGET, FUSED_WLS, "lin", LINEAR_GELU)
    assert run_cli(root, "models", "lin").returncode == 0
    data = json.loads((root / "models/lin.coverage.json").read_text())
    statuses = [data["calls"][i]["coverage"]["status"] for i, _ in data["sites"]]
    assert statuses.count("fused") == 2 and data["summary"]["fused"] == 2
    covered = next(c["coverage"] for c in data["calls"] if c["coverage"]["status"] == "covered")
    assert covered["workload"] == "tiny_gelu" and covered["epilogue"] == ["bias", "gelu"]
    assert data["escapes"]  # sigmoid's output is the function's
    _ = make_repo  # (the repo helpers are conftest's)


# --------------------------------------------------------------------------- weights packed once

PACKED_WLS = {**TINY, "tiny_pk": {**TINY["tiny"], "prepack": True, "epilogue": ["bias"]}}


def test_a_prepacked_workload_is_measured_taking_its_weight_packed(tmp_path: Path) -> None:
    """What the search measures (MetaSchedule's args, the layout rewrite removed): the
    weight arrives as pack_b="global"'s [N/lanes, K, lanes] panels. The plain workload,
    and a pack inside the kernel's tiles ("tile"), take W [N, K] as it is."""
    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.builder import schedule_config

    ms = tvmsetup.ms()
    dense = _template(tmp_path, "dense")
    params = {"M": 32, "N": 64, "K": 48, "dtype": F32}

    def args(p: dict[str, Any], pack_b: str) -> list[tuple[int, ...]]:
        sch = schedule_config(dense, Workload(dense, "x", p, TARGET), {"pack_b": pack_b}, TARGET)
        return [tuple(int(x) for x in a.shape) for a in ms.arg_info.ArgInfo.from_entry_func(sch.mod, True)]

    lanes = 64 // args({**params, "prepack": True}, "global")[1][0]
    assert args({**params, "prepack": True}, "global") == [(32, 48), (64 // lanes, 48, lanes), (32, 64)]
    assert args(params, "global") == [(32, 48), (64, 48), (32, 64)]
    assert args({**params, "prepack": True}, "tile") == [(32, 48), (64, 48), (32, 64)]
    wl = Workload(dense, "x", {**params, "prepack": True}, TARGET)
    check_correct(dense, wl, TARGET, {"pack_b": "global"})  # the whole function, pack included


def test_a_weight_the_model_binds_is_packed_once_at_load_not_on_every_call(tmp_path: Path) -> None:
    """nn.Linear with a prepacked workload tuned to pack_b="global": the build splits the
    weight's pack out of the kernel, lifting puts it in forward_transform_params, and
    a profile of forward counts no call to it; the output is still x @ W.T + b."""
    from conftest import edit_results

    from tvmtune_ci.model.build import build_model
    from tvmtune_ci.model.timing import entry_args

    root = dense_model_repo(tmp_path, TARGET, PACKED_WLS, "lin", LINEAR_MODEL)
    write_fresh(root, "dense", "host")
    best = {"pack_b": "global", "accumulate": "register"}
    edit_results(root / "tuning_logs/dense/host", lambda res: res["tiny_pk"]["best"].update(knobs=best))
    b = build_model("lin", target=TARGET, root=root, untemplated="fallback", lift=True)
    assert [(s.workload, s.prepacked, s.epilogue) for s in b.swaps] == [("tiny_pk", True, ("bias",))]
    assert b.swaps[0].kernel == "dense_tiny_pk_prepacked"  # the function the VM calls: a profile's symbol
    assert b.lifted is not None
    rng = np.random.default_rng(6)
    x, w, bias = (rng.standard_normal(s).astype(F32) for s in ((1, 16, 32), (48, 32), (48,)))
    vm = tvm.relax.VirtualMachine(b.executable, tvm.cpu())
    names: list[str] = []

    from tvm.runtime.vm import VMInstrumentReturnKind

    def count(func: Any, symbol: str, before: bool, ret: Any, *rest: Any) -> Any:
        if before:
            names.append(str(symbol))
        return VMInstrumentReturnKind.NO_OP  # what the VM expects back (None is no kind)

    vm.set_instrument(count)
    # TVM tensors: numpy memory passed zero-copy is only 16-byte aligned, and the kernels
    # load it with aligned AVX moves
    args = entry_args(vm, b.lifted, [tvm.runtime.tensor(a) for a in (x, w, bias)])  # the transforms: once, here
    assert sum("weight_prepack" in n for n in names) == 1, names
    names.clear()
    for _ in range(3):
        vm["forward"](*args)
    assert not any("weight_prepack" in n for n in names), names  # no pack in the inference
    assert sum("prepacked" in n for n in names) == 3  # the kernel reading the packed weight, once a call
    got = vm["forward"](*args).numpy()
    np.testing.assert_allclose(got, x @ w.T + bias, rtol=1e-4, atol=1e-5)


def test_an_activation_never_runs_the_prepacked_workload(tmp_path: Path) -> None:
    """The same linear layer with W an input of the function (not a weight): the plain
    workload, which packs what it reads on every call."""
    from tvmtune_ci.core.chains import coverage_of as cover

    sig = CallSig(
        "relax.matmul", (CallArg((1, 16, 32), F32), CallArg((32, 48), F32, (48, 32), None)), {}, (1, 16, 48), F32
    )
    entry = {**ENTRY, "prepack": [1]}
    c = _contract({"t": WL, "t_pk": {**WL, "prepack": True}}, entry)
    assert cover([(sig, (-1, -1))], [c])[0].workload == "t"
    weight = CallSig(sig.op, (sig.args[0], CallArg((32, 48), F32, (48, 32), None, True)), {}, sig.shape, F32)
    got = cover([(weight, (-1, -1))], [c])[0]
    assert got.workload == "t_pk" and got.prepacked


@pytest.mark.parametrize("tile_k", [[1, 4], [2, 2], [4, 1]], ids=lambda t: f"k0={t[0]}")
def test_a_fused_memory_tile_decodes_to_its_design_space_whatever_its_k_loop(tmp_path: Path, tile_k: list[int]) -> None:
    """accumulate="memory" folds the chain under the parallel tile loop. Seen on the
    Zen 4 runner: where the k loop had one step (tile_k [1, 4]) the fold went one loop
    deeper, the fixed configuration's trace (a seeded or replayed one) matched no design
    space, and the re-tune of batch_matmul's bert_qk failed. The same loop, whatever
    the factors: every one decodes to the memory design space, knobs as given."""
    from tvmtune_ci.tune.builder import schedule_config
    from tvmtune_ci.tune.space import decode_knobs, design_space_infos

    root = tmp_path / "repo"
    (root / "operators").mkdir(parents=True)
    for f in ("_gemm.py", "batch_matmul.py"):
        (root / "operators" / f).write_text((OPERATORS / f).read_text())
    bmm = import_template(root / "operators" / "batch_matmul.py", root)
    params = {"B": 2, "M": 32, "N": 32, "K": 64, "dtype": F32, "epilogue": ["scale"]}
    wl = Workload(bmm, "qk", params, TARGET)
    infos = design_space_infos(bmm, wl, TARGET)
    lanes = target_facts(TARGET).lanes(F32)
    fixed = {
        "accumulate": "memory",
        "pack_b": "none",
        "tile_i": [2, 2, 8],
        "tile_j": [32 // lanes, 1, 1],
        "tile_k": tile_k,
    }
    trace = schedule_config(bmm, wl, fixed, TARGET).trace.as_json()
    index, knobs = decode_knobs(trace, infos, bmm.KNOBS)
    assert infos[index].structure == {"accumulate": "memory", "pack_b": "none"}
    assert knobs == fixed
    check_correct(bmm, wl, TARGET, fixed)
