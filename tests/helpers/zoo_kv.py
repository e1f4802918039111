"""One model's KV cache two ways: graphmem's serving rules (graphmem/core/kv_layers.py, from
the config) and the tensors transformers' own cache holds after a forward
(benchmarks/zoo_kv.py, tests/test_zoo_kv.py)."""

from __future__ import annotations

import torch
from torch import nn

from graphmem.core.kv_layers import KvLayout, LayerGroup, full_attention
from graphmem.frontends.torch.kv import detect_kv_shape, model_layer_groups


def graphmem_bytes(model: nn.Module, context: int) -> tuple[tuple[LayerGroup, ...], int]:
    """graphmem's layer groups and one contiguous fp32 sequence of `context` tokens."""
    layers, kv_heads, head_dim, _ = detect_kv_shape(model)
    groups = model_layer_groups(model) or full_attention(layers, kv_heads, head_dim)
    return groups, KvLayout(groups, dtype_bytes=4, state_dtype_bytes=4).contiguous_bytes(context)


def cache_bytes(model: nn.Module, context: int) -> tuple[str, int]:
    """The cache's type and the bytes of every tensor in it after one forward of `context`
    token ids, batch 1."""
    with torch.no_grad():
        cache = model(torch.randint(0, 100, (1, context)), use_cache=True).past_key_values
    return type(cache).__name__, sum(t.numel() * t.element_size() for t in cache_tensors(cache))


def cache_tensors(cache: object, depth: int = 4) -> list[torch.Tensor]:
    """Every tensor a cache object holds (its layers' keys and values, a hybrid's conv and
    SSM states), each storage once."""
    found: dict[int, torch.Tensor] = {}

    def walk(item: object, left: int) -> None:
        if isinstance(item, torch.Tensor):
            found.setdefault(item.untyped_storage().data_ptr(), item)
        elif left and isinstance(item, (list, tuple)):
            for element in item:
                walk(element, left - 1)
        elif left and isinstance(item, dict):
            for element in item.values():
                walk(element, left - 1)
        elif left and hasattr(item, "__dict__"):
            for element in vars(item).values():
                walk(element, left - 1)

    walk(cache, depth)
    return [t for t in found.values() if t.numel()]
