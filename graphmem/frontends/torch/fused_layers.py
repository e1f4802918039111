"""The arguments of nn.MultiheadAttention's and nn.TransformerEncoderLayer's fused CPU
kernels, read once from a traced node: what their FLOPs (frontends/torch/costs.py) and their
CPU scratch (kept as attributes by frontends/torch/kernel_args.py, sized by
graphmem/runtime_models/torch_cpu_attention.py) depend on beyond the query's shape.

    _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight,
        qkv_bias, proj_weight, proj_bias, mask=None, need_weights=True,
        average_attn_weights=True, mask_type=None)
    _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias,
        proj_weight, proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
        norm_weight_2, norm_bias_2, ffn_weight_1 [f, e], ffn_bias_1, ffn_weight_2,
        ffn_bias_2, mask=None, mask_type=None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from graphmem.core.ir import AttributeValue
from graphmem.ops.aten import ENCODER_LAYER, SELF_ATTENTION_LAYER

NO_MASK = -1  # mask_type where no mask is given (1: a key padding mask [b, s]; 0, 2: scores)
# _native_multi_head_attention's trailing defaults (aten's schema), from argument 9 on
_SELF_ATTENTION_DEFAULTS = (None, True, True, None)


@dataclass(frozen=True)
class FusedLayerArgs:
    """One fused layer's arguments; `query` its query / src, [b, s, e] where batched."""

    encoder: bool  # _transformer_encoder_layer_fwd; else _native_multi_head_attention
    query: Any  # the traced tensor (fake), or what the argument was
    num_head: int
    mask_type: int  # NO_MASK where there is no mask
    need_weights: bool = False  # attention only: the weights returned ...
    average_attn_weights: bool = False  # ... averaged over the heads
    norm_first: bool = False  # encoder only
    use_gelu: bool = False  # encoder only: Gelu, else Relu
    ffn_width: int = 0  # encoder only: ffn_weight_1's rows (0 where not a tensor)

    def attributes(self) -> dict[str, AttributeValue]:
        """What the kernel's allocations depend on, as the node's attributes."""
        if self.encoder:
            return {"num_head": self.num_head, "norm_first": int(self.norm_first),
                    "mask_type": self.mask_type, "ffn_width": self.ffn_width}
        return {"num_head": self.num_head, "need_weights": int(self.need_weights),
                "average_attn_weights": int(self.average_attn_weights),
                "mask_type": self.mask_type}


def fused_layer_args(fx_node: torch.fx.Node) -> FusedLayerArgs | None:
    """The node's arguments where it is one of the two fused layers; else None."""
    packet = getattr(fx_node.target, "overloadpacket", None)
    name = getattr(packet, "__name__", None)
    if name == SELF_ATTENTION_LAYER:
        return _self_attention(fx_node.args)
    if name == ENCODER_LAYER:
        return _encoder_layer(fx_node.args)
    return None


def _self_attention(given: tuple[Any, ...]) -> FusedLayerArgs:
    args = (*given, *_SELF_ATTENTION_DEFAULTS[max(len(given) - 9, 0):])
    mask_type = args[12] if args[9] is not None and args[12] is not None else NO_MASK
    return FusedLayerArgs(encoder=False, query=node_value(args[0]), num_head=int(args[4]),
                          mask_type=int(mask_type), need_weights=bool(args[10]),
                          average_attn_weights=bool(args[11]))


def _encoder_layer(args: tuple[Any, ...]) -> FusedLayerArgs:
    mask = args[18] if len(args) > 18 else None
    mask_type = args[19] if len(args) > 19 and mask is not None else None
    ffn_weight = node_value(args[14])
    return FusedLayerArgs(
        encoder=True, query=node_value(args[0]), num_head=int(args[2]),
        mask_type=NO_MASK if mask_type is None else int(mask_type),
        norm_first=bool(args[8]), use_gelu=bool(args[7]),
        ffn_width=int(ffn_weight.shape[0]) if isinstance(ffn_weight, torch.Tensor) else 0)


def node_value(arg: Any) -> Any:
    """An fx node's traced value (its fake tensor); any other argument as it is."""
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
