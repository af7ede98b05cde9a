"""TVM's CUDA target tags (`nvidia/nvidia-h100`) as target dicts, without TVM.

`tvmtune.yaml` may name a tag instead of writing the dict; `check` (no TVM) expands
it from `cudatags_table.py`, generated from TVM's own registry. A test builds every
expanded dict with TVM and compares it with the tag's target.
"""

from __future__ import annotations

import difflib
from typing import Any

from .cudatags_table import HOSTED_TAGS, TAGS


def tag_names() -> list[str]:
    return sorted([*TAGS, *HOSTED_TAGS])


def expand_tag(name: str) -> dict[str, Any] | None:
    """The target dict of TVM's tag `name` (None: no such CUDA tag)."""
    if name in TAGS:
        arch, smem, regs, l2 = TAGS[name]
        out: dict[str, Any] = {"kind": "cuda", "arch": arch}
    elif name in HOSTED_TAGS:
        arch, smem, regs, l2, mcpu, cores = HOSTED_TAGS[name]
        out = {
            "kind": "cuda",
            "arch": arch,
            "host": {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": mcpu, "num-cores": cores},
        }
    else:
        return None
    if l2:
        out["l2_cache_size_bytes"] = l2
    out.update(
        {
            "max_shared_memory_per_block": smem,
            "max_threads_per_block": 1024,
            "thread_warp_size": 32,
            "registers_per_block": regs,
        }
    )
    return out


def close_tags(name: str) -> list[str]:
    """Tag names like `name` (a typo's likely meaning)."""
    return difflib.get_close_matches(name, tag_names(), n=3, cutoff=0.6)
