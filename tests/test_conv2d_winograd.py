"""The Winograd 3x3 convolution (operators/conv2d_winograd.py, issue 66): numerics
with ResNet's epilogue forms, its weight packed or not, at odd sizes, a batch and no
padding; and the contract: where conv2d's direct 3x3 and conv2d_winograd both declare
a call's shape, the template whose variant runs more of the call's epilogue chain
(then one taking the weight packed) runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import OPERATORS, contracts_with, template_copy

from tvmtune_ci.core.chains import coverage_of
from tvmtune_ci.core.contract import COVERED, FUSED, CallArg, CallSig

F32 = "float32"


@pytest.fixture(scope="module")
def winograd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return template_copy(tmp_path_factory, "conv2d_winograd")


@pytest.mark.parametrize("m", [2, 4], ids=["F2x2", "F4x4"])
@pytest.mark.parametrize(
    ("shape", "extra"),
    [
        # 4 x 4 tiles of 2 x 2: one 16-tile GEMM column block
        ({"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "pad": 1}, {}),
        ({"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "pad": 1}, {"epilogue": ["bias", "relu"], "prepack": True}),
        # odd output sizes (the last tile row and column half used), a batch of 2, the
        # tile count (4 x 5) padded to the GEMM's 32
        ({"N": 2, "C": 32, "H": 7, "W": 9, "K": 16, "pad": 1}, {"epilogue": ["bias", "residual", "relu"]}),
        ({"N": 2, "C": 32, "H": 7, "W": 9, "K": 16, "pad": 1}, {"prepack": True}),
        # no padding, 3 input channels (the reduction padded to 16), 8 output channels
        ({"N": 1, "C": 3, "H": 5, "W": 6, "K": 8, "pad": 0}, {"epilogue": ["bias"]}),
    ],
    ids=["8x8", "8x8-bias-relu-packed", "7x9-n2-residual", "7x9-n2-packed", "pad0-c3"],
)
def test_numerics(winograd: Any, shape: dict[str, int], extra: dict[str, Any], m: int) -> None:
    """The direct convolution's answer in float64 (reference(); check_correct raises on
    a mismatch beyond fp32's tolerance), for both output tiles, at the default
    configuration and at a 2-level tile of the GEMM."""
    from tvmtune_ci.tune.hostcheck import host_target
    from tvmtune_ci.tune.numerics import check_correct
    from tvmtune_ci.tune.workload import Workload

    target = host_target(2)
    wl = Workload(winograd, "x", {**shape, "m": m, "dtype": F32, **extra}, target)
    check_correct(winograd, wl, target, None, seed=3)
    check_correct(winograd, wl, target, {"tile_i": [1, 2, 8], "tile_k": [1, (shape["C"] + 15) // 16]}, seed=4)


def test_a_convolution_with_no_output_or_another_tile_is_refused(winograd: Any) -> None:
    with pytest.raises(ValueError, match="has no 3x3 output"):
        winograd.compute(N=1, C=16, H=2, W=8, K=16, pad=0, m=2, dtype=F32)
    with pytest.raises(ValueError, match="m = 3 .* m = 2 and 4"):
        winograd.compute(N=1, C=16, H=8, W=8, K=16, pad=1, m=3, dtype=F32)


ATTRS = {
    "padding": [1, 1, 1, 1],
    "dilation": [1, 1],
    "groups": 1,
    "data_layout": "NCHW",
    "kernel_layout": "OIHW",
    "out_layout": "NCHW",
}
DIRECT = {"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "R": 3, "S": 3, "pad": 1, "stride": 1, "dtype": F32}
WINO = {"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "pad": 1, "m": 4, "dtype": F32}


def _contracts(tmp_path: Path, direct: dict[str, Any], wino: dict[str, Any]) -> list[Any]:
    return contracts_with(tmp_path, {"conv2d": direct, "conv2d_winograd": wino})


def _stage(stride: int = 1) -> list[tuple[CallSig, tuple[int, ...]]]:
    """A 3x3 convolution (its weight a constant), then + bias and ReLU."""
    oh = 8 // stride
    conv = CallSig(
        "relax.nn.conv2d",
        (CallArg((1, 16, 8, 8), F32), CallArg((16, 16, 3, 3), F32, weight=True)),
        {**ATTRS, "strides": [stride, stride]},
        (1, 16, oh, oh),
        F32,
    )
    y = (1, 16, oh, oh)
    bias = CallSig("relax.add", (CallArg(y, F32), CallArg((1, 16, 1, 1), F32)), {}, y, F32)
    relu = CallSig("relax.nn.relu", (CallArg(y, F32),), {}, y, F32)
    return [(conv, (-1, -1)), (bias, (0, -1)), (relu, (1,))]


def _who(covs: list[Any]) -> list[tuple[str, str | None, str | None]]:
    return [(c.status, c.template, c.workload) for c in covs]


def test_the_template_that_fuses_more_of_the_chain_runs_the_call(tmp_path: Path) -> None:
    """conv2d (first by name) declares the shape plain; conv2d_winograd with bias + ReLU:
    the winograd variant runs the call and its chain. Without it, conv2d runs the
    convolution and the chain runs alone."""
    fused = {"w_relu": {**WINO, "epilogue": ["bias", "relu"], "prepack": True}}
    covs = coverage_of(_stage(), _contracts(tmp_path, {"d": DIRECT}, fused))
    assert _who(covs) == [
        (COVERED, "conv2d_winograd", "w_relu"),
        (FUSED, "conv2d_winograd", "w_relu"),
        (FUSED, "conv2d_winograd", "w_relu"),
    ]
    assert covs[0].prepacked and covs[0].epilogue == ("bias", "relu")
    # Only a bias on the winograd side, bias + ReLU on the direct side: the direct one.
    covs = coverage_of(
        _stage(),
        _contracts(
            tmp_path, {"d_relu": {**DIRECT, "epilogue": ["bias", "relu"]}}, {"w_b": {**WINO, "epilogue": ["bias"]}}
        ),
    )
    assert _who(covs)[0] == (COVERED, "conv2d", "d_relu")
    # The same chain on both sides: the one taking its weight packed.
    covs = coverage_of(
        _stage(),
        _contracts(
            tmp_path,
            {"d_relu": {**DIRECT, "epilogue": ["bias", "relu"]}},
            {"w_relu": {**WINO, "epilogue": ["bias", "relu"], "prepack": True}},
        ),
    )
    assert _who(covs)[0] == (COVERED, "conv2d_winograd", "w_relu")
    # The same chain, neither packed: the first by name, as match() chose.
    covs = coverage_of(
        _stage(),
        _contracts(
            tmp_path,
            {"d_relu": {**DIRECT, "epilogue": ["bias", "relu"]}},
            {"w_relu": {**WINO, "epilogue": ["bias", "relu"]}},
        ),
    )
    assert _who(covs)[0] == (COVERED, "conv2d", "d_relu")


def test_a_strided_3x3_stays_on_the_direct_template(tmp_path: Path) -> None:
    """conv2d_winograd implements stride 1 only: a stride-2 call is conv2d's (here
    undeclared: conv2d is asked to declare it), whatever winograd declares."""
    strided = {**DIRECT, "H": 8, "W": 8, "stride": 2}
    fused = {"w_relu": {**WINO, "epilogue": ["bias", "relu"], "prepack": True}}
    covs = coverage_of(_stage(stride=2), _contracts(tmp_path, {"d2": strided}, fused))
    assert _who(covs)[0] == (COVERED, "conv2d", "d2")
    assert covs[0].alone == ("bias", "relu")


def test_this_repository_s_resnet_stage_runs_its_3x3_on_winograd() -> None:
    data = json.loads((OPERATORS.parent / "models/resnet50_stage.coverage.json").read_text())
    convs = [c for c in data["calls"] if c["op"] == "relax.nn.conv2d"]
    three = [c for c in convs if c["args"][1]["shape"][2:] == [3, 3]]
    assert sum(c["count"] for c in three) == 3
    cov = [c["coverage"] for c in three]
    assert {(c["template"], c["workload"], c["prepacked"]) for c in cov} == {
        ("conv2d_winograd", "resnet50_3x3_relu", True)
    }
