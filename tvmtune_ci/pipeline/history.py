"""Which log a re-tune replays (`history_source`): the entry's own log after a template
edit, another target's as a seed, or a renamed template's; whether the previous best
is a fair finalist (`can_reuse_previous`); the old log's records decoded as the cost
model's prior (`old_records`); what `--dry-run` says would be replayed."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..check.renames import renamed_history
from ..check.staleness import Entry, installed_tvm_version, major_minor
from ..core import history, siblings
from ..core.configschema import Config, TargetConfig
from ..core.errors import TemplateError, TvmtuneError
from ..core.fsutil import sha256_bytes
from ..core.git.read import last_commit
from ..core.layout import LogSet
from ..core.manifest import Manifest, read_manifest
from ..core.reasons import Code
from ..core.runs import same_machine
from ..core.targetinfo import TargetFacts, target_facts
from ..core.template import read_template
from ..tune import priors
from ..tune.hostcheck import host_description
from .job import Say

if TYPE_CHECKING:
    pass


# Reasons under which the previous log no longer describes the same template, workload
# and target (its best is no fair finalist to keep), and under which it is not replayed
# on an edited template (history.py): reasons.Code says which.
SAME_TEMPLATE_BLOCKERS = frozenset(c for c in Code if c.blocks_reuse)


REPLAY_BLOCKERS = frozenset(c for c in Code if c.blocks_replay)


def can_reuse_previous(entry: Entry) -> bool:
    """Whether the previous log describes this very template, workload and target,
    so its best is a fair finalist to keep."""
    return entry.manifest is not None and not ({r.code for r in entry.reasons} & SAME_TEMPLATE_BLOCKERS)


def replay_skipped(entry: Entry) -> str | None:
    """Why the previous log is not replayed on the edited template (None: it is, or
    the template did not change). Only a template edit is replayed."""
    codes = {r.code for r in entry.reasons}
    if entry.manifest is None:  # unreadable (log_modified), or none at all (missing)
        return "no readable previous log" if Code.LOG_MODIFIED in codes else None
    if Code.TEMPLATE_CHANGED not in codes and Code.WORKLOAD_CHANGED not in codes:
        return None
    if Code.TVM_CHANGED in codes:
        return f"the previous log was tuned with TVM {entry.manifest.tvm_version}"
    if Code.LOG_MODIFIED in codes:
        return "the previous log was edited by hand"
    if Code.TEMPLATE_API_CHANGED in codes:
        return f"the previous log was decoded with template API {entry.manifest.template_api}, not this tvmtune-ci's"
    if Code.TARGET_CHANGED in codes:
        return "the previous log was tuned for another target"
    return None


def history_source(
    config: Config, entry: Entry, target: TargetConfig, say: Say
) -> tuple[Manifest | None, Path, str | None]:
    """Whose log a re-tune replays: (manifest, its path, the other target's name or None).

    This entry's own log after a template edit; its old folder's after a rename with
    an edit (renames.renamed_history); else, with the target's seed-from,
    another target's log of the operator when the entry has no log of its own to
    keep; else none (manifest None). Says why a replay is skipped."""
    reuse = can_reuse_previous(entry)
    if can_replay(entry):
        return entry.manifest, entry.logset.manifest, None
    skipped = replay_skipped(entry)
    if entry.manifest is None and skipped is None:
        # No log: a renamed (and edited) template's is in its old folder (renames.py).
        renamed = renamed_history(config, entry.operator, target, entry.template_file, say)
        if renamed is not None:
            return renamed[0], renamed[1], None
    if not reuse and target.seed_from:
        seeded = seed_source(config, entry, target, say)
        if seeded is not None:
            say(f"history: seeding from the {target.seed_from} log {seeded[0].log} (seed-from)")
            return seeded[0], seeded[1], target.seed_from
    elif entry.manifest is None and skipped is None and target.seed_nearest:
        near = nearest_source(config, entry, target, say)
        if near is not None:
            say(
                f"history: a new target: seeding from the nearest configured target's log, {near[2]}'s "
                f"{near[0].log} (its configurations mapped through both targets' facts and replayed "
                "first, its records the cost model's prior; the cold stop rule ends the search)"
            )
            return near
    if skipped is not None:
        say(f"history replay skipped: {skipped}; a cold search")
    return None, entry.logset.manifest, None


def replay_plan(config: Config, entry: Entry, only: Sequence[str] | None = None) -> list[str]:
    """What `retune` would replay, in words, without TVM (for --dry-run): per workload
    the knob diff and how many old configurations map; for a new shape, the siblings
    that would seed it. `only`: these workloads (a partial re-tune's)."""
    lines: list[str] = []
    target_cfg = config.target(entry.target_name)
    hist, _, from_target = history_source(config, entry, target_cfg, lines.append)
    if hist is None:
        return [x.removesuffix("; a cold search") for x in lines]
    decl = read_template(config.root / entry.template_file)
    target = target_cfg.target
    old_decl = history.old_declaration(config.root, hist)
    for wname, wl in sorted(decl.workloads.items()):
        if only is not None and wname not in only:
            continue
        if from_target is None and siblings.is_new_shape(hist, wname, wl):
            shapes = {s: dict(hist.workloads[s]) for s in hist.results if isinstance(hist.workloads.get(s), dict)}
            order = siblings.nearest(wl, shapes)
            seeds = siblings.map_siblings(siblings.sibling_configs(hist, order), decl.knobs, wl, target)
            lines.append(
                f"history {wname}: a new shape: {len(seeds)} configuration(s) of its siblings in "
                f"{hist.log} ({', '.join(order) or 'none'}; nearest first) mapped onto its legal "
                "knob values would be replayed first; their other records would train the cost "
                "model, latencies scaled by the FLOPs ratio"
            )
            continue
        old = history.old_configs(hist, wname)
        source = config.target(from_target).target if from_target else None
        mapped = history.map_all(old, decl.knobs, wl, target, source)
        diff = history.knob_diff(old_decl, decl.knobs, wl, target, old_names=sorted({k for c in old for k in c}))
        whole = sum(not m.reset for m in mapped)
        lines.append(
            f"history {wname}: {diff.sentence()}; {len(mapped)} configuration(s) of "
            f"{hist.log}{f' ({from_target})' if from_target else ''} would be replayed "
            f"first, {whole} with every knob kept; its other records would train the "
            "cost model"
        )
    return lines


def can_replay(entry: Entry) -> bool:
    """Whether the entry's own previous log is replayed: its template was edited,
    the log is readable, unedited, for this target and tuned with this TVM."""
    codes = {r.code for r in entry.reasons}
    return (
        entry.manifest is not None
        and bool(codes & {Code.TEMPLATE_CHANGED, Code.WORKLOAD_CHANGED})
        and not codes & REPLAY_BLOCKERS
    )


def git_commit_of(root: Path, path: Path) -> str | None:
    try:
        return last_commit(root, path)
    except Exception:  # not a git repo, or the template is not committed yet
        return None


def seed_source(
    config: Config, entry: Entry, target: TargetConfig, say: Say, then: str = "a cold search"
) -> tuple[Manifest, Path] | None:
    """The log of `target.seed_from` for this operator, when it can seed this entry's
    search: readable, not edited by hand, tuned with this TVM, for the same template
    file. None (with a line saying why, and `then`: what happens instead) otherwise."""

    name = target.seed_from
    assert name is not None
    logset = LogSet.of(config.logs_path, entry.operator, name)
    where = f"seed-from {name}: {logset.folder.relative_to(config.root) if logset.folder.is_relative_to(config.root) else logset.folder}"
    try:
        m = read_manifest(logset.manifest)
    except (OSError, TvmtuneError) as e:
        say(f"history: {where} has no readable log ({type(e).__name__}); {then}")
        return None
    try:
        data = (logset.folder / m.log).read_bytes()
    except OSError:
        data = None
    installed = installed_tvm_version()
    why = None
    if data is None or sha256_bytes(data) != m.log_sha256:
        why = f"its log {m.log} is missing or was edited since its manifest was written"
    elif installed and major_minor(installed) != major_minor(str(m.tvm_version)):
        why = f"it was tuned with TVM {m.tvm_version}"
    elif m.template_file != entry.template_file:
        why = f"it is a log of {m.template_file}, not {entry.template_file}"
    if why is not None:
        say(f"history: {where}: not seeding, {why}; {then}")
        return None
    return m, logset.manifest


def _facts_distance(a: TargetFacts, b: TargetFacts) -> float:
    """How far two targets of one architecture are for a template: another ISA counts
    1, then the log2 ratios of their vector widths and register counts."""
    return (
        float(a.isa != b.isa)
        + abs(math.log2(max(1, a.vector_bits) / max(1, b.vector_bits)))
        + abs(math.log2(max(1, a.vector_registers) / max(1, b.vector_registers)))
    )


def nearest_source(config: Config, entry: Entry, target: TargetConfig, say: Say) -> tuple[Manifest, Path, str] | None:
    """The log of the nearest configured target that can seed a new target's first
    search: the same kind and architecture (x86_64, aarch64, a GPU's), nearest by ISA,
    vector width and register count (`_facts_distance`), then by the same `mcpu`, then
    by name; the first whose log `seed_source` accepts. None when there is none."""
    try:
        mine = target_facts(target.target)
    except TemplateError:
        return None
    ranked = []
    for other in config.targets:
        if other.name == target.name or other.target.get("kind") != target.target.get("kind"):
            continue
        try:
            facts = target_facts(other.target)
        except TemplateError:
            continue
        if facts.arch != mine.arch or not LogSet.of(config.logs_path, entry.operator, other.name).manifest.exists():
            continue
        same_cpu = other.target.get("mcpu") == target.target.get("mcpu")
        ranked.append((_facts_distance(facts, mine), not same_cpu, other.name))
    for *_, name in sorted(ranked):
        seeded = seed_source(config, entry, replace(target, seed_from=name), say, then="the next nearest target")
        if seeded is not None:
            return seeded[0], seeded[1], name
    return None


def tuned_with(
    manifest: Manifest, template_file: str, dependencies: Mapping[str, str], workloads: Mapping[str, Any]
) -> bool:
    """Whether `manifest`'s log was tuned with the template as it is now: the same file,
    every dependency of its fingerprint (the template's definitions, its in-repo helpers,
    its data files) hashed the same, and every workload both declare at the same
    parameters (a record decodes against its own shape's spaces). The fingerprint's
    digest itself also hashes WORKLOADS, so an added shape changes it."""
    return (
        manifest.template_file == template_file
        and dict(manifest.dependencies) == dict(dependencies)
        and all(
            siblings.same_params(manifest.workloads.get(w), params)
            for w, params in workloads.items()
            if w in manifest.workloads
        )
    )


def old_records(
    root: Path,
    manifest_path: Path,
    manifest: Manifest,
    workloads: list[str],
    say: Say,
    here: tuple[Any, dict[str, Any] | None] | None = None,
) -> dict[str, list[Any]]:
    """The replayed log's records as (knobs, latency, program key) per workload, for the
    cost model's prior and the check whether the old search stands (`priors.py`); {} with
    a line saying why when they cannot be read. `here`: (the template's module, its
    resolved workloads or None) when the template is the one the log was tuned with: no
    checkout and no child process then."""
    try:
        if here is not None:
            return priors.records_here(here[0], manifest_path, manifest, workloads, here[1])
        with tempfile.TemporaryDirectory(prefix="tvmtune-prior-") as scratch:
            return priors.old_records(root, manifest_path, manifest, workloads, Path(scratch))
    except priors.PriorError as e:
        say(f"history: the cost model is not trained on the previous log's other records: {e}")
        return {}


def old_ranking_holds(target: TargetConfig, manifest: Manifest) -> bool:
    """Whether the previous log's ranking of its programs was measured on this kind of
    runner (`runs.same_machine`): the old search standing after an edit, and the finals
    leaving old programs out, rest on it. Another CPU generation ranks them otherwise (a
    Zen 4's best 1024^3 matmul ran 1.7-1.9x slower on a Zen 5 than the Zen 5's own best;
    bench_warmstart run R). An RPC target's devices are the runner: not this machine."""
    return target.rpc is not None or same_machine(host_description(), manifest.host)
