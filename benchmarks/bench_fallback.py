"""The built-in schedule (model/fallback.py) against TVM's naive loops, per function.

Every PrimFunc of a model as TVM's CPU pipeline legalizes and fuses it, no template
swapped in (the functions an untemplated model runs), each built twice: as TVM leaves
it (the anchor: naive loops, plain exp/erf) and with the build's fast math and built-in
schedule. Both are timed side by side in one process on the target's num-cores: in each
of `--rounds` rounds, the two in a shuffled order, each sample at least 50 ms of calls;
a figure is the fastest quartile of its rounds, a ratio the ratio of those, and its band
the min-max of the per-round ratios. Each output is checked against the naive one
(1e-4 relative).

    python -m benchmarks.bench_fallback --model bert_layer [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import warnings

import numpy as np

from benchmarks._common import append_result
from tvmtune_ci.core.stats import quantile
from tvmtune_ci.core.targetinfo import target_facts
from tvmtune_ci.tune.hostcheck import host_description, host_target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", help="a model of tvmtune.yaml (default: every model)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    want = host_target(os.cpu_count())
    threads = int(want["num-cores"])
    os.environ["TVM_NUM_THREADS"] = str(threads)  # before TVM starts its pool
    import tvm  # after TVM_NUM_THREADS: the pool is sized when TVM starts it

    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.model.build import fuse
    from tvmtune_ci.model.calls import load_model
    from tvmtune_ci.model.fallback import fast_math, schedule_rest
    from tvmtune_ci.model.metaschedule import unscheduled
    from tvmtune_ci.tune import tvmsetup

    warnings.simplefilter("ignore")
    config = load_config(None)
    target = tvmsetup.make_target(want)
    lanes = target_facts(want).lanes("float32")
    dev = tvm.cpu()
    rng = random.Random(0)
    lines = [
        f"# bench_fallback {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {host_description().get('cpu', '?')}, "
        f"target {want}, {threads} thread(s), {args.rounds} rounds",
        f"# command: python -m benchmarks.bench_fallback {' '.join(sys.argv[1:])}",
        f"# load average before: {os.getloadavg()[0]:.2f}",
        "| model | function | naive | built-in | naive / built-in | per-round band | schedule |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    totals: dict[str, list[float]] = {}
    for spec in config.models:
        if args.model and spec.name not in args.model:
            continue
        mod = load_model(config.root, spec)
        plain = fuse(mod, target)
        fast = fuse(fast_math(mod), target)
        # The fast forms rename their functions (softmax -> fast_softmax,
        # fused_..._gelu -> fused_..._fast_gelu): each is paired with its plain namesake.
        names_plain, names_fast = unscheduled(plain), unscheduled(fast)
        scheduled, fb = schedule_rest(fast, target, names_fast, lanes)
        how = dict(fb.by_rule)
        pairs = [(b.replace("fast_", ""), b) for b in names_fast]
        missing = [a for a, _ in pairs if a not in names_plain]
        if missing:
            sys.exit(f"{spec.name}: no plain function for {missing} (plain: {names_plain})")
        for a, b in pairs:
            libs = {
                "naive": tvm.compile(
                    tvm.IRModule({"main": plain[a].with_attr("global_symbol", "main")}), target=target
                ).mod,
                "built-in": tvm.compile(
                    tvm.IRModule({"main": scheduled[b].with_attr("global_symbol", "main")}), target=target
                ).mod,
            }
            args_np = [
                np.random.default_rng(1).standard_normal([int(d) for d in buf.shape]).astype(buf.dtype) * 0.5
                for buf in plain[a].params
            ]
            outs = {}
            for arm, lib in libs.items():
                t = [tvm.runtime.tensor(x, dev) for x in args_np]
                lib["main"](*t)
                outs[arm] = t[-1].numpy()
            ok = np.allclose(outs["built-in"], outs["naive"], rtol=1e-4, atol=1e-5)
            samples: dict[str, list[float]] = {k: [] for k in libs}
            tensors = {k: [tvm.runtime.tensor(x, dev) for x in args_np] for k in libs}
            for _ in range(args.rounds):
                order = list(libs)
                rng.shuffle(order)
                for arm in order:
                    ev = libs[arm].time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=50)
                    samples[arm].append(ev(*tensors[arm]).mean)
            n, f = quantile(samples["naive"]), quantile(samples["built-in"])
            per = sorted(x / y for x, y in zip(samples["naive"], samples["built-in"], strict=True))
            for arm, x in (("naive", n), ("built-in", f)):
                totals.setdefault(f"{spec.name} {arm}", []).append(x)
            row = (
                f"| {spec.name} | `{b}` | {n * 1e3:.3f} ms | {f * 1e3:.3f} ms | {n / f:.2f}x | "
                f"{per[0]:.2f}-{per[-1]:.2f}x | {how.get(b, 'none')}{'' if ok else ' (OUTPUT DIFFERS)'} |"
            )
            lines.append(row)
            print(row, flush=True)
    for name in sorted({k.split()[0] for k in totals}):
        n, f = sum(totals[f"{name} naive"]), sum(totals[f"{name} built-in"])
        row = f"{name}: all its functions, summed: naive {n * 1e3:.1f} ms, built-in {f * 1e3:.1f} ms ({n / f:.1f}x)"
        lines.append(row)
        print(row)
    print(f"written: {append_result('bench_fallback', lines)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
