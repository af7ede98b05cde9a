"""The 1x1 convolution as a GEMM (operators/conv2d_1x1.py, issue 66 part 2): numerics
with every epilogue form ResNet runs, the shapes it refuses and why, and the contract:
where both conv2d and conv2d_1x1 implement a 1x1 convolution, the template that
declares the shape, even only as a fused variant, is the one that runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import OPERATORS, contracts_with, template_copy

from tvmtune_ci.core.chains import coverage_of
from tvmtune_ci.core.contract import COVERED, FUSED, UNCOVERED_SHAPE, CallArg, CallSig

F32 = "float32"
ATTRS = {
    "strides": [1, 1],
    "padding": [0, 0, 0, 0],
    "dilation": [1, 1],
    "groups": 1,
    "data_layout": "NCHW",
    "kernel_layout": "OIHW",
    "out_layout": "NCHW",
}
FORMS = [[], ["bias"], ["bias", "relu"], ["bias", "residual", "relu"]]


@pytest.fixture(scope="module")
def conv1x1(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return template_copy(tmp_path_factory, "conv2d_1x1")


@pytest.mark.parametrize("form", FORMS, ids=lambda f: "+".join(f) or "plain")
@pytest.mark.parametrize(
    "shape",
    [
        {"N": 1, "C": 16, "H": 4, "W": 4, "K": 32},  # one 16-position tile
        {"N": 1, "C": 48, "H": 8, "W": 6, "K": 16},  # a position vector spans rows of 6
        {"N": 2, "C": 32, "H": 4, "W": 8, "K": 48},  # a batch of 2
    ],
    ids=lambda s: "x".join(str(s[k]) for k in "NCHWK"),
)
def test_numerics_with_every_epilogue_form(conv1x1: Any, shape: dict[str, int], form: list[str]) -> None:
    """The GEMM over H*W positions, stored through the NCHW view, with the chain on the
    tile: reference()'s answer (check_correct raises on a mismatch), at the default
    configuration and at a tile that spans rows (16 positions of a 6-wide row)."""
    from tvmtune_ci.core.targetinfo import target_facts
    from tvmtune_ci.tune.hostcheck import host_target
    from tvmtune_ci.tune.numerics import check_correct
    from tvmtune_ci.tune.workload import Workload

    target = host_target(2)
    params = {**shape, "dtype": F32, **({"epilogue": form} if form else {})}
    wl = Workload(conv1x1, "x", params, target)
    check_correct(conv1x1, wl, target, None, seed=5)
    lanes = target_facts(target).lanes(F32)  # the host's: 8 on AVX2, 16 on AVX-512
    j = shape["H"] * shape["W"] // lanes
    check_correct(conv1x1, wl, target, {"tile_j": [j, 1, 1], "tile_i": [shape["K"] // 8, 1, 8]}, seed=6)


def test_a_shape_off_the_gemm_s_tiles_is_refused_with_the_template_to_use(conv1x1: Any) -> None:
    with pytest.raises(ValueError, match=r"H\*W = 49 to be a multiple of 16.*operators/conv2d\.py"):
        conv1x1.compute(N=1, C=64, H=7, W=7, K=64, dtype=F32)


def _conv(c: int, k: int, r: int) -> CallSig:
    attrs = {**ATTRS, "padding": [r // 2] * 4}
    return CallSig(
        "relax.nn.conv2d",
        (CallArg((1, c, 8, 8), F32), CallArg((k, c, r, r), F32, weight=True)),
        attrs,
        (1, k, 8, 8),
        F32,
    )


def _contracts(tmp_path: Path, conv2d_wls: dict[str, Any], conv1x1_wls: dict[str, Any]) -> list[Any]:
    return contracts_with(tmp_path, {"conv2d": conv2d_wls, "conv2d_1x1": conv1x1_wls})


BASE3 = {"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "R": 3, "S": 3, "pad": 1, "stride": 1, "dtype": F32}
BASE1 = {"N": 1, "C": 16, "H": 8, "W": 8, "K": 32, "dtype": F32}


def test_the_template_declaring_a_1x1_shape_only_as_a_fused_variant_runs_it(tmp_path: Path) -> None:
    """conv2d (first by name) implements every conv2d form but declares only a 3x3;
    conv2d_1x1 declares the 1x1 with bias + ReLU only. The 1x1 call and its chain go to
    conv2d_1x1's variant; the 3x3 stays on conv2d."""
    contracts = _contracts(tmp_path, {"c3": BASE3}, {"c1_relu": {**BASE1, "epilogue": ["bias", "relu"]}})
    bias = CallSig("relax.add", (CallArg((1, 32, 8, 8), F32), CallArg((1, 32, 1, 1), F32)), {}, (1, 32, 8, 8), F32)
    relu = CallSig("relax.nn.relu", (CallArg((1, 32, 8, 8), F32),), {}, (1, 32, 8, 8), F32)
    calls = [(_conv(16, 32, 1), (-1, -1)), (bias, (0, -1)), (relu, (1,)), (_conv(16, 16, 3), (-1, -1))]
    covs = coverage_of(calls, contracts)
    assert [(x.status, x.template, x.workload) for x in covs] == [
        (COVERED, "conv2d_1x1", "c1_relu"),
        (FUSED, "conv2d_1x1", "c1_relu"),
        (FUSED, "conv2d_1x1", "c1_relu"),
        (COVERED, "conv2d", "c3"),
    ]
    # A 1x1 whose chain the variant does not run (no bias): conv2d_1x1 names the fix.
    alone = coverage_of([(_conv(16, 32, 1), (-1, -1))], contracts)[0]
    assert (alone.status, alone.template) == (UNCOVERED_SHAPE, "conv2d_1x1")
    assert "only with an epilogue or a packed weight" in alone.note
    # No template declares this 1x1 shape: the first by name is asked to (as before).
    other = {"c1_64": {**BASE1, "K": 64, "epilogue": ["bias"]}}
    none = coverage_of([(_conv(16, 32, 1), (-1, -1))], _contracts(tmp_path, {"c3": BASE3}, other))[0]
    assert (none.status, none.template) == (UNCOVERED_SHAPE, "conv2d")


def test_this_repository_s_resnet_stage_runs_its_1x1_convolutions_on_conv2d_1x1() -> None:
    data = json.loads((OPERATORS.parent / "models/resnet50_stage.coverage.json").read_text())
    convs = [c for c in data["calls"] if c["op"] == "relax.nn.conv2d"]
    by_kernel = {tuple(c["args"][1]["shape"][2:]): c["coverage"]["template"] for c in convs}
    assert by_kernel == {(1, 1): "conv2d_1x1", (3, 3): "conv2d_winograd"}
    assert all(c["coverage"]["status"] == "covered" for c in convs)
