"""A Hugging Face config's numbers checked before transformers sees them.

A config.json is untrusted data. transformers validates some fields itself (strict dataclasses
in transformers 5) and not others: `"num_attention_heads": 0` ends in a ZeroDivisionError,
`"vocab_size": 0` builds a model with no vocabulary, heads that do not divide among the
key/value heads fail only when the model is traced, and a multimodal config nesting a
20,000-layer text model builds for hours. So the fields graphmem and the model builders read
are checked here, in the config and in every config nested in it (`text_config`,
`vision_config`, `encoder`...): whole numbers (not booleans, not text, not NaN), in range,
counts of modules within what graphmem builds, query heads that divide among the key/value
heads, a `layer_types` list as long as the layers. (That the width divides among the heads is
left to transformers' validators: several architectures set the head size apart.) Each
refusal is one line naming the field and its path in the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeGuard

from graphmem.errors import GraphmemError

# Counts of modules a config asks transformers to build (one Python object per layer or
# expert, even on the meta device): the largest published models have ~130 layers and 256
# experts; beyond these bounds a hostile config would keep graphmem building for hours.
MAX_LAYERS = 1024
MAX_EXPERTS = 4096
MAX_WIDTH = 2**24  # hidden and vocabulary sizes: the largest published are ~2**18
MAX_POSITIONS = 2**28  # context lengths: the longest published are ~10 million tokens
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "encoder_layers",
              "decoder_layers", "num_decoder_layers")
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk")
_WIDTH_KEYS = ("hidden_size", "n_embd", "d_model", "intermediate_size", "ffn_dim",
               "moe_intermediate_size", "vocab_size", "head_dim", "d_kv", "d_ff",
               "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
               "v_head_dim", "num_attention_heads", "num_key_value_heads", "n_head",
               "num_heads", "encoder_attention_heads", "decoder_attention_heads")
_POSITION_KEYS = ("max_position_embeddings", "n_positions")
_BOUNDS: dict[str, int] = {
    **dict.fromkeys(LAYER_KEYS, MAX_LAYERS), **dict.fromkeys(EXPERT_KEYS, MAX_EXPERTS),
    **dict.fromkeys(TOP_K_KEYS, MAX_EXPERTS), **dict.fromkeys(_WIDTH_KEYS, MAX_WIDTH),
    **dict.fromkeys(_POSITION_KEYS, MAX_POSITIONS)}
# 0 experts: a dense model; a head size of 0: not used, or derived (GLM-5's defaults)
_MODULE_COUNT_KEYS = frozenset((*LAYER_KEYS, *EXPERT_KEYS))
_MAY_BE_ZERO = frozenset((*EXPERT_KEYS, *TOP_K_KEYS, "head_dim", "qk_rope_head_dim",
                          "qk_nope_head_dim", "v_head_dim"))


def check_config_values(values: Mapping[str, Any], where: str) -> None:
    """Refuse, with one line naming the field, a config or nested config whose numbers no
    model has (module docstring). `where`: the config's path, for the message."""
    for path, config in _configs(values, ""):
        at = f"{where}: {path}"
        for key, limit in _BOUNDS.items():
            _check_number(config, key, limit, at)
        _check_heads(config, at)
        _check_layer_types(config, at)
        _check_top_k(config, at)


def _configs(values: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The config and every object nested in it, with its path (`text_config.`)."""
    yield path, values
    for key, value in values.items():
        if isinstance(value, Mapping):
            yield from _configs(value, f"{path}{key}.")


def _check_number(config: Mapping[str, Any], key: str, limit: int, at: str) -> None:
    """A whole number in range; or one per stage or layer (a list, or an object by part, as
    Swin's `num_heads` and LXMERT's `num_hidden_layers`), each in range."""
    value = config.get(key)
    if value is None:  # absent or null: transformers' default
        return
    if isinstance(value, Mapping):
        values = list(value.values())
    else:
        values = value if isinstance(value, list) else [value]
    low = 0 if key in _MAY_BE_ZERO else 1
    for item in values:
        if not _is_whole_number(item):
            raise GraphmemError(f"{at}{key} is {_shown(value)}, not a whole number: write it"
                                " as a number without quotes or a decimal point")
        if item > limit and key in _MODULE_COUNT_KEYS:
            raise GraphmemError(f"{at}{key} is {_shown(value)}, more than graphmem builds"
                                f" ({limit:,}): check the config (the largest published"
                                " models have about 130 layers and 256 experts)")
        if not low <= item <= limit:
            raise GraphmemError(f"{at}{key} is {_shown(value)}: give a whole number from"
                                f" {low} to {limit:,}")


def _is_whole_number(value: object) -> bool:
    """An int, or a float with no fraction (`1200.0`, as some configs write it); not a bool,
    text, NaN or an infinity."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _check_heads(config: Mapping[str, Any], at: str) -> None:
    heads = config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads")
    if _whole(heads) and _whole(kv_heads) and heads % kv_heads:
        raise GraphmemError(f"{at}num_attention_heads ({heads}) is not a multiple of"
                            f" num_key_value_heads ({kv_heads}): each key/value head serves"
                            " a whole group of query heads; fix the config")


def _check_layer_types(config: Mapping[str, Any], at: str) -> None:
    layer_types = config.get("layer_types")
    layers = config.get("num_hidden_layers")
    if layer_types is None or not _whole(layers):
        return
    if not isinstance(layer_types, list) or len(layer_types) != layers:
        count = len(layer_types) if isinstance(layer_types, list) else _shown(layer_types)
        raise GraphmemError(f"{at}layer_types lists {count} layers and num_hidden_layers is"
                            f" {layers}: give one type per layer")


def _check_top_k(config: Mapping[str, Any], at: str) -> None:
    experts = next((config[k] for k in EXPERT_KEYS if _whole(config.get(k))), None)
    for key in TOP_K_KEYS:
        top_k = config.get(key)
        if experts is not None and _whole(top_k) and top_k > experts:
            raise GraphmemError(f"{at}{key} ({top_k}) is more than the {experts} experts:"
                                " a token cannot be routed to more experts than there are")


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _shown(value: object) -> str:
    text = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else repr(value)
    return text if len(text) <= 40 else text[:39] + "\u2026"
