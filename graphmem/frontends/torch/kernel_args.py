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
from graphmem.frontends.torch.promoted_operands import promoted_operands

# op -> the position of its input (the tensor whose layout oneDNN follows)
_CONVOLUTIONS = {"aten.convolution.default": 0, "aten.convolution_backward.default": 1}


def kernel_attributes(fx_node: torch.fx.Node) -> dict[str, AttributeValue]:
    """stride, padding, groups, transposed, output_mask (backward) and whether the input
    is channels-last, for a traced convolution; {} for every other op. A channels-last
    forward also says which operands PyTorch copies to that layout first
    (`_mkldnn_convolution`: `input.contiguous(memory_format)`, `weight.contiguous(...)`):
    `layout_copies`, 1 for the input, 2 for the weight (a kxk kernel's NCHW weight); an NCHW
    one likewise, where an operand is not contiguous (a permute's or a slice's view)."""
    target = str(fx_node.target)
    if target == SELF_ATTENTION_LAYER:
        return _self_attention_attributes(fx_node.args)
    if target == ENCODER_LAYER:
        return _encoder_layer_attributes(fx_node.args)
    if target not in _CONVOLUTIONS:
        return promoted_operands(fx_node)
    args = fx_node.args
    layout = _meta(args[_CONVOLUTIONS[target]])
    found: dict[str, AttributeValue] = {"channels_last": int(_channels_last(layout))}
    if target == "aten.convolution.default":  # (input, weight, bias, stride, padding,
        # dilation, transposed, output_padding, groups)
        if found["channels_last"]:
            found["layout_copies"] = (int(not _nhwc(layout))
                                      + 2 * int(not _nhwc(_meta(args[1]))))
        elif copies := int(not _plain(layout)) + 2 * int(not _plain(_meta(args[1]))):
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


SELF_ATTENTION_LAYER = "aten._native_multi_head_attention.default"
# its (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
# mask, need_weights, average_attn_weights, mask_type): the defaults of aten's schema
_SELF_ATTENTION_DEFAULTS = (None,) * 10 + (True, True, None)


def _self_attention_attributes(given: tuple[Any, ...]) -> dict[str, AttributeValue]:
    """num_head, need_weights, average_attn_weights and mask_type (-1: none; 1: a key
    padding mask [b, s]; 0 or 2: a mask over every score) of nn.MultiheadAttention's fused
    kernel: what its allocations depend on (graphmem/runtime_models/torch_cpu_attention.py)."""
    args = (*given, *_SELF_ATTENTION_DEFAULTS[len(given):])
    mask_type = args[12] if args[9] is not None and args[12] is not None else -1
    return {"num_head": int(args[4]), "need_weights": int(bool(args[10])),
            "average_attn_weights": int(bool(args[11])), "mask_type": int(mask_type)}


ENCODER_LAYER = "aten._transformer_encoder_layer_fwd.default"


def _encoder_layer_attributes(args: tuple[Any, ...]) -> dict[str, AttributeValue]:
    """num_head, norm_first, mask_type and the feed-forward width (ffn_weight_1's rows) of
    nn.TransformerEncoderLayer's fused kernel:
    (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
    norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
    ffn_bias_1, ffn_weight_2, ffn_bias_2, mask, mask_type)."""
    mask = args[18] if len(args) > 18 else None
    mask_type = args[19] if len(args) > 19 and mask is not None else None
    ffn_weight = _meta(args[14])
    return {"num_head": int(args[2]), "norm_first": int(bool(args[8])),
            "mask_type": -1 if mask_type is None else int(mask_type),
            "ffn_width": int(ffn_weight.shape[0]) if isinstance(ffn_weight, torch.Tensor) else 0}


def _meta(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


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
