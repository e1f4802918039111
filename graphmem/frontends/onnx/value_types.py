"""What onnx's shape inference knows of a value's type: every dim (a number, or a dim name
the model declares: `unk__N` is onnx's name for a size it could not infer), how many dims, and
whether the tensor is small enough to be a shape vector or a scalar."""

from __future__ import annotations

from collections.abc import Iterable

import onnx

# A tensor with at most this many elements may be a shape vector or a scalar whose value
# onnxruntime's rules read (fold.py's bound for the same tensors).
MAX_VALUE_ELEMENTS = 64


def fully_known_names(infos: Iterable[onnx.ValueInfoProto]) -> set[str]:
    """The names of `infos` that are fully_known, each distinct type judged once (a
    decoder's layers repeat a few hundred types)."""
    verdicts: dict[bytes, bool] = {}
    names = set()
    for info in infos:
        key = info.type.SerializeToString()
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = fully_known(info)
        if verdict:
            names.add(info.name)
    return names


def fully_known(info: onnx.ValueInfoProto | None) -> bool:
    """A tensor of known rank with every dim known (dim_known)."""
    if info is None or info.type.WhichOneof("value") != "tensor_type":
        return False
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return False
    return all(dim_known(d) for d in tensor_type.shape.dim)


def dim_known(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """A number, or a name other than onnx's `unk__N` for a size it could not infer."""
    kind = dim.WhichOneof("value")
    return kind == "dim_value" or (kind == "dim_param" and not dim.dim_param.startswith("unk__"))


def small_value(info: onnx.ValueInfoProto | None) -> bool:
    """A tensor small enough to be a shape vector or a scalar (rules may read its value);
    unknown shapes count as small (the tensor's producer is in the part anyway)."""
    if info is None or info.type.WhichOneof("value") != "tensor_type":
        return True
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return True
    count = 1
    for dim in tensor_type.shape.dim:
        if dim.WhichOneof("value") != "dim_value":
            return False
        count *= dim.dim_value
    return count <= MAX_VALUE_ELEMENTS


def known_dims(info: onnx.ValueInfoProto) -> int:
    """How much of a shape is known: -1 without a rank, else the count of known dims."""
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return -1
    return sum(
        1 for d in tensor_type.shape.dim
        if d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__"))
    )
