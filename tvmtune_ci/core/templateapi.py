"""The template API's version: how tvmtune-ci turns knobs into MetaSchedule traces.

A log holds MetaSchedule traces; the knobs a README, `build_best` and the history
replay name are read from them with tvmtune-ci's own rules, not the template's:

- `define_split` is one `sample_perfect_tile(n=parts, max_innermost_factor=...)`,
  and `cfg.split` applies its factors outermost first (`preserve_unit_iters`);
- `define_knob` is one `sample_categorical` over its candidates, uniformly;
- every combination of `define_structure` choices is a design space, in
  `itertools.product` order, and a trace is told apart by its instructions;
- the default configuration is every split `[extent, 1, ...]`, every other knob its
  first candidate.

A tvmtune-ci that changes any of these decodes every committed log differently, so
the rules have a version, `TEMPLATE_API`, recorded in each manifest
(`Manifest.template_api`) and compared by `check` (`template_api_changed`). The code
of the rules (`RULES`) is pinned per version by a test (`tests/test_template_api.py`
hashes their canonical AST, as `check` hashes a template's): changing it
fails tvmtune-ci's own suite until the version is bumped, with its entry in
`VERSIONS`, or the change is re-pinned as one that keeps the meaning.

Nothing here imports TVM.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import __version__

# The template API this tvmtune-ci reads and writes.
TEMPLATE_API = 1
# What a manifest written before the version was recorded used: the rules were those
# of version 1 until then.
UNRECORDED = 1


@dataclass(frozen=True)
class Version:
    """One template API: what changed in it, and the last tvmtune-ci release that
    reads its logs (None: still read by this one)."""

    changes: str
    last_release: str | None = None


# Every template API, oldest first. A bump adds an entry saying what changed, sets
# `last_release` of the one before it, and re-pins `RULES_PINNED`.
VERSIONS: dict[int, Version] = {
    1: Version(
        "define_split -> sample_perfect_tile, define_knob -> sample_categorical, "
        "one design space per define_structure combination, default [extent, 1, ...]"
    )
}

# The definitions that are the rules, as (module, qualified name).
RULES = (
    ("tvmtune_ci.core.template", "Knobs.split"),
    ("tvmtune_ci.core.template", "Knobs.knob"),
    ("tvmtune_ci.core.template", "default_value"),
    ("tvmtune_ci.core.template", "design_spaces"),
    ("tvmtune_ci.tune.space", "TemplateSpace.__call__"),
    ("tvmtune_ci.tune.space", "decode_knobs"),
    ("tvmtune_ci.tune.builder", "split_knobs"),
    ("tvmtune_ci.tune.measure", "full_knobs"),
)
# The rules' hash per template API (tests/test_template_api.py's rules_hash).
# Re-pinned without a bump when a change keeps the meaning of every existing log: 1 was
# re-pinned for split defaults (`define_split(..., default=...)`, None: the old rule),
# the factors Knobs.split keeps, the CONSTRAINTS check of split_knobs (issue 24), and
# split_knobs/full_knobs taking a resolved workload as well as a name (workload.py),
# the subpackages (core/, tune/: the modules' names and full_knobs's relative imports
# moved, the code did not), and split_knobs/full_knobs typed to take the `Workload`
# only, its parameters read from it (issue 53), and full_knobs's local import of the
# knob classes moved to the module's top (issue 53's redundant imports, 7e61bf0), and
# TemplateSpace.__call__ running a fused or prepacked workload's step after schedule()
# (issue 65: a no-op for every workload without "epilogue" or "prepack", which is every
# log written before it).
RULES_PINNED = {1: "8b965a18800f23aaf75c9a24098d944344766fb8157327866c7f8c8e208c8066"}


def problem(recorded: int) -> str | None:
    """What is wrong with a log decoded with template API `recorded` for this
    tvmtune-ci, and the fix; None when it reads it as written."""
    if recorded == TEMPLATE_API:
        return None
    if recorded > TEMPLATE_API:
        return (
            f"written with template API {recorded} by a newer tvmtune-ci; this tvmtune-ci "
            f"({__version__}) reads template API {TEMPLATE_API} and cannot decode it: "
            "upgrade tvmtune-ci"
        )
    now = VERSIONS.get(TEMPLATE_API)
    old = VERSIONS.get(recorded)
    what = f" ({now.changes})" if now is not None else ""
    keep = (
        f", or use tvmtune-ci <= {old.last_release} to read it as it is" if old is not None and old.last_release else ""
    )
    return (
        f"decoded with template API {recorded}; this tvmtune-ci ({__version__}) cannot read "
        f"logs of template API {recorded}: it maps knobs to traces with template API "
        f"{TEMPLATE_API}{what}: re-tune it (`tvmtune-ci retune`){keep}"
    )
