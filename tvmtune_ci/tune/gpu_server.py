"""`python -m tvmtune_ci.tune.gpu_server --tracker HOST:9190 --key h100`: TVM's RPC server
for a GPU device, with the CUDA compile hook tvmtune-ci uses (`nvrtc.install_hook`).

A library built for a CUDA target carries its kernels' CUDA source; the device
compiles it when it loads the library. TVM's own hook needs `CUDA_PATH` set by hand;
this one finds the [cuda] extra's headers itself. The arguments are
`python -m tvm.exec.rpc_server`'s.
"""

from __future__ import annotations

import runpy
import sys

from .nvrtc import install_hook, toolkit


def main(argv: list[str] | None = None) -> None:
    toolkit()  # HostError with the install line, before the server registers
    install_hook()
    sys.argv = ["tvm.exec.rpc_server", *(sys.argv[1:] if argv is None else argv)]
    runpy.run_module("tvm.exec.rpc_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
