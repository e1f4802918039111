"""Data movement and shape ops: 0 FLOPs, registered because they are known ops.

They move bytes (counted generically by the costs pass from their inputs and outputs) or only
compute shapes. Reshape-like ops may not even copy at runtime; that is the memory passes' call.

Data-dependent ops are counted as movement too, and say so here:
- NonMaxSuppression: its IoU comparisons depend on how many boxes pass the score threshold,
  which no static pass can know; its cost is small next to the detector that feeds it.
- Unique, NonZero, Compress: a scan and a copy, sizes known only at runtime.
"""

from __future__ import annotations

from graphmem.costs.registry import OpCost, register
from graphmem.ir import Node

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
