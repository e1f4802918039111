"""graphmem's one graph IR: nodes, values (tensors) and explicit use-def links.

Importers build it; every pass reads it. Nothing here knows ONNX or torch.

The use-def links (`Value.producer`, `Value.consumers`) are kept by the graph, never by hand:
`Graph.add_node` links a node to what it reads and makes, `Node.replace_input`/`set_inputs`
relink one end and the other, `Graph.remove_node` unlinks. `Graph.check()` verifies every
invariant the passes rely on (the tests run it after every front end and training expansion).
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


class Phase(StrEnum):
    """Which part of a training step a node runs in; NONE for an inference graph."""

    NONE = "none"
    FORWARD = "forward"  # the model and the loss
    BACKWARD = "backward"  # autograd: gradients, recomputation, gradient accumulation
    OPTIMIZER = "optimizer"  # the parameter update


class GraphCheckError(RuntimeError):
    """A graph breaks an IR invariant: a bug in the code that built or changed it."""


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
# shape_text's results by (shape, dims): SymInts are immutable and compare by value
_SHAPE_TEXTS: dict[tuple[Shape, tuple[tuple[str, int], ...]], str] = {}
_MAX_SHAPE_TEXTS = 1 << 14
Sizes = tuple[Shape | None, DType, SymInt | None, SymInt | None]  # value_sizes


@dataclass(eq=False, slots=True)
class Value:
    """A tensor: its type, shape, role and the nodes that make and use it."""

    name: str
    dtype: DType
    shape: Shape | None  # None: rank unknown
    role: Role
    # The node that makes it (None: an input, weight or constant) and every node that reads it,
    # each once, in the order they were linked: kept by Graph.add_node and Node's relinking
    # methods, never assigned by hand.
    producer: Node | None = None
    consumers: list[Node] = field(default_factory=list)
    # A view or an in-place result shares the storage of `alias_of` and allocates nothing.
    alias_of: Value | None = None
    # The node after which the framework drops its last reference (eager PyTorch keeps a
    # tensor while a Python variable holds it, past its last use); None: at its last use.
    held_until: Node | None = None
    # (shape, dtype, nbytes, numel) of the last `nbytes` or `numel` call: shapes are tuples,
    # replaced, never mutated, so the cache holds while `shape` and `dtype` are the same
    # objects (cost rules and passes ask each value's numel several times).
    _nbytes_cache: Sizes | None = field(default=None, repr=False)

    @property
    def storage(self) -> Value:
        """The value that owns this value's memory (itself unless it is an alias)."""
        value = self
        while value.alias_of is not None:
            value = value.alias_of
        return value

    @property
    def shape_known(self) -> bool:
        # numel: the dims' product (never None) where rank and dims are known; None else; cached
        return self.numel is not None

    @property
    def numel(self) -> SymInt | None:
        # `_sizes`'s cache check, without its call: the passes ask each of a decoder's
        # 34,000 values its size once or twice
        cache = self._nbytes_cache
        if cache is not None and cache[0] is self.shape and cache[1] is self.dtype:
            return cache[3]
        return self._sizes()[3]

    @property
    def nbytes(self) -> SymInt | None:
        """Exact size in bytes; None when the shape or the element size is unknown."""
        cache = self._nbytes_cache  # checked as `numel` checks it
        if cache is not None and cache[0] is self.shape and cache[1] is self.dtype:
            return cache[2]
        return self._sizes()[2]

    def _sizes(self) -> Sizes:
        cache = self._nbytes_cache
        shape, dtype = self.shape, self.dtype
        if cache is not None and cache[0] is shape and cache[1] is dtype:
            return cache
        cache = self._nbytes_cache = value_sizes(shape, dtype)
        return cache

    def shape_text(self, dims: Mapping[str, int] | None = None) -> str:
        """`[batch, 3, 224, 224]`, or `[8, 3, 224, 224]` with batch bound; `?` where unknown."""
        shape = self.shape
        if shape is None:
            return "?"
        # a decoder repeats the same few shapes in every layer: each text is made once
        key = (shape, tuple(dims.items()) if dims else ())
        text = _SHAPE_TEXTS.get(key)
        if text is None:
            if len(_SHAPE_TEXTS) >= _MAX_SHAPE_TEXTS:
                _SHAPE_TEXTS.clear()
            texts = ("?" if d is None else str(d.bind(dims or {})) for d in shape)
            text = _SHAPE_TEXTS[key] = "[" + ", ".join(texts) + "]"
        return text

    def __repr__(self) -> str:
        return f"Value({self.name} {self.dtype.label}{self.shape_text()} {self.role})"


def value_sizes(shape: Shape | None, dtype: DType) -> Sizes:
    """A value's (shape, dtype, nbytes, numel), as its `_nbytes_cache` holds them: an importer
    passes one to the values of each type it reads (`Value(..., _nbytes_cache=...)`)."""
    # values of one shape hold the same dim objects (a decoder: 15 dims in 34,000 values):
    # keyed by their identities, a hit hashes no SymInt (the entry keeps them alive)
    key = (id(dtype), *map(id, shape)) if shape is not None else (id(dtype), -1)
    known = _SIZES_BY_DIMS.get(key)
    if known is None:
        numel = None
        if shape is not None and all(d is not None for d in shape):
            numel = product(d for d in shape if d is not None)
        size = _bytes_of(numel, dtype.bits) if numel is not None and dtype.has_known_size \
            else None
        if len(_SIZES_BY_DIMS) >= _MAX_SHAPE_TEXTS:
            _SIZES_BY_DIMS.clear()
        known = _SIZES_BY_DIMS[key] = (shape, dtype, size, numel)
    return shape, dtype, known[2], known[3]


def _bytes_of(numel: SymInt, bits: int) -> SymInt:
    """numel * bits / 8, one SymInt per distinct (numel, bits): values of one shape share it,
    so their sizes hash and compare as one object (product() shares the numels)."""
    key = (numel, bits)
    size = _BYTES_OF.get(key)
    if size is None:
        if len(_BYTES_OF) >= _MAX_SHAPE_TEXTS:
            _BYTES_OF.clear()
        size = _BYTES_OF[key] = numel.scaled(bits, 8)
    return size


_BYTES_OF: dict[tuple[SymInt, int], SymInt] = {}
# (id of the dtype, ids of the dims) -> (shape, dtype, bytes, numel) of the first such value
_SIZES_BY_DIMS: dict[tuple[int, ...], Sizes] = {}


AttributeValue = int | float | str | bytes | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]


@dataclass(frozen=True)
class ImportedCost:
    """Arithmetic an importer already knows from its framework's own formulas."""

    macs: int
    flops: int


@dataclass(eq=False, slots=True)
class Node:
    """One operator application. Missing optional inputs are None."""

    name: str
    op_type: str
    inputs: list[Value | None]
    outputs: list[Value]
    # replaced, never changed in place: an importer shares one dict among equal attributes
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    domain: str = ""
    module_path: str = ""  # e.g. "layer3.1.conv2" where the importer knows it
    subgraph_node_count: int = 0  # nodes inside If/Loop/Scan bodies, accounted conservatively
    imported_cost: ImportedCost | None = None  # e.g. from PyTorch's FlopCounterMode formulas
    phase: Phase = Phase.NONE  # set by the front end or the training expansion
    # A backward node: the forward node it differentiates (its cost comes from that node's
    # backward rule), and the indices of that node's inputs it makes gradients for.
    origin: Node | None = None
    needs_grad: frozenset[int] = frozenset()

    @property
    def present_inputs(self) -> list[Value]:
        return [v for v in self.inputs if v is not None]

    def add_output(self, value: Value) -> None:
        """Append an output this node makes (before or after it joined a graph)."""
        if value.producer is not None and value.producer is not self:
            raise GraphCheckError(f"{value.name} is already made by {value.producer.describe()};"
                                  f" {self.describe()} cannot make it too")
        value.producer = self
        self.outputs.append(value)

    def replace_input(self, index: int, value: Value | None) -> None:
        """Read `value` as input `index` instead (a node of a graph: both values' consumers
        follow)."""
        old = self.inputs[index]
        if old is value:
            return
        self.inputs[index] = value
        if old is not None and not any(v is old for v in self.inputs):
            old.consumers.remove(self)
        if value is not None and sum(v is value for v in self.inputs) == 1:
            value.consumers.append(self)

    def set_inputs(self, inputs: list[Value | None]) -> None:
        """Read `inputs` instead of the current inputs (a node of a graph: consumers follow;
        before a node joins a graph, assign `inputs` directly)."""
        self._unlink_inputs()
        self.inputs = list(inputs)
        self._link_inputs()

    def _link_inputs(self) -> None:
        for value in dict.fromkeys(self.present_inputs):
            value.consumers.append(self)

    def _unlink_inputs(self) -> None:
        for value in dict.fromkeys(self.present_inputs):
            value.consumers.remove(self)

    def input(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def attr_int(self, name: str, default: int) -> int:
        value = self.attributes.get(name, default)
        if isinstance(value, tuple | list):
            raise TypeError(f"{self.describe()}: attribute {name} is a list, not one integer")
        return int(value)

    def attr_ints(self, name: str, default: tuple[int, ...] = ()) -> tuple[int, ...]:
        value = self.attributes.get(name, default)
        if not isinstance(value, tuple | list):
            raise TypeError(f"{self.describe()}: attribute {name} is not a list of integers")
        return tuple(int(v) for v in value)

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
    data_dims: frozenset[str] = frozenset()  # dims of no shape: a Loop's trip count the data sets

    def add_node(self, node: Node, index: int | None = None) -> Node:
        """Append `node` (or insert it at `index`), linked: the producer of its outputs and a
        consumer (once) of each value it reads. Registering values in `values` is the
        builder's job (it chooses their unique names)."""
        for value in node.outputs:  # all checked before anything changes
            maker = value.producer
            if maker is not None and maker is not node:
                raise GraphCheckError(f"{value.name} is already made by {maker.describe()};"
                                      f" {node.describe()} cannot make it too")
        for value in node.outputs:
            value.producer = node
        node._link_inputs()
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
        return node

    def append_new(self, node: Node) -> None:
        """add_node for a node an importer has just made, outputs and all: linked the same
        way (each value it reads lists it once, its producer is set), without the check (no
        node made its new outputs) or the input set (it is the newest consumer of each)."""
        for value in node.outputs:
            value.producer = node
        for read in node.inputs:
            if read is not None and (not read.consumers or read.consumers[-1] is not node):
                read.consumers.append(node)
        self.nodes.append(node)

    def remove_node(self, node: Node) -> None:
        """Take out a node whose outputs nothing reads; its inputs forget it."""
        read = [value for value in node.outputs if value.consumers]
        if read:
            raise GraphCheckError(f"cannot remove {node.describe()}: {read[0].name} is read by"
                                  f" {read[0].consumers[0].describe()}")
        for value in node.outputs:
            value.producer = None
        node._unlink_inputs()
        self.nodes.remove(node)

    def check(self) -> None:
        """Verify the invariants every pass relies on; raise GraphCheckError naming the first
        one broken:
        - node names are unique; the nodes are in topological order (a node reads only values
          made by an earlier node or by none: inputs, weights, constants);
        - every value a node reads or makes, every graph input and output and every alias base
          is the graph's value of that name; graph inputs are made by no node;
        - each value is made by at most one node, its `producer` (None if no node makes it);
        - `consumers` lists exactly the nodes that read the value, each once;
        - `held_until` and `origin` are nodes of the graph; alias chains end.
        """
        position = _positions(self)
        _check_registered(self)
        made_by = _check_producers(self, position)
        _check_consumers(self)
        _check_links(self, position, made_by)

    def values_with_role(self, *roles: Role) -> Iterator[Value]:
        return (v for v in self.values.values() if v.role in roles)

    def free_dims(self) -> frozenset[str]:
        """Names of every dynamic dim in a value's shape, and the graph's `data_dims`."""
        # values of one type share their shape tuple (the importers read each type once):
        # each distinct tuple's dims are looked at once
        shapes = {id(shape): shape for value in self.values.values() if (shape := value.shape)}
        names: set[str] = set()
        for shape in shapes.values():
            for dim in shape:
                if dim is not None:
                    names |= dim.free_symbols()
        return frozenset(names | self.data_dims)

    def input_dims_in_order(self) -> list[str]:
        """Dynamic dim names of the graph inputs, first seen first (what `--batch` binds)."""
        ordered: dict[str, None] = {}
        for value in self.inputs:
            for dim in value.shape or ():
                for name in sorted(dim.free_symbols()) if dim is not None else ():
                    ordered.setdefault(name)
        return list(ordered)


# ----- Graph.check ------------------------------------------------------------------------------
def _positions(graph: Graph) -> dict[Node, int]:
    position: dict[Node, int] = {}
    names: set[str] = set()
    for step, node in enumerate(graph.nodes):
        if node in position:
            raise GraphCheckError(f"{node.describe()} is in the graph twice")
        if node.name in names:
            raise GraphCheckError(f"two nodes are named {node.name}")
        position[node] = step
        names.add(node.name)
    return position


def _check_registered(graph: Graph) -> None:
    """Every value the graph refers to is `graph.values[value.name]`."""
    for name, value in graph.values.items():
        if value.name != name:
            raise GraphCheckError(f"graph.values[{name!r}] is a value named {value.name}")
    referred = [*graph.inputs, *graph.outputs]
    for node in graph.nodes:
        referred += node.present_inputs
        referred += node.outputs
    referred += [v.alias_of for v in graph.values.values() if v.alias_of is not None]
    for value in referred:
        if graph.values.get(value.name) is not value:
            raise GraphCheckError(f"{value.name} is not the graph's value of that name")
    for value in graph.inputs:
        if value.producer is not None:
            raise GraphCheckError(f"graph input {value.name} is made by"
                                  f" {value.producer.describe()}")


def _check_producers(graph: Graph, position: dict[Node, int]) -> dict[Value, Node]:
    made_by: dict[Value, Node] = {}
    for node in graph.nodes:
        for value in node.outputs:
            if value in made_by:
                raise GraphCheckError(f"{value.name} is made twice, by"
                                      f" {made_by[value].describe()} and {node.describe()}")
            made_by[value] = node
            if value.producer is not node:
                raise GraphCheckError(f"{value.name} is made by {node.describe()} but its"
                                      f" producer is {_described(value.producer)}")
    for value in graph.values.values():
        if value not in made_by and value.producer is not None:
            raise GraphCheckError(f"{value.name}'s producer {value.producer.describe()} does not"
                                  " make it in this graph")
    return made_by


def _check_consumers(graph: Graph) -> None:
    readers: dict[Value, dict[Node, None]] = {}
    for node in graph.nodes:
        for value in node.present_inputs:
            readers.setdefault(value, {})[node] = None
    for value in graph.values.values():
        expected = readers.get(value, {})
        listed = value.consumers
        listed_set = set(listed)
        if len(listed_set) != len(listed):
            raise GraphCheckError(f"{value.name} lists a consumer twice")
        missing = [n for n in expected if n not in listed_set]
        if missing:
            raise GraphCheckError(f"{missing[0].describe()} reads {value.name} but is not among"
                                  " its consumers")
        extra = [n for n in listed if n not in expected]
        if extra:
            raise GraphCheckError(f"{value.name} lists {extra[0].describe()} as a consumer,"
                                  " which does not read it")


def _check_links(graph: Graph, position: dict[Node, int], made_by: dict[Value, Node]) -> None:
    for step, node in enumerate(graph.nodes):
        for value in node.present_inputs:
            producer = made_by.get(value)
            if producer is not None and position[producer] >= step:
                raise GraphCheckError(f"{node.describe()} reads {value.name} before"
                                      f" {producer.describe()} makes it")
        if node.origin is not None and node.origin not in position:
            raise GraphCheckError(f"{node.describe()}'s origin {node.origin.describe()} is not"
                                  " a node of the graph")
    for value in graph.values.values():
        if value.held_until is not None and value.held_until not in position:
            raise GraphCheckError(f"{value.name} is held until {value.held_until.describe()},"
                                  " which is not a node of the graph")
        base, hops = value.alias_of, 0
        while base is not None:
            hops += 1
            if hops > len(graph.values):
                raise GraphCheckError(f"{value.name}'s alias chain is a cycle")
            base = base.alias_of


def _described(node: Node | None) -> str:
    return "none" if node is None else node.describe()
