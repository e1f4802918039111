"""One model's KV cache two ways: graphmem's serving rules (graphmem/core/kv_layers.py, from
the config) and the tensors transformers' own cache holds after a forward
(benchmarks/zoo_kv.py, tests/test_zoo_kv.py)."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from graphmem.core.kv_layers import KvLayout, LayerGroup, full_attention
from graphmem.frontends.torch.kv import detect_kv_shape, model_layer_groups


def graphmem_bytes(model: nn.Module, context: int,
                   dtype_bytes: int = 4) -> tuple[tuple[LayerGroup, ...], int]:
    """graphmem's layer groups and one contiguous sequence of `context` tokens (fp32)."""
    layers, kv_heads, head_dim, _ = detect_kv_shape(model)
    groups = model_layer_groups(model) or full_attention(layers, kv_heads, head_dim)
    layout = KvLayout(groups, dtype_bytes=dtype_bytes, state_dtype_bytes=dtype_bytes)
    return groups, layout.contiguous_bytes(context)


def cache_bytes(model: nn.Module, context: int, decode_steps: int = 0) -> tuple[str, int]:
    """The cache's type and the bytes of every tensor in it after one forward of `context`
    token ids, batch 1, and `decode_steps` more forwards of one token each, with the states
    a model keeps on its own modules."""
    ids = torch.randint(0, 100, (1, context))
    with torch.no_grad():
        cache = returned_cache(model(ids, use_cache=True))
        if cache is None:  # RecurrentGemma: its attention's cache is made inside, not returned
            from transformers import DynamicCache

            cache = DynamicCache(config=model.config)
            model(ids, use_cache=True, cache=cache)
        for step in range(decode_steps):
            output = model(ids[:, -1:], use_cache=True, **{_cache_argument(model): cache},
                           position_ids=torch.tensor([[context + step]]))
            cache = returned_cache(output) or cache
    tensors = cache_tensors([cache, module_states(model)])
    return type(cache).__name__, sum(t.numel() * t.element_size() for t in tensors)


def _cache_argument(model: nn.Module) -> str:
    """The forward's name for the cache: `cache` (transformers 5), `state` (RWKV)."""
    names = inspect.signature(model.forward).parameters
    return next(name for name in ("cache", "state", "past_key_values") if name in names)


def returned_cache(output: object) -> object:
    """The cache a forward returned: `past_key_values` (transformers' caches), `state`
    (RWKV's five tensors)."""
    for name in ("past_key_values", "state"):
        cache = getattr(output, name, None)
        if cache is not None:
            return cache
    return None


def module_states(model: nn.Module) -> list[torch.Tensor]:
    """Tensors a model's modules hold as plain attributes (not parameters or buffers):
    RecurrentGemma's convolution and RG-LRU states."""
    return [value for module in model.modules() for value in vars(module).values()
            if isinstance(value, torch.Tensor)]


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

    walk(cache, depth + 1)
    return [t for t in found.values() if t.numel()]
