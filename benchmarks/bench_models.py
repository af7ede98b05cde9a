"""A model end to end: the build with the committed logs, TVM's own build, and ONNX
Runtime, on the same model, weights, CPU and thread count, timed in turns.

    .venv/bin/python benchmarks/bench_models.py --target zen4-2c      # on a Zen 4 runner
    .venv/bin/python benchmarks/bench_models.py --target zen4-2c --rounds 20

The anchor is ONNX Runtime (what a team would deploy instead): every figure is a ratio
to it, taken per round from samples measured side by side (the order rotating), so a
slow stretch of a noisy runner lands on every arm alike. Printed: each arm's median
seconds per inference, its ratio to ONNX Runtime (median of the per-round ratios, and
their min-max), and the largest difference of its output from ONNX Runtime's.

The ONNX graphs are written here, op for op, from models/bert_layer.py (nn.Linear as
MatMul with the transposed weight plus Add, LayerNormalization, erf GELU, softmax over
the last axis) and models/resnet50_stage.py (Conv with its bias, Relu, Add), and fed
the same random weights as the Relax build. The arms:

- `logs`: `build_model` with the committed logs (BERT's FFN on dense, the stage's 3x3
  convolutions on conv2d), TVM's default loops for every other call
  (`untemplated="none"`): what the committed logs alone buy today;
- `sibling`: the same, and each call a template implements at a shape no workload
  declares (BERT's q/k/v/o projections and softmax, the stage's 1x1 convolutions) on
  that template's kernel at the nearest workload's best mapped onto it
  (`uncovered_shapes="sibling"`): untuned for those shapes;
- `tvm`: `tvm.compile` of the same module, TVM's defaults (no schedule at all on CPU);
- `ort`: ONNX Runtime, `intra_op_num_threads` = the target's num-cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bert_onnx(weights: dict[str, object], path: Path) -> None:
    """models/bert_layer.py as an ONNX graph over `weights` (export_tvm's names)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from models.bert_layer import HEAD_DIM, HEADS, HIDDEN, SEQ

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
    nodes.append(helper.make_node("LayerNormalization", ["res1", init("ln1.g", weights["ln1.weight"]),
                                                         init("ln1.b", weights["ln1.bias"])], ["h"], axis=-1))
    f1 = linear("h", "fc1", "f1")
    nodes.append(helper.make_node("Gelu", [f1], ["g"]))
    f2 = linear("g", "fc2", "f2")
    nodes.append(helper.make_node("Add", [f2, "h"], ["res2"]))
    nodes.append(helper.make_node("LayerNormalization", ["res2", init("ln2.g", weights["ln2.weight"]),
                                                         init("ln2.b", weights["ln2.bias"])], ["y"], axis=-1))
    graph = helper.make_graph(nodes, "bert_layer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.save(model, str(path))


def resnet_onnx(weights: dict[str, object], path: Path) -> None:
    """models/resnet50_stage.py as an ONNX graph over `weights` (Conv with its bias,
    Relu, the residual Add)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from models.resnet50_stage import IN_CHANNELS, OUT_CHANNELS, SIZE

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
        nodes, "resnet50_stage",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, IN_CHANNELS, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, OUT_CHANNELS, SIZE, SIZE])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))


GRAPHS = {"bert_layer": bert_onnx, "resnet50_stage": resnet_onnx}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", required=True, help="a target of tvmtune.yaml this machine runs (zen4-2c)")
    p.add_argument("--models", nargs="*", default=list(GRAPHS), choices=list(GRAPHS))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--json", type=Path, default=None, help="also write the samples here")
    args = p.parse_args()

    import numpy as np
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.loader import build_model
    from tvmtune_ci.tune.hostcheck import host_description
    from tvmtune_ci.tune.modelprofile import random_inputs

    config = load_config(ROOT)
    target = config.target(args.target)
    cores = int(target.target.get("num-cores", 1))
    host = host_description()
    print(f"target {args.target} ({json.dumps(target.target)}), {cores} thread(s); host {host.get('cpu')} "
          f"({host.get('cpu_id')}); {args.rounds} rounds in turns; onnxruntime {ort.__version__}, "
          f"tvm {tvm.__version__}")
    raw: dict[str, dict[str, list[float]]] = {}
    for name in args.models:
        logs = build_model(name, target=target.target, root=ROOT, untemplated="none")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sibling = build_model(name, target=target.target, root=ROOT, untemplated="none",
                                  uncovered_shapes="sibling")
        mod = logs.module
        arrays = random_inputs(mod)
        weights = dict(zip([p.name for p in mod["forward"].params], arrays, strict=True))
        onnx_path = Path(f"/tmp/tvmtune_bench_{name}.onnx")
        GRAPHS[name](weights, onnx_path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = cores
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        plain = tvm.compile(mod, target=tvm.target.Target(target.target))
        dev = tvm.cpu()
        vms = {"logs": relax.VirtualMachine(logs.executable, dev),
               "sibling": relax.VirtualMachine(sibling.executable, dev),
               "tvm": relax.VirtualMachine(plain, dev)}
        targs = [tvm.runtime.tensor(a, dev) for a in arrays]
        feed = {"x": arrays[0]}
        outs = {k: vm["forward"](*targs).numpy() for k, vm in vms.items()}
        outs["ort"] = sess.run(None, feed)[0]

        def sample(arm: str, vms=vms, sess=sess, targs=targs, feed=feed, min_s: float = 0.2) -> float:
            n, t0 = 0, time.perf_counter()
            while True:
                if arm == "ort":
                    sess.run(None, feed)
                else:
                    vms[arm]["forward"](*targs)
                n += 1
                el = time.perf_counter() - t0
                if el >= min_s:
                    return el / n

        arms = ["logs", "sibling", "tvm", "ort"]
        samples: dict[str, list[float]] = {a: [] for a in arms}
        for r in range(args.rounds):
            for a in arms[r % len(arms):] + arms[:r % len(arms)]:
                samples[a].append(sample(a))
        raw[name] = samples
        print(f"\n{name}: {len(logs.swaps)} call(s) run a template's kernel "
              f"({', '.join(sorted({s.template + '/' + s.workload for s in logs.swaps}))}); "
              f"the rest: {logs.untemplated}")
        print(f"{'arm':6} {'median':>10} {'x ORT (median, min-max over rounds)':>40} {'max |out - ORT|':>16}")
        for a in arms:
            ratios = sorted(x / o for x, o in zip(samples[a], samples["ort"], strict=True))
            print(f"{a:6} {statistics.median(samples[a]) * 1e3:8.2f} ms {statistics.median(ratios):14.2f}x "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f}x) {float(np.abs(outs[a] - outs['ort']).max()):16.2e}")
    if args.json:
        args.json.write_text(json.dumps({"target": args.target, "host": host, "samples": raw}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
