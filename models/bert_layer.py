"""A BERT-base encoder layer (batch 1, sequence 128): the model tvmtune-ci's coverage
and, later, its model build are measured on.

Hidden 768, 12 heads of 64, FFN 3072 with GELU, post-norm (two LayerNorms), every
projection an `nn.Linear`. Weights are random: the export's parameters, filled by
whoever builds it; nothing is downloaded. `tvmtune-ci models` reads MODEL and SPEC
(docs/models.md).
"""

from __future__ import annotations

from tvm.relax.frontend import nn

SEQ, HIDDEN, HEADS, FFN = 128, 768, 12, 3072
HEAD_DIM = HIDDEN // HEADS


class BertLayer(nn.Module):
    def __init__(self) -> None:
        self.q = nn.Linear(HIDDEN, HIDDEN)
        self.k = nn.Linear(HIDDEN, HIDDEN)
        self.v = nn.Linear(HIDDEN, HIDDEN)
        self.o = nn.Linear(HIDDEN, HIDDEN)
        self.ln1 = nn.LayerNorm(HIDDEN)
        self.fc1 = nn.Linear(HIDDEN, FFN)
        self.fc2 = nn.Linear(FFN, HIDDEN)
        self.ln2 = nn.LayerNorm(HIDDEN)

    def _heads(self, t: nn.Tensor) -> nn.Tensor:
        # [1, S, H] -> [1, heads, S, head_dim]
        return nn.op.permute_dims(nn.op.reshape(t, (1, SEQ, HEADS, HEAD_DIM)), [0, 2, 1, 3])

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        q = self._heads(self.q(x))
        k = self._heads(self.k(x))
        v = self._heads(self.v(x))
        scores = nn.op.matmul(q, nn.op.permute_dims(k, [0, 1, 3, 2]))
        scores = nn.op.multiply(scores, nn.Tensor.from_const(1.0 / HEAD_DIM**0.5))
        probs = nn.op.softmax(scores, axis=-1)
        ctx = nn.op.permute_dims(nn.op.matmul(probs, v), [0, 2, 1, 3])
        ctx = nn.op.reshape(ctx, (1, SEQ, HIDDEN))
        h = self.ln1(nn.op.add(self.o(ctx), x))
        f = self.fc2(nn.op.gelu(self.fc1(h)))
        return self.ln2(nn.op.add(f, h))


MODEL = BertLayer
SPEC = {"forward": {"x": nn.spec.Tensor((1, SEQ, HIDDEN), "float32")}}
