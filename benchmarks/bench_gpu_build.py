"""What a CPU-only runner pays to keep the GPU templates true (no GPU involved).

For each GPU template of operators/ (TARGET_KINDS cuda), each of its design spaces
and each arch (A100 sm_80, H100 sm_90a, TVM's tags): the default configuration of
its first workload scheduled and lowered by TVM to CUDA source (seconds), compiled by
NVRTC to a cubin (seconds, bytes) and what ptxas reports (registers per thread,
threads, shared memory per block, spills); and `check`'s TVM-free count of the legal
points per workload (milliseconds). Latencies on a GPU are not measured here.

    .venv/bin/python -m benchmarks.bench_gpu_build   # needs the [cuda] extra
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    import tvm

    from tvmtune_ci.core.cudatags import expand_tag
    from tvmtune_ci.core.template import design_spaces, discover_templates, import_template, read_template
    from tvmtune_ci.tune.builder import schedule_config
    from tvmtune_ci.tune.cubin import cuda_cubin
    from tvmtune_ci.tune.hostcheck import host_description

    archs = {"sm_80": expand_tag("nvidia/nvidia-a100"), "sm_90a": expand_tag("nvidia/nvidia-h100")}
    host = host_description()
    print(
        f"# bench_gpu_build on {host['cpu'] or platform.machine()}, {host['cores']} cores, "
        f"no GPU, {time.strftime('%Y-%m-%d')}; TVM {tvm.__version__}; load average "
        f"{os.getloadavg()[0]:.1f} (other jobs ran beside it; seconds are upper bounds)"
    )
    print(
        "template | design space | arch | TVM lower s | NVRTC s | cubin bytes | regs x threads "
        "= regs/block | smem B | spill B"
    )
    for path in discover_templates(ROOT / "operators"):
        decl = read_template(path)
        if "cuda" not in decl.kinds:
            continue
        module = import_template(path, ROOT)
        for arch, target in archs.items():
            assert target is not None
            decl.__dict__.pop("_space_sizes", None)
            t0 = time.perf_counter()
            sizes = decl.space_sizes(target)
            count_ms = (time.perf_counter() - t0) * 1e3
            print(
                f"{path.stem} | legal points ({arch}) | "
                + ", ".join(f"{w}: {p:,}" for w, (p, _) in sizes.items())
                + f" | counted in {count_ms:.0f} ms without TVM"
            )
            wl = next(iter(module.WORKLOADS))
            for structure in design_spaces(decl.knobs):
                t0 = time.perf_counter()
                sch = schedule_config(module, wl, structure, target)
                ex = tvm.compile(sch.mod, target=tvm.target.Target(target))
                lower_s = time.perf_counter() - t0
                cubin = cuda_cubin(ex.mod, target)
                s = cubin.summary()
                print(
                    f"{path.stem}/{wl} | {structure} | {arch} | {lower_s:.2f} | {cubin.seconds:.2f} | "
                    f"{len(cubin.data):,} | {s['registers']} x {s['threads']} = "
                    f"{s['registers_per_block']:,} | {s['smem_bytes']:,} | {s['spill_bytes']}"
                )


if __name__ == "__main__":
    main()
