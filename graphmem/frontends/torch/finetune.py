"""Fine-tuning options (LoRA, QLoRA, gradient checkpointing) and what applying them gave.

No torch here: the Request (graphmem/pipeline/request.py) holds the options, the PyTorch front
end applies them to the model before tracing (graphmem/frontends/torch/peft.py), and the
reports render the FinetuneReport (graphmem/report/json/finetune.py).

Defaults are peft's (`peft.LoraConfig`: r=8, lora_alpha=8, lora_dropout=0.0, and the target
modules of `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING` for the model type) and
transformers'/bitsandbytes' for QLoRA (`BitsAndBytesConfig(load_in_4bit=True,
bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=bfloat16)`,
as the QLoRA paper trains).
"""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.errors import GraphmemError
from graphmem.frontends.torch.nf4 import NF4_BLOCKSIZE, Nf4Bytes

LORA_RANK = 8  # peft LoraConfig.r
LORA_ALPHA = 8.0  # peft LoraConfig.lora_alpha
LORA_DROPOUT = 0.0  # peft LoraConfig.lora_dropout
QLORA_COMPUTE_DTYPE = "bfloat16"


@dataclass(frozen=True)
class LoraOptions:
    """LoRA adapters on the Linear layers named `targets` (the last part of the module path,
    as peft matches `target_modules`; () = peft's default for the model type)."""

    rank: int = LORA_RANK
    alpha: float = LORA_ALPHA
    dropout: float = LORA_DROPOUT
    targets: tuple[str, ...] = ()

    @property
    def scaling(self) -> float:
        """peft's `scaling = lora_alpha / r` (rsLoRA off)."""
        return self.alpha / self.rank


@dataclass(frozen=True)
class QloraOptions:
    """The base model's Linear layers in 4-bit NF4 (bitsandbytes), LoRA on top.

    `upcast_frozen`: what peft's `prepare_model_for_kbit_training` does before LoRA is added:
    every fp16/bf16 parameter that is not 4-bit (embeddings, norms, the output head) becomes
    fp32."""

    compute_dtype: str = QLORA_COMPUTE_DTYPE
    blocksize: int = NF4_BLOCKSIZE
    double_quant: bool = True
    upcast_frozen: bool = False


@dataclass(frozen=True)
class FinetuneOptions:
    """Parameter-efficient fine-tuning: `lora` adapters (None: no adapters, every parameter
    trains), `qlora` (the base in NF4; needs `lora`), and gradient checkpointing of every
    layer Hugging Face's `gradient_checkpointing_enable` wraps (use_reentrant=False)."""

    lora: LoraOptions | None = None
    qlora: QloraOptions | None = None
    gradient_checkpointing: bool = False


# ----- what applying them gave -----------------------------------------------------------------
@dataclass(frozen=True)
class ParamCounts:
    """Parameters by what training does with them. `total` counts every weight once (tied
    weights once), 4-bit weights by their elements in the unquantized model."""

    total: int
    trainable: int
    frozen: int
    quantized: int  # elements stored in NF4 (part of `frozen`)
    trainable_bytes: int
    frozen_bytes: int  # at their stored dtype (NF4: packed codes and constants)


@dataclass(frozen=True)
class LoraSummary:
    rank: int
    alpha: float
    dropout: float
    targets: tuple[str, ...]  # the names matched
    modules: int  # Linear layers with an adapter
    adapter_params: int  # sum of r x (in + out) over the adapted layers
    adapter_dtype: str  # peft casts adapters to fp32 (autocast_adapter_dtype=True)

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


@dataclass(frozen=True)
class Nf4Summary:
    modules: int  # Linear layers stored in NF4
    bytes: Nf4Bytes  # summed over them
    compute_dtype: str
    blocksize: int
    double_quant: bool
    # the largest weight dequantized at once (compute dtype), a transient of forward and
    # backward
    largest_dequantized_bytes: int
    skipped: tuple[str, ...]  # Linear layers left unquantized (the output head, tied weights)


@dataclass(frozen=True)
class MoeSummary:
    """A mixture of experts: each token runs `experts_per_token` of `experts` per layer."""

    experts: int
    experts_per_token: int
    expert_params: int  # parameters of all experts, every MoE layer
    total_params: int
    active_params_per_token: int  # total minus the experts a token does not run
    # forward FLOPs per token of the weight matmuls, 2 per weight used (attention scores and
    # elementwise ops depend on the sequence: they are in the traced FLOPs)
    flops_per_token_total: int  # every expert, as if dense
    flops_per_token_active: int


@dataclass(frozen=True)
class HfSummary:
    """A Hugging Face transformers model: which one, built how."""

    model_type: str
    architecture: str  # the class built
    dtype: str  # the parameters' dtype (the config's torch_dtype / dtype)
    max_positions: int | None  # max_position_embeddings, when the config has it
    attention: str  # the attention implementation transformers chose


@dataclass(frozen=True)
class FinetuneReport:
    """The model as analysed: a transformers model's facts, its parameters by what training
    does with them, and what LoRA, NF4, MoE routing and gradient checkpointing apply."""

    params: ParamCounts
    hf: HfSummary | None = None
    lora: LoraSummary | None = None
    nf4: Nf4Summary | None = None
    moe: MoeSummary | None = None
    checkpointed_layers: tuple[str, ...] = ()  # gradient checkpointing: the module paths
    # a paged optimizer (bitsandbytes paged_adamw) keeps its state in CUDA managed memory,
    # which the driver may evict to the host under pressure: this much of the peak
    pageable_optimizer_bytes: int = 0


# ----- the command line's spellings ------------------------------------------------------------
_COMPUTE_DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16",
                   "float16": "float16", "fp32": "float32", "float32": "float32"}
_YES = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}


def parse_lora_spec(text: str) -> LoraOptions:
    """`r=16,alpha=32,dropout=0.05,targets=q_proj,v_proj` (every key optional; a name after
    targets= continues the list)."""
    values = _key_values("--lora", text, ("r", "rank", "alpha", "dropout", "targets"))
    rank = _number("--lora", values, ("r", "rank"), int, LORA_RANK)
    return LoraOptions(rank=int(rank),
                       alpha=float(_number("--lora", values, ("alpha",), float, LORA_ALPHA)),
                       dropout=float(_number("--lora", values, ("dropout",), float,
                                             LORA_DROPOUT)),
                       targets=tuple(values.get("targets", ())))


def parse_qlora_spec(text: str) -> QloraOptions:
    """`compute=bf16,blocksize=64,double-quant=yes,upcast=no` (every key optional)."""
    values = _key_values("--qlora", text, ("compute", "blocksize", "double-quant",
                                           "double_quant", "upcast"))
    compute = _one("--qlora", values, ("compute",)) or "bf16"
    if compute.lower() not in _COMPUTE_DTYPES:
        raise GraphmemError(f"--qlora compute={compute}: choose bf16, fp16 or fp32")
    return QloraOptions(
        compute_dtype=_COMPUTE_DTYPES[compute.lower()],
        blocksize=int(_number("--qlora", values, ("blocksize",), int, NF4_BLOCKSIZE)),
        double_quant=_flag("--qlora", values, ("double-quant", "double_quant"), True),
        upcast_frozen=_flag("--qlora", values, ("upcast",), False))


def _key_values(flag: str, text: str, keys: tuple[str, ...]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    current = None
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, has_value, value = item.partition("=")
        if has_value:
            current = key.strip().lower()
            if current not in keys:
                raise GraphmemError(f"{flag} {text}: unknown key {key.strip()!r}; known:"
                                    f" {', '.join(keys)}")
            values.setdefault(current, []).append(value.strip())
        elif current == "targets":
            values[current].append(item)
        else:
            raise GraphmemError(f"{flag} {text}: expected KEY=VALUE items, e.g. {flag}"
                                " r=16,alpha=32,targets=q_proj,v_proj")
    return values


def _one(flag: str, values: dict[str, list[str]], keys: tuple[str, ...]) -> str | None:
    given = [value for key in keys for value in values.get(key, [])]
    if len(given) > 1:
        raise GraphmemError(f"{flag}: {keys[0]} given {len(given)} times: give it once")
    return given[0] if given else None


def _number(flag: str, values: dict[str, list[str]], keys: tuple[str, ...],
            kind: type[int] | type[float], default: float) -> float:
    text = _one(flag, values, keys)
    if text is None:
        return default
    try:
        return kind(text)
    except ValueError:
        raise GraphmemError(f"{flag} {keys[0]}={text}: give a"
                            f" {'whole number' if kind is int else 'number'}") from None


def _flag(flag: str, values: dict[str, list[str]], keys: tuple[str, ...], default: bool
          ) -> bool:
    text = _one(flag, values, keys)
    if text is None:
        return default
    if text.lower() not in _YES:
        raise GraphmemError(f"{flag} {keys[0]}={text}: give yes or no")
    return _YES[text.lower()]
