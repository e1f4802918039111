"""graphmem's own shape rules fill what shape inference left unknown."""

from graphmem.core.ir import DType, Role
from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx.shape_gaps import broadcast_shapes, fill_shape_gaps
from tests.builders import GraphBuilder

B = SymInt.symbol("batch")
C = SymInt.const


def test_broadcasting_follows_numpy() -> None:
    # [batch, 1, 8] + [4, 1] -> [batch, 4, 8]
    assert broadcast_shapes([(B, C(1), C(8)), (C(4), C(1))]) == (B, C(4), C(8))
    # [3] + [4]: not broadcastable -> unknown rather than a guess
    assert broadcast_shapes([(C(3),), (C(4),)]) is None


def test_unknown_outputs_of_known_ops_get_shapes_and_spread() -> None:
    b = GraphBuilder()
    b.tensor("x", B * 16, Role.INPUT)
    b.tensor("bias", 1, Role.PARAMETER)
    relu = b.node("r", ["x"], {"a": 1}, op_type="Relu")
    add = b.node("add", ["a", "bias"], {"y": 1}, op_type="Add")
    custom = b.node("c", ["y"], {"z": 1}, op_type="NobodyKnowsMe")
    for node in (relu, add, custom):
        node.outputs[0].shape = None
        node.outputs[0].dtype = DType.UNKNOWN
    graph = b.build(["z"])
    report = fill_shape_gaps(graph)
    assert report.filled == ("a", "y")
    assert report.still_unknown == ("z",)
    assert graph.values["y"].shape == (B * 16,)
    assert graph.values["y"].dtype is DType.FLOAT32


def test_outputs_left_unknown_are_listed_in_the_nodes_order() -> None:
    # one walk fills and lists: a node's first output filled by a rule is not listed, its
    # other outputs (no rule shapes them) are, node by node and output by output, as the
    # nodes come; a node reading an output left unknown gets no rule shape either
    b = GraphBuilder()
    b.tensor("x", B * 16, Role.INPUT)
    split = b.node("s", ["x"], {"s0": 1, "s1": 1}, op_type="NobodyKnowsMe")
    relu = b.node("r", ["x"], {"a": 1, "mask": 1}, op_type="Relu")
    after = b.node("n", ["s1"], {"m": 1}, op_type="Neg")
    for node in (split, relu, after):
        for value in node.outputs:
            value.shape = None
    report = fill_shape_gaps(b.build(["a", "m", "s0", "mask"]))
    assert report.filled == ("a",)  # Relu's first output: x's shape
    assert report.still_unknown == ("s0", "s1", "mask", "m")
