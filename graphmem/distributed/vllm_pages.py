"""vLLM's one page size for a hybrid model (attention beside Mamba-like states): how its
hybrid allocator lays out the cache, which the per-group sums of graphmem/core/kv_layers.py
do not (vllm/platforms/interface.py and vllm/v1/core/kv_cache_utils.py, read, not copied).

Every layer's page has one size. A state does not grow with a block, so vLLM raises the
attention block until one attention page holds a layer's state, and pads the state's page to
it; with A the alignment (the larger of the attention kernel's smallest block, 16 for
FlashAttention, and the block size asked), p the bytes of one token of one attention layer
and m one layer's state:

    block tokens = A x ceil(m / (A x p));   page = block tokens x p

The layers of each type (a LayerGroup) fall into KV cache groups of `group_size` layers: the
smallest type's layer count, or the largest's where that is under 1.25 x the smallest; a
type's last group is padded to full size. A block spans one page of one layer of each group
slot, page x group_size bytes, and a sequence takes, per KV cache group, its attention blocks
(the layer's rule at the larger block) or one block for a state (mamba_cache_mode "none").
"""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.kv_layers import STATE, TOKEN_KINDS, GroupUse, KvLayout, LayerGroup, longest_fit

KERNEL_BLOCK = 16  # FlashAttention's smallest kernel block (get_supported_kernel_block_sizes)


@dataclass(frozen=True)
class UniformPages:
    """A hybrid's cache as vLLM's hybrid allocator holds it."""

    layout: KvLayout
    block_tokens: int  # the attention block vLLM sets
    page_bytes: int  # one layer's page: an attention block, or a state padded to it
    group_size: int  # layers per KV cache group

    @property
    def block_bytes(self) -> int:
        """One block: a page of each of a group's layers."""
        return self.page_bytes * self.group_size

    def kv_groups(self, group: LayerGroup) -> int:
        """The KV cache groups a type's layers make (the last padded)."""
        return -(-group.layers // self.group_size)

    def group_blocks(self, group: LayerGroup, context: int) -> int:
        """Blocks one sequence takes in one KV cache group of this type."""
        if group.kind == STATE:
            return 1
        return group.blocks(context, self.layout.step_tokens, self.block_tokens)

    def blocks(self, context: int) -> int:
        """Blocks one sequence of `context` tokens takes, every group."""
        return sum(self.kv_groups(g) * self.group_blocks(g, context) for g in self.layout.groups)

    def sequence_bytes(self, context: int) -> int:
        return self.blocks(context) * self.block_bytes

    def uses(self, context: int) -> tuple[GroupUse, ...]:
        """Per type: what one sequence holds, the padding of pages and groups included."""
        return tuple(GroupUse(g.label, g.layers,
                              g.tokens_held(context, self.layout.step_tokens),
                              self.kv_groups(g) * self.group_blocks(g, context)
                              * self.block_bytes) for g in self.layout.groups)

    def longest_context(self, budget_bytes: int, cap: int) -> int:
        return longest_fit(self.sequence_bytes, budget_bytes, cap)


def uniform_pages(layout: KvLayout) -> UniformPages | None:
    """The pages of a model with both attention and state layers; None for any other (its
    groups keep their own pages, of the same block)."""
    tokens = [g for g in layout.groups if g.kind in TOKEN_KINDS]
    states = [g for g in layout.groups if g.kind == STATE]
    if not tokens or not states:
        return None
    tp = layout.tensor_parallel
    # the model's attention shape: one token of one layer of the first attention type
    token = tokens[0].token_bytes(layout.dtype_bytes, tp)
    state = max(g.state_bytes(layout.state_dtype_bytes, tp) for g in states)
    align = max(KERNEL_BLOCK, layout.block_size)
    block = align * -(-state // (align * token))
    counts = [g.layers for g in layout.groups]
    smallest, largest = min(counts), max(counts)
    group_size = largest if largest < 1.25 * smallest else smallest
    return UniformPages(layout, block, block * token, group_size)
