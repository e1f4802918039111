"""The KV cache per layer type: what one sequence holds in each kind of layer, as vLLM's KV
cache specs size it (vllm/v1/kv_cache_interface.py), and the inverse (a budget to the longest
context) where growth is not linear.

A model's layers fall into groups; per layer of a group, with B the block size, C the context,
S the tokens the scheduler runs in one step (max_num_batched_tokens) and dtype the cache's:

    full       K and V of every token:  2 x kv_heads x head_dim x dtype per token
               blocks = ceil(C / B)                                  (FullAttentionSpec)
    sliding    only the window's tokens (window W):
               blocks = ceil(min(W - 1 + S, C) / B) + 1              (SlidingWindowSpec: the
               window may start mid-block, hence the one more)
    chunked    local attention in chunks of A tokens:
               blocks = ceil(min(A + S, C) / B)                      (ChunkedLocalAttentionSpec)
    mla        one compressed latent per token, no separate V:
               (kv_lora_rank + qk_rope_head_dim) x dtype per token; blocks = ceil(C / B)
    cross      the encoder's E tokens, whatever C is: blocks = ceil(E / B) (CrossAttentionSpec)
    state      a state-space / linear-attention / short-convolution layer: a constant state
               per sequence, no tokens (MambaSpec, mamba_cache_mode "none"), in the model's
               dtype, and a part some models keep in float32 whatever it is (RecurrentGemma's
               RG-LRU state, RWKV's WKV sums: graphmem/frontends/torch/kv_states.py)

A sequence's KV = the sum over groups of layers x blocks x block_size x per-token bytes, plus the
states. Tensor parallelism splits attention's KV heads (at least one per GPU, as vLLM's
get_num_kv_heads) and the states; an MLA latent is one head, kept whole on every GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

FULL, SLIDING, CHUNKED, MLA, CROSS, STATE = "full", "sliding", "chunked", "mla", "cross", "state"
KINDS = (FULL, SLIDING, CHUNKED, MLA, CROSS, STATE)
TOKEN_KINDS = (FULL, SLIDING, CHUNKED, MLA)  # those whose cache grows with the context
# what limits the longest context of a model whose layers all keep a fixed state
NOTHING_GROWS = "nothing: no layer grows with the context"


@dataclass(frozen=True)
class LayerGroup:
    """Layers that cache the same way. `span` is the window (sliding), the chunk (chunked) or
    the encoder's length (cross); `state_values` the elements of one layer's state (state) in
    the state's dtype, `state_fp32_values` those kept in float32 whatever that is."""

    kind: str
    layers: int
    kv_heads: int = 0  # attention KV heads (an MLA latent: 1)
    head_dim: int = 0  # per head (an MLA latent: kv_lora_rank + qk_rope_head_dim)
    span: int | None = None
    state_values: int = 0
    state_fp32_values: int = 0

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind

    @property
    def label(self) -> str:
        """`sliding 4096`, `full`, `cross 1500`: how reports name the group."""
        return self.kind if self.span is None else f"{self.kind} {self.span}"

    def heads_per_rank(self, tensor_parallel: int) -> int:
        """vLLM get_num_kv_heads: split over the ranks, at least one each; MLA's latent is
        one head on every rank."""
        if self.kind == MLA:
            return self.kv_heads
        return max(1, self.kv_heads // tensor_parallel)

    def token_bytes(self, dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One token in one layer: K and V (MLA: the one latent) of the rank's heads."""
        if self.kind == STATE:
            return 0
        kv = 1 if self.kind == MLA else 2
        return kv * self.heads_per_rank(tensor_parallel) * self.head_dim * dtype_bytes

    def state_bytes(self, state_dtype_bytes: int, tensor_parallel: int = 1) -> int:
        """One sequence's state in one layer (its channels split over the ranks)."""
        return (-(-self.state_values // tensor_parallel) * state_dtype_bytes
                + -(-self.state_fp32_values // tensor_parallel) * 4)

    @property
    def window(self) -> int:
        """The span of a sliding, chunked or cross layer (the kinds that have one)."""
        assert self.span is not None, f"a {self.kind} layer group without its span"
        return self.span

    def tokens_held(self, context: int, step_tokens: int) -> int:
        """Tokens of one sequence of `context` tokens this layer keeps at most."""
        if self.kind == SLIDING:
            return min(self.window - 1 + step_tokens, context)
        if self.kind == CHUNKED:
            return min(self.window + step_tokens, context)
        if self.kind == CROSS:
            return self.window
        return 0 if self.kind == STATE else context

    def tokens_kept(self, context: int) -> int:
        """Tokens a contiguous cache keeps while a step attends: a sliding layer
        min(context, window), a chunked one min(context, chunk). transformers'
        DynamicSlidingWindowLayer keeps window - 1 between steps (tests/test_zoo_kv.py)."""
        if self.kind in (SLIDING, CHUNKED):
            return min(self.window, context)
        return self.tokens_held(context, 0)

    def blocks(self, context: int, step_tokens: int, block_size: int) -> int:
        """Blocks of one layer for one sequence (the module docstring's table)."""
        if self.kind == STATE:
            return 0
        blocks = -(-self.tokens_held(context, step_tokens) // block_size)
        return blocks + 1 if self.kind == SLIDING else blocks


@dataclass(frozen=True)
class GroupUse:
    """What one sequence holds in a group of layers, on one GPU."""

    label: str
    layers: int
    tokens: int  # tokens held per layer (0: a state)
    bytes: int  # all the group's layers


@dataclass(frozen=True)
class KvLayout:
    """Every layer group of a model's cache and what sizes it: a pure function of context."""

    groups: tuple[LayerGroup, ...]
    dtype_bytes: int  # the KV cache's
    state_dtype_bytes: int  # the states' (the model's dtype; an fp8 KV cache leaves them)
    tensor_parallel: int = 1
    block_size: int = 16
    step_tokens: int = 2048  # the scheduler's tokens per step (max_num_batched_tokens)

    @property
    def per_token_bytes(self) -> int:
        """One more token of every layer that grows with the context (within every window)."""
        return sum(g.layers * g.token_bytes(self.dtype_bytes, self.tensor_parallel)
                   for g in self.groups if g.kind in TOKEN_KINDS)

    def uses(self, context: int) -> tuple[GroupUse, ...]:
        """Per group: what one sequence of `context` tokens holds."""
        return tuple(self._use(group, context) for group in self.groups)

    def _use(self, group: LayerGroup, context: int) -> GroupUse:
        if group.kind == STATE:
            state = group.state_bytes(self.state_dtype_bytes, self.tensor_parallel)
            return GroupUse(group.label, group.layers, 0, group.layers * state)
        blocks = group.blocks(context, self.step_tokens, self.block_size)
        page = self.block_size * group.token_bytes(self.dtype_bytes, self.tensor_parallel)
        return GroupUse(group.label, group.layers, group.tokens_held(context, self.step_tokens),
                        group.layers * blocks * page)

    def sequence_bytes(self, context: int) -> int:
        """One sequence of `context` tokens: every group's blocks and states."""
        return sum(use.bytes for use in self.uses(context))

    def contiguous_bytes(self, context: int) -> int:
        """One sequence in a contiguous cache (no blocks): every group's kept tokens, and the
        states."""
        return sum(g.layers * (g.token_bytes(self.dtype_bytes, self.tensor_parallel)
                               * g.tokens_kept(context)
                               + g.state_bytes(self.state_dtype_bytes, self.tensor_parallel))
                   for g in self.groups)

    def longest_context(self, budget_bytes: int, cap: int, paged: bool = True) -> int:
        """The most tokens one sequence can have in `budget_bytes` (at most `cap`), in blocks
        or (`paged` False) contiguous: a binary search, as a windowed layer stops growing
        (vLLM estimate_max_model_len does the same); 0 when not even one token fits."""
        return longest_fit(self.sequence_bytes if paged else self.contiguous_bytes,
                           budget_bytes, cap)


def longest_fit(size: Callable[[int], int], budget_bytes: int, cap: int) -> int:
    """The most tokens (at most `cap`) whose `size` fits `budget_bytes`, `size` growing with
    the tokens; 0 when not even one token fits."""
    if size(1) > budget_bytes:
        return 0
    low, high = 1, cap  # size(low) fits; size grows with the context
    while low < high:
        middle = (low + high + 1) // 2
        if size(middle) <= budget_bytes:
            low = middle
        else:
            high = middle - 1
    return low


def full_attention(layers: int, kv_heads: int, head_dim: int) -> tuple[LayerGroup, ...]:
    """The cache of a model whose every layer is full attention."""
    return (LayerGroup(FULL, layers, kv_heads, head_dim),)


def merge_groups(layers: Sequence[LayerGroup]) -> tuple[LayerGroup, ...]:
    """Per-layer groups (one layer each) merged into one group per distinct kind and shape,
    in the order each first appears."""
    counts: dict[LayerGroup, int] = {}
    for layer in layers:
        key = replace(layer, layers=1)
        counts[key] = counts.get(key, 0) + layer.layers
    return tuple(replace(key, layers=n) for key, n in counts.items())
