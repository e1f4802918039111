"""ONNX files are untrusted input: graphmem runs as a CI gate on models it receives.

A model file must never make graphmem read another file. An ONNX tensor may keep its bytes
"externally" (`data_location = EXTERNAL`, `location = "<file>"`), and onnx's and onnxruntime's
helpers read that file whenever a tensor's value is asked for: a `Constant` whose data lives in
`secret.txt`, cast and gathered into `ConstantOfShape`, would print the file's bytes as output
shapes. So every external reference is cut on load (`strip_external_data`): the tensor keeps
its dims and dtype and has no value ("unknown-valued": known shape, unknown value), which is
all analysis needs. Only `graphmem verify` loads weights, each data file checked first
(`safe_data_file`: a regular file inside the model's folder).

Broken graphs are refused with one line naming the tensor (validation.py `validate_graph`,
on the helpers below), before any engine trips over them.

Only this module and the other importers touch protobuf.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import onnx
from onnx import AttributeProto, TensorProto, helper
from onnx.external_data_helper import uses_external_data

from graphmem.errors import GraphmemError

# protobuf refuses to parse a message of 2 GiB or more: a larger file is refused before reading
MAX_MODEL_FILE_BYTES = (2 << 30) - 1
MAX_RANK = 64  # numpy's own limit; no real model comes near it
NAME_MAX_CHARS = 200  # a model's name as an error line quotes it
MAX_TENSOR_BYTES = 1 << 63
# bits per element of the packed types (raw_data holds them packed)
_PACKED_BITS: dict[int, int] = {
    TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4,
    TensorProto.INT2: 2, TensorProto.UINT2: 2,
    TensorProto.FLOAT6E2M3: 6, TensorProto.FLOAT6E3M2: 6,
}
# typed-data entries per element, as (entries, elements), where it is not one: complex numbers
# are (real, imaginary); 4-bit and 2-bit values are packed 2 and 4 to an int32_data entry
_TYPED_PER_ELEMENT: dict[int, tuple[int, int]] = {
    TensorProto.COMPLEX64: (2, 1), TensorProto.COMPLEX128: (2, 1),
    TensorProto.INT4: (1, 2), TensorProto.UINT4: (1, 2), TensorProto.FLOAT4E2M1: (1, 2),
    TensorProto.INT2: (1, 4), TensorProto.UINT2: (1, 4),
}
PACKED_TYPES = frozenset(_PACKED_BITS)
KNOWN_ELEMENT_TYPES = frozenset(v for v in TensorProto.DataType.values()
                                if v != TensorProto.UNDEFINED)
# onnxruntime reads a tensor whose location holds this tag from a raw memory address
_ORT_MEMORY_LOCATION = "_ORT_MEM_ADDR_"


# ----- the file ----------------------------------------------------------------------------
def read_model_bytes(path: Path) -> bytes:
    """The bytes of the model file itself: a regular file (no FIFO, device or directory) of at
    most MAX_MODEL_FILE_BYTES, checked on the open descriptor, read once."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise GraphmemError(f"cannot open '{path}' ({error.strerror}): check the path to the"
                            " .onnx model and its permissions") from None
    try:  # checked before fdopen, which refuses a directory with an OSError of its own
        check_regular_file(path, os.fstat(descriptor))
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as file:
        data = file.read(MAX_MODEL_FILE_BYTES + 1)  # a file that grew since fstat stays bounded
    check_file_size(path, len(data))
    return data


def check_regular_file(path: Path, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise GraphmemError(f"'{path}' is a directory: pass the .onnx file itself")
    if not stat.S_ISREG(info.st_mode):
        raise GraphmemError(f"'{path}' is not a regular file (a FIFO, device or socket):"
                            " pass the .onnx file itself")
    check_file_size(path, info.st_size)


def check_file_size(path: Path, size_bytes: int) -> None:
    if size_bytes == 0:
        raise GraphmemError(f"'{path}' is empty (0 bytes): re-export or re-download the model")
    if size_bytes > MAX_MODEL_FILE_BYTES:
        raise GraphmemError(
            f"'{path}' is {size_bytes:,} bytes, above the 2 GiB protobuf can parse: a model"
            " this large keeps its weights in external data; re-export it with"
            " save_as_external_data=True")


# ----- names in messages -------------------------------------------------------------------
def quoted(text: str) -> str:
    """A model's string, quoted for an error line: a model is untrusted, so characters that
    are not printable (newlines, terminal escapes, bidi overrides) are shown escaped, and a
    long name keeps its start and end (NAME_MAX_CHARS)."""
    if len(text) > NAME_MAX_CHARS:
        tail = NAME_MAX_CHARS // 3
        text = text[:NAME_MAX_CHARS - tail - 1] + "\u2026" + text[-tail:]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                       for c in text)
    return f"'{text}'"


def node_label(node: onnx.NodeProto) -> str:
    """`Relu node 'block1/relu'`; a node without a name by its first output."""
    op_type = quoted(node.op_type)[1:-1]
    if node.name:
        return f"{op_type} node {quoted(node.name)}"
    return f"the {op_type} node writing {quoted(node.output[0])}" if node.output else (
        f"a {op_type} node")


# ----- every tensor of a model -------------------------------------------------------------
def model_tensors(model: onnx.ModelProto) -> Iterator[tuple[str, TensorProto]]:
    """Every TensorProto in the model, with a label naming it: initializers, sparse
    initializers, tensor attributes (Constant's `value`...), in subgraphs and functions too."""
    yield from graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from node_tensors(node)
    for info in model.training_info:
        yield from graph_tensors(info.initialization)
        yield from graph_tensors(info.algorithm)


def graph_tensors(graph: onnx.GraphProto) -> Iterator[tuple[str, TensorProto]]:
    for tensor in graph.initializer:
        yield f"initializer {quoted(tensor.name)}", tensor
    for sparse in graph.sparse_initializer:
        yield from sparse_tensors(f"sparse initializer {quoted(sparse.values.name)}", sparse)
    for node in graph.node:
        yield from node_tensors(node)


def subgraphs(proto: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The bodies of a control-flow node (If branches, Loop and Scan bodies)."""
    graphs: list[onnx.GraphProto] = []
    for attribute in proto.attribute:
        if attribute.type == AttributeProto.GRAPH:
            graphs.append(attribute.g)
        elif attribute.type == AttributeProto.GRAPHS:
            graphs.extend(attribute.graphs)
    return graphs


def node_tensors(node: onnx.NodeProto) -> Iterator[tuple[str, TensorProto]]:
    for attribute in node.attribute:  # in attribute order: bodies and tensors as written
        if attribute.type == AttributeProto.GRAPH:
            yield from graph_tensors(attribute.g)
        elif attribute.type == AttributeProto.GRAPHS:
            for body in attribute.graphs:
                yield from graph_tensors(body)
        elif attribute.type in TENSOR_ATTRIBUTES:
            # labelled here only: most nodes carry no tensor, and a 70B graph has 59k nodes
            label = f"attribute {quoted(attribute.name)} of {node_label(node)}"
            yield from attribute_tensors(label, attribute)


def own_tensors(node: onnx.NodeProto) -> Iterator[TensorProto]:
    """The tensors of the node's attributes (sparse ones as values and indices), not those of
    its bodies."""
    for attribute in node.attribute:
        if attribute.type in TENSOR_ATTRIBUTES:
            yield from (tensor for _, tensor in attribute_tensors("", attribute))


TENSOR_ATTRIBUTES = frozenset({AttributeProto.TENSOR, AttributeProto.TENSORS,
                                AttributeProto.SPARSE_TENSOR, AttributeProto.SPARSE_TENSORS})


def attribute_tensors(label: str, attribute: AttributeProto
                       ) -> Iterator[tuple[str, TensorProto]]:
    if attribute.type == AttributeProto.TENSOR:
        yield label, attribute.t
    elif attribute.type == AttributeProto.TENSORS:
        yield from ((label, t) for t in attribute.tensors)
    elif attribute.type == AttributeProto.SPARSE_TENSOR:
        yield from sparse_tensors(label, attribute.sparse_tensor)
    else:
        for sparse in attribute.sparse_tensors:
            yield from sparse_tensors(label, sparse)


def sparse_tensors(label: str, sparse: onnx.SparseTensorProto
                    ) -> Iterator[tuple[str, TensorProto]]:
    yield f"{label} (values)", sparse.values
    yield f"{label} (indices)", sparse.indices


# ----- external data -----------------------------------------------------------------------
def strip_external_data(model: onnx.ModelProto) -> tuple[str, ...]:
    """Cut every external-data reference of `model`, in place: each such tensor keeps its dims
    and dtype and holds no data. Returns the labels of the tensors that were external."""
    stripped = []
    for label, tensor in model_tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL or tensor.external_data:
            clear_tensor_data(tensor)
            stripped.append(label)
    return tuple(stripped)


def clear_tensor_data(tensor: TensorProto) -> None:
    """The tensor keeps its name, dims and dtype, and holds no data (unknown-valued)."""
    for field in ("external_data", "raw_data", "float_data", "int32_data", "string_data",
                  "int64_data", "double_data", "uint64_data"):
        tensor.ClearField(field)
    tensor.data_location = TensorProto.DEFAULT


def external_tensors(model: onnx.ModelProto) -> list[tuple[str, TensorProto]]:
    """The tensors whose data the model keeps in other files."""
    return [(label, t) for label, t in model_tensors(model) if uses_external_data(t)]


def _reason(error: BaseException) -> str:
    return error.strerror if isinstance(error, OSError) and error.strerror else (
        type(error).__name__)


def external_location(tensor: TensorProto) -> str:
    return next((e.value for e in tensor.external_data if e.key == "location"), "")


def safe_data_file(model_path: Path, label: str, tensor: TensorProto) -> Path:
    """The resolved data file an external tensor names, refused unless it is a regular file
    inside the model's folder: never absolute, never `..`, no symlink out of the folder, no
    FIFO or device. The one place graphmem lets a model name a file (`graphmem verify`,
    which loads weights); a missing file is returned for the caller to name."""
    location = external_location(tensor)
    refuse = f"{model_path}: {label} keeps its data in {quoted(location)}"
    fix = "external data must be a file next to the model (a relative path inside its folder)"
    if not location or "\0" in location or Path(location).is_absolute() or (
            ".." in Path(location).parts):
        raise GraphmemError(f"{refuse}, which is not a relative path inside the model's"
                            f" folder: {fix}")
    if _ORT_MEMORY_LOCATION in location:
        raise GraphmemError(f"{refuse}, onnxruntime's tag for data at a memory address: {fix}")
    try:
        folder = model_path.parent.resolve()
        data_file = (folder / location).resolve()
    except (OSError, RuntimeError) as error:  # too long a name, a symlink loop
        raise GraphmemError(f"{refuse}, which cannot be resolved ({_reason(error)}): {fix}"
                            ) from None
    if not data_file.is_relative_to(folder):
        raise GraphmemError(f"{refuse}, which resolves outside the model's folder"
                            f" ({quoted(str(data_file))}): {fix}")
    try:
        info = os.stat(data_file)
    except (FileNotFoundError, NotADirectoryError):
        return data_file
    except OSError as error:
        raise GraphmemError(f"{refuse}, which cannot be read ({_reason(error)}): {fix}"
                            ) from None
    if not stat.S_ISREG(info.st_mode):
        raise GraphmemError(f"{refuse}, which is not a regular file (a FIFO, device or"
                            f" directory): {fix}")
    return data_file


# ----- tensors: the data they hold ---------------------------------------------------------
def tensor_numel(tensor: TensorProto) -> int:
    return math.prod(int(d) for d in tensor.dims)


def has_inline_data(tensor: TensorProto) -> bool:
    """True when the tensor holds its own value, of exactly the size its dims and dtype say;
    False for external, data-less (graphmem's "unknown-valued") or wrongly sized tensors."""
    if uses_external_data(tensor) or tensor.HasField("segment"):
        return False
    if tensor.data_type not in KNOWN_ELEMENT_TYPES or any(d < 0 for d in tensor.dims):
        return False
    held = held_data(tensor)
    return held is not None and held == expected_data(tensor, raw=tensor.HasField("raw_data"))


def has_data_of_size(tensor: TensorProto, field: str, held: int) -> bool:
    """True when `held` (bytes of raw_data, or entries of a typed field) in `field` is exactly
    the data the tensor's dims and dtype need, in the field its dtype stores data in: what
    has_inline_data finds of the tensor holding that data, found without holding it."""
    if tensor.data_type not in KNOWN_ELEMENT_TYPES or any(d < 0 for d in tensor.dims):
        return False
    raw = field == "raw_data"
    if not raw and field != helper.tensor_dtype_to_field(tensor.data_type):
        return False
    return held == expected_data(tensor, raw=raw)


def raw_data_bytes(tensor: TensorProto) -> int:
    """The length raw_data has for the tensor's dims and dtype (not for strings)."""
    return expected_data(tensor, raw=True)


# what onnxruntime's tensor holds for each element of a string tensor: a std::string (32 bytes
# in libstdc++), its text apart; the optimizing session's copy of an empty-string tensor of
# 10**7 elements took the command from 83 to 1,189 MiB (117 bytes an element: about 4 times 32,
# as numbers take about 4 times their bytes)
STRING_ELEMENT_BYTES = 32


def tensor_bytes(tensor: TensorProto) -> int:
    """The tensor's size from its dims and dtype (a string element counted as
    STRING_ELEMENT_BYTES), as onnxruntime's session holds it."""
    if tensor.data_type == TensorProto.STRING:
        return STRING_ELEMENT_BYTES * tensor_numel(tensor)
    return raw_data_bytes(tensor)


def held_data(tensor: TensorProto) -> int | None:
    """Bytes of raw_data, or entries of the typed field the dtype stores in; None: no data."""
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    entries = len(getattr(tensor, helper.tensor_dtype_to_field(tensor.data_type)))
    # an empty typed field is no data, unless the tensor has no elements
    return entries if entries or tensor_numel(tensor) == 0 else None


def expected_data(tensor: TensorProto, raw: bool) -> int:
    numel = tensor_numel(tensor)
    if tensor.data_type == TensorProto.STRING:
        return -1 if raw else numel  # strings live in string_data only
    if not raw:
        entries, elements = _TYPED_PER_ELEMENT.get(tensor.data_type, (1, 1))
        return -(-numel * entries // elements)  # exact integers: dims go up to 2**63
    return -(-numel * element_bits(tensor.data_type) // 8)


def element_bits(data_type: int) -> int:
    if data_type in _PACKED_BITS:
        return _PACKED_BITS[data_type]
    return 8 * helper.tensor_dtype_to_np_dtype(data_type).itemsize


def dtype_name(data_type: int) -> str:
    return TensorProto.DataType.Name(data_type).lower() if (
        data_type in KNOWN_ELEMENT_TYPES) else str(data_type)
