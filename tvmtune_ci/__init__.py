"""tvmtune-ci: keeps the committed tuning logs of TVM operator templates true.

Importing this package never imports TVM; `build_best` and `build_model` do, when called.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "build_best", "best_config", "build_model"]


def __getattr__(name: str) -> Any:
    # The loader needs TVM; keep `import tvmtune_ci` (and check/status) TVM-free.
    if name in ("build_best", "best_config"):
        from . import loader

        return getattr(loader, name)
    if name == "build_model":
        from .model import build

        return build.build_model
    raise AttributeError(name)
