"""onnxruntime CUDA's Einsum: what its kernel takes from the arena while it runs.

Read in onnxruntime's source (no GPU here to measure it: docs/gpu-campaign.md lists the
row): core/providers/cuda/math/einsum.cc runs the CPU provider's own preprocessor and
typed compute processor (einsum_utils/einsum_compute_preprocessor.cc,
einsum_typed_compute_processor.cc) with CUDA helpers (cuda/math/einsum_utils/
einsum_auxiliary_ops.cc: Transpose, a cuBLAS strided-batched MatMul, a cuDNN ReduceSum,
cudaMemcpy), taking its temporaries from the same allocator, so its transposed inputs,
partial sums, pairwise products and final transpose are the CPU kernel's
(graphmem/runtime_models/ort_einsum.py). Since einsum_utils/einsum_fast_path.cc, equations
the planner `CreateEinsumFastPathPlan` recognises skip that processor and write straight into
the output through views, no temporaries:
- one input, no repeated label: `Copy` (its labels are the output's, dims of 1 aside),
  `Transpose` (any other order), `ReduceSum` (the kept labels already in the output's
  order);
- one input with a repeated label: `Diagonal` (nothing summed) or `Trace` (only the repeated
  label summed), ranks up to 8;
- two inputs, no repeated label, every summed label in both: `Multiply` (nothing summed, both
  inputs in the output's order, dims of 1 aside, output rank up to 8) or `MatMul` (output =
  batch, left-only, right-only labels; the summed labels in one order in both inputs, each
  input [batch, free, summed] or [batch, summed, free]; the right input's batch dims all
  present or all 1; cuBLAS's int sizes).
Not modelled: cuDNN's reduction workspace (a ReduceSum's, fast path or not), cuBLAS's own
workspace (not the arena's); a deterministic session runs a Trace through the processor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from graphmem.core.ir import Node
from graphmem.runtime_models.ort_einsum import Labels, parse_labels
from graphmem.runtime_models.ort_kernels import (
    NO_SCRATCH,
    KernelScratch,
    _ints,  # the CPU kernels' bound shapes
    einsum_scratch,
)

INT_MAX = 2**31 - 1
RANK_LIMIT = 8  # kFastPathRankLimit


def cuda_kernel_scratch(node: Node, bound: Mapping[str, int]) -> KernelScratch:
    """What the node's CUDA kernel takes from the arena while it runs, at the bound dims:
    Einsum's temporaries (none on the fast path); no other kernel's is modelled."""
    if node.op_type != "Einsum" or node.domain not in ("", "ai.onnx"):
        return NO_SCRATCH
    shapes = [_ints(value, bound) for value in node.inputs]
    if all(shape is not None for shape in shapes) and fast_path(
            node.attr_str("equation", ""), [s for s in shapes if s is not None]):
        return KernelScratch()
    return einsum_scratch(node, bound)


def fast_path(equation: str, shapes: Sequence[Sequence[int]]) -> str:
    """The fast path's kind for Einsum(equation) on inputs of `shapes` ('' where the general
    processor runs: its temporaries are the CPU kernel's)."""
    labels = parse_labels(equation, shapes, repeats=True)
    if labels is None:
        return ""
    if any(0 in shape for shape in shapes):
        return "Empty"  # the output zeroed, nothing else
    if len(shapes) == 1:
        return _one_input(labels, list(shapes[0]))
    if len(shapes) == 2:
        return _two_inputs(labels, list(shapes[0]), list(shapes[1]))
    return ""


def _one_input(labels: Labels, dims: list[int]) -> str:
    term, output = labels.inputs[0], labels.output
    if len(set(term)) != len(term):  # a repeated label
        if (max(len(term), len(output)) > RANK_LIMIT or _size(labels, output) > INT_MAX
                or any(d != dims[term.index(k)] for k, d in zip(term, dims, strict=True))):
            return ""
        summed = {k for k in term if k not in output}
        if not summed:
            return "Diagonal"
        only = next(iter(summed))
        return "Trace" if len(summed) == 1 and term.count(only) > 1 else ""
    kept = [k for k in term if k in output]
    if len(kept) < len(term):
        return "ReduceSum" if kept == output else ""
    if kept == output or _in_order(term, dims, output):
        return "Copy"
    return "Transpose"


def _two_inputs(labels: Labels, left: list[int], right: list[int]) -> str:
    a, b, output = labels.inputs[0], labels.inputs[1], labels.output
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        return ""
    batch = [k for k in output if k in a and k in b]
    left_free = [k for k in output if k in a and k not in b]
    right_free = [k for k in output if k in b and k not in a]
    summed = [k for k in range(len(labels.dims)) if k not in output]
    if any(k not in a or k not in b for k in summed):
        return ""
    if not summed:
        fits = len(output) <= RANK_LIMIT and _size(labels, output) <= INT_MAX
        return "Multiply" if fits and _in_order(a, left, output) and _in_order(
            b, right, output) else ""
    if batch + left_free + right_free != output:
        return ""
    order = [k for k in a if k in summed]
    if order != [k for k in b if k in summed] or any(
            left[a.index(k)] != labels.dims[k] or right[b.index(k)] != labels.dims[k]
            for k in order):
        return ""
    if not (_in_order(a, left, batch + left_free + order)
            or _in_order(a, left, batch + order + left_free)):
        return ""
    if not (_in_order(b, right, batch + order + right_free)
            or _in_order(b, right, batch + right_free + order)):
        return ""
    left_batch = all(k in a and left[a.index(k)] == labels.dims[k] for k in batch)
    right_batch = all(k in b and right[b.index(k)] == labels.dims[k] for k in batch)
    right_one = all(k not in b or right[b.index(k)] == 1 for k in batch)
    if not left_batch or not (right_batch or right_one):
        return ""
    sizes = [_size(labels, group) for group in (batch, left_free, order, right_free)]
    if any(size > INT_MAX for size in sizes) or any(labels.dims[k] > INT_MAX for k in batch):
        return ""
    return "MatMul"


def _in_order(term: Sequence[int], dims: Sequence[int], expected: Sequence[int]) -> bool:
    """IsExactSequenceIgnoringSizeOne: `term`'s labels of dims above 1 are `expected`'s
    labels that `term` has with dims above 1, in that order."""
    actual = [k for k, d in zip(term, dims, strict=True) if d != 1]
    wanted = [k for k in expected if k in term and dims[term.index(k)] != 1]
    return actual == wanted


def _size(labels: Labels, group: Sequence[int]) -> int:
    size = 1
    for k in group:
        size *= labels.dims[k]
    return size
