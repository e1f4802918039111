"""Binding dynamic dims: `--batch N` and `--dim NAME=VALUE`, checked against the graph."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphmem.core.conventions import MAX_DIM_VALUE
from graphmem.core.ir import Graph, Value
from graphmem.core.symbolic import SymInt
from graphmem.core.units import MAX_BYTES, format_bytes
from graphmem.errors import GraphmemError

# A dim value above MAX_DIM_VALUE is a typo, not a workload: refused instead of printing exabytes.


@dataclass(frozen=True)
class DimBinding:
    """Values given to dynamic dims, and the dims left free (totals are formulas in them)."""

    bound: dict[str, int]
    free: tuple[str, ...]
    batch_dim: str | None  # the dim `--batch` names, when the graph has one


def bind_dims(graph: Graph, batch: int | None, dims: Mapping[str, int]) -> DimBinding:
    known = graph.free_dims()
    input_dims = graph.input_dims_in_order()
    batch_dim = input_dims[0] if input_dims else None
    bound = dict(dims)
    for name, value in bound.items():
        check_dim_value(f"--dim {name}={value}", value)
        if name not in known:
            raise GraphmemError(
                f"--dim {name}={value}: the model has no dynamic dim named '{name}';"
                f" {_known_dims_text(known)}"
            )
    if batch is not None:
        check_dim_value(f"--batch {batch}", batch)
        if batch_dim is None:
            raise GraphmemError(
                f"--batch {batch}: the model's inputs have no dynamic dim (its batch size is"
                " fixed); re-export it with a dynamic batch axis (dynamic_axes / dynamic_shapes)"
            )
        if batch_dim in bound and bound[batch_dim] != batch:
            raise GraphmemError(
                f"--batch {batch} and --dim {batch_dim}={bound[batch_dim]} disagree:"
                f" --batch binds '{batch_dim}'; give only one of them"
            )
        bound[batch_dim] = batch
    free = tuple(sorted(known - bound.keys()))
    return DimBinding(bound=bound, free=free, batch_dim=batch_dim)


def check_dim_value(flag: str, value: int) -> None:
    """A dim value of 1 to MAX_DIM_VALUE; `flag` names where it was given (`--batch 0`)."""
    if value <= 0:
        raise GraphmemError(f"{flag}: dims must be positive integers (1 or more)")
    if value > MAX_DIM_VALUE:
        raise GraphmemError(
            f"{flag}: {value} is implausibly large (the limit is {MAX_DIM_VALUE}); check the number"
        )


def _known_dims_text(known: frozenset[str]) -> str:
    if not known:
        return "the model has no dynamic dims (all its shapes are fixed)"
    return "its dynamic dims are: " + ", ".join(sorted(known))


def value_bytes(graph: Graph, binding: DimBinding) -> dict[str, SymInt | None]:
    """Size in bytes of every value with the bound dims substituted (None: unknown size);
    a size beyond MAX_BYTES is an error naming the tensor (check_sizes_fit)."""
    sizes = {name: _bound_bytes(value, binding.bound) for name, value in graph.values.items()}
    check_sizes_fit(sizes, binding.bound)
    return sizes


def check_sizes_fit(sizes: Mapping[str, SymInt | None], dims: Mapping[str, int]) -> None:
    """Every size that is a number is at most MAX_BYTES (2**62): a larger one is a typo in
    --batch/--dim or in the model's shapes, and would overflow 64-bit integers downstream
    (numpy, onnxruntime, the allocator models). Sizes still formulas in free dims pass."""
    for name, size in sizes.items():
        if size is not None and size.is_constant and int(size) > MAX_BYTES:
            at = ", ".join(f"{k}={v}" for k, v in sorted(dims.items())) or "its static shape"
            raise GraphmemError(
                f"tensor '{name}' would hold {int(size):,} bytes ({format_bytes(int(size))}) at"
                f" {at}, more than 2**62 bytes (4 EiB): check --batch/--dim (or the model's"
                " shapes)")


def _bound_bytes(value: Value, dims: Mapping[str, int]) -> SymInt | None:
    nbytes = value.nbytes
    return None if nbytes is None else nbytes.bind(dims)
