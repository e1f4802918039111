"""graphmem's one graph IR: nodes, values (tensors) and explicit use-def links.

Importers build it; every pass reads it. Nothing here knows ONNX or torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum

from graphmem.core.symbolic import SymInt, product


class Role(StrEnum):
    """What a tensor is for; decides how long it lives and where it is counted."""

    INPUT = "input"
    PARAMETER = "parameter"
    BUFFER = "buffer"  # non-trainable state, e.g. BatchNorm running statistics
    CONSTANT = "constant"  # shape tensors, scalars, Constant-node outputs
    ACTIVATION = "activation"
    OUTPUT = "output"
    GRADIENT = "gradient"  # gradients of parameters
    OPTIMIZER_STATE = "optimizer_state"
    SAVED_ACTIVATION = "saved_activation"  # forward tensors the backward pass reads
    ACTIVATION_GRADIENT = "activation_gradient"  # backward tensors other than parameter grads
    TEMPORARY = "temporary"  # optimizer-step intermediates


RESIDENT_ROLES = frozenset(
    {Role.INPUT, Role.PARAMETER, Role.BUFFER, Role.CONSTANT, Role.OPTIMIZER_STATE}
)


class DType(Enum):
    """Element types with their width in bits (sub-byte types are 4 bits)."""

    FLOAT32 = ("float32", 32, True)
    FLOAT16 = ("float16", 16, True)
    BFLOAT16 = ("bfloat16", 16, True)
    FLOAT64 = ("float64", 64, True)
    FLOAT8 = ("float8", 8, True)
    INT64 = ("int64", 64, False)
    INT32 = ("int32", 32, False)
    INT16 = ("int16", 16, False)
    INT8 = ("int8", 8, False)
    UINT64 = ("uint64", 64, False)
    UINT32 = ("uint32", 32, False)
    UINT16 = ("uint16", 16, False)
    UINT8 = ("uint8", 8, False)
    INT4 = ("int4", 4, False)
    UINT4 = ("uint4", 4, False)
    BOOL = ("bool", 8, False)
    COMPLEX64 = ("complex64", 64, True)
    COMPLEX128 = ("complex128", 128, True)
    STRING = ("string", 0, False)  # variable size: counted as unknown
    UNKNOWN = ("unknown", 0, False)

    def __init__(self, label: str, bits: int, is_float: bool) -> None:
        self.label = label
        self.bits = bits
        self.is_float = is_float

    @property
    def has_known_size(self) -> bool:
        return self.bits > 0


# A dim is a size (possibly symbolic) or None when shape inference could not tell.
Dim = SymInt | None
Shape = tuple[Dim, ...]


@dataclass(eq=False)
class Value:
    """A tensor: its type, shape, role and the nodes that make and use it."""

    name: str
    dtype: DType
    shape: Shape | None  # None: rank unknown
    role: Role
    producer: Node | None = None
    consumers: list[Node] = field(default_factory=list)
    # A view or an in-place result shares the storage of `alias_of` and allocates nothing.
    alias_of: Value | None = None
    # The node after which the framework drops its last reference (eager PyTorch keeps a
    # tensor while a Python variable holds it, past its last use); None: at its last use.
    held_until: Node | None = None
    # (shape, dtype, nbytes) of the last `nbytes` call: shapes are tuples, replaced, never
    # mutated, so the cache holds while `shape` and `dtype` are the same objects.
    _nbytes_cache: tuple[Shape | None, DType, SymInt | None] | None = field(
        default=None, repr=False)

    @property
    def storage(self) -> Value:
        """The value that owns this value's memory (itself unless it is an alias)."""
        value = self
        while value.alias_of is not None:
            value = value.alias_of
        return value

    @property
    def shape_known(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    @property
    def numel(self) -> SymInt | None:
        if self.shape is None or any(d is None for d in self.shape):
            return None
        return product(d for d in self.shape if d is not None)

    @property
    def nbytes(self) -> SymInt | None:
        """Exact size in bytes; None when the shape or the element size is unknown."""
        cache = self._nbytes_cache
        if cache is not None and cache[0] is self.shape and cache[1] is self.dtype:
            return cache[2]
        numel = self.numel
        size = None
        if numel is not None and self.dtype.has_known_size:
            size = numel.scaled(self.dtype.bits, 8)
        self._nbytes_cache = (self.shape, self.dtype, size)
        return size

    def shape_text(self, dims: Mapping[str, int] | None = None) -> str:
        """`[batch, 3, 224, 224]`, or `[8, 3, 224, 224]` with batch bound; `?` where unknown."""
        if self.shape is None:
            return "?"
        texts = ("?" if d is None else str(d.bind(dims or {})) for d in self.shape)
        return "[" + ", ".join(texts) + "]"

    def __repr__(self) -> str:
        return f"Value({self.name} {self.dtype.label}{self.shape_text()} {self.role})"


AttributeValue = int | float | str | bytes | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]


@dataclass(frozen=True)
class ImportedCost:
    """Arithmetic an importer already knows from its framework's own formulas."""

    macs: int
    flops: int


@dataclass(eq=False)
class Node:
    """One operator application. Missing optional inputs are None."""

    name: str
    op_type: str
    inputs: list[Value | None]
    outputs: list[Value]
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    domain: str = ""
    module_path: str = ""  # e.g. "layer3.1.conv2" where the importer knows it
    subgraph_node_count: int = 0  # nodes inside If/Loop/Scan bodies, accounted conservatively
    imported_cost: ImportedCost | None = None  # e.g. from PyTorch's FlopCounterMode formulas

    @property
    def present_inputs(self) -> list[Value]:
        return [v for v in self.inputs if v is not None]

    def input(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def attr_int(self, name: str, default: int) -> int:
        value = self.attributes.get(name, default)
        return int(value)  # type: ignore[arg-type]

    def attr_ints(self, name: str, default: tuple[int, ...] = ()) -> tuple[int, ...]:
        value = self.attributes.get(name, default)
        return tuple(int(v) for v in value)  # type: ignore[union-attr]

    def attr_str(self, name: str, default: str) -> str:
        value = self.attributes.get(name, default)
        return value.decode() if isinstance(value, bytes) else str(value)

    def describe(self) -> str:
        """How errors and reports name a node: `Conv /layer1/conv`."""
        return f"{self.op_type} {self.name}"

    def __repr__(self) -> str:
        return f"Node({self.describe()})"


@dataclass(eq=False)
class Graph:
    """A model: nodes in the model's own (topological) order and every value by name."""

    name: str
    nodes: list[Node]
    values: dict[str, Value]
    inputs: list[Value]
    outputs: list[Value]
    opset: int = 0
    source_format: str = ""  # "onnx", "torch.fx"

    def values_with_role(self, *roles: Role) -> Iterator[Value]:
        return (v for v in self.values.values() if v.role in roles)

    def free_dims(self) -> frozenset[str]:
        """Names of every dynamic dim that appears in a value's shape."""
        names: set[str] = set()
        for value in self.values.values():
            for dim in value.shape or ():
                if dim is not None:
                    names |= dim.free_symbols()
        return frozenset(names)

    def input_dims_in_order(self) -> list[str]:
        """Dynamic dim names of the graph inputs, first seen first (what `--batch` binds)."""
        ordered: dict[str, None] = {}
        for value in self.inputs:
            for dim in value.shape or ():
                for name in sorted(dim.free_symbols()) if dim is not None else ():
                    ordered.setdefault(name)
        return list(ordered)
