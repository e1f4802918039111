"""A generated corpus of hostile and broken input for the graphmem CLI (tests/test_fuzz_*.py).

Each `Case` writes its files into a fresh folder (the cwd of the run) and returns the `Run`:
the argv for `graphmem.cli.main.main` and what the run may leave behind or must never show. Cases
are plain data built without running graphmem, so collecting hundreds of them is cheap; every
model is a few nodes built with onnx.helper (the samples are only truncated or mutated).

Groups: broken files, broken graphs, hostile dim names (sympy payloads), hostile names (markup,
control characters, HTML), hostile external data, bad flags, bad output paths, budgets files,
baselines, broken PyTorch files.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import string
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
MARKER = "PWNED"  # the file the code-execution payloads try to create in the case's folder
# External data planted as a "secret": if graphmem reads it, shape [7919, 3] shows up, or
# its 23,757 elements, or their 95,028 bytes (92.8 KiB) of float32.
SECRET_INTS = (7919, 3)
SECRET_PATTERN = r"(?<![\d.,])(?:7919|23,?757|95,?028)(?![\d,])|92\.8 KiB"
MODEL = "model.onnx"
ANY_CODE = frozenset({0, 1, 2})  # narrowed to {0, 2} for every command but `check`
ERROR = frozenset({2})


@dataclass(frozen=True)
class Run:
    """What one case runs, and what the run may leave behind or must never show."""

    argv: tuple[str, ...]
    outputs: tuple[str, ...] = ()  # paths (relative to the cwd) the case asks graphmem to write
    codes: frozenset[int] = ANY_CODE  # the right exit codes for this input
    secrets: tuple[str, ...] = ()  # regexes that must not appear in any output
    free_dim: str | None = None  # exit 0: out.json lists exactly this free dim, verbatim
    bound_dim: str | None = None  # exit 0: out.json binds exactly this dim (to 3), verbatim
    verbatim: str | None = None  # exit 0: stdout shows this text as given (no markup eaten)
    html_payload: str | None = None  # must not appear unescaped in the HTML report
    summary_on_stderr: bool = False  # `--json -`: the summary goes to stderr


@dataclass(frozen=True)
class Case:
    """One generated input: `make(folder)` writes its files and returns the Run."""

    id: str
    make: Callable[[Path], Run]
    isolate: bool = False  # run in a forked child with a timeout: it could hang or crash
    # isolated cases finish in well under a second when all is well; scaled by the machine's
    # load when run (tests/test_fuzz_cli.py's case_limit_s), at most 60 s
    timeout_s: float = 6.0


# ===== small ONNX builders =======================================================================


def save(model: onnx.ModelProto, path: Path) -> Path:
    """Serialize without onnx.save's checks or external-data handling: broken on purpose."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def tensor_info(name: str, dims: Sequence[str | int] | None = ("batch", 8),
                elem_type: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, None if dims is None else list(dims))


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto],
               initializers: Sequence[onnx.TensorProto] = (), opset: int = 17,
               name: str = "fuzz", value_info: Sequence[onnx.ValueInfoProto] = (),
               extra_opsets: Sequence[tuple[str, int]] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs),
                              initializer=list(initializers), value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(domain, version) for domain, version in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def chain_model(x_dims: Sequence[str | int] = ("batch", 8),
                y_dims: Sequence[str | int] | None = ("batch", 8), graph_name: str = "fuzz",
                node_name: str = "relu", tensor_name: str = "h", weight_name: str = "c",
                op_type: str = "Relu", domain: str = "", scope: str | None = None,
                mid_dims: Sequence[str | int] | None = None) -> onnx.ModelProto:
    """x -> <op_type> (node_name) -> tensor_name -> Add(., weight) -> y: every name settable."""
    relu = helper.make_node(op_type, ["x"], [tensor_name], name=node_name, domain=domain)
    if scope is not None:
        entry = relu.metadata_props.add()
        entry.key, entry.value = "pkg.torch.onnx.name_scopes", scope
    add = helper.make_node("Add", [tensor_name, weight_name], ["y"], name="add")
    weight = numpy_helper.from_array(np.ones(8, np.float32), weight_name)
    value_info = [tensor_info(tensor_name, mid_dims)] if mid_dims is not None else []
    extra = [(domain, 1)] if domain else []
    return make_model([relu, add], [tensor_info("x", x_dims)], [tensor_info("y", y_dims)],
                      [weight], name=graph_name, value_info=value_info, extra_opsets=extra)


def mlp_model() -> onnx.ModelProto:
    """x[batch, 32] -> MatMul -> Add -> Relu -> MatMul -> y[batch, 10] (a valid model)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(np.zeros(16, np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    return make_model(nodes, [tensor_info("x", ("batch", 32))], [tensor_info("y", ("batch", 10))],
                      [w1, b1, w2], name="mlp")


def write_mlp(folder: Path, name: str = MODEL) -> Path:
    return save(mlp_model(), folder / name)


def external_tensor(name: str, data_type: int, dims: Sequence[int], location: str,
                    extra: Sequence[tuple[str, str]] = ()) -> onnx.TensorProto:
    """A tensor whose data lives in an external file (never written here)."""
    tensor = onnx.TensorProto(name=name, data_type=data_type, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), *extra):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def attribute(name: str, kind: int, **fields: object) -> onnx.AttributeProto:
    """An AttributeProto built field by field: any type, any (wrong) value."""
    proto = onnx.AttributeProto(name=name, type=kind)
    for key, value in fields.items():
        target = getattr(proto, key)
        if isinstance(value, list):
            target.extend(value)
        elif isinstance(value, onnx.TensorProto | onnx.GraphProto):
            target.CopyFrom(value)
        else:
            setattr(proto, key, value)
    return proto


def secret_bytes() -> bytes:
    return struct.pack("<2q", *SECRET_INTS)


# ===== small runs ================================================================================


def analyze(model: str, *flags: str, json_out: bool = True) -> Run:
    outputs = ("out.json",) if json_out else ()
    argv = ("analyze", model, "--no-html", *(("--json", "out.json") if json_out else ()), *flags)
    return Run(argv, outputs)


def check(model: str, *flags: str) -> Run:
    return Run(("check", model, "--gpu", "t4", *flags))


def slug(text: str) -> str:
    """An ASCII id fragment for a payload."""
    kept = "".join(c if c in string.ascii_letters + string.digits else "_" for c in text[:24])
    return kept.strip("_") or "x"


# ===== 1. broken files ===========================================================================

_TRUNCATE_FRACTIONS = (0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95,
                       0.99, 0.999)
_TRUNCATE_OFFSETS = (1, 2, 3, 4, 5, 8, 13, 16, 32, 64, 100, 256, 1000)


def file_cases() -> list[Case]:
    return [*_truncated_cases(), *_mutated_cases(), *_junk_file_cases()]


def _truncated_cases() -> list[Case]:
    cases = []
    for sample in ("tiny_cnn.onnx", "tiny_gpt.onnx"):
        size = (SAMPLES / sample).stat().st_size
        offsets = sorted({*_TRUNCATE_OFFSETS, *(int(size * f) for f in _TRUNCATE_FRACTIONS),
                          size - 1})
        for offset in offsets:
            cases.append(Case(f"truncated-{sample.split('.')[0]}-{offset}",
                              _truncated(sample, offset)))
    for command in ("check", "gpus", "verify", "train"):
        cases.append(Case(f"truncated-tiny_cnn-half-{command}",
                          _truncated("tiny_cnn.onnx", 20000, command)))
    return cases


def _command_run(command: str, model: str) -> Run:
    """The same model through each front door."""
    runs = {
        "analyze": analyze(model),
        "check": check(model, "--batch", "2"),
        "gpus": Run(("gpus", "--fits", model, "--batch", "2")),
        "verify": Run(("verify", model, "--batch", "2", "--no-optimized-run")),
        "train": analyze(model, "--batch", "2", "--train", json_out=False),
    }
    return runs[command]


def _truncated(sample: str, offset: int, command: str = "analyze") -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        (folder / MODEL).write_bytes((SAMPLES / sample).read_bytes()[:offset])
        return _command_run(command, MODEL)
    return make


def _mutated_cases() -> list[Case]:
    """Seeded byte flips in a real sample: protobuf that parses into nonsense."""
    return [Case(f"mutated-tiny_cnn-seed{seed}", _mutated(seed), isolate=True)
            for seed in range(16)]


def _mutated(seed: int) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        data = bytearray((SAMPLES / "tiny_cnn.onnx").read_bytes())
        rng = random.Random(seed)
        for _ in range(1 + seed % 6):
            data[rng.randrange(len(data))] = rng.randrange(256)
        (folder / MODEL).write_bytes(bytes(data))
        return analyze(MODEL, "--batch", "2")
    return make


def _junk_file_cases() -> list[Case]:
    makers: dict[str, Callable[[Path], Run]] = {
        "empty": _file_with(b""),
        "one-byte": _file_with(b"\x08"),
        "random-16": _file_with(random.Random(1).randbytes(16)),
        "random-1000": _file_with(random.Random(2).randbytes(1000)),
        "random-100000": _file_with(random.Random(3).randbytes(100_000)),
        "text": _file_with(b"this is not a model\n"),
        "json": _file_with(b'{"graph": {"node": []}}'),
        "zeros-4096": _file_with(bytes(4096)),
        "ff-4096": _file_with(b"\xff" * 4096),
        "tensor-proto": _file_with(numpy_helper.from_array(np.ones(4, np.float32), "t")
                                   .SerializeToString()),
        "graph-proto": _file_with(mlp_model().graph.SerializeToString()),
        "node-proto": _file_with(helper.make_node("Relu", ["x"], ["y"]).SerializeToString()),
        "model-without-graph": _file_with(onnx.ModelProto(ir_version=8).SerializeToString()),
        "model-without-opset": _file_with(_without_opset()),
        "nested-deeper-than-protobuf": _file_with(_nested_bytes(500)),
        "gzip": _gzip_model,
        "directory": _directory_model,
        "missing": lambda folder: replace(analyze("missing.onnx"), codes=ERROR),
        "dev-null": lambda folder: replace(analyze("/dev/null"), codes=ERROR),
        "symlink-loop": _symlink_loop,
        "wrong-extension-txt": _renamed("model.txt"),
        "wrong-extension-pt": _renamed("model.pt"),
        "no-extension": _renamed("model"),
        "colon-in-name": _renamed("a:b.onnx"),
        "dash-name": _renamed("-m.onnx"),
    }
    cases = [Case(f"file-{name}", make) for name, make in makers.items()]
    cases.append(Case("file-fifo", _fifo_model, isolate=True))
    # a 3 GiB file cannot be an ONNX protobuf (2 GiB at most): refusing it needs no read
    cases.append(Case("file-sparse-3gib", _sparse_model, isolate=True, timeout_s=5))
    for command in ("check", "gpus", "verify"):
        cases.append(Case(f"file-random-{command}", _junk_command(command)))
    return cases


def _file_with(data: bytes) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        (folder / MODEL).write_bytes(data)
        return replace(analyze(MODEL), codes=ERROR)
    return make


def _without_opset() -> bytes:
    model = mlp_model()
    del model.opset_import[:]
    return model.SerializeToString()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _nested_bytes(depth: int) -> bytes:
    """A ModelProto whose graph nests If bodies `depth` deep: deeper than protobuf parses.
    GraphProto.node = 1, NodeProto.op_type = 4, .attribute = 5, AttributeProto.name = 1,
    .g = 6, .type = 20 (GRAPH = 5); ModelProto.graph = 7, .opset_import = 8."""
    graph = b""
    for _ in range(depth):
        attr = _field(1, b"then_branch") + _field(6, graph) + _varint(20 << 3) + _varint(5)
        graph = _field(1, _field(4, b"If") + _field(5, attr))
    opset = _field(1, b"") + _varint(2 << 3) + _varint(17)
    return _varint(1 << 3) + _varint(8) + _field(7, graph) + _field(8, opset)


def _gzip_model(folder: Path) -> Run:
    (folder / MODEL).write_bytes(gzip.compress(mlp_model().SerializeToString()))
    return replace(analyze(MODEL), codes=ERROR)


def _directory_model(folder: Path) -> Run:
    (folder / MODEL).mkdir()
    return replace(analyze(MODEL), codes=ERROR)


def _symlink_loop(folder: Path) -> Run:
    (folder / MODEL).symlink_to(MODEL)
    return replace(analyze(MODEL), codes=ERROR)


def _renamed(name: str) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        write_mlp(folder, name)
        return analyze(name if not name.startswith("-") else f"./{name}")
    return make


def _fifo_model(folder: Path) -> Run:
    os.mkfifo(folder / MODEL)
    return replace(analyze(MODEL), codes=ERROR)


def _sparse_model(folder: Path) -> Run:
    with (folder / MODEL).open("wb") as handle:
        handle.truncate(3 * 2**30)
    return replace(analyze(MODEL), codes=ERROR)


def _junk_command(command: str) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        (folder / MODEL).write_bytes(random.Random(9).randbytes(5000))
        return replace(_command_run(command, MODEL), codes=ERROR)
    return make


# ===== 2. broken graphs ==========================================================================


def _relu(inputs: Sequence[str], outputs: Sequence[str], name: str = "",
          op: str = "Relu", **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=name or f"{op}_{outputs}",
                            **attrs)


def _x(dims: Sequence[str | int] | None = ("batch", 8), elem: int = TensorProto.FLOAT,
       name: str = "x") -> onnx.ValueInfoProto:
    return tensor_info(name, dims, elem)


def _single(node: onnx.NodeProto, x_dims: Sequence[str | int] | None = ("batch", 8),
            initializers: Sequence[onnx.TensorProto] = (), y_dims: Sequence[int] | None = None,
            opset: int = 17) -> onnx.ModelProto:
    """x -> node -> y with optional initializers; y's shape left to inference."""
    return make_model([node], [_x(x_dims)], [tensor_info("y", y_dims)], initializers,
                      opset=opset)


def _ints(name: str, values: Sequence[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _graph_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Every broken graph, by id; each a few nodes."""
    return {
        **_structure_builders(), **_opset_builders(), **_attribute_builders(),
        **_dim_builders(), **_dtype_builders(), **_initializer_builders(),
        **_subgraph_builders(),
    }


def _structure_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    return {
        "dangling-input": lambda: _single(_relu(["nowhere"], ["y"])),
        "cycle": lambda: make_model([_relu(["b"], ["a"]), _relu(["a"], ["b"]),
                                     _relu(["a"], ["y"])], [_x()], [tensor_info("y", None)]),
        "self-loop": lambda: make_model([_relu(["x", "a"], ["a"], op="Add"), _relu(["a"], ["y"])],
                                        [_x()], [tensor_info("y", None)]),
        "two-producers": lambda: make_model(
            [_relu(["x"], ["y"], "r1"), _relu(["x"], ["y"], "r2", op="Sigmoid")],
            [_x()], [tensor_info("y", None)]),
        "producer-of-input": lambda: make_model(
            [_relu(["y"], ["x"], "r1"), _relu(["x"], ["y"], "r2")], [_x()],
            [tensor_info("y", None)]),
        "output-of-nobody": lambda: make_model([_relu(["x"], ["y"])], [_x()],
                                               [tensor_info("ghost", None)]),
        "no-outputs": lambda: make_model([_relu(["x"], ["y"])], [_x()], []),
        "no-nodes": lambda: make_model([], [_x()], [tensor_info("x", ("batch", 8))]),
        "only-constant": lambda: make_model(
            [helper.make_node("Constant", [], ["y"], value=_ints("v", [1, 2]))], [],
            [tensor_info("y", None)]),
        "reversed-order": lambda: make_model(
            [_relu(["h"], ["y"], "r2"), _relu(["x"], ["h"], "r1")], [_x()],
            [tensor_info("y", None)]),
        "unknown-op": lambda: _single(_relu(["x"], ["y"], op="FooBar")),
        "empty-op-type": lambda: _single(_relu(["x"], ["y"], op="")),
        "unknown-domain": lambda: _single(helper.make_node("Relu", ["x"], ["y"], name="r",
                                                           domain="evil.domain")),
        "duplicate-node-names": lambda: make_model(
            [_relu(["x"], ["h"], "same"), _relu(["h"], ["y"], "same")], [_x()],
            [tensor_info("y", None)]),
        "empty-names": lambda: make_model(
            [helper.make_node("Relu", ["x"], [""], name=""), _relu(["x"], ["y"], "")],
            [_x()], [tensor_info("y", None)]),
        "many-outputs": lambda: _single(helper.make_node(
            "Split", ["x"], [f"o{i}" for i in range(300)], name="split", axis=1)),
        "concat-5000": lambda: _single(helper.make_node("Concat", ["x"] * 5000, ["y"],
                                                        name="cat", axis=0)),
        "input-is-initializer": lambda: make_model(
            [_relu(["x"], ["y"])], [_x()], [tensor_info("y", None)],
            [numpy_helper.from_array(np.ones((3, 3), np.float32), "x")]),
        "output-is-input": lambda: make_model([_relu(["x"], ["h"])], [_x()],
                                              [tensor_info("x", ("batch", 8))]),
        "optional-input-gap": lambda: _single(helper.make_node(
            "Clip", ["x", "", ""], ["y"], name="clip")),
        "local-function": _local_function_model,
        "recursive-function": _recursive_function_model,
    }


def _opset_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    def with_opsets(opsets: Sequence[tuple[str, int]], ir: int | None = None
                    ) -> Callable[[], onnx.ModelProto]:
        def build() -> onnx.ModelProto:
            model = _single(_relu(["x"], ["y"]))
            del model.opset_import[:]
            model.opset_import.extend(helper.make_opsetid(d, v) for d, v in opsets)
            if ir is not None:
                model.ir_version = ir
            return model
        return build

    return {
        "opset-0": with_opsets([("", 0)]),
        "opset-1": with_opsets([("", 1)]),
        "opset-9999": with_opsets([("", 9999)]),
        "opset-negative": with_opsets([("", -3)]),
        "opset-only-custom": with_opsets([("custom", 1)]),
        "opset-duplicate": with_opsets([("", 13), ("", 17)]),
        "ir-version-0": with_opsets([("", 17)], ir=0),
        "ir-version-huge": with_opsets([("", 17)], ir=2**62),
    }


def _attribute_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    conv_w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")

    def conv(**attrs: object) -> Callable[[], onnx.ModelProto]:
        return lambda: _single(helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs),
                               ("batch", 3, 8, 8), [conv_w])

    def pool(op: str, **attrs: object) -> Callable[[], onnx.ModelProto]:
        return lambda: _single(helper.make_node(op, ["x"], ["y"], name="pool", **attrs),
                               ("batch", 3, 8, 8))

    def node(op: str, inputs: Sequence[str] = ("x",), inits: Sequence[onnx.TensorProto] = (),
             attrs: Sequence[onnx.AttributeProto] = (), **kw: object
             ) -> Callable[[], onnx.ModelProto]:
        def build() -> onnx.ModelProto:
            proto = helper.make_node(op, list(inputs), ["y"], name=op.lower(), **kw)
            proto.attribute.extend(attrs)
            return _single(proto, initializers=inits)
        return build

    return {
        "conv-kernel-negative": conv(kernel_shape=[-1, -1]),
        "conv-strides-zero": conv(strides=[0, 0]),
        "conv-group-zero": conv(group=0),
        "conv-group-huge": conv(group=2**62),
        "conv-pads-huge": conv(pads=[2**62] * 4),
        "conv-pads-negative": conv(pads=[-9, -9, -9, -9]),
        "conv-dilations-zero": conv(dilations=[0, 0]),
        "conv-auto-pad-junk": conv(auto_pad="EVIL"),
        "maxpool-kernel-zero": pool("MaxPool", kernel_shape=[0, 0]),
        "maxpool-no-kernel": pool("MaxPool"),
        "avgpool-strides-negative": pool("AveragePool", kernel_shape=[2, 2], strides=[-1, -1]),
        "transpose-perm-out-of-range": node("Transpose", perm=[5, 9]),
        "transpose-perm-repeated": node("Transpose", perm=[0, 0]),
        "softmax-axis-1000": node("Softmax", axis=1000),
        "concat-axis-minus-99": node("Concat", ("x", "x"), axis=-99),
        "gather-axis-7": node("Gather", ("x", "i"), [_ints("i", [0])], axis=7),
        "gather-index-huge": node("Gather", ("x", "i"), [_ints("i", [2**62])], axis=0),
        "flatten-axis-99": node("Flatten", axis=99),
        "reshape-two-minus-one": node("Reshape", ("x", "s"), [_ints("s", [-1, -1])]),
        "reshape-negative": node("Reshape", ("x", "s"), [_ints("s", [-7, 3])]),
        "reshape-huge": node("Reshape", ("x", "s"), [_ints("s", [2**62, 2**62])]),
        "reshape-zero-allowzero": node("Reshape", ("x", "s"), [_ints("s", [0, 16])],
                                       allowzero=1),
        "split-negative": node("Split", ("x", "s"), [_ints("s", [-1, 3])], axis=1),
        "expand-huge": node("Expand", ("x", "s"), [_ints("s", [2**40, 2**40, 2, 8])]),
        "tile-huge": node("Tile", ("x", "r"), [_ints("r", [2**40, 2**40])]),
        "constantofshape-huge": node("ConstantOfShape", ("s",), [_ints("s", [2**40, 2**40])]),
        "range-huge": _range_huge,
        "slice-steps-zero": node("Slice", ("x", "a", "b", "c", "d"),
                                 [_ints("a", [0]), _ints("b", [8]), _ints("c", [1]),
                                  _ints("d", [0])]),
        "pad-huge": node("Pad", ("x", "p"), [_ints("p", [0, 0, 2**62, 2**62])]),
        "topk-k-huge": node("TopK", ("x", "k"), [_ints("k", [2**62])]),
        "onehot-depth-huge": node("OneHot", ("i", "d", "v"),
                                  [_ints("i", [1]), _ints("d", [2**40]),
                                   numpy_helper.from_array(np.array([0, 1], np.float32), "v")]),
        "cast-to-999": node("Cast", to=999),
        "cast-to-0": node("Cast", to=0),
        "attr-perm-floats": node("Transpose", attrs=[attribute("perm", AttributeProto.FLOATS,
                                                               floats=[1.0, 0.0])]),
        "attr-axis-string": node("Softmax", attrs=[attribute("axis", AttributeProto.STRING,
                                                             s=b"one")]),
        "attr-kernel-as-tensor": lambda: _single(
            _with_attrs(helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
                        attribute("kernel_shape", AttributeProto.TENSOR,
                                  t=_ints("k", [3, 3]))), ("batch", 3, 8, 8), [conv_w]),
        "attr-cast-to-string": node("Cast", attrs=[attribute("to", AttributeProto.STRING,
                                                             s=b"float")]),
        "attr-undefined-type": node("Softmax", attrs=[attribute("axis",
                                                                AttributeProto.UNDEFINED)]),
        "attr-graph-as-axis": node("Softmax", attrs=[attribute(
            "axis", AttributeProto.GRAPH, g=helper.make_graph([], "g", [], []))]),
        "attr-duplicate": node("Softmax", attrs=[attribute("axis", AttributeProto.INT, i=1),
                                                 attribute("axis", AttributeProto.INT, i=0)]),
        "attr-ref-outside-function": node("Softmax", attrs=[attribute(
            "axis", AttributeProto.INT, ref_attr_name="missing")]),
        "attr-empty-name": node("Relu", attrs=[attribute("", AttributeProto.INT, i=1)]),
        "attr-int-huge": node("Softmax", attrs=[attribute("axis", AttributeProto.INT,
                                                          i=2**63 - 1)]),
    }


def _with_attrs(node: onnx.NodeProto, *attrs: onnx.AttributeProto) -> onnx.NodeProto:
    node.attribute.extend(attrs)
    return node


def _range_huge() -> onnx.ModelProto:
    """Range(0, 2**40, 1): folding it would allocate 8 TiB."""
    node = helper.make_node("Range", ["a", "b", "c"], ["r"], name="range")
    relu = _relu(["x"], ["y"], "relu")
    return make_model([node, relu], [_x()], [tensor_info("y", None), tensor_info("r", None)],
                      [numpy_helper.from_array(np.array(0, np.int64), "a"),
                       numpy_helper.from_array(np.array(2**40, np.int64), "b"),
                       numpy_helper.from_array(np.array(1, np.int64), "c")])


def _dim_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    def relu_with(x_dims: Sequence[str | int] | None, y_dims: Sequence[str | int] | None = None
                  ) -> Callable[[], onnx.ModelProto]:
        return lambda: make_model([_relu(["x"], ["y"])], [_x(x_dims)], [tensor_info("y", y_dims)])

    builders: dict[str, Callable[[], onnx.ModelProto]] = {
        "dim-negative": relu_with((-5, 8)),
        "dim-zero": relu_with((0, 8)),
        "dim-2pow62": relu_with((2**62, 8)),
        "dim-int64-max": relu_with((2**63 - 1, 8)),
        "dim-2pow32-squared": relu_with((2**32, 2**32)),
        "dim-output-negative": relu_with((2, 8), (-3, 8)),
        "dim-output-contradicts": relu_with((2, 8), (5, 5, 5)),
        "input-no-shape": relu_with(None),
        "input-no-type": lambda: make_model([_relu(["x"], ["y"])],
                                            [onnx.ValueInfoProto(name="x")],
                                            [tensor_info("y", None)]),
        "input-sequence-type": lambda: make_model(
            [_relu(["x"], ["y"])],
            [helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT, [2])],
            [tensor_info("y", None)]),
        "input-sparse-type": lambda: make_model(
            [_relu(["x"], ["y"])],
            [helper.make_sparse_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
            [tensor_info("y", None)]),
        "value-info-contradicts": lambda: make_model(
            [_relu(["x"], ["h"]), _relu(["h"], ["y"])], [_x()], [tensor_info("y", None)],
            value_info=[tensor_info("h", (7, 7, 7, 7, 7), TensorProto.INT8)]),
        "value-info-dtype-999": lambda: make_model(
            [_relu(["x"], ["h"]), _relu(["h"], ["y"])], [_x()], [tensor_info("y", None)],
            value_info=[tensor_info("h", (2, 8), 999)]),
    }
    for rank, size in ((0, 1), (1, 2), (8, 2), (64, 1), (64, 2), (300, 1), (300, 2)):
        builders[f"rank-{rank}-of-{size}"] = relu_with((size,) * rank)
    return builders


def _dtype_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    def relu_of(elem: int) -> Callable[[], onnx.ModelProto]:
        return lambda: make_model([_relu(["x"], ["y"])], [_x((2, 8), elem)],
                                  [tensor_info("y", None)])

    kinds = {"0": 0, "999": 999, "negative": -1, "string": TensorProto.STRING,
             "float8": TensorProto.FLOAT8E4M3FN, "int4": TensorProto.INT4,
             "complex128": TensorProto.COMPLEX128, "bool": TensorProto.BOOL}
    return {f"dtype-{name}": relu_of(elem) for name, elem in kinds.items()}


def _initializer_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    def add_with(tensor: Callable[[], onnx.TensorProto]) -> Callable[[], onnx.ModelProto]:
        return lambda: _single(helper.make_node("Add", ["x", "w"], ["y"], name="add"),
                               initializers=[tensor()])

    def raw(dims: Sequence[int], data: bytes, data_type: int = TensorProto.FLOAT
            ) -> Callable[[], onnx.TensorProto]:
        return lambda: onnx.TensorProto(name="w", data_type=data_type, dims=list(dims),
                                        raw_data=data)

    return {
        "init-raw-too-short": add_with(raw((8,), b"\x00\x01\x02")),
        "init-raw-too-long": add_with(raw((1,), bytes(100_000))),
        "init-float-data-short": add_with(lambda: onnx.TensorProto(
            name="w", data_type=TensorProto.FLOAT, dims=[8], float_data=[1.0, 2.0])),
        "init-dims-negative": add_with(raw((-1,), b"")),
        "init-dims-huge": add_with(raw((2**62,), b"")),
        "init-dims-huge-int64": add_with(raw((2**31, 2**31), b"", TensorProto.INT64)),
        "init-dims-zero": add_with(raw((0,), b"")),
        "init-dtype-999": add_with(raw((8,), bytes(32), 999)),
        "init-dtype-0": add_with(raw((8,), bytes(32), 0)),
        "init-dtype-string": add_with(lambda: onnx.TensorProto(
            name="w", data_type=TensorProto.STRING, dims=[8], string_data=[b"a"] * 8)),
        "init-empty-name": lambda: _single(helper.make_node("Add", ["x", ""], ["y"], name="a"),
                                           initializers=[numpy_helper.from_array(
                                               np.ones(8, np.float32), "")]),
        "init-duplicate": lambda: _single(
            helper.make_node("Add", ["x", "w"], ["y"], name="add"),
            initializers=[numpy_helper.from_array(np.ones(8, np.float32), "w"),
                          numpy_helper.from_array(np.ones((3, 3), np.float32), "w")]),
        "init-rank-300": add_with(raw((1,) * 300, bytes(4))),
        "constant-rank-300": lambda: _single(helper.make_node(
            "Constant", [], ["y"], name="c",
            value=onnx.TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[1] * 300,
                                   raw_data=bytes(4)))),
        "constant-no-value": lambda: make_model(
            [helper.make_node("Constant", [], ["c"], name="c"),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")], [_x()],
            [tensor_info("y", None)]),
        "constant-two-values": lambda: make_model(
            [_with_attrs(helper.make_node("Constant", [], ["c"], name="c", value_int=3),
                         attribute("value_float", AttributeProto.FLOAT, f=1.0)),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")], [_x()],
            [tensor_info("y", None)]),
        "sparse-initializer": _sparse_initializer_model,
    }


def _sparse_initializer_model() -> onnx.ModelProto:
    model = _single(helper.make_node("Add", ["x", "w"], ["y"], name="add"))
    values = numpy_helper.from_array(np.ones(3, np.float32), "w")
    indices = _ints("w_idx", [0, 99, 2**40])
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [8]))
    return model


def _subgraph_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    def if_model(then_graph: onnx.GraphProto, else_graph: onnx.GraphProto
                 ) -> onnx.ModelProto:
        node = helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_graph,
                                else_branch=else_graph)
        return make_model([node], [_x(), tensor_info("cond", (), TensorProto.BOOL)],
                          [tensor_info("y", None)])

    def body(nodes: Sequence[onnx.NodeProto], out: str = "t") -> onnx.GraphProto:
        return helper.make_graph(list(nodes), "body", [], [tensor_info(out, None)])

    return {
        "if-body-no-outputs": lambda: if_model(helper.make_graph([], "b", [], []),
                                               body([_relu(["x"], ["t"])])),
        "if-body-missing-name": lambda: if_model(body([_relu(["nowhere"], ["t"])]),
                                                 body([_relu(["x"], ["t"])])),
        "if-body-cycle": lambda: if_model(body([_relu(["t"], ["t"])]),
                                          body([_relu(["x"], ["t"])])),
        "if-nested-25": lambda: if_model(_nested_if(25), body([_relu(["x"], ["t"])])),
        "loop-without-body": lambda: make_model(
            [helper.make_node("Loop", ["", "cond"], ["y"], name="loop")],
            [_x(), tensor_info("cond", (), TensorProto.BOOL)], [tensor_info("y", None)]),
        "scan-junk": lambda: make_model(
            [helper.make_node("Scan", ["x"], ["y"], name="scan", num_scan_inputs=5,
                              body=body([_relu(["q"], ["t"])]))],
            [_x()], [tensor_info("y", None)]),
    }


def _nested_if(depth: int) -> onnx.GraphProto:
    """If inside If, `depth` deep, down the then branches (both branches would double the
    protobuf at every level)."""
    leaf = helper.make_graph([_relu(["x"], ["t"])], "leaf", [], [tensor_info("t", None)])
    graph = leaf
    for level in range(depth):
        node = helper.make_node("If", ["cond"], ["t"], name=f"if{level}", then_branch=graph,
                                else_branch=leaf)
        graph = helper.make_graph([node], f"g{level}", [], [tensor_info("t", None)])
    return graph


def _local_function_model() -> onnx.ModelProto:
    function = helper.make_function("local", "Twice", ["a"], ["b"],
                                    [_relu(["a"], ["m"]), _relu(["m"], ["b"])],
                                    [helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("Twice", ["x"], ["y"], name="f", domain="local")],
                       [_x()], [tensor_info("y", None)], extra_opsets=[("local", 1)])
    model.functions.append(function)
    return model


def _recursive_function_model() -> onnx.ModelProto:
    function = helper.make_function(
        "local", "Again", ["a"], ["b"],
        [helper.make_node("Again", ["a"], ["b"], domain="local")],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model = make_model([helper.make_node("Again", ["x"], ["y"], name="f", domain="local")],
                       [_x()], [tensor_info("y", None)], extra_opsets=[("local", 1)])
    model.functions.append(function)
    return model


_GRAPH_COMMANDS = ("analyze", "train", "check", "verify")
# graphs whose run could allocate without bound or recurse in native code: forked, timed
_RISKY_GRAPHS = frozenset({"range-huge", "recursive-function", "if-nested-25", "expand-huge",
                           "tile-huge", "constantofshape-huge", "onehot-depth-huge",
                           "rank-300-of-2", "rank-64-of-2", "dim-2pow62", "dim-int64-max",
                           "dim-2pow32-squared", "init-dims-huge", "init-dims-huge-int64",
                           "pad-huge", "reshape-huge", "conv-pads-huge", "topk-k-huge",
                           "gather-index-huge", "concat-5000", "conv-group-huge"})


def graph_cases() -> list[Case]:
    cases = []
    for name, build in _graph_builders().items():
        for command in _GRAPH_COMMANDS:
            isolate = command == "verify" or name in _RISKY_GRAPHS
            cases.append(Case(f"graph-{name}-{command}", _graph(build, command),
                              isolate=isolate))
    return cases


def _graph(build: Callable[[], onnx.ModelProto], command: str) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        model = build()
        save(model, folder / MODEL)
        run = analyze(MODEL, "--batch", "2") if command == "analyze" else _command_run(
            command, MODEL)
        if not _has_dynamic_input(model):  # --batch would only be refused
            run = replace(run, argv=_without_batch(run.argv))
        return run
    return make


def _has_dynamic_input(model: onnx.ModelProto) -> bool:
    return any(dim.dim_param for value in model.graph.input
               for dim in value.type.tensor_type.shape.dim)


def _without_batch(argv: tuple[str, ...]) -> tuple[str, ...]:
    index = argv.index("--batch")
    return argv[:index] + argv[index + 2:]


# ===== 3. hostile dim names ======================================================================


@dataclass(frozen=True)
class Payload:
    """A hostile text; `{marker}` is replaced by the absolute path of the case's marker file."""

    key: str
    text: str
    hangs: bool = False  # evaluating it could run for ever or exhaust memory: fork and time it

    def render(self, folder: Path) -> str:
        return self.text.replace("{marker}", str(folder / MARKER))


def _rce(key: str, text: str) -> Payload:
    return Payload(key, text)


SYMPY_PAYLOADS: tuple[Payload, ...] = (
    _rce("rce-globals", '(1).evalf.__globals__["__builtins__"]["__import__"]("os")'
         '.system("touch {marker}")'),
    _rce("rce-import-system", "__import__('os').system('touch {marker}')"),
    _rce("rce-open", "open('{marker}', 'w')"),
    _rce("rce-exec", "exec(\"open('{marker}', 'w')\")"),
    _rce("rce-eval", "eval(\"__import__('os').system('touch {marker}')\")"),
    _rce("rce-lambda-call", "(lambda: __import__('os').system('touch {marker}'))()"),
    _rce("rce-subclasses", "().__class__.__base__.__subclasses__()"),
    _rce("rce-getattr", "getattr(__builtins__, 'open')('{marker}', 'w')"),
    _rce("rce-S-string", "S(\"__import__('os').system('touch {marker}')\")"),
    _rce("rce-sympify-string", "sympify(\"__import__('os').system('touch {marker}')\")"),
    _rce("rce-symbol-globals", "Symbol('x').__class__.__init__.__globals__"),
    _rce("rce-format", "'{0.__class__}'.format(1)"),
    _rce("rce-shell-subst", "$(touch {marker})"),
    _rce("rce-backticks", "`touch {marker}`"),
    Payload("import-os", "__import__('os')"),
    Payload("lambda", "lambda: 1"),
    Payload("exec", "exec"),
    Payload("eval", "eval"),
    Payload("Symbol-call", "Symbol('x')"),
    Payload("subscript", "x[0]"),
    Payload("attribute", "x.y"),
    Payload("big-string", '"a"*9**9', hangs=True),
    Payload("power-tower", "9**9**9", hangs=True),
    Payload("power-tower-10", "10**10**10", hangs=True),
    Payload("factorial-big", "factorial(10**7)", hangs=True),
    Payload("sum-3000", "+".join(["batch"] * 3000), hangs=True),
    Payload("nested-parens", "(" * 500 + "batch" + ")" * 500, hangs=True),
    Payload("unary-minus-5000", "-" * 5000 + "batch", hangs=True),
    Payload("mod-zero", "Mod(batch, 0)"),
    Payload("div-zero", "1/0"),
    Payload("floor-div-zero", "floor(batch/0)"),
    Payload("1e999", "1e999"),
    Payload("nan", "nan"),
    Payload("oo", "oo"),
    Payload("minus-oo", "-oo"),
    Payload("zoo", "zoo"),
    Payload("I", "I"),
    Payload("E", "E"),
    Payload("pi", "pi"),
    Payload("2pow-2", "2**-2"),
    Payload("pi-batch", "pi*batch"),
    Payload("batch-pow-minus1", "batch**-1"),
    Payload("sqrt-minus1", "sqrt(-1)"),
    Payload("sqrt-batch", "sqrt(batch)"),
    Payload("log-batch", "log(batch)"),
    Payload("batch-pow-batch", "batch**batch"),
    Payload("half", "0.5"),
    Payload("zero", "0"),
    Payload("minus-one", "-1"),
    Payload("batch-minus-batch", "batch - batch"),
    Payload("Max-empty", "Max()"),
    Payload("Mod-one-arg", "Mod(batch)"),
    Payload("relational", "batch < 2"),
    Payload("equality", "batch == 1"),
    Payload("True", "True"),
    Payload("None", "None"),
    Payload("list", "[1, 2]"),
    Payload("dict", "{}"),
    Payload("conditional", "1 if 1 else 2"),
    Payload("Matrix", "Matrix([1])"),
    Payload("hex", "0x10"),
    Payload("underscore-int", "1_000"),
    Payload("arabic-digits", "\u0661\u0662"),
    Payload("cyrillic", "\u0431atch"),
    Payload("cjk", "\u6279\u6b21"),
    Payload("fullwidth-batch", "\uff42\uff41\uff54\uff43\uff48"),
    Payload("math-bold-batch", "\U0001d41b\U0001d41a\U0001d42d\U0001d41c\U0001d421"),
    Payload("zero-width", "batch\u200b"),
    Payload("rtl-override", "\u202ebatch"),
    Payload("nul", "bat\x00ch"),
    Payload("esc-clear", "\x1b[2J\x1b[31mred"),
    Payload("osc-hyperlink", "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"),
    Payload("newline-forged-error", "batch\ngraphmem: error: forged"),
    Payload("carriage-return", "batch\rforged"),
    Payload("backspaces", "batch" + "\x08" * 5 + "evil"),
    Payload("markup-close", "[/b]"),
    Payload("markup-open", "[bold red]batch"),
    Payload("markup-link", "[link=http://evil.example]batch[/link]"),
    Payload("markup-bare-close", "[/]"),
    Payload("html-script", "</script><img src=x onerror=alert(1)>"),
    Payload("space", " "),
    Payload("trailing-space", "batch "),
    Payload("equals", "batch=3"),
    Payload("percent-format", "%s%n%x"),
    Payload("brace-format", "{0}{}"),
    Payload("one-mb", "b" * 2**20, hangs=True),
)

# A cross-section for the positions that are not worth every payload.
_SUBSET_KEYS = frozenset({
    "rce-globals", "rce-import-system", "rce-S-string", "rce-shell-subst", "power-tower",
    "sum-3000", "mod-zero", "div-zero", "1e999", "nan", "zoo", "2pow-2", "pi-batch",
    "batch-pow-minus1", "attribute", "subscript", "nul", "esc-clear", "newline-forged-error",
    "markup-close", "markup-link", "html-script", "fullwidth-batch", "one-mb", "equals",
    "relational", "Matrix", "lambda",
})


def payload_subset() -> list[Payload]:
    return [p for p in SYMPY_PAYLOADS if p.key in _SUBSET_KEYS]


def dim_cases() -> list[Case]:
    cases = []
    for payload in SYMPY_PAYLOADS:
        cases.append(_dim_case("free", payload, _dim_free))
        cases.append(_dim_case("bound", payload, _dim_bound))
    for payload in payload_subset():
        for position, make in (("output", _dim_output), ("value-info", _dim_value_info),
                               ("flag-dim", _flag_dim), ("flag-sweep", _flag_sweep),
                               ("budgets-dims", _budgets_dims), ("check", _dim_check),
                               ("gpus-fits", _dim_gpus_fits)):
            cases.append(_dim_case(position, payload, make))
    return cases


def _dim_case(position: str, payload: Payload,
              make: Callable[[Path, str], Run]) -> Case:
    return Case(f"dim-{position}-{payload.key}",
                lambda folder: make(folder, payload.render(folder)), isolate=payload.hangs)


def _dim_free(folder: Path, text: str) -> Run:
    save(chain_model(x_dims=(text, 8), y_dims=(text, 8)), folder / MODEL)
    return replace(analyze(MODEL), free_dim=text)


def _dim_bound(folder: Path, text: str) -> Run:
    save(chain_model(x_dims=(text, 8), y_dims=(text, 8)), folder / MODEL)
    return replace(analyze(MODEL, "--batch", "3"), bound_dim=text)


def _dim_output(folder: Path, text: str) -> Run:
    save(chain_model(y_dims=(text, 8)), folder / MODEL)
    return analyze(MODEL, "--batch", "3")


def _dim_value_info(folder: Path, text: str) -> Run:
    save(chain_model(mid_dims=(text, 8)), folder / MODEL)
    return analyze(MODEL, "--batch", "3")


def _flag_dim(folder: Path, text: str) -> Run:
    write_mlp(folder)
    return analyze(MODEL, "--dim", f"{text}=3")


def _flag_sweep(folder: Path, text: str) -> Run:
    write_mlp(folder)
    return analyze(MODEL, "--gpu", "t4", "--sweep", f"{text}=1,2")


def _budgets_dims(folder: Path, text: str) -> Run:
    save(chain_model(x_dims=(text, 8), y_dims=(text, 8)), folder / MODEL)
    (folder / "budgets.toml").write_text(
        f'[[model]]\npath = "{MODEL}"\ngpu = "t4"\ndims = {{ {toml_string(text)} = 3 }}\n')
    return Run(("check", "--budgets", "budgets.toml"))


def _dim_check(folder: Path, text: str) -> Run:
    save(chain_model(x_dims=(text, 8), y_dims=(text, 8)), folder / MODEL)
    return check(MODEL, "--batch", "3", "--max-flops", "1G")


def _dim_gpus_fits(folder: Path, text: str) -> Run:
    save(chain_model(x_dims=(text, 8), y_dims=(text, 8)), folder / MODEL)
    return Run(("gpus", "--fits", MODEL))


def toml_string(text: str) -> str:
    """A TOML basic string holding `text` exactly (control characters escaped)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


# ===== 4. hostile names ==========================================================================

NAME_PAYLOADS: tuple[Payload, ...] = (
    Payload("markup-close", "[/b]"),
    Payload("markup-open", "[bold red]name"),
    Payload("markup-link", "[link=http://evil.example]name[/link]"),
    Payload("markup-bare-close", "[/]"),
    Payload("markup-escaped", "\\[b]name"),
    Payload("markup-emoji-code", ":warning: :thumbs_up:"),
    Payload("esc-color", "\x1b[31mred\x1b[0m"),
    Payload("esc-clear", "\x1b[2J\x1b[H"),
    Payload("osc-hyperlink", "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"),
    Payload("csi-c1", "\x9b31mred"),
    Payload("nul", "na\x00me"),
    Payload("bell", "name\x07"),
    Payload("newline-forged-error", "name\ngraphmem: error: forged"),
    Payload("carriage-return", "name\rforged"),
    Payload("backspaces", "name" + "\x08" * 4 + "evil"),
    Payload("rtl-override", "\u202ename"),
    Payload("zero-width", "na\u200bme"),
    Payload("emoji", "\U0001f4a5name"),
    Payload("html-script", "</script><img src=x onerror=alert(1)>"),
    Payload("html-attr", "\" onmouseover=\"alert(1)"),
    Payload("percent-format", "%s%n%x"),
    Payload("brace-format", "{0}{}{__class__}"),
    Payload("shell", "$(touch {marker})"),
    Payload("empty", ""),
    Payload("spaces", "   "),
    Payload("long-10k", "n" * 10_000),
    Payload("one-mb", "n" * 2**20, hangs=True),
)
_MARKUP_KEYS = frozenset({"markup-close", "markup-open", "markup-link", "markup-bare-close",
                          "markup-escaped", "markup-emoji-code"})


def name_cases() -> list[Case]:
    cases = []
    for payload in NAME_PAYLOADS:
        for position, make in _NAME_POSITIONS.items():
            cases.append(Case(f"name-{position}-{payload.key}",
                              _name_case(make, payload), isolate=payload.hangs))
        if _file_safe(payload.text) and "{marker}" not in payload.text:
            cases.append(Case(f"name-file-{payload.key}", _name_case(_name_file, payload),
                              isolate=payload.hangs))
    for payload in NAME_PAYLOADS:
        if payload.key.startswith("html") or payload.key in ("markup-close", "esc-color",
                                                             "newline-forged-error"):
            for position in ("graph", "node", "tensor", "dim"):
                cases.append(Case(f"html-{position}-{payload.key}",
                                  _name_case(_html_case(position), payload)))
    return cases


def _name_case(make: Callable[[Path, str, Payload], Run],
               payload: Payload) -> Callable[[Path], Run]:
    return lambda folder: make(folder, payload.render(folder), payload)


def _name_model(position: str, text: str) -> onnx.ModelProto:
    names = {"graph": {"graph_name": text}, "node": {"node_name": text},
             "tensor": {"tensor_name": text}, "weight": {"weight_name": text},
             "op-type": {"op_type": text}, "domain": {"domain": text},
             "scope": {"scope": f"['', '{text}', '{text}.0', '_relu']",
                       "node_name": "/block/Relu"},
             "dim": {"x_dims": (text, 8), "y_dims": (text, 8)}}[position]
    return chain_model(**names)  # type: ignore[arg-type]


def _name_analyze(position: str) -> Callable[[Path, str, Payload], Run]:
    def make(folder: Path, text: str, payload: Payload) -> Run:
        save(_name_model(position, text), folder / MODEL)
        # --verbose: the tables and the graph row render every name the model carries
        run = analyze(MODEL, "--batch", "2", "--verbose")
        if position == "graph" and payload.key in _MARKUP_KEYS:
            run = replace(run, verbatim=text)
        return run
    return make


def _name_check(folder: Path, text: str, payload: Payload) -> Run:
    save(_name_model("graph", text), folder / MODEL)
    (folder / "budgets.toml").write_text(
        f'[[model]]\npath = "{MODEL}"\nname = {toml_string(text)}\ngpu = "t4"\nbatch = 2\n')
    run = Run(("check", "--budgets", "budgets.toml", "--junit", "junit.xml", "--json",
               "check.json"), outputs=("junit.xml", "check.json"))
    return replace(run, verbatim=text) if payload.key in _MARKUP_KEYS else run


def _name_check_node(folder: Path, text: str, payload: Payload) -> Run:
    save(_name_model("node", text), folder / MODEL)
    return replace(check(MODEL, "--batch", "2", "--junit", "junit.xml"), outputs=("junit.xml",))


def _name_verify(folder: Path, text: str, payload: Payload) -> Run:
    save(_name_model("node", text), folder / MODEL)
    return Run(("verify", MODEL, "--batch", "2", "--no-optimized-run", "--all-nodes"))


def _name_train(folder: Path, text: str, payload: Payload) -> Run:
    save(_name_model("tensor", text), folder / MODEL)
    return analyze(MODEL, "--batch", "2", "--train", "--gpu", "t4", "--suggest")


_NAME_POSITIONS: dict[str, Callable[[Path, str, Payload], Run]] = {
    **{p: _name_analyze(p) for p in ("graph", "node", "tensor", "weight", "op-type", "domain",
                                     "scope")},
    "check-label": _name_check,
    "check-node": _name_check_node,
    "verify-node": _name_verify,
    "train-tensor": _name_train,
}


def _file_safe(text: str) -> bool:
    return bool(text.strip()) and "/" not in text and "\x00" not in text and len(
        text.encode()) < 200


def _name_file(folder: Path, text: str, payload: Payload) -> Run:
    name = f"{text}.onnx"
    write_mlp(folder, name)
    model = name if not name.startswith("-") else f"./{name}"
    run = Run(("analyze", model, "--batch", "2"), outputs=(f"{text}.graphmem.html",))
    return run


def _html_case(position: str) -> Callable[[Path, str, Payload], Run]:
    def make(folder: Path, text: str, payload: Payload) -> Run:
        save(_name_model(position, text), folder / MODEL)
        run = Run(("analyze", MODEL, "--html", "report.html", "--batch", "2"),
                  outputs=("report.html",))
        return replace(run, html_payload=text if payload.key.startswith("html") else None)
    return make


# ===== 5. hostile external data ==================================================================

# Where the external data says it is, and whether that place is outside the model's folder.
_SUB = "m"  # the model lives in <cwd>/m/; the secret in <cwd>/secret.bin


@dataclass(frozen=True)
class Location:
    key: str
    location: Callable[[Path], str]  # the text written into the model, given the cwd
    prepare: Callable[[Path], None] = lambda folder: None
    escapes: bool = True  # outside the model's folder: no command may read it
    risky: bool = False  # reading could block or never end: fork and time it
    extra: tuple[tuple[str, str], ...] = ()


def _plant_secret(folder: Path) -> None:
    (folder / "secret.bin").write_bytes(secret_bytes())
    (folder / _SUB).mkdir(exist_ok=True)


def _plant_sibling(folder: Path) -> None:
    _plant_secret(folder)
    (folder / _SUB / "model.onnx.data").write_bytes(secret_bytes())


def _plant_link(folder: Path) -> None:
    _plant_secret(folder)
    (folder / _SUB / "link.bin").symlink_to("../secret.bin")


def _plant_fifo(folder: Path) -> None:
    _plant_secret(folder)
    os.mkfifo(folder / _SUB / "fifo.bin")


def _plant_dir(folder: Path) -> None:
    _plant_secret(folder)
    (folder / _SUB / "adir").mkdir()


def _plant_short(folder: Path) -> None:
    _plant_secret(folder)
    (folder / _SUB / "model.onnx.data").write_bytes(b"\x01\x02\x03")


LOCATIONS: tuple[Location, ...] = (
    Location("sibling-data", lambda f: "model.onnx.data", _plant_sibling, escapes=False),
    Location("parent", lambda f: "../secret.bin", _plant_secret),
    Location("dotdot-inside", lambda f: "sub/../../secret.bin", _plant_secret),
    Location("absolute", lambda f: str(f / "secret.bin"), _plant_secret),
    Location("cwd-relative", lambda f: "secret.bin", _plant_secret),
    Location("symlink-out", lambda f: "link.bin", _plant_link),
    Location("dev-zero", lambda f: "/dev/zero", _plant_secret, risky=True),
    Location("dev-urandom", lambda f: "/dev/urandom", _plant_secret, risky=True),
    Location("proc-environ", lambda f: "/proc/self/environ", _plant_secret),
    Location("etc-passwd", lambda f: "/etc/passwd", _plant_secret),
    Location("fifo", lambda f: "fifo.bin", _plant_fifo, escapes=False, risky=True),
    Location("directory", lambda f: "adir", _plant_dir, escapes=False),
    Location("missing", lambda f: "missing.bin", _plant_secret, escapes=False),
    Location("truncated", lambda f: "model.onnx.data", _plant_short, escapes=False),
    Location("empty", lambda f: "", _plant_secret, escapes=False),
    Location("self", lambda f: "model.onnx", _plant_secret, escapes=False),
    Location("dot", lambda f: ".", _plant_secret, escapes=False),
    Location("nul", lambda f: "a\x00b", _plant_secret, escapes=False),
    Location("long-name", lambda f: "d" * 5000, _plant_secret, escapes=False),
    Location("tilde", lambda f: "~/.ssh/id_rsa", _plant_secret, escapes=False),
    Location("offset-junk", lambda f: "model.onnx.data", _plant_sibling, escapes=False,
             extra=(("offset", "abc"),)),
    Location("offset-negative", lambda f: "model.onnx.data", _plant_sibling, escapes=False,
             extra=(("offset", "-8"),)),
    Location("offset-huge", lambda f: "model.onnx.data", _plant_sibling, escapes=False,
             extra=(("offset", str(2**62)),)),
    Location("length-huge", lambda f: "model.onnx.data", _plant_sibling, escapes=False,
             extra=(("length", str(2**62)),)),
    Location("length-junk", lambda f: "model.onnx.data", _plant_sibling, escapes=False,
             extra=(("length", "1e3"),)),
    Location("unknown-key", lambda f: "model.onnx.data", _plant_sibling, escapes=False,
             extra=(("checksum", "\x00" * 10),)),
)


def _shape_carrier(location: str, extra: Sequence[tuple[str, str]]) -> onnx.ModelProto:
    """An external int64 initializer used as a shape: y = x + ConstantOfShape(S), so a runtime
    that folds constants plans y at the secret's shape."""
    shape = external_tensor("S", TensorProto.INT64, [2], location, extra)
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("ConstantOfShape", ["S"], ["big"], name="fill", value=one),
             helper.make_node("Add", ["x", "big"], ["y"], name="add")]
    return make_model(nodes, [_x((1, 3))], [tensor_info("y", None)], [shape])


def _weight_carrier(location: str, extra: Sequence[tuple[str, str]]) -> onnx.ModelProto:
    """An external float weight of 2 x 4... read as bytes of whatever the location holds."""
    weight = external_tensor("W", TensorProto.FLOAT, [4], location, extra)
    nodes = [helper.make_node("Add", ["x", "W"], ["y"], name="add")]
    return make_model(nodes, [_x((2, 4))], [tensor_info("y", (2, 4))], [weight])


def _constant_chain(location: str, extra: Sequence[tuple[str, str]]) -> onnx.ModelProto:
    """The folding leak: Constant(EXTERNAL) -> Cast -> Gather -> ConstantOfShape."""
    value = external_tensor("v", TensorProto.INT64, [2], location, extra)
    nodes = [helper.make_node("Constant", [], ["c"], name="const", value=value),
             helper.make_node("Cast", ["c"], ["c64"], name="cast", to=TensorProto.INT64),
             helper.make_node("Gather", ["c64", "idx"], ["shape"], name="gather", axis=0),
             helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill"),
             helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return make_model(nodes, [_x((2, 4))], [tensor_info("y", (2, 4)), tensor_info("big", None)],
                      [_ints("idx", [0, 1])])


_CARRIERS: dict[str, Callable[[str, Sequence[tuple[str, str]]], onnx.ModelProto]] = {
    "shape": _shape_carrier, "weight": _weight_carrier, "constant": _constant_chain,
}


def external_cases() -> list[Case]:
    cases = []
    for where in LOCATIONS:
        for carrier in _CARRIERS:
            cases.append(Case(f"external-{carrier}-{where.key}-analyze",
                              _external(where, carrier, "analyze"), isolate=where.risky))
        for command in ("analyze-gpu", "check", "gpus", "verify"):
            cases.append(Case(f"external-shape-{where.key}-{command}",
                              _external(where, "shape", command),
                              isolate=where.risky or command == "verify"))
    cases.append(Case("external-sparse-3gib-analyze", _sparse_external("analyze"),
                      isolate=True, timeout_s=20))
    cases.append(Case("external-sparse-3gib-check", _sparse_external("check"), isolate=True,
                      timeout_s=20))
    return cases


def _external(where: Location, carrier: str, command: str) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        where.prepare(folder)
        model = f"{_SUB}/{MODEL}"
        save(_CARRIERS[carrier](where.location(folder), where.extra), folder / model)
        runs = {"analyze": analyze(model), "analyze-gpu": analyze(model, "--gpu", "t4"),
                "check": check(model), "gpus": Run(("gpus", "--fits", model)),
                "verify": Run(("verify", model, "--no-optimized-run", "--all-nodes"))}
        run = runs[command]
        # verify runs the model for real: it may read the data file next to the model
        private = where.escapes or command != "verify"
        return replace(run, secrets=(SECRET_PATTERN,) if private else ())
    return make


def _sparse_external(command: str) -> Callable[[Path], Run]:
    """A 3 GiB weight in a sparse data file: analysis must not read it."""
    def make(folder: Path) -> Run:
        weight = external_tensor("W", TensorProto.FLOAT, [3 * 2**28], "model.onnx.data")
        nodes = [helper.make_node("Gather", ["W", "i"], ["y"], name="gather", axis=0)]
        model = make_model(nodes, [tensor_info("i", (2,), TensorProto.INT64)],
                           [tensor_info("y", (2,))], [weight])
        save(model, folder / MODEL)
        with (folder / "model.onnx.data").open("wb") as handle:
            handle.truncate(3 * 2**30)
        return analyze(MODEL) if command == "analyze" else check(MODEL)
    return make


# ===== 6. bad flags ==============================================================================

_INT_VALUES = ("0", "-1", "nan", "inf", "1e999", str(2**62), str(2**63), "", "abc", "3.5",
               "0x10", "1_000", "\u0663", "+3", " 3", "9" * 30)
_SIZE_VALUES = ("0", "-1", "nan", "inf", "1e999", "1e999GiB", "1e308GiB", str(2**62),
                "99999999999999",
                "999999999999999999999TiB", "", "abc", "GiB", "-1GiB", "1.5", "12 GiB",
                "0x10MiB", "90%", "1e3")
_SHARE_VALUES = ("0%", "-5%", "101%", "1e999%", "nan%", "inf%", "%", "100%", "1e-999%")
_COUNT_VALUES = ("0", "-1", "nan", "inf", "1e999", "1e308G", "1e400", str(2**62), "", "abc",
                 "4.1GFLOPs", "1,000", "_", "1.5B", "1e-999", "9" * 400)
_LATENCY_VALUES = ("0ms", "-1ms", "nanms", "infms", "1e999s", "1e308ms", "", "abc", "20",
                   "20 ms", "1e-400s", "1e-999ns")
_PERCENT_VALUES = ("0%", "-1%", "nan%", "inf%", "1e999%", "", "abc", "5", "5%%")
# values that are never right for the flag's type: exit 2
_NEVER_INT = frozenset({"nan", "inf", "1e999", "", "abc", "3.5", "0x10", "-1"})
_NEVER_SIZE = frozenset({"-1", "nan", "inf", "1e999", "1e999GiB", "", "abc", "GiB", "-1GiB",
                         "0x10MiB", "1e308GiB"})
_NEVER_COUNT = frozenset({"-1", "nan", "inf", "1e999", "1e308G", "1e400", "", "abc", "_",
                          "9" * 400})
_NEVER_LATENCY = frozenset({"-1ms", "nanms", "infms", "", "abc", "20"})
_NEVER_PERCENT = frozenset({"-1%", "nan%", "inf%", "", "abc", "5", "5%%"})


@dataclass(frozen=True)
class Flag:
    """One numeric flag: the command line around it and the values to try."""

    key: str
    argv: Callable[[str], tuple[str, ...]]  # value -> argv
    values: tuple[str, ...]
    never: frozenset[str]
    isolate: bool = False


def _flags() -> list[Flag]:
    a = ("analyze", MODEL, "--no-html")
    train = (*a, "--train", "--batch", "2")
    c = ("check", MODEL)
    verify = ("verify", MODEL, "--no-optimized-run")
    return [
        Flag("analyze-batch", lambda v: (*a, "--batch", v), _INT_VALUES, _NEVER_INT | {"0"}),
        Flag("analyze-dim", lambda v: (*a, "--dim", f"batch={v}"), _INT_VALUES,
             _NEVER_INT | {"0"}),
        Flag("analyze-depth", lambda v: (*a, "--depth", v), _INT_VALUES, _NEVER_INT | {"0"}),
        Flag("analyze-cuda-reserve", lambda v: (*a, "--gpu", "t4", "--batch", "2",
                                                "--cuda-reserve", v),
             _SIZE_VALUES, _NEVER_SIZE | {"90%"}),
        Flag("analyze-memory-budget", lambda v: (*a, "--gpu", "t4", "--batch", "2",
                                                 "--memory-budget", v),
             _SIZE_VALUES + _SHARE_VALUES, _NEVER_SIZE | {"-5%", "1e999%", "nan%", "inf%", "%"}),
        Flag("analyze-grad-accum", lambda v: (*train, "--grad-accum", v), _INT_VALUES,
             _NEVER_INT | {"0"}),
        Flag("analyze-gpus", lambda v: (*train, "--gpus", v), _INT_VALUES, _NEVER_INT | {"0"}),
        Flag("analyze-tensor-parallel", lambda v: (*train, "--gpus", "2", "--tensor-parallel",
                                                   v), _INT_VALUES, _NEVER_INT | {"0"}),
        Flag("analyze-reduce-bucket", lambda v: (*train, "--gpus", "2", "--strategy", "zero2",
                                                 "--reduce-bucket-size", v),
             _INT_VALUES, _NEVER_INT | {"0"}),
        Flag("analyze-fsdp-depth", lambda v: (*train, "--gpus", "2", "--strategy", "fsdp",
                                              "--fsdp-depth", v), _INT_VALUES, _NEVER_INT),
        Flag("analyze-kv-cache", lambda v: (*a, "--batch", "2", "--kv-cache", v),
             ("auto", "1,2,3", "0,0,0", "-1,2,3", "a,b,c", "1,2", f"{2**62},1,1", "", ",,",
              "1e999,1,1"), frozenset({"-1,2,3", "a,b,c", "1,2", "", ",,", "1e999,1,1"})),
        Flag("analyze-kv-dtype", lambda v: (*a, "--batch", "2", "--kv-cache", "1,2,4",
                                            "--kv-dtype", v),
             ("float16", "nosuch", "", "int4", "[/b]", "\x1b[31m"),
             frozenset({"nosuch", "", "[/b]", "\x1b[31m"})),
        Flag("analyze-sweep", lambda v: (*a, "--gpu", "t4", "--sweep", v), _SWEEP_VALUES,
             frozenset({"batch=", "batch=0", "batch=-1", "batch=abc", "=1,2", "batch",
                        "nosuch=1,2", "batch=1,2,...,1e999", "batch=nan"})),
        Flag("analyze-gpu", lambda v: (*a, "--batch", "2", "--gpu", v),
             ("", "nosuch", "[/b]", "t4\x1b[31m", "a" * 1000, "%s", "t4 ", "T4", "\x00"),
             frozenset({"", "nosuch", "[/b]", "t4\x1b[31m", "a" * 1000, "%s", "\x00"})),
        Flag("check-batch", lambda v: (*c, "--batch", v), _INT_VALUES, _NEVER_INT | {"0"}),
        Flag("check-max-memory", lambda v: (*c, "--gpu", "t4", "--batch", "2", "--max-memory",
                                            v), _SIZE_VALUES + _SHARE_VALUES,
             _NEVER_SIZE | {"-5%", "1e999%", "nan%", "inf%", "%", "0%", "101%"}),
        Flag("check-max-latency", lambda v: (*c, "--gpu", "t4", "--batch", "2",
                                             "--max-latency", v), _LATENCY_VALUES,
             _NEVER_LATENCY),
        Flag("check-max-params", lambda v: (*c, "--batch", "2", "--max-params", v),
             _COUNT_VALUES, _NEVER_COUNT),
        Flag("check-max-flops", lambda v: (*c, "--batch", "2", "--max-flops", v),
             _COUNT_VALUES, _NEVER_COUNT),
        Flag("check-max-growth", lambda v: (*c, "--batch", "2", "--baseline", "base.json",
                                            "--max-growth", v), _PERCENT_VALUES,
             _NEVER_PERCENT),
        Flag("check-cuda-reserve", lambda v: (*c, "--gpu", "t4", "--batch", "2",
                                              "--cuda-reserve", v), _SIZE_VALUES,
             _NEVER_SIZE | {"90%"}),
        Flag("gpus-batch", lambda v: ("gpus", "--fits", MODEL, "--batch", v), _INT_VALUES,
             _NEVER_INT | {"0"}),
        Flag("gpus-cuda-reserve", lambda v: ("gpus", "--fits", MODEL, "--batch", "2",
                                             "--cuda-reserve", v), _SIZE_VALUES,
             _NEVER_SIZE | {"90%"}),
        Flag("verify-seed", lambda v: (*verify, "--batch", "2", "--seed", v),
             ("-1", str(2**32), str(2**64), "abc", "", "1e999", "0"),
             frozenset({"abc", "", "1e999"}), isolate=True),
        Flag("verify-threads", lambda v: (*verify, "--batch", "2", "--threads", v),
             ("0", "-1", str(2**31), str(2**64), "abc", "1e999"),
             frozenset({"0", "-1", "abc", "1e999"}), isolate=True),
        Flag("verify-batch", lambda v: (*verify, "--batch", v),
             ("0", "-1", str(2**62), str(2**31), "abc"), frozenset({"0", "-1", "abc"}),
             isolate=True),
    ]


_SWEEP_VALUES = ("batch=", "batch=0", "batch=-1", "batch=abc", "=1,2", "batch", "nosuch=1,2",
                 "batch=1,2,...,1e999", "batch=nan", f"batch=1,2,4,...,{2**62}",
                 f"batch={2**62}", "batch=1,...", "batch=1,2,...", "batch=3,2,1",
                 "batch=1,1,1", "batch=" + ",".join(str(i) for i in range(1, 2001)))


def flag_cases() -> list[Case]:
    cases = []
    for flag in _flags():
        for index, value in enumerate(flag.values):
            cases.append(Case(f"flag-{flag.key}-{index}-{slug(value)}", _flag(flag, value),
                              isolate=flag.isolate))
    return cases


def _flag(flag: Flag, value: str) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        write_mlp(folder)
        if flag.key == "check-max-growth":
            write_baseline(folder / "base.json")
        codes = ERROR if value in flag.never else ANY_CODE
        return Run(flag.argv(value), codes=codes)
    return make


def baseline_dict() -> dict[str, object]:
    """The fields of an analyze JSON a baseline needs, for the mlp at batch 2."""
    return {"schema_version": 1, "config": {"mode": "inference"},
            "dims": {"bound": {"batch": 2}, "free": [], "batch_dim": "batch"},
            "memory": {"peak_bytes": 4000}, "params": {"count": 714},
            "flops": {"total": 2500}}


def write_baseline(path: Path, data: object | None = None) -> None:
    path.write_text(json.dumps(baseline_dict() if data is None else data))


def torch_input_cases() -> list[Case]:
    values = ("99999999999x99999999999", "x".join(["2"] * 30), "0x4", "-1x4", "x", "",
              "2x4:complex64", "2x4:nosuch", "2x4:", ":int64", f"{2**62}x4", "4x" + "1" * 5000,
              "2X4", "2x4:INT64", "\u0662x4")
    never = {"0x4", "-1x4", "x", "", "2x4:complex64", "2x4:nosuch", ":int64", "4x" + "1" * 5000}
    return [Case(f"flag-input-{index}-{slug(value)}", _torch_input(value, value in never),
                 isolate=True) for index, value in enumerate(values)]


def _torch_input(value: str, never: bool) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        (folder / "net.py").write_text(_TORCH_HEADER + "def build():\n    return nn.ReLU()\n")
        return Run(("analyze", "net.py:build", "--no-html", "--input", value),
                   codes=ERROR if never else ANY_CODE)
    return make


# ===== 7. bad output paths =======================================================================


@dataclass(frozen=True)
class OutputFlag:
    key: str
    argv: Callable[[str], tuple[str, ...]]


_OUTPUT_FLAGS = (
    OutputFlag("analyze-json", lambda p: ("analyze", MODEL, "--no-html", "--batch", "2",
                                          "--json", p)),
    OutputFlag("analyze-html", lambda p: ("analyze", MODEL, "--batch", "2", "--html", p)),
    OutputFlag("check-json", lambda p: ("check", MODEL, "--batch", "2", "--json", p)),
    OutputFlag("check-junit", lambda p: ("check", MODEL, "--batch", "2", "--junit", p)),
    OutputFlag("verify-json", lambda p: ("verify", MODEL, "--batch", "2", "--no-optimized-run",
                                         "--json", p)),
)


def _same_inode(target: str, link: bool) -> Callable[[Path], tuple[str, tuple[str, ...]]]:
    """An output path that is a hard (or symbolic) link to an input file."""
    def prepare(folder: Path) -> tuple[str, tuple[str, ...]]:
        if link:
            (folder / "out.x").symlink_to(target)
        else:
            os.link(folder / target, folder / "out.x")
        return "out.x", ("out.x",)
    return prepare


def _fixed(path: str, outputs: tuple[str, ...] = ()
           ) -> Callable[[Path], tuple[str, tuple[str, ...]]]:
    return lambda folder: (path, outputs)


# bad output path -> (path text, outputs it may create); all must end in exit 0 or 2
_OUTPUT_PATHS: dict[str, tuple[Callable[[Path], tuple[str, tuple[str, ...]]], frozenset[int]]] = {
    "missing-folder": (_fixed("nodir/deeper/out.x", ("nodir", "nodir/deeper",
                                                      "nodir/deeper/out.x")), ANY_CODE),
    "dev-full": (_fixed("/dev/full"), ERROR),
    "read-only": (_fixed("/proc/version"), ERROR),
    "file-as-folder": (_fixed(f"{MODEL}/out.x"), ERROR),
    "name-too-long": (_fixed("a" * 300 + ".x"), ERROR),
    "path-too-long": (_fixed("d/" * 2100 + "out.x"), ERROR),
    "empty": (_fixed(""), ERROR),
    "dot": (_fixed("."), ERROR),
    "root": (_fixed("/"), ERROR),
    "nul": (_fixed("out\x00.x"), ERROR),
    "the-model": (_fixed(MODEL), ERROR),
    "hardlink-model": (_same_inode(MODEL, link=False), ANY_CODE),
    "symlink-model": (_same_inode(MODEL, link=True), ANY_CODE),
    "hardlink-data": (_same_inode("model.onnx.data", link=False), ANY_CODE),
    "the-data": (_fixed("model.onnx.data"), ERROR),
    "dev-null": (_fixed("/dev/null"), ANY_CODE),
}


def output_cases() -> list[Case]:
    cases = []
    for flag in _OUTPUT_FLAGS:
        for key, (prepare, codes) in _OUTPUT_PATHS.items():
            cases.append(Case(f"output-{flag.key}-{key}", _output(flag, prepare, codes)))
    for key, (prepare, codes) in _CHECK_INPUT_OUTPUTS.items():
        for flag_name in ("--json", "--junit"):
            cases.append(Case(f"output-budgets-{flag_name[2:]}-{key}",
                              _check_input_output(flag_name, prepare, codes)))
    return cases


def _with_external_data(folder: Path) -> None:
    """The mlp with its weights in model.onnx.data (a real data file to protect)."""
    onnx.save_model(mlp_model(), str(folder / MODEL), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)


def _output(flag: OutputFlag, prepare: Callable[[Path], tuple[str, tuple[str, ...]]],
            codes: frozenset[int]) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        _with_external_data(folder)
        path, outputs = prepare(folder)
        return Run(flag.argv(path), outputs=outputs, codes=codes)
    return make


def _budget_files(folder: Path) -> None:
    _with_external_data(folder)
    write_baseline(folder / "base.json")
    (folder / "budgets.toml").write_text(
        f'[[model]]\npath = "{MODEL}"\nbatch = 2\nbaseline = "base.json"\n'
        'max_growth = "50%"\n')


# outputs that are the check's own inputs: the budgets file and the baseline
_CHECK_INPUT_OUTPUTS: dict[str, tuple[Callable[[Path], tuple[str, tuple[str, ...]]],
                                      frozenset[int]]] = {
    "the-budgets": (_fixed("budgets.toml"), ERROR),
    "hardlink-budgets": (_same_inode("budgets.toml", link=False), ANY_CODE),
    "the-baseline": (_fixed("base.json"), ERROR),
    "hardlink-baseline": (_same_inode("base.json", link=False), ANY_CODE),
    "hardlink-data": (_same_inode("model.onnx.data", link=False), ANY_CODE),
}


def _check_input_output(flag: str, prepare: Callable[[Path], tuple[str, tuple[str, ...]]],
                        codes: frozenset[int]) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        _budget_files(folder)
        path, outputs = prepare(folder)
        return Run(("check", "--budgets", "budgets.toml", flag, path), outputs=outputs,
                   codes=codes)
    return make


# ===== 8. budgets files ==========================================================================

# TOML junk by type; each key says which of them it accepts.
_TOML_JUNK = {"str": '"abc"', "neg": "-1", "float": "1.5", "bool": "true", "array": "[1, 2]",
              "table": "{ a = 1 }", "date": "1979-05-27", "nan": "nan", "inf": "inf",
              "huge": "9223372036854775807", "exp": '"1e999"', "empty": '""',
              "nul": '"a\\u0000b"', "nested": "[[[[1]]]]"}
_ACCEPTS = {  # junk keys that are a legal type and value for the key: exit 0 or 1 or 2
    "gpu": set(), "batch": {"huge"}, "dims": {"table"}, "cuda_reserve": {"float", "huge"},
    "fail_on_unsupported": {"bool"}, "max_memory": {"float", "huge"},
    "max_latency": set(), "max_params": {"float", "huge"}, "max_flops": {"float", "huge"},
    "max_growth": set(), "path": set(), "name": {"str", "empty", "nul", "exp"}, "baseline": set(),
}
_DEFAULT_ONLY = ("gpu", "batch", "dims", "max_memory", "fail_on_unsupported")


def budget_cases() -> list[Case]:
    cases = []
    for key, accepted in _ACCEPTS.items():
        for junk, text in _TOML_JUNK.items():
            codes = ANY_CODE if junk in accepted else ERROR
            cases.append(Case(f"budgets-model-{key}-{junk}", _budget_key("model", key, text,
                                                                        codes)))
    for key in _DEFAULT_ONLY:
        for junk in ("str", "array", "table", "nan", "nested"):
            codes = ANY_CODE if junk in _ACCEPTS[key] else ERROR
            cases.append(Case(f"budgets-defaults-{key}-{junk}",
                              _budget_key("defaults", key, _TOML_JUNK[junk], codes)))
    for name, (text, codes) in _BUDGET_FILES.items():
        cases.append(Case(f"budgets-file-{name}", _budget_text(text, codes)))
    for name, make in _BUDGET_SPECIALS.items():
        cases.append(Case(f"budgets-file-{name}", make, isolate=name in ("fifo",)))
    return cases


def _budget_key(table: str, key: str, value: str, codes: frozenset[int]
                ) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        write_mlp(folder)
        write_baseline(folder / "base.json")
        entry = {"path": f'"{MODEL}"', "batch": "2", "gpu": '"t4"'}
        if table == "model":
            entry[key] = value
            text = "[[model]]\n" + "".join(f"{k} = {v}\n" for k, v in entry.items())
        else:
            text = f"[defaults]\n{key} = {value}\n\n[[model]]\npath = \"{MODEL}\"\n"
        (folder / "budgets.toml").write_text(text)
        return Run(("check", "--budgets", "budgets.toml"), codes=codes)
    return make


_MODEL_ENTRY = f'[[model]]\npath = "{MODEL}"\nbatch = 2\n'
_BUDGET_FILES: dict[str, tuple[str | bytes, frozenset[int]]] = {
    "empty": ("", ERROR),
    "comments-only": ("# nothing\n", ERROR),
    "model-int": ("model = 1\n", ERROR),
    "model-empty-array": ("model = []\n", ERROR),
    "model-array-of-ints": ("model = [1, 2]\n", ERROR),
    "model-table": (f'[model]\npath = "{MODEL}"\n', ERROR),
    "defaults-int": ("defaults = 1\n" + _MODEL_ENTRY, ERROR),
    "defaults-array": (f'[[defaults]]\ngpu = "t4"\n{_MODEL_ENTRY}', ERROR),
    "unknown-top-key": ("evil = 1\n" + _MODEL_ENTRY, ERROR),
    "typo-key": (_MODEL_ENTRY + 'max_memroy = "1GiB"\n', ERROR),
    "unknown-key-markup": (_MODEL_ENTRY + '"[/b]" = 1\n', ERROR),
    "unknown-key-esc": (_MODEL_ENTRY + '"\\u001b[2J" = 1\n', ERROR),
    "unknown-key-1mb": (_MODEL_ENTRY + f'"{"k" * 2**20}" = 1\n', ERROR),
    "deep-array": ("a = " + "[" * 5000 + "]" * 5000 + "\n" + _MODEL_ENTRY, ERROR),
    "deep-inline-table": ("a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n", ERROR),
    "deep-dotted-key": (".".join(["k"] * 2000) + " = 1\n", ERROR),
    "dims-deep": (_MODEL_ENTRY + "dims = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n", ERROR),
    "path-nul": ('[[model]]\npath = "m\\u0000.onnx"\nbatch = 2\n', ERROR),
    "path-empty": ('[[model]]\npath = ""\nbatch = 2\n', ERROR),
    "path-dot": ('[[model]]\npath = "."\nbatch = 2\n', ERROR),
    "path-absolute-dir": ('[[model]]\npath = "/"\nbatch = 2\n', ERROR),
    "path-dev-zero": ('[[model]]\npath = "/dev/zero"\nbatch = 2\n', ERROR),
    "path-itself": ('[[model]]\npath = "budgets.toml"\nbatch = 2\n', ERROR),
    "path-missing": ('[[model]]\npath = "missing.onnx"\nbatch = 2\n', ERROR),
    "path-torch-spec": ('[[model]]\npath = "net.py:build"\nbatch = 2\n', ERROR),
    "path-long": (f'[[model]]\npath = "{"p" * 5000}.onnx"\nbatch = 2\n', ERROR),
    "baseline-dir": (_MODEL_ENTRY + 'baseline = "."\nmax_growth = "5%"\n', ERROR),
    "baseline-nul": (_MODEL_ENTRY + 'baseline = "a\\u0000"\nmax_growth = "5%"\n', ERROR),
    "two-models-same-name": (_MODEL_ENTRY + 'name = "x"\n' + _MODEL_ENTRY + 'name = "x"\n',
                             ANY_CODE),
    "1000-models": (_MODEL_ENTRY * 1000, ANY_CODE),
    "binary-junk": (random.Random(5).randbytes(3000), ERROR),
    "utf16": (_MODEL_ENTRY.encode("utf-16"), ERROR),
    "utf8-bom": (("\ufeff" + _MODEL_ENTRY).encode(), ANY_CODE),
    "invalid-utf8": (_MODEL_ENTRY.encode() + b'name = "\xff\xfe"\n', ERROR),
    "nul-byte": (_MODEL_ENTRY.encode() + b"\x00\n", ERROR),
    "huge-int": (_MODEL_ENTRY.replace("batch = 2", "batch = 99999999999999999999999"), ERROR),
}


def _budget_text(text: str | bytes, codes: frozenset[int]) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        write_mlp(folder)
        data = text if isinstance(text, bytes) else text.encode()
        (folder / "budgets.toml").write_bytes(data)
        return Run(("check", "--budgets", "budgets.toml"), codes=codes)
    return make


def _budgets_fifo(folder: Path) -> Run:
    os.mkfifo(folder / "budgets.toml")
    return Run(("check", "--budgets", "budgets.toml"), codes=ERROR)


def _budgets_dir(folder: Path) -> Run:
    (folder / "budgets.toml").mkdir()
    return Run(("check", "--budgets", "budgets.toml"), codes=ERROR)


def _budgets_missing(folder: Path) -> Run:
    return Run(("check", "--budgets", "budgets.toml"), codes=ERROR)


def _budgets_dev_null(folder: Path) -> Run:
    return Run(("check", "--budgets", "/dev/null"), codes=ERROR)


def _budgets_with_flags(folder: Path) -> Run:
    write_mlp(folder)
    (folder / "budgets.toml").write_text(_MODEL_ENTRY)
    return Run(("check", "--budgets", "budgets.toml", MODEL, "--gpu", "t4"), codes=ERROR)


_BUDGET_SPECIALS: dict[str, Callable[[Path], Run]] = {
    "fifo": _budgets_fifo, "directory": _budgets_dir, "missing": _budgets_missing,
    "dev-null": _budgets_dev_null, "with-model-flags": _budgets_with_flags,
}


# ===== 9. baselines ==============================================================================


def _set(path: Sequence[str], value: object) -> dict[str, object]:
    """The baseline with the field at `path` replaced (or deleted, for ...)."""
    data = json.loads(json.dumps(baseline_dict()))
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is Ellipsis:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_BASELINE_FIELDS = (("schema_version",), ("config",), ("config", "mode"), ("dims",),
                    ("dims", "bound"), ("dims", "free"), ("memory",), ("memory", "peak_bytes"),
                    ("params", "count"), ("flops", "total"))
_BASELINE_JUNK: dict[str, object] = {
    "missing": Ellipsis, "null": None, "str": "abc", "float": 1.5, "bool": True, "list": [1],
    "dict": {"a": 1}, "negative": -1, "huge": 10**400, "inf": float("inf"), "nan": float("nan"),
}


def baseline_cases() -> list[Case]:
    cases = []
    for path in _BASELINE_FIELDS:
        for junk, value in _BASELINE_JUNK.items():
            cases.append(Case(f"baseline-{'.'.join(path)}-{junk}",
                              _baseline_json(json.dumps(_set(path, value)))))
    for junk, value in (("bound-str", {"batch": "x"}), ("bound-inf", {"batch": float("inf")}),
                        ("bound-float", {"batch": 2.5}), ("bound-huge", {"batch": 10**400}),
                        ("bound-nested", {"batch": {"a": 1}})):
        cases.append(Case(f"baseline-dims.bound-{junk}",
                          _baseline_json(json.dumps(_set(("dims", "bound"), value)))))
    for name, text in _BASELINE_TEXTS.items():
        cases.append(Case(f"baseline-file-{name}", _baseline_json(text)))
    cases.append(Case("baseline-file-fifo", _baseline_fifo, isolate=True))
    cases.append(Case("baseline-file-directory", _baseline_dir))
    return cases


_BASELINE_TEXTS: dict[str, str | bytes] = {
    "empty": "", "list": "[]", "string": '"x"', "number": "1", "null": "null", "object": "{}",
    "models-empty": '{"models": []}', "models-str": '{"models": "x"}',
    "models-ints": '{"models": [1, 2]}', "models-one-int": '{"models": [1]}',
    "models-analysis-int": '{"models": [{"analysis": 5}]}',
    "models-analysis-list": '{"models": [{"name": "model", "analysis": []}, {}]}',
    "models-names-unhashable": '{"models": [{"name": [1]}, {"name": {}}]}',
    "deep-array": "[" * 100_000 + "]" * 100_000,
    "deep-object": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "binary": random.Random(6).randbytes(2000),
    "utf16": json.dumps(baseline_dict()).encode("utf-16"),
    "nan-literals": json.dumps(baseline_dict()).replace("4000", "NaN"),
    "infinity-literal": json.dumps(baseline_dict()).replace("4000", "Infinity"),
    "big-exponent": json.dumps(baseline_dict()).replace("4000", "1e999"),
    "big-int": json.dumps(baseline_dict()).replace("4000", "9" * 5000),
    "markup-mode": json.dumps(_set(("config", "mode"), "[/b]\x1b[2J")),
    "huge-free-list": json.dumps(_set(("dims", "free"), ["x"] * 100_000)),
}


def _baseline_json(text: str | bytes) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        write_mlp(folder)
        data = text if isinstance(text, bytes) else text.encode()
        (folder / "base.json").write_bytes(data)
        return Run(("check", MODEL, "--batch", "2", "--baseline", "base.json", "--max-growth",
                    "5%"))
    return make


def _baseline_fifo(folder: Path) -> Run:
    write_mlp(folder)
    os.mkfifo(folder / "base.json")
    return Run(("check", MODEL, "--batch", "2", "--baseline", "base.json", "--max-growth",
                "5%"), codes=ERROR)


def _baseline_dir(folder: Path) -> Run:
    write_mlp(folder)
    (folder / "base.json").mkdir()
    return Run(("check", MODEL, "--batch", "2", "--baseline", "base.json", "--max-growth",
                "5%"), codes=ERROR)


# ===== 10. broken PyTorch files ==================================================================

_TORCH_HEADER = "import sys\nimport torch\nfrom torch import nn\n\n"
_TORCH_FILES: dict[str, tuple[str, str]] = {  # name -> (file body, callable)
    "syntax-error": ("def build(:\n    pass\n", "build"),
    "raises-at-import": ("raise ValueError('boom at import')\n", "build"),
    "exit-3-at-import": ("sys.exit(3)\n", "build"),
    "exit-7-at-import": ("sys.exit(7)\n", "build"),
    "exit-0-at-import": ("sys.exit(0)\n", "build"),
    "exit-message-at-import": ("sys.exit('bye')\n", "build"),
    "keyboard-interrupt-at-import": ("raise KeyboardInterrupt\n", "build"),
    "exit-3-in-build": ("def build():\n    sys.exit(3)\n", "build"),
    "exit-7-in-forward": ("class M(nn.Module):\n    def forward(self, x):\n"
                          "        sys.exit(7)\n\ndef build():\n    return M()\n", "build"),
    "returns-int": ("def build():\n    return 3\n", "build"),
    "returns-none": ("def build():\n    return None\n", "build"),
    "returns-tensor": ("def build():\n    return torch.ones(2)\n", "build"),
    "infinite-recursion": ("def build():\n    return build()\n", "build"),
    "recursion-at-import": ("def f():\n    return f()\n\nf()\n", "build"),
    "missing-function": ("def other():\n    return nn.ReLU()\n", "build"),
    "needs-arguments": ("def build(width):\n    return nn.Linear(width, 2)\n", "build"),
    "not-callable": ("build = 3\n", "build"),
    "class-not-module": ("class build:\n    pass\n", "build"),
    "forward-raises": ("class M(nn.Module):\n    def forward(self, x):\n"
                       "        raise RuntimeError('boom in forward')\n\n"
                       "def build():\n    return M()\n", "build"),
    "forward-returns-none": ("class M(nn.Module):\n    def forward(self, x):\n"
                             "        return None\n\ndef build():\n    return M()\n", "build"),
    "forward-returns-int": ("class M(nn.Module):\n    def forward(self, x):\n"
                            "        return 3\n\ndef build():\n    return M()\n", "build"),
    "import-missing-module": ("import no_such_module_graphmem_fuzz\n", "build"),
    "markup-error": ("raise ValueError('[/b] \\x1b[2J')\n", "build"),
    "multiline-error": ("raise ValueError('line one\\nTraceback (most recent call last):')\n",
                        "build"),
    "hostile-callable-name": ("def build():\n    return nn.ReLU()\n", "__import__"),
}
_TORCH_SPECS = ("sys:exit", "builtins:exit", "os:getcwd", "os.path:join", "no.such.mod:fn",
                "net.py:", ":build", "net.py:build:extra", "/:x", "net.py:1build")


def torch_cases() -> list[Case]:
    cases = [Case(f"torch-{name}", _torch_file(body, fn), isolate=True)
             for name, (body, fn) in _TORCH_FILES.items()]
    for name in ("exit-3-at-import", "exit-7-at-import"):
        body, fn = _TORCH_FILES[name]
        cases.append(Case(f"torch-{name}-verify", _torch_file(body, fn, "verify"),
                          isolate=True))
        cases.append(Case(f"torch-{name}-loss", _torch_file(body, fn, "loss"), isolate=True))
        cases.append(Case(f"torch-{name}-example-inputs", _torch_file(body, fn, "examples"),
                          isolate=True))
    cases += [Case(f"torch-spec-{slug(spec)}", _torch_spec(spec), isolate=True)
              for spec in _TORCH_SPECS]
    return [*cases, *torch_input_cases()]


def _torch_file(body: str, fn: str, command: str = "analyze") -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        (folder / "net.py").write_text(_TORCH_HEADER + body)
        (folder / "good.py").write_text(_TORCH_HEADER + "def build():\n    return nn.ReLU()\n")
        argv = {
            "analyze": ("analyze", f"net.py:{fn}", "--no-html", "--input", "2x4"),
            "verify": ("verify", f"net.py:{fn}", "--input", "2x4"),
            "loss": ("analyze", "good.py:build", "--no-html", "--input", "2x4", "--train",
                     "--loss", f"net.py:{fn}"),
            "examples": ("analyze", "good.py:build", "--no-html", "--example-inputs",
                         f"net.py:{fn}"),
        }[command]
        return Run(argv, codes=ERROR)
    return make


def _torch_spec(spec: str) -> Callable[[Path], Run]:
    def make(folder: Path) -> Run:
        (folder / "net.py").write_text(_TORCH_HEADER + "def build():\n    return nn.ReLU()\n")
        return Run(("analyze", spec, "--no-html", "--input", "2x4"), codes=ERROR)
    return make


# ===== everything ================================================================================


def all_groups() -> dict[str, Callable[[], list[Case]]]:
    return {"file": file_cases, "graph": graph_cases, "dim": dim_cases, "name": name_cases,
            "external": external_cases, "flag": flag_cases, "output": output_cases,
            "budgets": budget_cases, "baseline": baseline_cases, "torch": torch_cases}


def unique(cases: Iterable[Case]) -> list[Case]:
    """The cases, checked for duplicate ids (pytest would silently suffix them)."""
    seen: set[str] = set()
    result = []
    for case in cases:
        if case.id in seen:
            raise ValueError(f"duplicate fuzz case id {case.id}")
        seen.add(case.id)
        result.append(case)
    return result


