"""NF4 storage, as bitsandbytes lays it out: the bytes of one 4-bit weight and its constants.

No torch here: the arithmetic is shared by the module that stands in for a 4-bit Linear
(graphmem/frontends/torch/peft.py, whose buffers have exactly these sizes) and the reports.

bitsandbytes `functional.quantize_4bit(A, blocksize=64, compress_statistics=True,
quant_type="nf4")` (Linear4bit / Params4bit, transformers' `load_in_4bit` with
`bnb_4bit_use_double_quant=True`) stores, for a weight of n elements:
- the packed weight: two 4-bit codes per byte, `(n + 1) // 2` bytes of uint8
  (`torch.empty(((n + 1) // (quant_storage.itemsize * 2), 1), dtype=quant_storage)`);
- one absmax per block of `blocksize` elements: `ceil(n / blocksize)` of them. With double
  quantization (`compress_statistics`) they are stored as uint8 codes of
  `quantize_blockwise(absmax - offset, blocksize=256)`: 1 byte each, plus that second level's
  own fp32 absmax, one per 256 first-level blocks, and its 256-entry fp32 code table (a copy
  per weight: `code.to(A.device, copy=True)`), and the fp32 `offset` (the mean, a scalar);
  without it, the absmax stay fp32: 4 bytes each;
- the NF4 code table itself: 16 fp32 values (`get_4bit_type("nf4")`, a new tensor per weight).
"""

from __future__ import annotations

from dataclasses import dataclass

NF4_BLOCKSIZE = 64  # bitsandbytes' default 4-bit blocksize (Linear4bit, BitsAndBytesConfig)
NESTED_BLOCKSIZE = 256  # double quantization: absmax quantized in blocks of 256
BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # quantize_4bit's accepted sizes
CODES_PER_BYTE = 2  # two 4-bit codes packed in each uint8
NF4_CODE_ENTRIES = 16  # the NF4 table: 16 quantiles of N(0, 1)
DYNAMIC_CODE_ENTRIES = 256  # the 8-bit dynamic map of the nested quantization
FP32_BYTES = 4


@dataclass(frozen=True)
class Nf4Bytes:
    """Bytes bitsandbytes holds on the device for 4-bit weights (one, or a sum of several)."""

    weights: int  # elements of the weights as the unquantized model has them
    packed: int  # uint8, two codes per byte
    absmax: int  # first-level absmax: uint8 codes (double quant) or fp32
    nested_absmax: int  # double quant: fp32 absmax of the absmax, one per 256 blocks
    nested_code: int  # double quant: the 256-entry fp32 dynamic map (one copy per weight)
    offset: int  # double quant: the fp32 mean subtracted before quantizing the absmax
    code: int  # the 16-entry fp32 NF4 table (one per weight)

    @property
    def total(self) -> int:
        return (self.packed + self.absmax + self.nested_absmax + self.nested_code + self.offset
                + self.code)

    @property
    def constants(self) -> int:
        """Everything but the packed codes: the quantization constants."""
        return self.total - self.packed

    def constant_elements(self, double_quant: bool) -> int:
        """Elements of the constants' tensors: the absmax are uint8 codes with double
        quantization, fp32 without; every other constant is fp32."""
        absmax = self.absmax if double_quant else self.absmax // FP32_BYTES
        fp32 = self.nested_absmax + self.nested_code + self.offset + self.code
        return absmax + fp32 // FP32_BYTES

    def __add__(self, other: Nf4Bytes) -> Nf4Bytes:
        return Nf4Bytes(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))


def _fields(value: Nf4Bytes) -> tuple[int, ...]:
    return (value.weights, value.packed, value.absmax, value.nested_absmax, value.nested_code,
            value.offset, value.code)


NO_NF4 = Nf4Bytes(0, 0, 0, 0, 0, 0, 0)


def ceil_div(a: int, b: int) -> int:
    return -(a // -b)


def blocks(numel: int, blocksize: int = NF4_BLOCKSIZE) -> int:
    """First-level blocks of a weight of `numel` elements (the last one may be partial)."""
    return ceil_div(numel, blocksize)


def nf4_bytes(numel: int, blocksize: int = NF4_BLOCKSIZE, double_quant: bool = True
              ) -> Nf4Bytes:
    """The device bytes of one weight of `numel` elements stored in NF4."""
    first = blocks(numel, blocksize)
    packed = (numel + 1) // CODES_PER_BYTE
    code = NF4_CODE_ENTRIES * FP32_BYTES
    if not double_quant:
        return Nf4Bytes(numel, packed, first * FP32_BYTES, 0, 0, 0, code)
    nested = ceil_div(first, NESTED_BLOCKSIZE)
    return Nf4Bytes(numel, packed, first, nested * FP32_BYTES,
                    DYNAMIC_CODE_ENTRIES * FP32_BYTES, FP32_BYTES, code)
