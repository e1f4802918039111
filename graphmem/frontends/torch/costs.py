"""FLOPs of aten ops: PyTorch's own FlopCounterMode formulas first, then graphmem's conventions.

- matmul, conv, attention and their backward ops: `torch.utils.flop_counter.flop_registry`,
  the formulas FlopCounterMode uses (2 FLOPs per multiply-accumulate), so graphmem's
  contraction FLOPs are FlopCounterMode's by construction;
- pointwise ops (aten's `pointwise` tag) and foreach ops: 1 FLOP per output element, as the
  ONNX elementwise table counts simple arithmetic;
- reductions: 1 FLOP per input element; normalizations and softmax: the per-element constants
  of the ONNX rules (graphmem/ops/normalization.py);
- views, copies, casts, factories and indexing: 0 FLOPs (they move bytes);
- anything else: None, which the costs pass reports as unsupported.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx
from torch.utils.flop_counter import flop_registry

from graphmem.core.ir import ImportedCost

# FLOPs per element of input 0 (the ONNX rules' conventions for the same math).
PER_INPUT_ELEMENT = {
    "sum": 1, "mean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "prod": 1, "argmax": 1,
    "argmin": 1, "var": 2, "std": 2, "var_mean": 2, "norm": 2, "linalg_vector_norm": 2,
    "_softmax": 5, "_log_softmax": 5, "_softmax_backward_data": 3,
    "_log_softmax_backward_data": 3, "native_layer_norm": 7, "native_layer_norm_backward": 9,
    "native_batch_norm": 6, "_native_batch_norm_legit": 6,
    "_native_batch_norm_legit_no_training": 2, "native_batch_norm_backward": 9,
    "native_group_norm": 7, "native_group_norm_backward": 9, "_fused_rms_norm": 4,
    "nll_loss_forward": 1, "nll_loss_backward": 1, "embedding_dense_backward": 1,
    "cumsum": 1, "logsumexp": 2, "_adaptive_avg_pool2d": 1, "adaptive_avg_pool3d": 1,
}
# Window pools: 1 compare or add per window element per output, as ONNX MaxPool/AveragePool
# (graphmem/ops/pooling.py); kernel_size is argument 1.
WINDOW_POOLS = frozenset({"max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool2d",
                          "max_pool1d", "avg_pool1d", "avg_pool2d", "avg_pool3d"})
# Ops that only move or make bytes.
NO_ARITHMETIC = frozenset({
    "_to_copy", "clone", "copy", "copy_", "contiguous", "empty", "empty_like", "empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "scalar_tensor", "arange",
    "lift_fresh_copy", "new_empty", "new_zeros", "new_ones", "new_full", "embedding", "index",
    "index_select", "gather", "scatter", "slice_scatter", "select_scatter", "cat", "stack",
    "constant_pad_nd", "repeat", "index_put", "index_put_", "masked_fill", "tril", "triu",
    "_unsafe_view", "detach", "alias", "fill", "fill_", "zero_", "bernoulli", "bernoulli_",
    "native_dropout", "rand", "randn", "rand_like", "randn_like", "split_with_sizes", "roll",
    "flip", "as_strided_scatter", "as_strided_", "_foreach_copy_", "sort", "topk",
})


def imported_cost(fx_node: torch.fx.Node) -> ImportedCost | None:
    target = fx_node.target
    packet = getattr(target, "overloadpacket", None)
    if packet is None:
        return None
    if packet in flop_registry:
        flops = _registry_flops(fx_node, packet)
        return ImportedCost(macs=flops // 2, flops=flops)
    name = packet.__name__
    if name in PER_INPUT_ELEMENT:
        return ImportedCost(0, PER_INPUT_ELEMENT[name] * _numel_of_first_tensor(fx_node.args))
    if name in WINDOW_POOLS:
        spatial_dims = int(name.split("_pool")[1][0])  # max_pool2d_with_indices -> 2
        return ImportedCost(0, _pooled_numel(fx_node) * _window_size(fx_node, spatial_dims))
    if name in NO_ARITHMETIC or _is_view(target):
        return ImportedCost(0, 0)
    if name.startswith("_foreach_"):  # one elementwise op over every tensor of the list
        return ImportedCost(0, _numel_of_tensors(fx_node.args[0] if fx_node.args else ()))
    if torch.Tag.pointwise in getattr(target, "tags", ()):
        return ImportedCost(0, _numel_of_output(fx_node.meta.get("val")))
    return None


def _registry_flops(fx_node: torch.fx.Node, packet: Any) -> int:
    args, kwargs = torch.utils._pytree.tree_map(_meta_of, (fx_node.args, fx_node.kwargs))
    return int(flop_registry[packet](*args, **kwargs, out_val=fx_node.meta.get("val")))


def _meta_of(item: Any) -> Any:
    return item.meta.get("val") if isinstance(item, torch.fx.Node) else item


def _pooled_numel(fx_node: torch.fx.Node) -> int:
    # max_pool*_with_indices returns (values, indices): the windows are the values' elements
    meta = fx_node.meta.get("val")
    return _numel_of_output(meta[0] if isinstance(meta, (tuple, list)) else meta)


def _window_size(fx_node: torch.fx.Node, spatial_dims: int) -> int:
    # kernel_size [k] means k in every spatial dim
    kernel = list(fx_node.args[1])
    return kernel[0] ** spatial_dims if len(kernel) == 1 else math.prod(kernel)


def _is_view(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    info = schema.returns[0].alias_info
    return info is not None and not info.is_write


def _numel_of_first_tensor(args: Any) -> int:
    for leaf in torch.utils._pytree.tree_leaves(args):
        meta = _meta_of(leaf)
        if isinstance(meta, torch.Tensor):
            return int(meta.numel())
    return 0


def _numel_of_tensors(tree: Any) -> int:
    leaves = [_meta_of(leaf) for leaf in torch.utils._pytree.tree_leaves(tree)]
    return sum(int(t.numel()) for t in leaves if isinstance(t, torch.Tensor))


def _numel_of_output(meta: Any) -> int:
    leaves = torch.utils._pytree.tree_leaves(meta)
    return sum(math.prod(t.shape) for t in leaves if isinstance(t, torch.Tensor))
