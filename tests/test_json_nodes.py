"""Every node row of the JSON derived again from the IR it describes, not from the cost pass.

tests/test_json_pinned.py reads each JSON field back from the typed result the writer renders;
a field swapped inside the cost pass (a node's bytes read computed from its outputs) would
agree with its typed result there. Here each row's numbers are worked out from the node's own
tensors, for every node of real samples (inference and a whole training step):

    bytes_read    = sum over its distinct inputs of numel * element bits / 8
    output_bytes  = sum over its outputs that are not views of another tensor, the same way
    flops.bytes_read, flops.bytes_written = the sums of those over every node
    params        = sum of numel over its inputs that are parameters
    output_shapes = its outputs' shapes with the dims bound

(samples/tiny_gpt.onnx's token embedding at batch 2, seq 64, worked below: a Gather reads the
whole table, as the cost convention counts every input read.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

import graphmem
from graphmem.core.ir import Node, Role, Value
from graphmem.pipeline.analysis import Analysis
from tests.helpers.samples import SAMPLES_DIR

CASES = {
    "tiny_gpt": ("tiny_gpt.onnx", {"batch": 2, "dims": {"seq": 64}}),
    "resnet50": ("resnet50.onnx", {"batch": 2}),
    "tiny_cnn train": ("tiny_cnn.onnx", {"batch": 2, "train": True, "optimizer": "adam"}),
}


def _numel(value: Value, dims: Mapping[str, int]) -> int:
    assert value.shape is not None, f"{value.name}: no shape"
    return math.prod(dim.evaluate(dims) for dim in value.shape)


def _bytes(values: list[Value], dims: Mapping[str, int]) -> int:
    distinct = {id(value): value for value in values}.values()  # a tensor read twice: once
    return sum(-(-_numel(v, dims) * v.dtype.bits // 8) for v in distinct)


def _expected_row(node: Node, dims: Mapping[str, int]) -> dict[str, Any]:
    inputs = [v for v in node.inputs if v is not None]
    written = [v for v in node.outputs if v.alias_of is None]
    distinct = {id(value): value for value in inputs}.values()
    return {
        "bytes_read": _bytes(inputs, dims),
        "output_bytes": _bytes(written, dims),
        "params": sum(_numel(v, dims) for v in distinct if v.role is Role.PARAMETER),
        "output_shapes": [f"[{', '.join(str(d.evaluate(dims)) for d in v.shape or ())}]"
                          for v in node.outputs],
    }


@pytest.fixture(scope="module", params=list(CASES))
def analysed(request: pytest.FixtureRequest) -> tuple[Analysis, dict[str, Any]]:
    path, options = CASES[request.param]
    result = graphmem.analyze_onnx(SAMPLES_DIR / path, **options)
    return result, result.to_dict()


@pytest.mark.ort
def test_every_node_row_is_its_tensors(analysed: tuple[Analysis, dict[str, Any]]) -> None:
    analysis, data = analysed
    dims = analysis.dims.bound
    nodes = {node.name: node for node in analysis.graph.nodes}
    rows = data["nodes"]
    assert [row["name"] for row in rows] == [node.name for node in analysis.graph.nodes]
    wrong, read, written = [], 0, 0
    for row in rows:
        expected = _expected_row(nodes[row["name"]], dims)
        read, written = read + expected["bytes_read"], written + expected["output_bytes"]
        found = {key: row[key] for key in expected}
        if found != expected:
            wrong.append(f"{row['name']} ({row['op']}): JSON {found}, its tensors {expected}")
    assert not wrong, f"{len(wrong)} of {len(rows)} rows:\n" + "\n".join(wrong[:5])
    # the totals are the tensors' sums too
    assert (data["flops"]["bytes_read"], data["flops"]["bytes_written"]) == (read, written)
    # reads and writes differ on most rows, so a swap of the two cannot pass
    assert sum(row["bytes_read"] != row["output_bytes"] for row in rows) > len(rows) // 2


@pytest.mark.ort
def test_a_worked_row() -> None:
    result = graphmem.analyze_onnx(SAMPLES_DIR / "tiny_gpt.onnx", batch=2, dims={"seq": 64})
    row = next(r for r in result.to_dict()["nodes"] if r["name"] == "/wte/Gather")
    # reads wte.weight [512, 64] fp32 = 131,072 B and input_ids [2, 64] int64 = 1,024 B;
    # writes [2, 64, 64] fp32 = 32,768 B; the table's 512 * 64 = 32,768 are parameters
    assert (row["bytes_read"], row["output_bytes"], row["params"]) == (132096, 32768, 32768)
    assert row["output_shapes"] == ["[2, 64, 64]"]
