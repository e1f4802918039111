"""Data movement and shape ops: 0 FLOPs, registered because they are known ops.

They move bytes (counted generically by the costs pass from their inputs and outputs) or only
compute shapes. Reshape-like ops may not even copy at runtime; that is the memory passes' call.

Data-dependent ops are counted as movement too, and say so here:
- NonMaxSuppression: its IoU comparisons depend on how many boxes pass the score threshold,
  which no static pass can know; its cost is small next to the detector that feeds it.
- Unique, NonZero, Compress: a scan and a copy, sizes known only at runtime.
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.ops.registry import (
    BackwardRule,
    OpCost,
    pointwise_backward_flops,
    register,
    register_backward,
    register_traits,
    saved_input,
)

MOVEMENT_OPS = (
    # views and shape changes
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "DepthToSpace",
    "SpaceToDepth",
    # copies of parts
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "GatherElements",
    "GatherND",
    "Scatter",
    "ScatterND",
    "ScatterElements",
    # writes `update` into a KV cache at write_indices (opset 24): what it moves is the
    # update; onnxruntime binds past and present to one buffer, the IR sees two tensors
    "TensorScatter",
    "Expand",
    "Tile",
    "Pad",
    "CenterCropPad",
    "Compress",
    "ReverseSequence",
    "Trilu",
    "MaxUnpool",
    # shapes and generated tensors
    "Shape",
    "Size",
    "Constant",
    "ConstantOfShape",
    "Range",
    "EyeLike",
    "OneHot",
    # data-dependent (see the module docstring)
    "NonZero",
    "Unique",
    "NonMaxSuppression",
    # sequences and optionals
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceInsert",
    "SequenceErase",
    "SequenceLength",
    "SplitToSequence",
    "ConcatFromSequence",
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
)


@register(*MOVEMENT_OPS)
def movement(node: Node) -> OpCost:
    return OpCost.zero()


# ----- backward (training) --------------------------------------------------------------------
# PyTorch runs these as views of their input (no allocation): reshape/view, flatten,
# (un)squeeze, transpose/permute, split/chunk, basic slicing, expand. Their backward saves
# nothing but sizes. Reshape-like ops pass the gradient on as a view; split's backward is a
# cat (a new tensor), slice's a zero-filled input-sized tensor with the gradient copied in,
# expand's a sum (1 FLOP per output element). cat's backward is narrow() views of the
# gradient; gather/embedding save the indices and scatter-add into a zeroed input (1 FLOP per
# gathered element); pad's backward is a slice of the gradient (a view).
# A backward rule with view=True also makes the op a view (Traits.view).
SCATTER_ADD_FLOPS = 1  # gather's backward: each gradient element added into its index
# EmbeddingBag's modes (aten's `mode` argument: 0 sum, 1 mean, 2 max)
BAG_SUM, BAG_MEAN, BAG_MAX = 0, 1, 2


def embedding_bag_flops(ids: int, width: int, bags: int, mode: int) -> int:
    """An EmbeddingBag of `ids` ids into `bags` bags of rows `width` wide: each id's row
    added (sum, mean) or compared (max) into its bag, `ids * width`; mean divides each bag
    by its size, `bags * width` more. [3 bags of 4 ids, width 8, mean]: 12 * 8 + 3 * 8 = 120."""
    return ids * width + (bags * width if mode == BAG_MEAN else 0)


def embedding_bag_backward_flops(ids: int, width: int, bags: int, mode: int) -> int:
    """Its backward into the weight's dense gradient: each id's bag gradient row added into
    the id's row, `ids * width` (mean: scaled by 1 / bag size first, as many multiplies);
    max: each bag's gradient element added at its argmax row, `bags * width`.
    [3 bags of 4 ids, width 8]: sum 96, mean 192, max 24."""
    if mode == BAG_MAX:
        return bags * width
    return ids * width * (2 if mode == BAG_MEAN else 1)
_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose")
register_backward(*_RESHAPES)(BackwardRule((), pointwise_backward_flops(0), differentiable=(0,),
                                           view=True, grad_view=True))
register_backward("Split", "Slice")(
    BackwardRule((), pointwise_backward_flops(0), differentiable=(0,), view=True))
register_backward("Expand")(
    BackwardRule((), pointwise_backward_flops(1), differentiable=(0,), view=True))
register_backward("Concat")(BackwardRule((), pointwise_backward_flops(0), grad_view=True))
register_backward("Pad")(
    BackwardRule((), pointwise_backward_flops(0), differentiable=(0,), grad_view=True))
register_backward("Gather", "GatherElements", "GatherND")(BackwardRule(
    (saved_input(1),), pointwise_backward_flops(SCATTER_ADD_FLOPS), differentiable=(0,)))
register_backward("Tile", "Trilu")(
    BackwardRule((), pointwise_backward_flops(1), differentiable=(0,)))

# ----- traits ---------------------------------------------------------------------------------
# reshapes that keep the element order: a flattened feature map (graphmem/suggest/layer_hints)
register_traits("Reshape", "Flatten", reshape=True)
# Gather of a weight table reads rows of it: an embedding (tensor parallelism splits it)
register_traits("Gather", row_gather=True)
