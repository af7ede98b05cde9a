"""ResNet-50's conv2_x stage (batch 1, 56 x 56): three bottleneck blocks, 64 -> 256
channels, the first with a projection shortcut.

Inference form: each batch norm is folded into its convolution's bias (a conv2d
followed by a bias add), ReLU after each block's first two convolutions and after the
residual add. Weights are random: the export's parameters; nothing is downloaded.
`tvmtune-ci models` reads MODEL and SPEC (docs/models.md).
"""

from __future__ import annotations

from pathlib import Path

from tvm.relax.frontend import nn

SIZE, IN_CHANNELS, WIDTH, OUT_CHANNELS = 56, 64, 64, 256


class ConvBias(nn.Module):
    """A convolution with its batch norm folded in: conv2d + a per-channel bias."""

    def __init__(self, cin: int, cout: int, kernel: int) -> None:
        self.conv = nn.Conv2D(cin, cout, kernel, padding=kernel // 2, bias=True)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return self.conv(x)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, project: bool) -> None:
        self.reduce = ConvBias(cin, WIDTH, 1)
        self.spatial = ConvBias(WIDTH, WIDTH, 3)
        self.expand = ConvBias(WIDTH, OUT_CHANNELS, 1)
        self.project = ConvBias(cin, OUT_CHANNELS, 1) if project else None

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        y = nn.op.relu(self.reduce(x))
        y = nn.op.relu(self.spatial(y))
        y = self.expand(y)
        shortcut = self.project(x) if self.project is not None else x
        return nn.op.relu(nn.op.add(y, shortcut))


class Conv2Stage(nn.Module):
    def __init__(self) -> None:
        self.block1 = Bottleneck(IN_CHANNELS, project=True)
        self.block2 = Bottleneck(OUT_CHANNELS, project=False)
        self.block3 = Bottleneck(OUT_CHANNELS, project=False)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return self.block3(self.block2(self.block1(x)))


MODEL = Conv2Stage
SPEC = {"forward": {"x": nn.spec.Tensor((1, IN_CHANNELS, SIZE, SIZE), "float32")}}


def to_onnx(weights: dict[str, object], path: Path) -> None:
    """This stage as an ONNX graph over `weights` (export_tvm's parameter names ->
    arrays): Conv with its bias, Relu, the residual Add. `tvmtune-ci profile` runs it on
    ONNX Runtime beside the build (docs/models.md); needs the [onnx] extra."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def conv(x: str, prefix: str, out: str) -> str:
        w, b = weights[f"{prefix}.conv.weight"], weights[f"{prefix}.conv.bias"]
        inits.append(numpy_helper.from_array(np.asarray(w), f"{prefix}.w"))
        inits.append(numpy_helper.from_array(np.asarray(b), f"{prefix}.b"))
        pad = np.asarray(w).shape[-1] // 2
        nodes.append(helper.make_node("Conv", [x, f"{prefix}.w", f"{prefix}.b"], [out], pads=[pad] * 4))
        return out

    x = "x"
    for i, project in ((1, True), (2, False), (3, False)):
        blk = f"block{i}"
        y = conv(x, f"{blk}.reduce", f"{blk}_r")
        nodes.append(helper.make_node("Relu", [y], [f"{blk}_r1"]))
        y = conv(f"{blk}_r1", f"{blk}.spatial", f"{blk}_s")
        nodes.append(helper.make_node("Relu", [y], [f"{blk}_s1"]))
        y = conv(f"{blk}_s1", f"{blk}.expand", f"{blk}_e")
        short = conv(x, f"{blk}.project", f"{blk}_p") if project else x
        nodes.append(helper.make_node("Add", [y, short], [f"{blk}_a"]))
        nodes.append(helper.make_node("Relu", [f"{blk}_a"], [f"{blk}_out" if i < 3 else "y"]))
        x = f"{blk}_out"
    graph = helper.make_graph(
        nodes,
        "resnet50_stage",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, IN_CHANNELS, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, OUT_CHANNELS, SIZE, SIZE])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
