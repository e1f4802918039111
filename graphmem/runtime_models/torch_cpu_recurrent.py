"""An LSTM layer on the CPU (aten.mkldnn_rnn_layer, one oneDNN primitive per layer and
direction, and its backward), for the torch-cpu runtime model: the kernel's allocations, its
outputs first, as measured with torch.profiler (torch 2.13, oneDNN 3.12, AVX-512, fp32;
`python benchmarks/cpu_scratch.py --lstm`), sized by graphmem/ops/onednn_rnn.py.

Forward: +Y, +Hy, +Cy (the outputs), +Bias (b_ih + b_hh, [G*H]), +WS (the workspace,
training only: an output the front end sizes, frontends/torch/onednn_rnn.py), +Wl, +Wi (the
weights reordered), +S (the scratchpad), -S, -Wi, -Wl, -Bias. With grad enabled PyTorch runs
oneDNN's reference kernel (forward_training), else its brgemm one (forward_inference: other
weight copies, the states in the scratchpad).
Backward: the output gradient copied contiguous (where it is a view: a bidirectional
layer's half of the next layer's input gradient) or zeros (where none flows), zeros for the
final states' gradients none flows to, +Bias, the outputs (GX, GHx, GCx, GWl, GWi, GB), the
weights' ldgoi copies (where their ld is padded), oneDNN's zeroed gradients DWl, DWi, DB, +S;
then frees, GB cloned for b_hh's gradient (its sixth output), the rest freed.
e.g. T 10, B 2, I = H = 16 in training: the forward's scratch 256 + 4,096 + 4,096 + 21,048
= 29,496 (measured 29,496); its backward 128 + 128 + 256 + 4,096 + 4,096 + 256 + 21,048 =
29,752 above its outputs (measured 29,752).
Not modelled: 16-bit layers (other kernels and layouts), AVX2's blocks; an LSTM with
projections (proj_size) does not run on this kernel.
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.ops import onednn_rnn
from graphmem.ops.onednn_rnn import RnnLayer
from graphmem.runtime_models.torch_cpu_native import Allocations, Dims, is_fp32
from graphmem.runtime_models.torch_cpu_native import nbytes_at as _bytes
from graphmem.runtime_models.torch_cpu_native import sizes_at as _sizes

WORKSPACE_OUTPUT = 3  # (output, hy, cy, workspace)
BIAS_GRADIENT_OUTPUT = 3  # (diff_x, diff_w_ih, diff_w_hh, diff_b, diff_b again, hx's, cx's)


def _layer(node: Node, dims: Dims) -> RnnLayer | None:
    """T, B, I from the input [T, B, I]; H and G from w_hh [G*H, H]; None unless fp32."""
    x, _, w_hh = [*node.inputs, None, None, None][:3]
    if x is None or w_hh is None or not (is_fp32(x) and is_fp32(w_hh)):
        return None
    if len(x.shape or ()) != 3 or len(w_hh.shape or ()) != 2:
        return None
    (steps, batch, inputs), (rows, hidden) = _sizes(x, dims), _sizes(w_hh, dims)
    if hidden == 0 or rows % hidden:
        return None
    return RnnLayer(steps, batch, inputs, hidden, rows // hidden)


def rnn_layer(node: Node, dims: Dims, threads: int) -> Allocations:
    """aten.mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, hx, cx, ...) -> (Y, Hy, Cy, WS)."""
    layer = _layer(node, dims)
    if layer is None or len(node.outputs) <= WORKSPACE_OUTPUT:
        return []
    made = [_bytes(v, dims) for v in node.outputs]
    training = made[WORKSPACE_OUTPUT] > 0
    bias = layer.gates * layer.hidden * onednn_rnn.FLOAT_BYTES
    weights = onednn_rnn.forward_weight_bytes(layer, training)
    scratchpad = (onednn_rnn.training_scratchpad_bytes(layer, backward=False) if training
                  else onednn_rnn.inference_scratchpad_bytes(layer, threads))
    return [*made, bias, *weights, scratchpad, -scratchpad, *(-w for w in weights), -bias]


def rnn_layer_backward(node: Node, dims: Dims, threads: int) -> Allocations:
    """aten.mkldnn_rnn_layer_backward: the gradients' copies and zeros the front end marked
    (frontends/torch/onednn_rnn.py: `grad_output_copied`, `grad_states_zeroed` as 0/1
    flags for hy's and cy's), then the kernel's own (module docstring)."""
    layer = _layer(node, dims)
    if layer is None or len(node.outputs) <= BIAS_GRADIENT_OUTPUT + 1:
        return []
    output = node.inputs[7] if len(node.inputs) > 7 else None
    state = layer.batch * layer.hidden * onednn_rnn.FLOAT_BYTES
    grads = [_bytes(output, dims) if node.attr_int("grad_output_copied", 0) else 0,
             *(state * flag for flag in node.attr_ints("grad_states_zeroed", (0, 0)))]
    bias = layer.gates * layer.hidden * onednn_rnn.FLOAT_BYTES
    made = [_bytes(v, dims) for v in node.outputs]
    bias_copy = made.pop(BIAS_GRADIENT_OUTPUT + 1)
    held = [*onednn_rnn.backward_weight_bytes(layer), *onednn_rnn.weight_gradient_bytes(layer)]
    scratchpad = onednn_rnn.training_scratchpad_bytes(layer, backward=True)
    return [*grads, bias, *made, *held, scratchpad, -scratchpad, *(-b for b in held),
            bias_copy, -bias, *(-g for g in grads)]

