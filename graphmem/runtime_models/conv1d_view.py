"""A 1-D convolution as eager PyTorch runs it on the CPU: as a 2-D one of height 1.

aten/src/ATen/native/Convolution.cpp `_convolution` (and `convolution_backward`) view a 3-D
input and weight as 4-D before choosing a kernel (`view4d`: `unsqueeze(2)`, the parameters'
`view1d_as_2d`: stride 1, padding 0, dilation 1 prepended), so a Conv1d over [N, C, L] with a
kernel k is the 2-D convolution [N, C, 1, L] * [Cout, Cin/g, 1, k], with its oneDNN copies and
scratch; the results are viewed back to 3-D, which allocates nothing. The torch-cpu rules
(torch_cpu.py) read the node this module makes.
"""

from __future__ import annotations

from dataclasses import replace

from graphmem.core.ir import Node, Value
from graphmem.core.symbolic import SymInt

# the parameters `view1d_as_2d` prepends for the height of 1 (Convolution.cpp)
_PREPENDED = {"stride": 1, "padding": 0, "dilation": 1, "output_padding": 0}


def as_conv2d(node: Node) -> Node:
    """`node` (aten.convolution or its backward) if no operand is 3-D; else a detached copy
    whose 3-D operands and results have a height of 1 inserted at dim 2 and whose spatial
    parameters have the height's prepended, every other field kept. The graph's node is left
    as it is."""
    if not any(_is_3d(v) for v in [*node.inputs, *node.outputs]):
        return node
    attributes = dict(node.attributes)
    for name, value in _PREPENDED.items():
        found = attributes.get(name)
        if isinstance(found, (list, tuple)) and len(found) == 1:
            attributes[name] = (value, *(int(v) for v in found))
    return replace(node, inputs=[_viewed(v) for v in node.inputs],
                   outputs=[_with_height(v) if _is_3d(v) else v for v in node.outputs],
                   attributes=attributes)


def _is_3d(value: Value | None) -> bool:
    return value is not None and value.shape is not None and len(value.shape) == 3


def _viewed(value: Value | None) -> Value | None:
    return _with_height(value) if value is not None and _is_3d(value) else value


def _with_height(value: Value) -> Value:
    """A 3-D value as 4-D, a height of 1 inserted at dim 2."""
    assert value.shape is not None  # _is_3d's
    return replace(value, shape=(*value.shape[:2], SymInt.const(1), value.shape[2]))
