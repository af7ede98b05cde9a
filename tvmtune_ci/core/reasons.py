"""Why a log set is stale: the reason codes, and what each one means downstream.

One enum member per reason, in the order `check` applies its rules and reports them.
Each carries what a re-tune may still use of the previous log and what to tell the
user, so adding a reason touches this table (and the rule in `staleness/rules.py` that
finds it), not the pipeline and `check` as well:

- `blocks_reuse`: the previous log no longer describes this template, workload and
  target, so its best is not re-measured as a finalist to keep;
- `blocks_replay`: the previous log is not replayed on an edited template (its
  configurations meant something else, or nobody can vouch for them);
- `hint`: the fix `check` prints (template_invalid's names the place: `{where}`).

The members are strings ("missing", "log_modified", ...): the JSON output, the
manifests' and the tests' comparisons read them as before.
"""

from __future__ import annotations

import enum

RETUNE = "tvmtune-ci retune"


class Code(str, enum.Enum):
    """A reason code, with its consequences (see the module docstring)."""

    blocks_reuse: bool
    blocks_replay: bool
    hint: str

    def __new__(cls, code: str, blocks_reuse: bool, blocks_replay: bool, hint: str) -> Code:
        member = str.__new__(cls, code)
        member._value_ = code
        member.blocks_reuse = blocks_reuse
        member.blocks_replay = blocks_replay
        member.hint = hint
        return member

    # Strings in f-strings, str() and formatting, on every Python this supports.
    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]  # str's, on purpose

    @property
    def order(self) -> int:
        """Its place in the report."""
        return _ORDER[self]

    MISSING = ("missing", True, True, f"run `{RETUNE}` and commit the new log")
    TEMPLATE_INVALID = (
        "template_invalid",
        True,
        True,  # {where}: its file:line
        "fix the template at {where} as the message says (it cannot be read, so it cannot be tuned)",
    )
    TEMPLATE_CHANGED = ("template_changed", True, False, f"run `{RETUNE}` and commit the new log")
    WORKLOAD_CHANGED = ("workload_changed", True, False, f"run `{RETUNE}` and commit the new log")
    TARGET_CHANGED = ("target_changed", True, True, f"run `{RETUNE}` and commit the new log")
    TVM_CHANGED = ("tvm_changed", False, True, f"run `{RETUNE}` and commit the new log")
    # Its knobs meant other traces under another template API.
    TEMPLATE_API_CHANGED = ("template_api_changed", True, True, f"run `{RETUNE}` and commit the new log")
    EXPIRED = ("expired", False, False, f"run `{RETUNE}` and commit the new log")
    LOG_MODIFIED = ("log_modified", True, True, f"run `{RETUNE}` and commit the new log")
    # A warning (staleness.Report.orphans), never a reason an entry is stale: a folder
    # holding logs of a target or operator no longer configured.
    ORPHANED = (
        "orphaned",
        False,
        False,
        "list them with `tvmtune-ci status --orphans`; keep them on purpose with `keep:` in tvmtune.yaml",
    )


_ORDER = {c: i for i, c in enumerate(Code)}
