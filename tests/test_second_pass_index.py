"""The second pass's shared index and caches (graphmem/frontends/onnx/graph_index.py,
value_types.py, kept_slices.py, seq_dims.py): each answers as the walk or the computation it
replaced, on random inputs, on the samples and on onnx.helper decoders of random widths."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import infer, kept_slices
from graphmem.frontends.onnx.fold import fold_constants, refold_constants, restore_nodes
from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.read import read_model
from graphmem.frontends.onnx.repeat_dims import expand_tiles
from graphmem.frontends.onnx.seq_dims import SeqDims, for_onnx_pass, kept_dims
from graphmem.frontends.onnx.value_types import (
    MAX_VALUE_ELEMENTS,
    KnownTypes,
    constant_tensor,
    fully_known,
    int_values,
    typed_by_onnx,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.onnx"))


def _decoder(seed: int, tmp_path: Path) -> Path:
    """benchmarks/helper_llama.py's decoder at random widths (its rotary slices, reshapes)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import helper_llama  # benchmarks/ is not a package: found through sys.path

    rng = random.Random(seed)
    kv_heads = rng.choice([1, 2])
    heads = kv_heads * rng.choice([1, 2, 4])
    widths = replace(helper_llama.WIDTHS, layers=rng.randint(1, 3), heads=heads,
                     kv_heads=kv_heads, hidden=heads * rng.choice([8, 16]),
                     intermediate=32, vocab=50)
    return helper_llama.write(tmp_path / f"decoder_{seed}.onnx", widths)


def _models(tmp_path: Path) -> list[onnx.ModelProto]:
    paths = [*SAMPLES, *(_decoder(seed, tmp_path) for seed in range(3))]
    return [read_model(path) for path in paths]


# ----- fully_known by type ----------------------------------------------------------------------
def _random_info(rng: random.Random) -> onnx.ValueInfoProto:
    kind = rng.random()
    if kind < 0.1:
        return helper.make_tensor_sequence_value_info("v", TensorProto.FLOAT, None)
    if kind < 0.2:
        return helper.make_tensor_value_info("v", TensorProto.FLOAT, None)  # no shape
    dims = [rng.choice([1, 7, "seq", "unk__3", None, "Min(4, seq)"])
            for _ in range(rng.randint(0, 4))]
    return helper.make_tensor_value_info("v", rng.choice([1, 7, 10]), dims)


def test_known_types_judge_each_type_as_fully_known() -> None:
    rng = random.Random(0)
    known = KnownTypes()
    for _ in range(2000):  # a few dozen distinct types: most verdicts remembered
        info = _random_info(rng)
        assert known(info) == fully_known(info)
    assert known(None) is False


# ----- int_values -------------------------------------------------------------------------------
def _reference_ints(tensor: onnx.TensorProto) -> list[int] | None:
    try:
        return [int(v) for v in numpy_helper.to_array(tensor).flat]
    except ValueError:
        return None


def _random_int_tensor(rng: random.Random, name: str) -> onnx.TensorProto:
    dtype = rng.choice([TensorProto.INT64, TensorProto.INT32, TensorProto.INT8])
    dims = rng.choice([[], [1], [2], [3], [2, 2]])
    count = int(np.prod(dims)) + rng.choice([0, 0, 0, 1, -1])  # some of the wrong size
    values = [rng.randint(-3, 3) for _ in range(max(count, 0))]
    if rng.random() < 0.5:  # raw bytes
        array = np.array(values, helper.tensor_dtype_to_np_dtype(dtype))
        return onnx.TensorProto(name=name, data_type=dtype, dims=dims, raw_data=array.tobytes())
    tensor = onnx.TensorProto(name=name, data_type=dtype, dims=dims)
    if dtype == TensorProto.INT64:
        tensor.int64_data.extend(values)
    else:
        tensor.int32_data.extend(values)
    return tensor


def test_int_values_decode_as_numpy_helper_whatever_the_name() -> None:
    rng = random.Random(1)
    for index in range(3000):
        tensor = _random_int_tensor(rng, f"t{index}")
        expected = _reference_ints(tensor)
        assert int_values(tensor) == expected
        found = int_values(tensor)  # remembered: each caller its own list
        if found is not None:
            found.append(99)
            assert int_values(tensor) == expected


def test_int_values_of_an_unremembered_kind_decode_each_time() -> None:
    segmented = helper.make_tensor("s", TensorProto.INT64, [1], [5])
    segmented.segment.begin = 0
    assert int_values(segmented) is None  # to_array refuses segments with a ValueError
    floats = helper.make_tensor("f", TensorProto.FLOAT, [2], [1.5, 2.0])
    assert int_values(floats) == [1, 2]


# ----- the index --------------------------------------------------------------------------------
def _walked_consumers(graph: onnx.GraphProto) -> dict[str, list[int]]:
    consumers: dict[str, list[int]] = {}
    for position, node in enumerate(graph.node):
        for name in node.input:
            consumers.setdefault(name, []).append(position)
    return consumers


def test_the_index_readers_and_positions_are_the_walks(tmp_path: Path) -> None:
    for model in _models(tmp_path):
        graph = model.graph
        index = GraphIndex(graph)
        assert index.consumers == _walked_consumers(graph)
        for op_type, nodes in index.by_op.items():
            positions = index.positions[op_type]
            assert [graph.node[p] for p in positions] == nodes
            assert all(graph.node[p].op_type == op_type for p in positions)
        assert sum(map(len, index.positions.values())) == len(graph.node)


def _rotary_reads(rng: random.Random) -> tuple[onnx.GraphProto, list[onnx.ValueInfoProto]]:
    """Values typed `Min(4, seq)` or not, each read by random ops (some broadcasting, one of
    another domain)."""
    nodes, typed = [], []
    for index in range(12):
        name = f"v{index}"
        dims = [rng.choice(["Min(4, seq)", "seq", 4]), rng.choice([8, "Min(16, seq)"])]
        typed.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
        for reader in range(rng.randint(0, 3)):
            op = rng.choice(["Add", "Mul", "Sub", "Div", "Gather", "Relu"])
            domain = "com.example" if rng.random() < 0.1 else ""
            nodes.append(helper.make_node(op, [name, "x"], [f"{name}_{reader}"], domain=domain))
    return helper.make_graph(nodes, "g", [], []), typed


def test_rotary_broadcasts_found_through_the_index_equal_the_walk() -> None:
    rng = random.Random(2)
    for _ in range(200):
        graph, typed = _rotary_reads(rng)
        walked = for_onnx_pass(graph, typed)
        assert for_onnx_pass(graph, typed, GraphIndex(graph)) == walked


def test_a_slice_added_to_the_sequence_is_named_by_the_sequence() -> None:
    graph, _ = _rotary_reads(random.Random(3))
    add = helper.make_node("Add", ["s", "x"], ["y"])
    graph.node.append(add)
    slice_type = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["Min(4, seq)", 8])
    (given,) = for_onnx_pass(graph, [slice_type], GraphIndex(graph))
    assert [d.dim_param or d.dim_value for d in given.type.tensor_type.shape.dim] == ["seq", 8]


# ----- the slices' constants and kept dims ------------------------------------------------------
def _walked_constant_ints(graph: onnx.GraphProto, wanted: set[str]) -> dict[str, list[int]]:
    """kept_slices.py's walk before the index: initializers, then Constant nodes over them."""
    tensors = [(t.name, t) for t in graph.initializer if t.name in wanted]
    tensors.extend((n.output[0], t) for n in graph.node
                   if n.output and n.output[0] in wanted
                   and (t := constant_tensor(n)) is not None)
    values = {}
    for name, tensor in tensors:
        if tensor.data_type in (TensorProto.INT64, TensorProto.INT32) \
                and len(tensor.dims) == 1 and tensor.dims[0] <= MAX_VALUE_ELEMENTS \
                and tensor.data_location != TensorProto.EXTERNAL:
            try:
                values[name] = [int(v) for v in numpy_helper.to_array(tensor).flat]
            except ValueError:
                continue
    return values


def _first_pass(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    fold_constants(folded)
    first = infer._onnx_inference(infer._without_value_info(folded), [])
    assert first is not None
    return folded, first


def _walked_kept_slices(graph: onnx.GraphProto, first: onnx.GraphProto,
                        seq: SeqDims) -> list[onnx.ValueInfoProto]:
    """kept_slice_dims before the index and the caches: each Slice's kept dims made anew."""
    types = infer._types_of(first)
    slices = [n for n in graph.node if n.op_type == "Slice" and n.domain in ("", "ai.onnx")
              and len(n.input) >= 4 and not fully_known(types.get(n.output[0]))]
    initializers = {t.name: t for t in graph.initializer}
    for name in {n.input[0] for n in slices}:
        if name in initializers:
            tensor = initializers[name]
            types[name] = helper.make_tensor_value_info(name, tensor.data_type, tensor.dims)
    constants = _walked_constant_ints(graph, {n.input[3] for n in slices})
    result = []
    for node in slices:
        source, axes = types.get(node.input[0]), constants.get(node.input[3])
        if source is None or axes is None:
            continue
        kept = kept_dims(source, axes)
        if kept is not None:
            kept.name = node.output[0]
            kept_slices._sliced_dim(kept, node, source, axes, seq)
            result.append(kept)
    return result


def test_kept_slices_through_the_index_equal_the_walk(tmp_path: Path) -> None:
    found_any = False
    for model in _models(tmp_path):
        graph, first = (m.graph for m in _first_pass(model))
        index = GraphIndex(graph)
        wanted = {n.input[3] for n in graph.node if n.op_type == "Slice" and len(n.input) > 3}
        wanted |= {t.name for t in graph.initializer[:50]}  # some that are no axes
        assert kept_slices._constant_ints(index, wanted) == _walked_constant_ints(graph, wanted)
        types = infer._types_of(first)
        seq = SeqDims(graph, types, index)
        kept = kept_slices.kept_slice_dims(graph, first, seq, index, types)
        assert kept == _walked_kept_slices(graph, first, SeqDims(graph, types))
        found_any = found_any or bool(kept)
    assert found_any  # the decoders' rotary slices


@pytest.mark.parametrize("path", SAMPLES[:1], ids=[p.name for p in SAMPLES[:1]])
def test_kept_slices_without_the_callers_index_build_their_own(path: Path) -> None:
    graph, first = (m.graph for m in _first_pass(read_model(path)))
    seq = SeqDims(graph, infer._types_of(first))
    assert kept_slices.kept_slice_dims(graph, first, seq) == _walked_kept_slices(
        graph, first, seq)


# ----- the refold -------------------------------------------------------------------------------
def _index_text(index: GraphIndex) -> dict[str, tuple[list[int], list[bytes]]]:
    return {op: (index.positions[op], [n.SerializeToString() for n in nodes])
            for op, nodes in index.by_op.items()}


def _refolded_both_ways(model: onnx.ModelProto) -> int:
    """The refold through the index equals the walk over every node: the same nodes folded
    to the same bytes, the index then as one built afresh; the count folded."""
    folded, first = _first_pass(model)
    shapes = infer._static_dims(first.graph)
    walked, indexed = onnx.ModelProto(), onnx.ModelProto()
    walked.CopyFrom(folded)
    indexed.CopyFrom(folded)
    index = GraphIndex(indexed.graph)
    assert infer._static_dims_of(index, infer._types_of(first.graph), first.graph) == shapes
    expected = refold_constants(walked, shapes)
    assert refold_constants(indexed, shapes, index) == expected
    assert indexed.SerializeToString() == walked.SerializeToString()
    assert _index_text(index) == _index_text(GraphIndex(indexed.graph))
    return len(expected)


def test_the_refold_through_the_index_equals_the_walk(tmp_path: Path) -> None:
    assert sum(_refolded_both_ways(model) for model in _models(tmp_path)) > 0  # tiny_llama


def _shape_chain(constant_last: bool) -> onnx.ModelProto:
    """Gather(Shape(x), i) -> Add(., 1) -> Unsqueeze: folds once the shapes are known; with
    `constant_last` the index i's Constant comes after its reader (no topological order)."""
    i = helper.make_node("Constant", [], ["i"], value=helper.make_tensor("", 7, [], [1]))
    one = helper.make_node("Constant", [], ["one"], value=helper.make_tensor("", 7, [], [1]))
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i"], ["g"]),
             one, helper.make_node("Add", ["g", "one"], ["a"]),
             helper.make_node("Relu", ["x"], ["r"])]
    nodes.insert(len(nodes) if constant_last else 0, i)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    out = helper.make_tensor_value_info("a", TensorProto.INT64, None)
    return helper.make_model(helper.make_graph(nodes, "g", [x], [out]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("constant_last", [False, True])
def test_the_refold_of_a_shape_chain_equals_the_walk(constant_last: bool) -> None:
    model = _shape_chain(constant_last)
    walked, indexed = onnx.ModelProto(), onnx.ModelProto()
    walked.CopyFrom(model)
    indexed.CopyFrom(model)
    shapes = {"x": (None, 8)}
    index = GraphIndex(indexed.graph)
    expected = refold_constants(walked, shapes)
    assert refold_constants(indexed, shapes, index) == expected
    assert indexed == walked
    assert _index_text(index) == _index_text(GraphIndex(indexed.graph))
    assert len(expected) == (0 if constant_last else 2)  # the Gather, then the Add


# ----- the importer's index: Tiles, the made names ---------------------------------------------
def _tiled(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, onnx.NodeProto]]:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy, expand_tiles(copy)


def test_tiles_expanded_through_the_index_equal_the_walk(tmp_path: Path) -> None:
    turned = 0
    for model in _models(tmp_path):
        fold_constants(model)
        walked, expected = _tiled(model)
        indexed = onnx.ModelProto()
        indexed.CopyFrom(model)
        index = GraphIndex(indexed.graph)
        assert expand_tiles(indexed, index) == expected
        assert indexed == walked
        assert _index_text(index) == _index_text(GraphIndex(indexed.graph))
        turned += len(expected)
    assert turned > 0  # the decoders' grouped-query repeats


def _made_walked(graph: onnx.GraphProto) -> set[str]:
    return {name for node in graph.node if node.op_type != "Constant"
            for name in node.output if name}


def test_the_index_made_names_are_the_walks(tmp_path: Path) -> None:
    for model in _models(tmp_path):
        index = GraphIndex(model.graph)
        fold_constants(model, index=index)
        expand_tiles(model, index)
        assert index.made() == _made_walked(model.graph)
        _, first = _first_pass(model)
        # the verdict with the index's names is the walk's, on onnx's first pass and as typed
        assert typed_by_onnx(first.graph, model.graph.input, index.made()) \
            == typed_by_onnx(first.graph, model.graph.input)


def test_a_folded_node_is_no_longer_made_by_a_node() -> None:
    model = _shape_chain(constant_last=False)
    index = GraphIndex(model.graph)
    refold_constants(model, {"x": (None, 8)}, index)
    assert index.made() == {"s", "r"} == _made_walked(model.graph)  # g and a: Constants now


def test_nodes_restored_at_the_index_positions_equal_the_walk(tmp_path: Path) -> None:
    for model in _models(tmp_path):
        index = GraphIndex(model.graph)
        replaced = fold_constants(model, index=index)
        replaced.update(expand_tiles(model, index))
        walked, placed = onnx.ModelProto(), onnx.ModelProto()
        walked.CopyFrom(model)
        placed.CopyFrom(model)
        restore_nodes(walked, replaced)
        restore_nodes(placed, replaced, index.position)
        assert placed == walked


def test_nodes_ordered_anew_are_restored_by_the_walk() -> None:
    model = _shape_chain(constant_last=False)
    index = GraphIndex(model.graph)
    replaced = refold_constants(model, {"x": (None, 8)}, index)
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    restore_nodes(expected, replaced)
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))  # as onnxruntime's rules may write them
    restore_nodes(model, replaced, index.position)
    assert list(model.graph.node) == list(reversed(expected.graph.node))
