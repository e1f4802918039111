"""The arena's interval index stopped at a level (passes/arena.py `_OccupancyIndex`, `top`,
chosen by `top_level`) plans every buffer where the whole tree did and where the plan's
definition puts it (tests/helpers/arena_reference.py): random lifetimes short and long, at
every level from the leaves (one union per step) to the root, at three alignments; the level
`top_level` picks for a decoder's few-step lifetimes and for outputs alive to the end; and the
three 22,000-node decoders' own arena inputs (benchmarks/.cache, where present) planned at
every level equal to the whole tree's plan."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from graphmem.passes import arena
from graphmem.passes.arena import plan_arena, top_level
from graphmem.passes.memory_model import build_memory_model, lifetimes
from tests.builders import sizes_of
from tests.helpers.arena_reference import reference_offsets
from tests.helpers.graphs import random_dag

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
CACHE = BENCHMARKS / ".cache"


def _plan_at(spans: list[tuple[int, int]], sizes: list[int], steps: int, top: int | None,
             alignment: int) -> list[int]:
    """The planner's loop (plan_arena's) over an index stopped at `top`."""
    index = arena._OccupancyIndex(steps, top)
    offsets = [0] * len(sizes)
    ranked = sorted((b for b in range(len(sizes)) if sizes[b] > 0),
                    key=lambda b: (-sizes[b], spans[b][0], b))
    for buffer in ranked:
        first, last = spans[buffer]
        bounds, several = index.meeting(first, last)
        offset = offsets[buffer] = arena._gap_fit(bounds, several, sizes[buffer], alignment)
        index.add(first, last, offset, offset + sizes[buffer])
    return offsets


def _random_case(rng: random.Random) -> tuple[list[tuple[int, int]], list[int], int]:
    steps = rng.choice([1, 2, 7, 33, 200])
    count = rng.randint(1, 120)
    spans = []
    for _ in range(count):
        first = rng.randrange(steps)
        kind = rng.random()
        if kind < 0.1:  # alive to the end (a graph output)
            last = steps - 1
        elif kind < 0.3:  # long
            last = min(steps - 1, first + rng.randrange(steps))
        else:  # a decoder's few steps
            last = min(steps - 1, first + rng.randrange(4))
        spans.append((first, last))
    # few distinct sizes (a decoder's layers repeat them), some empty buffers
    palette = [rng.choice([0, 1, 8, 24, 64, 100, 4096]) for _ in range(rng.randint(1, 4))]
    return spans, [rng.choice(palette) for _ in spans], steps


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("alignment", [1, 8, 64])
def test_every_level_plans_as_the_definition(seed: int, alignment: int) -> None:
    rng = random.Random(seed)
    spans, sizes, steps = _random_case(rng)
    expected = reference_offsets(sizes, spans, alignment)
    height = max(steps - 1, 0).bit_length()
    for top in (None, *range(height + 1)):
        assert _plan_at(spans, sizes, steps, top, alignment) == expected, top


def test_top_level_stops_low_for_short_lifetimes_and_keeps_the_tree_for_long_ones() -> None:
    steps = 4096  # a tree of 12 levels
    short = [(step, min(step + 1, steps - 1)) for step in range(steps)]
    # per lifetime, 2 * level steps of the walks up and 4 per node of the level its 2 steps
    # span (2 >> level): 0 + 8 at level 0, 2 + 4 at 1, 4 + 0 at 2, 6 + 0 at 3: level 2
    assert top_level(short, steps) == 2
    outputs = [(step, steps - 1) for step in range(steps)]  # alive to the end: the whole tree
    assert top_level(outputs, steps) >= 10
    assert top_level([], steps) == 12
    assert top_level([(0, 0)], 1) == 0


@pytest.mark.parametrize("seed", range(8))
def test_plan_arena_on_random_graphs_at_every_level(seed: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    graph = random_dag(seed, node_count=150)
    model = build_memory_model(graph, sizes_of(graph), {})
    whole = plan_arena(model)
    steps = model.node_count
    for top in range(max(steps - 1, 0).bit_length() + 1):
        monkeypatch.setattr(arena, "top_level", lambda spans, steps, level=top: level)
        assert plan_arena(model) == whole


def _assert_alike_at_every_level(path: Path, dims: dict[str, int]) -> None:
    import graphmem

    analysis = graphmem.analyze(str(path), batch=1, dims=dims, plan=False)
    assert analysis.sizes is not None
    model = build_memory_model(analysis.graph, analysis.sizes, analysis.dims.bound)
    events, _ = model.model_order_sweep
    spans = lifetimes(model, events.order, events)
    sizes = list(model.buffer_bytes)
    whole = [p.offset for p in plan_arena(model).placements]
    steps = model.node_count
    height = max(steps - 1, 0).bit_length()
    assert top_level(spans, steps) < height  # a decoder's lifetimes stop the tree low
    # (the levels below 3 read thousands of top-level unions for the exports' long-lived
    # buffers: the random cases above cover them)
    for top in (3, top_level(spans, steps), height):
        assert _plan_at(spans, sizes, steps, top, 1) == whole, top


def test_an_onnx_helper_decoder_plans_alike_at_every_level(tmp_path: Path) -> None:
    """benchmarks/helper_llama.py's decoder (the speed target built with onnx.helper) at test
    widths: its layers repeat a dozen sizes over lifetimes of a few steps."""
    sys.path.insert(0, str(BENCHMARKS))
    import helper_llama  # benchmarks/ is not a package: found through sys.path

    widths = replace(helper_llama.WIDTHS, layers=12, hidden=64, heads=4, kv_heads=2,
                     intermediate=128, vocab=100, max_positions=64)
    _assert_alike_at_every_level(helper_llama.write(tmp_path / "decoder.onnx", widths),
                                 {"seq": 48})


def _decoder_inputs() -> Iterator[object]:
    for name in ("llama_dynamo_unoptimized_150", "llama_torchscript_134"):
        found = sorted(CACHE.glob(f"{name}_*.onnx"))
        yield pytest.param(found[0] if found else None, id=name)


@pytest.mark.slow
@pytest.mark.parametrize("path", _decoder_inputs())
def test_the_cached_decoders_plan_alike_at_every_level(path: Path | None) -> None:
    if path is None:
        pytest.skip("no cached export in benchmarks/.cache (benchmarks/speed_targets.py)")
    _assert_alike_at_every_level(path, {"seq": 64})
