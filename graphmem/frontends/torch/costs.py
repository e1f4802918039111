"""FLOPs of aten ops: PyTorch's own FlopCounterMode formulas first, then graphmem's conventions.

- fused attention (the CPU flash kernel, CUDA's flash, memory-efficient and cuDNN kernels)
  and its backward: graphmem/ops/attention.py's formulas, on the shapes of Q, K, V (where
  graphmem/ops/aten.py's FUSED_ATTENTION says they are): the MACs of the math backend's
  matmuls (FlopCounterMode's count of the same step with the math backend), whichever
  kernel runs;
- matmul, conv and their backward ops: `torch.utils.flop_counter.flop_registry`, the
  formulas FlopCounterMode uses (2 FLOPs per multiply-accumulate), so graphmem's contraction
  FLOPs are FlopCounterMode's by construction; `_grouped_mm` (a mixture of experts' grouped
  products, which FlopCounterMode does not count) by graphmem/ops/linear.py's formula;
- the rest by graphmem/ops/aten.py's tables, whose numbers are the ONNX rule families'
  constants (imported there, never copied here): reductions, normalizations, softmax and the
  loss per element of an argument; interpolations per output element; window pools per
  window element; ops of aten's `pointwise` tag and foreach ops one FLOP per element;
- views, copies, casts, factories, random draws (aten's `nondeterministic_seeded` tag:
  `uniform_`, `exponential_`, as `rand`) and indexing: 0 FLOPs (they move or make bytes);
- an in-place op (`scatter_`, `unsqueeze_`, aten's `inplace` tag) no rule names: its
  out-of-place form's cost (`scatter`, `unsqueeze`), the same math written into its input;
- anything else: None, which the costs pass reports as unsupported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.fx
from torch.utils.flop_counter import flop_registry

from graphmem.core.ir import ImportedCost
from graphmem.core.symbolic import SymInt
from graphmem.frontends.torch.fused_layers import fused_layer_args, node_value
from graphmem.ops.aten import (
    AFFINE_GRIDS,
    EMBEDDING_BAGS,
    ENCODER_LAYER,
    FOREACH_FLOPS,
    FOREACH_PREFIXES,
    FOURIER_TRANSFORMS,
    FUSED_ATTENTION,
    GROUPED_CONTRACTIONS,
    NO_ARITHMETIC,
    PER_ELEMENT,
    PER_OUTPUT_ELEMENT,
    POINTWISE_FLOPS,
    POINTWISE_UNTAGGED,
    RECURRENT_LAYERS,
    SAME_CONTRACTION,
    SELF_ATTENTION_LAYER,
    SORTED_SEARCHES,
    TRIANGULAR_SOLVES,
    VECTOR_PRODUCTS,
    WINDOW_POOL_BACKWARDS,
    WINDOW_POOLS,
    EmbeddingBagArgs,
    FusedAttention,
    PerElement,
    binary_search_flops,
)
from graphmem.ops.attention import (
    attention_backward_cost,
    attention_cost,
    encoder_layer_cost,
    self_attention_layer_cost,
)
from graphmem.ops.elementwise import FLOPS_PER_ELEMENT as ELEMENTWISE_FLOPS
from graphmem.ops.linear import (
    grouped_matmul_macs,
    triangular_solve_divisions,
    triangular_solve_macs,
)
from graphmem.ops.movement import embedding_bag_backward_flops, embedding_bag_flops
from graphmem.ops.recurrent import GATES, lstm_layer_backward_costs, lstm_layer_costs
from graphmem.ops.signal import nd_fft_flops


def imported_cost(fx_node: torch.fx.Node) -> ImportedCost | None:
    cost = _cost(fx_node, fx_node.target)
    if cost is None and (functional := _out_of_place(fx_node.target)) is not None:
        return _cost(fx_node, functional)
    return cost


def _out_of_place(target: Any) -> Any:
    """`aten.scatter_.value` -> `aten.scatter.value`: the op an in-place one writes back
    (same arguments, the first the tensor written), or None."""
    packet = getattr(target, "overloadpacket", None)
    if packet is None or torch.Tag.inplace not in getattr(target, "tags", ()):
        return None
    functional = getattr(torch.ops.aten, packet.__name__.removesuffix("_"), None)
    return getattr(functional, target._overloadname, None) if functional is not None else None


def _cost(fx_node: torch.fx.Node, target: Any) -> ImportedCost | None:
    packet = getattr(target, "overloadpacket", None)
    if packet is None:
        return None
    name = packet.__name__
    if name in FUSED_ATTENTION:
        return _attention_cost(fx_node, FUSED_ATTENTION[name])
    if name in (SELF_ATTENTION_LAYER, ENCODER_LAYER):
        return _fused_layer_cost(fx_node)
    if name in GROUPED_CONTRACTIONS:
        a, b = (node_value(arg) for arg in fx_node.args[:2])
        macs = grouped_matmul_macs(tuple(a.shape), tuple(b.shape))
        return ImportedCost(macs=macs, flops=2 * macs)
    if name in TRIANGULAR_SOLVES:
        return _triangular_solve_cost(fx_node)
    if name in RECURRENT_LAYERS:
        return _lstm_layer_cost(fx_node, backward=name.endswith("_backward"))
    if name in EMBEDDING_BAGS:
        return ImportedCost(0, _embedding_bag_flops(fx_node, EMBEDDING_BAGS[name]))
    if name in FOURIER_TRANSFORMS:
        return ImportedCost(0, _fourier_flops(fx_node, name))
    if name in VECTOR_PRODUCTS or name in AFFINE_GRIDS:
        macs = _vector_product_macs(fx_node, name)
        return ImportedCost(macs=macs, flops=2 * macs)
    if name in SORTED_SEARCHES:
        return ImportedCost(0, _sorted_search_flops(fx_node, *SORTED_SEARCHES[name]))
    if name in SAME_CONTRACTION:
        packet = getattr(torch.ops.aten, SAME_CONTRACTION[name])
    if packet in flop_registry:
        flops = _registry_flops(fx_node, packet)
        return ImportedCost(macs=flops // 2, flops=flops)
    if name in PER_ELEMENT:
        return ImportedCost(0, _per_element_flops(fx_node, PER_ELEMENT[name]))
    if name in PER_OUTPUT_ELEMENT:
        return ImportedCost(0, _numel_of_output(fx_node.meta.get("val"))
                            * PER_OUTPUT_ELEMENT[name])
    if name in WINDOW_POOLS:
        spatial_dims = int(name.split("_pool")[1][0])  # max_pool2d_with_indices -> 2
        windows = _pooled_numel(fx_node) * _window_size(fx_node, spatial_dims)
        return ImportedCost(0, windows * WINDOW_POOLS[name])
    if name in WINDOW_POOL_BACKWARDS:  # the gradient (argument 0) over windows (argument 2)
        spatial_dims = int(name.split("_pool")[1][0])
        windows = _numel_of_first_tensor(fx_node.args[:1]) * _window_size(
            fx_node, spatial_dims, argument=2)
        return ImportedCost(0, windows * WINDOW_POOL_BACKWARDS[name])
    if (name in NO_ARITHMETIC or _is_view(target) or _is_random_draw(target)
            or torch.Tag.inplace_view in getattr(target, "tags", ())):  # transpose_, t_
        return ImportedCost(0, 0)
    if name.startswith(FOREACH_PREFIXES):  # one elementwise op over every tensor of the list
        tensors = _numel_of_tensors(fx_node.args[0] if fx_node.args else ())
        return ImportedCost(0, tensors * FOREACH_FLOPS)
    if name in POINTWISE_UNTAGGED or torch.Tag.pointwise in getattr(target, "tags", ()):
        return ImportedCost(0, _numel_of_output(fx_node.meta.get("val")) * POINTWISE_FLOPS)
    return None


def _vector_product_macs(fx_node: torch.fx.Node, name: str) -> int:
    """mv, addmv, dot, vdot: the named argument's elements; an affine grid: d + 1 per
    coordinate of the grid (its last dim is d)."""
    if name in AFFINE_GRIDS:
        grid = node_value(fx_node)
        return int(grid.numel()) * (int(grid.shape[-1]) + 1)
    return int(node_value(fx_node.args[VECTOR_PRODUCTS[name]]).numel())


def _sorted_search_flops(fx_node: torch.fx.Node, values_at: int, boundaries_at: int) -> int:
    """A binary search per value (a number: one) among its row of boundaries (last dim)."""
    values = node_value(fx_node.args[values_at])
    count = int(values.numel()) if isinstance(values, torch.Tensor) else 1
    return binary_search_flops(count, int(node_value(fx_node.args[boundaries_at]).shape[-1]))


def _triangular_solve_cost(fx_node: torch.fx.Node) -> ImportedCost:
    """X = solve_triangular(A, B): n is A's last dim, X the output (B's shape)."""
    size = int(node_value(fx_node.args[0]).shape[-1])
    solution = tuple(int(n) for n in node_value(fx_node).shape)
    macs = triangular_solve_macs(solution, size)
    divisions = triangular_solve_divisions(solution, bool(fx_node.kwargs.get("unitriangular")))
    return ImportedCost(macs=macs, flops=2 * macs + divisions)


def _lstm_layer_cost(fx_node: torch.fx.Node, backward: bool) -> ImportedCost | None:
    """mkldnn_rnn_layer(input, w_ih [G*H, I], w_hh [G*H, H], b_ih, b_hh, ..., hidden_size
    (argument 10), has_biases (12), ...); its backward(input, w_ih, w_hh, ..., hidden_size
    (15), has_biases (17), ...). The rows are the input's elements / I, whatever its layout;
    PyTorch runs only LSTMs on this kernel (G = 4: anything else is left unpriced)."""
    x, w_ih = node_value(fx_node.args[0]), node_value(fx_node.args[1])
    hidden = int(cast("int", fx_node.args[15 if backward else 10]))  # aten's int hidden_size
    inputs = int(w_ih.shape[1])
    if int(w_ih.shape[0]) != GATES["LSTM"] * hidden or inputs == 0:
        return None
    rows = x.numel() // inputs
    biases = bool(fx_node.args[17 if backward else 12])
    costs = lstm_layer_backward_costs if backward else lstm_layer_costs
    macs, flops = costs(rows, inputs, hidden, biases)
    return ImportedCost(macs=macs, flops=flops)


def _embedding_bag_flops(fx_node: torch.fx.Node, layout: EmbeddingBagArgs) -> int:
    """The ids are argument 1; the bags: the offsets' count (argument 2) forward, the
    gradient's rows backward; the width: the weight's or the gradient's last dim."""
    rows, ids = node_value(fx_node.args[layout.rows_argument]), node_value(fx_node.args[1])
    mode = int(cast("int", _argument(fx_node, layout.mode_argument) or 0))
    width = int(rows.shape[-1])
    if layout.backward:
        return embedding_bag_backward_flops(ids.numel(), width, int(rows.shape[0]), mode)
    return embedding_bag_flops(ids.numel(), width, int(node_value(fx_node.args[2]).numel()),
                               mode)


def _fourier_flops(fx_node: torch.fx.Node, name: str) -> int:
    """r2c: the output is the complex side, the input's last transformed dim the real
    length; c2r the reverse (its length is argument 3); c2c: complex both sides."""
    x, out = node_value(fx_node.args[0]), node_value(fx_node)
    dims = tuple(int(d) for d in cast("Sequence[int]", fx_node.args[1]))
    if name == "_fft_c2c":
        return nd_fft_flops(tuple(int(n) for n in x.shape), dims)
    complex_side, real_side = (out, x) if name == "_fft_r2c" else (x, out)
    return nd_fft_flops(tuple(int(n) for n in complex_side.shape), dims,
                        int(real_side.shape[dims[-1]]))


def _attention_cost(fx_node: torch.fx.Node, layout: FusedAttention) -> ImportedCost | None:
    """Q [b, h, s, dq], K [b, hkv, l, dq], V [b, hkv, l, dv] (or [b, s, h, d]): the output is
    Q's shape with dv last; rows b*h*s; grouped KV heads change the bytes, not the MACs."""
    tensors = [node_value(fx_node.args[layout.query_argument + i])
               if layout.query_argument + i < len(fx_node.args) else None for i in range(3)]
    found = [t for t in tensors if isinstance(t, torch.Tensor) and t.dim() == 4]
    if len(found) < len(tensors):
        return None  # nested or unexpected layouts: reported as unsupported, not guessed
    query, key, value = found
    rows = math.prod(query.shape[:3])
    length = key.shape[2] if layout.heads_first else key.shape[1]
    out_numel = rows * value.shape[-1]
    formula = attention_backward_cost if layout.backward else attention_cost
    cost = formula(*(SymInt.const(int(n)) for n in (query.numel(), out_numel, rows, length)))
    return ImportedCost(macs=int(cost.macs), flops=int(cost.flops))


def _fused_layer_cost(fx_node: torch.fx.Node) -> ImportedCost | None:
    """nn.MultiheadAttention's and nn.TransformerEncoderLayer's fused kernels
    (frontends/torch/fused_layers.py reads their arguments): query / src [b, s, e];
    self-attention over its s keys, then the encoder's feed-forward block [e -> f -> e]."""
    layer = fused_layer_args(fx_node)
    query = layer.query if layer is not None else None
    if layer is None or not isinstance(query, torch.Tensor) or query.dim() != 3:
        return None  # nested or unbatched: reported as unsupported, not guessed
    batch, length, width = (SymInt.const(int(n)) for n in query.shape)
    heads = SymInt.const(layer.num_head)
    tokens = batch * length
    if layer.encoder:
        activation = ELEMENTWISE_FLOPS["Gelu" if layer.use_gelu else "Relu"]
        cost = encoder_layer_cost(tokens, width, heads, length,
                                  SymInt.const(layer.ffn_width), activation)
    else:
        cost = self_attention_layer_cost(tokens, width, heads, length)
    return ImportedCost(macs=int(cost.macs), flops=int(cost.flops))


def _per_element_flops(fx_node: torch.fx.Node, rule: PerElement) -> int:
    flops = rule.flops
    # anything but an explicit False computes batch statistics (the no_stats overload has
    # no running statistics to use, and no flag there)
    if rule.if_training and _argument(fx_node, rule.training_argument) is not False:
        flops += rule.if_training
    if rule.argument is None:
        return flops * _numel_of_first_tensor(fx_node.args)
    return flops * _numel_of_first_tensor((_argument(fx_node, rule.argument),))


def _argument(fx_node: torch.fx.Node, index: int | None) -> Any:
    return fx_node.args[index] if index is not None and index < len(fx_node.args) else None


def _registry_flops(fx_node: torch.fx.Node, packet: Any) -> int:
    args, kwargs = torch.utils._pytree.tree_map(node_value, (fx_node.args, fx_node.kwargs))
    return int(flop_registry[packet](*args, **kwargs, out_val=fx_node.meta.get("val")))


def _pooled_numel(fx_node: torch.fx.Node) -> int:
    # max_pool*_with_indices returns (values, indices): the windows are the values' elements
    meta = fx_node.meta.get("val")
    return _numel_of_output(meta[0] if isinstance(meta, (tuple, list)) else meta)


def _window_size(fx_node: torch.fx.Node, spatial_dims: int, argument: int = 1) -> int:
    # kernel_size [k] means k in every spatial dim
    kernel = list(cast("Sequence[int]", fx_node.args[argument]))  # aten's int[] kernel_size
    return kernel[0] ** spatial_dims if len(kernel) == 1 else math.prod(kernel)


def _is_random_draw(target: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())


def _is_view(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    info = schema.returns[0].alias_info
    return info is not None and not info.is_write


def _numel_of_first_tensor(args: Any) -> int:
    for leaf in torch.utils._pytree.tree_leaves(args):
        meta = node_value(leaf)
        if isinstance(meta, torch.Tensor):
            return int(meta.numel())
    return 0


def _numel_of_tensors(tree: Any) -> int:
    leaves = [node_value(leaf) for leaf in torch.utils._pytree.tree_leaves(tree)]
    return sum(int(t.numel()) for t in leaves if isinstance(t, torch.Tensor))


def _numel_of_output(meta: Any) -> int:
    leaves = torch.utils._pytree.tree_leaves(meta)
    return sum(math.prod(t.shape) for t in leaves if isinstance(t, torch.Tensor))
