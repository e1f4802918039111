"""Parameter accounting: trainable parameters, buffers and constants held by the graph.

Quantized weights are parameters too, counted at the type they are stored in: an int8
initializer that a DequantizeLinear, QLinearConv, MatMulInteger or QGemm reads as its quantized
input, a packed MatMulNBits weight (N x K parameters in N * ceil(K / block) * block * bits / 8
bytes), an ONNX int4 tensor (two parameters per byte). Their scales and zero points are the
quantization's overhead (`quantization_bytes`), neither parameters nor constants. Which inputs
are which comes from graphmem/ops/quantized.py. So a quantized model has the parameter count of
its float model, and params + buffers + constants + quantization bytes are the bytes of every
initializer in the file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeGuard

from graphmem.core.ir import Graph, Role, Value
from graphmem.ops.quantized import StoredWeight, quantized_operands, stored_weight

# Roles of the tensors a model file stores (initializers and Constant nodes)
_STORED_ROLES = (Role.PARAMETER, Role.BUFFER, Role.CONSTANT)


@dataclass(frozen=True)
class QuantizedParams:
    """Quantized weights of one stored type: how many parameters, in how many bytes."""

    dtype: str  # as stored: "int8", "uint8", "int4", "uint4" (MatMulNBits bits=4), "int32"
    count: int
    bytes: int


@dataclass(frozen=True)
class ParamReport:
    """Counts and bytes of the resident tensors a model carries. Shared tensors count once.

    `count` and `bytes` include the quantized weights (`quantized`, by stored type);
    `quantization_bytes` are their scales and zero points."""

    count: int
    bytes: int
    buffer_count: int
    buffer_bytes: int
    constant_bytes: int
    bytes_by_dtype: dict[str, int]
    quantized: tuple[QuantizedParams, ...] = ()
    quantization_bytes: int = 0

    @property
    def quantized_count(self) -> int:
        return sum(group.count for group in self.quantized)


@dataclass(frozen=True)
class _Quantization:
    weights: dict[Value, StoredWeight]  # stored quantized values: their parameters
    metadata: set[Value]  # stored scales and zero points


def count_params(graph: Graph) -> ParamReport:
    quantization = _find_quantization(graph)
    skip = quantization.metadata | quantization.weights.keys()
    # one walk over the values for the three roles (each list in the values' order)
    parameters: list[Value] = []
    buffers: list[Value] = []
    constants: list[Value] = []
    by_role = {Role.PARAMETER: parameters, Role.BUFFER: buffers, Role.CONSTANT: constants}
    for value in graph.values.values():
        kept = by_role.get(value.role)
        if kept is not None and value not in skip:
            kept.append(value)
    by_dtype: dict[str, int] = {}
    stored = [stored_bytes(v) for v in parameters]  # each parameter's bytes found once
    for value, size in zip(parameters, stored, strict=True):
        by_dtype[value.dtype.label] = by_dtype.get(value.dtype.label, 0) + size
    quantized = _group_quantized(quantization.weights)
    for group in quantized:
        by_dtype[group.dtype] = by_dtype.get(group.dtype, 0) + group.bytes
    return ParamReport(
        count=sum(_numel(v) for v in parameters) + sum(g.count for g in quantized),
        bytes=sum(stored) + sum(g.bytes for g in quantized),
        buffer_count=sum(_numel(v) for v in buffers),
        buffer_bytes=sum(stored_bytes(v) for v in buffers),
        constant_bytes=sum(stored_bytes(v) for v in constants),
        bytes_by_dtype=by_dtype,
        quantized=quantized,
        quantization_bytes=sum(stored_bytes(v) for v in quantization.metadata),
    )


@dataclass(frozen=True)
class PackedWeights:
    """Weights a front end stores packed in a wider element type (NF4: two 4-bit codes per
    uint8 parameter element), and their quantization constants (held as buffers)."""

    dtype: str  # the quantized type, e.g. "nf4"
    parameters: int  # elements of the weights in the unquantized model
    stored_count: int  # elements of the packed parameters (uint8: one per byte)
    stored_bytes: int
    constant_count: int  # elements of the constants' buffers
    constant_bytes: int


def with_packed_weights(report: ParamReport, packed: PackedWeights) -> ParamReport:
    """`report` with `packed` counted as the ONNX path counts quantized weights: parameters by
    their unquantized elements, listed by type in `quantized`, their bytes as stored; the
    constants are quantization bytes, not buffers."""
    by_dtype = dict(report.bytes_by_dtype)
    by_dtype["uint8"] = by_dtype.get("uint8", 0) - packed.stored_bytes
    if by_dtype["uint8"] <= 0:
        del by_dtype["uint8"]
    by_dtype[packed.dtype] = by_dtype.get(packed.dtype, 0) + packed.stored_bytes
    group = QuantizedParams(packed.dtype, packed.parameters, packed.stored_bytes)
    return replace(
        report,
        count=report.count - packed.stored_count + packed.parameters,
        buffer_count=report.buffer_count - packed.constant_count,
        buffer_bytes=report.buffer_bytes - packed.constant_bytes,
        bytes_by_dtype=by_dtype,
        quantized=(*report.quantized, group),
        quantization_bytes=report.quantization_bytes + packed.constant_bytes,
    )


def _find_quantization(graph: Graph) -> _Quantization:
    """The stored tensors quantized ops read as quantized values, scales or zero points."""
    weights: dict[Value, StoredWeight] = {}
    metadata: set[Value] = set()
    for node in graph.nodes:
        operands = quantized_operands(node)
        if operands is None:
            continue
        for index in operands.data:
            value = node.input(index)
            # a scalar is a per-tensor constant, as the importer treats float scalars
            if _is_stored(value) and _numel(value) > 1:
                weights.setdefault(value, stored_weight(node, value))
        for index in (*operands.scales, *operands.zero_points):
            value = node.input(index)
            if _is_stored(value):
                metadata.add(value)
    return _Quantization(weights, metadata - weights.keys())


def _is_stored(value: Value | None) -> TypeGuard[Value]:
    """An initializer or a Constant node's value: what the file holds."""
    return value is not None and value.producer is None and value.role in _STORED_ROLES


def _group_quantized(weights: dict[Value, StoredWeight]) -> tuple[QuantizedParams, ...]:
    counts: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for value, stored in weights.items():
        counts[stored.dtype] = counts.get(stored.dtype, 0) + stored.parameters
        sizes[stored.dtype] = sizes.get(stored.dtype, 0) + stored_bytes(value)
    return tuple(QuantizedParams(dtype, counts[dtype], sizes[dtype]) for dtype in sorted(counts))


def _numel(value: Value) -> int:
    # Initializer and constant shapes are always concrete.
    return int(value.numel) if value.numel is not None else 0


def stored_bytes(value: Value) -> int:
    """Bytes of a stored tensor: numel * bits / 8, a sub-byte type rounded up to whole bytes
    (ONNX packs int4/uint4 two to a byte, the last one padded when numel is odd)."""
    if value.numel is None or not value.dtype.has_known_size:
        return 0
    bits = int(value.numel) * value.dtype.bits
    return -(-bits // 8)
