"""LoRA and QLoRA applied to a model for one trace, as peft and bitsandbytes build them.

`fine_tuned(model, options, optimizer)` changes the model in place, yields what it did (a
FinetuneReport) and restores every module, parameter and `requires_grad` flag on exit, like
the other trace-time rewrites (checkpoint.py, rewrites.py). The new modules live on the meta
device: the trace only reads their shapes and dtypes.

- QLoRA first, as transformers loads a model with `BitsAndBytesConfig(load_in_4bit=True)`:
  every `nn.Linear` (and GPT-2's Conv1D) but the ones transformers keeps (the output head,
  tied weights: `get_keys_to_not_convert`) becomes an Nf4Linear (graphmem/frontends/torch/
  nf4_linear.py); with `upcast_frozen`, peft's `prepare_model_for_kbit_training` casts the
  other fp16/bf16 parameters to fp32.
- LoRA then, as `peft.get_peft_model`: every parameter frozen, each targeted Linear wrapped in
  a LoraLinear whose `lora_A`/`lora_B` (fp32: peft's `autocast_adapter_dtype`) train. Its
  forward is peft's `lora.Linear.forward` (`lora.bnb.Linear4bit.forward` over a 4-bit base).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from graphmem.core.conventions import STATE_SLOTS
from graphmem.core.units import format_bytes
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.finetune import (
    FinetuneOptions,
    FinetuneReport,
    LoraOptions,
    LoraSummary,
    Nf4Summary,
    ParamCounts,
    QloraOptions,
)
from graphmem.frontends.torch.hf_config import hf_summary, moe_summary
from graphmem.frontends.torch.nf4 import NO_NF4
from graphmem.frontends.torch.nf4_linear import Nf4Linear, conv1d_class, linear_shape

ADAPTER_NAME = "default"  # peft's name for the one adapter
ADAPTER_DTYPE = torch.float32  # peft: autocast_adapter_dtype=True upcasts fp16/bf16 adapters
# peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (peft 0.21.2):
# the modules LoraConfig adapts when target_modules is not given
PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "t5": ("q", "v"), "mt5": ("q", "v"), "bart": ("q_proj", "v_proj"), "gpt2": ("c_attn",),
    "bloom": ("query_key_value",), "blip-2": ("q", "v", "q_proj", "v_proj"),
    "opt": ("q_proj", "v_proj"), "gptj": ("q_proj", "v_proj"),
    "gpt_neox": ("query_key_value",), "gpt_neo": ("q_proj", "v_proj"),
    "bert": ("query", "value"), "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"), "electra": ("query", "value"),
    "deberta-v2": ("query_proj", "value_proj"), "deberta": ("in_proj",),
    "layoutlm": ("query", "value"), "llama": ("q_proj", "v_proj"),
    "llama4": ("q_proj", "v_proj"), "chatglm": ("query_key_value",),
    "gpt_bigcode": ("c_attn",), "mpt": ("Wqkv",), "RefinedWebModel": ("query_key_value",),
    "RefinedWeb": ("query_key_value",), "falcon": ("query_key_value",),
    "btlm": ("c_proj", "c_attn"), "codegen": ("qkv_proj",), "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"), "stablelm": ("q_proj", "v_proj"),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"), "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"), "gemma3_text": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"), "qwen3": ("q_proj", "v_proj"),
    "nemotron_h": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "rwkv": ("key", "value", "receptance", "output"),
    "rwkv7": ("r_proj", "k_proj", "v_proj", "o_proj", "key", "value"),
}
_HALF = (torch.float16, torch.bfloat16)


class LoraLinear(nn.Module):
    """peft's `lora.Linear` around a Linear, Conv1D or Nf4Linear: `base_layer`, and
    `lora_A.default` [r, in] / `lora_B.default` [out, r] scaled by alpha / r."""

    def __init__(self, base: nn.Module, options: LoraOptions) -> None:
        super().__init__()
        in_features, out_features = linear_shape(base)
        self.base_layer = base
        self.quantized = isinstance(base, Nf4Linear)
        dropout: nn.Module = nn.Dropout(options.dropout) if options.dropout else nn.Identity()
        self.lora_dropout = nn.ModuleDict({ADAPTER_NAME: dropout})
        with torch.device("meta"):
            self.lora_A = nn.ModuleDict({ADAPTER_NAME: nn.Linear(
                in_features, options.rank, bias=False, dtype=ADAPTER_DTYPE)})
            self.lora_B = nn.ModuleDict({ADAPTER_NAME: nn.Linear(
                options.rank, out_features, bias=False, dtype=ADAPTER_DTYPE)})
        self.scaling = options.scaling

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        result = self.base_layer(x, *args, **kwargs)
        lora_a, lora_b = self.lora_A[ADAPTER_NAME], self.lora_B[ADAPTER_NAME]
        dropout = self.lora_dropout[ADAPTER_NAME]
        if self.quantized:  # peft lora/bnb.py Linear4bit.forward
            result = result.clone()  # "for 4bit, we need to defensively clone here"
            convert = not _autocast_enabled()
            expected = result.dtype
            if convert:
                x = _cast(x, _weight_dtype(lora_a))
            output = lora_b(lora_a(dropout(x))) * self.scaling
            return result + (output.to(expected) if convert else output)
        result_dtype = result.dtype  # peft lora/layer.py Linear.forward
        x = _cast(x, _weight_dtype(lora_a))
        result = result + lora_b(lora_a(dropout(x))) * self.scaling
        return result.to(result_dtype)


def _weight_dtype(layer: nn.Module) -> torch.dtype:
    weight = layer.weight  # an nn.Linear's (functional_call may have swapped in a tensor)
    assert isinstance(weight, torch.Tensor), type(weight)
    return weight.dtype


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """peft's `_cast_input_dtype`: a copy only when the dtypes differ."""
    return x if x.dtype == dtype else x.to(dtype=dtype)


def _autocast_enabled() -> bool:
    """peft asks CUDA's autocast; graphmem traces a CUDA AMP step under CPU autocast."""
    return torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")


# ----- applying them, and undoing it -----------------------------------------------------------
@dataclass
class _Undo:
    """What to put back: modules, parameters, requires_grad flags (innermost change last)."""

    modules: list[tuple[nn.Module, str, nn.Module]] = field(default_factory=list)
    params: list[tuple[nn.Module, str, nn.Parameter]] = field(default_factory=list)
    grads: list[tuple[nn.Parameter, bool]] = field(default_factory=list)

    def restore(self) -> None:
        for param, flag in reversed(self.grads):
            param.requires_grad_(flag)
        for owner, name, param in reversed(self.params):
            owner._parameters[name] = param
        for parent, name, module in reversed(self.modules):
            setattr(parent, name, module)


@contextlib.contextmanager
def fine_tuned(model: object, options: FinetuneOptions | None, optimizer: str | None,
               checkpointed: tuple[str, ...] = ()) -> Iterator[FinetuneReport | None]:
    """The model with `options` applied, for as long as the block runs; yields the report
    (None for a module that is neither a transformers model nor fine-tuned)."""
    if not isinstance(model, nn.Module):
        yield None
        return
    undo = _Undo()
    try:
        nf4 = lora = None
        if options is not None and options.qlora is not None:
            nf4 = _quantize(model, options.qlora, undo)
        if options is not None and options.lora is not None:
            lora = _add_lora(model, options.lora, undo)
        report = _report(model, lora, nf4, optimizer, checkpointed)
        yield report if report.hf or options is not None else None
    finally:
        undo.restore()


def _quantize(model: nn.Module, options: QloraOptions, undo: _Undo) -> Nf4Summary:
    skip = _kept_in_precision(model)
    replaced: list[Nf4Linear] = []
    for path, module in list(model.named_modules()):
        if path and _quantizable(module) and _should_convert(path, skip):
            replaced.append(Nf4Linear.like(module, options))
            _swap(model, path, replaced[-1], undo)
    if not replaced:
        raise GraphmemError("--qlora: the model has no nn.Linear layer to store in 4 bits")
    if options.upcast_frozen:
        _upcast_half_params(model, undo)
    total = sum((m.layout_bytes for m in replaced), NO_NF4)
    largest = max(m.dequantized_bytes for m in replaced)
    return Nf4Summary(len(replaced), total, options.compute_dtype, options.blocksize,
                      options.double_quant, largest, tuple(sorted(skip)))


def _quantizable(module: nn.Module) -> bool:
    """What transformers' replace_with_bnb_linear converts: exactly nn.Linear, or Conv1D."""
    conv1d = conv1d_class()
    return type(module) is nn.Linear or (conv1d is not None and isinstance(module, conv1d))


def _kept_in_precision(model: nn.Module) -> list[str]:
    """transformers' `get_keys_to_not_convert`: the output head, tied weights, the last
    parameter's module; nothing for a module that is not a transformers model."""
    try:
        from transformers import PreTrainedModel
        from transformers.quantizers.base import get_keys_to_not_convert
    except ImportError:
        return []
    if not isinstance(model, PreTrainedModel):
        return []
    return sorted(get_keys_to_not_convert(model))


def _should_convert(path: str, skip: list[str]) -> bool:
    """transformers' `should_convert_module`: a key skips the path it starts (at a module
    boundary) or ends."""
    try:
        from transformers.quantizers.quantizers_utils import should_convert_module
    except ImportError:
        return not any(path == key or path.startswith(f"{key}.") or path.endswith(key)
                       for key in skip)
    return bool(should_convert_module(path, skip))


def _upcast_half_params(model: nn.Module, undo: _Undo) -> None:
    """prepare_model_for_kbit_training: fp16/bf16 parameters (not the 4-bit ones) to fp32;
    a tied weight stays one parameter."""
    upcast: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, Nf4Linear):
            continue
        for name, param in list(module._parameters.items()):
            if param is None or param.dtype not in _HALF:
                continue
            if id(param) not in upcast:
                with torch.device("meta"):
                    upcast[id(param)] = nn.Parameter(torch.empty(param.shape,
                                                                 dtype=torch.float32),
                                                     requires_grad=param.requires_grad)
            undo.params.append((module, name, param))
            module._parameters[name] = upcast[id(param)]


def _add_lora(model: nn.Module, options: LoraOptions, undo: _Undo) -> LoraSummary:
    targets = options.targets or _default_targets(model)
    for param in model.parameters():  # peft freezes the whole base model
        undo.grads.append((param, param.requires_grad))
        param.requires_grad_(False)
    matched = [(path, module) for path, module in list(model.named_modules())
               if path and _targeted(path, targets)]
    if not matched:
        raise GraphmemError(f"--lora targets={','.join(targets)}: no module of the model has"
                            f" that name; its Linear layers: {_linear_names(model)}")
    adapters = []
    for path, module in matched:
        if not (isinstance(module, Nf4Linear) or _quantizable(module)):
            raise GraphmemError(f"--lora: {path} is a {type(module).__name__}; graphmem models"
                                " LoRA on Linear layers: target those")
        adapters.append(LoraLinear(module, options))
        _swap(model, path, adapters[-1], undo)
    params = sum(p.numel() for a in adapters for p in (*a.lora_A.parameters(),
                                                        *a.lora_B.parameters()))
    names = tuple(sorted({path.rpartition(".")[2] for path, _ in matched}))
    return LoraSummary(options.rank, options.alpha, options.dropout, names, len(adapters),
                       params, str(ADAPTER_DTYPE).removeprefix("torch."))


def _default_targets(model: nn.Module) -> tuple[str, ...]:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type in PEFT_DEFAULT_TARGETS:
        return PEFT_DEFAULT_TARGETS[model_type]
    what = f"model type {model_type!r}" if model_type else "a model that is not a transformers"
    raise GraphmemError(f"--lora: peft has no default target modules for {what}: name them,"
                        f" e.g. --lora targets=... (its Linear layers: {_linear_names(model)})")


def _targeted(path: str, targets: tuple[str, ...]) -> bool:
    """peft's match for a list of target_modules: the path is the name, or ends in .name."""
    return any(path == name or path.endswith(f".{name}") for name in targets)


def _linear_names(model: nn.Module) -> str:
    names = sorted({path.rpartition(".")[2] for path, m in model.named_modules()
                    if path and (_quantizable(m) or isinstance(m, Nf4Linear))})
    return ", ".join(names[:20]) or "none"


def _swap(model: nn.Module, path: str, new: nn.Module, undo: _Undo) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path)
    undo.modules.append((parent, name, getattr(parent, name)))
    setattr(parent, name, new)


# ----- the report ------------------------------------------------------------------------------
def _report(model: nn.Module, lora: LoraSummary | None, nf4: Nf4Summary | None,
            optimizer: str | None, checkpointed: tuple[str, ...]) -> FinetuneReport:
    params = _param_counts(model, nf4)
    slots = len(STATE_SLOTS.get(optimizer, ())) if optimizer else 0
    return FinetuneReport(params, hf_summary(model), lora, nf4, moe_summary(model),
                          checkpointed, pageable_optimizer_bytes=slots * params.trainable_bytes)


def _param_counts(model: nn.Module, nf4: Nf4Summary | None) -> ParamCounts:
    """Each parameter once (named_parameters drops tied duplicates); a 4-bit weight by its
    elements before packing, its bytes with its quantization constants."""
    trainable = frozen = trainable_bytes = frozen_bytes = 0
    for _, param in model.named_parameters():
        if isinstance(param, torch.Tensor) and param.dtype == torch.uint8:
            continue  # packed 4-bit codes: counted from the NF4 summary below
        size = param.numel() * param.element_size()
        if param.requires_grad and param.is_floating_point():
            trainable, trainable_bytes = trainable + param.numel(), trainable_bytes + size
        else:
            frozen, frozen_bytes = frozen + param.numel(), frozen_bytes + size
    quantized = nf4.bytes.weights if nf4 else 0
    frozen_bytes += nf4.bytes.total if nf4 else 0
    return ParamCounts(trainable + frozen + quantized, trainable, frozen + quantized, quantized,
                       trainable_bytes, frozen_bytes)


# ----- what the reports say --------------------------------------------------------------------
def finetune_notes(report: FinetuneReport | None, options: FinetuneOptions | None
                   ) -> tuple[str, ...]:
    """One line each: LoRA, NF4, MoE routing, gradient checkpointing, frozen parameters."""
    if report is None:
        return ()
    notes = []
    params = report.params
    if report.lora is not None:
        lora = report.lora
        notes.append(
            f"LoRA r={lora.rank}, alpha={lora.alpha:g} (scaling {lora.scaling:g}), dropout"
            f" {lora.dropout:g} on {lora.modules} Linear layers ({', '.join(lora.targets)}):"
            f" {params.trainable:,} trainable parameters ({lora.adapter_dtype}) of"
            f" {params.total:,}; the base is frozen: no gradients, no optimizer state")
    elif params.frozen:
        notes.append(f"{params.frozen:,} of {params.total:,} parameters are frozen"
                     " (requires_grad=False): no gradients, no optimizer state")
    if report.nf4 is not None:
        notes.append(_nf4_note(report.nf4))
    if report.moe is not None:
        moe = report.moe
        notes.append(f"mixture of experts: {moe.experts_per_token} of {moe.experts} experts per"
                     f" token: {moe.active_params_per_token:,} of {moe.total_params:,}"
                     " parameters active per token")
    if options is not None and options.gradient_checkpointing and report.checkpointed_layers:
        layers = report.checkpointed_layers
        notes.append(f"gradient checkpointing (use_reentrant=False) on {len(layers)} layers,"
                     f" as gradient_checkpointing_enable: {layers[0]} .. {layers[-1]}")
    return tuple(notes)


def _nf4_note(nf4: Nf4Summary) -> str:
    layout = nf4.bytes
    quant = "double quantization" if nf4.double_quant else "fp32 absmax"
    kept = f"; kept in precision: {', '.join(nf4.skipped)}" if nf4.skipped else ""
    return (f"QLoRA: {nf4.modules} Linear layers in NF4 (bitsandbytes, blocksize"
            f" {nf4.blocksize}, {quant}): {layout.weights:,} weights in"
            f" {format_bytes(layout.total)} ({format_bytes(layout.packed)} packed +"
            f" {format_bytes(layout.constants)} constants); each dequantized to"
            f" {nf4.compute_dtype} for its matmuls (the largest:"
            f" {format_bytes(nf4.largest_dequantized_bytes)}){kept}")
