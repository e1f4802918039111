"""onnxruntime's symbolic engine, made cheaper where its work repeats: sympy's simplify, Min
and Max remembered (the same few expressions come back for every layer of a decoder), and no
per-node onnx inference where onnx already typed a node's outputs with numbers only.

Before each node's symbolic rule, the engine runs onnx's shape inference on that node alone (a
one-node model built, serialized and parsed: 20 to 45 us). On the part of a decoder that
infer.py hands it, half the nodes are shape arithmetic (Shape, Gather, Unsqueeze, Concat)
whose outputs onnx's whole-graph pass already typed as static: `[3]`, `[]`, `[1]`. For those
the engine is given the same value infos directly; its rules still run on every node (they
compute the values the next rules read) and overwrite what they type.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from types import ModuleType
from typing import Any

import onnx

# Marks a model whose value infos are onnx's static types for its nodes' outputs (infer.py's
# part of a graph), never an exporter's declarations. The value is a secret of this process:
# a model file carrying the key (it is untrusted data) cannot carry the value.
STATIC_TYPES_KEY = "graphmem.static_types"
STATIC_TYPES_TOKEN = secrets.token_hex(16)
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
# The engine's one-node inference, which this replaces for static nodes (onnxruntime's name)
_SINGLE_NODE = "_onnx_infer_single_node"


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
    infer_node = getattr(engine, _SINGLE_NODE)

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


def _static(info: onnx.ValueInfoProto) -> bool:
    if info.type.WhichOneof("value") != "tensor_type":
        return False
    tensor_type = info.type.tensor_type
    return tensor_type.HasField("shape") and tensor_type.elem_type != 0 \
        and all(d.HasField("dim_value") for d in tensor_type.shape.dim)


def sympy_for_engine(sympy: ModuleType) -> ModuleType:
    """sympy as the engine module sees it (a private copy: nothing else sees the change),
    with `simplify`, `Min` and `Max` remembered. Its Slice rule simplifies the same few
    expressions for every slice of a decoder (1.5 ms each) and builds `Min(8192, seq)` for
    each (0.6 ms: sympy proves the order of the arguments every time). All three are pure
    functions of their (hashable, immutable) arguments."""
    proxy = ModuleType("sympy")
    proxy.__dict__.update(sympy.__dict__)
    proxy.simplify = lru_cache(maxsize=_CACHED_RESULTS)(sympy.simplify)
    proxy.Min = _Remembered(sympy.Min)
    proxy.Max = _Remembered(sympy.Max)
    return proxy


class _Remembered:
    """A sympy class called through a cache of its results by argument (and the arguments'
    types: `Min(x, 1)` and `Min(x, 1.0)` are equal keys to Python, not to sympy); the engine
    also tests `isinstance(e, sympy.Min)`, answered for the class itself."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self._function = function
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
        return isinstance(instance, self._function)  # type: ignore[arg-type]
