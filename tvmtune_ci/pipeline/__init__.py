"""The re-tune pipeline (`tvmtune-ci retune`), one module a job: the steps of one entry
(`steps`), the data they pass (`job`), which log is replayed (`history`), tuning only
the workloads that changed (`partial`) and seeding a new shape from its siblings
(`siblings`), carrying a set forward (`carry`), one workload's request to the tuner
(`request`), the words (`words`), the history run after it (`remeasure`) and the time
budget across entries (`budget`).

Its face is what `commands/retune.py` calls; everything else is imported from the module
that defines it.
"""

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
