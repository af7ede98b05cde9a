"""`check --build`: do the GPU entries still compile? On any machine, no GPU needed.

For each (operator, target) entry whose target is a CUDA one, the template's default
configuration and the committed best of every workload are scheduled, lowered by TVM
and compiled by NVRTC to a cubin for the target's arch (`gpubuild.compile_cuda_config`),
and ptxas's report is held against the target's limits. A template edit that no longer
compiles is reported at the template's line (the line of `schedule()` that raised, or
`def schedule` for an error of TVM's lowering or of the CUDA compiler) with the
compiler's message. Unlike plain `check`, this imports TVM and runs the template's
code: run it where that is allowed (a hosted runner without secrets).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..check.staleness import Entry
from ..core.configschema import Config
from ..core.errors import TemplateError, TvmtuneError
from ..core.template import import_template
from . import nvrtc
from .builder import split_knobs
from .cubin import ResourceError
from .gpubuild import compile_cuda_config
from .workload import Workload, resolve


@dataclass(frozen=True)
class Build:
    """One configuration of one entry, built for its GPU (or why not)."""

    operator: str
    target: str
    workload: str
    config: str  # "default" or "best"
    ok: bool
    message: str  # the compiler's (or the template's) message when not ok
    file: str  # where to look: repository-relative
    line: int
    seconds: float = 0.0
    cubin_bytes: int = 0
    resources: dict[str, int] = field(default_factory=dict)
    skipped: bool = False  # not built, and not a failure (the best of another template version)

    def describe(self) -> str:
        what = f"{self.operator}/{self.target} {self.workload} ({self.config})"
        if self.skipped:
            return f"skip {what}: {self.message}"
        if not self.ok:
            return f"{self.file}:{self.line}: build failed: {what}: {self.message}"
        r = self.resources
        return (
            f"built {what}: {self.cubin_bytes:,}-byte cubin in {self.seconds:.1f} s; "
            f"{r.get('smem_bytes', 0):,} B shared memory, {r.get('registers_per_block', 0):,} "
            f"registers per block ({r.get('registers', 0)} x {r.get('threads', 0)} threads)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "operator": self.operator,
            "target": self.target,
            "workload": self.workload,
            "config": self.config,
            "ok": self.ok,
            "skipped": self.skipped,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "seconds": round(self.seconds, 3),
            "cubin_bytes": self.cubin_bytes,
            "resources": self.resources,
        }


def template_line(error: BaseException, template: Path) -> int | None:
    """The deepest line of `template` in the traceback behind `error` (its cause)."""
    want = str(template.resolve())
    found = None
    e: BaseException | None = error
    while e is not None:
        for frame in traceback.extract_tb(e.__traceback__):
            try:
                if str(Path(frame.filename).resolve()) == want:
                    found = frame.lineno
            except OSError:
                continue
        e = e.__cause__ or e.__context__
    return found


def _first_line(text: str) -> str:
    lines = [x.strip() for x in str(text).strip().splitlines() if x.strip()]
    return lines[-1] if lines else str(text)


def gpu_entries(config: Config, entries: Sequence[Entry]) -> list[Entry]:
    return [e for e in entries if config.target(e.target_name).target.get("kind") == "cuda"]


def build_entries(config: Config, entries: Sequence[Entry], say: Callable[[str], None] = lambda _: None) -> list[Build]:
    """Build the default and the committed best of every workload of every GPU entry
    (HostError, exit 5, when NVRTC is not installed)."""
    todo = gpu_entries(config, entries)
    if not todo:
        return []
    nvrtc.toolkit()  # HostError naming `pip install 'tvmtune-ci[cuda]'`
    out: list[Build] = []
    modules: dict[str, Any] = {}
    for e in todo:
        target = config.target(e.target_name).target
        path = config.root / e.template_file
        rel = e.template_file
        try:
            module = modules.get(rel) or import_template(path, config.root)
        except TemplateError as err:
            out.append(
                Build(
                    e.operator,
                    e.target_name,
                    "*",
                    "default",
                    False,
                    err.message,
                    rel,
                    err.line or template_line(err, path) or 1,
                )
            )
            continue
        modules[rel] = module
        results = dict(e.manifest.results) if e.manifest is not None else {}
        for name in module.WORKLOADS:
            configs: list[tuple[str, dict[str, Any] | None]] = [("default", None)]
            best = results.get(name)
            if best is not None and best.best.knobs:
                configs.append(("best", dict(best.best.knobs)))
            wl = resolve(module, name, target)  # one compute() for its builds
            for label, knobs in configs:
                say(f"building {e.operator}/{e.target_name} {name} ({label}) for {target['arch']}")
                out.append(_build_one(module, path, rel, e, wl, label, knobs, target))
    return out


def _build_one(
    module: Any,
    path: Path,
    rel: str,
    e: Entry,
    wl: Workload,
    label: str,
    knobs: dict[str, Any] | None,
    target: dict[str, Any],
) -> Build:
    def fail(message: str, line: int | None) -> Build:
        return Build(e.operator, e.target_name, wl.name, label, False, message, rel, line or e.template_line or 1)

    if knobs is not None:
        try:
            split_knobs(module, wl, knobs, target)
        except TemplateError as err:  # knobs of an earlier version: the re-tune maps them
            return Build(
                e.operator,
                e.target_name,
                wl.name,
                label,
                False,
                f"not built: {err.message}",
                rel,
                e.template_line or 1,
                skipped=True,
            )
    t0 = time.perf_counter()
    try:
        cubin = compile_cuda_config(module, wl, target, knobs)
    except ResourceError as err:
        return fail(f"over the GPU's limits (ptxas): {err}", None)
    except TvmtuneError as err:
        return fail(str(getattr(err, "message", err)), getattr(err, "line", None) or template_line(err, path))
    except Exception as err:  # noqa: BLE001 - TVM's lowering: its message, at the template
        return fail(f"{type(err).__name__}: {_first_line(str(err))}", template_line(err, path))
    return Build(
        e.operator,
        e.target_name,
        wl.name,
        label,
        True,
        "",
        rel,
        e.template_line or 1,
        time.perf_counter() - t0,
        len(cubin.data),
        cubin.summary(),
    )
