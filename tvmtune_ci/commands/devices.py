"""`tvmtune-ci devices`: an RPC tracker's queue (keys, free / total / pending)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from ..core.config import load_config
from ..core.configschema import Config
from ..core.errors import ConfigError, DeviceError, UsageError
from ..tune.devices import DEFAULT_TIMEOUT_S, TrackerQueue, split_tracker, tracker_summary


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tracker",
        metavar="HOST:PORT",
        default=None,
        help="tracker to query (default: those of tvmtune.yaml's rpc runners; with --tracker no tvmtune.yaml is read)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text", help="text table (default) or JSON")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for a tracker (default: {DEFAULT_TIMEOUT_S:g})",
    )


Want = tuple[str, str, int]  # (target, key, devices)


def configured_trackers(config: Config) -> dict[str, list[Want]]:
    """tracker -> (target, key, devices) of the targets that use it, in tvmtune.yaml order."""
    out: dict[str, list[Want]] = {}
    for t in config.targets:
        if t.rpc is not None:
            out.setdefault(t.rpc.tracker, []).append((t.name, t.rpc.key, t.rpc.devices))
    return out


def render_text(queue: TrackerQueue, wants: Sequence[Want] = ()) -> str:
    """The queue as a table; `wants` (target, key, devices) adds a line per target."""
    lines = [f"tracker {queue.tracker}"]
    if not queue.keys:
        lines.append(
            f"  no servers; start one with `python -m tvm.exec.rpc_server --tracker {queue.tracker} --key NAME`"
        )
    else:
        width = max(len("key"), *(len(k.key) for k in queue.keys))
        lines.append(f"  {'key':<{width}}  {'free':>4}  {'total':>5}  {'pending':>7}  servers")
        for k in queue.keys:
            lines.append(
                f"  {k.key:<{width}}  {k.free:>4}  {k.total:>5}  {k.pending:>7}  {', '.join(k.servers) or '-'}"
            )
    for target, key, devices in wants:
        free = queue.get(key).free
        state = "ok" if free >= devices else f"NOT ENOUGH: start more servers with --key {key}"
        lines.append(f"  target {target}: key {key!r}, devices: {devices}, {free} free: {state}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    wants: dict[str, list[Want]] = {}
    if args.tracker is not None:
        try:
            split_tracker(args.tracker)
        except DeviceError as e:
            raise UsageError(f"--tracker: {e}") from None
        trackers = [args.tracker]
    else:
        config = load_config(Path(args.config) if args.config else None)
        wants = configured_trackers(config)
        trackers = list(wants)
        if not trackers:
            raise ConfigError(
                f"no target in {config.path} uses an RPC runner; pass "
                f"--tracker HOST:PORT, or give a target `runner: {{rpc: "
                f"{{tracker: HOST:PORT, key: NAME, devices: N}}}}`"
            )
    queues: list[TrackerQueue] = []
    errors: list[str] = []
    for tracker in trackers:
        try:
            host, port = split_tracker(tracker)
            queues.append(tracker_summary(host, port, args.timeout))
        except DeviceError as e:
            errors.append(str(e))
    if args.format == "json":
        if len(queues) == 1 and len(trackers) == 1:
            print(json.dumps(queues[0].to_json(), indent=2, sort_keys=True))
        elif queues:
            print(json.dumps({"format": 1, "trackers": [q.to_json() for q in queues]}, indent=2, sort_keys=True))
    elif queues:
        print("\n\n".join(render_text(q, wants.get(q.tracker, [])) for q in queues))
    if errors:
        raise DeviceError("; ".join(errors))
    return 0
