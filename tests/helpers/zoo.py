"""One zoo architecture's checks (tests/zoo_models.py): graphmem's analysis next to the
real model's parameters, FlopCounterMode's MACs and a real CPU step's peak."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.frontends.torch.train_step import LOSSES, cross_entropy_loss
from graphmem.verify.runners.torch_runner import measure_step, random_inputs
from tests.zoo_models import ZooModel


@dataclass(frozen=True)
class ZooRow:
    name: str
    train: bool
    unsupported: dict[str, int]
    params: int  # graphmem's count
    real_params: int  # sum of numel of the real model's parameters (tied ones once)
    macs: int
    flop_counter_macs: int
    predicted_peak_bytes: int  # the live tensors' peak
    # the torch-cpu runtime model's peak (graphmem/runtime_models/torch_cpu.py): the live
    # tensors with each kernel's scratch added while it runs, as the allocator sees them
    predicted_allocator_bytes: int
    # the live tensors of a real step: the allocator's live bytes read as each outermost
    # kernel returns (torch_runner.py `kernel_ends_peak_bytes`); the profiler's deltas
    # replayed place some frees by guess (ConvNeXt-V2's training step read 8,192 B high, a
    # [2, 4, 4, 64] gradient freed late; BLOOM's 215,568 B against 133,660 B allocated)
    measured_peak_bytes: int
    allocator_peak_bytes: int  # every allocation, kernels' scratch included

    @property
    def macs_ratio(self) -> float:
        return self.macs / self.flop_counter_macs if self.flop_counter_macs else 1.0

    @property
    def peak_error(self) -> float:
        return self.predicted_peak_bytes / self.measured_peak_bytes - 1

    @property
    def allocator_error(self) -> float:
        return self.predicted_allocator_bytes / self.allocator_peak_bytes - 1


def loss_of(entry: ZooModel) -> Callable[..., torch.Tensor]:
    """The architecture's training loss: the one --loss names, else cross-entropy."""
    return LOSSES[entry.loss] if entry.loss else cross_entropy_loss  # type: ignore[index]


def built(entry: ZooModel) -> torch.nn.Module:
    torch.manual_seed(0)
    return entry.build()


def _triangular_solve_flops(a_shape: torch.Size, *args: object, out_shape: torch.Size,
                            **kwargs: object) -> int:
    # FlopCounterMode has no formula for solve_triangular (Qwen3-Next's gated delta rule):
    # forward substitution, each of numel(X) / n right-hand sides 0 + 1 + ... + (n - 1)
    # multiply-adds, 2 FLOPs each (tests/test_zoo_ops.py counts it written out)
    size = a_shape[-1]
    return 2 * (out_shape.numel() // size) * (size * (size - 1) // 2)


def _matrix_vector_flops(matrix_shape: torch.Size, *args: object, out_shape: torch.Size,
                         **kwargs: object) -> int:
    # mv (spectral norm's power iteration): [m, n] @ [n] -> [m], m * n multiply-adds
    return 2 * matrix_shape[0] * matrix_shape[1]


def _vector_dot_flops(a_shape: torch.Size, *args: object, out_shape: torch.Size,
                      **kwargs: object) -> int:
    # dot / vdot: [n] . [n], n multiply-adds
    return 2 * a_shape[0]


def _affine_grid_flops(theta_shape: torch.Size, *args: object, out_shape: torch.Size,
                       **kwargs: object) -> int:
    # F.affine_grid: the base grid of homogeneous points [N, H*W, 3] @ theta^T [N, 3, 2]
    # (aten's affine_grid_generator is that bmm), as the bmm's multiply-adds
    batch, rows, points = theta_shape[0], theta_shape[1], theta_shape[2]
    return 2 * batch * (out_shape.numel() // (batch * rows)) * points * rows


def _lstm_layer_flops(input_shape: torch.Size, w_ih_shape: torch.Size,
                      w_hh_shape: torch.Size, *args: object, out_shape: object,
                      **kwargs: object) -> int:
    # one LSTM layer and direction on the CPU (aten.mkldnn_rnn_layer, one oneDNN kernel):
    # every step [B, I] @ [I, G*H] and [B, H] @ [H, G*H], T x B x G*H x (I + H) multiply-adds
    # (tests/test_lstm_costs.py counts them on the LSTM written out step by step)
    steps, batch = input_shape[0], input_shape[1]
    return 2 * steps * batch * w_ih_shape[0] * (w_ih_shape[1] + w_hh_shape[1])


def _lstm_layer_backward_flops(*shapes: torch.Size, out_shape: object, **kwargs: object) -> int:
    # its backward: the gradients of the input and state (dG @ W) and of both weights (dG^T
    # @ X, dG^T @ H): twice the forward's multiply-adds
    return 2 * _lstm_layer_flops(*shapes, out_shape=out_shape)


# the ops FlopCounterMode leaves uncounted, given their substitution counts
UNCOUNTED = {torch.ops.aten.mkldnn_rnn_layer: _lstm_layer_flops,
             torch.ops.aten.mkldnn_rnn_layer_backward: _lstm_layer_backward_flops,
             torch.ops.aten.linalg_solve_triangular: _triangular_solve_flops,
             torch.ops.aten.mv: _matrix_vector_flops, torch.ops.aten.dot: _vector_dot_flops,
             torch.ops.aten.vdot: _vector_dot_flops,
             torch.ops.aten.affine_grid_generator: _affine_grid_flops}


def flop_counter_macs(entry: ZooModel, train: bool) -> int:
    """FlopCounterMode's MACs for the step's forward and backward (2 FLOPs per MAC), with
    scaled-dot-product attention on its math backend: FlopCounterMode has no formula for the
    CPU flash kernel, which a model calling `F.scaled_dot_product_attention` itself (the
    wav2vec2-Conformer's relative attention, whatever `attn_implementation` says) would
    run; the math backend's matmuls are what graphmem's attention formulas count. Likewise
    with nn.MultiheadAttention's inference fast path off: FlopCounterMode has no formula for
    fused `_native_multi_head_attention` (and nn.TransformerEncoderLayer's
    `_transformer_encoder_layer_fwd`), whose projections and attention are the Python
    path's matmuls, which graphmem's formulas for the fused kernels count
    (graphmem/ops/attention.py; the trace runs the fused kernels, as eager does)."""
    model = built(entry).train(train)
    # inference: no parameter asks for a gradient (FlopCounterMode's module tracker hooks
    # autograd for any tensor that does, and fails on one a no_grad region made); training
    # keeps the model's own frozen parameters frozen (DETR's backbone stem and first stage),
    # as the measured step and graphmem's trace do
    if not train:
        model.requires_grad_(False)
    inputs = random_inputs([parse_tensor_spec(text) for text in entry.inputs], "cpu")
    fast_path = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return _counted_macs(model, inputs, entry, train)
    finally:
        torch.backends.mha.set_fastpath_enabled(fast_path)


def _counted_macs(model: torch.nn.Module, inputs: list[torch.Tensor], entry: ZooModel,
                  train: bool) -> int:
    with FlopCounterMode(display=False, custom_mapping=UNCOUNTED) as counter, sdpa_kernel(
            SDPBackend.MATH):
        if train:
            loss_of(entry)(model(*inputs)).backward()
        else:
            with torch.no_grad():
                model(*inputs)
    return counter.get_total_flops() // 2


def policy_routed_peak_bytes(entry: ZooModel, train: bool) -> int:
    """The live-tensor peak of a real step whose router chooses as graphmem's balanced
    routing policy does (tests/helpers/zoo_routing.py)."""
    from tests.helpers.zoo_routing import PolicyRouted

    specs = [parse_tensor_spec(text) for text in entry.inputs]
    measured = measure_step(PolicyRouted(built(entry)), specs, train, "adamw")
    return measured.kernel_ends_peak_bytes or measured.peak_bytes


def check(entry: ZooModel, train: bool) -> ZooRow:
    specs = [parse_tensor_spec(text) for text in entry.inputs]
    # torch-cpu: the runtime `analyze` picks for a PyTorch model without --gpu
    analysis = analyze_torch(built(entry), specs, train=train,
                             optimizer="adamw" if train else None, plan=False, suggest=False,
                             runtime="torch-cpu", loss=entry.loss if train else None,
                             amp=entry.amp if train else None)
    assert analysis.runtime is not None
    measured = measure_step(built(entry), specs, train, "adamw", amp=entry.amp,
                            loss=loss_of(entry))
    model = built(entry)
    allocator = measured.allocator_peak_bytes or measured.peak_bytes
    return ZooRow(
        entry.name, train, dict(analysis.costs.unsupported_ops), analysis.params.count,
        sum(p.numel() for p in model.parameters()), int(analysis.costs.total_macs),
        flop_counter_macs(entry, train), int(analysis.liveness.activation_peak_bytes),
        int(analysis.runtime.runtime_peak_bytes),
        measured.kernel_ends_peak_bytes or measured.peak_bytes, allocator)
