"""The tune side: everything that builds, runs and measures kernels with TVM.

`tvmsetup` loads and pins TVM; `builder`, `space`, `search`, `journal`, `priors` and
`tuner` make and search a template's schedules; `measure`, `sampling`, `numerics`,
`calibration`, `runners/`, `devices` and `rpclimits` measure them here or on RPC
devices; `hostcheck`, `nvrtc`, `gpubuild`, `buildcheck` and `gpu_server` build for
and check the hardware; `workload` is one workload resolved once per re-tune.

It may import `core` and `check`. `core` and `check` never import it.
"""
