"""Benchmark: the re-tune after a template edit, warm (history replay) against cold.

    python -m benchmarks.bench_warmstart                    # every edit, 96 trials each
    python -m benchmarks.bench_warmstart --edits 1,3 --trials 64
    # old logs tuned on this CPU (what a runner re-tuning its own logs has):
    python scripts/demo.py --dir /tmp/host-logs --trials 300
    python -m benchmarks.bench_warmstart --repo /tmp/host-logs --trials 300

Each scripted edit is a realistic change to one of this repo's templates (or its
helper `operators/_gemm.py`), applied to a scratch copy of `operators/`. The "old
log" is this CPU's committed log of that operator (`tuning_logs/OP/TARGET/`, tuned
on the unedited templates). For each edit, on the same workload, budget and seed:

- cold: `tune_workload` as before history replay: a search from nothing;
- warm: the old log's configurations mapped into the edited knob space
  (`history.map_all`), replayed first (checked against reference(), measured), and
  the search started from them (the database it seeds its population from, and the
  cost model, hold them). The old best is a finalist.
- prior: warm, and the cost model also trained before the first batch on the old
  log's other records (`priors.py`: decoded with the unedited template, mapped into
  the edited space, labelled with their old latencies), the region the edit opened
  probed next to the old best, and the search not run when the edit changed none of
  the old log's programs (`search.old_search_stands`). What `retune` does.
- cold2 (`--arms cold2,...`): cold with the next seed, the yardstick for how far
  apart two cold runs of one edit land.

With `--cross FROM`, no template is edited: each operator is tuned for `--target`
cold and seeded from target FROM's log of it (what `seed-from: FROM`, or FROM being
the nearest configured target, does: the replay and the prior, with the cold stop
rule), to show what configurations of other hardware do to the search.

Both use tvmtune.yaml's measurement and early stop (the CI re-tune's settings).
Reported per edit: how many old configurations still map whole and still compute
right; trials (and seconds) each run needed to come within 2% of the cold run's
final search best (the curves are each run's own search numbers); the trials each
ran before stopping; and the final bests re-measured side by side in interleaved
`measure.finals` runs (so machine drift hits all alike; --side-passes of them, every
other in reverse order, each configuration's fastest kept: `_common.side_passes`),
warm / cold and prior / cold with their 95% intervals. The anchor is the cold run;
ratios come from this one invocation.
With them, each run's late incumbents and top configurations: the trials (and seconds,
`seconds_to`) to cold's quality (the slowest cold seed's best) side by side, strictly and
with a configuration equal to it within the noise counted (`_common.side_trials_to`),
over cold's own seconds to that quality and over cold's whole run (bench_transfer's
denominator). An arm's best is slower than cold's beyond cold's own spread only when
the ratio's 95% interval is (`_common.against_spread`); the side-by-side run caps each
configuration at --side-cap-s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks._common import add_side_args, against_spread, side_passes, side_trials_to, wait_idle
from tvmtune_ci.check.fingerprint import SourceCache
from tvmtune_ci.core import history, stats
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.manifest import read_manifest
from tvmtune_ci.core.template import import_template
from tvmtune_ci.pipeline.history import tuned_with
from tvmtune_ci.tune import priors, tvmsetup
from tvmtune_ci.tune.builder import make_builder
from tvmtune_ci.tune.hostcheck import check_host
from tvmtune_ci.tune.measure import Finalist, finals
from tvmtune_ci.tune.runners import make_runner
from tvmtune_ci.tune.tuner import TuneRequest, tune_workload

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Edit:
    name: str
    what: str
    operator: str
    workload: str
    changes: tuple[tuple[str, str, str], ...]  # (file under operators/, old text, new text)


EDITS = [
    Edit(
        "matmul-noop",
        "a no-op statement (the fingerprint changes, the kernels do not)",
        "matmul",
        "m1024",
        (
            (
                "matmul.py",
                "def schedule(sch, cfg) -> None:\n",
                "def schedule(sch, cfg) -> None:\n    _unused = None  # a no-op edit\n",
            ),
        ),
    ),
    Edit(
        "softmax-unroll-candidate",
        "a new candidate for a knob",
        "softmax",
        "attn_512",
        (("softmax.py", 'define_knob("unroll", [0, 16, 64])', 'define_knob("unroll", [0, 16, 64, 256])'),),
    ),
    Edit(
        "gemm-memory-loop-order",
        "a changed loop order (memory-accumulate spaces)",
        "matmul",
        "m1024",
        (
            (
                "_gemm.py",
                "sch.reorder(*batch, *i0, j0, k0, j1, i1, k1, kk, i2, j2, lanes)",
                "sch.reorder(*batch, *i0, j0, k0, i1, j1, k1, kk, i2, j2, lanes)",
            ),
        ),
    ),
    Edit(
        "matmul-pack-none",
        "a new structural choice (B read in place)",
        "matmul",
        "m1024",
        (
            (
                "matmul.py",
                'define_structure("pack_b", ["tile", "global"])',
                'define_structure("pack_b", ["tile", "global", "none"])',
            ),
        ),
    ),
    Edit(
        "conv2d-no-unroll-knob",
        "a removed knob (unroll fixed at 16)",
        "conv2d",
        "resnet50_3x3",
        (
            ("conv2d.py", '    define_knob("unroll", [0, 16, 64]),\n', ""),
            ("conv2d.py", 'cfg.knob(sch, "unroll")', "16"),
        ),
    ),
    Edit(
        "dense-k-step-8",
        "a changed blocking rule: k in steps of 8, not 16",
        "dense",
        "bert_ffn1",
        (
            ("_gemm.py", "k_rest, kk = sch.split(k, [None, PAD])", "k_rest, kk = sch.split(k, [None, 8])"),
            (
                "dense.py",
                'define_split("tile_k", "(K + 15)//16", parts=2, max_factor=32)',
                'define_split("tile_k", "(K + 15)//16*2", parts=2, max_factor=32)',
            ),
        ),
    ),
    Edit(
        "matmul-mr-max-4",
        "a lowered bound (register rows <= 4): old configs repaired",
        "matmul",
        "m1021",
        (
            (
                "matmul.py",
                'define_split("tile_i", "(M + 15)//16*16", parts=3, max_factor=8)',
                'define_split("tile_i", "(M + 15)//16*16", parts=3, max_factor=4)',
            ),
        ),
    ),
    Edit(
        "softmax-more-accumulators",
        "a wider split (up to 16 accumulators)",
        "softmax",
        "vocab_32k",
        (
            (
                "softmax.py",
                'define_split("acc_max", "N//LANES", parts=2, max_factor=8)',
                'define_split("acc_max", "N//LANES", parts=2, max_factor=16)',
            ),
            (
                "softmax.py",
                'define_split("acc_sum", "N//LANES", parts=2, max_factor=8)',
                'define_split("acc_sum", "N//LANES", parts=2, max_factor=16)',
            ),
        ),
    ),
    Edit(
        "dense-register-only",
        "a removed structural candidate (memory accumulate)",
        "dense",
        "bert_ffn2",
        (
            (
                "dense.py",
                'define_structure("accumulate", ["register", "memory"])',
                'define_structure("accumulate", ["register"])',
            ),
        ),
    ),
    Edit(
        "conv2d-pad-copy-unrolled",
        "a changed copy stage (pad pass unrolled, not vectorised)",
        "conv2d",
        "resnet50_3x3",
        (("conv2d.py", "        sch.vectorize(loops[-1])", "        sch.unroll(loops[-1])"),),
    ),
]

# --cross FROM: no edit; the old log is another target's (the seed-from option).
CROSS = [
    Edit(f"{op}-from-another-target", "no edit, another target's log", op, w, ())
    for op, w in (
        ("conv2d", "resnet50_3x3"),
        ("dense", "bert_ffn1"),
        ("matmul", "m1024"),
        ("softmax", "attn_512"),
        ("dense", "bert_ffn2"),
        ("softmax", "vocab_32k"),
    )
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edits", help="1-based indices, comma-separated (default: all)")
    p.add_argument("--trials", type=int, default=96, help="budget of each run (96)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--seeds",
        type=int,
        default=3,
        help="seeds per arm (seed, seed+1, ...): the cold arm's own spread between "
        "seeds is the yardstick a difference must exceed (3)",
    )
    p.add_argument(
        "--arms",
        default="prior",
        help="variants to run against cold: warm, prior, cold2 (cold with the next "
        "seed: how far apart two cold runs land)",
    )
    p.add_argument(
        "--target", help="a target of tvmtune.yaml whose CPU this machine is (default: the one matching this CPU)"
    )
    p.add_argument(
        "--cross",
        metavar="FROM",
        help="instead of the edits: each operator's "
        "unedited template on --target, seeded from target FROM's log (seed-from)",
    )
    p.add_argument(
        "--repo",
        type=Path,
        default=ROOT,
        help="the repository whose tvmtune.yaml, operators/ and committed logs are the "
        "old ones (default: this one). `scripts/demo.py --dir DIR --trials 300` makes "
        "one whose logs were tuned on this CPU: only there do the warm arms' old "
        "rankings hold",
    )
    add_side_args(p)
    p.add_argument(
        "--wait-idle",
        type=float,
        default=120.0,
        help="wait up to this many seconds for the load average to drop below 0.5",
    )
    return p.parse_args(argv)


def pick_target(repo: Path, name: str | None) -> tuple[str, dict[str, Any]]:
    import tvm  # TVM only where a run starts: the report's helpers import without it

    host = str(tvm.target.codegen.llvm_get_system_cpu())
    targets = {t.name: t.target for t in load_config(repo / "tvmtune.yaml").targets}
    if name is not None:
        if name not in targets:
            raise SystemExit(f"no target {name!r} in tvmtune.yaml (it has: {', '.join(targets)})")
        return name, dict(targets[name])
    for n, t in targets.items():
        if t.get("mcpu") == host and "mtriple" not in t:
            return n, dict(t)
    raise SystemExit(
        f"no target of {repo / 'tvmtune.yaml'} is this CPU ({host}); its committed "
        "logs are the old logs this benchmark replays. Tune some on this CPU first "
        "(`python scripts/demo.py --dir DIR --trials 300`, then --repo DIR) or pass "
        "--target"
    )


def load_edited(edit: Edit, repo: Path, scratch: Path) -> Any:
    """The template after the edit, from a scratch copy of operators/ (its helpers too)."""
    shutil.copytree(repo / "operators", scratch / "operators", ignore=shutil.ignore_patterns("__pycache__"))
    for fname, old, new in edit.changes:
        path = scratch / "operators" / fname
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"edit {edit.name}: {fname} no longer holds {old!r}; update EDITS")
        path.write_text(text.replace(old, new, 1))
    # The helper package is imported by name: forget the previous edit's copy.
    for mod in [m for m in sys.modules if m == "operators" or m.startswith("operators.")]:
        del sys.modules[mod]
    sys.path[:] = [p for p in sys.path if "bench-warmstart-" not in p]
    sys.path.insert(0, str(scratch))
    return import_template(scratch / "operators" / f"{edit.operator}.py", scratch)


def incumbents(o: Any, within: float = 1.10, top: int = 5) -> list[tuple[int, dict[str, Any]]]:
    """(trial, knobs): each time the run's best so far changed by the search's own
    figures, within `within` of its final one (earlier ones are too slow to be anyone's
    quality, and would only lengthen the finals), and its final best and top `top`
    configurations with the trial that first measured them (the search's figures are
    noisy: the finals can crown one the search had ranked lower). By trial."""
    steps: list[tuple[int, dict[str, Any], float]] = []
    first: dict[str, int] = {}
    for t in sorted(o.records, key=lambda t: t["trial"]):
        if t["trial"] < 1:
            continue
        first.setdefault(json.dumps(t["knobs"], sort_keys=True), t["trial"])
        secs = t.get("measured_s", t["latency_s"])
        if secs and (not steps or secs < steps[-1][2]):
            steps.append((t["trial"], dict(t["knobs"]), secs))
    out = {json.dumps(k, sort_keys=True): (trial, k) for trial, k, secs in steps if secs <= within * steps[-1][2]}
    for m in [o.best, *o.top[:top]]:
        key = json.dumps(m.knobs, sort_keys=True)
        if m.knobs and key not in out:  # a finalist the search never measured counts at the end
            out[key] = (first.get(key, o.trials.run), dict(m.knobs))
    return sorted(out.values(), key=lambda x: x[0])


def trials_to(curve: list[tuple[int, float]], gflops: float) -> int | None:
    for trial, g in curve:
        if g >= gflops:
            return trial
    return None


def seconds_to(o: Any, trial: int | None, read_s: float = 0.0, batch: int = 1) -> float:
    """Seconds from a run's start to the end of the batch that measured its trial `trial`
    (nan for None), when the search knew its figure: what comes before the first trial in
    full (the old log's read `read_s`, the correctness check, the baseline, setup, the
    prior's training); the replay's seconds whole when `trial` is among the replayed
    configurations (measured as one batch); and the search's seconds pro rata over its
    own trials, up to the end of `trial`'s batch of `batch`. The finals come after every
    trial and count for none. (Pro rata over the run's wall seconds, as before, charged
    the finals to early trials and no replay before the first.)"""
    if trial is None:
        return math.nan
    st = o.stats
    fixed = read_s + sum(st.get(k) or 0.0 for k in ("correctness_s", "baseline_s", "setup_s", "prior_s"))
    replayed = o.replay.measured if o.replay is not None else 0
    if replayed:
        fixed += st.get("replay_s") or 0.0
        if trial <= replayed:
            return fixed
    own = max(o.trials.run - replayed, 1)
    done = min(-(-(trial - replayed) // max(batch, 1)) * max(batch, 1), own)
    return fixed + (st.get("search_s") or 0.0) * done / own


@dataclass(frozen=True)
class EditSetup:
    """What `run_edit` reads before the arms run: the edited template, the old log's
    configurations mapped onto it, and the prior the prior arms train on."""

    tmpl: Any
    old: list[dict[str, Any]]
    mapped: list[Any]
    old_decl: Any
    diff: Any
    prior: tuple[tuple[dict[str, Any], float], ...]
    programs: tuple[tuple[dict[str, Any], str], ...]
    decode_s: float  # what retune pays before the tuner: the old log read


@dataclass(frozen=True)
class SideBySide:
    """Every arm's best and its incumbents re-measured side by side, interleaved."""

    steps: dict[str, list[tuple[int, dict[str, Any]]]]  # each arm's incumbents
    est: dict[str, Any]  # knobs' JSON, and each arm's name -> its Estimate
    q_est: Any  # cold's quality: the slowest cold seed's final best as re-measured here
    q_side: float


def run_edit(i: int, edit: Edit, args: argparse.Namespace, target_name: str, target: dict[str, Any]) -> dict[str, Any]:
    """One edit: the edited template tuned by every arm, their bests side by side, its row."""
    config = load_config(args.repo / "tvmtune.yaml")
    arms = [f"{a}@{k}" for a in ["cold", *args.arms.split(",")] for k in range(args.seeds)]
    scratch = Path(tempfile.mkdtemp(prefix="bench-warmstart-"))
    try:
        setup = prepare_edit(edit, args, target_name, target, config, arms, scratch)
        print_edit(i, edit, setup)
        outs: dict[str, Any] = {}
        secs: dict[str, float] = {}
        for arm in arms:
            outs[arm], secs[arm] = tune_arm(arm, edit, args, target, config, setup, scratch)
            print_arm(arm, outs[arm], secs[arm])
        bars = cold_bars(outs, arms)
        side = side_by_side(edit, args, target, config, setup, arms, outs)
        return edit_row(i, edit, setup, arms, outs, secs, side, bars, config.batch_size)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def prepare_edit(
    edit: Edit,
    args: argparse.Namespace,
    target_name: str,
    target: dict[str, Any],
    config: Any,
    arms: list[str],
    scratch: Path,
) -> EditSetup:
    """The edited template, the old log's configurations mapped onto it, the knobs'
    difference, and (for a prior arm) the old log's records as the prior."""
    repo = args.repo
    tmpl = load_edited(edit, repo, scratch)
    folder = repo / "tuning_logs" / edit.operator / (args.cross or target_name)
    manifest = read_manifest(folder / "manifest.json")
    old = history.old_configs(manifest, edit.workload)
    # --cross: the other target's configurations mapped through both targets' facts.
    source = config.target(args.cross).target if args.cross else None
    mapped = history.map_all(old, tmpl.KNOBS, tmpl.WORKLOADS[edit.workload], target, source)
    old_decl = history.old_declaration(repo, manifest)
    diff = history.knob_diff(
        old_decl, tmpl.KNOBS, tmpl.WORKLOADS[edit.workload], target, old_names=sorted({k for c in old for k in c})
    )
    prior: tuple[tuple[dict[str, Any], float], ...] = ()
    programs: tuple[tuple[dict[str, Any], str], ...] = ()
    decode_s = 0.0
    if any(a.startswith("prior") for a in arms):  # the unedited template is this checkout's
        prior, programs, decode_s = read_prior(edit, args, config, tmpl, folder, manifest, mapped, target)
    return EditSetup(tmpl, old, mapped, old_decl, diff, prior, programs, decode_s)


def read_prior(
    edit: Edit,
    args: argparse.Namespace,
    config: Any,
    tmpl: Any,
    folder: Path,
    manifest: Any,
    mapped: list[Any],
    target: dict[str, Any],
) -> tuple[tuple[tuple[dict[str, Any], float], ...], tuple[tuple[dict[str, Any], str], ...], float]:
    """The old log's other records mapped as the prior, its programs (this target's log
    only) and the seconds the read took, read as retune reads them."""
    repo = args.repo
    programs: tuple[tuple[dict[str, Any], str], ...] = ()
    t0 = time.perf_counter()
    if args.cross and tuned_with(
        manifest,
        manifest.template_file,
        SourceCache(repo, inputs=config.declared_inputs(), config_file=config.path)
        .fingerprint(repo / manifest.template_file)
        .dependencies,
        tmpl.WORKLOADS,
    ):  # no edit: read in this process with the template as imported, as retune does
        recs = priors.records_here(tmpl, folder / "manifest.json", manifest, [edit.workload])
    else:  # as it was tuned, in a child process
        recs = priors.decode_records(
            repo, manifest.template_file, folder / manifest.log, manifest.target, [edit.workload]
        )
    prior = priors.prior_for(
        recs.get(edit.workload, []), tmpl.KNOBS, tmpl.WORKLOADS[edit.workload], target, [m.knobs for m in mapped]
    )
    if not args.cross:  # another target's log never stands for this one (pipeline)
        programs = priors.old_programs(recs.get(edit.workload, []), tmpl.KNOBS, tmpl.WORKLOADS[edit.workload], target)
    return prior, programs, time.perf_counter() - t0


def print_edit(i: int, edit: Edit, setup: EditSetup) -> None:
    """The edit's heading: what changed in the knobs, what of the old log carries."""
    print(f"\n## {i}. {edit.name}: {edit.what} ({edit.operator}/{edit.workload})", flush=True)
    print(
        f"knobs: {setup.diff.sentence()}; {len(setup.old)} old configuration(s) -> {len(setup.mapped)} "
        f"mapped, {sum(not m.reset for m in setup.mapped)} whole; prior: {len(setup.prior)} more "
        f"old record(s) mapped, read in {setup.decode_s:.1f} s (counted in every prior arm's seconds)",
        flush=True,
    )


def tune_arm(
    arm: str, edit: Edit, args: argparse.Namespace, target: dict[str, Any], config: Any, setup: EditSetup, scratch: Path
) -> tuple[Any, float]:
    """One arm's re-tune (`mode@seed`) and its seconds, a prior arm's charged the read."""
    mode, k = arm.split("@")
    mapped, old_decl = setup.mapped, setup.old_decl
    req = TuneRequest(
        template=setup.tmpl,
        workload_name=edit.workload,
        target=target,
        trials=args.trials,
        work_dir=scratch / arm,
        batch_size=config.batch_size,
        seed=args.seed + int(k) + (mode == "cold2"),
        early_stop=config.early_stop,
        measure=config.measure,
        replay=tuple(m.knobs for m in mapped) if mode in ("warm", "prior") else (),
        prior=setup.prior if mode == "prior" else (),
        # As retune passes them: the region the edit opened is probed, and the
        # old search stands when no program changed.
        old_knobs=tuple(old_decl) if mode == "prior" and old_decl is not None and mapped else None,
        old_programs=setup.programs if mode == "prior" else (),
        # Another target's log sets no warm stop rule (what retune does since
        # 2026-12-06): its seeds are a head start, the cold rule ends the search.
        warm_stop=not args.cross,
    )
    t0 = time.perf_counter()
    out = tune_workload(req)
    return out, time.perf_counter() - t0 + (setup.decode_s if arm.startswith("prior") else 0.0)


def print_arm(mode: str, o: Any, secs: float) -> None:
    """An arm's line: trials, seconds by phase, best; where the replay's seconds went,
    and its finalists."""
    phases = ", ".join(
        f"{k.removesuffix('_s')} {o.stats[k]:.1f}"
        for k in ("correctness_s", "baseline_s", "setup_s", "prior_s", "replay_s", "search_s", "finals_s")
        if o.stats.get(k)
    )
    print(
        f"  {mode}: {o.trials.run} trials ({o.trials.stop_detail or o.trials.stop_reason}) "
        f"in {secs:.0f} s ({phases}); best "
        f"{stats.fmt_latency(o.best.latency_s, o.best.rel_halfwidth)}",
        flush=True,
    )
    if o.stats.get("replay_measure_s") is not None:  # where the replay's seconds went
        st = o.stats
        print(
            "    replay: "
            + ", ".join(
                f"{k.removeprefix('replay_').removesuffix('_s')} {st[k]:.1f}"
                for k in (
                    "replay_schedule_s",
                    "replay_build_s",
                    "replay_check_s",
                    "replay_measure_s",
                    "replay_load_s",
                    "replay_eval_s",
                )
                if k in st
            )
            + " s",
            flush=True,
        )
    roles = [f["role"] for f in o.final_results]
    left = o.replay.finals_left_out if o.replay is not None else 0
    print(
        f"    finals: {len(roles)} finalist(s) ({roles.count('search')} of the search's"
        + (f", {left} old program(s) left out" if left else "")
        + ")",
        flush=True,
    )
    print_warm(o.stats)


def print_warm(st: dict[str, Any]) -> None:
    """What the warm stop rule saw, for an arm it ran in."""
    if st.get("warm_batches"):  # what kept a warm run going after its match
        hoped = (
            f"; the model expected a gain beyond the noise in {st['warm_hoped']:.0f} "
            f"(median +{st['warm_hoped_predicted']:.1%}), measured one in "
            f"{st['warm_hoped_met']:.0f} (their median measured gain "
            f"{st['warm_hoped_measured']:+.1%})"
            if st.get("warm_hoped")
            else ""
        )
        bias = f"; its hopes overshot by a median {st['warm_hope_bias']:.1%}" if "warm_hope_bias" in st else ""
        print(f"    after the match: {st['warm_batches']:.0f} batch(es) judged{hoped}{bias}", flush=True)
    if st.get("warm_beaten_at"):  # the warm rule stood down for the cold rule
        print(
            f"    beat the old best after {st['warm_beaten_at']:.0f} trials of its own "
            f"({st['warm_beaten_ratio']:.3f}x it, side by side): the cold rule decided",
            flush=True,
        )
    if st.get("warm_beside"):  # own bests re-measured beside the old best
        print(
            f"    side by side with the old best: {st['warm_beside']:.0f} own best(s), "
            f"{st.get('warm_side_by_side', 0):.0f} asked for the match, "
            f"{st.get('warm_side_by_side_matched', 0):.0f} matched, in {st['warm_side_by_side_s']:.1f} s",
            flush=True,
        )


def cold_bars(outs: dict[str, Any], arms: list[str]) -> tuple[float, float]:
    """The bars an arm's curve is read against (GFLOPS): within 2% of cold@0's final
    search best, and cold's quality."""
    cold = outs["cold@0"]
    goal = cold.curve[-1][1] / 1.02  # within 2% of the cold run's final search best
    # Cold's quality: the slowest cold seed's final search best (as bench_transfer
    # defines it: reaching it is being within cold's own spread between seeds).
    quality = min(outs[a].curve[-1][1] for a in arms if a.startswith("cold@") and outs[a].curve)
    return goal, quality


def side_by_side(
    edit: Edit,
    args: argparse.Namespace,
    target: dict[str, Any],
    config: Any,
    setup: EditSetup,
    arms: list[str],
    outs: dict[str, Any],
) -> SideBySide:
    """Every arm's best side by side, interleaved (drift hits all alike), and with them
    each run's late incumbents and top: cold's quality taken side by side too (the search's
    own figures of two runs are two stretches of the runner, minutes apart)."""
    steps = {a: incumbents(outs[a]) for a in arms}
    # Keyed by the knobs: an arm's best is among its incumbents, and two seeds may
    # share one; each configuration is measured once.
    best_key = {a: json.dumps(outs[a].best.knobs, sort_keys=True) for a in arms}
    cands = {best_key[a]: dict(outs[a].best.knobs) for a in arms}
    cands.update((json.dumps(k, sort_keys=True), dict(k)) for a in arms for _, k in steps[a])
    runner, builder = make_runner(config.measure), make_builder()

    def one_run(order: list[str]) -> dict[str, Any]:
        fin = finals(
            setup.tmpl,
            edit.workload,
            target,
            [Finalist("search", cands[key], key) for key in order],
            replace(config.measure, time_cap_s=args.side_cap_s),
            runner=runner,
            builder=builder,
        )
        return {r.finalist.key: r.estimate for r in fin}

    try:
        by_knobs, side_runs = side_passes(one_run, list(cands), args.side_passes)
    finally:
        runner.close()
        builder.close()
    if len(side_runs) > 1:  # each run's figures, before the fastest of each is kept
        print_side_runs(arms, best_key, side_runs)
    est = {**by_knobs, **{a: by_knobs.get(best_key[a]) for a in arms}}
    # Cold's quality side by side: the slowest cold seed's final best as re-measured here.
    colds = [e for a in arms if a.startswith("cold@") and (e := est.get(a)) is not None]
    q_est = max(colds, key=lambda e: e.value) if colds else None
    q_side = q_est.value if q_est is not None else math.nan
    print(
        "  re-measured side by side: "
        + ", ".join(
            f"{a} {stats.fmt_latency(est[a].value, est[a].rel_halfwidth)}"
            if est.get(a) is not None
            else f"{a} not measured"
            for a in arms
        ),
        flush=True,
    )
    return SideBySide(steps, est, q_est, q_side)


def print_side_runs(arms: list[str], best_key: dict[str, str], side_runs: list[dict[str, Any]]) -> None:
    """Each arm's best as each side-by-side run measured it."""
    for a in arms:
        print(
            f"  {a}'s best in each side-by-side run: "
            + ", ".join(
                stats.fmt_latency(r[best_key[a]]) if r.get(best_key[a]) is not None else "-" for r in side_runs
            ),
            flush=True,
        )


def edit_row(
    i: int,
    edit: Edit,
    setup: EditSetup,
    arms: list[str],
    outs: dict[str, Any],
    secs: dict[str, float],
    side: SideBySide,
    bars: tuple[float, float],
    batch: int,
) -> dict[str, Any]:
    """The edit's row for `report`: per arm, trials and seconds to cold's quality read
    three ways, its stop, and its best against cold@0's side by side."""
    row: dict[str, Any] = {
        "n": i,
        "edit": edit.name,
        "what": edit.what,
        "entry": f"{edit.operator}/{edit.workload}",
        "old": len(setup.old),
        "mapped": len(setup.mapped),
        "whole": sum(not m.reset for m in setup.mapped),
        "prior": len(setup.prior),
        "arms": {a: arm_figures(a, outs[a], secs[a], side, bars, setup.decode_s, batch) for a in arms},
    }
    return row


def arm_figures(
    a: str, o: Any, secs: float, side: SideBySide, bars: tuple[float, float], decode_s: float, batch: int
) -> dict[str, Any]:
    """One arm's figures in its edit's row (`bars`: `cold_bars`)."""
    est, steps = side.est, side.steps[a]
    goal, quality = bars
    read_s = decode_s if a.startswith("prior") else 0.0
    ratio = lo = hi = math.nan
    verdict = "not measured"
    if a != "cold@0" and est.get("cold@0") is not None and est.get(a) is not None:
        c, w = est["cold@0"], est[a]
        ratio, lo, hi = w.value / c.value, w.lo / c.hi, w.hi / c.lo
        verdict = {"equal": "equal within noise", "faster": "faster", "slower": "slower"}[stats.compare(w, c)]
    return {
        "t": trials_to(list(o.curve), goal),
        # Trials to cold's quality, and the seconds to it (`seconds_to`: what comes
        # before the first trial in full, the search pro rata over its trials).
        "tq": (tq := trials_to(list(o.curve), quality)),
        "sq": seconds_to(o, tq, read_s, batch),
        # The same with cold's quality and every incumbent measured side by side.
        "tq2": (tq2 := side_trials_to(steps, est, side.q_side)),
        "sq2": seconds_to(o, tq2, read_s, batch),
        # The same, a configuration equal to cold's quality within the noise counted.
        "tq3": (tq3 := side_trials_to(steps, est, side.q_side, side.q_est)),
        "sq3": seconds_to(o, tq3, read_s, batch),
        "incumbents": len(steps),
        "run": o.trials.run,
        "stop": o.trials.stop_reason,
        "s": secs,
        "ratio": ratio,
        "lo": lo,
        "hi": hi,
        "verdict": verdict,
        "correct": o.replay.correct if o.replay else 0,
        "best": est[a].value if est.get(a) is not None else math.nan,
        "best_lo": est[a].lo if est.get(a) is not None else math.nan,
        "best_hi": est[a].hi if est.get(a) is not None else math.nan,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tvmsetup.load()
    args.repo = args.repo.resolve()
    target_name, target = pick_target(args.repo, args.target)
    # As `retune` runs it: the kernels on the target's cores (TVM's own default is
    # half the cores it sees); the measuring worker inherits it.
    cores = target.get("num-cores")
    if isinstance(cores, int) and cores > 0:
        os.environ["TVM_NUM_THREADS"] = str(cores)
    check_host(target, advice="run this benchmark on a machine with that CPU, or pass --target")
    edits = CROSS if args.cross else EDITS
    picked = [edits[int(x) - 1] for x in args.edits.split(",")] if args.edits else edits
    arms = args.arms.split(",")
    waited = wait_idle(args.wait_idle)
    what = f"{len(picked)} workloads seeded from {args.cross}" if args.cross else f"{len(picked)} template edits"
    print(
        f"# bench_warmstart: {what}, cold vs {' and '.join(arms)} re-tune, "
        f"{args.trials} trials each, seed {args.seed}; target {target_name} {json.dumps(target)}; "
        f"old logs {args.repo}/tuning_logs/*/{args.cross or target_name}/; load {os.getloadavg()[0]:.2f} "
        f"(waited {waited:.0f} s)"
    )
    here = tvmsetup.host_cpu()
    if target.get("mcpu") not in (None, here):
        # Run R (docs/benchmarks/bench_warmstart.md): zen4-2c's old search stood on a Zen 5, 1.8x slower than cold.
        print(
            f"# caveat: the old logs were tuned for {target['mcpu']}, this CPU is {here}: their ranking is "
            "another CPU's, so the warm arms' bests (the old search standing, old programs left out of "
            "the finals, the match with the old best) say nothing of the product here; seconds only. "
            "Logs of this CPU: scripts/demo.py --dir DIR --trials 300, then --repo DIR"
        )
    rows = [run_edit(edits.index(e) + 1, e, args, target_name, target) for e in picked]
    report(rows, ["cold", *arms], args.seeds)
    return 0


def per_seed(
    rows: list[dict[str, Any]], a: str, seeds: int, trials: str, secs: str, what: str, candidates: bool = False
) -> None:
    """One line per edit: each seed's trials and seconds to a quality, arm `a` beside cold."""
    for r in rows:
        cells = []
        for k in range(seeds):
            x, c = r["arms"][f"{a}@{k}"], r["arms"][f"cold@{k}"]
            xn, cn = (f" ({x['incumbents']} candidates)", f" ({c['incumbents']})") if candidates else ("", "")
            cells.append(
                f"seed {k}: {a} {x.get(trials) or '-'} trials / {x.get(secs, math.nan):.0f} s{xn}, "
                f"cold {c.get(trials) or '-'} / {c.get(secs, math.nan):.0f} s{cn}"
            )
        print(f"  {r['entry']}: {what}: " + "; ".join(cells))


def seed_bests(r: dict[str, Any], arm: str, seeds: int) -> list[Any]:
    """Each seed's best side by side with its 95% bounds, None if not measured."""
    out = []
    for k in range(seeds):
        x = r["arms"][f"{arm}@{k}"]
        ok = math.isfinite(x["best"])
        out.append(
            SimpleNamespace(value=x["best"], lo=x.get("best_lo", math.nan), hi=x.get("best_hi", math.nan))
            if ok
            else None
        )
    return out


def vs_cold(r: dict[str, Any], arm: str, seeds: int) -> Any:
    """An arm's bests against cold's own spread between seeds."""
    return against_spread(seed_bests(r, arm, seeds), seed_bests(r, "cold", seeds))


def report(rows: list[dict[str, Any]], arms: list[str], seeds: int) -> None:
    """Per edit and arm: seconds, trials and the final best (re-measured in one
    interleaved run), the median over seeds; each arm against cold's own spread."""
    print_table(rows, arms, seeds)
    print()
    for a in arms[1:]:
        print_against_cold(rows, a, seeds)
        print_to_quality(rows, a, seeds)
        print_to_quality_side(rows, a, seeds)


def print_table(rows: list[dict[str, Any]], arms: list[str], seeds: int) -> None:
    """One row per edit: each arm's median seconds and trials, and its bests against cold's."""

    def med(r: dict[str, Any], arm: str, key: str) -> float:
        return statistics.median(r["arms"][f"{arm}@{k}"][key] for k in range(seeds))

    print(
        "\n| # | edit | entry | old configs: mapped / whole / correct (+ prior records) | "
        + " | ".join(f"{a}: s, trials (median of {seeds} seeds)" for a in arms)
        + " | cold's own spread (slowest / fastest best of its seeds) | "
        + " | ".join(f"{a} / cold, median bests" for a in arms[1:])
        + " |"
    )
    print("|---|---|---|---|" + "---|" * (len(arms) * 2))
    for r in rows:
        spread = vs_cold(r, "cold", seeds).spread
        cells = [f"{med(r, a, 's'):.0f} s, {med(r, a, 'run'):.0f}" for a in arms]
        vs = []
        for a in arms[1:]:
            sp = vs_cold(r, a, seeds)
            vs.append(f"{sp.ratio:.3f} ({sp.lo:.3f}-{sp.hi:.3f}; {sp.words()})")
        correct = r["arms"][f"{arms[1]}@0"]["correct"] if len(arms) > 1 else 0
        print(
            f"| {r['n']} | {r['edit']}: {r['what']} | {r['entry']} | {r['mapped']} / {r['whole']} / "
            f"{correct} (+{r['prior']}) | " + " | ".join(cells) + f" | {spread:.3f} | " + " | ".join(vs) + " |"
        )


def print_against_cold(rows: list[dict[str, Any]], a: str, seeds: int) -> None:
    """Arm `a`'s seconds and trials over cold's, and the edits whose best is slower."""
    s_ratio = [r["arms"][f"{a}@{k}"]["s"] / r["arms"][f"cold@{k}"]["s"] for r in rows for k in range(seeds)]
    t_ratio = [r["arms"][f"{a}@{k}"]["run"] / r["arms"][f"cold@{k}"]["run"] for r in rows for k in range(seeds)]
    slower = [f"{r['edit']} ({sp.ratio:.3f})" for r in rows if (sp := vs_cold(r, a, seeds)).verdict == "slower"]
    point = [
        f"{r['edit']} ({sp.ratio:.3f}, {sp.lo:.3f}-{sp.hi:.3f} > {sp.spread:.3f})"
        for r in rows
        if (sp := vs_cold(r, a, seeds)).verdict == "point"
    ]
    print(
        f"{a}: seconds {a}/cold median {statistics.median(s_ratio):.2f} (range "
        f"{min(s_ratio):.2f}-{max(s_ratio):.2f}) over {len(s_ratio)} edit x seed pairs; trials "
        f"median {statistics.median(t_ratio):.2f}; goal <= 0.35"
    )
    print(
        f"{a}: edits whose median best is slower than cold's beyond cold's own spread, and beyond the "
        "noise: " + (", ".join(slower) or "none")
    )
    print(
        f"{a}: edits beyond it on the point figure only (the interval reaches within it): "
        + (", ".join(point) or "none")
    )


def print_to_quality(rows: list[dict[str, Any]], a: str, seeds: int) -> None:
    """To cold's quality (the slowest cold seed's final best), seed k against cold seed k."""
    q_s = [
        r["arms"][f"{a}@{k}"]["sq"] / r["arms"][f"cold@{k}"]["sq"]
        for r in rows
        for k in range(seeds)
        if r["arms"][f"{a}@{k}"].get("tq") and r["arms"][f"cold@{k}"].get("tq")
    ]
    never = sum(not r["arms"][f"{a}@{k}"].get("tq") for r in rows for k in range(seeds))
    if q_s:
        print(
            f"{a}: to cold's quality (the slowest cold seed's final search best), seconds {a}/cold "
            f"(before the first trial in full, the search pro rata: `seconds_to`) median {statistics.median(q_s):.2f} (range "
            f"{min(q_s):.2f}-{max(q_s):.2f}) over {len(q_s)} pairs; {never} run(s) of {a} never reached it"
        )
    per_seed(rows, a, seeds, "tq", "sq", "to cold's quality")


def print_to_quality_side(rows: list[dict[str, Any]], a: str, seeds: int) -> None:
    """Side by side: every pair counted, a run that never reached it as slower than any."""
    for tq, sq, how in (("tq2", "sq2", "side by side"), ("tq3", "sq3", "side by side, equal within the noise counted")):
        pairs = [
            (r["arms"][f"{a}@{k}"][sq] / r["arms"][f"cold@{k}"][sq] if r["arms"][f"{a}@{k}"][tq] else math.inf)
            for r in rows
            for k in range(seeds)
            if r["arms"][f"cold@{k}"][tq]
        ]
        # The other denominator (bench_transfer's and the target): cold's whole run.
        whole = [
            (r["arms"][f"{a}@{k}"][sq] / r["arms"][f"cold@{k}"]["s"] if r["arms"][f"{a}@{k}"][tq] else math.inf)
            for r in rows
            for k in range(seeds)
        ]
        if pairs:
            print(
                f"{a}: to cold's quality {how} (the slowest cold seed's final best, and each run's late "
                f"incumbents and top configurations, re-measured in turns), seconds {a}/cold median "
                f"{statistics.median(pairs):.2f} over {len(pairs)} pairs, a run that never reached it "
                f"counted as slower than any; {sum(p == math.inf for p in pairs)} never did; over cold's "
                f"whole run's seconds, median {statistics.median(whole):.2f}"
            )
        per_seed(rows, a, seeds, tq, sq, f"to cold's quality, {how}", candidates=True)


if __name__ == "__main__":
    sys.exit(main())
