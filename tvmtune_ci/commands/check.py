"""`tvmtune-ci check`: exit 1 when any committed log is stale. Never imports TVM.

Exit codes: 0 all fresh (or stale under --warn-only / --pr with `pr_check: warn`),
1 stale, 2 config or usage error. The work is `staleness.find_stale`; this module
only prints (text, JSON or GitHub annotations + step summary) and picks the code.

`--build` (TVM and the [cuda] extra) also compiles every GPU entry's default and
committed best for its arch (`buildcheck.py`): 1 when one does not build, 5 when
NVRTC is not installed. Without GPU entries it imports nothing more.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, TextIO

from .. import ci
from ..check.models import ModelProblem, coverage_by_model, split_warnings, warning_lines
from ..check.selection import add_selection_options, orphan_lines, report_from_args, summary_line
from ..check.staleness import FIX_HINT, TEMPLATE_API_CHANGED, TEMPLATE_CHANGED, TEMPLATE_INVALID, Entry, Reason, Report
from ..ci import md_escape
from ..core import gcpause, templateapi
from ..core.configschema import Config
from ..core.replayreport import ReplayReport

JSON_FORMAT = 1  # keys are only added within a format (1: `retired` since 2026-12-07)


def reason_json(r: Reason) -> dict[str, Any]:
    return {"code": r.code, "detail": r.detail, "file": r.file, "line": r.line}


def group_reasons(reasons: tuple[Reason, ...]) -> list[tuple[str, list[str]]]:
    """Reasons by code, in order of first appearance: [(code, [detail, ...])]."""
    out: dict[str, list[str]] = {}
    for r in reasons:
        out.setdefault(r.code, []).append(r.detail)
    return list(out.items())


# --------------------------------------------------------------------------- rendering


def entry_line(e: Entry) -> str:
    name = f"{e.operator}/{e.target_name}"
    if e.fresh:
        age = f" (tuned {e.age_days} day{'' if e.age_days == 1 else 's'} ago)" if e.age_days is not None else ""
        return f"fresh {name}{age}"
    reasons = "; ".join(f"{code} ({'; '.join(details)})" for code, details in group_reasons(e.reasons))
    if e.retired is not None:  # no runner can re-tune it: said, not failed (docs/retune.md)
        return f"UNRUNNABLE {name}: {reasons}; its runner is retired ({e.retired}), so its log stays as it is"
    return f"STALE {name}: {reasons}"


def model_line(p: ModelProblem) -> str:
    return f"STALE model {p.model}: {p.code} ({p.detail}); {p.hint}"


def render_text(report: Report, out: TextIO, verbose: bool = False) -> None:
    for e in report.entries:
        print(entry_line(e), file=out)
    for p in report.models:
        print(model_line(p), file=out)
    for line in orphan_lines(report):
        print(f"warning: {line}", file=out)
    # The models' coverage warnings are one line unless --verbose (check/models.py).
    for w in warning_lines(report.warnings, verbose):
        print(f"warning: {w}", file=out)
    print(summary_line(report), file=out)
    if report.models:
        names = ", ".join(dict.fromkeys(p.model for p in report.models))
        print(
            f"{len(report.models)} model coverage file(s) stale ({names}); run `tvmtune-ci models` and commit them",
            file=out,
        )


def report_json(report: Report) -> dict[str, Any]:
    """`check --format json`'s document (rendered once: at 2,000 entries the indented
    encoder is a tenth of the command's time)."""
    return {
        "format": JSON_FORMAT,
        "entries": [
            {
                "operator": e.operator,
                "target": e.target_name,
                "fresh": e.fresh,
                "reasons": [reason_json(r) for r in e.reasons],
                "template": {"file": e.template_file, "line": e.template_line},
                # The operator whose log folder fits this renamed template (`adopt`).
                "renamed_from": e.renamed_from,
                # Its target's runner is gone (`retired:`): a stale entry is unrunnable.
                "retired": e.retired,
            }
            for e in report.entries
        ],
        "orphans": [reason_json(o) for o in report.orphans],
        # Models whose coverage file is missing, unreadable or stale (docs/models.md).
        "models": [
            {"model": p.model, "code": p.code, "detail": p.detail, "file": p.file, "fix": p.hint} for p in report.models
        ],
        "warnings": list(report.warnings),
        # Logs git's index vouched for (committed, unmodified, the recorded blob).
        "logs_trusted": report.logs_trusted,
        # Entries whose template was not parsed: git vouched for its recorded sources.
        "templates_trusted": report.templates_trusted,
    }


def annotation_site(e: Entry) -> tuple[str, int]:
    """Where GitHub shows an entry's annotation: the changed code, else the template."""
    for code in (TEMPLATE_CHANGED, TEMPLATE_INVALID):
        for r in e.reasons:
            if r.code == code and r.file:
                return r.file, r.line or 1
    return e.template_file, e.template_line


def fix_hint(e: Entry) -> str:
    """What to do about a stale entry: re-tuning cannot fix a template that does not read."""
    invalid = [r for r in e.reasons if r.code == TEMPLATE_INVALID]
    if e.renamed_from is not None and not invalid:
        return (
            f"run `tvmtune-ci adopt {e.renamed_from} {e.operator}` (the log of "
            f"{e.renamed_from} fits this renamed template) and commit the move"
        )
    if not invalid:
        if (
            any(r.code == TEMPLATE_API_CHANGED for r in e.reasons)
            and e.manifest is not None
            and e.manifest.template_api > templateapi.TEMPLATE_API
        ):
            # Re-tuning with this tvmtune-ci would write the log back in an older API.
            return "upgrade tvmtune-ci to the version that wrote the log"
        return min((r.code for r in e.reasons), key=lambda c: c.order).hint
    where = ", ".join(dict.fromkeys(f"{r.file}:{r.line}" if r.line else str(r.file) for r in invalid))
    then = (
        f"; then run `{FIX_HINT}` for the other reasons" if any(r.code != TEMPLATE_INVALID for r in e.reasons) else ""
    )
    return TEMPLATE_INVALID.hint.format(where=where) + then


_WHERE = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+): ")


def render_github(report: Report, level: str) -> list[str]:
    lines = []
    for e in report.stale:
        file, line = annotation_site(e)
        reasons = "; ".join(f"{r.code}: {r.detail}" for r in e.reasons)
        lines.append(
            ci.annotation(
                level,
                f"{reasons}. Fix: {fix_hint(e)}",
                file=file,
                line=line,
                title=f"stale tuning log: {e.operator}/{e.target_name}",
            )
        )
    for e in report.unrunnable:
        file, line = annotation_site(e)
        reasons = "; ".join(f"{r.code}: {r.detail}" for r in e.reasons)
        lines.append(
            ci.annotation(
                "warning",
                f"{reasons}. Its runner is retired ({e.retired}): the fleet runs this log as it is; "
                "bring a runner back (remove `retired:` and re-tune) or accept it",
                file=file,
                line=line,
                title=f"unrunnable tuning log: {e.operator}/{e.target_name}",
            )
        )
    for p in report.models:
        lines.append(
            ci.annotation(
                level,
                f"{p.code}: {p.detail}. Fix: {p.hint}",
                file=p.file,
                line=1,
                title=f"stale model coverage: {p.model}",
            )
        )
    # Orphaned folders go to the step summary only: one annotation each drowned the
    # stale entries' annotations after a target switch. The models' coverage warnings
    # are one annotation per model, at its coverage file, holding each call: the same
    # on every PR, one per call spent GitHub's ten warnings a step.
    other, _ = split_warnings(report.warnings)
    for model, ws in coverage_by_model(report.warnings).items():
        lines.append(
            ci.annotation(
                "warning",
                "\n".join(w.removeprefix(f"{w.coverage_file}: ") for w in ws),
                file=ws[0].coverage_file,
                line=1,
                title=f"model coverage: {model}",
            )
        )
    for w in other:
        # "tvmtune.yaml:7: ..." warnings are shown at that line.
        m = _WHERE.match(w)
        if m:
            lines.append(ci.annotation("warning", w, file=m.group("file"), line=int(m.group("line"))))
        else:
            lines.append(ci.annotation("warning", w))
    return lines


def step_summary(report: Report) -> str:
    rows = ["### tvmtune-ci check", "", summary_line(report), "", "| entry | state | reasons |", "|---|---|---|"]
    for e in report.entries:
        reasons = "<br>".join(f"`{r.code}` {md_escape(r.detail)}" for r in e.reasons)
        state = "fresh" if e.fresh else "unrunnable (runner retired)" if e.unrunnable else "**stale**"
        rows.append(f"| {e.operator}/{e.target_name} | {state} | {reasons} |")
    for o in report.orphans:
        rows.append(f"| {md_escape(o.file or '')} | orphaned | {md_escape(o.detail)} |")
    for p in report.models:
        rows.append(f"| model {p.model} | **stale** | `{p.code}` {md_escape(p.detail)} |")
    rows += coverage_summary_rows(report)
    rows += history_summary(report)
    return "\n".join(rows) + "\n"


def coverage_summary_rows(report: Report) -> list[str]:
    """The models' coverage warnings, each (the log shows them as one line)."""
    out: list[str] = []
    for model, ws in coverage_by_model(report.warnings).items():
        if not out:
            out += ["", "#### Model coverage", ""]
        out += [
            f"- **{model}**: " + md_escape(w.removeprefix(f"{w.coverage_file}: model {model}").lstrip(": ")) for w in ws
        ]
    return out


def history_summary(report: Report) -> list[str]:
    """For each fresh entry whose log was re-tuned after a template edit (its manifest
    holds a history replay): what the old configurations were worth."""
    out: list[str] = []
    for e in report.entries:
        if not e.fresh or e.manifest is None:
            continue
        for w, r in sorted(e.manifest.results.items()):
            if r.history is None:
                continue
            if not out:
                out += ["", "#### Re-tuned after a template edit: history replay", ""]
            lines = ReplayReport.from_json(r.history).sentences()
            out.append(
                f"- **{e.operator}/{e.target_name}/{w}** (tuned {e.manifest.tuned_on}): " + md_escape("; ".join(lines))
            )
    return out


# --------------------------------------------------------------------------- command


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=["text", "json", "github"],
        default=None,
        help="output format (default: github inside GitHub Actions, else text)",
    )
    add_selection_options(parser)
    parser.add_argument("--warn-only", action="store_true", help="report stale entries but exit 0")
    parser.add_argument(
        "--pr",
        action="store_true",
        help="this is a pull-request check: exit as tvmtune.yaml's pr_check says (fail: 1 when stale, warn: 0)",
    )
    parser.add_argument(
        "--build",
        action="store_true",
        help="also compile each GPU entry's default and committed best to a cubin for its "
        "arch (needs TVM and the [cuda] extra, no GPU; runs the templates' code); "
        "exit 1 when one does not build",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="each model coverage warning on its own line (uncovered call shapes, ops no "
        "template implements), not one summary line",
    )


def run_builds(config: Config, report: Report, fmt: str) -> tuple[list[Any], list[str]]:
    """The GPU entries' builds (none without --build or GPU entries) and their lines."""
    # Here: the tuning side (TVM, the [cuda] extra) only for --build; `check` is light.
    from ..tune.buildcheck import build_entries, gpu_entries

    if not gpu_entries(config, report.entries):
        return [], ["build check: no GPU entry (no target of kind cuda) to build"]
    builds = build_entries(config, report.entries)
    lines = [b.describe() for b in builds]
    failed = [b for b in builds if not b.ok and not b.skipped]
    if fmt == "github":
        lines = [
            ci.annotation(
                "error",
                b.message,
                file=b.file,
                line=b.line,
                title=f"GPU build failed: {b.operator}/{b.target} {b.workload} ({b.config})",
            )
            for b in failed
        ] + lines
    lines.append(
        f"build check: {len(builds) - len(failed)} of {len(builds)} GPU "
        f"configuration(s) built" + (f", {len(failed)} failed" if failed else "")
    )
    return builds, lines


def exit_code(report: Report, config: Config, args: argparse.Namespace) -> int:
    if not report.stale and not report.models:
        return 0
    if args.warn_only or (args.pr and config.pr_check == "warn"):
        return 0
    return 1


def run(args: argparse.Namespace) -> int:
    # The report is dropped (with _run's frame) before the collector resumes, so it
    # is never scanned: a short-lived command needs no collection of it.
    with gcpause.paused():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    config, report = report_from_args(args)
    code = exit_code(report, config, args)
    fmt = args.format or ("github" if ci.on_github() else "text")
    builds: list[Any] = []
    build_lines: list[str] = []
    if getattr(args, "build", False):
        builds, build_lines = run_builds(config, report, fmt)
        if any(not b.ok and not b.skipped for b in builds):
            code = 1
    if fmt == "json":
        data = report_json(report)
        if getattr(args, "build", False):
            data["builds"] = [b.to_json() for b in builds]
        print(json.dumps(data, indent=2))
        return code
    if fmt == "github":
        for line in render_github(report, "error" if code else "warning"):
            print(line)
        ci.append_step_summary(step_summary(report))
    render_text(report, sys.stdout, verbose=getattr(args, "verbose", False))
    for line in build_lines:
        print(line)
    if (report.stale or report.models) and code == 0:
        why = "--warn-only" if args.warn_only else "pr_check: warn in tvmtune.yaml"
        print(f"exiting 0 despite stale entries ({why})")
    return code
