"""What the tuner sets and reads on every runner, local or RPC, between batches."""

from __future__ import annotations

from typing import Any, Protocol

from ...core.configschema import MeasureOptions, RpcRunner
from ..sampling import RunTiming, Sampled, SamplePolicy, full_policy


class Runner(Protocol):
    """What the tuner uses of a runner (`runners.make_runner`): TVM's `PyRunner`
    subclasses are made when TVM loads, so this is their type before then."""

    rpc: RpcRunner | None
    timings: list[RunTiming]

    def run(self, runner_inputs: list[Any]) -> list[Any]: ...
    def set_options(self, measure: MeasureOptions) -> None: ...
    def set_policy(self, policy: SamplePolicy) -> None: ...
    def info_of(self, artifact_path: str) -> Sampled | None: ...
    def device_of(self, artifact_path: str) -> str | None: ...
    def close(self) -> None: ...


class SamplingControls:
    """Mixed into each runner class (after TVM's `PyRunner`, whose metadata
    `derived_object` reads from the first base): the measurement options and the
    sampling policy they imply, a narrower policy for racing probes, and what the
    runner learned about each artifact it measured."""

    options: MeasureOptions
    policy: SamplePolicy

    def init_controls(self, measure: MeasureOptions) -> None:
        self.set_options(measure)
        self.timings: list[RunTiming] = []
        self._info: dict[str, Sampled] = {}

    def set_options(self, measure: MeasureOptions) -> None:
        self.options = measure
        self.policy = full_policy(measure)

    def set_policy(self, policy: SamplePolicy) -> None:
        self.policy = policy

    def info_of(self, artifact_path: str) -> Sampled | None:
        """How `artifact_path` was sampled (estimate, interval, samples); None if not."""
        return self._info.get(str(artifact_path))
