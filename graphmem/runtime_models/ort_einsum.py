"""onnxruntime CPU's Einsum: the temporaries its kernel takes from the arena while it runs.

Read in onnxruntime's source (core/providers/cpu/math/einsum_utils/
einsum_compute_preprocessor.cc, einsum_typed_compute_processor.cc) and checked against its
measured `mem_in_use_peak` (tests/test_runtime_ort_einsum.py). The labels are numbered in the
order they first appear (an ellipsis's dims first); then, in the kernel's order:
- each input whose own label order is not that numbering is transposed into it, a copy of
  the input held until the kernel returns (`PreprocessInputs`);
- labels only the first input has (and the output lacks) are summed out of it into a new
  tensor (`Run`);
- per pair (the running result on the left, the next input on the right): a label both
  have and the output keeps is "shared", one only one of them has is "left-only" /
  "right-only" (a dim of 1 counts as absent), one seen for the last time is "reduced" (the
  summed labels only one of the pair has are summed out first, into a new tensor). The left
  operand is permuted to [shared, left-only, reduced, right-only], the right to [shared,
  reduced, right-only, left-only]: a copy unless the permutation is the identity, or the
  operand is a sum the pair made itself and its dims above 1 keep their order (then it is
  reshaped; an input or the running result is copied even when only dims of 1 move); a
  MatMul result of
  shared x left-only x right-only elements; between pairs that result is permuted back to
  the label order (a copy unless it is a reshape), and the pair's operands are freed when it
  returns (`PairwiseOperandProcess`);
- after the last pair the result is transposed into the output's order when that differs
  (a copy) and copied into the op's output, allocated just before that transpose
  (`FinalizeOutput`).
Not modelled: repeated labels within one input (a diagonal): no temporaries are predicted
for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class EinsumTemps:
    """The kernel's temporaries in allocation order and, per temporary, the ones freed right
    after it is allocated (an operand replaced by its transpose, a pair's operands)."""

    sizes_bytes: list[int] = field(default_factory=list)
    frees_after: list[tuple[int, ...]] = field(default_factory=list)
    outputs_at: int = 0  # how many are allocated before the op's output

    def take(self, size_bytes: int, replaces: int | None = None) -> int:
        """A new temporary; `replaces`: the one it supersedes, freed once it is made."""
        self.sizes_bytes.append(size_bytes)
        self.frees_after.append(() if replaces is None else (replaces,))
        return len(self.sizes_bytes) - 1

    def free_after_last(self, temps: Sequence[int | None]) -> None:
        freed = tuple(t for t in temps if t is not None)
        self.frees_after[-1] += freed


@dataclass(frozen=True)
class Labels:
    inputs: list[list[int]]  # per input, its label per dim
    output: list[int]
    dims: list[int]  # per label, its size (the largest: 1 broadcasts)
    last_input: list[int]  # per label, the last input holding it; -1 when the output keeps it


def einsum_temps(equation: str, shapes: Sequence[Sequence[int]], element_bytes: int
                 ) -> EinsumTemps | None:
    """The temporaries of Einsum(equation) on inputs of `shapes`; None where not modelled
    (a diagonal, or an equation that does not fit the shapes)."""
    labels = parse_labels(equation, shapes)
    if labels is None:
        return None
    temps = EinsumTemps()
    for term, shape in zip(labels.inputs, shapes, strict=True):  # held to the end
        if list(term) != sorted(term):
            temps.take(element_bytes * _product(shape))
    homogenized = [_homogenize(term, shape, len(labels.dims))
                   for term, shape in zip(labels.inputs, shapes, strict=True)]
    current, result = homogenized[0], None
    summed = [k for k in range(len(labels.dims)) if labels.last_input[k] == 0]
    if summed:
        current = [1 if k in summed else d for k, d in enumerate(current)]
        result = temps.take(element_bytes * _product(current))
    order = [k for k in range(len(labels.dims)) if labels.last_input[k] != 0]
    for index in range(1, len(shapes)):
        reduce = [k for k in range(len(labels.dims)) if labels.last_input[k] == index]
        final = index == len(shapes) - 1
        current, result, order = _pair(temps, current, result, homogenized[index], reduce,
                                       final, element_bytes)
    # FinalizeOutput: the output first; the candidate's labels the output keeps, in its
    # order; a transposed copy when the output's order differs (no reshape shortcut here)
    kept = [k for k in order if k in labels.output]
    temps.outputs_at = len(temps.sizes_bytes)
    if [labels.output.index(k) for k in kept] != sorted(labels.output.index(k) for k in kept):
        temps.take(element_bytes * _product(labels.dims[k] for k in labels.output))
    return temps


def _pair(temps: EinsumTemps, left: list[int], result: int | None, right: list[int],
          reduce: list[int], final: bool, element_bytes: int
          ) -> tuple[list[int], int, list[int]]:
    """One PairwiseOperandProcess: the result's dims (label order), its temporary and the
    order of its labels: the label order between pairs, [shared, left-only, reduced,
    right-only] after the last."""
    shared, left_only, right_only = [], [], []
    own: list[int | None] = [None, None]  # the pair's own copies of its operands
    left, right = list(left), list(right)
    for k in range(len(left)):
        has_left, has_right = left[k] > 1, right[k] > 1
        if k in reduce:
            if has_left and not has_right:
                left[k] = 1
                own[0] = temps.take(element_bytes * _product(left), own[0])
            elif has_right and not has_left:
                right[k] = 1
                own[1] = temps.take(element_bytes * _product(right), own[1])
        elif has_left and has_right:
            shared.append(k)
        elif has_left:
            left_only.append(k)
        else:
            right_only.append(k)
    size = {k: max(left[k], right[k]) for k in range(len(left))}
    left_perm = shared + left_only + reduce + right_only
    right_perm = shared + reduce + right_only + left_only
    for side, (dims, perm) in enumerate(((left, left_perm), (right, right_perm))):
        if perm != sorted(perm) and not (own[side] is not None and _is_reshape(perm, dims)):
            own[side] = temps.take(element_bytes * _product(dims), own[side])
    out_dims = [size[k] for k in shared + left_only] + [1] * len(reduce) + [
        size[k] for k in right_only]
    order = shared + left_only + reduce + right_only
    product = temps.take(element_bytes * _product(out_dims))
    label_dims = [1] * len(left)
    for position, k in enumerate(order):
        label_dims[k] = out_dims[position]
    if final:
        return label_dims, product, order
    back = [order.index(k) for k in range(len(order))]
    if back != sorted(back) and not _is_reshape(back, out_dims):
        product = temps.take(element_bytes * _product(out_dims), product)
    temps.free_after_last([*own, result])  # on return; the running result is replaced
    return label_dims, product, list(range(len(order)))


def _is_reshape(perm: Sequence[int], dims: Sequence[int]) -> bool:
    """IsTransposeReshapeForEinsum: the dims above 1 keep their order."""
    last = 0
    for axis in perm:
        if dims[axis] == 1:
            continue
        if axis < last:
            return False
        last = axis
    return True


def _homogenize(term: Sequence[int], shape: Sequence[int], count: int) -> list[int]:
    dims = [1] * count
    for label, size in zip(term, shape, strict=True):
        dims[label] = size
    return dims


def parse_labels(equation: str, shapes: Sequence[Sequence[int]],
                 repeats: bool = False) -> Labels | None:
    """The equation's labels, numbered in the order they first appear (an ellipsis's dims
    first); None where it does not fit the shapes, or a label repeats within an input (a
    diagonal) unless `repeats`."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes) or not all(shapes):
        return None
    ellipsis = max((len(s) - len(t) + 3 for t, s in zip(terms, shapes, strict=True)
                    if "..." in t), default=0)
    letters: dict[str, int] = {}
    inputs: list[list[int]] = []
    for term in terms:
        for letter in term.replace("...", ""):
            letters.setdefault(letter, ellipsis + len(letters))
    for term, shape in zip(terms, shapes, strict=True):
        head, dots, tail = term.partition("...")
        own = len(shape) - len(head) - len(tail) if dots else 0
        labels = ([letters[c] for c in head] + list(range(ellipsis - own, ellipsis))
                  + [letters[c] for c in tail])
        if len(labels) != len(shape) or (len(set(labels)) != len(labels) and not repeats):
            return None  # the shapes do not fit, or a diagonal
        inputs.append(labels)
    if not arrow:  # implicit: the letters seen once, in alphabetical order
        counts = {c: lhs.count(c) for c in letters}
        rhs = ("..." if ellipsis else "") + "".join(sorted(c for c, n in counts.items()
                                                           if n == 1))
    head, dots, tail = rhs.partition("...")
    if any(c not in letters for c in head + tail):
        return None
    output = [letters[c] for c in head] + (list(range(ellipsis)) if dots else []) + [
        letters[c] for c in tail]
    dims = [1] * (ellipsis + len(letters))
    last = [-1] * len(dims)
    for index, (labels, shape) in enumerate(zip(inputs, shapes, strict=True)):
        for label, size in zip(labels, shape, strict=True):
            dims[label] = max(dims[label], size)
            last[label] = index
    for label in output:
        last[label] = -1
    return Labels(inputs, output, dims, last)


def _product(values: Iterable[int]) -> int:
    result = 1
    for v in values:
        result *= v
    return result
