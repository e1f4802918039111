"""The HTML report's per-GPU (distributed training) and KV-cache sections, read from the JSON's
`memory.per_rank`, `memory.fit_by_strategy` and `memory.kv_cache` (report/json/distributed.py).

Each is None when its field is missing or not of that shape (the generic field/value table of
html_extras.py shows it then). Empty lists and None are left out, never shown as [] or None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graphmem.core.units import format_bytes
from graphmem.report.html.quantity import Quantity, bytes_quantity
from graphmem.report.safe_text import printable, printable_text

# The parts of one GPU's peak, in the terminal's order (report/terminal/distributed.py)
_PER_RANK_PARTS = (
    ("parameters_bytes", "parameters"),
    ("gradients_bytes", "gradients"),
    ("optimizer_state_bytes", "optimizer state"),
    ("temporaries_bytes", "optimizer temporaries"),
    ("activations_bytes", "activations"),
    ("gathered_bytes", "gathered parameters"),
    ("buckets_bytes", "communication buckets"),
)

_LAYOUT_TEXT = {
    "traced": "model states as traced",
    "zero-paper": "2-byte params/grads + fp32 master in the optimizer (ZeRO paper)",
    "deepspeed": "DeepSpeed mixed precision (2 + 2 + 4 fp32 grads + 4 master + optimizer)",
}


def _size(value: Any) -> Quantity | None:
    return bytes_quantity(value) if isinstance(value, int | str) and value != "" else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class SizedPart:
    label: str
    size: Quantity
    percent: float  # of the total (0 when the total is 0)


@dataclass(frozen=True)
class StrategyRow:
    strategy: str
    gpus: int | None  # the fewest GPUs that fit; None: no count does
    data_parallel: int | None
    tensor_parallel: int
    per_gpu: Quantity | None  # at that count, else the floor (the unsharded part alone)
    fits: bool


@dataclass(frozen=True)
class PerGpuView:
    strategy: str
    data_parallel: int | None
    tensor_parallel: int
    total_gpus: int | None
    layout: str  # in words
    parts: tuple[SizedPart, ...]
    total: Quantity
    model_states: Quantity | None
    peak_step: int | None
    peak_node: str
    split_share: float | None  # of the parameter bytes split by tensor parallelism (T > 1)
    replicated_weights: tuple[str, ...]
    fit_rows: tuple[StrategyRow, ...]  # () without --gpu
    usable: Quantity | None  # one GPU's usable memory, when the fit rows have it


def per_gpu_view(memory: Mapping[str, Any]) -> PerGpuView | None:
    rank = memory.get("per_rank")
    if not isinstance(rank, Mapping) or _size(rank.get("total_bytes")) is None:
        return None
    total = bytes_quantity(rank["total_bytes"])
    parts = tuple(SizedPart(label, size, _share(size, total))
                  for key, label in _PER_RANK_PARTS if (size := _size(rank.get(key))) is not None)
    tp = _int(rank.get("tensor_parallel")) or 1
    share = rank.get("tensor_parallel_split_share")
    fits = memory.get("fit_by_strategy")
    fit_rows = tuple(_fit_row(r) for r in fits if isinstance(r, Mapping)) if isinstance(
        fits, list) else ()
    usable = next((_size(r.get("usable_bytes")) for r in fits or () if isinstance(r, Mapping)),
                  None) if isinstance(fits, list) else None
    layout = str(rank.get("state_layout") or "")
    return PerGpuView(
        strategy=str(rank.get("strategy") or "?"),
        data_parallel=_int(rank.get("data_parallel")),
        tensor_parallel=tp,
        total_gpus=_int(rank.get("total_gpus")),
        layout=_LAYOUT_TEXT.get(layout, layout),
        parts=parts,
        total=total,
        model_states=_size(rank.get("model_states_bytes")),
        peak_step=_int(rank.get("peak_step")),
        peak_node=printable(rank.get("peak_node") or ""),
        split_share=float(share) if tp > 1 and isinstance(share, int | float) else None,
        replicated_weights=tuple(printable(w)
                                 for w in rank.get("replicated_matmul_weights") or ()),
        fit_rows=fit_rows,
        usable=usable,
    )


def _share(size: Quantity, total: Quantity) -> float:
    return 100.0 * size.probe / total.probe if total.probe > 0 else 0.0


def _fit_row(row: Mapping[str, Any]) -> StrategyRow:
    gpus = _int(row.get("min_gpus"))
    return StrategyRow(
        strategy=str(row.get("strategy") or "?"),
        gpus=gpus,
        data_parallel=_int(row.get("data_parallel")),
        tensor_parallel=_int(row.get("tensor_parallel")) or 1,
        per_gpu=_size(row.get("per_rank_total_bytes")),
        fits=bool(row.get("fits")) and gpus is not None,
    )


@dataclass(frozen=True)
class KvCacheView:
    layers: int | None
    kv_heads: int | None
    head_dim: int | None
    dtype: str
    dtype_bytes: int | None  # per element: per_token / (2 * layers * kv_heads * head_dim)
    per_token: Quantity | None  # one token of one sequence
    batch: int | None
    per_token_at_batch: Quantity | None  # one token of the whole batch
    size: Quantity | None  # the cache at the batch: a formula in `context`
    formula: str  # in batch and context
    copies: int
    max_context: int | None
    max_context_reason: str
    base: Quantity | None
    usable: Quantity | None
    source: str

    @property
    def per_token_text(self) -> str:
        """'1.0 KiB per token per sequence' rather than 1024*context."""
        return f"{self.per_token.text} per token per sequence" if self.per_token else ""

    @property
    def at_batch_text(self) -> str:
        """The cache at the batch: '1.0 KiB x context tokens' rather than 1024*context."""
        if self.per_token_at_batch is None:
            return ""
        return f"{format_bytes(self.per_token_at_batch.probe)} \u00d7 context tokens"


def kv_cache_view(memory: Mapping[str, Any]) -> KvCacheView | None:
    kv = memory.get("kv_cache")
    if not isinstance(kv, Mapping) or not isinstance(kv.get("per_token_bytes"), int):
        return None
    layers, heads, head_dim = (_int(kv.get(k)) for k in ("layers", "kv_heads", "head_dim"))
    per_token = kv["per_token_bytes"]
    elements = 2 * (layers or 0) * (heads or 0) * (head_dim or 0)
    return KvCacheView(
        layers=layers, kv_heads=heads, head_dim=head_dim,
        dtype=str(kv.get("dtype") or ""),
        dtype_bytes=per_token // elements if elements and per_token % elements == 0 else None,
        per_token=bytes_quantity(per_token),
        batch=_int(kv.get("batch")),
        per_token_at_batch=_size(kv.get("per_token_bytes_at_batch")),
        size=_size(kv.get("bytes")),
        formula=str(kv.get("formula") or ""),
        copies=_int(kv.get("copies")) or 1,
        max_context=_int(kv.get("max_context")),
        max_context_reason=printable_text(kv.get("max_context_reason") or ""),
        base=_size(kv.get("base_bytes")),
        usable=_size(kv.get("usable_bytes")),
        source=printable_text(kv.get("source") or ""),
    )

