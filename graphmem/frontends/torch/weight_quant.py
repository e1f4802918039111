"""Linear layers stored as torchao stores them (`--weights int8|int4|int4-tiled`), for the trace.

`weight_quantized(model, options)` swaps each targeted nn.Linear for a module holding torchao's
tensors (graphmem/frontends/torch/weight_layout.py: shapes, dtypes, sources) and running
torchao's linear kernel path, and puts the originals back afterwards:
- int8 (`Int8Tensor`'s linear, weight-only per-row branch): `mm(x.reshape(-1, in),
  qdata.t().to(x.dtype)) * scale.flatten()`, `y += bias`: the cast makes a dequantized
  [in, out] weight in the activation dtype for each matmul, freed after it;
- int4 (`Int4Tensor`'s linear): mslk's fused `bf16i4bf16_rowwise(x, qdata, scale,
  zero_point)` -> [m, out] bf16, `+ bias`; int4-tiled (`Int4TilePackedTo4dTensor`): x cast to
  bf16 and padded to in', tinygemm's `_weight_int4pack_mm` -> [m, out'] bf16, sliced, `+ bias`,
  cast back. Both kernels dequantize tiles in registers: no weight-sized tensor. They are
  traced as a matmul whose weight operand is a broadcast (allocation-free) view made from the
  packed weight, so the MACs are the matmul's (m x in x out; in' x out' when padded).
Weights are frozen (`requires_grad=False`, as quantize_ leaves them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from graphmem.errors import GraphmemError
from graphmem.frontends.torch.weight_layout import (
    INT4_PAD_IN,
    INT4_PAD_OUT,
    NO_BYTES,
    QuantizedLinearBytes,
    WeightQuantOptions,
    int4_bytes,
    int4_tiled_bytes,
    int8_bytes,
    padded,
)


@dataclass(frozen=True)
class WeightQuantSummary:
    scheme: str
    layers: int
    bytes: QuantizedLinearBytes  # all quantized layers together


class Int8WeightOnlyLinear(nn.Module):
    scale: torch.Tensor  # buffers (register_buffer)
    zero_point: torch.Tensor

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        with torch.device("meta"):
            self.weight = nn.Parameter(torch.empty(self.out_features, self.in_features,
                                                   dtype=torch.int8), requires_grad=False)
            self.register_buffer("scale", torch.empty(self.out_features, 1))  # fp32
            self.register_buffer("zero_point", torch.empty(self.out_features, 1,
                                                           dtype=torch.int8))
        self.bias = linear.bias

    @property
    def layout_bytes(self) -> QuantizedLinearBytes:
        return int8_bytes(self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [m, in] @ [in, out] -> [m, out], the weight dequantized (cast) for the matmul
        m = torch.mm(x.reshape(-1, x.shape[-1]), self.weight.t().to(x.dtype))
        y = m * self.scale.to(m.dtype).flatten()
        y = y.reshape(*x.shape[:-1], self.out_features)
        if self.bias is not None:
            y += self.bias  # in place, as torchao does
        return y.to(x.dtype)


class Int4WeightOnlyLinear(nn.Module):
    """torchao's default int4 (`Int4Tensor`, PLAIN packing): packed [out, in / 2] (int8 in
    torchao; uint8 here, the same bytes, for the parameter count), scale and zero point
    [in / group, out] in the weight's dtype, mslk's fused bf16 x int4 kernel."""

    scale: torch.Tensor  # buffers (register_buffer)
    zero_point: torch.Tensor

    def __init__(self, linear: nn.Linear, group_size: int) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.group_size = group_size
        dtype = linear.weight.dtype
        groups = -(self.in_features // -group_size)
        with torch.device("meta"):
            self.weight = nn.Parameter(torch.empty(self.out_features, self.in_features // 2,
                                                   dtype=torch.uint8), requires_grad=False)
            self.register_buffer("scale", torch.empty(groups, self.out_features, dtype=dtype))
            self.register_buffer("zero_point", torch.empty(groups, self.out_features,
                                                           dtype=dtype))
        self.bias = linear.bias

    @property
    def layout_bytes(self) -> QuantizedLinearBytes:
        return int4_bytes(self.out_features, self.in_features, self.group_size,
                          self.scale.element_size())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        # bf16i4bf16_rowwise: [m, in] x packed [out, in / 2] -> [m, out] bf16
        tiles = self.weight.new_zeros((), dtype=torch.bfloat16)
        y = torch.mm(act, tiles.expand(self.in_features, self.out_features))
        y = y.reshape(*x.shape[:-1], self.out_features)
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)


class Int4TiledLinear(nn.Module):
    """tinygemm's int4 layout (`Int4TilePackedTo4dTensor`), padded."""
    def __init__(self, linear: nn.Linear, group_size: int) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.group_size = group_size
        self.in_padded = padded(self.in_features, INT4_PAD_IN)
        self.out_padded = padded(self.out_features, INT4_PAD_OUT)
        with torch.device("meta"):
            self.weight = nn.Parameter(torch.empty(self.out_padded, self.in_padded // 2,
                                                   dtype=torch.uint8), requires_grad=False)
            self.register_buffer("scale_and_zero", torch.empty(
                self.in_padded // group_size, self.out_padded, 2, dtype=torch.bfloat16))
        self.bias = linear.bias

    @property
    def layout_bytes(self) -> QuantizedLinearBytes:
        return int4_tiled_bytes(self.out_features, self.in_features, self.group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        act = nn.functional.pad(act, (0, self.in_padded - self.in_features))
        # tinygemm: [m, in'] x packed [out', in'] -> [m, out'] bf16, no dequantized weight
        tiles = self.weight.new_zeros((), dtype=torch.bfloat16)
        y = torch.mm(act, tiles.expand(self.in_padded, self.out_padded))
        y = y[:, :self.out_features].reshape(*x.shape[:-1], self.out_features)
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)


QuantizedLinear = Int8WeightOnlyLinear | Int4WeightOnlyLinear | Int4TiledLinear


@contextlib.contextmanager
def weight_quantized(model: object, options: WeightQuantOptions | None
                     ) -> Iterator[WeightQuantSummary | None]:
    """`model` with its targeted nn.Linear layers quantized while the block runs."""
    if options is None or not isinstance(model, nn.Module):
        yield None
        return
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    layers: list[QuantizedLinear] = []
    try:
        for path, module in list(model.named_modules()):
            if path and type(module) is nn.Linear and options.applies_to(path):
                layers.append(_quantized(module, options))
                parent_path, _, name = path.rpartition(".")
                parent = model.get_submodule(parent_path)
                swapped.append((parent, name, module))
                setattr(parent, name, layers[-1])
        if not layers:
            raise GraphmemError(_nothing_to_quantize(options))
        total = sum((layer.layout_bytes for layer in layers), NO_BYTES)
        yield WeightQuantSummary(options.scheme, len(layers), total)
    finally:
        for parent, name, module in reversed(swapped):
            setattr(parent, name, module)


def _nothing_to_quantize(options: WeightQuantOptions) -> str:
    where = f" matches {','.join(options.targets)}" if options.targets else ""
    return (f"--weights {options.scheme}: no nn.Linear layer{where}: check the module paths"
            " (model.named_modules()), e.g. int4:layers.*.mlp")


def _quantized(linear: nn.Linear, options: WeightQuantOptions) -> QuantizedLinear:
    if options.scheme == "int8":
        return Int8WeightOnlyLinear(linear)
    if options.scheme == "int4":
        return Int4WeightOnlyLinear(linear, options.group_size)
    return Int4TiledLinear(linear, options.group_size)


def quantized_layout(model: object, options: WeightQuantOptions) -> QuantizedLinearBytes:
    """The bytes `options` stores for `model`'s targeted Linear layers (model unchanged)."""
    with weight_quantized(model, options) as summary:
        return summary.bytes if summary is not None else NO_BYTES


def weight_quant_note(summary: WeightQuantSummary | None) -> tuple[str, ...]:
    if summary is None:
        return ()
    layout = summary.bytes
    return (f"--weights {summary.scheme}: {summary.layers} Linear layers stored as torchao"
            f" stores them: {layout.weights:,} weights in {layout.stored_bytes:,} bytes, plus"
            f" {layout.constant_bytes:,} bytes of scales and zero points",)
