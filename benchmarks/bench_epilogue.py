"""Epilogues fused into the template kernel, and the weight packed once, against the
model build before them: the template kernel, then the epilogue as a kernel of its own.

The anchor (`alone`) is what a model build runs without a fused workload: the
template's kernel at a configuration, then the bias/activation/residual after it as
TVM fuses them into one elementwise kernel, with the build's fast math and built-in
parallel, vectorized schedule (model/fallback.py); its figure is the two timed
back to back. Beside it, at the same configuration, the fused workload's kernel
(`fused`: the chain folded into the tile's store, tune/epilogue.py) and, for the GEMMs
at a `pack_b="global"` configuration, the prepacked one (`fused+prepacked`: the
weight arrives packed, as after a build's lifting; the pack's own cost is reported
once beside it). The configuration is the committed log's best for `--log-target`,
mapped onto this host's knobs (core.history.map_config), the same for every arm.

Timed side by side in one process on the target's num-cores: in each of `--rounds`
rounds, the arms in a shuffled order, each sample at least 50 ms of calls; a figure is
the fastest quartile of its rounds, a ratio the ratio of those, its band the min-max
of the per-round ratios. Every arm's output is checked against the alone arm's.

    python -m benchmarks.bench_epilogue [--rounds 7] [--log-target zen4-2c]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import warnings
from typing import Any

import numpy as np

from benchmarks._common import append_result
from tvmtune_ci.core.stats import quantile
from tvmtune_ci.tune.hostcheck import host_description, host_target

# (template, workload, chain): this repository's models' chains (docs/models.md).
CASES = (
    ("dense", "bert_ffn1", ["bias", "gelu"]),
    ("dense", "bert_ffn2", ["bias", "residual"]),
    ("conv2d", "resnet50_3x3", ["bias", "relu"]),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--log-target", default="zen4-2c", help="whose committed best to map onto this host")
    args = p.parse_args(argv)
    want = host_target(os.cpu_count())
    threads = int(want["num-cores"])
    os.environ["TVM_NUM_THREADS"] = str(threads)  # before TVM starts its pool
    import tvm  # after TVM_NUM_THREADS: the pool is sized when TVM starts it

    warnings.simplefilter("ignore")
    lines = [
        f"# bench_epilogue {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {host_description().get('cpu', '?')}, "
        f"target {want}, {threads} thread(s), {args.rounds} rounds, configurations: {args.log_target}'s best mapped",
        f"# command: python -m benchmarks.bench_epilogue {' '.join(sys.argv[1:])}",
        f"# load average before: {os.getloadavg()[0]:.2f}",
        "| kernel + chain | arm | time | alone / arm | per-round band | configuration |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    rng = random.Random(0)
    for template, workload, chain in CASES:
        arms, knobs = _arms(tvm, want, template, workload, chain, args.log_target)
        samples: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.rounds):
            order = list(arms)
            rng.shuffle(order)
            for name in order:
                samples[name].append(sum(t() for t in arms[name]["timers"]))
        base = quantile(samples["alone"])
        for name, arm in arms.items():
            q = quantile(samples[name])
            per = sorted(a / b for a, b in zip(samples["alone"], samples[name], strict=True))
            row = (
                f"| {template}/{workload} + {', '.join(chain)} | {name}{arm.get('note', '')} | {q * 1e3:.3f} ms | "
                f"{base / q:.2f}x | {per[0]:.2f}-{per[-1]:.2f}x | {arm['knobs']} |"
            )
            lines.append(row)
            print(row, flush=True)

    print(f"written: {append_result('bench_epilogue', lines)}")
    return 0


def _arms(tvm: Any, want: dict[str, Any], template: str, workload: str, chain: list[str], log_target: str) -> Any:
    """{arm: {"timers": [callables returning seconds], "knobs": ..., "note": ...}}."""
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.history import map_config
    from tvmtune_ci.core.template import import_template, read_template
    from tvmtune_ci.loader import best_config
    from tvmtune_ci.tune import tvmsetup
    from tvmtune_ci.tune.builder import schedule_config
    from tvmtune_ci.tune.workload import Workload

    config = load_config(None)
    path = config.operators_path / f"{template}.py"
    module = import_template(path, config.root)
    decl = read_template(path)
    params = dict(decl.workloads[workload])
    committed = best_config(template, target=config.target(log_target).target, workload=workload, root=config.root)
    knobs = dict(map_config(committed.knobs, decl.knobs, params, want).knobs)
    target = tvmsetup.make_target(want)
    dev = tvm.cpu()

    def built(p: dict[str, Any], kn: dict[str, Any], *, preproc_removed: bool = False) -> tuple[Any, Any]:
        sch = schedule_config(module, Workload(module, workload, p, want), kn, want)
        mod = sch.mod
        if preproc_removed:  # as the search measures it: the weight arrives packed
            mod = tvm.s_tir.transform.RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm.compile(mod, target=target).mod, mod["main"]

    def timer(lib: Any, tensors: list[Any], name: str = "main") -> Any:
        ev = lib.time_evaluator(name, dev, number=1, repeat=1, min_repeat_ms=50)
        return lambda: ev(*tensors).mean

    def tensors_for(func: Any, seed: int) -> list[Any]:
        r = np.random.default_rng(seed)
        return [
            tvm.runtime.tensor(np.asarray(r.standard_normal([int(d) for d in b.shape]) * 0.5, dtype="float32"), dev)
            for b in func.params
        ]

    # alone: the plain kernel, then the chain as the build's own elementwise kernel
    plain_lib, plain_func = built(params, knobs)
    plain_args = tensors_for(plain_func, 2)
    epi_lib, epi_args = _chain_kernel(tvm, want, plain_func, chain, params, decl, plain_args[-1])
    arms: dict[str, Any] = {
        "alone": {"timers": [timer(plain_lib, plain_args), timer(epi_lib, epi_args)], "knobs": knobs}
    }
    fused = {**params, "epilogue": chain}
    f_lib, f_func = built(fused, knobs)
    f_args = plain_args[:-1] + epi_args[1:-1] + [tvm.runtime.empty(epi_args[-1].shape, "float32", dev)]
    arms["fused"] = {"timers": [timer(f_lib, f_args)], "knobs": knobs}
    # The fused output matches the alone arms' (each timer ran the kernels at least once).
    plain_lib["main"](*plain_args)
    epi_lib["main"](*epi_args)
    f_lib["main"](*f_args)
    if not np.allclose(f_args[-1].numpy(), epi_args[-1].numpy(), rtol=1e-4, atol=1e-4):
        arms["fused"]["note"] = " (OUTPUT DIFFERS)"
    if "pack_b" in knobs:
        pk = {**knobs, "pack_b": "global"}
        g_lib, g_func = built(fused, pk)
        arms["fused, pack_b=global"] = {"timers": [timer(g_lib, f_args)], "knobs": pk}
        p_lib, p_func = built({**fused, "prepack": True}, pk, preproc_removed=True)
        p_args = tensors_for(p_func, 3)
        arms["fused+prepacked"] = {"timers": [timer(p_lib, p_args)], "knobs": pk, "note": " (pack once, at load)"}
    return arms, knobs


def _chain_kernel(
    tvm: Any, want: dict[str, Any], kernel: Any, chain: list[str], params: dict[str, Any], decl: Any, y: Any
) -> tuple[Any, list[Any]]:
    """The chain after `kernel`'s output as a model build runs it alone: Relax ops,
    the build's fast math, legalized and fused, the built-in schedule."""
    from tvm import relax

    from tvmtune_ci.core.epilogue import declared_epilogues, operand_shape
    from tvmtune_ci.core.targetinfo import target_facts
    from tvmtune_ci.model.build import fuse
    from tvmtune_ci.model.fallback import fast_math, schedule_rest
    from tvmtune_ci.model.metaschedule import unscheduled
    from tvmtune_ci.tune import tvmsetup

    out = kernel.params[-1]
    shape = [int(d) for d in out.shape]
    declared = declared_epilogues(_raw(decl))
    bb = relax.BlockBuilder()
    yv = relax.Var("y", relax.TensorType(shape, "float32"))
    ops = [
        relax.Var(k, relax.TensorType(list(operand_shape(k, declared.get(k), params, shape)), "float32"))
        for k in chain
        if k in ("bias", "residual", "scale")
    ]
    with bb.function("main", [yv, *ops]):
        with bb.dataflow():
            v: Any = yv
            it = iter(ops)
            for k in chain:
                if k in ("bias", "residual"):
                    v = bb.emit(relax.op.add(v, next(it)))
                elif k == "scale":
                    v = bb.emit(relax.op.multiply(v, next(it)))
                elif k == "relu":
                    v = bb.emit(relax.op.nn.relu(v))
                elif k == "gelu":
                    v = bb.emit(relax.op.nn.gelu(v))
            o = bb.emit_output(v)
        bb.emit_func_output(o)
    target = tvmsetup.make_target(want)
    mod = fuse(fast_math(bb.get()), target)
    names = unscheduled(mod)
    mod, _fb = schedule_rest(mod, target, names, target_facts(want).lanes("float32"))
    (name,) = names
    lib = tvm.compile(tvm.IRModule({"main": mod[name].with_attr("global_symbol", "main")}), target=target).mod
    dev = tvm.cpu()
    r = np.random.default_rng(4)
    args = [y] + [
        tvm.runtime.tensor(np.asarray(r.standard_normal([int(d) for d in b.shape]) * 0.5, dtype="float32"), dev)
        for b in mod[name].params[1:-1]
    ]
    args.append(tvm.runtime.empty(shape, "float32", dev))
    return lib, args


def _raw(decl: Any) -> list[dict[str, Any]]:
    """IMPLEMENTS as written, from the parsed entries."""
    return [{"epilogues": dict(e.epilogues)} for e in decl.implements]


if __name__ == "__main__":
    raise SystemExit(main())
