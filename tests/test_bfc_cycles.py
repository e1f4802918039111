"""The arena replay's jumps over repeated layers (bfc_cycles.py) against the replay without them.

`replay_numbered` jumps over the periods of a layered event list once the arena is the same
at the start of two of them (bfc_cycles.py's module docstring gives the argument). Every
result must be the one replaying every step gives: peak, its step, the regions held, in use
after each step, the failure and the demand carried on from it. The random lists here are
layered as a decoder's plan is (a prologue, the same layer again and again, an epilogue;
buffers living inside a layer, across the next one, or from the prologue to the epilogue),
with what breaks a period mixed in: one layer's buffer a different size, buffers never freed,
zero-byte buffers, frees of numbers never allocated, a number allocated twice; unbounded,
and bounded by devices that fail part way, both extend strategies.
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from graphmem.frontends.onnx.runtime_inputs import import_onnx_model
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.runtime_models.bfc_arena import ArenaExtend
from graphmem.runtime_models.bfc_cycles import MIN_EVENTS, Cycles, EventShape, find_cycles
from graphmem.runtime_models.bfc_replay import replay_numbered
from graphmem.runtime_models.ort_cpu import plan_events, plan_ort_buffers, replay_plan

_SIZES = (0, 1, 255, 256, 257, 1000, 4096, 65_536, (1 << 20) - 1, 1 << 20, 3 << 20,
          (128 << 20) + 256, 300 << 20)


class _Layered:
    """Numbered events: `steps` (per step, n allocates number n, ~n frees it) and `sizes`."""

    def __init__(self) -> None:
        self.steps: list[list[int]] = []
        self.sizes: list[int] = []

    def number(self, size: int) -> int:
        self.sizes.append(size)
        return len(self.sizes) - 1

    def at(self, step: int) -> list[int]:
        while len(self.steps) <= step:
            self.steps.append([])
        return self.steps[step]


def _layered(seed: int) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    out = _Layered()
    # buffers from the prologue to the epilogue (a rotary table, a mask)
    long_lived = [out.number(rng.choice(_SIZES)) for _ in range(rng.randint(0, 3))]
    for number in long_lived:
        out.at(rng.randint(0, 3)).append(number)
    prologue = 5
    length = rng.randint(2, 12)  # steps per layer
    # one layer: (size, step allocated, steps held: may reach into the next layers)
    template = [(rng.choice(_SIZES), rng.randrange(length),
                 rng.choice((0, 1, 2, length // 2, length, length + 1, 2 * length)))
                for _ in range(rng.randint(3, 25))]
    layers = max(3, -(-MIN_EVENTS // (2 * len(template))) + rng.randint(0, 20))
    odd_layer = rng.randrange(layers) if rng.random() < 0.3 else None
    free_order = list(range(len(template)))  # frees within a step: any order, every layer's
    rng.shuffle(free_order)
    never_freed = rng.random() < 0.15
    for layer in range(layers):
        start = prologue + layer * length
        frees: list[tuple[int, int]] = []
        for index, (size, allocated, held) in enumerate(template):
            if layer == odd_layer and index == 0:
                size += 4096
            number = out.number(size)
            out.at(start + allocated).append(number)
            if not (never_freed and index == 1):
                frees.append((start + allocated + held, ~number))
        frees.sort(key=lambda free: (free[0], free_order[~free[1] % len(template)]))
        for step, free in frees:
            out.at(step).append(free)
    end = len(out.steps) + 3
    for number in long_lived:
        out.at(end).append(~number)
    if rng.random() < 0.2:
        out.at(end).append(~out.number(1000))  # a free of a number never allocated
    if rng.random() < 0.1:  # a number allocated twice: replayed event by event
        out.at(end + 1).append(long_lived[0] if long_lived else 0)
    return out.steps, out.sizes


def _both(steps: list[list[int]], sizes: list[int], device_free: int | None,
          extend: ArenaExtend, demand: bool) -> None:
    keys = [f"n{n}" for n in range(len(sizes))]
    plain = replay_numbered(steps, sizes, keys, device_free, extend, demand, jumps=False)
    jumped = replay_numbered(steps, sizes, keys, device_free, extend, demand)
    assert jumped == plain, (device_free, extend, demand)


@pytest.mark.parametrize("seed", range(120))
def test_jumps_give_the_replay_of_every_step(seed: int) -> None:
    steps, sizes = _layered(seed)
    keys = [f"n{n}" for n in range(len(sizes))]
    unbounded, _ = replay_numbered(steps, sizes, keys, jumps=False)
    rng = random.Random(-seed)
    for extend in ArenaExtend:
        for device_free in (None, unbounded.held_bytes, unbounded.held_bytes - 1,
                            int(unbounded.held_bytes * rng.uniform(0.05, 1.0)), 0):
            for demand in (False, True):
                _both(steps, sizes, device_free, extend, demand)


def test_the_random_lists_jump_and_break_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many random lists above jump (a good part of all their steps), and many find a period
    whose arena never repeats (a buffer never freed, a layer of another size) and replay
    every step: both paths are taken."""
    jumps: list[int] = []
    jump = Cycles.jump

    def counted(self: Cycles, *args: Any) -> int:
        skipped = jump(self, *args)
        jumps.append(skipped)
        return skipped

    monkeypatch.setattr(Cycles, "jump", counted)
    jumped = unjumped = skipped = total = 0
    for seed in range(120):
        steps, sizes = _layered(seed)
        jumps.clear()
        replay_numbered(steps, sizes, [""] * len(sizes))
        skipped += sum(jumps)
        total += len(steps)
        if any(jumps):
            jumped += 1
        elif find_cycles(EventShape(steps), sizes) is not None:
            unjumped += 1
    assert jumped > 40 and unjumped > 20 and skipped > total / 4, (jumped, unjumped, skipped)


def test_the_shape_refuses_lists_a_number_repeats_in() -> None:
    """A number allocated twice, freed twice, or freed before it is allocated: no jumps."""
    steps = [[0, 1], [~0], [2, ~1], [~2]] * 1000
    assert not EventShape(steps).valid
    assert not EventShape([[~0], [0]] + [[n, ~n] for n in range(1, 3000)]).valid
    assert EventShape([[n, ~n] for n in range(3000)]).valid
    assert find_cycles(EventShape([[0, ~0]]), [256]) is None  # too short to look for a period


@pytest.mark.parametrize("layers", [40, 57])
def test_a_decoders_plan_jumps_to_the_same_replay(layers: int, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/helper_llama.py's decoder at test widths: onnxruntime's plan at batch 1
    and 3 replayed unbounded and bounded by devices it fits and does not, with and without
    the jumps; the jumps skip most of its layers."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import helper_llama  # benchmarks/ is not a package: found through sys.path

    widths = replace(helper_llama.WIDTHS, layers=layers, hidden=64, heads=4, kv_heads=2,
                     intermediate=128, vocab=100, max_positions=64)
    imported = import_onnx_model(helper_llama.write(tmp_path / "decoder.onnx", widths))
    graph, shapes = imported.graph, imported.runtime_inputs.plan_shapes()
    jumps: list[int] = []
    jump = Cycles.jump

    def counted(self: Cycles, *args: Any) -> int:
        jumps.append(jump(self, *args))
        return jumps[-1]

    monkeypatch.setattr(Cycles, "jump", counted)
    for batch in (1, 3):
        dims = DimBinding(bound={"batch": batch, "seq": 48}, free=(), batch_dim="batch")
        plan = plan_ort_buffers(graph, value_bytes(graph, dims), shapes)
        events = plan_events(plan, [])
        unbounded, _ = replay_numbered(*events, jumps=False)
        for free in (None, unbounded.held_bytes // 2, unbounded.held_bytes):
            for demand in (False, True):
                plain = replay_numbered(*events, free, demand=demand, jumps=False)
                jumps.clear()
                assert replay_plan(plan, events, free, demand=demand) == plain
                if free is None:
                    assert sum(jumps) > len(plan.order) / 2
