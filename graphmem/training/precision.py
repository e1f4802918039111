"""Mixed precision (AMP) for the training expansion: which ops autocast runs in half.

torch.autocast keeps the fp32 master weights and, op by op, casts the inputs of some ops to
the half type and of others to float32; every other op runs in the widest floating type of
its inputs (type promotion). The op lists are torch's (torch/csrc/autocast_mode.cpp):
- CUDA, "lower precision": matmul, mm, bmm, addmm, linear, conv*, conv_transpose*, baddbmm;
  "fp32": softmax, log_softmax, layer_norm, group_norm, norm, the losses (cross_entropy,
  nll_loss), pow, exp, log...
- CPU, "lower precision": the same matmul/conv family; "fp32": the losses, but softmax and
  layer_norm follow their input (`torch.autocast("cpu")` returns bf16 from a bf16 softmax).
Weight casts are cached for the whole forward (one half copy per weight, as autocast's cache
of leaf tensors that require grad); an activation is cast again at each op that needs it.
Zero-dim tensors and parameters do not widen an op's type (torch's promotion skips 0-dim
tensors; a parameter reaching a promoting op, such as a bias Add after MatMul, is the bias of
a Linear, which autocast casts with the matmul).
"""

from __future__ import annotations

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.ops import Autocast, traits_of

HALF_DTYPES = {"fp16": DType.FLOAT16, "bf16": DType.BFLOAT16}
AUTOCAST_DEVICES = ("cuda", "cpu")


# HALF: inputs cast to the half type, outputs half; FLOAT32: inputs cast to float32, outputs
# float32; PROMOTE: no casts, outputs take the widest floating input type. Each op's policy
# on each device is its `autocast` trait (graphmem/ops: linear.py, normalization.py...).
Precision = Autocast


def op_precision(node: Node, autocast_device: str) -> Precision:
    return traits_of(node).autocast(autocast_device)


def cast_target(value: Value, precision: Precision, half: DType) -> DType | None:
    """The dtype `value` is cast to before an op of `precision` (None: used as it is)."""
    if not value.dtype.is_float or value.dtype is DType.FLOAT64:
        return None
    if precision is Precision.HALF and value.dtype is not half:
        return half
    if precision is Precision.FLOAT32 and value.dtype is not DType.FLOAT32:
        return DType.FLOAT32
    return None


def promoted_dtype(inputs: list[Value | None], fallback: DType) -> DType:
    """The widest floating dtype among the inputs that take part in promotion."""
    widths = [v.dtype for v in inputs if v is not None and _promotes(v)]
    if not widths:
        return fallback
    return max(widths, key=lambda d: (d.bits, d is DType.FLOAT32))


def _promotes(value: Value) -> bool:
    if not value.dtype.is_float or value.role in (Role.PARAMETER, Role.BUFFER, Role.CONSTANT):
        return False
    return value.shape is None or len(value.shape) > 0


def output_dtype(node: Node, original: DType, precision: Precision, half: DType,
                 inputs: list[Value | None]) -> DType:
    """The dtype a floating output of `node` has under autocast."""
    if not original.is_float or node.op_type in ("Cast", "CastLike"):
        return original
    if precision is Precision.HALF:
        return half
    if precision is Precision.FLOAT32:
        return DType.FLOAT32
    return promoted_dtype(inputs, original)
