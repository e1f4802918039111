"""The runtime model's per-probe sizing against the plain algorithm it replaced.

`fill_unknown_sizes` copies the sizes only at the first one it fills (a largest-batch search's
probes bind every size, so it used to copy 30,000 entries to change none); the plain version
below copies first and walks every output. Both must give the same sizes and counts where
any subset of a sample's sizes is missing, and where none is.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt
from graphmem.passes.dims import value_bytes
from graphmem.runtime_models.ort_sizes import SizeFill, fill_unknown_sizes

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _number(size: SymInt | None) -> int | None:
    return int(size) if size is not None and size.is_constant else None


def _plain_fill(graph: Graph, sizes: dict[str, SymInt | None],
                written: dict[str, SymInt | None] | None) -> SizeFill:
    """The fill as first written: a copy, then each output not a number sized by name from
    the graph as written, else at its node's largest input known."""
    filled, counts, ops = dict(sizes), Counter[str](), set()
    outputs = [(node, value.name) for node in graph.nodes for value in node.outputs]
    for node, name in outputs:
        if _number(filled.get(name)) is not None:
            continue
        by_name = _number((written or {}).get(name))
        known = [n for v in node.present_inputs if (n := _number(filled.get(v.name))) is not None]
        if by_name is not None:
            filled[name], counts["written"] = SymInt.const(by_name), counts["written"] + 1
        elif known:
            filled[name] = SymInt.const(max(known))
            counts["estimated"] += 1
            counts["bytes"] += max(known)
            ops.add(node.op_type)
        else:
            counts["unknown"] += 1
    return SizeFill(filled, counts["written"], counts["estimated"], counts["bytes"],
                    counts["unknown"], tuple(sorted(ops)))


@pytest.mark.parametrize(("sample", "dims"), [("tiny_gpt.onnx", {"seq": 16}),
                                             ("tiny_cnn.onnx", {})])
def test_fill_equals_the_plain_fill_with_any_sizes_missing(sample: str,
                                                           dims: dict[str, int]) -> None:
    analysis = analyze_onnx(SAMPLES / sample, batch=2, dims=dims, plan=False)
    graph = analysis.graph
    sizes = dict(value_bytes(graph, analysis.dims))
    names = [v.name for node in graph.nodes for v in node.outputs]
    rng = random.Random(sample)
    for trial in range(40):
        lost = dict(sizes)
        for name in rng.sample(names, rng.randint(0, len(names) // 2) if trial else 0):
            lost[name] = None if rng.random() < 0.7 else SymInt.symbol("n")
        written = {name: sizes[name] for name in rng.sample(names, len(names) // 3)}
        for given in (None, written):
            fill = fill_unknown_sizes(graph, lost, given)
            plain = _plain_fill(graph, lost, given)
            assert dict(fill.sizes) == plain.sizes
            assert fill.note() == plain.note()
            assert (fill.from_written, fill.estimated, fill.estimated_bytes, fill.unknown,
                    fill.estimated_ops) == (plain.from_written, plain.estimated,
                                            plain.estimated_bytes, plain.unknown,
                                            plain.estimated_ops)
        if trial == 0:  # nothing missing: the caller's own mapping, unchanged
            assert fill_unknown_sizes(graph, lost).sizes is lost and lost == sizes
