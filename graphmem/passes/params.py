"""Parameter accounting: trainable parameters, buffers and constants held by the graph."""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.ir import Graph, Role, Value


@dataclass(frozen=True)
class ParamReport:
    """Counts and bytes of the resident tensors a model carries. Shared tensors count once."""

    count: int
    bytes: int
    buffer_count: int
    buffer_bytes: int
    constant_bytes: int
    bytes_by_dtype: dict[str, int]


def count_params(graph: Graph) -> ParamReport:
    parameters = list(graph.values_with_role(Role.PARAMETER))
    buffers = list(graph.values_with_role(Role.BUFFER))
    constants = list(graph.values_with_role(Role.CONSTANT))
    by_dtype: dict[str, int] = {}
    for value in parameters:
        by_dtype[value.dtype.label] = by_dtype.get(value.dtype.label, 0) + _bytes(value)
    return ParamReport(
        count=sum(_numel(v) for v in parameters),
        bytes=sum(_bytes(v) for v in parameters),
        buffer_count=sum(_numel(v) for v in buffers),
        buffer_bytes=sum(_bytes(v) for v in buffers),
        constant_bytes=sum(_bytes(v) for v in constants),
        bytes_by_dtype=by_dtype,
    )


def _numel(value: Value) -> int:
    # Initializer and constant shapes are always concrete.
    return int(value.numel) if value.numel is not None else 0


def _bytes(value: Value) -> int:
    return int(value.nbytes) if value.nbytes is not None else 0
