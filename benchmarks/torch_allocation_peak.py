"""What a real CPU step's allocator holds at its peak, allocation by allocation.

`python benchmarks/torch_allocation_peak.py [--train] [--live MODEL]` prints, per model of
benchmarks/torch_accuracy.py, the peak measured as graphmem/verify/runners/torch_runner.py does
(each op's net memory delta, replayed in time order) next to the allocator's true peak from
the profiler's raw allocation events, which also counts buffers an op allocates and frees
inside itself (oneDNN's blocked-layout copies of a convolution's input and output). With
`--live MODEL` it lists the allocations live at that model's true peak and the ops that made
them: how the gaps in benchmarks/results/torch_accuracy.md were explained.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch._C._profiler import _EventType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.torch_accuracy import CASES, extra_cases
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.verify.runners import torch_runner


@dataclass(frozen=True)
class Allocation:
    index: int  # position in the step's allocation events
    size_bytes: int  # negative for a free
    address: int
    ops: tuple[str, ...]  # the enclosing op names, outermost first


def step_of(model: torch.nn.Module, spec: str, train: bool) -> Callable[[], None]:
    inputs = torch_runner.random_inputs([parse_tensor_spec(spec)], "cpu")
    if train:
        return torch_runner._training_step(model, inputs, "sgd", None, "cpu",
                                           torch_runner.cross_entropy_loss)
    return torch_runner._inference_step(model, inputs)


def allocations(step: Callable[[], None]) -> list[Allocation]:
    """Every allocation and free of one step, in time order, from the raw event tree."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch_runner._quiet_stderr(), torch.profiler.profile(
            activities=activities, profile_memory=True) as profile:
        step()
    found: list[tuple[int, int, int, tuple[str, ...]]] = []
    pending = [(root, ()) for root in profile.profiler.kineto_results.experimental_event_tree()]
    while pending:
        node, ops = pending.pop()
        if node.typed[0] == _EventType.Allocation:
            fields = node.typed[1]
            found.append((node.start_time_ns, fields.alloc_size, fields.ptr, ops))
        pending.extend((child, (*ops, node.name)) for child in node.children)
    found.sort(key=lambda item: item[0])
    return [Allocation(i, size, ptr, ops) for i, (_, size, ptr, ops) in enumerate(found)]


def live_at_peak(events: list[Allocation]) -> tuple[int, list[Allocation]]:
    """The running total's maximum and the allocations live at it."""
    live: dict[int, Allocation] = {}
    total_bytes = peak_bytes = 0
    at_peak: list[Allocation] = []
    for event in events:
        total_bytes += event.size_bytes
        if event.size_bytes > 0:
            live[event.address] = event
        else:
            live.pop(event.address, None)
        if total_bytes > peak_bytes:
            peak_bytes, at_peak = total_bytes, list(live.values())
    return peak_bytes, at_peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", action="store_true", help="an SGD step instead of inference")
    parser.add_argument("--live", help="list the allocations live at this model's true peak")
    args = parser.parse_args()
    print("| model | step | net-delta peak | allocator peak | in-op transients |")
    print("|---|---|---:|---:|---:|")
    for name, model_class, spec in CASES + extra_cases():
        if args.live and args.live != name:
            continue
        torch.manual_seed(0)
        step = step_of(model_class(), spec, args.train)
        step()  # warm-up, as measure_step does
        net_bytes = torch_runner._measure_cpu(step).peak_bytes
        peak_bytes, live = live_at_peak(allocations(step))
        label = "train sgd" if args.train else "inference"
        print(f"| {name} | {label} | {net_bytes:,} | {peak_bytes:,} |"
              f" {peak_bytes - net_bytes:+,} |", flush=True)
        if args.live:
            for event in sorted(live, key=lambda e: e.index):
                print(f"  {event.size_bytes:>12,} B  event {event.index:<6}"
                      f" {' > '.join(event.ops[-3:])}")


if __name__ == "__main__":
    main()
