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
_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose")
register_backward(BackwardRule((), pointwise_backward_flops(0), differentiable=(0,), view=True,
                               grad_view=True), *_RESHAPES)
register_backward(BackwardRule((), pointwise_backward_flops(0), differentiable=(0,), view=True),
                  "Split", "Slice")
register_backward(BackwardRule((), pointwise_backward_flops(1), differentiable=(0,), view=True),
                  "Expand")
register_backward(BackwardRule((), pointwise_backward_flops(0), grad_view=True), "Concat")
register_backward(BackwardRule((), pointwise_backward_flops(0), differentiable=(0,),
                               grad_view=True), "Pad")
register_backward(BackwardRule((saved_input(1),), pointwise_backward_flops(1),
                               differentiable=(0,)), "Gather", "GatherElements", "GatherND")
register_backward(BackwardRule((), pointwise_backward_flops(1), differentiable=(0,)), "Tile",
                  "Trilu")
