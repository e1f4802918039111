"""The KV-cache shape of a PyTorch decoder, read from the model (no tracing, no weights).

Two sources, in this order:
- a Hugging Face style `model.config` with `num_hidden_layers`, `num_attention_heads`,
  `hidden_size` and optionally `num_key_value_heads` (grouped-query attention) and `head_dim`;
- the attention modules themselves: every module with an integer `head_dim` and a head count
  (`n_kv_heads`, `num_key_value_heads`, `num_kv_heads`, `n_heads`, `n_head`, `num_heads`, the
  KV-head names first) is one layer's attention, and they must agree.

The config also says how each layer caches (`config_layer_groups`, graphmem/core/kv_layers.py):
`layer_types` per layer (full, sliding, chunked attention; a state-keeping "mamba",
"linear_attention" or short-convolution "conv" layer; a "hybrid" layer of Mamba-2 and attention
side by side), else `sliding_window` for every layer; `kv_lora_rank` with `qk_rope_head_dim`
makes attention an MLA latent; `num_key_value_heads` may be per layer. A model whose layers
all keep a state (Mamba, Mamba-2, RWKV) has no KV heads: its shape is (layers, 0, 0) and its
groups say the states (graphmem/frontends/torch/kv_states.py sizes each).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from torch import nn

from graphmem.core.kv_layers import CHUNKED, FULL, MLA, SLIDING, STATE, LayerGroup, merge_groups
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.kv_states import RWKV, SHORT_CONV, layer_state

_ATTENTION_TYPES = {"full_attention": FULL, "attention": FULL,
                    "sliding_attention": SLIDING, "chunked_attention": CHUNKED}
_STATE_TYPES = ("mamba", "linear_attention", SHORT_CONV, RWKV)
_HYBRID = "hybrid"  # Zamba2's, Falcon-H1's: a Mamba-2 mixer beside attention in one layer

_KV_HEAD_ATTRS = ("n_kv_heads", "num_key_value_heads", "num_kv_heads", "n_kv_head")
_HEAD_ATTRS = ("n_heads", "n_head", "num_heads", "num_attention_heads")


def detect_kv_shape(model: object) -> tuple[int, int, int, str]:
    """(layers, kv_heads, head_dim, how it was found), or a GraphmemError saying what to give.
    A model of state layers only: (layers, 0, 0)."""
    config = text_config(model)
    from_config = _from_config(config) or _states_only(config)
    if from_config is not None:
        return from_config
    modules = model.modules() if isinstance(model, nn.Module) else ()
    shapes = [shape for module in modules if (shape := _attention_shape(module))]
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


def _states_only(config: object) -> tuple[int, int, int, str] | None:
    """A config whose every layer keeps a state and none attends (Mamba, Mamba-2:
    `linear_attention` only; RWKV): (layers, 0 KV heads, 0, ...). Its mixers' `head_dim`
    and `num_heads` are not attention heads: read as such they sized a 2-layer Mamba-2 as
    two attention layers, 24,576 B where transformers keeps a 6,656 B state."""
    layers = getattr(config, "num_hidden_layers", None)
    if not _positive(layers):
        return None
    kinds = set(_layer_types(config, layers))  # type: ignore[arg-type]
    if kinds and kinds <= set(_STATE_TYPES):
        return int(layers), 0, 0, "model.config (state layers only)"  # type: ignore[arg-type]
    return None


def text_config(model: object) -> object:
    """The config of the model's text decoder: a multimodal model's (Gemma-3, Llava) is its
    `text_config` (transformers' `get_text_config`), any other model's its `config`."""
    config = getattr(model, "config", None)
    nested = getattr(config, "get_text_config", None)
    if callable(nested) and not _positive(getattr(config, "num_hidden_layers", None)):
        with contextlib.suppress(Exception):  # a config of another make: keep its own
            return nested()
    return config


def _from_config(config: object) -> tuple[int, int, int, str] | None:
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    if not all(_positive(v) for v in (layers, heads, hidden)):
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or _falcon_kv_heads(config) or heads
    if isinstance(kv_heads, Sequence):  # per layer: the largest stands for the whole
        kv_heads = max(kv_heads)
    head_dim = getattr(config, "head_dim", None) or hidden // heads  # type: ignore[operator]
    return int(layers), int(kv_heads), int(head_dim), "model.config"  # type: ignore[arg-type]


def _falcon_kv_heads(config: object) -> int | None:
    """Falcon's spelling (transformers FalconAttention): `multi_query` caches one KV head
    unless `new_decoder_architecture` (Falcon-40B's groups), which caches `num_kv_heads`;
    `num_kv_heads` without `multi_query`. None where the config says neither."""
    grouped = getattr(config, "num_kv_heads", None)
    if getattr(config, "multi_query", None) is True and not getattr(
            config, "new_decoder_architecture", False):
        return 1
    return grouped if _positive(grouped) else None


def model_layer_groups(model: object) -> tuple[LayerGroup, ...]:
    """How the model's layers cache, from its config; () where every layer is full attention
    of one shape (or there is no config): the cache shape alone then says it."""
    config = text_config(model)
    found = _from_config(config) or _states_only(config)
    if found is None:
        return ()
    groups = config_layer_groups(config, *found[:3])
    return () if groups == (LayerGroup(FULL, *found[:3]),) else groups


def config_layer_groups(config: object, layers: int, kv_heads: int,
                        head_dim: int) -> tuple[LayerGroup, ...]:
    """One group per kind of layer: `layer_types`, else `sliding_window` on every layer."""
    heads = getattr(config, "num_key_value_heads", None)
    per_layer = heads if isinstance(heads, Sequence) and len(heads) == layers else None
    return merge_groups([group for i, kind in enumerate(_layer_types(config, layers))
                         for group in _layer_groups(config, kind, per_layer[i] if per_layer
                                                    else kv_heads, head_dim)])


def _layer_types(config: object, layers: int) -> list[str]:
    """Each layer's kind: `layer_types` where it names every layer; else RWKV's (a config of
    `attention_hidden_size` and no attention heads: its token mixing keeps a state); else
    every layer sliding where `sliding_window` is set and used, full otherwise."""
    types = getattr(config, "layer_types", None)
    if isinstance(types, Sequence) and not isinstance(types, str) and len(types) == layers:
        return [str(kind) for kind in types]
    if (_positive(getattr(config, "attention_hidden_size", None))
            and not _positive(getattr(config, "num_attention_heads", None))):
        return [RWKV] * layers
    return [_plain_attention(config)] * layers


def _plain_attention(config: object) -> str:
    window = getattr(config, "sliding_window", None)
    sliding = _positive(window) and getattr(config, "use_sliding_window", True) is not False
    return "sliding_attention" if sliding else "full_attention"


def _layer_groups(config: object, kind: str, kv_heads: int,
                  head_dim: int) -> tuple[LayerGroup, ...]:
    """One layer's groups: its state, its attention, or (a hybrid layer) both."""
    if kind in _STATE_TYPES:
        return (_state_group(config, kind),)
    if kind == _HYBRID:
        return (_state_group(config, kind),
                _attention_group(config, _plain_attention(config), kv_heads, head_dim))
    return (_attention_group(config, kind, kv_heads, head_dim),)


def _state_group(config: object, kind: str) -> LayerGroup:
    values, fp32_values = layer_state(config, kind)
    return LayerGroup(STATE, 1, state_values=values, state_fp32_values=fp32_values)


def _attention_group(config: object, kind: str, kv_heads: int, head_dim: int) -> LayerGroup:
    attention = _ATTENTION_TYPES.get(kind)
    if attention is None:
        raise GraphmemError(f"layer_types: a {kind!r} layer, whose cache graphmem does not know;"
                            " give the cache with --kv-cache LAYERS,KV_HEADS,HEAD_DIM")
    latent = getattr(config, "kv_lora_rank", None), getattr(config, "qk_rope_head_dim", None)
    if attention == FULL and all(_positive(v) for v in latent):
        # MLA: one compressed latent per token (kv_lora_rank) and the shared rotary key
        return LayerGroup(MLA, 1, 1, latent[0] + latent[1])  # type: ignore[operator]
    span = {SLIDING: "sliding_window", CHUNKED: "attention_chunk_size"}.get(attention)
    window = getattr(config, span, None) if span else None
    if span and not _positive(window):
        raise GraphmemError(f"a {kind!r} layer and no {span} in the config: give it")
    return LayerGroup(attention, 1, int(kv_heads), int(head_dim), window)


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _attention_shape(module: nn.Module) -> tuple[int, int] | None:
    head_dim = getattr(module, "head_dim", None)
    if not isinstance(head_dim, int) or head_dim <= 0:
        return None
    for name in (*_KV_HEAD_ATTRS, *_HEAD_ATTRS):
        heads = getattr(module, name, None)
        if isinstance(heads, int) and heads > 0:
            return heads, head_dim
    return None


def model_float_dtype(model: object) -> tuple[str, int]:
    """The dtype of the model's first floating parameter (label, bytes): the cache's default."""
    for parameter in model.parameters() if isinstance(model, nn.Module) else ():
        if parameter.dtype.is_floating_point:
            return str(parameter.dtype).removeprefix("torch."), parameter.element_size()
    return "float32", 4
