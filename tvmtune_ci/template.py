"""The template API, where operator templates import it from:

    from tvmtune_ci.template import define_knob, define_split, define_structure

The code is `tvmtune_ci/core/template.py` (declarations, the source reader `check`
uses, the `Knobs` object `schedule` calls). This public path stays: a template's
fingerprint records the names it imports, so moving it would make every committed
log stale.
"""

from __future__ import annotations

from .core.template import Constraint, define_constraint, define_knob, define_split, define_structure

__all__ = ["Constraint", "define_constraint", "define_knob", "define_split", "define_structure"]
