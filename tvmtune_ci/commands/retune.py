"""`tvmtune-ci retune`: turn stale entries into fresh, verified, documented logs.

Over 400 lines: `run` is a short list of named steps (select, dry run, budget order,
re-tune, outcome, commit, push, step summary), and each prints what it did; the work
itself is in `pipeline/`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import ci
from ..check.staleness import TEMPLATE_INVALID, find_stale, parse_date, select_entries
from ..core import lock
from ..core.config import load_config
from ..core.configschema import Config
from ..core.errors import HostError, LockError, TemplateError, TvmtuneError, UsageError
from ..core.layout import LogSet
from ..core.profiles import model_shares_by_target
from ..core.template import declared_kinds, discover_templates, read_template
from ..pipeline import commit_message, may_carry, plan_partial, removal_only, replay_plan
from ..pipeline.budget import Budget, floor_estimate, fmt_duration, parse_duration
from ..progress import Progress
from ..publish.gitwrite import commit_paths, push_with_retry
from ..publish.swap import MARKER_NAME, leftovers, recover
from ..tune.hostcheck import check_host, other_cpu
from ..tune.runners.local import prestart_worker
from ..tune.runners.threads import measure_threads

if TYPE_CHECKING:  # pragma: no cover
    from ..check.staleness import Entry
    from ..pipeline.job import RetuneResult


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("operators", nargs="*", metavar="OPERATOR", help="operators to consider (default: all)")
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME",
        help="targets to consider (repeatable; default: all configured)",
    )
    p.add_argument("--all", action="store_true", help="re-tune fresh entries too (the yearly full re-tune)")
    p.add_argument(
        "--trials", type=int, default=None, metavar="N", help="trial budget per workload (default: from tvmtune.yaml)"
    )
    p.add_argument(
        "--budget",
        default=None,
        metavar="DURATION",
        help="one time budget for every selected workload (90m, 2h), shared by their weights (operators.NAME.weight in tvmtune.yaml), the heaviest last",
    )
    p.add_argument("--seed", type=int, default=None, metavar="S", help="search seed (default: from tvmtune.yaml)")
    p.add_argument("--as-of", default=None, metavar="YYYY-MM-DD", help="date that decides expiry (default: today)")
    p.add_argument(
        "--no-carry",
        action="store_true",
        help="re-tune every workload of an entry even when its template's edit changed no program (by default its set is carried forward unmeasured) or only its WORKLOADS changed (by default only the added and changed ones are tuned); --all implies this",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be re-tuned and stop")
    p.add_argument("--commit", action="store_true", help="commit exactly the files the re-tune wrote")
    p.add_argument(
        "--push", action="store_true", help="push the commit(s), rebasing onto a moved remote (implies --commit)"
    )


def print_settings(config: Config, args: argparse.Namespace, n: int) -> None:
    es = config.early_stop
    m = config.measure
    print(f"tvmtune-ci retune: {n} entr{'y' if n == 1 else 'ies'} from {config.path}")
    tiers = (
        "; where a model is profiled on the target, by the workload's share of it: "
        + ", ".join(f"{n} at {least * 100:.0f}%+" for least, n in config.trial_tiers)
        if config.models and config.trial_tiers
        else ""
    )
    trials = args.trials if args.trials is not None else f"{config.trials} (per-operator overrides apply{tiers})"
    print(
        f"  trials per workload: {trials}, batch {config.batch_size}, seed {args.seed if args.seed is not None else config.seed}"
    )
    print(
        f"  early stop: {'off' if es.patience == 0 else f'best not improved beyond the noise and >{es.min_improvement:.0%} for {es.patience} batches (once the cost model is warm)'}"
    )
    # Every option by name, so the line follows MeasureOptions as it changes.
    print("  measure: " + " ".join(f"{f.name}={getattr(m, f.name)!r}" for f in dataclasses.fields(m)))


def recover_interrupted(config: Config, operators: list[str], *, dry_run: bool = False) -> list[str]:
    """Finish the publishes a killed run left half done; the entries recovered
    (with `dry_run`, the entries that need it, untouched).

    Before staleness is decided: a set swapped in but not cleaned up is fresh and
    would never be re-tuned (its leftovers would stay forever), and one caught
    between the fallback's two renames would look missing. A folder whose lock
    is held is skipped: its holder recovers it before it publishes.
    """
    done = []
    for op in operators:
        for t in config.targets_for(op, declared_kinds(config.operators_path / f"{op}.py")):
            logset = LogSet.of(config.logs_path, op, t.name)
            if not leftovers(logset.folder) and not (logset.folder / MARKER_NAME).exists():
                continue
            if dry_run:
                done.append(f"{op}/{t.name}")
                continue
            try:
                with lock.hold(logset.lock, f"{op}/{t.name}"):
                    recover(logset.folder)
            except LockError:
                continue
            done.append(f"{op}/{t.name}")
    return done


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.config) if args.config else None)
    if args.trials is not None and args.trials < 1:
        raise UsageError(f"--trials must be at least 1, got {args.trials}")
    entries = _select(config, args)
    carry = not (args.no_carry or args.all)
    for e in entries:
        why = "; ".join(f"{r.code}: {r.detail}" for r in e.reasons) or "fresh (--all)"
        print(f"  {e.operator}/{e.target_name}: {why}")
        if args.dry_run:
            _dry_run(config, e, carry=carry)
    budget = None
    if args.budget is not None:
        budget, entries = _order_by_budget(config, entries, parse_duration(args.budget))
    if args.dry_run:
        return dry_run_verdict(config, entries, carry=carry)
    if not entries:
        print("nothing to re-tune: every log is fresh")
        return 0
    _prestart(config, entries, carry)
    results: list[RetuneResult] = []
    committed: list[RetuneResult] = []
    failures: list[TvmtuneError] = []
    for e in entries:
        with ci.group(f"re-tune {e.operator} on {e.target_name}"):
            try:
                r = _retune(config, e, args, budget=budget, carry=carry)
            except TvmtuneError as err:
                _report(e, str(err))
                failures.append(err)
                continue
            results.append(r)
            _print_outcome(e, r)
            if args.commit or args.push:
                if (failed := _commit(config, e, r)) is None:
                    committed.append(r)
                else:
                    failures.append(failed)
    if args.push and (failed := _push(config, committed)) is not None:
        failures.append(failed)
    spent = ""
    if budget is not None:
        spent = _spent(budget)
        print(spent)
    if results:
        _step_summary(results, spent)
    if failures:
        print(f"{len(failures)} failure{'s' if len(failures) != 1 else ''}; see the errors above", file=sys.stderr)
        return max(f.exit_code for f in failures)
    return 0


def _select(config: Config, args: argparse.Namespace) -> Sequence[Entry]:
    """The entries to re-tune (the stale ones, or all with `--all`), once the publishes
    an earlier run left half done are finished; says the settings and what is skipped."""
    select_entries(config, args.operators or None, args.target or None)  # unknown names: exit 2
    for name in args.target or ():
        why = config.target(name).retired
        if why is not None:  # asked for by name: refused, not skipped in silence
            raise UsageError(
                f"{name}'s runner is retired ({why}): no runner can re-tune it; to bring it back, "
                f"remove `retired:` from targets.{name} in tvmtune.yaml and run this on a runner of it"
            )
    known = [p.stem for p in discover_templates(config.operators_path)]
    for name in recover_interrupted(config, args.operators or known, dry_run=args.dry_run):
        if args.dry_run:
            print(f"interrupted: {name}: an earlier run was stopped while publishing; a re-tune finishes it first")
        else:
            print(f"recovered {name}: finished a publish that an earlier run did not complete")
    report = find_stale(
        config,
        as_of=parse_date(args.as_of) if args.as_of else None,
        operators=args.operators or None,
        targets=args.target or None,
    )
    live = [e for e in report.entries if e.retired is None]
    entries: Sequence[Entry] = live if args.all else report.stale
    print_settings(config, args, len(entries))
    for e in report.entries:
        if e.retired is not None:
            print(f"  retired, skipped: {e.operator}/{e.target_name} ({e.retired})")
        elif e not in entries:
            print(f"  fresh, skipped: {e.operator}/{e.target_name} (pass --all to re-tune it anyway)")
    return entries


def _dry_run(config: Config, e: Entry, *, carry: bool) -> None:
    """What `--dry-run` says of one entry beside its reasons: whether every workload
    would be re-tuned or only some, and which log each would replay."""
    target = config.target(e.target_name)
    plan = None
    if not any(r.code == "template_invalid" for r in e.reasons):
        plan = plan_partial(
            config,
            e,
            target,
            read_template(config.root / e.template_file).workloads,
            carry=carry,
            threads=measure_threads(target),
        )
        if isinstance(plan, str) and plan != "--no-carry":
            print(f"    every workload would be re-tuned: {plan}")
        elif plan is not None and not isinstance(plan, str):
            print(f"    partial re-tune: {plan.sentence()}")
    only = plan.tuned if plan is not None and not isinstance(plan, str) else None
    for line in replay_plan(config, e, only=only):
        print(f"    {line}")


def _order_by_budget(config: Config, entries: Sequence[Entry], total_s: float) -> tuple[Budget, Sequence[Entry]]:
    """The `--budget` over `entries`, and the entries in its order (the lightest
    workload's entry first); says the budget's split."""
    budget = make_budget(config, entries, total_s)
    order = budget.order()
    entries = sorted(
        entries,
        key=lambda e: min((order.index(i) for i in order if i[:2] == (e.operator, e.target_name)), default=len(order)),
    )
    print(
        f"  budget: {fmt_duration(budget.total_s)} across {len(order)} workloads, the lightest first: "
        + ", ".join(f"{o}/{t}/{w} {budget.weights[(o, t, w)]:.2f}" for o, t, w in order)
    )
    return budget, entries


def _prestart(config: Config, entries: Sequence[Entry], carry: bool) -> None:
    """Start the local measuring worker now when an entry will measure on this machine."""
    local = [
        e
        for e in entries
        if config.target(e.target_name).rpc is None and not may_carry(e, carry) and not removal_only(config, e, carry)
    ]
    if local:
        # Its TVM import (2 s) runs beside ours, not after it: the first trial comes sooner.
        # With the threads the first such entry measures with: its environment is fixed now.
        prestart_worker(measure_threads(config.target(local[0].target_name)))


def _retune(config: Config, e: Entry, args: argparse.Namespace, *, budget: Budget | None, carry: bool) -> RetuneResult:
    """One entry re-tuned (`retune_entry`), its progress bars closed after."""
    from ..pipeline import retune_entry  # lazy: numpy (the [tune] extra) out of --help

    bars: list[Progress] = []

    def progress(label: str, bars: list[Progress] = bars) -> Progress:
        bars.append(Progress(label))
        return bars[-1]

    try:
        r = retune_entry(
            config, e, trials=args.trials, seed=args.seed, say=print, progress=progress, budget=budget, carry=carry
        )
    except TvmtuneError:
        for b in bars:
            b.close()
        raise
    for b in bars:
        b.close()
    return r


def _print_outcome(e: Entry, r: RetuneResult) -> None:
    """Each workload's best (or that it was carried) and the files written."""
    partial = r.manifest.partial
    for w, res in sorted(r.manifest.results.items()):
        t = r.manifest.trials[w]
        if partial and w in partial["carried"]:
            print(
                f"{e.operator}/{e.target_name}/{w}: carried unmeasured from {partial['from_log']}: "
                f"best {res.best.latency_s * 1e3:.4g} ms"
            )
            continue
        if r.manifest.carried:
            print(
                f"{e.operator}/{e.target_name}/{w}: carried forward, 0 trials: best "
                f"{res.best.latency_s * 1e3:.4g} ms as measured on {r.manifest.tuned_on}"
            )
            continue
        print(
            f"{e.operator}/{e.target_name}/{w}: best {res.best.latency_s * 1e3:.4g} ms "
            f"({res.speedup:.1f}x vs default), {t.run} trials ({t.stop_reason}), knobs {res.best.knobs}"
        )
    if r.manifest.carried:
        print(
            f"re-stamped {r.published.folder / 'manifest.json'} (+ README.md); the log and "
            "its run history are unchanged"
        )
    else:
        print(f"wrote {r.published.folder / r.manifest.log} (+ manifest.json, README.md, curve.png)")


def _commit(config: Config, e: Entry, r: RetuneResult) -> TvmtuneError | None:
    """Commit the files one entry's re-tune wrote; the error, reported, when it fails."""
    # One entry's commit failing must not cost the others theirs:
    # reported now, the exit status says so at the end.
    try:
        sha = commit_paths(config.root, r.published.changed_paths, commit_message([r]), config.git)
    except TvmtuneError as err:
        _report(e, f"the new log set is written but not committed: {err}")
        return err
    print(f"committed {sha[:12]}: {commit_message([r]).splitlines()[0]}")
    return None


def _push(config: Config, committed: Sequence[RetuneResult]) -> TvmtuneError | None:
    """Push the commits made (`--push`); the error, reported, when it fails."""
    if not committed:
        print("nothing was committed, so nothing was pushed")
        return None
    try:
        pushed = push_with_retry(config.root, identity=config.git)
    except TvmtuneError as err:
        print(f"error: push: {err}", file=sys.stderr)
        if ci.on_github():
            print(ci.annotation("error", str(err), title="tvmtune-ci retune --push"))
        return err
    print(f"pushed {len(committed)} commit{'s' if len(committed) != 1 else ''}: {pushed}")
    return None


def _spent(budget: Budget) -> str:
    took = budget.spent_s()
    return (
        f"budget: spent {fmt_duration(took)} of {fmt_duration(budget.total_s)} "
        f"({took / budget.total_s:.2f}) on {len(budget.done)} of {len(budget.weights)} workloads"
    )


def _step_summary(results: Sequence[RetuneResult], spent: str) -> None:
    """One row per workload in the GitHub step summary, and the budget spent."""
    ci.append_step_summary(
        "\n".join(
            ["| operator | target | workload | best | vs default | trials | stop |", "|---|---|---|---|---|---|---|"]
            + [
                f"| {r.manifest.operator} | {r.manifest.target_name} | {w} | {res.best.latency_s * 1e3:.4g} ms | {res.speedup:.1f}x | {r.manifest.trials[w].run} | {r.manifest.trials[w].stop_reason} |"
                for r in results
                for w, res in sorted(r.manifest.results.items())
            ]
            + ([f"\n{spent}"] if spent else [])
        )
    )


def make_budget(config: Config, entries: Sequence[Entry], total_s: float) -> Budget:
    """The budget over every workload of `entries`, weighted by the models' profiles
    where a model calls the workload, else as tvmtune.yaml says."""
    from ..tune.search import WARMUP_SAMPLES  # lazy: numpy (the [tune] extra) out of --help

    weights = {}
    shares = model_shares_by_target(config, {e.target_name for e in entries})
    for e in entries:
        workloads = list(read_template(config.root / e.template_file).workloads)
        for w in workloads:
            weights[(e.operator, e.target_name, w)] = config.weight_of(
                e.operator, w, workloads, shares.get(e.target_name)
            )
    m = config.measure
    history = m.history_s * len(entries) / max(1, len(weights))  # each set's run, per item
    return Budget(
        total_s, weights, floor_s=floor_estimate(m.time_cap_s, m.search_cap_s, m.finalists, WARMUP_SAMPLES, history)
    )


def dry_run_verdict(config: Config, entries: Sequence[Entry], *, carry: bool = True) -> int:
    """What a real run would stop at before tuning, with its exit code: a template that
    cannot be read (2), a target this host cannot run (5). 0 when it would start."""
    if not entries:
        print("nothing to re-tune: every log is fresh")
        return 0
    codes = []
    for e in entries:
        invalid = [r for r in e.reasons if r.code == TEMPLATE_INVALID]
        if invalid:
            _report(e, f"would stop: the template cannot be read: {invalid[0].detail}")
            codes.append(TemplateError.exit_code)
            continue
        target = config.target(e.target_name)
        try:
            check_host(target.target, remote=target.rpc is not None)
            if target.rpc is None and (cpu := other_cpu(target.target)) is not None:
                print(
                    f"  {e.operator}/{e.target_name}: would be measured on this machine's {cpu}, not the "
                    f"target's {target.target['mcpu']} (a warning, not a refusal)"
                )
        except HostError as err:
            if removal_only(config, e, carry):
                print(
                    f"  {e.operator}/{e.target_name}: only workloads were removed: archiving their records "
                    f"measures nothing, so this host need not run the target ({err})"
                )
                continue
            if may_carry(e, carry):
                # The run tries a carry forward first (it measures nothing): only the
                # programs tell, which a dry run does not build.
                _report(
                    e,
                    f"would stop before any trial unless the set is carried forward (only its "
                    f"template changed; an edit that changed no program needs no measuring): {err}",
                )
            else:
                _report(e, f"would stop before any trial: {err}")
            codes.append(err.exit_code)
        except ImportError:
            print(f"  {e.operator}/{e.target_name}: host not checked (TVM is not installed)")
    if codes:
        print(f"dry run: {len(codes)} of {len(entries)} entries would fail; nothing was changed")
        return max(codes)
    print(f"dry run: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} would be re-tuned; nothing was changed")
    return 0


def _report(e: Entry, message: str) -> None:
    print(f"error: {e.operator}/{e.target_name}: {message}", file=sys.stderr)
    if ci.on_github():
        print(
            ci.annotation(
                "error",
                message,
                file=e.template_file,
                line=e.template_line,
                title=f"tvmtune-ci retune {e.operator}/{e.target_name}",
            )
        )
