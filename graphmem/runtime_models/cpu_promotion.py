"""An elementwise CPU kernel's operands copied to the common dtype while it runs.

TensorIterator promotes an input of another dtype by a temporary on the CPU (the front end
records which: graphmem/frontends/torch/promoted_operands.py): the copy has the input's
elements at the common dtype's size and is freed when the kernel returns. e.g. a float
gradient [2, 32, 1] times a bool mask [2, 32, 64] (amax's backward): [+Y 16,384, +copy
16,384, -copy] -> 16,384 B of scratch (measured 16,384).
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.passes.memory_model import size_at
from graphmem.runtime_models.torch_cpu_native import Allocations, Dims
from graphmem.runtime_models.torch_cpu_native import nbytes_at as _bytes


def promoted_copies(node: Node, dims: Dims, threads: int) -> Allocations:
    """[+outputs, +copies, -copies]: the outputs (views and in-place results aside), then
    each promoted operand's copy (`threads` do not change it)."""
    bits = node.attr_int("promoted_bits", 32)
    copies = sum(size_at(value.numel, dims) * bits // 8
                 for index in node.attr_ints("promoted_inputs")
                 if (value := node.input(index)) is not None)
    made = [_bytes(v, dims) for v in node.outputs if v.alias_of is None]
    return [*made, copies, -copies]
