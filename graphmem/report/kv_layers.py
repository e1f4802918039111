"""Text of the KV cache per layer type (graphmem/core/kv_layers.py), shared by the terminal
and the HTML report."""

from __future__ import annotations

from graphmem.core.kv_layers import (
    MLA,
    NOTHING_GROWS,
    STATE,
    TOKEN_KINDS,
    GroupUse,
    LayerGroup,
)
from graphmem.core.units import count_noun, format_bytes


def is_plain(groups: tuple[LayerGroup, ...] | tuple[GroupUse, ...]) -> bool:
    """Every layer full attention of one shape: the classic formula says it all."""
    return not groups or (len(groups) == 1 and groups[0].label == "full")


def per_token_formula(groups: tuple[LayerGroup, ...], dtype_bytes: int) -> str:
    """`sliding 4096: 2 x 21 layers x 8 KV heads x 256 head dim x 2 B + full: ...`: one token
    of every layer the context grows (an MLA latent is one vector, no separate V)."""
    terms = []
    for group in groups:
        if group.kind not in TOKEN_KINDS:
            continue
        if group.kind == MLA:
            terms.append(f"{group.label}: {count_noun(group.layers, 'layer')} x {group.head_dim}"
                         f" latent x {dtype_bytes} B")
        else:
            layers = count_noun(group.layers, "layer")
            terms.append(f"{group.label}: 2 x {layers} x {group.kv_heads}"
                         f" KV heads x {group.head_dim} head dim x {dtype_bytes} B")
    return " + ".join(terms) or "no layer grows with the context"


def state_note(groups: tuple[LayerGroup, ...], state_dtype_bytes: int) -> str:
    """`+ 7 state layers: 66.5 KiB per sequence`, or nothing."""
    states = [g for g in groups if g.kind == STATE]
    if not states:
        return ""
    total = sum(g.layers * g.state_bytes(state_dtype_bytes) for g in states)
    return (f"; {count_noun(sum(g.layers for g in states), 'layer')} of state:"
            f" {format_bytes(total)} per sequence, whatever its length")


def group_text(use: GroupUse) -> str:
    """`sliding 4096: 32 layers x 6,143 tokens 770.0 MiB`, `state: 7 layers 66.5 KiB`."""
    tokens = f" x {use.tokens:,} tokens" if use.tokens else ""
    return f"{use.label}: {count_noun(use.layers, 'layer')}{tokens} {format_bytes(use.bytes)}"


def longest_context_text(tokens: int, limited_by: str) -> str:
    """`131,072 tokens (limited by memory)`, or `any length (nothing: no layer grows with
    the context)` for a model of fixed states with no position limit."""
    if limited_by == NOTHING_GROWS:
        return f"any length ({limited_by})"
    return f"{tokens:,} tokens (limited by {limited_by})"


def blocks_text(block_size: int, block_bytes: int, state_only: bool) -> str:
    """A serving block: `16 tokens (64.0 KiB)`, or for a model of states only one
    sequence's states (vLLM: one block per sequence)."""
    if state_only:
        return f"one sequence's states ({format_bytes(block_bytes)})"
    return f"{count_noun(block_size, 'token')} ({format_bytes(block_bytes)})"
