"""Binding dynamic dims: `--batch N` and `--dim NAME=VALUE`, checked against the graph.

`--batch` binds the batch axis and nothing else (`batch_axis`): a dynamic dim of the inputs
named like a batch (`is_batch_name`: batch, batch_size, bs, N, b...), else axis 0 of the first
input whose axis 0 is a dynamic dim. An export whose axis 0 is a number in every input (a
dynamo export from a batch-1 example: PyTorch specializes a size-1 dim) has its batch fixed;
`--batch` is then refused with how to re-export, never bound to another dim such as `seq`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter

from graphmem.core.conventions import MAX_DIM_VALUE
from graphmem.core.ir import Graph, Value
from graphmem.core.routing import RoutedDim
from graphmem.core.symbolic import SymInt
from graphmem.core.units import MAX_BYTES, format_bytes
from graphmem.errors import GraphmemError

# A dim value above MAX_DIM_VALUE is a typo, not a workload: refused instead of printing exabytes.


@dataclass(frozen=True)
class DimBinding:
    """Values given to dynamic dims, and the dims left free (totals are formulas in them).

    `bound` is every dim with a value, what every size reads: those given (--batch/--dim)
    and a mixture of experts' token counts, which follow them (`routed`, bound by
    --moe-routing: graphmem/passes/routed_dims.py). A re-run at other dims gives `given`."""

    bound: dict[str, int]
    free: tuple[str, ...]
    batch_dim: str | None  # the dim `--batch` names, when the graph has one
    # where batch_dim is None: why (the batch fixed in the file, or no batch axis)
    batch_note: str = ""
    routed: tuple[RoutedDim, ...] = ()

    @property
    def given(self) -> dict[str, int]:
        """The dims given, without the routed counts that follow from them."""
        if not self.routed:
            return self.bound
        routed = {r.dim for r in self.routed}
        return {name: value for name, value in self.bound.items() if name not in routed}


# Dim names that say "batch", compared without case, `_`, `-`, `.` or spaces ("batch_size",
# "Batch", "N" as torchvision exports it, "bs"); any name starting with "batch" counts too.
BATCH_DIM_NAMES = frozenset({"batch", "batchsize", "bs", "b", "n", "nbatch", "numbatch"})


def is_batch_name(name: str) -> bool:
    key = re.sub(r"[\s_.\-]", "", name).lower()
    return key in BATCH_DIM_NAMES or key.startswith("batch")


@dataclass(frozen=True)
class BatchAxis:
    """What `--batch` binds: `dim`, else why nothing (`note`; `fixed_at` the file's batch)."""

    dim: str | None
    fixed_at: int | None = None
    note: str = ""


def batch_axis(graph: Graph) -> BatchAxis:
    """A dynamic input dim named like a batch, else the first input's dynamic axis 0."""
    for name in graph.input_dims_in_order():
        if is_batch_name(name):
            return BatchAxis(name)
    shaped = [value for value in graph.inputs if value.shape]
    for value in shaped:
        first = value.shape[0] if value.shape else None
        if first is not None and bare_dim(first) is not None:
            return BatchAxis(bare_dim(first))
    for value in shaped:
        first = value.shape[0] if value.shape else None
        if first is not None and first.is_constant:
            size = int(first)
            return BatchAxis(None, size, (
                f"the batch is fixed at {size} in the file (axis 0 of input '{value.name}' is"
                f" {size}; an exporter specializes a batch of 1): re-export it with a dynamic"
                " batch from an example batch of 2 or more, e.g. torch.onnx.export(...,"
                " dynamo=True, dynamic_shapes=...) with torch.export.Dim('batch') on axis 0,"
                " or dynamic_axes={NAME: {0: 'batch'}} with the TorchScript exporter"))
    return BatchAxis(None, None, "the model's inputs have no dynamic dim (its batch size is"
                     " fixed); re-export it with a dynamic batch axis (dynamic_axes /"
                     " dynamic_shapes)")


def bare_dim(dim: SymInt | None) -> str | None:
    """The dim's name when `dim` is a bare dim (`batch`, not `2*batch`); None for a number."""
    if dim is None or dim.is_constant or len(dim.free_symbols()) != 1:
        return None
    name = next(iter(dim.free_symbols()))
    return name if dim == SymInt.symbol(name) else None


def bind_dims(graph: Graph, batch: int | None, dims: Mapping[str, int]) -> DimBinding:
    known = graph.free_dims()
    axis = batch_axis(graph)
    batch_dim = axis.dim
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
        if batch_dim is None and axis.fixed_at == batch:
            batch = None  # the file's own batch: nothing to bind (the batch is already it)
        elif batch_dim is None:
            others = sorted(known - bound.keys())
            hint = f"; bind its other dims with --dim ({', '.join(others)})" if others else ""
            raise GraphmemError(f"--batch {batch}: {axis.note}{hint}")
        elif batch_dim in bound and bound[batch_dim] != batch:
            raise GraphmemError(
                f"--batch {batch} and --dim {batch_dim}={bound[batch_dim]} disagree:"
                f" --batch binds '{batch_dim}'; give only one of them"
            )
        if batch is not None and batch_dim is not None:
            bound[batch_dim] = batch
    free = tuple(sorted(known - bound.keys()))
    return DimBinding(bound=bound, free=free, batch_dim=batch_dim, batch_note=axis.note)


def unknown_shapes(graph: Graph) -> int:
    """Node outputs whose shape shape inference could not follow."""
    return sum(1 for node in graph.nodes for value in node.outputs if not value.shape_known)


def invented_dims(graph: Graph, free: frozenset[str] | None = None,
                  sized: frozenset[str] | None = None) -> frozenset[str]:
    """Free dims no input has: shape inference named them for sizes it could not follow, and
    binding the inputs' dims does not set them. A data-sized count (`data_sized_dims`) is not
    one: no shape inference follows it, at any dims; the dims binding sizes it (a router's
    choices, passes/routed_dims.py) or the runtime models bound it (data_bounds.py).
    `free`, `sized`: the graph's `free_dims()` and `data_sized_dims`, where already found."""
    free = graph.free_dims() if free is None else free
    sized = data_sized_dims(graph) if sized is None else sized
    return free - set(graph.input_dims_in_order()) - sized


# ops whose output size is the data's, not the shapes': NonZero x -> [rank(x), n], n the count
# of nonzero elements
DATA_SIZED_OPS = ("NonZero",)


def data_sized_dims(graph: Graph) -> frozenset[str]:
    """The counts data-sized ops' outputs name (`count_dim`)."""
    return frozenset(dim for node in graph.nodes
                     if node.op_type in DATA_SIZED_OPS and node.outputs
                     for dim in (count_dim(node.outputs[0]),) if dim is not None)


def count_dim(value: Value) -> str | None:
    """n of a NonZero output [rank, n] where n is a lone symbol (a dim the data sizes)."""
    shape = value.shape
    count = shape[1] if shape is not None and len(shape) == 2 else None
    if count is None:
        return None
    names = count.free_symbols()
    if len(names) != 1 or count != count.symbol(next(iter(names))):
        return None
    return next(iter(names))


def shape_gaps(graph: Graph) -> int:
    """What shape inference could not follow: node outputs of unknown shape, invented dims."""
    return unknown_shapes(graph) + len(invented_dims(graph))


def sizes_follow_dims(graph: Graph, dims: frozenset[str] = frozenset()) -> bool:
    """Binding dims sizes every tensor of `graph` exactly, with no new shape inference: no
    shape gap, and `dims` are free (dims fixed at import are numbers in the graph: binding
    them changes nothing)."""
    return dims <= graph.free_dims() and not shape_gaps(graph)


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


def value_bytes(graph: Graph, binding: DimBinding, table: SizeTable | None = None
                ) -> dict[str, SymInt | None]:
    """Size in bytes of every value with the bound dims substituted (None: unknown size);
    a size beyond MAX_BYTES is an error naming the tensor (check_sizes_fit). `table`:
    `SizeTable(graph)`, where the caller keeps it (the runtime models' probes bind it)."""
    return (table or SizeTable(graph)).bound(binding.bound)


class SizeTable:
    """Every value's size as one of the graph's distinct sizes (a decoder's layers repeat the
    same few hundred): `bound(dims)` binds each distinct polynomial once. `value_bytes` is one
    binding; a largest-batch search keeps the table for its many bindings of one graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.names = tuple(graph.values)
        sizes = list(map(_NBYTES, graph.values.values()))
        # values share their size objects (`Value.nbytes`): each distinct object is hashed
        # once, in the order of its first value, so the positions are those of a walk that
        # hashed every value's size (a SymInt hashes in Python)
        distinct = dict(zip(map(id, sizes), sizes, strict=True))
        position: dict[SymInt, int] = {}
        # -1: unknown size (the bound list ends with None)
        slot = {key: -1 if size is None else position.setdefault(size, len(position))
                for key, size in distinct.items()}
        self.index = tuple(map(slot.__getitem__, map(id, sizes)))
        self.sizes = tuple(position)

    def bound(self, dims: Mapping[str, int]) -> dict[str, SymInt | None]:
        """`value_bytes` at `dims`: the same sizes, the same error for one too large."""
        bound: list[SymInt | None] = [size.bind(dims) for size in self.sizes]
        largest = max((int(s) for s in bound if s is not None and s.is_constant), default=0)
        bound.append(None)
        # each name with its slot's size, paired in C (the names and slots are the values')
        sizes = dict(zip(self.names, map(bound.__getitem__, self.index), strict=True))
        if largest > MAX_BYTES:
            check_sizes_fit(sizes, dims)  # names the first tensor too large
        return sizes


_NBYTES = attrgetter("nbytes")


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

