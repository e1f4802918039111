"""fold.py's numpy fast path gives what onnx's reference runtime gives, op by op, and the
folding decodes only the constants a foldable node reads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from graphmem.frontends.onnx import fold
from tests.helpers.onnx_counters import record_decoded_constants

I64, I32, U8 = np.int64, np.int32, np.uint8


def _reference(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> np.ndarray:
    graph = helper.make_graph(
        [node], "one",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()], [helper.make_empty_tensor_value_info(node.output[0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])


CASES = [
    ("Unsqueeze", {"x": np.array(7, I64), "axes": np.array([0], I64)}, {}, 17),
    ("Unsqueeze", {"x": np.array([3, 4], I64), "axes": np.array([-1, 0], I64)}, {}, 17),
    ("Unsqueeze", {"x": np.array([[1, 2]], I32), "axes": np.array([1], I64)}, {}, 13),
    ("Unsqueeze", {"x": np.array([5], I64)}, {"axes": [0, 2]}, 11),
    ("Cast", {"x": np.array([1, -2, 300], I64)}, {"to": TensorProto.INT32}, 17),
    ("Cast", {"x": np.array([1, 255], I32)}, {"to": TensorProto.UINT8}, 17),
    ("Cast", {"x": np.array(9, U8)}, {"to": TensorProto.INT64}, 17),
    ("Add", {"x": np.array([1, 2], I64), "y": np.array(3, I64)}, {}, 17),
    ("Sub", {"x": np.array(4, I32), "y": np.array([[1], [2]], I32)}, {}, 17),
    ("Mul", {"x": np.array([2**62], I64), "y": np.array([4], I64)}, {}, 17),  # wraps
    ("Mul", {"x": np.array(64, I64), "y": np.array(2, I64)}, {}, 17),
    ("Identity", {"x": np.array([0.5, -1.5], np.float32)}, {}, 17),  # a TorchScript bias
    ("Identity", {"x": np.array([[1, 2]], I64)}, {}, 13),
]


@pytest.mark.parametrize(("op", "feeds", "attributes", "opset"), CASES)
def test_the_fast_path_is_the_reference_runtime(op: str, feeds: dict[str, np.ndarray],
                                                attributes: dict[str, object],
                                                opset: int) -> None:
    node = helper.make_node(op, list(feeds), ["out"], **attributes)
    fast = fold._run_simple(node, feeds, opset)
    assert fast is not None  # each case is one the fast path takes
    with np.errstate(all="ignore"):
        expected = _reference(node, feeds, opset)
    assert fast.dtype == expected.dtype and fast.shape == expected.shape
    assert np.array_equal(fast, expected)


@pytest.mark.parametrize(("op", "feeds", "attributes"), [
    ("Unsqueeze", {"x": np.array([1], I64), "axes": np.array([0, 0], I64)}, {}),  # repeated
    ("Unsqueeze", {"x": np.array([1], I64), "axes": np.array([5], I64)}, {}),  # out of range
    ("Cast", {"x": np.array([1], I64)}, {"to": TensorProto.FLOAT}),  # not integer to integer
    ("Add", {"x": np.array([1], I64), "y": np.array([1], I32)}, {}),  # mixed dtypes
    ("Add", {"x": np.array([1.5]), "y": np.array([1.0])}, {}),  # floats
    ("Div", {"x": np.array([7], I64), "y": np.array([2], I64)}, {}),  # fold._run_integer_division's
])
def test_what_it_does_not_take_goes_to_the_reference_runtime(
        op: str, feeds: dict[str, np.ndarray], attributes: dict[str, object]) -> None:
    node = helper.make_node(op, list(feeds), ["out"], **attributes)
    assert fold._run_simple(node, feeds, 17) is None


def test_only_the_constants_a_foldable_node_reads_are_decoded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    decoded = record_decoded_constants(monkeypatch)
    constant = [helper.make_node("Constant", [], [f"c{i}"], value=numpy_helper.from_array(
        np.array([i], I64))) for i in range(3)]
    nodes = [*constant, helper.make_node("Unsqueeze", ["c0", "c1"], ["u"]),  # reads c0, c1
             helper.make_node("Relu", ["x"], ["y"])]  # c2 is read by nothing
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    replaced = fold.fold_constants(model)
    assert list(replaced) == ["u"] and sorted(decoded) == ["c0", "c1"]
    folded = numpy_helper.to_array(model.graph.node[3].attribute[0].t)
    assert folded.tolist() == [[0]]  # c0 = [0] unsqueezed at axis c1 = 1


def test_only_the_initializers_a_foldable_node_reads_are_decoded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a hand-written decoder holds its small constants as initializers (axes, reshape
    # targets): thousands, most read by no foldable node, and the folding runs twice
    decoded: list[str] = []
    to_array = numpy_helper.to_array

    def counted(tensor: onnx.TensorProto, *args: object) -> np.ndarray:
        decoded.append(tensor.name)
        return to_array(tensor, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(fold.numpy_helper, "to_array", counted)
    initializers = [numpy_helper.from_array(np.array([i], I64), f"i{i}") for i in range(3)]
    nodes = [helper.make_node("Unsqueeze", ["i0", "i1"], ["u"]),  # reads i0, i1
             helper.make_node("Reshape", ["x", "i2"], ["y"])]  # i2: read by no foldable node
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    replaced = fold.fold_constants(model)
    assert list(replaced) == ["u"] and sorted(decoded) == ["i0", "i1"]
    folded = numpy_helper.to_array(model.graph.node[0].attribute[0].t)
    assert folded.tolist() == [[0]]  # i0 = [0] unsqueezed at axis i1 = 1


def test_the_reference_runtime_runs_once_per_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    # a decoder's layers fold the same Reshape/Concat of the same constants once per layer:
    # the reference runtime's result is remembered by op, attributes, opset and input values
    runs: list[str] = []
    reference = fold._run_reference

    def counted(node: onnx.NodeProto, known: dict[str, np.ndarray], opset: int
                ) -> list[np.ndarray]:
        runs.append(node.output[0])
        return reference(node, known, opset)

    monkeypatch.setattr(fold, "_run_reference", counted)
    monkeypatch.setattr(fold, "_REFERENCE_RESULTS", {})
    initializers = [numpy_helper.from_array(np.array(v, I64), n) for n, v in
                    (("a", [2, 3]), ("b", [4]), ("c", [5]), ("flat", [-1]))]
    nodes = [helper.make_node("Concat", ["a", "b"], [f"same{i}"], axis=0) for i in range(3)]
    nodes += [helper.make_node("Concat", ["a", "c"], ["other"], axis=0),  # another value
              helper.make_node("Concat", ["b", "a"], ["swapped"], axis=0),  # another order
              helper.make_node("Reshape", ["a", "flat"], ["reshaped"])]  # another op
    nodes.append(helper.make_node("Relu", ["x"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    replaced = fold.fold_constants(model)
    assert sorted(replaced) == ["other", "reshaped", "same0", "same1", "same2", "swapped"]
    assert runs == ["same0", "other", "swapped", "reshaped"]
    values = {n.output[0]: numpy_helper.to_array(n.attribute[0].t).tolist()
              for n in model.graph.node if n.op_type == "Constant"}
    assert values == {"same0": [2, 3, 4], "same1": [2, 3, 4], "same2": [2, 3, 4],
                      "other": [2, 3, 5], "swapped": [4, 2, 3], "reshaped": [2, 3]}
