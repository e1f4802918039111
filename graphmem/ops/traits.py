"""What an op is, beyond its cost: the traits passes ask instead of keeping op-name sets.

Each op's traits are declared next to its rules (graphmem/ops/<family>.py, `register_traits`)
and read with `traits_of(node)` (graphmem/ops/registry.py), for ONNX and aten nodes alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import TypedDict


class Contraction(StrEnum):
    """What kind of multiply-accumulate an op is (FLOPs = 2 * MACs)."""

    MATMUL = "matmul"  # x @ W: MatMul, Gemm, aten mm/addmm/bmm/linear/matmul
    CONV = "conv"  # Conv, aten convolution
    CONV_TRANSPOSE = "conv_transpose"  # weight [c_in, c_out/groups, *k]
    OTHER = "other"  # Einsum, fused attention: no single weight


class Autocast(Enum):
    """What torch.autocast does with an op (torch/csrc/autocast_mode.cpp lists)."""

    HALF = "half"  # inputs cast to the half type, outputs half
    FLOAT32 = "float32"  # inputs cast to float32, outputs float32
    PROMOTE = "promote"  # no casts: outputs take the widest floating input type


@dataclass(frozen=True)
class Traits:
    """What an op is, beyond its cost. The defaults say "nothing special"."""

    contraction: Contraction | None = None
    view: bool = False  # output 0 shares input 0's storage, as PyTorch runs it
    reshape: bool = False  # a view that only regroups dims (flattens a feature map)
    row_gather: bool = False  # reads rows of a table by index (an embedding)
    inplace_variant: str = ""  # PyTorch's in-place form of the op ("relu_"), "" when none
    is_inplace: bool = False  # the op IS an in-place form (aten `add_`): it writes input 0
    commutative: bool = False  # either operand can take the in-place result (`y.add_(x)`)
    runs_on_cublas: bool = False  # a cuBLAS call: its thread's cuBLAS workspace exists
    runs_on_cublaslt: bool = False  # through cuBLASLt (addmm), whose workspace is separate
    autocast_cuda: Autocast = Autocast.PROMOTE
    autocast_cpu: Autocast = Autocast.PROMOTE

    def autocast(self, device: str) -> Autocast:
        """The autocast policy on `device` ("cuda" or "cpu")."""
        return self.autocast_cpu if device == "cpu" else self.autocast_cuda

    def of_backward(self) -> Traits:
        """A backward node's traits: the gradient of a contraction is contractions of the
        same kind, through the same library; nothing else carries over."""
        return Traits(contraction=self.contraction, runs_on_cublas=self.runs_on_cublas,
                      runs_on_cublaslt=self.runs_on_cublaslt)


class AutocastTraits(TypedDict):
    """The autocast traits of an op under both autocast lists (`register_traits(**...)`)."""

    autocast_cuda: Autocast
    autocast_cpu: Autocast


HALF_UNDER_AUTOCAST = AutocastTraits(autocast_cuda=Autocast.HALF, autocast_cpu=Autocast.HALF)
FLOAT32_UNDER_AUTOCAST = AutocastTraits(autocast_cuda=Autocast.FLOAT32,
                                        autocast_cpu=Autocast.FLOAT32)
