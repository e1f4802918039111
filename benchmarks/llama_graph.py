"""A Llama-shaped decoder as an ONNX graph, op for op as torch.onnx.export writes it: no torch.

    python benchmarks/llama_graph.py out.onnx [--preset llama2-70b] [--layers 8]

The graph is what the TorchScript exporter (`torch.onnx.export(..., dynamo=False,
opset_version=17)`) makes of Hugging Face's `LlamaForCausalLM` (the transformers 4.36 code:
rotary tables sliced by the sequence length, `repeat_kv` for grouped-query attention, a causal
mask built from `arange`), with `input_ids` [batch, seq] int64 as the only input and dynamic
dims `batch` and `seq`. Node for node it follows a real export of the same module (checked
against one at small width; see tests/test_benchmark_graphs.py): every `x.size(i)` is a
Shape -> Gather, every `view`/`reshape` target a Concat of Unsqueezed dims and Constants,
every `expand` the exporter's Reshape/ConstantOfShape/Equal/Where dance, and a Constant node
per use of a constant, as the exporter emits them. About 250 nodes per layer with
grouped-query attention (about 160 of them not Constant).

Weights never exist. Every initializer is a TensorProto with dims and data_type whose data
lives, by its external_data entry, in `<model>.data`: a file that is never written. A
Llama-70B-shaped graph is therefore about 10 MB of protobuf, and any tool that reads the
weights fails on it instead of silently using them.

Two deliberate differences from a transformers-4.36 export, both to keep the file small:
- one pair of cos/sin rotary tables for the whole model (as transformers >= 4.38 holds
  it), each layer slicing it, where 4.36 gives every layer its own copy;
- the tables are Constant nodes with their values inline (as the exporter writes buffers
  that are not in the state dict), so they are constants, not parameters.

`parameter_count(config)` is the number of trainable parameters by formula; for Llama-2-70B
(vocab 32000, untied lm_head) it is the published 68,976,648,192.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # ReduceMean takes `axes` as an attribute below opset 18, as exports of 2.x write it
INT64_MAX = 2**63 - 1

_DTYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
           "bfloat16": TensorProto.BFLOAT16}
_NUMPY = {"float32": np.float32, "float16": np.float16}
_ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class LlamaConfig:
    """Shapes of a Llama decoder; the defaults are Llama-3-70B."""

    layers: int = 80
    hidden: int = 8192
    heads: int = 64
    kv_heads: int = 8
    intermediate: int = 28672
    vocab: int = 128256
    max_positions: int = 4096  # rows of the rotary tables
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    dtype: str = "float16"  # weights and activations; RMSNorm and softmax run in float32

    def __post_init__(self) -> None:
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"hidden {self.hidden}, heads {self.heads} and kv_heads"
                             f" {self.kv_heads} must divide: hidden % heads == heads % kv == 0")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: one of {', '.join(_DTYPES)}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_groups(self) -> int:
        """Query heads per key/value head (repeat_kv's n_rep)."""
        return self.heads // self.kv_heads


PRESETS: dict[str, LlamaConfig] = {
    "llama3-70b": LlamaConfig(rope_theta=500000.0, max_positions=8192),
    "llama2-70b": LlamaConfig(vocab=32000),
    "llama2-7b": LlamaConfig(layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008,
                             vocab=32000),
    # Tiny widths, for tests: two layers, grouped-query attention, a few thousand parameters.
    "tiny": LlamaConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100,
                        max_positions=64, dtype="float32"),
}


def parameter_count(config: LlamaConfig) -> int:
    """Trainable parameters by formula (untied lm_head, no biases).

    embed V*h + per layer (q h*h + k, v 2*h*kv*d + o h*h + gate, up, down 3*h*i + 2 norms 2*h)
    + final norm h + lm_head h*V. Llama-2-70B: 262,144,000 + 80 * 855,654,400 + 8,192
    + 262,144,000 = 68,976,648,192.
    """
    h, d = config.hidden, config.head_dim
    attention = h * config.heads * d + 2 * h * config.kv_heads * d + config.heads * d * h
    per_layer = attention + 3 * h * config.intermediate + 2 * h
    return config.vocab * h + config.layers * per_layer + h + h * config.vocab


def matmul_macs(config: LlamaConfig, batch: int, seq: int) -> int:
    """Multiply-accumulates of every MatMul for a prompt of `seq` tokens (no KV cache).

    Per layer, with t = batch * seq tokens: projections t*h*(heads*d + 2*kv*d + h) and
    t*3*h*i, attention scores and weighted values 2 * batch*heads*seq*seq*d; then lm_head
    t*h*V.
    """
    h, d, tokens = config.hidden, config.head_dim, batch * seq
    projections = tokens * h * (config.heads * d + 2 * config.kv_heads * d + config.heads * d)
    mlp = tokens * 3 * h * config.intermediate
    attention = 2 * batch * config.heads * seq * seq * d
    return config.layers * (projections + mlp + attention) + tokens * h * config.vocab


# ----- the builder -------------------------------------------------------------------------
class _Builder:
    """Nodes named as the exporter names them: `/model/layers.3/self_attn/Shape_2`."""

    def __init__(self, config: LlamaConfig, data_file: str) -> None:
        self.config = config
        self.dtype = _DTYPES[config.dtype]
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.data_file = data_file
        self.data_offset = 0
        self._counters: dict[str, int] = {}

    def op(self, scope: str, op_type: str, inputs: Sequence[str], **attributes: object) -> str:
        name = self._name(scope, op_type)
        output = f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=name,
                                           **attributes))
        return output

    def _name(self, scope: str, op_type: str) -> str:
        key = f"{scope}/{op_type}"
        count = self._counters.get(key, 0)
        self._counters[key] = count + 1
        return key if count == 0 else f"{key}_{count}"

    def const(self, scope: str, value: object, dtype: int = TensorProto.INT64) -> str:
        """A Constant node per use, as the exporter emits them: scalars and 1-D tensors."""
        array = np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(dtype))
        return self.const_tensor(scope, numpy_helper.from_array(array, "value"))

    def const_tensor(self, scope: str, tensor: TensorProto) -> str:
        name = self._name(scope, "Constant")
        output = f"{name}_output_0"
        self.nodes.append(helper.make_node("Constant", [], [output], name=name, value=tensor))
        return output

    def weight(self, name: str, dims: Sequence[int]) -> str:
        """An initializer with shape and dtype whose bytes live in a file never written."""
        tensor = TensorProto(name=name, dims=list(dims), data_type=self.dtype)
        length = math.prod(dims) * _ITEM_BYTES[self.config.dtype]
        tensor.data_location = TensorProto.EXTERNAL
        for key, text in (("location", self.data_file), ("offset", str(self.data_offset)),
                          ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, text
        self.data_offset += length
        self.initializers.append(tensor)
        return name

    # ----- the shape arithmetic of a trace ----------------------------------------------------
    def size(self, scope: str, x: str, axis: int) -> str:
        """`x.size(axis)`: Shape -> Gather, an int64 scalar."""
        return self.op(scope, "Gather", [self.op(scope, "Shape", [x]), self.const(scope, axis)],
                       axis=0)

    def unsqueeze(self, scope: str, x: str, axis: int) -> str:
        return self.op(scope, "Unsqueeze", [x, self.const(scope, [axis])])

    def shape_of(self, scope: str, parts: Sequence[str | int]) -> str:
        """A view/reshape target: Concat of Unsqueezed traced sizes and 1-D Constants."""
        pieces = [self.const(scope, [p]) if isinstance(p, int) else self.unsqueeze(scope, p, 0)
                  for p in parts]
        return self.op(scope, "Concat", pieces, axis=0)

    def expand(self, scope: str, x: str, parts: Sequence[str | int]) -> str:
        """`x.expand(*sizes)`: the exporter turns -1 entries into 1 at runtime."""
        target = self.op(scope, "Reshape", [self.shape_of(scope, parts), self.const(scope, [-1])],
                         allowzero=0)
        ones = self.op(scope, "ConstantOfShape", [self.op(scope, "Shape", [target])],
                       value=numpy_helper.from_array(np.array([1], np.int64), "value"))
        minus_ones = self.op(scope, "Mul", [ones, self.const(scope, -1)])
        is_minus_one = self.op(scope, "Equal", [target, minus_ones])
        sizes = self.op(scope, "Where", [is_minus_one, ones, target])
        return self.op(scope, "Expand", [x, sizes])


# ----- the model ---------------------------------------------------------------------------
def build_llama(config: LlamaConfig, data_file: str = "llama.data") -> onnx.ModelProto:
    """The model proto; initializers point into `data_file`, which nobody writes."""
    b = _Builder(config, data_file)
    position_ids, mask = _prologue(b)
    embed = b.weight("model.embed_tokens.weight", [config.vocab, config.hidden])
    x = b.op("/model/embed_tokens", "Gather", [embed, "input_ids"])
    cos_table, sin_table = _rotary_tables(b)
    for index in range(config.layers):
        x = _decoder_layer(b, f"/model/layers.{index}", x, (cos_table, sin_table),
                           position_ids, mask)
    x = _rms_norm(b, "/model/norm", x, b.weight("model.norm.weight", [config.hidden]))
    lm_head = b.weight("lm_head.weight", [config.hidden, config.vocab])  # stored [in, out]
    logits = b.op("/lm_head", "MatMul", [x, lm_head])
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="/lm_head/Identity"))
    graph = helper.make_graph(
        b.nodes, "llama",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", b.dtype, ["batch", "seq", config.vocab])],
        initializer=b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="pytorch", producer_version="2.1.0")
    model.ir_version = 8
    return model


def _prologue(b: _Builder) -> tuple[str, str]:
    """Sizes, position ids [1, seq] and the causal mask [batch, 1, seq, seq] (0 or min)."""
    scope, dtype = "/model", b.config.dtype
    batch = b.size(scope, "input_ids", 0)
    seq = b.size(scope, "input_ids", 1)
    positions = b.op(scope, "Range", [b.const(scope, 0), b.op(scope, "Cast", [seq], to=7),
                                      b.const(scope, 1)])
    position_ids = b.unsqueeze(scope, positions, 0)
    # mask = full((seq, seq), finfo.min); mask.masked_fill_(cond < (cond + 1).view(seq, 1), 0)
    lowest = np.array([np.finfo(_NUMPY.get(dtype, np.float32)).min], _NUMPY.get(dtype, np.float32))
    full = b.op(scope, "ConstantOfShape", [b.shape_of(scope, [seq, seq])],
                value=numpy_helper.from_array(lowest, "value"))
    cond = b.op(scope, "Range", [b.const(scope, 0), b.op(scope, "Cast", [seq], to=7),
                                 b.const(scope, 1)])
    column = b.op(scope, "Reshape", [b.op(scope, "Add", [cond, b.const(scope, 1)]),
                                     b.shape_of(scope, [seq, 1])], allowzero=0)
    causal = b.op(scope, "Cast", [b.op(scope, "Less", [cond, column])], to=TensorProto.BOOL)
    mask = b.op(scope, "Where", [causal, b.const(scope, 0.0, b.dtype), full])
    mask = b.op(scope, "Cast", [mask], to=b.dtype)
    mask = b.unsqueeze(scope, b.unsqueeze(scope, mask, 0), 1)  # mask[None, None, :, :]
    return position_ids, b.expand(scope, mask, [batch, 1, seq, seq])


def _rotary_tables(b: _Builder) -> tuple[str, str]:
    """cos and sin of position * inv_freq, [max_positions, head_dim], the model's dtype."""
    config = b.config
    inv_freq = 1.0 / config.rope_theta ** (np.arange(0, config.head_dim, 2) / config.head_dim)
    freqs = np.outer(np.arange(config.max_positions), inv_freq)
    angles = np.concatenate([freqs, freqs], axis=-1)
    tables = []
    for name, values in (("cos_cached", np.cos(angles)), ("sin_cached", np.sin(angles))):
        array = values.astype(_NUMPY.get(config.dtype, np.float32))
        tensor = numpy_helper.from_array(array, "value")
        if config.dtype == "bfloat16":
            tensor = helper.make_tensor("value", TensorProto.BFLOAT16, array.shape,
                                        array.astype(np.float32).flatten().tolist())
        tables.append(b.const_tensor(f"/model/rotary_emb/{name}", tensor))
    return tables[0], tables[1]


def _rms_norm(b: _Builder, scope: str, x: str, weight: str) -> str:
    # weight * (x.float() * rsqrt(mean(x.float() ** 2, -1) + eps)).to(dtype); rsqrt = 1 / Sqrt
    f32 = TensorProto.FLOAT
    x32 = b.op(scope, "Cast", [x], to=f32)
    squares = b.op(scope, "Pow", [x32, b.const(scope, 2.0, f32)])
    variance = b.op(scope, "ReduceMean", [squares], axes=[-1], keepdims=1)
    shifted = b.op(scope, "Add", [variance, b.const(scope, b.config.rms_eps, f32)])
    inverse = b.op(scope, "Div", [b.const(scope, 1.0, f32), b.op(scope, "Sqrt", [shifted])])
    normed = b.op(scope, "Cast", [b.op(scope, "Mul", [x32, inverse])], to=b.dtype)
    return b.op(scope, "Mul", [weight, normed])


def _decoder_layer(b: _Builder, scope: str, x: str, tables: tuple[str, str],
                   position_ids: str, mask: str) -> str:
    prefix = scope.removeprefix("/").replace("/", ".")
    h = b.config.hidden
    normed = _rms_norm(b, f"{scope}/input_layernorm", x,
                       b.weight(f"{prefix}.input_layernorm.weight", [h]))
    x = b.op(scope, "Add", [x, _attention(b, f"{scope}/self_attn", prefix, normed, tables,
                                           position_ids, mask)])
    normed = _rms_norm(b, f"{scope}/post_attention_layernorm", x,
                       b.weight(f"{prefix}.post_attention_layernorm.weight", [h]))
    return b.op(scope, "Add", [x, _mlp(b, f"{scope}/mlp", f"{prefix}.mlp", normed)])


def _linear(b: _Builder, scope: str, x: str, name: str, dims: tuple[int, int]) -> str:
    # nn.Linear(in, out, bias=False) exports as MatMul with the weight stored as [in, out]
    return b.op(scope, "MatMul", [x, b.weight(name, dims)])


def _mlp(b: _Builder, scope: str, prefix: str, x: str) -> str:
    # down(silu(gate(x)) * up(x)); silu(g) = g * sigmoid(g)
    h, i = b.config.hidden, b.config.intermediate
    gate = _linear(b, f"{scope}/gate_proj", x, f"{prefix}.gate_proj.weight", (h, i))
    activated = b.op(scope, "Mul", [gate, b.op(scope, "Sigmoid", [gate])])
    up = _linear(b, f"{scope}/up_proj", x, f"{prefix}.up_proj.weight", (h, i))
    product = b.op(scope, "Mul", [activated, up])
    return _linear(b, f"{scope}/down_proj", product, f"{prefix}.down_proj.weight", (i, h))


def _attention(b: _Builder, scope: str, prefix: str, x: str, tables: tuple[str, str],
               position_ids: str, mask: str) -> str:
    config = b.config
    h, d = config.hidden, config.head_dim
    bsz, q_len = b.size(scope, x, 0), b.size(scope, x, 1)

    def heads(name: str, count: int) -> str:
        # proj(x).view(bsz, q_len, count, d).transpose(1, 2): [b, s, count, d] -> [b, count, s, d]
        projected = _linear(b, f"{scope}/{name}", x, f"{prefix}.self_attn.{name}.weight",
                            (h, count * d))
        viewed = b.op(scope, "Reshape", [projected, b.shape_of(scope, [bsz, q_len, count, d])],
                      allowzero=0)
        return b.op(scope, "Transpose", [viewed], perm=[0, 2, 1, 3])

    query = heads("q_proj", config.heads)
    key = heads("k_proj", config.kv_heads)
    value = heads("v_proj", config.kv_heads)
    cos, sin = _rotary(b, scope, key, tables, position_ids)
    query, key = _apply_rotary(b, scope, query, cos, sin), _apply_rotary(b, scope, key, cos, sin)
    key, value = _repeat_kv(b, scope, key), _repeat_kv(b, scope, value)
    # [b, n, s, d] @ [b, n, d, s] -> [b, n, s, s]
    scores = b.op(scope, "MatMul", [query, b.op(scope, "Transpose", [key], perm=[0, 1, 3, 2])])
    scores = b.op(scope, "Div", [scores, b.const(scope, math.sqrt(d), b.dtype)])
    scores = b.op(scope, "Add", [scores, mask])
    # softmax(scores, dim=-1, dtype=torch.float32).to(dtype)
    probs = b.op(scope, "Softmax", [b.op(scope, "Cast", [scores], to=TensorProto.FLOAT)],
                 axis=-1)
    probs = b.op(scope, "Cast", [probs], to=b.dtype)
    # [b, n, s, s] @ [b, n, s, d] -> [b, n, s, d] -> [b, s, n, d] -> [b, s, h]
    out = b.op(scope, "Transpose", [b.op(scope, "MatMul", [probs, value])], perm=[0, 2, 1, 3])
    out = b.op(scope, "Reshape", [out, b.shape_of(scope, [bsz, q_len, h])], allowzero=0)
    return _linear(b, f"{scope}/o_proj", out, f"{prefix}.self_attn.o_proj.weight", (h, h))


def _rotary(b: _Builder, scope: str, key: str, tables: tuple[str, str],
            position_ids: str) -> tuple[str, str]:
    """cos[:kv_seq_len][position_ids].unsqueeze(1), and sin: [1, 1, seq, d]."""
    kv_seq_len = b.size(scope, key, 2)
    rotary_scope = f"{scope}/rotary_emb"
    sliced = []
    for table in tables:
        axes, starts = b.const(rotary_scope, [0]), b.const(rotary_scope, [0])
        ends = b.unsqueeze(rotary_scope, kv_seq_len, 0)
        part = b.op(rotary_scope, "Slice", [table, starts, ends, axes,
                                            b.const(rotary_scope, [1])])
        sliced.append(b.op(rotary_scope, "Cast", [part], to=b.dtype))
    return tuple(  # type: ignore[return-value]
        b.unsqueeze(scope, b.op(scope, "Gather", [part, position_ids], axis=0), 1)
        for part in sliced)


def _apply_rotary(b: _Builder, scope: str, x: str, cos: str, sin: str) -> str:
    # x * cos + rotate_half(x) * sin; rotate_half(x) = cat(-x[..., half:], x[..., :half])
    half = b.op(scope, "Div", [b.size(scope, x, 3), b.const(scope, 2)])  # x.shape[-1] // 2
    half = b.op(scope, "Cast", [b.op(scope, "Cast", [half], to=7)], to=7)
    axes, starts = b.const(scope, [3]), b.const(scope, [0])
    first = b.op(scope, "Slice", [x, starts, b.unsqueeze(scope, half, 0), axes,
                                  b.const(scope, [1])])
    axes, ends = b.const(scope, [3]), b.const(scope, [INT64_MAX])
    second = b.op(scope, "Slice", [x, b.unsqueeze(scope, half, 0), ends, axes,
                                   b.const(scope, [1])])
    rotated = b.op(scope, "Concat", [b.op(scope, "Neg", [second]), first], axis=-1)
    return b.op(scope, "Add", [b.op(scope, "Mul", [x, cos]),
                               b.op(scope, "Mul", [rotated, sin])])


def _repeat_kv(b: _Builder, scope: str, x: str) -> str:
    # [b, kv, s, d] -> x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)
    n_rep = b.config.kv_groups
    if n_rep == 1:
        return x
    sizes = [b.size(scope, x, axis) for axis in range(4)]
    batch, kv, seq, dim = sizes
    expanded = b.expand(scope, b.unsqueeze(scope, x, 2), [batch, kv, n_rep, seq, dim])
    heads = b.op(scope, "Mul", [kv, b.const(scope, n_rep)])
    return b.op(scope, "Reshape", [expanded, b.shape_of(scope, [batch, heads, seq, dim])],
                allowzero=0)


# ----- files -------------------------------------------------------------------------------
def write_model(path: str | Path, config: LlamaConfig) -> Path:
    """Write the graph to `path`; its weights point to `<path>.data`, which is never written."""
    path = Path(path)
    model = build_llama(config, data_file=path.name + ".data")
    onnx.save_model(model, str(path))
    return path


def write_llama(path: str | Path, layers: int = 80, hidden: int = 8192, heads: int = 64,
                kv_heads: int = 8, intermediate: int = 28672, vocab: int = 128256,
                **options: object) -> Path:
    """Llama-3-70B shapes by default; `options` are other LlamaConfig fields."""
    config = LlamaConfig(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                         intermediate=intermediate, vocab=vocab, **options)  # type: ignore[arg-type]
    return write_model(path, config)


def check_graph(model: onnx.ModelProto) -> None:
    """onnx.checker with full_check (strict shape inference) on the graph without weights.

    The checker insists on reading every external tensor, so it runs on a copy whose
    initializers are graph inputs of the same name, type and shape instead.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    weights = list(copy.graph.initializer)
    copy.graph.ClearField("initializer")
    copy.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                            for t in weights)
    onnx.checker.check_model(copy, full_check=True)


def data_file(path: str | Path) -> Path:
    """Where the graph at `path` says its weights are (a file that must not exist)."""
    path = Path(path)
    return path.parent / (path.name + ".data")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="llama3-70b")
    parser.add_argument("--layers", type=int, help="override the preset's layer count")
    args = parser.parse_args()
    config = PRESETS[args.preset]
    if args.layers is not None:
        config = replace(config, layers=args.layers)
    path = write_model(args.output, config)
    print(f"{path}: {len(onnx.load(str(path), load_external_data=False).graph.node)} nodes,"
          f" {path.stat().st_size / 2**20:.1f} MiB, {parameter_count(config):,} parameters"
          f" (weights in {data_file(path).name}, never written)")


if __name__ == "__main__":
    main()
