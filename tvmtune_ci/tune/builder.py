"""Building: a template's workload as a TVM module, a fixed configuration, and the
in-process MetaSchedule builder the tuner uses.

The stock `LocalBuilder` starts a fresh process pool for every batch and each worker
imports every tensor intrinsic (~30 s); one `tvm.compile` of a kernel takes
~0.03-0.08 s. `InProcessBuilder` compiles in this process with MetaSchedule's own
`default_build` and links a shared library the runner's worker `dlopen`s (a `.so`
costs ~0.035 s to link and nothing to load; the stock `.tar` export costs ~0.025 s
plus ~0.02 s to link again when loaded). It cannot time a build out (the build runs
in the tuner's thread), so a template whose kernels take minutes to compile makes the
tuner wait; a build that raises is a failed trial like any other.

Nothing here imports TVM at module level; `tvmsetup` does, when a function runs.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, Protocol

from ..core.cpus import usable_cores
from ..core.errors import TemplateError, TvmtuneError
from ..core.extents import eval_extent
from ..core.targetinfo import scope
from ..core.template import Categorical, Knob, Knobs, Split, Structural, check_configuration, template_name
from . import tvmsetup
from .cubin import ResourceError, cuda_cubin
from .epilogue import after_schedule
from .hostcheck import check_toolchain, cross_cc
from .workload import Workload, resolve

# Threads a batch of CPU kernels builds on (`InProcessBuilder.build`): this process's
# CPUs, at most 8. One build was 14-28% of a search trial's seconds, on one core while
# the other waited (bench_tuner, Zen 4); bench_build measures the two ways side by side.
# A builder made with `threads` uses that many instead (bench_build compares the two).
BUILD_THREADS = min(8, usable_cores())

# --------------------------------------------------------------------------- fixed configs


def _knob_decls(template: ModuleType) -> dict[str, Knob]:
    return {k.name: k for k in getattr(template, "KNOBS", [])}


def split_knobs(
    template: ModuleType, wl: Workload, knobs: Mapping[str, Any] | None, target: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(structure, values) for `Knobs(mode="fixed")`, validated against KNOBS (whose
    extents may name the facts of `target`).

    Missing knobs get the template default (first candidate, all-ones inner factors).
    """
    decls = _knob_decls(template)
    workload = scope(dict(resolve(template, wl).params), target)
    structure: dict[str, Any] = {}
    values: dict[str, Any] = {}
    knobs = dict(knobs or {})
    unknown = sorted(set(knobs) - set(decls))
    if unknown:
        raise TemplateError(
            f"{template_name(template)}: unknown knob(s) {', '.join(unknown)}; KNOBS declares "
            f"{', '.join(decls) or '(none)'} (was the log written for another version of the "
            "template?)"
        )
    for name, decl in decls.items():
        if isinstance(decl, Structural):
            value = knobs.get(name, decl.candidates[0])
            if value not in decl.candidates:
                raise TemplateError(f"knob {name!r} = {value!r} is not one of {list(decl.candidates)}")
            structure[name] = value
        elif name not in knobs:
            continue
        elif isinstance(decl, Split):
            factors = [int(x) for x in knobs[name]]
            extent = eval_extent(decl.extent, workload)
            prod = 1
            for f in factors:
                prod *= f
            if len(factors) != decl.parts or prod != extent or min(factors) < 1:
                raise TemplateError(
                    f"knob {name!r} = {factors}: a split of {extent} needs {decl.parts} positive "
                    f"factors whose product is {extent}"
                )
            values[name] = factors
        elif isinstance(decl, Categorical):
            if knobs[name] not in decl.candidates:
                raise TemplateError(f"knob {name!r} = {knobs[name]!r} is not one of {list(decl.candidates)}")
            values[name] = knobs[name]
    # A point that breaks the template's CONSTRAINTS (shared memory, threads...) is
    # never built: not in the search, not replayed, not as a finalist.
    check_configuration(list(decls.values()), getattr(template, "CONSTRAINTS", ()), workload, structure, values)
    return structure, values


def make_postprocs(target: Mapping[str, Any] | None = None) -> list[Any]:
    """The postprocessors every tuned (and every fixed) schedule goes through.

    Templates schedule explicitly, so these only finish what MetaSchedule idioms
    leave open: `meta_schedule.parallel/vectorize/unroll_*` annotations become real
    loops/pragmas, a reduction block not yet decomposed is decomposed, and a schedule
    with a dynamic loop extent is rejected. On a CUDA target, `VerifyGPUCode` also
    rejects a schedule over the target's shared memory or threads per block, or with
    more than 8 virtual threads or 16-byte vectors, before it is built.
    """
    ms = tvmsetup.ms()
    out = [
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        ms.postproc.RewriteReductionBlock(),
    ]
    if target is not None and target.get("kind") == "cuda":
        out.append(ms.postproc.VerifyGPUCode())
    return out


def apply_postprocs(sch: Any, target: Mapping[str, Any]) -> None:
    """Run `make_postprocs()` on `sch` as MetaSchedule does after replaying a trace."""
    ms = tvmsetup.ms()
    ctx = ms.TuneContext(
        mod=sch.mod,
        target=tvmsetup.make_target(dict(target)),
        space_generator=ms.space_generator.ScheduleFn(
            lambda s: None, sch_rules=[], postprocs=make_postprocs(target), mutator_probs={}
        ),
        task_name="postproc",
        num_threads=1,
    )
    sch.enter_postproc()
    for p in ctx.space_generator.postprocs:
        if not p.apply(sch):
            why = (
                "the GPU code breaks a limit of the target or a rule of CUDA: shared memory "
                "or threads per block, more than 8 virtual threads, vectors over 16 bytes, "
                "or thread extents that differ between a block's loops"
                if type(p).__name__ == "VerifyGPUCode"
                else "e.g. a dynamic loop extent"
            )
            raise TemplateError(f"postprocessor {type(p).__name__} rejected the schedule ({why})")


def schedule_config(
    template: ModuleType, wl: Workload, knobs: Mapping[str, Any] | None = None, target: Mapping[str, Any] | None = None
) -> Any:
    """A `tvm.s_tir.Schedule` of the workload with the template applied at `knobs`.

    With `target`, the tuner's postprocessors run too, so the module is the one the
    search measured for these knob values.
    """
    tvm = tvmsetup.load()
    wl = resolve(template, wl, target)  # a name too, from callers outside the package
    structure, values = split_knobs(template, wl, knobs, target)
    sch = tvm.s_tir.Schedule(wl.mod)
    cfg = Knobs(getattr(template, "KNOBS", []), dict(wl.params), structure, mode="fixed", values=values, target=target)
    try:
        template.schedule(sch, cfg)
        # a fused workload's epilogue into the tile's store; a prepacked one's pack marked
        after_schedule(
            sch,
            wl.params,
            getattr(template, "IMPLEMENTS", None),
            lambda: cfg.vector_lanes(str(wl.params.get("dtype", "float32"))) if target is not None else 4,
        )
    except TvmtuneError:
        raise
    except Exception as e:  # a TVM ScheduleError or a bug in the template
        first = (str(e).strip().splitlines() or [type(e).__name__])[-1]
        raise TemplateError(
            f"{template_name(template)}: schedule() failed for workload {wl.name!r} at "
            f"{dict(structure, **values)}: {type(e).__name__}: {first}"
        ) from e
    if target is not None:
        apply_postprocs(sch, target)
    return sch


def program_key(sch: Any) -> str:
    """The scheduled module's structural hash: equal for the same program whatever the
    template's source looked like (names, comments, dead statements), and the same in
    every process. `priors` keys the old log's records by it, the re-tune compares."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(sch.mod))


def build_config(
    template: ModuleType, wl: Workload, target: Mapping[str, Any], knobs: Mapping[str, Any] | None = None
) -> Any:
    """Compile the template at `knobs` (None: the default configuration) for `target`.

    Returns what `tvm.compile` returns (a `tvm.runtime.Executable`; call `ex["main"](...)`).
    """
    tvm = tvmsetup.load()
    sch = schedule_config(template, wl, knobs, target)
    return tvm.compile(sch.mod, target=tvmsetup.make_target(dict(target)))


# --------------------------------------------------------------------------- MetaSchedule builder


class _TimedLink:
    """`export_library`'s fcompile: TVM's `create_shared`, timed; with `cc`, that
    compiler links (a cross compiler for a target of another architecture)."""

    object_format = "o"
    output_format = "so"

    def __init__(self, create_shared: Any, cc: str | None = None) -> None:
        self._create_shared = create_shared
        self._cc = cc
        self.seconds = 0.0

    def __call__(self, output: str, objects: list[str], **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            if self._cc is not None:
                kwargs["cc"] = self._cc
            return self._create_shared(output, objects, **kwargs)
        finally:
            self.seconds = time.perf_counter() - t


def export_kernel(module: Any, path: str, target: Mapping[str, Any]) -> float:
    """Write a built module (runtime module or Executable) as a shared object for
    `target` at `path`, linked by the cross compiler when the target's architecture
    is not this machine's (HostError if it is missing). Returns the link seconds."""
    from tvm.support.cc import create_shared

    check_toolchain(target)
    link = _TimedLink(create_shared, cross_cc(target))
    module.export_library(path, fcompile=link)
    return link.seconds


class Builder(Protocol):
    """What the tuner uses of the builder (`make_builder`): TVM's `PyBuilder` subclass
    is made when TVM loads, so this is its type before then."""

    compile_s: list[float]
    export_s: list[float]
    build_wall_s: list[float]

    def build(self, build_inputs: list[Any]) -> list[Any]: ...
    def close(self) -> None: ...


@functools.cache  # one class per process: TVM registers it by name
def _builder_class() -> Any:
    tvmsetup.load()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build

    @derived_object
    class InProcessBuilder(PyBuilder):
        """Builds each input in this process: `default_build`, then a `.so` in `artifact_dir`.

        `compile_s` keeps each build's compile time (lowering + LLVM emitting the object,
        or NVRTC the cubin on a CUDA target), `export_s` its link time (the benchmark's
        floor counts only the first). A CUDA kernel over its GPU's limits (ptxas's
        report) fails as `resources` and is never measured.
        """

        def __init__(self, artifact_dir: str | None = None, threads: int | None = None) -> None:
            super().__init__()
            self.threads = max(1, threads or BUILD_THREADS)
            self.artifact_dir = artifact_dir or tempfile.mkdtemp(prefix="tvmtune-artifacts-")
            self._own_dir = artifact_dir is None
            os.makedirs(self.artifact_dir, exist_ok=True)
            self._count = 0
            self.compile_s: list[float] = []
            self.export_s: list[float] = []
            # Each build() call's wall seconds: with threads, less than its builds' sum.
            self.build_wall_s: list[float] = []
            self._targets: dict[str, dict[str, Any]] = {}
            # CUDA: artifact -> what ptxas reported (shared memory, registers per block).
            self.resources: dict[str, dict[str, int]] = {}

        def build(self, build_inputs: list[Any]) -> list[Any]:
            """Each input's library (or error), in order. CPU kernels build on
            `threads` threads: TVM's lowering, LLVM and the linker release the GIL,
            and nothing is measured while a batch builds (`search._run_batch`), so the
            runner's cores are free. CUDA kernels build one at a time (NVRTC's
            concurrent use is not tried here, for want of a GPU to check the results on)."""
            t0 = time.perf_counter()
            paths = []
            for _ in build_inputs:  # named here, in order: the threads share no counter
                self._count += 1
                paths.append(os.path.join(self.artifact_dir, f"k{os.getpid()}_{self._count}.so"))
            jobs = [(inp, path, self._target_dict(inp.target)) for inp, path in zip(build_inputs, paths, strict=True)]
            threads = min(self.threads, len(jobs))
            if any(t.get("kind") == "cuda" for _, _, t in jobs):
                threads = 1
            # One filter for all threads (catch_warnings is process-wide state): default_build
            # calls the deprecated tvm.build.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                if threads > 1:
                    with ThreadPoolExecutor(threads, thread_name_prefix="tvmtune-build") as pool:
                        done = list(pool.map(lambda job: self._build_one(*job), jobs))
                else:
                    done = [self._build_one(*job) for job in jobs]
            results = []
            for result, times in done:
                if times is not None:
                    self.compile_s.append(times[0])
                    self.export_s.append(times[1])
                results.append(result)
            self.build_wall_s.append(time.perf_counter() - t0)
            return results

        def _build_one(self, inp: Any, path: str, target: dict[str, Any]) -> tuple[Any, tuple[float, float] | None]:
            """One input's BuilderResult, and its (compile, link) seconds when it built."""
            try:
                t0 = time.perf_counter()
                rt_mod = default_build(inp.mod, inp.target, inp.params)
                cubin = None
                if target.get("kind") == "cuda":  # NVRTC here, so limits fail the build
                    cubin = cuda_cubin(rt_mod, target)
                t1 = time.perf_counter()
                if cubin is not None:
                    self.resources[path] = cubin.summary()
                # LLVM emits the object, then the host's (or the cross) compiler links.
                link_s = export_kernel(rt_mod, path, target)
                t2 = time.perf_counter()
                return BuilderResult(path, None), (t1 - t0 + (t2 - t1 - link_s), link_s)
            except ResourceError as e:  # built, but over a limit: never measured
                return BuilderResult(None, f"InProcessBuilder: resources: {e}"), None
            except Exception as e:  # noqa: BLE001 - any build error is a failed trial
                return BuilderResult(None, f"InProcessBuilder: {type(e).__name__}: {e}"), None

        def _target_dict(self, target: Any) -> dict[str, Any]:
            key = str(target)
            found = self._targets.get(key)
            if found is None:
                found = self._targets[key] = dict(target.export())
            return found

        def close(self) -> None:
            if self._own_dir:
                shutil.rmtree(self.artifact_dir, ignore_errors=True)

    return InProcessBuilder


def make_builder(artifact_dir: str | None = None, threads: int | None = None) -> Builder:
    """An `InProcessBuilder` (a MetaSchedule `Builder`) building a batch on `threads`
    threads (None: BUILD_THREADS); call `.close()` when done."""
    return _builder_class()(artifact_dir, threads)


def remove_artifact(path: str | None) -> None:
    """Delete a built library once it was measured (gone already: nothing to do)."""
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
