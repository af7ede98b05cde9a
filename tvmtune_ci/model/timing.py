"""Where a built model's time goes: the Relax VM's per-call instrument (TVM side of
`tvmtune-ci profile`; the file is core/profiles.py).

Each kernel call is timed between the instrument's before and after callbacks
(perf_counter; about 1 us of Python per call, small beside the kernels of a model of
this size). An inference's seconds per kernel are summed over its calls, and the
median over `runs` inferences is kept, so one slow stretch of a noisy runner does not
decide a share. The end-to-end latency is timed apart, on VMs without the
instrument, each build in turns with the others (`time_builds`).

Every timing runs in a fresh child process (`time_builds`) whose TVM_NUM_THREADS is the
target's num-cores from its start. TVM sizes a thread's pool once, at its first
parallel call, from that variable, else half the cores it sees on x86, and
`runtime.config_threadpool` can shrink a pool but never grow it: in the profiling
process the pool is whatever ran first left it (a 2-core runner timed one build on
one thread and ONNX Runtime on two). The child reads the pool back on the thread that
times (`tvm.runtime.num_threads`), and the parent refuses a timing whose pool is not
the one asked for (`ThreadPoolError`).

Over 400 lines: the two timing children (TVM's builds, ONNX Runtime with its graph optimizer's fusions) and the protocol that times them in turns.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import HostError
from ..core.profiles import CallTime
from ..tune import tvmsetup
from .build import ModelBuild
from .peak import measure_peak

TIMING_FORMAT = 2


class ThreadPoolError(HostError):
    """A timing ran on another thread count than the target's num-cores."""


def entry_function(mod: Any) -> str:
    """The Relax function a model's inference calls: its only one, else "forward"
    (export_tvm's name) or "main" (TVM's ONNX frontend's)."""
    from tvm import relax

    names = sorted(gv.name_hint for gv, f in mod.functions.items() if isinstance(f, relax.Function))
    if len(names) == 1:
        return names[0]
    for name in ("forward", "main"):
        if name in names:
            return name
    raise HostError(
        f"the model has {len(names)} Relax functions ({', '.join(names) or 'none'}) and none is "
        "named forward or main: say which one runs an inference by naming it forward"
    )


def random_inputs(mod: Any, function: str | None = None, seed: int = 0) -> list[Any]:
    """numpy arrays for every parameter of `function` (inputs, then weights), small
    random values: a profile measures time, and these kernels' time does not depend on
    the values."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for p in mod[function or entry_function(mod)].params:
        shape = tuple(int(d) for d in p.ty.shape.values)
        dtype = str(p.ty.dtype)
        if dtype.startswith("float"):
            out.append((rng.standard_normal(shape) * 0.05).astype(dtype))
        else:
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
    return out


def entry_args(vm: Any, lifted: Sequence[Any] | None, args: Sequence[Any]) -> list[Any]:
    """The entry's arguments: `args` (inputs, then weights) as they are, or, for a build
    whose weight transforms were lifted out (`ModelBuild.lifted`: the transform function
    and the number of inputs), the inputs and the weights it computes from them, once."""
    if not lifted:
        return list(args)
    transform, inputs = str(lifted[0]), int(lifted[1])
    return [*args[:inputs], *vm[transform](list(args[inputs:]))]


def call_seconds(
    executable: Any, arrays: Sequence[Any], *, function: str, runs: int, lifted: Sequence[Any] | None = None
) -> list[tuple[str, int, float]]:
    """(kernel symbol, calls per inference, seconds per inference: the median over
    `runs` instrumented inferences), the slowest first. `lifted`: the build's, whose
    weight transforms run once before (not instrumented: they are no inference's)."""
    import tvm
    from tvm import relax
    from tvm.runtime.vm import VMInstrumentReturnKind

    dev = tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    args = entry_args(vm, lifted, [tvm.runtime.tensor(a, dev) for a in arrays])
    started: dict[str, float] = {}
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}

    def instrument(func: Any, symbol: str, before: bool, ret: Any, *rest: Any) -> Any:
        if symbol.startswith("vm.builtin."):
            return VMInstrumentReturnKind.NO_OP
        now = time.perf_counter()
        if before:
            started[symbol] = now
        else:
            seconds[symbol] = seconds.get(symbol, 0.0) + now - started.pop(symbol)
            counts[symbol] = counts.get(symbol, 0) + 1
        return VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    vm[function](*args)  # warm-up: first-call costs are no kernel's
    per_run: list[dict[str, float]] = []
    calls: dict[str, int] = {}
    for _ in range(max(1, runs)):
        seconds.clear()
        counts.clear()
        vm[function](*args)
        per_run.append(dict(seconds))
        calls = dict(counts)
    out = [(sym, calls[sym], statistics.median(r.get(sym, 0.0) for r in per_run)) for sym in calls]
    return sorted(out, key=lambda c: -c[2])


@dataclass(frozen=True)
class Timing:
    """What one timing child measured, and on which threads."""

    samples: Mapping[str, list[float]]  # arm -> seconds per inference, one per round
    calls: Mapping[str, tuple[CallTime, ...]]  # instrumented builds -> per kernel
    threads: int  # TVM's pool, read back on the thread that timed
    ort_threads: int | None  # ONNX Runtime's intra-op threads, read back (None: not run)
    # The runner's fp32 peak on that pool (model/peak.py), measured in the TVM timing
    # process after the instrumented calls: (GFLOPS, the samples' spread); None: not asked.
    peak: tuple[float, float] | None = None
    # What ONNX Runtime's optimizer fused in the graph it timed (`ort_fusions`).
    ort_fusions: Mapping[str, Mapping[str, int]] | None = None
    # Each child's start and its ready line, wall clock (time.time()): side -> (started,
    # ready). The sides start one after the other (`time_builds`).
    startup: Mapping[str, tuple[float, float]] | None = None


def time_builds(
    builds: Mapping[str, ModelBuild],
    arrays: Sequence[Any],
    *,
    threads: int,
    work_dir: Path,
    function: str,
    runs: int,
    instrument: Sequence[str] = (),
    onnx: tuple[Path, Mapping[str, Any]] | None = None,
    min_sample_ms: int = 100,
    timeout_s: float = 3600.0,
    peak: tuple[Mapping[str, Any], int] | None = None,
) -> Timing:
    """Time `builds` in turns (and ONNX Runtime on the graph `onnx` = (path, its inputs
    by name), on `threads` intra-op threads), and instrument the builds named in
    `instrument` per call. The TVM builds run in one fresh process whose pool has
    `threads` threads, ONNX Runtime in another; this process asks each for one sample
    at a time, in a shuffled order each round, so one runtime's threads are asleep
    while the other's are timed (in one process, the pool that ran last still spins on
    the cores: ONNX Runtime's samples spread 6-25 ms beside TVM's). Raises
    ThreadPoolError when a pool read back there is another size. `peak` = (the target
    dict, its fp32 lanes): also measure the runner's fp32 peak there (`Timing.peak`)."""
    import numpy as np

    work_dir.mkdir(parents=True, exist_ok=True)
    libs = {}
    for label, b in builds.items():
        libs[label] = str(work_dir / f"timing-{label}.so")
        b.executable.export_library(libs[label])
    np.savez(work_dir / "timing-inputs.npz", *arrays)
    spec: dict[str, Any] = {
        "format": TIMING_FORMAT,
        "libs": libs,
        "inputs": str(work_dir / "timing-inputs.npz"),
        "function": function,
        "lifted": {label: list(getattr(b, "lifted", None) or []) or None for label, b in builds.items()},
        "runs": runs,
        "instrument": list(instrument),
        "min_sample_ms": min_sample_ms,
        "threads": threads,
        "peak": {"target": dict(peak[0]), "lanes": int(peak[1])} if peak is not None else None,
    }
    if onnx is not None:
        names = list(onnx[1])
        np.savez(work_dir / "timing-ort.npz", *[onnx[1][n] for n in names])
        spec["onnx"] = {"path": str(onnx[0]), "names": names, "inputs": str(work_dir / "timing-ort.npz")}
    spec_path = work_dir / "timing-spec.json"
    spec_path.write_text(json.dumps(spec))
    # Set before the children's first parallel call, so their pools are sized by it.
    env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
    sides = ["tvm", *(["onnxruntime"] if onnx is not None else [])]
    procs: dict[str, subprocess.Popen[str]] = {}
    deadline = time.monotonic() + timeout_s
    ready: dict[str, Any] = {}
    try:
        for side in sides:
            procs[side] = subprocess.Popen(
                [sys.executable, "-m", "tvmtune_ci.model.timing", str(spec_path), side],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            # One side at a time: the TVM child's instrumented calls and peak are timed
            # as it starts, and ONNX Runtime's start (its graph optimized twice, a
            # warm-up) beside them took the cores: the per-kernel times of a ResNet
            # profile summed to 1.3-2x its end-to-end latency, the 1x1 GEMMs at 58-74%
            # of the peak where they run at 90-99%.
            ready[side] = json.loads(_reply(procs[side], side))
        check_pool(ready["tvm"]["threads"], threads, "TVM's thread pool")
        if onnx is not None:
            check_pool(ready["onnxruntime"]["threads"], threads, "ONNX Runtime's intra-op threads")
        arms = [(label, "tvm") for label in builds] + ([("onnxruntime", "onnxruntime")] if onnx is not None else [])
        samples: dict[str, list[float]] = {label: [] for label, _ in arms}
        rng = random.Random(0)
        for _ in range(max(1, runs)):
            order = list(arms)
            rng.shuffle(order)
            for label, side in order:
                if time.monotonic() > deadline:
                    raise HostError(f"the timing took over {timeout_s:.0f} s")
                samples[label].append(float(_ask(procs[side], side, f"sample {label}")))
        check_pool(int(_ask(procs["tvm"], "tvm", "threads")), threads, "TVM's thread pool, after the rounds,")
    finally:
        for p in procs.values():
            with contextlib.suppress(OSError, ValueError):
                if p.stdin is not None:
                    p.stdin.close()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    return Timing(
        samples,
        {
            label: tuple(CallTime(sym, int(n), float(sec)) for sym, n, sec in rows)
            for label, rows in ready["tvm"]["calls"].items()
        },
        int(ready["tvm"]["threads"]),
        ready["onnxruntime"]["threads"] if onnx is not None else None,
        tuple(ready["tvm"]["peak"]) if ready["tvm"].get("peak") else None,
        ready["onnxruntime"].get("fusions") if onnx is not None else None,
        {side: (float(r["started"]), float(r["ready_at"])) for side, r in ready.items()},
    )


def _ask(proc: subprocess.Popen[str], side: str, line: str) -> str:
    stdin = proc.stdin
    assert stdin is not None
    stdin.write(line + "\n")
    stdin.flush()
    return _reply(proc, side)


def _reply(proc: subprocess.Popen[str], side: str) -> str:
    """The next line a timing process says; its stderr's tail if it died instead."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        err = proc.stderr.read() if proc.stderr is not None else ""
        tail = "\n".join(err.strip().splitlines()[-8:])
        raise HostError(f"the {side} timing process failed (exit {proc.wait()}):\n{tail}")
    return line.strip()


def check_pool(got: Any, want: int, what: str) -> None:
    if got != want:
        raise ThreadPoolError(
            f"{what} had {got} thread(s) where the target's num-cores is {want}: the timing "
            "would compare builds on unequal cores; set num-cores to the runner's cores, or "
            "report this as a bug if TVM_NUM_THREADS was set"
        )


def _serve(spec_path: str, side: str) -> None:
    """A timing process (`time_builds`): load its arms, say the pool it has read back on
    this thread (and, for TVM, the instrumented per-call times), then answer
    `sample LABEL` with one sample's seconds and `threads` with the pool, until stdin ends."""
    import numpy as np

    started = time.time()
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("format") != TIMING_FORMAT:
        raise SystemExit(f"{spec_path}: timing spec format {spec.get('format')!r}, not {TIMING_FORMAT}")
    samplers: dict[str, Callable[[], float]] = {}
    ready: dict[str, Any] = {}
    pool: Callable[[], int]
    if side == "tvm":
        import tvm

        with np.load(spec["inputs"]) as z:
            arrays = [z[f"arr_{i}"] for i in range(len(z.files))]
        exes = {label: tvm.runtime.load_module(path) for label, path in spec["libs"].items()}
        function, runs = spec["function"], int(spec["runs"])
        pool = tvm.runtime.num_threads
        lifted = spec.get("lifted") or {}
        ready["calls"] = {
            label: call_seconds(exes[label], arrays, function=function, runs=runs, lifted=lifted.get(label))
            for label in spec["instrument"]
        }
        samplers = _vm_samplers(exes, arrays, function, spec["min_sample_ms"], lifted)
        if spec.get("peak"):
            peak = measure_peak(
                tvmsetup.make_target(spec["peak"]["target"]), int(spec["threads"]), spec["peak"]["lanes"]
            )
            ready["peak"] = [peak.gflops, peak.spread]
    else:
        o = spec["onnx"]
        with np.load(o["inputs"]) as z:
            feed = {n: z[f"arr_{i}"] for i, n in enumerate(o["names"])}
        sample, _, got = ort_session(o["path"], feed, int(spec["threads"]), spec["min_sample_ms"])
        ready["fusions"] = ort_fusions(o["path"], Path(spec_path).parent)
        sample()  # warm-up
        samplers["onnxruntime"] = sample
        pool = lambda: got  # noqa: E731
    ready["threads"] = pool()
    ready["started"], ready["ready_at"] = started, time.time()
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        cmd, _, label = line.strip().partition(" ")
        if cmd == "sample":
            print(repr(samplers[label]()), flush=True)
        elif cmd == "threads":
            print(pool(), flush=True)


def _vm_samplers(
    exes: Mapping[str, Any], arrays: Sequence[Any], function: str, min_sample_ms: int, lifted: Mapping[str, Any]
) -> dict[str, Callable[[], float]]:
    import tvm
    from tvm import relax

    dev = tvm.cpu()
    out: dict[str, Callable[[], float]] = {}
    for label, exe in exes.items():
        vm = relax.VirtualMachine(exe, dev)
        # The weights' transforms run here, once, as at load: not in the timed calls.
        args = entry_args(vm, lifted.get(label), [tvm.runtime.tensor(a, dev) for a in arrays])
        vm[function](*args)  # warm-up
        timer = vm.time_evaluator(function, dev, number=1, repeat=1, min_repeat_ms=min_sample_ms)
        out[label] = _sampler(timer, args)
    return out


def _sampler(timer: Any, args: Sequence[Any]) -> Callable[[], float]:
    return lambda: float(timer(*args).mean)


def ort_description(threads: int) -> str:
    import onnxruntime as ort

    return f"ONNX Runtime {ort.__version__}, CPU, {threads} intra-op thread(s)"


def ort_session(
    onnx_path: Any, arrays: Mapping[str, Any], threads: int, min_sample_ms: int = 100
) -> tuple[Callable[[], float], str, int]:
    """One ONNX Runtime sample (seconds per inference, the mean over `min_sample_ms`) of
    the graph at `onnx_path` fed `arrays` (its input names -> numpy), on `threads`
    intra-op threads, one inter-op: the deployment a team would compare with."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    feed = {i.name: _ort_input(arrays, i.name) for i in sess.get_inputs()}

    def sample() -> float:
        n, t0 = 0, time.perf_counter()
        while True:
            sess.run(None, feed)
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_sample_ms / 1e3:
                return elapsed / n

    got = int(sess.get_session_options().intra_op_num_threads)
    return sample, ort_description(got), got


def ort_fusions(onnx_path: Any, work_dir: Path) -> dict[str, dict[str, int]]:
    """What ONNX Runtime's graph optimizer made of the graph at `onnx_path` (every
    level, as `ort_session` runs it): {"made": op -> how many more there are after it
    (FusedConv, SkipLayerNormalization, ...), "gone": op -> how many fewer}. An op
    outside the ONNX domain is named with its domain (com.microsoft.nchwc:Conv)."""
    import onnx
    import onnxruntime as ort

    out_path = work_dir / "ort-optimized.onnx"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.optimized_model_filepath = str(out_path)
    opts.log_severity_level = 3  # not its warning that an NCHWc graph is for this machine only
    ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])

    def ops(path: Any) -> Counter[str]:
        graph = onnx.load(str(path), load_external_data=False).graph
        return Counter(f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in graph.node)

    before, after = ops(onnx_path), ops(out_path)
    return {
        "made": {op: after[op] - before[op] for op in sorted(after) if after[op] > before[op]},
        "gone": {op: before[op] - after[op] for op in sorted(before) if before[op] > after[op]},
    }


def _ort_input(arrays: Mapping[str, Any], name: str) -> Any:
    """The array for ONNX input `name`: by its name, else by the name TVM's ONNX
    frontend gave the parameter (characters outside [A-Za-z0-9_] become _)."""
    if name in arrays:
        return arrays[name]
    return arrays[re.sub(r"[^A-Za-z0-9_]", "_", name)]


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
