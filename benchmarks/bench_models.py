"""A model end to end: the build with the committed logs, TVM's own build, and ONNX
Runtime, on the same model, weights, CPU and thread count, timed in turns.

    .venv/bin/python -m benchmarks.bench_models --target zen4-2c      # on a Zen 4 runner
    .venv/bin/python -m benchmarks.bench_models --target zen4-2c --rounds 20

The anchor is ONNX Runtime (what a team would deploy instead): every figure is a ratio
to it, taken per round from samples measured side by side (the order rotating), so a
slow stretch of a noisy runner lands on every arm alike. Printed: each arm's median
seconds per inference, its ratio to ONNX Runtime (median of the per-round ratios, and
their min-max), and the largest difference of its output from ONNX Runtime's.

The ONNX graphs are the models' own `to_onnx(weights, path)` (models/bert_layer.py,
models/resnet50_stage.py: op for op the same layers), fed the same random weights as
the Relax build. The arms:

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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", required=True, help="a target of tvmtune.yaml this machine runs (zen4-2c)")
    p.add_argument("--models", nargs="*", default=None, help="models of tvmtune.yaml (default: all)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--json", type=Path, default=None, help="also write the samples here")
    args = p.parse_args()

    import numpy as np
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.model.build import build_model
    from tvmtune_ci.model.calls import onnx_form
    from tvmtune_ci.model.timing import random_inputs
    from tvmtune_ci.tune.hostcheck import host_description

    config = load_config(ROOT)
    target = config.target(args.target)
    cores = int(target.target.get("num-cores", 1))
    host = host_description()
    print(
        f"target {args.target} ({json.dumps(target.target)}), {cores} thread(s); host {host.get('cpu')} "
        f"({host.get('cpu_id')}); {args.rounds} rounds in turns; onnxruntime {ort.__version__}, "
        f"tvm {tvm.__version__}"
    )
    raw: dict[str, dict[str, list[float]]] = {}
    for name in args.models or [m.name for m in config.models]:
        logs = build_model(name, target=target.target, root=ROOT, untemplated="none")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sibling = build_model(name, target=target.target, root=ROOT, untemplated="none", uncovered_shapes="sibling")
        mod = logs.module
        arrays = random_inputs(mod)
        weights = dict(zip([p.name for p in mod["forward"].params], arrays, strict=True))
        spec = next(m for m in config.models if m.name == name)
        onnx_path = onnx_form(ROOT, spec, weights, Path(f"/tmp/tvmtune_bench_{name}.onnx"))
        if onnx_path is None:
            raise SystemExit(f"{spec.source} has no to_onnx(weights, path): no ONNX Runtime arm")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = cores
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        plain = tvm.compile(mod, target=tvm.target.Target(target.target))
        dev = tvm.cpu()
        vms = {
            "logs": relax.VirtualMachine(logs.executable, dev),
            "sibling": relax.VirtualMachine(sibling.executable, dev),
            "tvm": relax.VirtualMachine(plain, dev),
        }
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
            for a in arms[r % len(arms) :] + arms[: r % len(arms)]:
                samples[a].append(sample(a))
        raw[name] = samples
        print(
            f"\n{name}: {len(logs.swaps)} call(s) run a template's kernel "
            f"({', '.join(sorted({s.template + '/' + s.workload for s in logs.swaps}))}); "
            f"the rest: {logs.untemplated}"
        )
        print(f"{'arm':6} {'median':>10} {'x ORT (median, min-max over rounds)':>40} {'max |out - ORT|':>16}")
        for a in arms:
            ratios = sorted(x / o for x, o in zip(samples[a], samples["ort"], strict=True))
            print(
                f"{a:6} {statistics.median(samples[a]) * 1e3:8.2f} ms {statistics.median(ratios):14.2f}x "
                f"({ratios[0]:.2f}-{ratios[-1]:.2f}x) {float(np.abs(outs[a] - outs['ort']).max()):16.2e}"
            )
    if args.json:
        args.json.write_text(json.dumps({"target": args.target, "host": host, "samples": raw}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
