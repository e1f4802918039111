"""The KV cache of decoder inference: its size as a formula in batch and context, and the
longest context that fits on a GPU.

    kv_cache_bytes = 2 (K and V) * layers * batch * kv_heads * head_dim * context * dtype_bytes

The cache's shape comes from an ONNX decoder-with-past graph's inputs (`past_key_values.N.key`
/ `.value` [batch, kv_heads, past, head_dim] as Hugging Face Optimum exports them, or
`past.N` / `past_N` [2, batch, kv_heads, past, head_dim] as onnxruntime's GPT-2 exports do),
from the model's attention modules (graphmem/frontends/torch/kv.py) or from the user
(`--kv-cache LAYERS,KV_HEADS,HEAD_DIM`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from graphmem.core.conventions import MAX_DIM_VALUE
from graphmem.core.ir import Graph, Value
from graphmem.core.kv_layers import (
    FULL,
    NOTHING_GROWS,
    TOKEN_KINDS,
    KvLayout,
    LayerGroup,
    full_attention,
    merge_groups,
)
from graphmem.core.symbolic import SymInt
from graphmem.errors import GraphmemError
from graphmem.passes.dims import bare_dim

if TYPE_CHECKING:  # the serving plan is imported where --serve asks for it
    from graphmem.distributed.serving import ServingReport

BATCH = "batch"
CONTEXT = "context"

# past_key_values.3.key, past_key_values_3_value, past.3.key, past_key.3, past_value_3
_SPLIT_KV = (
    re.compile(r"^past(?:_key_values)?[._](\d+)[._](key|value)$"),
    re.compile(r"^past[._](key|value)s?[._](\d+)$"),
)
# past.3 / past_3: K and V stacked in one [2, batch, heads, past, head_dim] tensor
_STACKED_KV = re.compile(r"^past[._](\d+)$")
_PRESENT = re.compile(r"^present")


@dataclass(frozen=True)
class KvCacheShape:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    dtype_bytes: int
    source: str  # how it was found
    # per layer type (graphmem/core/kv_layers.py); empty: every layer full attention
    groups: tuple[LayerGroup, ...] = ()
    state_dtype_bytes: int = 0  # a state-space layer's state (the model's dtype)

    @property
    def layer_groups(self) -> tuple[LayerGroup, ...]:
        return self.groups or full_attention(self.layers, self.kv_heads, self.head_dim)

    @property
    def per_token_bytes(self) -> int:
        """One token of one sequence in every layer the context grows: 2 (K and V) * layers *
        kv_heads * head_dim * dtype where every layer is full attention."""
        return sum(g.layers * g.token_bytes(self.dtype_bytes) for g in self.layer_groups
                   if g.kind in TOKEN_KINDS)

    @property
    def state_bytes(self) -> int:
        """One sequence's states, whatever its length (0 where no layer keeps one)."""
        return sum(g.layers * g.state_bytes(self.state_dtype_bytes or self.dtype_bytes)
                   for g in self.layer_groups)


@dataclass(frozen=True)
class KvCacheReport:
    shape: KvCacheShape
    batch: int | None  # None: left free in the formula
    formula: SymInt  # bytes in `batch` and `context`
    bytes: SymInt  # the formula at the known batch: bytes in `context`
    copies: int  # cache copies held during a step (ONNX past inputs + present outputs: 2)
    base_bytes: int | None  # everything else at the peak: weights, one step's activations
    usable_bytes: int | None
    max_context: int | None
    max_context_reason: str | None  # why max_context is None
    # the model's own limit (HF config's max_position_embeddings, or --max-context):
    # max_context never exceeds it
    position_limit: int | None = None
    position_limit_source: str = ""
    serving: ServingReport | None = None  # --serve: the paged cache on the GPU

    @property
    def max_context_limited_by(self) -> str | None:
        """"position limit" where the model's limit, not memory, sets max_context."""
        if self.max_context is None:
            return None
        limit = self.position_limit
        return "position limit" if limit is not None and self.max_context == limit else "memory"


def with_position_limit(report: KvCacheReport, limit: int | None, source: str) -> KvCacheReport:
    """The report with the model's position limit: the longest context is never beyond it
    (a model answers garbage, or refuses, past its max_position_embeddings)."""
    if limit is None:
        return report
    longest = report.max_context
    return replace(report, position_limit=limit, position_limit_source=source,
                   max_context=None if longest is None else min(longest, limit))


def with_serving_answer(report: KvCacheReport) -> KvCacheReport:
    """Under --serve one answer to "the longest context": the serving plan's (paged blocks in
    the engine's budget, capped at the position limit); base and usable are the plan's."""
    plan = report.serving
    if plan is None:
        return report
    base = plan.weights_bytes + plan.activation_bytes + plan.cuda_context_bytes
    unbounded = plan.context_limited_by == NOTHING_GROWS
    return replace(report, max_context=None if unbounded else plan.max_context,
                   max_context_reason=ANY_LENGTH if unbounded else None,
                   base_bytes=base, usable_bytes=plan.budget_bytes)


# the KV cache's dtypes: graphmem's float labels and vLLM's kv_cache_dtype spellings (fp8 is
# e4m3 on CUDA; the per-tensor scales vLLM keeps beside them are a few bytes per layer)
KV_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "fp8": 1,
                  "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}


def dtype_bytes(label: str) -> int:
    """Bytes of one element of a KV cache of dtype `label`."""
    if label not in KV_DTYPE_BYTES:
        raise GraphmemError(f"--kv-dtype {label}: choose one of {', '.join(KV_DTYPE_BYTES)}")
    return KV_DTYPE_BYTES[label]


def parse_kv_option(text: str) -> tuple[int, int, int]:
    """`--kv-cache 32,8,128` -> (layers, kv_heads, head_dim)."""
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise GraphmemError(f"--kv-cache {text}: give LAYERS,KV_HEADS,HEAD_DIM as three positive"
                            " integers, e.g. --kv-cache 32,8,128 (or 'auto' for a PyTorch model)")
    layers, heads, head_dim = (int(p) for p in parts)
    return layers, heads, head_dim


# why a longest context is not a number: nothing grows with it
ANY_LENGTH = ("any length: no layer grows with the context, each sequence keeps a fixed"
              " state")


def kv_cache_formula(shape: KvCacheShape) -> SymInt:
    """batch x (context x per-token bytes + the states): a state is per sequence, whatever
    its length."""
    batch = SymInt.symbol(BATCH)
    return batch * SymInt.symbol(CONTEXT) * shape.per_token_bytes + batch * shape.state_bytes


@dataclass(frozen=True)
class PastInputs:
    """The KV inputs of an ONNX decoder-with-past and what they say about the cache."""

    shape: KvCacheShape
    values: tuple[Value, ...]  # the past inputs
    presents: tuple[Value, ...]  # graph outputs named present*: the cache after this step
    batch_dim: SymInt | None  # dim 0 of a past input (the batch)
    past_dim: SymInt | None = None  # the cached length of a past input

    @property
    def kv_values(self) -> tuple[Value, ...]:
        return (*self.values, *self.presents)


def find_past_inputs(graph: Graph) -> PastInputs | None:
    """Past K/V inputs by name; None when the graph has none (or their dims are not fixed)."""
    layers: set[int] = set()
    found: list[tuple[Value, bool]] = []  # (value, stacked K and V)
    per_layer: dict[int, tuple[int, int]] = {}  # layer: (KV heads, head dim)
    for value in graph.inputs:
        layer, stacked = _past_layer(value.name)
        if layer is not None:
            layers.add(layer)
            found.append((value, stacked))
            heads_and_dim = _heads_and_head_dim(value, stacked)
            if heads_and_dim is None:
                return None
            per_layer[layer] = heads_and_dim
    if not found:
        return None
    heads_dim = per_layer[min(per_layer)]
    sample = found[0][0]
    bits = sample.dtype.bits
    # layers whose inputs differ in KV heads or head dim: one group each (per-layer heads)
    groups = () if len(set(per_layer.values())) == 1 else merge_groups(
        [LayerGroup(FULL, 1, *per_layer[layer]) for layer in sorted(per_layer)])
    shape = KvCacheShape(
        layers=len(layers), kv_heads=max(h for h, _ in per_layer.values()),
        head_dim=heads_dim[1], dtype=sample.dtype.label, dtype_bytes=max(bits // 8, 1),
        source=f"ONNX inputs {found[0][0].name} ... ({len(found)} past inputs)",
        groups=groups)
    presents = tuple(v for v in graph.outputs if _PRESENT.match(v.name))
    batch_axis = 1 if found[0][1] else 0
    dims = sample.shape or ()  # [batch, heads, past, head_dim], stacked: [2, batch, ...]
    return PastInputs(shape, tuple(v for v, _ in found), presents,
                      dims[batch_axis] if len(dims) > batch_axis else None,
                      dims[batch_axis + 2] if len(dims) > batch_axis + 2 else None)


def decoder_dim_names(graph: Graph, past: PastInputs) -> tuple[str, str, str] | None:
    """(batch, new tokens, cached tokens): the dims a decoder-with-past's steps bind. The
    batch and past dims are those of the past inputs; the new tokens' is the one other dim
    the graph's inputs have (input_ids [batch, sequence]). None when that is ambiguous."""
    batch, cached = bare_dim(past.batch_dim), bare_dim(past.past_dim)
    if batch is None or cached is None or batch == cached:
        return None
    others = {name for value in graph.inputs if value not in past.values
              for dim in value.shape or () if dim is not None
              for name in dim.free_symbols()} - {batch, cached}
    return (batch, others.pop(), cached) if len(others) == 1 else None


def _past_layer(name: str) -> tuple[int | None, bool]:
    for pattern in _SPLIT_KV:
        match = pattern.match(name)
        if match:
            digits = next(g for g in match.groups() if g.isdigit())
            return int(digits), False
    match = _STACKED_KV.match(name)
    return (int(match.group(1)), True) if match else (None, False)


def _heads_and_head_dim(value: Value, stacked: bool) -> tuple[int, int] | None:
    rank = 5 if stacked else 4
    dims = value.shape or ()
    if len(dims) != rank:
        return None
    heads, head_dim = dims[rank - 3], dims[rank - 1]
    if heads is None or head_dim is None or not heads.is_constant or not head_dim.is_constant:
        return None
    return int(heads), int(head_dim)


def past_input_bytes(past: PastInputs, dims: Mapping[str, int]) -> SymInt:
    """Bytes of the past inputs and present outputs at the analyzed dims."""
    total = SymInt()
    for value in (*past.values, *past.presents):
        if value.nbytes is not None:
            total = total + value.nbytes.bind(dims)
    return total


def kv_cache_report(shape: KvCacheShape, batch: int | None, copies: int,
                    base_bytes: SymInt | None, usable_bytes: int | None) -> KvCacheReport:
    """The cache formula, and with a GPU and a known batch the longest context that fits:
    base + copies * per_token_bytes * batch * context <= usable."""
    formula = kv_cache_formula(shape)
    at_batch = formula.bind({BATCH: batch}) if batch is not None else formula
    base = int(base_bytes) if base_bytes is not None and base_bytes.is_constant else None
    max_context, reason = _max_context(shape, batch, copies, base, usable_bytes)
    return KvCacheReport(shape, batch, formula, at_batch, copies, base, usable_bytes,
                         max_context, reason)


def _max_context(shape: KvCacheShape, batch: int | None, copies: int, base: int | None,
                 usable: int | None) -> tuple[int | None, str | None]:
    if usable is None:
        return None, "give --gpu to get the longest context that fits"
    if batch is None:
        return None, "bind the batch (--batch) to get the longest context that fits"
    if base is None:
        return None, "bind every other dim (--dim) to get the longest context that fits"
    # each of the batch's sequences, in each copy: base + batch x copies x sequence <= usable
    budget = max(usable - base, 0) // (batch * copies)
    layout = KvLayout(shape.layer_groups, shape.dtype_bytes,
                      shape.state_dtype_bytes or shape.dtype_bytes)
    per_token = shape.per_token_bytes
    if not per_token and layout.contiguous_bytes(1) <= budget:
        return None, ANY_LENGTH
    # no layer keeps more than every token: the search stops where full layers would
    cap = max(budget // per_token, 1) if per_token else MAX_DIM_VALUE
    return layout.longest_context(budget, cap, paged=False), None
