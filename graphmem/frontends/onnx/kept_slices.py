"""Slices onnx's inference gives up on: a Slice whose end is computed (`table[:seq]`) comes
out with no dims at all, and so does all that follows. Where its `axes` are constant and its
input's rank known, its output keeps the input's dims on the axes it does not slice, and a
rotary table's sliced axis is named as onnxruntime's rules name it (seq_dims.py), for onnx's
second pass (infer.py)."""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.seq_dims import SeqDims, kept_dims
from graphmem.frontends.onnx.value_types import (
    MAX_VALUE_ELEMENTS,
    constant_tensor,
    initializer_types,
    int_values,
)


def kept_slice_dims(model_graph: onnx.GraphProto, inferred: onnx.GraphProto,
                    seq: SeqDims, index: GraphIndex | None = None,
                    types: Mapping[str, onnx.ValueInfoProto] | None = None
                    ) -> list[onnx.ValueInfoProto]:
    """For each Slice whose output onnx left unknown, with constant `axes` and an input of
    known rank (a value, or an initializer: a table written as one): its output typed with the
    input's dims on the axes it does not slice, the sliced ones unknown. onnx's Slice rule gives
    up on every dim when an end is computed (`table[:seq]`), and on all that follows; a rotary
    table's `table[:seq]` gets its sliced dim too (`SeqDims.slice_dim`). `index`: the model
    graph's (graph_index.py), `types`: `inferred`'s inputs', value infos' and outputs' types by
    name, where the caller has them (read only)."""
    if types is None:
        types = {v.name: v for v in (*inferred.input, *inferred.value_info, *inferred.output)}
    index = index or GraphIndex(model_graph)
    slices = [node for node in index.nodes("Slice")
              if node.domain in ("", "ai.onnx")
              and len(node.input) >= 4 and not index.known(types.get(node.output[0]))]
    if not slices:
        return []
    # an initializer's type over a value info of the same name (onnx writes none for one)
    tables = initializer_types(index.initializer, {node.input[0] for node in slices})
    # only the axes of these slices are read: a decoder has thousands of other constants
    constants = _constant_ints(index, {node.input[3] for node in slices})
    kept_by_type: dict[tuple[bytes, tuple[int, ...]], onnx.ValueInfoProto | None] = {}
    result = []
    for node in slices:
        source = tables.get(node.input[0])
        if source is None:
            source = types.get(node.input[0])
        axes = constants.get(node.input[3])
        if source is None or axes is None:
            continue
        # a decoder's slices cut a few distinct types along the same axes
        key = (source.type.SerializeToString(), tuple(axes))
        if key not in kept_by_type:
            kept_by_type[key] = kept_dims(source, axes)
        made = kept_by_type[key]
        if made is not None:
            kept = onnx.ValueInfoProto()
            kept.CopyFrom(made)
            result.append(kept)
            kept.name = node.output[0]
            _sliced_dim(kept, node, source, axes, seq)
    return result


def _sliced_dim(kept: onnx.ValueInfoProto, node: onnx.NodeProto,
                source: onnx.ValueInfoProto, axes: list[int], seq: SeqDims) -> None:
    """The one sliced axis of literal length named as onnxruntime's rules name it, where
    they do so by a rule seq_dims.py follows."""
    dims = source.type.tensor_type.shape.dim
    if len(axes) != 1:
        return
    axis = axes[0] % len(dims)  # in range: kept_dims checked it
    if not dims[axis].HasField("dim_value"):
        return
    name = seq.slice_dim(node, dims[axis].dim_value)
    if name is not None:
        kept.type.tensor_type.shape.dim[axis].dim_param = name


def _constant_ints(index: GraphIndex, wanted: set[str]) -> dict[str, list[int]]:
    """The `wanted` values that are 1-D integer Constant nodes or initializers with their
    values inline (after folding: the axes of a slice are always one); a Constant node's value
    over an initializer's of the same name."""
    values: dict[str, list[int]] = {}
    tensors = []
    for name in wanted:
        tensor = index.initializer.get(name)
        if tensor is not None:
            tensors.append((name, tensor))
        node = index.producer.get(name)
        if node is not None and (tensor := constant_tensor(node)) is not None:
            tensors.append((name, tensor))
    for name, tensor in tensors:
        if tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) \
                and len(tensor.dims) == 1 and tensor.dims[0] <= MAX_VALUE_ELEMENTS \
                and tensor.data_location != onnx.TensorProto.EXTERNAL:
            decoded = int_values(tensor)  # None: data of the wrong size, the engines will say so
            if decoded is not None:
                values[name] = decoded
    return values
