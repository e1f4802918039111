"""The pieces of a traced training step: the loss, autocast, the optimizer, the loss scaler.

graphmem/frontends/torch/trace.py composes them into one step. Each is what a training loop
runs, as torch implements it:
- the default loss: cross-entropy over the last dim against integer targets; or, by name
  (`--loss mse`), the mean squared error against a target of the output's shape;
- AMP: CPU autocast, with CUDA's fp32 op lists on top (autocast.py) where the step is
  planned for a GPU;
- the optimizer: torch.optim's functional sgd / adam / adamw with `foreach=True`, the
  default on CUDA (`_default_to_fused_or_foreach`: fused is opt-in), in the steady state;
- fp16 on CUDA: `torch.amp.GradScaler`, whose state is a fp32 scale and an int32 growth
  tracker; it scales the loss, unscales the gradients in place
  (`_amp_foreach_non_finite_check_and_unscale_`, with a fp32 found-inf flag and 1/scale),
  and updates the scale (`_amp_update_scale_`) after the optimizer step.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn
from torch.optim.adam import adam as adam_update
from torch.optim.adamw import adamw as adamw_update
from torch.optim.sgd import sgd as sgd_update

from graphmem.core import conventions
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.autocast import CudaAutocastPolicy

# torch's dtype of each AMP precision (the names: graphmem/core/conventions.py)
AMP_DTYPES = {amp: getattr(torch, name) for amp, name in conventions.AMP_DTYPES.items()}
# GradScaler's defaults (torch/amp/grad_scaler.py): growth and backoff factors, interval
SCALER_GROWTH, SCALER_BACKOFF, SCALER_INTERVAL = 2.0, 0.5, 2000
SCALER_STATE = ("grad_scaler.scale", "grad_scaler.growth_tracker")


def _first_tensor(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        output = output.get("logits", next(iter(output.values())))
        return _first_tensor(output)
    if isinstance(output, list | tuple) and output:
        return _first_tensor(output[0])
    raise GraphmemError("the model's output holds no tensor to compute a loss from;"
                        " pass a loss callable")


def cross_entropy_loss(output: Any) -> torch.Tensor:
    """Cross-entropy over the last dim against integer targets (the default training loss)."""
    logits = _first_tensor(output)
    if logits.dim() < 2:
        return logits.float().sum()
    flat = logits.reshape(-1, logits.shape[-1])
    target = torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device)
    return nn.functional.cross_entropy(flat, target)


def mse_loss(output: Any) -> torch.Tensor:
    """The mean squared error of the output (in fp32, as diffusers' training scripts cast the
    prediction) against a zero target of its shape: the noise a diffusion step predicts, or a
    regression's target, which the real loop holds beside the output at the loss."""
    prediction = _first_tensor(output).float()
    return nn.functional.mse_loss(prediction, torch.zeros_like(prediction))


# the losses --loss names (graphmem/core/conventions.py Loss)
LOSSES = {conventions.Loss.CROSS_ENTROPY: cross_entropy_loss, conventions.Loss.MSE: mse_loss}


def autocast(amp: str | None) -> contextlib.AbstractContextManager[Any]:
    """CPU autocast: its lower-precision list matches CUDA's for matmul, linear and conv; the
    ops CUDA runs in fp32 on top of it come from `autocast_policy`."""
    return contextlib.nullcontext() if amp is None else torch.autocast("cpu",
                                                                       dtype=AMP_DTYPES[amp])


def autocast_policy(train: conventions.TrainingOptions | None
                    ) -> contextlib.AbstractContextManager[Any]:
    """CUDA's fp32 op lists on top of CPU autocast (autocast.py), for a whole traced AMP step
    that follows them: wherever autocast is on, a checkpoint's recomputation included."""
    if train is None or train.amp is None or train.amp_policy != conventions.AmpPolicy.CUDA:
        return contextlib.nullcontext()
    return CudaAutocastPolicy()


def optimizer_update(name: str, params: list, grads: list, state: list, steps: list) -> None:
    """One step of torch.optim's functional update (foreach), in place on params and state."""
    if name in ("sgd", "momentum"):
        buffers = state[0] if state else [None] * len(params)
        sgd_update(params, grads, buffers, foreach=True, weight_decay=0.0,
                   momentum=0.9 if name == "momentum" else 0.0, lr=0.01,
                   dampening=0.0, nesterov=False, maximize=False)
        return
    update = adamw_update if name == "adamw" else adam_update
    update(params, grads, state[0], state[1], [], steps, foreach=True, capturable=False,
           amsgrad=False, beta1=0.9, beta2=0.999, lr=1e-3,
           weight_decay=0.01 if name == "adamw" else 0.0, eps=1e-8, maximize=False)


def scaler_state() -> list[torch.Tensor]:
    """GradScaler's state on the GPU: the scale (fp32 [1]) and the growth tracker (int32 [1])."""
    return [torch.empty(1, dtype=torch.float32), torch.empty(1, dtype=torch.int32)]


def unscale(grads: list[torch.Tensor], scale: torch.Tensor) -> torch.Tensor:
    """GradScaler.unscale_: the gradients divided by the scale in place; the found-inf flag
    (fp32 [1]) is returned for the update."""
    found_inf = torch.zeros(1, dtype=torch.float32)
    inv_scale = scale.double().reciprocal().float()
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
    return found_inf


def update_scale(scale: torch.Tensor, growth_tracker: torch.Tensor,
                 found_inf: torch.Tensor) -> None:
    """GradScaler.update: the scale grows or backs off in place."""
    torch._amp_update_scale_(scale, growth_tracker, found_inf, SCALER_GROWTH, SCALER_BACKOFF,
                             SCALER_INTERVAL)
