"""The re-tune pipeline (`tvmtune-ci retune`), one module a job: the steps of one entry
(`steps`), the data they pass (`job`), which log is replayed (`history`), tuning only
the workloads that changed (`partial`) and seeding a new shape from its siblings
(`siblings`), carrying a set forward (`carry`), one workload's request to the tuner
(`request`), the words (`words`), the history run after it (`remeasure`) and the time
budget across entries (`budget`)."""

from .steps import *  # noqa: F403
from .steps import __all__  # noqa: F401
