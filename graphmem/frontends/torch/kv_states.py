"""The state one sequence keeps in a layer that does not cache tokens, read from a Hugging Face
config: what vLLM allocates for it (MambaStateShapeCalculator, vllm/model_executor/layers/
mamba/mamba_utils.py), or where that has no shape for the layer what transformers keeps.

Per layer, in values (x the state's dtype), with K the convolution's kernel (vLLM keeps its
last K - 1 inputs; transformers keeps K, one column more: docs/zoo.md):

    Mamba-1        channels x (K - 1) + channels x d_state          (channels: expand x hidden)
    Mamba-2        (channels + 2 x groups x d_state) x (K - 1)      (the convolution runs over
                   + heads x head_dim x d_state                      B and C of each group too)
    short conv     hidden x (K - 1)                                 (LFM2's `conv` layers)
    gated delta    (2 x k_heads x k_dim + v_heads x v_dim) x (K - 1) (Qwen3-Next's linear
                   + v_heads x v_dim x k_dim                         attention)
    linear attn    heads x head_dim x head_dim                      (MiniMax's lightning
                                                                     attention: K^T V per head)
    RG-LRU         lru_width x (K - 1), and lru_width in float32     (RecurrentGemma:
                                                                     transformers' state)
    RWKV           2 x hidden (the token shifts), and 3 x hidden     (RWKV-4:
                   in float32 (the WKV numerator, denominator, max)  transformers' state)

A `linear_attention` layer is told apart by the fields its config has (a gated delta-net's
`linear_num_value_heads`, an RG-LRU's `lru_width`, Mamba's d_state), else it is the classic
K^T V state of `num_attention_heads` heads.
"""

from __future__ import annotations

from graphmem.errors import GraphmemError

SHORT_CONV, RWKV = "conv", "rwkv"

# (the field's names, first found wins): Jamba/Bamba/Zamba2/Falcon-H1 spell them mamba_*,
# Mamba and Mamba-2 plain
_MAMBA_FIELDS = {"expand": ("mamba_expand", "expand"),
                 "d_conv": ("mamba_d_conv", "conv_kernel"),
                 "d_state": ("mamba_d_state", "state_size")}
_GROUPS = ("mamba_n_groups", "mamba_ngroups", "n_groups")


def layer_state(config: object, kind: str) -> tuple[int, int]:
    """(values in the state's dtype, values always float32) of one layer's state, per
    sequence; a GraphmemError naming the missing fields."""
    if kind == SHORT_CONV:
        hidden, kernel = _fields(config, kind, "hidden_size", "conv_L_cache")
        return hidden * (kernel - 1), 0
    if kind == RWKV:
        (hidden,) = _fields(config, kind, "hidden_size")
        return 2 * hidden, 3 * hidden
    if _has(config, "linear_num_value_heads"):
        return _gated_delta(config, kind), 0
    if _has(config, "lru_width"):
        width, kernel = _fields(config, kind, "lru_width", "conv1d_width")
        return width * (kernel - 1), width
    if any(_has(config, name) for name in _MAMBA_FIELDS["d_state"]):
        return _mamba(config, kind), 0
    heads, head_dim = _fields(config, kind, "num_attention_heads", "head_dim")
    return heads * head_dim * head_dim, 0


def _gated_delta(config: object, kind: str) -> int:
    k_heads, v_heads, k_dim, v_dim, kernel = _fields(
        config, kind, "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
        "linear_value_head_dim", "linear_conv_kernel_dim")
    return (2 * k_heads * k_dim + v_heads * v_dim) * (kernel - 1) + v_heads * v_dim * k_dim


def _mamba(config: object, kind: str) -> int:
    """Mamba-1, or Mamba-2 where the config names groups; Mamba-2's SSM state
    heads x head_dim x d_state is the channels x d_state (heads x head_dim = channels)."""
    expand, d_conv, d_state = (_first(config, kind, names) for names in _MAMBA_FIELDS.values())
    channels = _channels(config, kind, expand)
    groups = next((g for name in _GROUPS if _positive(g := getattr(config, name, None))), 0)
    return (channels + 2 * groups * d_state) * (d_conv - 1) + channels * d_state  # type: ignore[operator]


def _channels(config: object, kind: str, expand: int) -> int:
    """The expanded channels, as the mixer reads them: a hybrid's `mamba_d_ssm` (Falcon-H1)
    else mamba_expand x hidden; a Mamba config's own `intermediate_size` (transformers' and
    vLLM's Mamba mixers read it, whatever expand says), which in a hybrid's config (mamba_*
    names) is the MLP's instead."""
    own = "mamba_d_ssm" if _has(config, "mamba_expand") else "intermediate_size"
    value = getattr(config, own, None)
    if _positive(value):
        return value  # type: ignore[return-value]
    (hidden,) = _fields(config, kind, "hidden_size")
    return expand * hidden


def _first(config: object, kind: str, names: tuple[str, ...]) -> int:
    for name in names:
        value = getattr(config, name, None)
        if _positive(value):
            return value  # type: ignore[return-value]
    raise _missing(kind, " or ".join(names))


def _fields(config: object, kind: str, *names: str) -> tuple[int, ...]:
    values = tuple(getattr(config, name, None) for name in names)
    missing = [name for name, value in zip(names, values, strict=True) if not _positive(value)]
    if missing:
        raise _missing(kind, ", ".join(missing))
    return values  # type: ignore[return-value]


def _missing(kind: str, names: str) -> GraphmemError:
    return GraphmemError(f"a {kind!r} layer: its state needs {names} in the model's config;"
                         " set it there, or give a cache with --kv-cache LAYERS,KV_HEADS,HEAD_DIM")


def _has(config: object, name: str) -> bool:
    return _positive(getattr(config, name, None))


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
