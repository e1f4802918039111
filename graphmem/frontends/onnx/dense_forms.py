"""A model's compact tensors in the one form every reader after the parse meets: dense tensors.

onnxruntime makes each of these a dense initializer when it loads a model (its Graph
constructor): a sparse initializer, a Constant node's `sparse_value`, and a Constant's
`value_floats` / `value_ints` / `value_strings`. So does graphmem, right after parsing: a
sparse tensor becomes a dense tensor of its dims and dtype without data (its values are
never read; a sparse tensor of 10**12 elements declares 4 TB that the file does not hold, and
the byte counts see that), and a list attribute above KEEP_BYTES the `value` tensor of its
dtype and count without data (a file of 32 MiB or more has had that done by lean_read.py
before protobuf saw it). What is left is what graphmem reads everywhere else: initializers and
Constant `value` tensors, counted by their dims.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import AttributeProto, TensorProto

from graphmem.frontends.onnx.untrusted import subgraphs

_LISTS = {"value_floats": ("floats", TensorProto.FLOAT),
          "value_ints": ("ints", TensorProto.INT64),
          "value_strings": ("strings", TensorProto.STRING)}


def densify(model: onnx.ModelProto, keep_bytes: int,
            found: tuple[list[onnx.GraphProto], list[onnx.NodeProto]] | None = None) -> bool:
    """Sparse initializers and Constant `sparse_value`s, in every scope, as dense tensors
    without data; Constant list attributes above `keep_bytes` as `value` tensors without
    data. In place; True where anything changed (a decoder: nothing). `found`: every graph
    of the model and every node with an attribute of a compact form's name (validation.py's
    walk of a model without functions or training graphs), not walked for again."""
    changed = False
    # one walk over the bodies, for both steps
    graphs = list(_graphs(model)) if found is None else found[0]
    for graph in graphs:
        if graph.sparse_initializer:
            changed = True
            graph.initializer.extend(_dense(sparse) for sparse in graph.sparse_initializer)
            graph.ClearField("sparse_initializer")
    every = (*(graph.node for graph in graphs), *(f.node for f in model.functions))
    for nodes in every if found is None else (found[1],):
        for node in nodes:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") \
                    and len(node.attribute) == 1:
                changed = _densify_constant(node, keep_bytes) or changed
    return changed


def _densify_constant(node: onnx.NodeProto, keep_bytes: int) -> bool:
    attribute = node.attribute[0]
    if attribute.type == AttributeProto.SPARSE_TENSOR and attribute.name == "sparse_value":
        tensor = _dense(attribute.sparse_tensor)
    elif attribute.name in _LISTS and attribute.ByteSize() > keep_bytes:
        field, dtype = _LISTS[attribute.name]
        tensor = TensorProto(dims=[len(getattr(attribute, field))], data_type=dtype)
    else:
        return False
    node.ClearField("attribute")
    node.attribute.append(AttributeProto(name="value", type=AttributeProto.TENSOR, t=tensor))
    return True


def _dense(sparse: onnx.SparseTensorProto) -> TensorProto:
    """The sparse tensor's dense form (name, dims and dtype of its values), without data."""
    return TensorProto(name=sparse.values.name, dims=list(sparse.dims),
                       data_type=sparse.values.data_type)


def _graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """The main graph, the training graphs and every body inside them or in functions (an
    explicit stack)."""
    pending = [model.graph]
    for info in model.training_info:
        pending.extend((info.initialization, info.algorithm))
    pending.extend(body for f in model.functions for n in f.node for body in subgraphs(n))
    while pending:
        graph = pending.pop()
        yield graph
        # a node without attributes has no body (most of a decoder's)
        pending.extend(body for node in graph.node if node.attribute
                       for body in subgraphs(node))
