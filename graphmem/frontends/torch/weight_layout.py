"""Declared weight quantization (`--weights int8|int4|int4-tiled[:MODULES]`): what torchao
(pytorch/ao 0.18, `quantize_`) stores per nn.Linear [out, in]. No torch here: the Request, the
command line and the reports read it.

- int8, `Int8WeightOnlyConfig()` -> `Int8Tensor` (quantize_/workflows/int8/int8_tensor.py,
  `from_hp`): symmetric, one group per output row; `qdata` int8 [out, in], `scale` fp32
  [out, 1] (scale_dtype=torch.float32), `zero_point` int8 [out, 1].
- int4, `Int4WeightOnlyConfig(group_size=128)`, its default packing (PLAIN) -> `Int4Tensor`
  (workflows/int4/int4_tensor.py): asymmetric per group of 128 inputs; `qdata` [out, in / 2],
  two codes per byte (`pack_int4`), `scale` and `zero_point` [in / 128, out] in the weight's
  dtype (`int4_row_quantize_zp`, then `.to(w.dtype)`).
- int4-tiled, `Int4WeightOnlyConfig(int4_packing_format="tile_packed_to_4d")` -> tinygemm's
  layout (workflows/int4/int4_tile_packed_to_4d_tensor.py, torchao's int4 default before
  0.14): the weight padded to out a multiple of 8 and in a multiple of 1024, packed two codes
  per byte (int32 [out/8, in/(8*16), 32, 8/2]: out*in/2 bytes), `scale_and_zero` bf16
  [in / 128, out, 2].
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from graphmem.errors import GraphmemError

SCHEMES = ("int8", "int4", "int4-tiled")
INT4_GROUP_SIZE = 128  # Int4WeightOnlyConfig's default
INT4_GROUP_SIZES = (32, 64, 128, 256)  # what tinygemm accepts
INT4_PAD_OUT, INT4_PAD_IN = 8, 1024  # TensorCoreTiledLayout.pre_process
FP32_BYTES, BF16_BYTES = 4, 2


@dataclass(frozen=True)
class WeightQuantOptions:
    scheme: str  # "int8" | "int4" | "int4-tiled"
    targets: tuple[str, ...] = ()  # module-path patterns (fnmatch, or a path prefix); (): all
    group_size: int = INT4_GROUP_SIZE  # int4 only

    def applies_to(self, path: str) -> bool:
        """A pattern names a module and everything under it: `layers.*.mlp` takes
        `layers.0.mlp.up_proj`."""
        parts = path.split(".")
        prefixes = [".".join(parts[:end]) for end in range(1, len(parts) + 1)]
        return not self.targets or any(fnmatchcase(prefix, pattern)
                                       for pattern in self.targets for prefix in prefixes)


def parse_weights(text: str) -> WeightQuantOptions:
    """`int8`, `int4`, `int4:layers.*.mlp` (modules by path pattern, comma-separated)."""
    scheme, colon, targets = text.strip().partition(":")
    if scheme not in SCHEMES:
        raise GraphmemError(f"--weights {text!r}: unknown scheme; use int8, int4 or int4-tiled,"
                            " optionally with modules, e.g. int4:layers.*.mlp")
    patterns = tuple(t.strip() for t in targets.split(",") if t.strip())
    if colon and not patterns:
        raise GraphmemError(f"--weights {text!r}: no module after ':'; e.g. int4:layers.*.mlp")
    return WeightQuantOptions(scheme, patterns)


def padded(size: int, multiple: int) -> int:
    return -(size // -multiple) * multiple


@dataclass(frozen=True)
class QuantizedLinearBytes:
    """What one quantized Linear stores, and what its unquantized weight had."""

    weights: int  # elements of the [out, in] weight before quantization
    stored_count: int  # elements of the quantized weight tensor (int8: one each; int4 packed)
    stored_bytes: int
    constant_count: int  # elements of the scales and zero points
    constant_bytes: int

    def __add__(self, other: QuantizedLinearBytes) -> QuantizedLinearBytes:
        return QuantizedLinearBytes(*(a + b for a, b in zip(
            _fields(self), _fields(other), strict=True)))


def _fields(value: QuantizedLinearBytes) -> tuple[int, ...]:
    return (value.weights, value.stored_count, value.stored_bytes, value.constant_count,
            value.constant_bytes)


NO_BYTES = QuantizedLinearBytes(0, 0, 0, 0, 0)


def int8_bytes(out_features: int, in_features: int) -> QuantizedLinearBytes:
    # qdata [out, in] int8 + scale [out, 1] fp32 + zero_point [out, 1] int8
    numel = out_features * in_features
    return QuantizedLinearBytes(numel, numel, numel, 2 * out_features,
                                out_features * (FP32_BYTES + 1))


def int4_bytes(out_features: int, in_features: int, group_size: int,
               scale_bytes: int) -> QuantizedLinearBytes:
    # qdata [out, in / 2] + scale and zero_point [in / group, out] each, in the weight's dtype
    packed = out_features * in_features // 2
    constants = 2 * -(in_features // -group_size) * out_features
    return QuantizedLinearBytes(out_features * in_features, packed, packed, constants,
                                constants * scale_bytes)


def int4_tiled_bytes(out_features: int, in_features: int,
                     group_size: int) -> QuantizedLinearBytes:
    # padded [out', in'] packed two per byte (held as uint8 [out', in'/2]) +
    # scale_and_zero bf16 [in'/group, out', 2]
    out_padded, in_padded = padded(out_features, INT4_PAD_OUT), padded(in_features, INT4_PAD_IN)
    packed = out_padded * in_padded // 2
    constants = in_padded // group_size * out_padded * 2
    return QuantizedLinearBytes(out_features * in_features, packed, packed, constants,
                                constants * BF16_BYTES)
