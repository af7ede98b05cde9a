"""A BERT-base encoder layer (batch 1, sequence 128): the model tvmtune-ci's coverage
and, later, its model build are measured on.

Hidden 768, 12 heads of 64, FFN 3072 with GELU, post-norm (two LayerNorms), every
projection an `nn.Linear`. Weights are random: the export's parameters, filled by
whoever builds it; nothing is downloaded. `tvmtune-ci models` reads MODEL and SPEC
(docs/models.md).
"""

from __future__ import annotations

from pathlib import Path

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


def to_onnx(weights: dict[str, object], path: Path) -> None:
    """This layer as an ONNX graph over `weights` (export_tvm's parameter names ->
    arrays), op for op: nn.Linear as MatMul with the transposed weight plus Add,
    LayerNormalization, erf GELU, softmax over the last axis. `tvmtune-ci profile` runs
    it on ONNX Runtime beside the build (docs/models.md); needs the [onnx] extra."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def init(name: str, arr) -> str:
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def linear(x: str, prefix: str, out: str) -> str:
        w = init(f"{prefix}.wT", np.ascontiguousarray(weights[f"{prefix}.weight"].T))
        b = init(f"{prefix}.b", weights[f"{prefix}.bias"])
        nodes.append(helper.make_node("MatMul", [x, w], [out + "_mm"]))
        nodes.append(helper.make_node("Add", [out + "_mm", b], [out]))
        return out

    def heads(t: str, out: str) -> str:
        shape = init(f"{out}.shape", np.array([1, SEQ, HEADS, HEAD_DIM], "int64"))
        nodes.append(helper.make_node("Reshape", [t, shape], [out + "_r"]))
        nodes.append(helper.make_node("Transpose", [out + "_r"], [out], perm=[0, 2, 1, 3]))
        return out

    q = heads(linear("x", "q", "q"), "qh")
    k = heads(linear("x", "k", "k"), "kh")
    v = heads(linear("x", "v", "v"), "vh")
    nodes.append(helper.make_node("Transpose", [k], ["kT"], perm=[0, 1, 3, 2]))
    nodes.append(helper.make_node("MatMul", [q, "kT"], ["scores"]))
    scale = init("scale", np.array(1.0 / HEAD_DIM**0.5, "float32"))
    nodes.append(helper.make_node("Mul", ["scores", scale], ["scaled"]))
    nodes.append(helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["probs", v], ["ctx4"]))
    nodes.append(helper.make_node("Transpose", ["ctx4"], ["ctxT"], perm=[0, 2, 1, 3]))
    flat = init("flat", np.array([1, SEQ, HIDDEN], "int64"))
    nodes.append(helper.make_node("Reshape", ["ctxT", flat], ["ctx"]))
    o = linear("ctx", "o", "o")
    nodes.append(helper.make_node("Add", [o, "x"], ["res1"]))
    nodes.append(
        helper.make_node(
            "LayerNormalization",
            ["res1", init("ln1.g", weights["ln1.weight"]), init("ln1.b", weights["ln1.bias"])],
            ["h"],
            axis=-1,
        )
    )
    f1 = linear("h", "fc1", "f1")
    nodes.append(helper.make_node("Gelu", [f1], ["g"]))
    f2 = linear("g", "fc2", "f2")
    nodes.append(helper.make_node("Add", [f2, "h"], ["res2"]))
    nodes.append(
        helper.make_node(
            "LayerNormalization",
            ["res2", init("ln2.g", weights["ln2.weight"]), init("ln2.b", weights["ln2.bias"])],
            ["y"],
            axis=-1,
        )
    )
    graph = helper.make_graph(
        nodes,
        "bert_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.save(model, str(path))
