"""The ONNX import's fast paths give what the slow ones give: the engine's one-node inference
and its type reader remembered (ort_engine.py); the refold that evaluates only the nodes a
shape reaches, equal constants decoded once, integer Div and the Constant node made without
onnx's helpers (fold.py); the one walk that strips external data and validates the graph
(untrusted.py); module paths remembered by scope (build.py); the planner's shapes read once per
distinct type (ort_plan_shapes.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.errors import GraphmemError
from graphmem.frontends.onnx import dense_forms, fold, infer, limits, ort_engine, ort_plan_shapes
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.frontends.onnx.module_paths import module_path_of
from graphmem.frontends.onnx.read import alias_dim_params, name_dynamic_input_dims, read_model
from graphmem.frontends.onnx.untrusted import strip_external_data
from graphmem.frontends.onnx.validation import strip_and_validate, validate_graph
from graphmem.ops.control_flow import ControlFlowNode
from tests import hostile_models as hostile
from tests.helpers.onnx_counters import count_one_node_calls, record_decoded_constants
from tests.helpers.untrusted import external

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
I64, I32, U8 = np.int64, np.int32, np.uint8


def _folded(name: str) -> onnx.ModelProto:
    """A sample as the importer hands it to inference: dims named and aliased, folded."""
    model = read_model(SAMPLES / name)
    name_dynamic_input_dims(model.graph)
    alias_dim_params(model.graph)
    fold.fold_constants(model)
    return model


def _part(name: str) -> onnx.ModelProto:
    """The part of a sample onnxruntime's rules run on (infer.py's unknown_part)."""
    model = _folded(name)
    first = infer._onnx_inference(infer._without_value_info(model), [])
    assert first is not None
    second = infer._second_pass(model, first, {})
    return infer.unknown_part(second, model.graph.input)


def _engine_types(part: onnx.ModelProto) -> list[bytes]:
    inferred = infer._ort_symbolic_inference(part, [])
    return [v.SerializeToString() for v in (*inferred.graph.value_info, *inferred.graph.output)]


# ----- the engine's one-node inference, remembered ------------------------------------------
# (not samples/tiny_llama.onnx: onnx follows its rotary broadcast itself now, seq_dims.py
# `for_onnx_pass`, and the engine's part of it is one node, nothing to remember)
@pytest.mark.parametrize("name", ["tiny_gpt.onnx", "gpt2.onnx"])
def test_remembered_one_node_inference_types_every_value_as_the_engine_does(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    part = _part(name)
    calls = count_one_node_calls(monkeypatch)
    remembered = _engine_types(part)
    with_memory = calls[0]
    monkeypatch.setattr(ort_engine, "_remembered_single_node", lambda engine, infer: infer)
    calls[0] = 0
    assert _engine_types(part) == remembered  # every value info, byte for byte
    assert with_memory < calls[0]  # the layers repeat their nodes


@pytest.mark.parametrize("name", ["tiny_llama.onnx", "gpt2.onnx"])
def test_remembered_shapes_type_every_value_as_the_engine_does(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    part = _part(name)
    engine_module = infer._symbolic_shape_infer_module()
    remembered = _engine_types(part)
    own = engine_module.get_shape_from_type_proto.__wrapped__
    monkeypatch.setattr(engine_module, "get_shape_from_type_proto", own)
    assert _engine_types(part) == remembered


def test_each_remembered_shape_is_a_list_of_its_own() -> None:
    engine_module = infer._symbolic_shape_infer_module()
    shape_of = engine_module.get_shape_from_type_proto
    seq = helper.make_tensor_type_proto(TensorProto.FLOAT, ["seq", 4, None])
    first = shape_of(seq)
    assert first == ["seq", 4, None] == shape_of.__wrapped__(seq)
    first[0] = 7  # a rule edits its list: the next caller still gets the type's dims
    assert shape_of(seq) == ["seq", 4, None]
    assert shape_of(helper.make_tensor_type_proto(TensorProto.FLOAT, None)) is None  # no rank
    with pytest.raises(AssertionError):  # a map type: refused as by the engine's own
        shape_of(onnx.TypeProto(map_type=onnx.TypeProto.Map(key_type=TensorProto.INT64)))


def _key(node: onnx.NodeProto, types: dict[str, list[int]],
         initializers: dict[str, onnx.TensorProto] | None = None) -> object:
    infos = {name: helper.make_tensor_value_info(name, TensorProto.INT64, dims)
             for name, dims in types.items()}
    return ort_engine._single_node_key(node, infos, initializers or {})


def test_the_key_is_the_node_less_its_names() -> None:
    types = {"x": [2, 3], "y": [2, 3], "a": [2, 3], "b": [2, 3]}
    layer0 = helper.make_node("Mul", ["x", "y"], ["z"], name="/layers.0/Mul")
    layer1 = helper.make_node("Mul", ["a", "b"], ["c"], name="/layers.1/Mul")
    assert _key(layer0, types) == _key(layer1, types)
    # the same input twice is another node; so are other types and other attributes
    assert _key(helper.make_node("Mul", ["x", "x"], ["z"]), types) != _key(layer0, types)
    assert _key(layer0, {**types, "y": [1, 3]}) != _key(layer0, types)
    softmax = helper.make_node("Softmax", ["x"], ["z"], axis=1)
    assert _key(softmax, types) != _key(helper.make_node("Softmax", ["x"], ["z"], axis=0), types)
    assert _key(layer0, {"x": [2, 3]}) is None  # an untyped input: not remembered


def test_the_key_holds_the_small_initializers_values() -> None:
    types = {"x": [4], "axes": [1]}
    node = helper.make_node("Unsqueeze", ["x", "axes"], ["y"])
    zero = numpy_helper.from_array(np.array([0], I64), "axes")
    one = numpy_helper.from_array(np.array([1], I64), "axes")
    renamed = numpy_helper.from_array(np.array([0], I64), "other")
    assert _key(node, types, {"axes": zero}) != _key(node, types, {"axes": one})
    assert _key(node, types, {"axes": zero}) == _key(node, types, {"axes": renamed})
    large = numpy_helper.from_array(np.zeros(1024, I64), "axes")  # 8 KiB > 1 KiB
    assert _key(node, types, {"axes": large}) is None


# ----- folding --------------------------------------------------------------------------------
def test_the_refold_folds_what_a_whole_fold_with_the_shapes_folds() -> None:
    model = _folded("tiny_llama.onnx")  # the sample whose shapes fold more (20 nodes)
    first = infer._onnx_inference(infer._without_value_info(model), [])
    assert first is not None
    shapes = infer._static_dims(first.graph)
    whole, again = onnx.ModelProto(), onnx.ModelProto()
    whole.CopyFrom(model)
    again.CopyFrom(model)
    replaced = fold.fold_constants(whole, shapes)
    assert {n.op_type for n in replaced.values()} == {"Add", "Div", "Gather", "Mul"}
    assert fold.refold_constants(again, shapes) == replaced
    assert again.SerializeToString() == whole.SerializeToString()


def test_equal_constants_are_decoded_once_each_reader_getting_its_own_array(
        monkeypatch: pytest.MonkeyPatch) -> None:
    decoded = record_decoded_constants(monkeypatch)
    axes = numpy_helper.from_array(np.array([0], I64))  # raw_data: decoded read-only
    nodes = [helper.make_node("Constant", [], [f"axes{i}"], value=axes) for i in range(3)]
    nodes.append(helper.make_node("Constant", [], ["ints"], value_ints=[0]))
    known = fold._KnownValues(helper.make_graph(nodes, "g", [], []))
    for node in nodes:
        known.add_constant(node)
    first, second, _ = (known.get(f"axes{i}") for i in range(3))
    ints = known.get("ints")
    assert decoded == ["axes0", "ints"]  # one decoding per distinct attribute
    assert first is not None and second is not None and ints is not None
    assert first is not second and np.array_equal(first, second)
    direct = numpy_helper.to_array(axes)
    assert first.dtype == direct.dtype and first.shape == direct.shape
    assert first.flags.writeable == direct.flags.writeable
    assert ints.tolist() == [0] and ints.flags.writeable  # a value_ints list: writeable


def _reference(node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    graph = helper.make_graph(
        [node], "one",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()], [helper.make_empty_tensor_value_info(node.output[0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])


@pytest.mark.parametrize("feeds", [
    {"x": np.array(128, I64), "y": np.array(2, I64)},  # head_dim // 2 = 64
    {"x": np.array([-7, 7, -7, 7], I64), "y": np.array([2, 2, -2, -2], I64)},  # -3 3 3 -3
    {"x": np.array([[9], [-9]], I32), "y": np.array([4, -4], I32)},  # broadcast to [2, 2]
    {"x": np.array([200, 7], U8), "y": np.array([3, 0], U8)},  # 66, and 7 / 0 = 0 as numpy
    {"x": np.array([5, -5], I64), "y": np.array(0, I64)},  # by zero: 0, as the reference
])
def test_integer_division_is_the_reference_runtimes(feeds: dict[str, np.ndarray]) -> None:
    node = helper.make_node("Div", list(feeds), ["out"])
    with np.errstate(all="ignore"):
        fast = fold._run_integer_division(node, feeds)
        expected = _reference(node, feeds)
    assert fast is not None
    assert fast.dtype == expected.dtype and fast.shape == expected.shape
    assert np.array_equal(fast, expected)


@pytest.mark.parametrize(("feeds", "attributes"), [
    ({"x": np.array([7], I64), "y": np.array([2], I32)}, {}),  # mixed dtypes
    ({"x": np.array([7.0]), "y": np.array([2.0])}, {}),  # floats
    ({"x": np.array([7], I64), "y": np.array([2], I64)}, {"broadcast": 1}),  # opset 6's
    ({"x": np.array([1, 2, 3], I64), "y": np.array([1, 2], I64)}, {}),  # do not broadcast
])
def test_other_divisions_go_to_the_reference_runtime(feeds: dict[str, np.ndarray],
                                                      attributes: dict[str, int]) -> None:
    node = helper.make_node("Div", list(feeds), ["out"], **attributes)
    assert fold._run_integer_division(node, feeds) is None


@pytest.mark.parametrize("name", ["g", ""])
@pytest.mark.parametrize("value", [np.array([[1, 2, 3]], I64), np.array(2.5, np.float32),
                                   np.array([True, False]), np.array(["a", "bc"], object)])
def test_the_constant_node_is_onnxs_helpers(name: str, value: np.ndarray) -> None:
    """Made twice from one table of tensors (the second from the table, strings never):
    each time what onnx's helpers make."""
    tensors: dict[tuple[str, tuple[int, ...], bytes], onnx.TensorProto] = {}
    expected = helper.make_node("Constant", [], ["out"], name=name,
                                value=numpy_helper.from_array(value))
    for _ in range(2):
        node = helper.make_node("Gather", ["a", "b"], ["out", "extra"], name=name, axis=0,
                                doc_string="gone")
        fold._make_constant(node, value, tensors)
        assert node.SerializeToString() == expected.SerializeToString()
    assert len(tensors) == (0 if value.dtype == object else 1)


def test_constants_of_the_same_bytes_keep_their_own_dtype_and_shape() -> None:
    """[1, 2] int32 and [[1], [2]] int32 and int64 1 (8 bytes, as [1, 0] int32 on a little-endian
    machine) share bytes, not tensors."""
    tensors: dict[tuple[str, tuple[int, ...], bytes], onnx.TensorProto] = {}
    for value in (np.array([1, 2], np.int32), np.array([[1], [2]], np.int32),
                  np.array([1, 0], np.int32), np.array(1, np.int64)):
        node = helper.make_node("Add", ["a", "b"], ["out"])
        fold._make_constant(node, value, tensors)
        assert node.attribute[0].t == numpy_helper.from_array(value)
    assert len(tensors) == 4


# ----- reading: one walk strips and validates ---------------------------------------------------
def _with_external_data() -> onnx.ModelProto:
    """External tensors in an initializer, a Constant, an If branch and a function."""
    def ext(name: str) -> TensorProto:
        return external(TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[2]), "w", 8)

    branch = helper.make_graph([helper.make_node("Constant", [], ["b"], value=ext("in_branch"))],
                               "branch", [], [helper.make_tensor_value_info("b", 1, [2])])
    nodes = [helper.make_node("Constant", [], ["c"], value=ext("constant")),
             helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch),
             helper.make_node("F", ["c"], ["z"], domain="local")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(n, 1, [2]) for n in ("y", "z")], [ext("weight")])
    function = helper.make_function(
        "local", "F", ["a"], ["b"], [helper.make_node("Constant", [], ["b"], value=ext("f"))],
        [helper.make_opsetid("", 17)])
    return helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def test_strip_and_validate_strips_what_strip_external_data_strips() -> None:
    one_walk, two_walks = _with_external_data(), _with_external_data()
    strip_and_validate(one_walk)
    assert len(strip_external_data(two_walks)) == 5  # weight, constant, 2 branches, function
    validate_graph(two_walks)
    assert one_walk.SerializeToString() == two_walks.SerializeToString()


def _reference_to_a_function_attribute(node: onnx.NodeProto) -> onnx.NodeProto:
    axis = node.attribute.add()
    axis.name, axis.type, axis.ref_attr_name = "axis", onnx.AttributeProto.INT, "missing"
    return node


def _checked(model: onnx.ModelProto) -> str:
    with pytest.raises(GraphmemError) as error:
        strip_and_validate(model)
    with pytest.raises(GraphmemError) as again:
        validate_graph(model)
    assert str(again.value) == str(error.value)
    return str(error.value)


def test_the_checks_keep_their_order() -> None:
    # every tensor is checked before any attribute reference, whichever node comes first
    stray = _reference_to_a_function_attribute(helper.make_node("Softmax", ["x"], ["y"]))
    short = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[2, 3], raw_data=b"\0" * 8)
    constant = helper.make_node("Constant", [], ["c"], value=short)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    graph = helper.make_graph([stray, constant], "g", [x],
                              [helper.make_tensor_value_info("y", 1, [2])])
    assert "holds 8 bytes of raw_data" in _checked(helper.make_model(graph))
    # graph by graph: the main graph's reference before a body's second writer
    twice = helper.make_graph([helper.make_node("Relu", ["x"], ["b"]),
                               helper.make_node("Relu", ["x"], ["b"])],
                              "body", [], [helper.make_tensor_value_info("b", 1, [2])])
    stray = _reference_to_a_function_attribute(helper.make_node("Softmax", ["x"], ["y"]))
    branch = helper.make_node("If", ["x"], ["z"], then_branch=twice, else_branch=twice)
    graph = helper.make_graph([branch, stray], "g", [x],
                              [helper.make_tensor_value_info("y", 1, [2])])
    assert "refers to a function attribute" in _checked(helper.make_model(graph))
    # and a body's reference after the main graph's second writer
    body = helper.make_graph(
        [_reference_to_a_function_attribute(helper.make_node("Softmax", ["x"], ["b"]))],
        "body", [], [helper.make_tensor_value_info("b", 1, [2])])
    branch = helper.make_node("If", ["x"], ["z"], then_branch=body, else_branch=body)
    graph = helper.make_graph([branch, helper.make_node("Relu", ["x"], ["y"]),
                               helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", 1, [2])])
    assert "tensor 'y' is written by" in _checked(helper.make_model(graph))


# ----- building and the planner's shapes ----------------------------------------------------
@pytest.mark.parametrize(("name", "path"), [
    ("/layer2/layer2.2/conv1/Conv", "layer2.2.conv1"),  # layer2.2 refines layer2
    ("/model/layers.0/self_attn/Mul", "model.layers.0.self_attn"),
    ("/model/layers.0/self_attn/Mul_1", "model.layers.0.self_attn"),  # the same scopes
    ("/Conv", ""), ("x/y", ""), ("/", ""), ("//a/b/", "a.b"), ("/a//b/c", "a.b"),
])
def test_module_paths_by_scope(name: str, path: str) -> None:
    assert module_path_of(helper.make_node("Relu", ["x"], ["y"], name=name)) == path


@pytest.mark.parametrize("name", ["tiny_llama.onnx", "gpt2.dynamo.onnx"])
def test_the_planners_shapes_are_read_value_by_value(name: str) -> None:
    model = read_model(SAMPLES / name)
    graph = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=False).graph
    named = {d.dim_param for info in (*model.graph.input, *model.graph.value_info,
                                      *model.graph.output)
             for d in info.type.tensor_type.shape.dim if d.dim_param}
    expected = {info.name: ort_plan_shapes._plan_shape(info.type, frozenset(named))
                for info in (*graph.input, *graph.value_info, *graph.output)}
    # (the initializers' own dims are not read: no plan reads a value no node makes)
    assert ort_plan_shapes.ort_plan_shapes(model) == expected


@pytest.mark.parametrize("name", ["tiny_llama.onnx", "gpt2.dynamo.onnx", "resnet50.onnx"])
def test_the_first_pass_reads_the_copy_without_copying(name: str) -> None:
    # the bytes onnx's first pass reads are those of the copy without value infos, and the
    # model keeps its value infos in their order (a dynamo export declares a type for each)
    model = _folded(name)
    before = model.SerializeToString()
    expected = infer._without_value_info(model).SerializeToString()
    assert infer._bytes_without_value_info(model) == expected
    assert model.SerializeToString() == before


@pytest.mark.parametrize("name", ["tiny_llama.onnx", "gpt2.dynamo.onnx", "resnet50.onnx"])
def test_nodes_of_equal_attributes_share_one_dict(name: str) -> None:
    # the builder gives nodes of equal attributes one dict (the IR replaces a node's
    # attributes, never changes them in place): as many dicts as distinct attribute sets,
    # each equal to the node's own attributes as onnx.helper reads them
    model = read_model(SAMPLES / name)
    graph = import_onnx(SAMPLES / name).graph
    distinct = {tuple(node.attributes.items()) for node in graph.nodes}
    assert len({id(node.attributes) for node in graph.nodes}) == len(distinct)
    protos = {p.name: p for p in model.graph.node}
    for node in graph.nodes:
        proto = protos.get(node.name)
        if proto is not None and proto.op_type == node.op_type:
            read = {a.name: helper.get_attribute_value(a) for a in proto.attribute
                    if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS,
                                  onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING)}
            assert {k: list(v) if isinstance(v, tuple) else v
                    for k, v in node.attributes.items()} == read


def test_attributes_that_cannot_be_a_key_are_kept_unshared(tmp_path: Path) -> None:
    # Optional's `type` attribute is a TypeProto, which is not hashable: the two nodes keep
    # their own attributes (found by onnx's node test cases: optional_* raised TypeError)
    optional_type = helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    nodes = [helper.make_node("Optional", [], [f"o{i}"], type=optional_type) for i in range(2)]
    nodes += [helper.make_node("OptionalHasElement", [f"o{i}"], [f"h{i}"]) for i in range(2)]
    graph = helper.make_graph(nodes, "g", [], [
        helper.make_tensor_value_info(f"h{i}", TensorProto.BOOL, []) for i in range(2)])
    path = tmp_path / "optional.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    imported = import_onnx(path).graph
    optionals = [node for node in imported.nodes if node.op_type == "Optional"]
    assert len(optionals) == 2
    assert all(node.attributes["type"] == optional_type for node in optionals)


def test_nodes_and_values_hold_no_instance_dict() -> None:
    # __slots__: a graph of 10**6 nodes holds 10**6 of each (about 100 bytes less each)
    value = Value("x", DType.FLOAT32, (), Role.INPUT)
    node = Node("n", "Relu", [value], [])
    for item in (value, node, ControlFlowNode("c", "If", [], [])):
        assert not hasattr(item, "__dict__")


def _compact_models() -> list[onnx.ModelProto]:
    """Models with and without what dense_forms.py expands and with bodies and functions."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(1, np.float32), "s"),
                                       numpy_helper.from_array(np.zeros(1, I64), "i"), [2])
    plain = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    listed = helper.make_graph([helper.make_node("Constant", [], ["c"], value_ints=[1, 2]),
                                helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    with_sparse = helper.make_graph([helper.make_node("Add", ["x", "s"], ["y"])], "g", [x],
                                    [y], sparse_initializer=[sparse])
    return [helper.make_model(g) for g in (plain, listed, with_sparse)] + [
        hostile.wide_if(3), hostile.nested_functions(3), helper.make_model(
            helper.make_graph([helper.make_node("If", ["b"], ["y"], then_branch=listed,
                                                else_branch=plain)], "g",
                              [helper.make_tensor_value_info("b", TensorProto.BOOL, [])], [y]))]


@pytest.mark.parametrize("index", range(6))
def test_validations_walk_counts_what_the_later_walks_would(index: int) -> None:
    # the bodies check_nesting would count, and dense only where densify changes nothing
    model = _compact_models()[index]
    walked = strip_and_validate(model)
    assert walked.bodies in (None, limits._body_count(
        [model.graph.node, *(f.node for f in model.functions)]))
    assert walked.bodies is not None or model.functions
    assert walked.dense == (index in (0, 3))  # a Relu, and If arms of Relus
    changed = dense_forms.densify(model, 0)  # every list above 0 bytes is expanded
    assert not (walked.dense and changed)
