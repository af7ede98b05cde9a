"""The re-tune pipeline (`tvmtune-ci retune`), one module a job: the steps of one entry
(`steps`), the data they pass (`job`), which log is replayed (`history`), tuning only
the workloads that changed (`partial`) and seeding a new shape from its siblings
(`siblings`), carrying a set forward (`carry`), one workload's request to the tuner
(`request`), the words (`words`), the history run after it (`remeasure`) and the time
budget across entries (`budget`).

Its face is what `commands/retune.py` calls; everything else is imported from the module
that defines it. Each name of the face is imported from its module on first use, not
with the package: `matrix` (a light command) and every command's `--help` import
`pipeline.budget`, and `steps` needs numpy, which only the [tune] extra installs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .carry import may_carry
    from .history import replay_plan
    from .partial import plan_partial, removal_only
    from .steps import BEFORE_LOCK, UNDER_LOCK, retune_entry
    from .words import commit_message

__all__ = [
    "BEFORE_LOCK",
    "UNDER_LOCK",
    "commit_message",
    "may_carry",
    "plan_partial",
    "removal_only",
    "replay_plan",
    "retune_entry",
]


def __getattr__(name: str) -> Any:
    # Each branch imports one module, so that the light ones never bring steps' numpy.
    if name in ("BEFORE_LOCK", "UNDER_LOCK", "retune_entry"):
        from . import steps  # lazy: numpy, the [tune] extra, out of matrix and --help

        return getattr(steps, name)
    if name == "commit_message":
        from . import words  # lazy, with the face (see the docstring)

        return words.commit_message
    if name == "may_carry":
        from . import carry  # lazy, with the face (see the docstring)

        return carry.may_carry
    if name in ("plan_partial", "removal_only"):
        from . import partial  # lazy, with the face (see the docstring)

        return getattr(partial, name)
    if name == "replay_plan":
        from . import history  # lazy, with the face (see the docstring)

        return history.replay_plan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
