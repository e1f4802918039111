"""onnxruntime's symbolic engine, made cheaper where its work repeats: sympy's simplify, Min
and Max remembered (the same few expressions come back for every layer of a decoder), and no
per-node onnx inference where onnx already typed a node's outputs with numbers only.

Before each node's symbolic rule, the engine runs onnx's shape inference on that node alone (a
one-node model built, serialized and parsed: 20 to 45 us). On the part of a decoder that
infer.py hands it, half the nodes are shape arithmetic (Shape, Gather, Unsqueeze, Concat)
whose outputs onnx's whole-graph pass already typed as static: `[3]`, `[]`, `[1]`. For those
the engine is given the same value infos directly; its rules still run on every node (they
compute the values the next rules read) and overwrite what they type. For the other nodes the
one-node inference is remembered by what it depends on (the node less its names, its input
types, the small constants it reads): a decoder's layers repeat the same nodes on the same
types, so 2,172 calls on a Llama-3-70B graph become 31.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache, wraps
from types import ModuleType
from typing import Any

import onnx

from graphmem.frontends.onnx.untrusted import subgraphs

# Marks a model whose value infos are onnx's static types for its nodes' outputs (infer.py's
# part of a graph), never an exporter's declarations. The value is a secret of this process:
# a model file carrying the key (it is untrusted data) cannot carry the value.
STATIC_TYPES_KEY = "graphmem.static_types"
STATIC_TYPES_TOKEN = os.urandom(16).hex()  # secrets.token_hex's bytes, without hmac's import
# How many results each remembered sympy function keeps (a decoder needs a handful)
_CACHED_RESULTS = 4096
# The ops whose outputs are taken from onnx's types: shape arithmetic, which onnx's one-node
# inference types the same way (ops the engine's own path leaves untyped for its rules, such
# as LayerNormalization or QuantizeLinear, are not among them)
_SHAPE_ARITHMETIC = frozenset({
    "Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Reshape", "ConstantOfShape",
    "Cast", "Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "Where", "Slice", "Range",
    "Expand", "Identity", "Neg", "Abs", "Min", "Max", "Floor", "Ceil", "Not", "And", "Or",
})
# The largest initializer whose value a remembered one-node inference is keyed by (shape
# arithmetic reads a few bytes; a node reading more is inferred each time)
_KEY_TENSOR_BYTES = 1024
# What onnx's inference of a node never reads (metadata_props: onnx 1.16 on)
_UNREAD_NODE_FIELDS = tuple(field for field in ("name", "doc_string", "metadata_props")
                            if field in onnx.NodeProto.DESCRIPTOR.fields_by_name)
# The engine's one-node inference, which this replaces for static nodes (onnxruntime's name)
_SINGLE_NODE = "_onnx_infer_single_node"
# The most elements of a value the engine may build (its ConstantOfShape rule builds an int64
# constant's value whatever its size: 10**9 elements took 222 s and 7.6 GB); shape vectors and
# scalars, the values its rules read, are far below it
MAX_BUILT_ELEMENTS = 2**16


def static_value_infos(types: Mapping[str, onnx.ValueInfoProto],
                       nodes: Iterable[onnx.NodeProto]) -> list[onnx.ValueInfoProto]:
    """The types (from `types`, by value name) of the outputs of `nodes` that are tensors
    with every dim a number."""
    return [info for node in nodes for name in node.output
            if name and (info := types.get(name)) is not None and _static(info)]


def skip_static_nodes(engine: Any, static: Mapping[str, onnx.ValueInfoProto]) -> None:
    """Make `engine` (a SymbolicShapeInference) take a shape-arithmetic node's output types from
    `static` instead of onnx's one-node inference when every output is there and none is
    known to the engine yet (a later fixed-point round re-checks merged dims on known
    outputs: the engine's own path then runs, as it would have)."""
    infer_node = _remembered_single_node(engine, getattr(engine, _SINGLE_NODE))

    def infer_single_node(node: onnx.NodeProto) -> None:
        outputs = list(node.output)
        if node.domain not in ("", "ai.onnx") or node.op_type not in _SHAPE_ARITHMETIC \
                or not outputs \
                or any(not name or name not in static or name in engine.known_vi_
                       for name in outputs):
            infer_node(node)
            return
        for name in outputs:
            info = engine.out_mp_.graph.value_info.add()
            info.CopyFrom(static[name])
            engine.known_vi_[name] = info

    setattr(engine, _SINGLE_NODE, infer_single_node)


def _remembered_single_node(engine: Any, infer_node: Callable[[onnx.NodeProto], None]
                            ) -> Callable[[onnx.NodeProto], None]:
    """The engine's one-node onnx inference, its result remembered by what it depends on: the
    node (names aside), its input types and the values of the small initializers it reads.
    Each layer of a decoder repeats the same nodes on the same types (the engine's symbols,
    `Min(4096, seq)`, are the same names in every layer): one inference per distinct node.
    Only where none of the node's outputs is typed yet (a later fixed-point round re-checks
    merged dims on typed outputs first: the engine's own path runs then)."""
    results: dict[tuple[Any, ...], list[onnx.ValueInfoProto]] = {}

    def infer_single_node(node: onnx.NodeProto) -> None:
        outputs = [name for name in node.output if name]
        key = None
        if not any(name in engine.known_vi_ for name in outputs):
            key = _single_node_key(node, engine.known_vi_, engine.initializers_)
        typed = results.get(key) if key is not None else None
        if typed is None:
            infer_node(node)
            if key is not None:  # copies: the op's rule retypes the engine's own next
                results[key] = [_copy(engine.known_vi_[name]) for name in outputs]
            return
        for name, result in zip(outputs, typed, strict=True):
            info = engine.out_mp_.graph.value_info.add()
            info.CopyFrom(result)
            info.name = name
            engine.known_vi_[name] = info

    return infer_single_node


def _single_node_key(node: onnx.NodeProto, types: Mapping[str, onnx.ValueInfoProto],
                     initializers: Mapping[str, onnx.TensorProto]) -> tuple[Any, ...] | None:
    """What the one-node inference of `node` depends on, with the node's value names
    replaced by their order of appearance (`Mul(x, x)` and `Mul(x, y)` differ); None where
    an input is untyped or reads an initializer above _KEY_TENSOR_BYTES (not remembered)."""
    canonical = onnx.NodeProto()
    canonical.CopyFrom(node)
    for field in _UNREAD_NODE_FIELDS:
        canonical.ClearField(field)
    numbers: dict[str, str] = {"": ""}
    for names in (canonical.input, canonical.output):
        renamed = [numbers.setdefault(name, str(len(numbers))) for name in names]
        del names[:]
        names.extend(renamed)
    inputs: list[tuple[bytes, bytes | None]] = []
    for name in dict.fromkeys(node.input):
        if not name:
            continue
        info = types.get(name)
        if info is None:
            return None
        tensor = initializers.get(name)
        if tensor is not None and tensor.ByteSize() > _KEY_TENSOR_BYTES:
            return None
        inputs.append((info.type.SerializeToString(),
                       None if tensor is None else _unnamed_bytes(tensor)))
    return canonical.SerializeToString(), tuple(inputs)


def _unnamed_bytes(tensor: onnx.TensorProto) -> bytes:
    value = onnx.TensorProto()
    value.CopyFrom(tensor)
    value.ClearField("name")
    return value.SerializeToString()


def _copy(info: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(info)
    return copy


def _static(info: onnx.ValueInfoProto) -> bool:
    if info.type.WhichOneof("value") != "tensor_type":
        return False
    tensor_type = info.type.tensor_type
    return tensor_type.HasField("shape") and tensor_type.elem_type != 0 \
        and all(d.HasField("dim_value") for d in tensor_type.shape.dim)


def bounded_engine(engine_class: type) -> None:
    """The engine class with the three bounds below: no constant built past a budget, no
    function copied for a node that does not call it, no outer value for a body that does
    not read it."""
    budget_constants(engine_class)
    called_functions_only(engine_class)
    outer_values_read_only(engine_class)


def budget_constants(engine_class: type[Any]) -> None:
    """Make the engine's ConstantOfShape rule (on `engine_class`, so the engines it starts for
    bodies follow it too) type the output without building its value when the value would
    have more than MAX_BUILT_ELEMENTS: the rule builds one only for int64 outputs, so it runs
    on the output typed as float, and the type is put back."""
    rule = engine_class._infer_ConstantOfShape

    def infer_constant_of_shape(engine: Any, node: onnx.NodeProto) -> None:
        shape = engine._get_int_or_float_values(node)[0]
        output = engine.known_vi_[node.output[0]]
        elem_type = output.type.tensor_type.elem_type
        if elem_type != onnx.TensorProto.INT64 or _elements(shape) <= MAX_BUILT_ELEMENTS:
            rule(engine, node)
            return
        output.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        try:
            rule(engine, node)
        finally:
            engine.known_vi_[node.output[0]].type.tensor_type.elem_type = elem_type

    engine_class._infer_ConstantOfShape = infer_constant_of_shape


def called_functions_only(engine_class: type) -> None:
    """Make the engine's one-node inference carry only the functions the node calls (directly
    or through others), not all of the model's: it serializes and parses its scratch model
    once per node, so 3,000 local functions took 24 s (quadratic), most of it copying them."""
    rule = getattr(engine_class, _SINGLE_NODE)

    def infer_single_node(engine: Any, node: onnx.NodeProto) -> None:
        functions = engine.out_mp_.functions
        if functions:
            scratch = engine.tmp_mp_.functions
            del scratch[:]
            scratch.extend(_called(engine, node))
        rule(engine, node)

    setattr(engine_class, _SINGLE_NODE, infer_single_node)


def outer_values_read_only(engine_class: Any) -> None:
    """Make the engine's inference of a control-flow body (If, Loop, Scan) carry only the outer
    values the body reads, not every value known so far: it makes each of them an input of
    the body's scratch graph, whose engine then walks them all, so a chain of 2,000 If nodes
    took 89 s and 4 GB (quadratic). A value the body never names cannot change what is
    inferred in it (new dims are named after the body's own values and nodes), and the
    engine's test for a body output that is an outer value reads only names the body names."""
    rule = engine_class._onnx_infer_subgraph

    @wraps(rule)  # the engine's own rule stays at __wrapped__ (tests compare the two)
    def infer_subgraph(engine: Any, node: onnx.NodeProto, subgraph: onnx.GraphProto,
                       *args: Any, **options: Any) -> Any:
        known = engine.known_vi_
        engine.known_vi_ = {name: known[name] for name in _names_read(subgraph)
                            if name in known}
        try:
            return rule(engine, node, subgraph, *args, **options)
        finally:
            engine.known_vi_ = known

    engine_class._onnx_infer_subgraph = infer_subgraph


def _names_read(graph: onnx.GraphProto) -> set[str]:
    """Every value name `graph` and the bodies inside it read: node inputs and graph outputs."""
    names = {info.name for info in graph.output}
    for node in graph.node:
        names.update(node.input)
        for body in subgraphs(node):
            names |= _names_read(body)
    return names


def _called(engine: Any, node: onnx.NodeProto) -> list[onnx.FunctionProto]:
    """The model's functions `node` calls, directly or through others (by domain and name)."""
    by_key = getattr(engine, "_graphmem_functions", None)
    if by_key is None:
        by_key = {(f.domain, f.name): f for f in engine.out_mp_.functions}
        engine._graphmem_functions = by_key
    called: dict[tuple[str, str], onnx.FunctionProto] = {}
    pending = [(node.domain, node.op_type)]
    while pending:
        key = pending.pop()
        function = by_key.get(key)
        if function is None or key in called:
            continue
        called[key] = function
        pending.extend((n.domain, n.op_type) for n in function.node)
    return list(called.values())


def _elements(shape: Any) -> int:
    """The element count of a shape value the engine holds (ints, or symbols: 0, nothing is
    built then)."""
    dims = shape if isinstance(shape, list) else [shape]
    count = 1
    for dim in dims:
        try:
            count *= max(int(dim), 0)
        except (TypeError, ValueError):
            return 0
    return count


def sympy_for_engine(sympy: ModuleType) -> ModuleType:
    """sympy as the engine module sees it (a private copy: nothing else sees the change),
    with `simplify`, `Min` and `Max` remembered. Its Slice rule simplifies the same few
    expressions for every slice of a decoder (1.5 ms each) and builds `Min(8192, seq)` for
    each (0.6 ms: sympy proves the order of the arguments every time). All three are pure
    functions of their (hashable, immutable) arguments."""
    proxy: Any = ModuleType("sympy")  # sympy is untyped: its names are Any
    proxy.__dict__.update(sympy.__dict__)
    proxy.simplify = lru_cache(maxsize=_CACHED_RESULTS)(sympy.simplify)
    proxy.Min = _Remembered(sympy.Min)
    proxy.Max = _Remembered(sympy.Max)
    return proxy


def remembered_shapes(shape_of: Callable[[onnx.TypeProto], list[Any] | None]
                      ) -> Callable[[onnx.TypeProto], list[Any] | None]:
    """The engine's `get_shape_from_type_proto` (a type's dims as ints, strings and Nones)
    remembered by the type's bytes: it reads the dims of a node's inputs and outputs several
    times per node, on the few hundred types a decoder repeats. A pure function of the type;
    each call gets its own list (the engine's rules edit the lists they are given)."""
    results: dict[bytes, list[Any] | None] = {}

    @wraps(shape_of)  # __wrapped__: the engine's own, for the tests
    def shape(type_proto: onnx.TypeProto) -> list[Any] | None:
        key = type_proto.SerializeToString()
        if key in results:
            known = results[key]
            return None if known is None else list(known)
        dims = shape_of(type_proto)  # raises as the engine's own for a type it refuses
        if len(results) >= _CACHED_RESULTS:
            results.clear()
        results[key] = None if dims is None else list(dims)
        return dims

    return shape


class _Remembered:
    """A sympy class called through a cache of its results by argument (and the arguments'
    types: `Min(x, 1)` and `Min(x, 1.0)` are equal keys to Python, not to sympy); the engine
    also tests `isinstance(e, sympy.Min)`, answered for the class itself."""

    def __init__(self, function: type) -> None:
        self._function = function  # sympy.Min or sympy.Max
        self._results: dict[tuple[Any, ...], Any] = {}

    def __call__(self, *args: Any, **options: Any) -> Any:
        if options:
            return self._function(*args, **options)
        key = tuple((type(a), a) for a in args)
        try:
            return self._results[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable argument
            return self._function(*args)
        result = self._function(*args)
        if len(self._results) >= _CACHED_RESULTS:
            self._results.clear()
        self._results[key] = result
        return result

    def __instancecheck__(self, instance: Any) -> bool:
        return isinstance(instance, self._function)
