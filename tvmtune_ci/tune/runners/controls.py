"""What the tuner sets and reads on every runner, local or RPC, between batches."""

from __future__ import annotations

from ...core.config import MeasureOptions
from ..sampling import RunTiming, Sampled, SamplePolicy, full_policy


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
