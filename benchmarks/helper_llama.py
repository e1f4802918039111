"""A Llama-shaped decoder written directly with onnx.helper: no exporter, no exporter's names.

    python benchmarks/helper_llama.py out.onnx [--layers 400]

The graph a person (or a converter other than torch.onnx) writes by hand: nodes named `n0`,
`n1`, ..., constant reshape targets with 0 ("copy this dim") and -1 ("the rest"), RMSNorm as
Pow/ReduceMean/Sqrt/Div, rotary embeddings from tables sliced by the sequence length, a causal
mask made by Trilu from a ConstantOfShape of [seq, seq], and grouped-query attention through
Unsqueeze -> Tile -> Reshape (not the TorchScript exporter's Expand dance). `input_ids`
[batch, seq] int64 is the only input, `batch` and `seq` its dynamic dims. Weights never exist:
every initializer points, by its external_data entry, into `<model>.data`, a file nobody writes
(as benchmarks/llama_graph.py's graphs do). The widths default to TinyLlama-1.1B's (hidden 2048,
32 heads, 4 key/value heads, MLP 5632, vocab 32000) in float16, at 360 layers (22,337 nodes):
16 billion parameters, so a batch of 4096-token prompts fits an 80 GB GPU and the largest-batch
search has work to do.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama_graph import LlamaConfig  # benchmarks/ is not a package: found through sys.path

OPSET = 17


# TinyLlama-1.1B's widths at 360 layers (benchmarks/llama_graph.py's config: only the widths
# and the table length are read here)
WIDTHS = LlamaConfig(layers=360, hidden=2048, heads=32, kv_heads=4, intermediate=5632,
                     vocab=32000, max_positions=4096)


class _Writer:
    """Nodes named n0, n1, ...; values v0, v1, ...; weights w0, w1, ... (external, absent)."""

    def __init__(self, data_file: str) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.data_file = data_file
        self.offset = 0

    def op(self, op_type: str, inputs: Sequence[str], **attributes: object) -> str:
        output = f"v{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [output],
                                           name=f"n{len(self.nodes)}", **attributes))
        return output

    def weight(self, dims: Sequence[int]) -> str:
        name = f"w{len(self.initializers)}"
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT16, dims=list(dims))
        size = 2 * math.prod(dims)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.data_file), ("offset", str(self.offset)),
                           ("length", str(size))):
            tensor.external_data.add(key=key, value=value)
        self.offset += size
        self.initializers.append(tensor)
        return name

    def const(self, values: Sequence[int] | np.ndarray) -> str:
        name = f"c{len(self.initializers)}"
        array = np.asarray(values)
        if array.dtype.kind == "i":
            array = array.astype(np.int64)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name


def build(widths: LlamaConfig, data_file: str = "weights.data") -> onnx.ModelProto:
    w = _Writer(data_file)
    x = w.op("Gather", [w.weight([widths.vocab, widths.hidden]), "input_ids"])
    seq = w.op("Slice", [w.op("Shape", ["input_ids"]), w.const([1]), w.const([2])])
    mask = _mask(w, seq)
    cos, sin = _tables(w, widths, seq)
    for _ in range(widths.layers):
        x = _layer(w, widths, x, mask, cos, sin)
    x = _rms_norm(w, widths, x)
    logits = w.op("MatMul", [x, w.weight([widths.hidden, widths.vocab])])
    graph = helper.make_graph(
        w.nodes, "helper_llama",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT16,
                                       ["batch", "seq", widths.vocab])],
        w.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="onnx.helper")


def _mask(w: _Writer, seq: str) -> str:
    """[seq, seq]: 0 on and below the diagonal, -65504 above (float16's lowest)."""
    square = w.op("Concat", [seq, seq], axis=0)
    lowest = numpy_helper.from_array(np.array([-65504.0], np.float16))
    return w.op("Trilu", [w.op("ConstantOfShape", [square], value=lowest)], upper=1)


def _tables(w: _Writer, widths: LlamaConfig, seq: str) -> tuple[str, str]:
    """cos and sin of position * inv_freq, [max_positions, head_dim] constants, cut to
    [seq, head_dim]."""
    d = widths.head_dim
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, d, 2) / d))
    angles = np.outer(np.arange(widths.max_positions), inv_freq)
    angles = np.concatenate([angles, angles], axis=1)
    starts, axes = w.const([0]), w.const([0])
    cos = w.op("Slice", [w.const(np.cos(angles).astype(np.float16)), starts, seq, axes])
    sin = w.op("Slice", [w.const(np.sin(angles).astype(np.float16)), starts, seq, axes])
    return cos, sin


def _rms_norm(w: _Writer, widths: LlamaConfig, x: str) -> str:
    wide = w.op("Cast", [x], to=TensorProto.FLOAT)
    mean = w.op("ReduceMean", [w.op("Pow", [wide, w.const(np.array(2.0, np.float32))])],
                axes=[-1])
    root = w.op("Sqrt", [w.op("Add", [mean, w.const(np.array(1e-5, np.float32))])])
    normed = w.op("Cast", [w.op("Div", [wide, root])], to=TensorProto.FLOAT16)
    return w.op("Mul", [normed, w.weight([widths.hidden])])


def _heads(w: _Writer, x: str, heads: int, d: int) -> str:
    """[b, s, heads*d] -> [b, heads, s, d]."""
    return w.op("Transpose", [w.op("Reshape", [x, w.const([0, 0, heads, d])])],
                perm=[0, 2, 1, 3])


def _rotary(w: _Writer, x: str, cos: str, sin: str, d: int) -> str:
    """x * cos + rotate_half(x) * sin, rotate_half = concat(-x[..., d/2:], x[..., :d/2])."""
    half, axis = w.const([d // 2]), w.const([-1])
    first = w.op("Slice", [x, w.const([0]), half, axis])
    second = w.op("Slice", [x, half, w.const([d]), axis])
    rotated = w.op("Concat", [w.op("Neg", [second]), first], axis=-1)
    return w.op("Add", [w.op("Mul", [x, cos]), w.op("Mul", [rotated, sin])])


def _repeat(w: _Writer, x: str, widths: LlamaConfig) -> str:
    """[b, kv, s, d] -> [b, heads, s, d]: each key/value head repeated heads/kv times."""
    groups = widths.heads // widths.kv_heads
    wide = w.op("Tile", [w.op("Unsqueeze", [x, w.const([2])]), w.const([1, 1, groups, 1, 1])])
    return w.op("Reshape", [wide, w.const([0, widths.heads, -1, widths.head_dim])])


def _layer(w: _Writer, widths: LlamaConfig, x: str, mask: str, cos: str, sin: str) -> str:
    h, d, kv = widths.hidden, widths.head_dim, widths.kv_heads
    normed = _rms_norm(w, widths, x)
    q = _heads(w, w.op("MatMul", [normed, w.weight([h, h])]), widths.heads, d)
    k = _heads(w, w.op("MatMul", [normed, w.weight([h, kv * d])]), kv, d)
    v = _heads(w, w.op("MatMul", [normed, w.weight([h, kv * d])]), kv, d)
    q, k = _rotary(w, q, cos, sin, d), _rotary(w, k, cos, sin, d)
    k, v = _repeat(w, k, widths), _repeat(w, v, widths)
    scores = w.op("MatMul", [q, w.op("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = w.op("Add", [w.op("Mul", [scores, w.const(np.array(1 / math.sqrt(d),
                                                                  np.float16))]), mask])
    probs = w.op("Softmax", [scores], axis=-1)
    attended = w.op("Transpose", [w.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged = w.op("Reshape", [attended, w.const([0, 0, h])])
    x = w.op("Add", [x, w.op("MatMul", [merged, w.weight([h, h])])])
    normed = _rms_norm(w, widths, x)
    gate = w.op("MatMul", [normed, w.weight([h, widths.intermediate])])
    up = w.op("MatMul", [normed, w.weight([h, widths.intermediate])])
    act = w.op("Mul", [w.op("Mul", [gate, w.op("Sigmoid", [gate])]), up])
    return w.op("Add", [x, w.op("MatMul", [act, w.weight([widths.intermediate, h])])])


def write(path: str | Path, widths: LlamaConfig) -> Path:
    path = Path(path)
    onnx.save_model(build(widths, path.name + ".data"), str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--layers", type=int, default=WIDTHS.layers)
    args = parser.parse_args()
    path = write(args.output, replace(WIDTHS, layers=args.layers))
    model = onnx.load(str(path), load_external_data=False)
    print(f"{path}: {len(model.graph.node):,} nodes, {path.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
