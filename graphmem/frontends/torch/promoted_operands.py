"""Which operands an elementwise CPU kernel copies to the common dtype before it runs.

ATen's TensorIterator (aten/src/ATen/TensorIterator.cpp `compute_types`) promotes its inputs
by temporaries on the CPU: an input whose dtype is not the common one is copied with
`.to(common_dtype)` (CUDA kernels cast in the kernel instead). The copy has the input's own
shape (before broadcasting) and lives while the kernel runs: `grad * mask` with a bool mask
of [2, 32, 64] allocates 2 * 32 * 64 * 4 = 16,384 B besides its output (amax's backward), an
fp32 residual added to a bf16 activation under autocast copies the bf16 one as fp32. The IR
keeps dtypes but not which ops iterate so; the front end records, for an op of aten's
`pointwise` tag, the positions among the node's inputs of the operands copied and the common
dtype's bits (graphmem/runtime_models/cpu_promotion.py reads them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from graphmem.core.ir import AttributeValue

# operands a pointwise kernel reads as they are, never promoted: `where`'s condition,
# `masked_fill`'s mask
UNPROMOTED_ARGUMENTS = frozenset({"condition", "mask"})


def promoted_operands(fx_node: torch.fx.Node) -> dict[str, AttributeValue]:
    """{"promoted_inputs": positions, "promoted_bits": bits} for a pointwise op with an
    operand of another dtype than the common one; {} otherwise."""
    target = fx_node.target
    if torch.Tag.pointwise not in getattr(target, "tags", ()):
        return {}
    operands = _operands(fx_node, target._schema)  # type: ignore[union-attr]
    if operands is None or len({meta.dtype for _, meta in operands}) < 2:
        return {}
    common = _common_dtype(fx_node, [meta for _, meta in operands])
    positions = tuple(i for i, meta in operands if meta.dtype != common)
    if not positions:
        return {}
    return {"promoted_inputs": positions, "promoted_bits": common.itemsize * 8}


def _operands(fx_node: torch.fx.Node, schema: Any) -> list[tuple[int, torch.Tensor]] | None:
    """(position among the node's inputs, fake tensor) of each promotable tensor argument,
    in the order the front end lists the inputs (args, then kwargs); None where an argument
    holds a list of nodes (not an elementwise operand)."""
    # an `out=` argument is written, not read: never promoted
    names = [None if argument.is_out else argument.name for argument in schema.arguments]
    named = [(names[i] if i < len(names) else "", arg) for i, arg in enumerate(fx_node.args)]
    found: list[tuple[int, torch.Tensor]] = []
    position = 0
    outs = {argument.name for argument in schema.arguments if argument.is_out}
    keywords = [(None if name in outs else name, arg) for name, arg in fx_node.kwargs.items()]
    for name, arg in [*named, *keywords]:
        if isinstance(arg, list | tuple) and any(isinstance(a, torch.fx.Node) for a in arg):
            return None
        if not isinstance(arg, torch.fx.Node):
            continue
        meta = arg.meta.get("val")
        if isinstance(meta, list | tuple):
            return None  # several inputs from one argument: positions not followed here
        if not isinstance(meta, torch.Tensor):
            continue  # a symbolic number: not among the node's inputs
        if name is not None and name not in UNPROMOTED_ARGUMENTS:
            found.append((position, meta))
        position += 1
    return found


def _common_dtype(fx_node: torch.fx.Node, metas: list[torch.Tensor]) -> torch.dtype:
    """The output's dtype (integers divided come out float, their inputs promoted so too);
    for a comparison's bool output, the operands' promoted dtype."""
    out = fx_node.meta.get("val")
    if isinstance(out, torch.Tensor) and out.dtype != torch.bool:
        return out.dtype
    return elementwise_dtypes(
        *metas, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
