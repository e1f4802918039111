"""Hostile ONNX models by cause (issue 26, items 8-12), each built with onnx.helper directly:
deep function chains, constants that inference would materialize, bulk outside the main
graph's initializers, wide graphs, and control flow that runs without end. Shared by
tests/test_hostile_limits.py and benchmarks/hostile_scaling.py; each builder takes the count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # what onnxruntime 1.31 reads: the model reaches its session unchanged
LOCAL = "local"


def info(name: str, dims: Sequence[str | int] | None = ("batch", 8),
         elem_type: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, None if dims is None else list(dims))


def model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[onnx.ValueInfoProto], initializers: Sequence[onnx.TensorProto] = (),
          functions: Sequence[onnx.FunctionProto] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "hostile", list(inputs), list(outputs),
                              initializer=list(initializers))
    opsets = [helper.make_opsetid("", 17)]
    if functions:
        opsets.append(helper.make_opsetid(LOCAL, 1))
    result = helper.make_model(graph, opset_imports=opsets)
    result.functions.extend(functions)
    result.ir_version = IR_VERSION
    return result


def _function(name: str, nodes: Sequence[onnx.NodeProto]) -> onnx.FunctionProto:
    return helper.make_function(LOCAL, name, ["a"], ["b"], list(nodes),
                                [helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)])


def _relu_leaf() -> onnx.GraphProto:
    return helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "leaf", [],
                             [info("t", None)])


def _if(output: str = "y") -> onnx.NodeProto:
    return helper.make_node("If", ["cond"], [output], then_branch=_relu_leaf(),
                            else_branch=_relu_leaf())


def _cond() -> onnx.ValueInfoProto:
    return info("cond", (), TensorProto.BOOL)


# ----- 8: depth ------------------------------------------------------------------------------
def nested_functions(depth: int) -> onnx.ModelProto:
    """F{depth-1} calls F{depth-2} ... calls F0 = Relu: function calls `depth` deep."""
    functions = [_function("F0", [helper.make_node("Relu", ["a"], ["b"])])]
    functions.extend(_function(f"F{i}", [helper.make_node(f"F{i - 1}", ["a"], ["b"],
                                                           domain=LOCAL)])
                     for i in range(1, depth))
    call = helper.make_node(f"F{depth - 1}", ["x"], ["y"], domain=LOCAL)
    return model([call], [info("x")], [info("y", None)], functions=functions)


# ----- 9: constants inference would build ------------------------------------------------------
def constant_of_shape_with_if(elements: int) -> onnx.ModelProto:
    """An int64 ConstantOfShape of `elements` reduced to a scalar, beside an If: the graph is
    inferred whole, and onnxruntime's rules build the constant's value."""
    shape = numpy_helper.from_array(np.array([elements], np.int64), "shape")
    fill = numpy_helper.from_array(np.array([1], np.int64))
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], value=fill),
             helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0), _if()]
    return model(nodes, [info("x"), _cond()], [info("y", None), info("s", None, TensorProto.INT64)],
                 [shape])


def constant_of_shape_in_body(elements: int) -> onnx.ModelProto:
    """The same int64 ConstantOfShape inside an If's branch."""
    shape = numpy_helper.from_array(np.array([elements], np.int64), "shape")
    fill = numpy_helper.from_array(np.array([1], np.int64))
    branch = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["big"], value=fill),
         helper.make_node("ReduceSum", ["big"], ["t"], keepdims=0)],
        "branch", [], [info("t", None, TensorProto.INT64)])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    return model([node], [_cond()], [info("y", None, TensorProto.INT64)], [shape])


def constant_of_shape_folded(elements: int) -> onnx.ModelProto:
    """A float ConstantOfShape of `elements` reduced and added to the input: onnxruntime's
    optimizer would fold it (build it) at session creation."""
    shape = numpy_helper.from_array(np.array([elements], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"]),
             helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    return model(nodes, [info("x")], [info("y", None)], [shape])


# ----- 10: bulk outside the main graph's initializers --------------------------------------------
def bulky_body_initializer(elements: int) -> onnx.ModelProto:
    """An If branch holding an initializer of `elements` floats."""
    weight = numpy_helper.from_array(np.ones(elements, np.float32), "w")
    branch = helper.make_graph([helper.make_node("ReduceSum", ["w"], ["t"], keepdims=0)],
                               "branch", [], [info("t", None)], initializer=[weight])
    node = helper.make_node("If", ["cond"], ["s"], then_branch=branch, else_branch=branch)
    add = helper.make_node("Add", ["x", "s"], ["y"])
    return model([node, add], [info("x"), _cond()], [info("y", None)])


def bulky_constant(elements: int) -> onnx.ModelProto:
    """A Constant node holding `elements` floats."""
    value = numpy_helper.from_array(np.ones(elements, np.float32))
    nodes = [helper.make_node("Constant", [], ["w"], value=value),
             helper.make_node("ReduceSum", ["w"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    return model(nodes, [info("x")], [info("y", None)])


def bulky_doc_string(chars: int) -> onnx.ModelProto:
    """A node whose doc string is `chars` characters."""
    result = model([helper.make_node("Relu", ["x"], ["y"])], [info("x")], [info("y", None)])
    result.graph.node[0].doc_string = "d" * chars
    return result


def bulky_unknown_fields(count: int) -> bytes:
    """The bytes of a small model with `count` two-byte unknown fields (field 99, varint 0)
    appended to its graph's first node."""
    base = model([helper.make_node("Relu", ["x"], ["y"])], [info("x")], [info("y", None)])
    node = base.graph.node[0].SerializeToString() + b"\x98\x06\x00" * count
    graph = base.graph
    graph.ClearField("node")
    graph_bytes = _field(1, node) + graph.SerializeToString()
    base.ClearField("graph")
    return base.SerializeToString() + _field(7, graph_bytes)


def write_sparse_doc_string(path: Path, length: int) -> None:
    """A model whose node's doc string is `length` zero bytes, written as a hole (a 1.9 GB
    file takes a few KB of disk)."""
    base = model([helper.make_node("Relu", ["x"], ["y"])], [info("x")], [info("y", None)])
    node = base.graph.node[0].SerializeToString()
    node_head = node + _varint(6 << 3 | 2) + _varint(length)  # NodeProto.doc_string
    graph = base.graph
    graph.ClearField("node")
    rest = graph.SerializeToString()
    graph_head = _varint(1 << 3 | 2) + _varint(len(node_head) + length) + node_head
    base.ClearField("graph")
    head = base.SerializeToString() + _varint(7 << 3 | 2) + _varint(
        len(graph_head) + length + len(rest)) + graph_head
    with path.open("wb") as file:
        file.write(head)
        file.seek(length, 1)
        file.write(rest)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ----- 11: width ----------------------------------------------------------------------------------
def wide_outputs(count: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], [f"y{i}"]) for i in range(count)]
    return model(nodes, [info("x")], [info(f"y{i}", None) for i in range(count)])


def wide_functions(count: int) -> onnx.ModelProto:
    """`count` local functions, each called once, in a chain."""
    functions = [_function(f"F{i}", [helper.make_node("Relu", ["a"], ["b"])])
                 for i in range(count)]
    nodes = [helper.make_node(f"F{i}", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"],
                              domain=LOCAL) for i in range(count)]
    nodes.append(helper.make_node("Identity", [f"t{count - 1}"], ["y"]))
    return model(nodes, [info("x")], [info("y", None)], functions=functions)


def wide_sum(count: int) -> onnx.ModelProto:
    inputs = [info(f"x{i}") for i in range(count)]
    node = helper.make_node("Sum", [f"x{i}" for i in range(count)], ["y"])
    return model([node], inputs, [info("y", None)])


def wide_concat(count: int) -> onnx.ModelProto:
    inputs = [info(f"x{i}") for i in range(count)]
    node = helper.make_node("Concat", [f"x{i}" for i in range(count)], ["y"], axis=1)
    return model([node], inputs, [info("y", None)])


def wide_split(count: int) -> onnx.ModelProto:
    node = helper.make_node("Split", ["x"], [f"y{i}" for i in range(count)], axis=1,
                            num_outputs=count)
    outputs = [info(f"y{i}", None) for i in range(count)]
    return model([node], [info("x", ("batch", count))], outputs)


def chain(op_type: str) -> Callable[[int], onnx.ModelProto]:
    """A builder of `count` nodes of `op_type` in a chain (a valid graph as long as it has
    nodes: one Value and one Node each in graphmem's IR)."""
    def build(count: int) -> onnx.ModelProto:
        names = ["x", *(f"t{i}" for i in range(count - 1)), "y"]
        nodes = [helper.make_node(op_type, [names[i]], [names[i + 1]]) for i in range(count)]
        return model(nodes, [info("x")], [info("y", None)])
    return build


def wide_inputs(count: int) -> onnx.ModelProto:
    """`count` graph inputs, each added to the running sum by a node of its own."""
    nodes = [helper.make_node("Add", ["x0" if i == 1 else f"s{i - 1}", f"x{i}"], [f"s{i}"])
             for i in range(1, count)]
    return model(nodes, [info(f"x{i}") for i in range(count)], [info(f"s{count - 1}", None)])


def wide_if(count: int) -> onnx.ModelProto:
    """`count` If nodes in a chain (2 x `count` arms), each arm reading the outer value."""
    def arm(kind: str, source: str, index: int) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(kind, [source], [f"a{index}"])],
                                 f"{kind}{index}", [], [info(f"a{index}", None)])

    nodes = [helper.make_node("If", ["cond"], [f"t{i}"],
                              then_branch=arm("Relu", "x" if i == 0 else f"t{i - 1}", i),
                              else_branch=arm("Neg", "x" if i == 0 else f"t{i - 1}", i))
             for i in range(count)]
    return model(nodes, [info("x"), _cond()], [info(f"t{count - 1}", None)])


def wide_attributes(count: int) -> onnx.ModelProto:
    """One node of an op outside ai.onnx (no rule: an unknown op) carrying `count` integer
    attributes."""
    node = helper.make_node("Wide", ["x"], ["y"], domain="hostile.ops",
                            **{f"a{i}": i for i in range(count)})
    built = model([node], [info("x")], [info("y", None)])
    built.opset_import.append(helper.make_opsetid("hostile.ops", 1))
    return built


# ----- 12: control flow verify runs -------------------------------------------------------------
def _loop_body(extra: Sequence[onnx.NodeProto] = (), carried: bool = True
               ) -> onnx.GraphProto:
    nodes = [helper.make_node("Identity", ["c"], ["c2"]), *extra]
    inputs = [info("i", (), TensorProto.INT64), info("c", (), TensorProto.BOOL)]
    outputs = [info("c2", (), TensorProto.BOOL)]
    if carried:
        nodes.append(helper.make_node("Add", ["v", "one"], ["v2"]))
        inputs.append(info("v", None))
        outputs.append(info("v2", None))
    return helper.make_graph(nodes, "body", inputs, outputs)


def loop_trips(trips: int) -> onnx.ModelProto:
    """A Loop of a constant `trips` iterations adding one to x."""
    constants = [numpy_helper.from_array(np.ones(1, np.float32), "one"),
                 numpy_helper.from_array(np.array(trips, np.int64), "M"),
                 numpy_helper.from_array(np.array(True), "T")]
    loop = helper.make_node("Loop", ["M", "T", "x"], ["y"], body=_loop_body())
    return model([loop], [info("x")], [info("y", None)], constants)


def loop_forever(_: int = 0) -> onnx.ModelProto:
    """A Loop with no trip count whose condition stays true."""
    constants = [numpy_helper.from_array(np.ones(1, np.float32), "one"),
                 numpy_helper.from_array(np.array(True), "T")]
    loop = helper.make_node("Loop", ["", "T", "x"], ["y"], body=_loop_body())
    return model([loop], [info("x")], [info("y", None)], constants)


def loop_growing_scan(trips: int) -> onnx.ModelProto:
    """A Loop whose scan output gathers 8,000 floats a row per iteration, `trips` iterations
    (the trip count comes from the input, so it is not a constant)."""
    rows = numpy_helper.from_array(np.array([1, 1000], np.int64), "rows")
    tile = helper.make_node("Tile", ["x_outer", "rows"], ["s"])
    body = _loop_body([tile], carried=False)
    body.output.append(info("s", None))
    count = numpy_helper.from_array(np.array(trips, np.int64), "count")
    nodes = [helper.make_node("Identity", ["x"], ["x_outer"]),
             helper.make_node("Add", ["count", "zero"], ["M"]),
             helper.make_node("Loop", ["M", "T"], ["y"], body=body)]
    constants = [rows, count, numpy_helper.from_array(np.array(0, np.int64), "zero"),
                 numpy_helper.from_array(np.array(True), "T")]
    return model(nodes, [info("x")], [info("y", None)], constants)


def huge_constant_of_shape(elements: int) -> onnx.ModelProto:
    """A float ConstantOfShape of `elements` (6 GB at 1.5e9) whose sum is added to x."""
    return constant_of_shape_folded(elements)


BUILDERS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "nested-functions": nested_functions,
    "cos-with-if": constant_of_shape_with_if,
    "cos-in-body": constant_of_shape_in_body,
    "cos-folded": constant_of_shape_folded,
    "body-initializer": bulky_body_initializer,
    "constant-node": bulky_constant,
    "doc-string": bulky_doc_string,
    "outputs": wide_outputs,
    "functions": wide_functions,
    "sum-inputs": wide_sum,
    "concat-inputs": wide_concat,
    "split-outputs": wide_split,
    "inputs": wide_inputs,
    "relu-chain": chain("Relu"),
    "identity-chain": chain("Identity"),
    "if-arms": wide_if,
    "attributes": wide_attributes,
    "loop-trips": loop_trips,
    "loop-forever": loop_forever,
    "loop-growing-scan": loop_growing_scan,
}
