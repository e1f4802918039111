"""Data-dependent routing traced without running it: the values a mixture of experts routes by.

A router chooses experts by value (a top-k over scores the trace does not know), and the
code after it reads the choice: the per-expert loop of transformers' eager experts runs
`nonzero` on it, loops over the experts hit (`if expert == num_experts`) and gathers each
expert's tokens with `torch.where`; the grouped-matmul experts sort it and count tokens per
expert with `histc`. Fake tensors carry no values, so each of those is an error there.

`RoutedValues` gives such tensors values, by op semantics (it observes every op of a trace
from trace.py's one dispatch mode, observed.py):
- a choice: the indices of a `topk` (or `argmax`, `max.dim`) over values the trace does not
  know are made by the routing policy (graphmem/core/routing.py): balanced by default, each
  token's choices distinct, each expert receiving the policy's number of tokens;
- values follow: an op whose tensor inputs all have values (a choice, a constant, a factory
  such as `arange`, `zeros`, `one_hot`) is also run on those values, on the CPU, and its
  output keeps them; an in-place op with an input of unknown value forgets the values of
  what it writes (and of every tensor sharing that storage). Uninitialized and random
  factories have no values, but for a one-element uniform draw (LayerDrop's: layer_drop.py).
  Tensors above MAX_KNOWN_ELEMENTS are not followed;
- data-dependent ops read them: an op of aten's `data_dependent_output` tag (`item()`, a
  tensor in an `if`) returns the real answer, so Python takes the branch the policy's routing
  takes, and no node is traced; an op of the `dynamic_output_shape` tag whose size the known
  values give is traced in its static form, so the graph holds the op with the sizes the
  routing gives: `nonzero` as `nonzero_static` with the real count, `x[mask]` as `x` indexed
  by the mask's true positions (`nonzero_static` split into columns), `repeat_interleave`
  of known repeats with its `output_size`, `unique_consecutive` of known values as its input
  indexed at each run's first position (Qwen2.5-VL's window bounds, made from the image grid
  a processor gives as a constant);
- the model's floating inputs are data: compared for equality with a number, no element is
  equal (input_values.py: SmolVLM's padding-image filter); the values that follow from that
  answer are `assumed`: a selection by them is answered only when it keeps every element,
  a number read from them only when it counts such a selection, and any other
  data-dependent op on them fails as fake tensors do.

Everything else runs as before: a model without choices sees no change, and a data-dependent
op on values that are not known still fails as fake tensors do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import HigherOrderOperator
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

from graphmem.core.routing import MoeRouting, expert_loads
from graphmem.frontends.torch.finite_values import answered, finite_answer
from graphmem.frontends.torch.input_values import InputData
from graphmem.frontends.torch.layer_drop import scalar_draw_value

aten = torch.ops.aten
# values kept per tensor at most (an int64 one_hot of 32k tokens x 8 choices x 257 experts is
# 67M elements): beyond it the values are not followed, and a data-dependent op on them fails
MAX_KNOWN_ELEMENTS = 1 << 26
# factories whose output has no defined values
_UNINITIALIZED = frozenset({
    aten.empty.memory_format, aten.empty_like.default, aten.empty_strided.default,
    aten.new_empty.default, aten.new_empty_strided.default,
})


def _nonzero_static(mode: RoutedValues, args: tuple, kwargs: dict) -> torch.Tensor | None:
    # nonzero(x) -> [n, x.dim()]: the same op with its row count n given; by values assumed
    # of an input's data (input_values.py), only when it keeps every element (n = numel)
    value = mode.values.get(args[0])
    if value is None:
        return None
    count = _real_int(value.count_nonzero)
    source = mode.inputs.source(args[0])
    if source is not None:
        if count != value.numel():
            return None
        mode.inputs.kept(source, count)
    return aten.nonzero_static.default(args[0], size=count)


def _index_by_positions(mode: RoutedValues, args: tuple, kwargs: dict) -> torch.Tensor | None:
    # x[mask]: a bool mask of k dims is the k index tensors of its true positions (what the
    # kernel does), [n, k] from nonzero_static split into k [n] columns
    source, indices = args[0], list(args[1])
    if not any(_is_mask(index) for index in indices):
        return None
    positions: list[torch.Tensor | None] = []
    for index in indices:
        if not _is_mask(index):
            positions.append(index)
            continue
        rows = _nonzero_static(mode, (index,), {})
        if rows is None:
            return None
        positions.extend(rows.unbind(1))
    return aten.index.Tensor(source, positions)


def _repeat_interleave_sized(mode: RoutedValues, args: tuple,
                             kwargs: dict) -> torch.Tensor | None:
    # repeat_interleave(repeats) -> [sum(repeats)]: the same op with its output size given
    value = mode.values.get(args[0])
    if value is None or kwargs.get("output_size") is not None or mode.inputs.source(args[0]):
        return None
    return aten.repeat_interleave.Tensor(args[0], output_size=_real_int(value.sum))


def _unique_consecutive_picked(mode: RoutedValues, args: tuple,
                               kwargs: dict) -> tuple[torch.Tensor, ...] | None:
    # unique_consecutive(x) of known values (Qwen2.5-VL's window bounds from its image grid):
    # x flattened, indexed at each run's first position; the inverse and counts not asked
    # for are empty, as the kernel returns them
    value = mode.values.get(args[0])
    options = {**dict(zip(("return_inverse", "return_counts", "dim"), args[1:],
                          strict=False)), **kwargs}
    if value is None or mode.inputs.source(args[0]) or options.get("return_inverse") or (
            options.get("return_counts") or options.get("dim") is not None):
        return None
    with _disable_current_modes():
        flat = value.flatten()
        first = torch.ones_like(flat, dtype=torch.bool)
        first[1:] = flat[1:] != flat[:-1]
        positions = first.nonzero().flatten()
    empty = args[0].new_empty((0,), dtype=torch.long)
    return aten.index.Tensor(args[0].flatten(), [positions]), empty, empty.clone()


def _real_int(method: Callable[[], torch.Tensor]) -> int:
    """A number read from a value (a real tensor), outside the trace's modes."""
    with _disable_current_modes():
        return int(method())


def _is_mask(index: Any) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)


# dynamic-output-shape op -> its static form, when the values that size it are known
_STATIC_FORMS: dict[Any, Callable[[RoutedValues, tuple, dict],
                                   torch.Tensor | tuple[torch.Tensor, ...] | None]] = {
    aten.nonzero.default: _nonzero_static,
    aten.index.Tensor: _index_by_positions,
    aten.repeat_interleave.Tensor: _repeat_interleave_sized,
    aten.unique_consecutive.default: _unique_consecutive_picked,
}


class RoutedValues:
    """The values of routing choices and of what follows from them (module docstring).

    The trace's dispatch mode (observed.py) hands it each op: a `plain` op it runs itself and
    then gives to `follow`; any other to `dispatch`, which calls the op (or its static form)
    through the observers below this one."""

    def __init__(self, routing: MoeRouting, input_names: list[str] | None = None) -> None:
        self.routing = routing
        self.values: WeakIdKeyDictionary = WeakIdKeyDictionary()  # fake tensor -> CPU value
        # (tokens, experts, top_k) of each choice the policy made
        self.choices: list[tuple[int, int, int]] = []
        # the floating inputs' data and views of it (input_values.py), fed by trace.py
        self.inputs = InputData(input_names)

    @staticmethod
    def plain(func: Any) -> bool:
        """An op `dispatch` would run as it is and then `follow`: no higher-order op (torch.cond,
        whose branches' ops come through one by one), no data-dependent output, no static form."""
        if isinstance(func, HigherOrderOperator):
            return False
        tags = getattr(func, "tags", ())
        return torch.Tag.data_dependent_output not in tags and (
            torch.Tag.dynamic_output_shape not in tags or func not in _STATIC_FORMS)

    def dispatch(self, func: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, HigherOrderOperator):  # its branches' ops come through one by one
            return func(*args, **kwargs)
        tags = getattr(func, "tags", ())
        if torch.Tag.data_dependent_output in tags:
            real = self._real_arguments(args, kwargs)
            if real is None or (self._assumed_source(args, kwargs) is not None
                                and not self.inputs.readable(tree_leaves((args, kwargs)))):
                return func(*args, **kwargs)  # Python control flow on an assumed value too
            return _run(func, *real)
        static = _STATIC_FORMS.get(func) if torch.Tag.dynamic_output_shape in tags else None
        out = static(self, args, kwargs) if static is not None else None
        if out is None:
            out = func(*args, **kwargs)
        self.follow(func, args, kwargs, out)
        return out

    # ----- values ---------------------------------------------------------------------------
    def _value(self, item: Any) -> Any:
        """A tensor's value (None when unknown); anything else is its own value."""
        if not isinstance(item, torch.Tensor):
            return item
        if not isinstance(item, FakeTensor):
            return item  # a real constant the model made
        return self.values.get(item)

    def _real_arguments(self, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        for item in args:  # most ops take a tensor of unknown value first: no flattening
            if isinstance(item, FakeTensor) and self.values.get(item) is None:
                return None
        leaves, spec = tree_flatten((args, kwargs))
        real = []
        for leaf in leaves:  # most ops read a tensor of unknown value: stop at the first
            value = self._value(leaf)
            if value is None and isinstance(leaf, torch.Tensor):
                return None
            real.append(value)
        return tree_unflatten(real, spec)

    def follow(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if not outputs:
            return
        written = _written(func, args, kwargs)
        self.inputs.written(written)
        self.inputs.follow(func, args, outputs)
        selection = _selection(func, args, kwargs)
        if selection is not None and self._value(args[0]) is None:
            self._choose(args[0], *selection, outputs)
            return
        drawn = scalar_draw_value(func, outputs)
        if drawn is not None:  # LayerDrop's draw (layer_drop.py)
            self.values[outputs[0]] = drawn
            return
        known = (func not in _UNINITIALIZED
                 and torch.Tag.nondeterministic_seeded not in func.tags
                 and all(t.numel() <= MAX_KNOWN_ELEMENTS for t in outputs))
        real = self._real_arguments(args, kwargs) if known else None
        if real is None:
            answer = finite_answer(func, args) if len(outputs) == 1 else None
            if answer is None and len(outputs) == 1:  # input == number (input_values.py)
                answer = self.inputs.answer(func, args)
                if answer is not None:
                    self.inputs.answered(args, outputs[0])
            if answer is not None:  # a test whose answer the values' kind gives
                self.values[outputs[0]] = answered(answer, outputs[0])
                return
            self._forget_written(func, args, kwargs)
            return
        value = _run(func, *real)
        real_outputs = [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]
        for fake, real_out in zip(outputs, real_outputs, strict=False):
            self.values[fake] = real_out
        source = self._assumed_source(args, kwargs)
        if source is not None:
            self._assume(outputs, written, source)
            self.inputs.counted(func, args, real[0][0] if real[0] else None, outputs)

    def _assumed_source(self, args: Any, kwargs: Any) -> str | None:
        """The input whose answer an argument's value follows from (input_values.py)."""
        if not len(self.inputs.assumed):
            return None
        for leaf in tree_leaves((args, kwargs)):
            source = self.inputs.source(leaf)
            if source is not None:
                return source
        return None

    def _assume(self, outputs: list[torch.Tensor], written: list[torch.Tensor],
                source: str) -> None:
        """Values that follow from an answer: the outputs, and every tensor sharing storage
        with one the op wrote into."""
        for tensor in outputs + written:
            self.inputs.assumed[tensor] = source
        storages = {self.values[t].untyped_storage().data_ptr() for t in written
                    if self.values.get(t) is not None}
        for fake, other in list(self.values.items()) if storages else ():
            if other.untyped_storage().data_ptr() in storages:
                self.inputs.assumed[fake] = source

    def _forget_written(self, func: Any, args: Any, kwargs: Any) -> None:
        """An in-place op with an input of unknown value: what it writes is unknown now."""
        for tensor in _written(func, args, kwargs):
            value = self.values.get(tensor)
            if value is None:
                continue
            storage = value.untyped_storage().data_ptr()
            for fake, other in list(self.values.items()):
                if other.untyped_storage().data_ptr() == storage:
                    del self.values[fake]

    # ----- choices --------------------------------------------------------------------------
    def _choose(self, scores: torch.Tensor, dim: int | None, top_k: int, indices_at: int,
                outputs: list[torch.Tensor]) -> None:
        """The indices output of a selection over unknown `scores`: the policy's choices."""
        indices = outputs[indices_at]
        if top_k < 1 or not 0 < indices.numel() <= MAX_KNOWN_ELEMENTS:
            return  # nothing chosen, or too many choices to follow
        shape = list(scores.shape) if dim is not None else [scores.numel()]
        axis = dim % len(shape) if dim is not None and shape else 0
        experts = shape[axis] if shape else 1
        tokens = indices.numel() // top_k
        loads = expert_loads(self.routing, tokens, experts, top_k)
        with _disable_current_modes():
            choices = _laid_out(loads, tokens, top_k)
            if top_k > 1:  # topk: the choice axis where `dim` was
                others = shape[:axis] + shape[axis + 1:]
                choices = choices.reshape(*others, top_k).movedim(-1, axis)
            self.values[indices] = choices.reshape(indices.shape).contiguous()
        self.choices.append((tokens, experts, top_k))

    def notes(self) -> list[str]:
        """What the trace assumed of values (the routing, the inputs' data), for the
        analysis's warnings."""
        return [note for note in (self.note(), self.inputs.note()) if note]

    def note(self) -> str | None:
        """What the policy assumed, for the outputs; None when no choice was made."""
        if not self.choices:
            return None
        shapes = sorted(set(self.choices))
        what = ", ".join(f"top-{k} of {e} over {t} tokens" for t, e, k in shapes)
        return (f"mixture-of-experts routing is data: {len(self.choices)} router choices"
                f" ({what}) assumed {self.routing.describe()} (--moe-routing"
                " balanced|worst|capacity=F)")


def _laid_out(loads: list[int], tokens: int, top_k: int) -> torch.Tensor:
    """[tokens, top_k] expert ids, expert e chosen loads[e] times: the experts' runs laid out
    slot by slot (choice j of token t is position j * tokens + t); a run is at most `tokens`
    long, so no token chooses the same expert twice."""
    order = torch.repeat_interleave(torch.arange(len(loads)), torch.tensor(loads))
    return order.view(top_k, tokens).t()


def _selection(func: Any, args: tuple, kwargs: dict) -> tuple[int | None, int, int] | None:
    """(dim, k, which output holds the indices) of an op that chooses by value."""
    if func is aten.topk.default:
        dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        return dim, int(args[1]), 1
    if func is aten.argmax.default:
        return (args[1] if len(args) > 1 else kwargs.get("dim")), 1, 0
    if func is aten.max.dim:
        return args[1], 1, 1
    return None


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensor arguments the op writes (its schema's `Tensor(a!)`)."""
    found = []
    for i, name in _written_arguments(func):
        item = args[i] if i < len(args) else kwargs.get(name)
        found += [t for t in tree_leaves(item) if isinstance(t, torch.Tensor)]
    return found


@functools.cache
def _written_arguments(func: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of each argument the op's schema marks written, read once per op."""
    return tuple((i, argument.name) for i, argument in enumerate(func._schema.arguments)
                 if argument.alias_info is not None and argument.alias_info.is_write)


def _run(func: Any, args: Any, kwargs: Any) -> Any:
    """`func` on real values, on the CPU, outside every mode (no node is traced) and outside
    autocast (the traced op already is what autocast made of the call)."""
    with _disable_current_modes(), torch.autocast("cpu", enabled=False):
        return func(*args, **kwargs)
