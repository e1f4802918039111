"""An LSTM layer on the CPU as eager runs it (aten.mkldnn_rnn_layer, one oneDNN primitive
per layer and direction, and its backward): what the trace's meta kernels leave out.

- The workspace: with grad enabled the forward returns oneDNN's workspace (the gates and
  states of every step, saved for the backward), sized by the primitive; the meta
  registration (torch/_meta_registrations.py `mkldnn_rnn_layer`) returns it empty. The
  trace notes the grad mode each layer ran in (`note_grad_mode`, from the trace's observer:
  observed.py), and a layer run with grad enabled takes oneDNN's size here
  (graphmem/ops/onednn_rnn.py `workspace_bytes`): T 10, B 2, I = H = 16 -> 32,768 B
  (measured 32,768). Autograd holds it as eager does: to the backward, or, where no
  gradient reaches the layer (EnCodec's encoder, before its quantizer's argmax), while
  the layer's outputs live (the fake workspace's own death: fx_convert.py's eager
  lifetimes). A trace for a GPU (which traces nn.LSTM as this CPU kernel too) leaves it
  empty: cuDNN's reserve space is not modelled.
- The backward's gradients: it copies an output gradient that is a view contiguous
  (a bidirectional layer's half of the next layer's input gradient, measured) and makes
  zeros for one none flows to (`grad_output_copied`), and zeros for the final states' where
  none flows (`grad_states_zeroed`, hy's and cy's): node attributes the torch-cpu runtime
  model reads (graphmem/runtime_models/torch_cpu_recurrent.py).
- The backward's bias gradients: two tensors, as eager returns them (its meta kernel returns
  one twice): `distinct_bias_gradients`.
Only fp32 layers are sized (16-bit ones run other kernels, not modelled).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import get_proxy_slot

from graphmem.core.ir import AttributeValue
from graphmem.ops.onednn_rnn import RnnLayer, workspace_bytes

RNN_LAYER = "aten.mkldnn_rnn_layer.default"
RNN_LAYER_BACKWARD = "aten.mkldnn_rnn_layer_backward.default"
WORKSPACE = 3  # (output, hy, cy, workspace)
# mkldnn_rnn_layer_backward's (input, w_ih, w_hh, b_ih, b_hh, hx, cx, output, hy, cy,
# grad_output, grad_hy, grad_cy, ...)
GRAD_OUTPUT, GRAD_HY, GRAD_CY = 10, 11, 12
B_HH_GRADIENT = 4  # (diff_x, diff_w_ih, diff_w_hh, diff_b_ih, diff_b_hh, diff_hx, diff_cx)


GRAD_ENABLED_KEY = "graphmem_grad_enabled"  # fx node meta: the layer ran with grad enabled


def note_grad_mode(func: Any, out: Any, tracer: Any) -> None:
    """Called as the trace makes each op's outputs: a layer run with grad enabled (the
    kernel then allocates the workspace) is marked on its fx node."""
    if func is not torch.ops.aten.mkldnn_rnn_layer.default or not torch.is_grad_enabled():
        return
    first = out[0] if isinstance(out, list | tuple) and out else None
    slot = get_proxy_slot(first, tracer, None) if isinstance(first, torch.Tensor) else None
    item = slot.proxy.node if slot is not None else None  # getitem(layer, 0)
    layer = item.args[0] if item is not None and item.target is operator.getitem else item
    if isinstance(layer, torch.fx.Node):
        layer.meta[GRAD_ENABLED_KEY] = True


def distinct_bias_gradients(func: Any, out: Any) -> Any:
    """The backward's outputs as eager returns them: its meta registration returns the bias
    gradient twice, one tensor (`return diff_x, ..., diff_b, diff_b, ...`), where eager
    returns b_hh's as a clone of b_ih's (RNN.cpp `at::clone(diff_b_)`): two tensors, each a
    parameter's gradient to the update (a 2-layer bidirectional LSTM's training, whose peak
    is in AdamW's update, was 4 x 640 B short). Called as the trace runs each op: the clone
    is traced after the kernel."""
    if (func is not torch.ops.aten.mkldnn_rnn_layer_backward.default
            or not isinstance(out, tuple) or len(out) <= B_HH_GRADIENT
            or out[B_HH_GRADIENT] is not out[B_HH_GRADIENT - 1]):
        return out
    return (*out[:B_HH_GRADIENT], out[B_HH_GRADIENT].clone(), *out[B_HH_GRADIENT + 1:])


def sized_outputs(fx_node: torch.fx.Node, meta: Any) -> Any:
    """The node's output tensors, the workspace of an fp32 LSTM layer run with grad enabled
    at oneDNN's size."""
    if (str(fx_node.target) != RNN_LAYER or not isinstance(meta, list | tuple)
            or len(meta) <= WORKSPACE or not fx_node.meta.get(GRAD_ENABLED_KEY)):
        return meta
    layer = _layer(fx_node)
    if layer is None:
        return meta
    workspace = torch.empty(workspace_bytes(layer), dtype=torch.uint8, device="meta")
    return [*meta[:WORKSPACE], workspace, *meta[WORKSPACE + 1:]]


def rnn_attributes(fx_node: torch.fx.Node) -> dict[str, AttributeValue]:
    """`grad_output_copied` and `grad_states_zeroed` of a traced LSTM layer's backward; {}
    for every other op."""
    if str(fx_node.target) != RNN_LAYER_BACKWARD or len(fx_node.args) <= GRAD_CY:
        return {}
    args = fx_node.args
    return {"grad_output_copied": int(_made_apart(args[GRAD_OUTPUT])),
            "grad_states_zeroed": (int(_made_apart(args[GRAD_HY])),
                                   int(_made_apart(args[GRAD_CY])))}


def _made_apart(arg: Any) -> bool:
    """A gradient the kernel makes itself: zeros for none, a contiguous copy of a view."""
    tensor = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return not isinstance(tensor, torch.Tensor) or not tensor.is_contiguous()


def _layer(fx_node: torch.fx.Node) -> RnnLayer | None:
    """T, B, I from the input [T, B, I] (made contiguous, steps first); H and G from
    w_hh [G*H, H]; None unless fp32 at concrete sizes."""
    x, w_hh = (arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
               for arg in (fx_node.args[0], fx_node.args[2]))
    if not (isinstance(x, torch.Tensor) and isinstance(w_hh, torch.Tensor)
            and x.dtype == w_hh.dtype == torch.float32 and x.dim() == 3 and w_hh.dim() == 2):
        return None
    sizes = [*x.shape, *w_hh.shape]
    if not all(isinstance(size, int) for size in sizes):
        return None
    steps, batch, inputs, rows, hidden = (int(size) for size in sizes)
    if hidden == 0 or rows % hidden:
        return None
    return RnnLayer(steps, batch, inputs, hidden, rows // hidden)
