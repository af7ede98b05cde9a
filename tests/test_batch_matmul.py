"""The batched matmul template (operators/batch_matmul.py, issue 66 part 1): attention's
Q.K^T and P.V. Numerics over several head counts and a prime sequence length, in every
design space and with the attention scale fused; the contract on a BERT-style
attention model, and a model build that runs it; a template tuned for no target covers
no call of a build on a configured target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import OPERATORS, make_repo

tvm = pytest.importorskip("tvm")

from tvmtune_ci.core.template import import_template  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402
from tvmtune_ci.tune.numerics import check_correct  # noqa: E402
from tvmtune_ci.tune.workload import Workload  # noqa: E402

TARGET = host_target(2)
F32 = "float32"
SPACES = [
    {"accumulate": "register", "pack_b": "tile"},
    {"accumulate": "register", "pack_b": "none"},
    {"accumulate": "memory", "pack_b": "tile"},
    {"accumulate": "memory", "pack_b": "none"},
]


@pytest.fixture(scope="module")
def bmm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("bmm")
    (root / "operators").mkdir()
    for f in ("_gemm.py", "batch_matmul.py"):
        (root / "operators" / f).write_text((OPERATORS / f).read_text())
    return import_template(root / "operators/batch_matmul.py", root)


@pytest.mark.parametrize("space", SPACES, ids=lambda s: f"{s['accumulate']}-{s['pack_b']}")
@pytest.mark.parametrize("heads", [1, 4, 12])
def test_numerics_over_head_counts_and_a_prime_sequence_length(bmm: Any, heads: int, space: dict[str, Any]) -> None:
    """Q.K^T and P.V of `heads` heads over 31 tokens (prime: every dimension padded),
    head size 16, in each design space: reference()'s answer (raises on a mismatch)."""
    for params in (
        {"B": heads, "M": 31, "N": 31, "K": 16, "dtype": F32},  # Q . K^T
        {"B": heads, "M": 31, "N": 16, "K": 31, "dtype": F32},  # P . V
    ):
        check_correct(bmm, Workload(bmm, "x", params, TARGET), TARGET, space, seed=heads)


def test_the_attention_scale_runs_on_the_output_tile(bmm: Any) -> None:
    params = {"B": 4, "M": 31, "N": 31, "K": 16, "dtype": F32, "epilogue": ["scale"]}
    for space in SPACES:
        check_correct(bmm, Workload(bmm, "x", params, TARGET), TARGET, space)


ATTENTION = """\
from tvm.relax.frontend import nn

SEQ, HEADS, DIM = 13, 3, 8


class Attention(nn.Module):
    \"\"\"BERT's attention core as nn writes it: heads split by reshape + permute_dims,
    Q.K^T over the keys transposed, the 1/sqrt(d) scale, softmax, P.V.\"\"\"

    def _heads(self, t):
        return nn.op.permute_dims(nn.op.reshape(t, (1, SEQ, HEADS, DIM)), [0, 2, 1, 3])

    def forward(self, q, k, v):
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        scores = nn.op.matmul(q, nn.op.permute_dims(k, [0, 1, 3, 2]))
        scores = nn.op.multiply(scores, nn.Tensor.from_const(1.0 / DIM**0.5))
        return nn.op.matmul(nn.op.softmax(scores, axis=-1), v)


MODEL = Attention
SPEC = {"forward": {n: nn.spec.Tensor((1, SEQ, HEADS * DIM), "float32") for n in ("q", "k", "v")}}
"""
WORKLOADS = {
    "qk": {"B": 3, "M": 13, "N": 13, "K": 8, "dtype": F32, "epilogue": ["scale"]},
    "pv": {"B": 3, "M": 13, "N": 8, "K": 13, "dtype": F32},
}


def _attention_repo(tmp_path: Path, operators_block: str = "") -> Path:
    bmm = (OPERATORS / "batch_matmul.py").read_text()
    start, end = bmm.index("WORKLOADS = {"), bmm.index("# The Relax calls")
    bmm = bmm[:start] + f"WORKLOADS = {WORKLOADS!r}\n\n" + bmm[end:]
    config = (
        f'format: 1\ntvm_version: "0.27"\ntargets:\n  host:\n    target: {json.dumps(TARGET)}\n'
        f"{operators_block}models:\n  att: {{source: models/att.py}}\n"
    )
    return make_repo(
        tmp_path, config=config, operators=False, files={"operators/batch_matmul.py": bmm, "models/att.py": ATTENTION}
    )


def _reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    def heads(t: np.ndarray) -> np.ndarray:
        return t.reshape(1, 13, 3, 8).transpose(0, 2, 1, 3).astype(np.float64)

    s = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(8.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    return ((p / p.sum(-1, keepdims=True)) @ heads(v)).astype(np.float32)


def test_both_attention_matmuls_run_the_template_with_the_scale_fused(tmp_path: Path) -> None:
    """The build swaps Q.K^T (scale fused: the multiply is gone) and P.V for the
    template's kernels; the keys' transpose runs as TVM's copy, the kernel reads it."""
    from tvmtune_ci.model.build import build_model

    root = _attention_repo(tmp_path)
    b = build_model("att", target=TARGET, root=root, untemplated="fallback", configs="default")
    assert [(s.template, s.workload, s.epilogue) for s in b.swaps] == [
        ("batch_matmul", "qk", ("scale",)),
        ("batch_matmul", "pv", ()),
    ]
    assert not any(u.startswith("relax.multiply") for u in b.uncovered)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 13, 24)).astype(np.float32) for _ in range(3))
    vm = tvm.relax.VirtualMachine(b.executable, tvm.cpu())
    got = vm["forward"](*[tvm.runtime.tensor(a) for a in (q, k, v)]).numpy()
    np.testing.assert_allclose(got, _reference(q, k, v), rtol=1e-4, atol=1e-5)


def test_a_template_tuned_for_no_target_covers_no_call_of_a_build_there(tmp_path: Path) -> None:
    """`operators.batch_matmul.targets: []` (a template whose runner has not tuned it
    yet): the build on the configured target leaves both matmuls to TVM."""
    from tvmtune_ci.model.build import build_model

    root = _attention_repo(tmp_path, "operators:\n  batch_matmul: {targets: []}\n")
    b = build_model("att", target=TARGET, root=root, untemplated="fallback", configs="default")
    assert b.swaps == ()
    assert sum(u.startswith("relax.matmul") for u in b.uncovered) == 2


def test_this_repository_s_bert_covers_both_attention_matmuls() -> None:
    """The committed coverage of models/bert_layer.py: Q.K^T by bert_qk with its scale
    fused, P.V by bert_pv."""
    data = json.loads((OPERATORS.parent / "models/bert_layer.coverage.json").read_text())
    covs = [c["coverage"] for c in data["calls"] if c["coverage"].get("template") == "batch_matmul"]
    assert {(c["status"], c["workload"]) for c in covs} == {
        ("covered", "bert_qk"),
        ("covered", "bert_pv"),
        ("fused", "bert_qk"),
    }
    assert next(c for c in covs if c["workload"] == "bert_qk" and c["status"] == "covered")["epilogue"] == ["scale"]
