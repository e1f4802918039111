"""What a CPU kernel's scratch depends on beyond shapes, kept as a node's attributes.

oneDNN's convolution (PyTorch's CPU path for aten.convolution and its backward) allocates
blocked-layout copies of its operands unless the input is channels-last, and its scratch
depends on the stride, the groups and which gradients are asked for
(graphmem/runtime_models/torch_cpu.py). The IR keeps shapes, not strides, so the front end
records them here from the traced (fake) tensors.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import suggest_memory_format

from graphmem.core.ir import AttributeValue
from graphmem.frontends.torch.fused_layers import fused_layer_args, node_value
from graphmem.frontends.torch.promoted_operands import promoted_operands

# op -> the position of its input (the tensor whose layout oneDNN follows)
_CONVOLUTIONS = {"aten.convolution.default": 0, "aten.convolution_backward.default": 1}


def kernel_attributes(fx_node: torch.fx.Node) -> dict[str, AttributeValue]:
    """stride, padding, groups, transposed, output_mask (backward) and whether the input
    is channels-last, for a traced convolution; a fused attention or encoder layer's
    arguments (fused_layers.py); the promoted operands of any other op. A channels-last
    forward also says which operands PyTorch copies to that layout first
    (`_mkldnn_convolution`: `input.contiguous(memory_format)`, `weight.contiguous(...)`):
    `layout_copies`, 1 for the input, 2 for the weight (a kxk kernel's NCHW weight); an NCHW
    one likewise, where an operand is not contiguous (a permute's or a slice's view)."""
    target = str(fx_node.target)
    if (fused := fused_layer_args(fx_node)) is not None:  # nn.MultiheadAttention's, ...
        return fused.attributes()
    if target not in _CONVOLUTIONS:
        return promoted_operands(fx_node)
    args = fx_node.args
    layout = node_value(args[_CONVOLUTIONS[target]])
    found: dict[str, AttributeValue] = {"channels_last": int(_channels_last(layout))}
    if target == "aten.convolution.default":  # (input, weight, bias, stride, padding,
        # dilation, transposed, output_padding, groups)
        if found["channels_last"]:
            found["layout_copies"] = (int(not _nhwc(layout))
                                      + 2 * int(not _nhwc(node_value(args[1]))))
        elif copies := int(not _plain(layout)) + 2 * int(not _plain(node_value(args[1]))):
            found["layout_copies"] = copies  # a permuted or sliced NCHW operand
        found.update(stride=_ints(args[3]), padding=_ints(args[4]),
                     transposed=int(bool(args[6])), groups=int(args[8]))  # type: ignore[arg-type]
    else:  # (grad_output, input, weight, bias_sizes, stride, padding, dilation,
        # transposed, output_padding, groups, output_mask)
        found.update(stride=_ints(args[4]), padding=_ints(args[5]),
                     transposed=int(bool(args[7])),
                     groups=int(args[9]),  # type: ignore[arg-type]
                     output_mask=tuple(int(bool(b)) for b in args[10]))  # type: ignore[union-attr]
    return found


_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}  # NHWC, NDHWC


def _channels_last(tensor: Any) -> bool:
    """A 4-D (5-D) tensor whose strides order it NHWC (NDHWC: PyTorch's
    `suggest_memory_format`, which picks a convolution's layout: a slice of an NHWC tensor is
    one too), and not also NCHW-contiguous, as a 1x1 image is."""
    if not isinstance(tensor, torch.Tensor) or tensor.dim() not in _LAST:
        return False
    return (suggest_memory_format(tensor) == _LAST[tensor.dim()]
            and not tensor.is_contiguous())


def _nhwc(tensor: Any) -> bool:
    return not isinstance(tensor, torch.Tensor) or tensor.is_contiguous(
        memory_format=_LAST.get(tensor.dim(), torch.contiguous_format))


def _plain(tensor: Any) -> bool:
    return not isinstance(tensor, torch.Tensor) or tensor.is_contiguous()


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in values)
