"""The KV-cache shape of a PyTorch decoder, read from the model (no tracing, no weights).

Two sources, in this order:
- a Hugging Face style `model.config` with `num_hidden_layers`, `num_attention_heads`,
  `hidden_size` and optionally `num_key_value_heads` (grouped-query attention) and `head_dim`;
- the attention modules themselves: every module with an integer `head_dim` and a head count
  (`n_kv_heads`, `num_key_value_heads`, `num_kv_heads`, `n_heads`, `n_head`, `num_heads`, the
  KV-head names first) is one layer's attention, and they must agree.
"""

from __future__ import annotations

from torch import nn

from graphmem.errors import GraphmemError

_KV_HEAD_ATTRS = ("n_kv_heads", "num_key_value_heads", "num_kv_heads", "n_kv_head")
_HEAD_ATTRS = ("n_heads", "n_head", "num_heads", "num_attention_heads")


def detect_kv_shape(model: nn.Module) -> tuple[int, int, int, str]:
    """(layers, kv_heads, head_dim, how it was found), or a GraphmemError saying what to give."""
    from_config = _from_config(getattr(model, "config", None))
    if from_config is not None:
        return from_config
    shapes = [shape for module in model.modules() if (shape := _attention_shape(module))]
    if not shapes:
        raise GraphmemError(
            f"{type(model).__name__}: no attention modules with head_dim and a head count were"
            " found; give the cache shape with --kv-cache LAYERS,KV_HEADS,HEAD_DIM")
    if len(set(shapes)) > 1:
        raise GraphmemError(
            f"{type(model).__name__}: its attention modules disagree on (kv_heads, head_dim):"
            f" {sorted(set(shapes))}; give --kv-cache LAYERS,KV_HEADS,HEAD_DIM")
    heads, head_dim = shapes[0]
    return len(shapes), heads, head_dim, f"{len(shapes)} attention modules of the model"


def _from_config(config: object) -> tuple[int, int, int, str] | None:
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    if not all(isinstance(v, int) and v > 0 for v in (layers, heads, hidden)):
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads  # type: ignore[operator]
    return int(layers), int(kv_heads), int(head_dim), "model.config"  # type: ignore[arg-type]


def _attention_shape(module: nn.Module) -> tuple[int, int] | None:
    head_dim = getattr(module, "head_dim", None)
    if not isinstance(head_dim, int) or head_dim <= 0:
        return None
    for name in (*_KV_HEAD_ATTRS, *_HEAD_ATTRS):
        heads = getattr(module, name, None)
        if isinstance(heads, int) and heads > 0:
            return heads, head_dim
    return None


def model_float_dtype(model: nn.Module) -> tuple[str, int]:
    """The dtype of the model's first floating parameter (label, bytes): the cache's default."""
    for parameter in model.parameters():
        if parameter.dtype.is_floating_point:
            return str(parameter.dtype).removeprefix("torch."), parameter.element_size()
    return "float32", 4
