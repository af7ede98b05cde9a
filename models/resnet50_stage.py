"""ResNet-50's conv2_x stage (batch 1, 56 x 56): three bottleneck blocks, 64 -> 256
channels, the first with a projection shortcut.

Inference form: each batch norm is folded into its convolution's bias (a conv2d
followed by a bias add), ReLU after each block's first two convolutions and after the
residual add. Weights are random: the export's parameters; nothing is downloaded.
`tvmtune-ci models` reads MODEL and SPEC (docs/models.md).
"""

from __future__ import annotations

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
