"""One Request: everything graphmem is asked to analyse, for both front doors.

The command line (graphmem/cli/) and the Python API (graphmem/api.py) build a Request; the
pipeline (graphmem/pipeline/run.py `analyze`) runs it. Every re-run with one change (a
checkpoint plan, AMP, another batch, a dim for max batch and sweeps, a pooled FC head) is
`analyze(dataclasses.replace(request, ...))`.

`check_request` refuses, before any file is read or model traced, everything that needs no
model: its messages name the command-line flag, as the CLI shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from graphmem.core.conventions import (
    MAX_DIM_VALUE,
    MAX_GRAD_ACCUM,
    Amp,
    AmpPolicy,
    Optimizer,
    TrainingOptions,
    closed,
)
from graphmem.core.routing import DEFAULT_ROUTING, MoeRouting
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.spec import is_hf_config, is_model_spec
from graphmem.passes.dims import check_dim_value
from graphmem.pipeline.imports import ModelImports
from graphmem.runtime_models.select import check_ort_optimization, check_runtime
from graphmem.runtime_models.vocabulary import ArenaExtend, Runtime

# the options' own modules are imported where the option is given: an analysis asking for no
# distributed job, serving, fine-tuning or GPU imports none of them
if TYPE_CHECKING:
    from graphmem.distributed.serving import ServingConfig
    from graphmem.distributed.strategies import DistributedConfig
    from graphmem.frontends.torch.finetune import FinetuneOptions, LoraOptions, QloraOptions
    from graphmem.frontends.torch.weight_layout import WeightQuantOptions

# ZeRO's reduce buffer holds this many elements of up to 8 bytes: its bytes stay below 2**62
MAX_BUCKET_ELEMENTS = 1 << 58
MAX_THREADS = 1024  # onnxruntime starts one OS thread each: more is a typo, not a machine



@dataclass(frozen=True)
class SweepRequest:
    dim: str  # as given; "batch" also names the model's batch dim, whatever it is called
    values: tuple[int, ...]


@dataclass(frozen=True)
class PooledHead:
    """An FC layer reading a flattened feature map, traced with global average pooling first
    (graphmem/frontends/torch/rewrites.py): the FC-head suggestion's change."""

    path: str  # module path of the nn.Linear
    positions: int  # spatial positions per channel it reads (H*W)


@dataclass(frozen=True)
class RuntimeOptions:
    """Model what a runtime holds (graphmem/runtime_models/)."""

    name: Runtime | None = None  # None: the default for the input (ort-cpu, ort-cuda, ...)
    ort_optimization: str | None = None  # ort-cpu: disabled | basic | extended | all
    threads: int | None = None  # ort-cpu: intra-op threads (default: one per core)
    # ort-cpu and ort-cuda: how onnxruntime's arena grows (its arena_extend_strategy)
    arena_extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO


@dataclass(frozen=True)
class KvCacheOptions:
    """The decoder KV cache. With neither `auto` nor `shape`, an ONNX graph's past inputs give
    it where it has them (and nothing is said where it has not)."""

    auto: bool = False  # the cache must be found: past inputs, or the attention modules
    shape: tuple[int, int, int] | None = None  # layers, kv heads, head dim: wins
    dtype: str | None = None  # default: the model's (or the past inputs')
    # the model's position limit (its max_position_embeddings): PyTorch models with a Hugging
    # Face config have it; for ONNX give it (--max-context); the longest context stops there
    max_context: int | None = None


@dataclass(frozen=True)
class SuggestOptions:
    """What to change so the model fits (graphmem/suggest/driver.py)."""

    enabled: bool | None = None  # None: only for a training step over its budget
    budget_bytes: int | None = None  # the peak to aim at; default: the GPU's usable memory
    budget_share: float | None = None  # ... or this share of the GPU's usable memory
    budget_text: str = ""  # as the user gave it, for messages


@dataclass(frozen=True)
class Request:
    """One analysis to run. `model`: an .onnx path, a `file.py:fn` / `pkg.mod:fn` spec, or an
    nn.Module; `inputs` (PyTorch): example tensors, TensorSpecs, "32x3x224x224:float32"
    strings or shape tuples."""

    model: object
    inputs: tuple[object, ...] = ()
    example_inputs: str | None = None  # PyTorch: FILE.py:FN returning the inputs
    label: str | None = None  # how reports name the model (default: the path or spec)
    batch: int | None = None  # ONNX: binds the batch axis (passes/dims.py)
    dims: Mapping[str, int] = field(default_factory=dict)  # ONNX: named dynamic dims
    gpu: str | None = None  # a name from `graphmem gpus`
    cuda_reserve_bytes: int | None = None  # non-tensor CUDA memory (default: measured)
    training: TrainingOptions | None = None  # None: inference
    runtime: RuntimeOptions | None = None  # None: no runtime model
    distributed: DistributedConfig | None = None  # per-GPU memory of a training job
    kv_cache: KvCacheOptions | None = None  # None: no KV cache
    serving: ServingConfig | None = None  # --serve: paged KV cache, concurrent sequences
    suggest: SuggestOptions = field(default_factory=SuggestOptions)
    sweep: SweepRequest | None = None  # ONNX: one dim over values
    module_depth: int = 2  # group by module path at this depth
    plan: bool = True  # schedule, arena, roofline, max batch, sweep (pipeline/planning.py)
    pooled_heads: tuple[PooledHead, ...] = ()  # PyTorch: FC heads traced pooled
    # PyTorch: LoRA / QLoRA adapters and gradient checkpointing (frontends/torch/peft.py)
    finetune: FinetuneOptions | None = None
    # PyTorch: Linear weights stored as torchao's int8/int4 weight-only (torch/weight_quant.py)
    weights: WeightQuantOptions | None = None
    # PyTorch: how a mixture of experts' router is assumed to choose (core/routing.py)
    moe_routing: MoeRouting = DEFAULT_ROUTING
    notes: tuple[str, ...] = ()  # what `resolve` built (a config's model, its inputs): reported
    # what `resolve` assumed because the user did not say (a config's default batch or seq):
    # reported as warnings, not notes
    assumptions: tuple[str, ...] = ()
    # the model read once, each shape imported once, for this chain of re-runs
    # (graphmem/pipeline/imports.py): set by `resolve`, carried by every `replace`
    imports: ModelImports | None = field(default=None, compare=False, repr=False)

    @property
    def is_torch(self) -> bool:
        """A PyTorch model (a module object, a spec, a Hugging Face config file, folder or
        dict), else an ONNX file."""
        model = self.model
        if isinstance(model, PurePath):
            return is_hf_config(str(model))
        return not isinstance(model, str) or is_model_spec(model) or is_hf_config(model)

    @property
    def is_hf_config(self) -> bool:
        """A Hugging Face config not built yet: a config.json, its folder, or a dict."""
        model = self.model
        if isinstance(model, Mapping):
            return True
        return isinstance(model, str | PurePath) and is_hf_config(str(model))

    def check(self) -> None:
        check_request(self)


def rerun_request(request: Request, **changes: Any) -> Request:
    """`request` with `changes`, as a re-run asks for it: the bare analysis, unplanned, with
    no suggestions, runtime model, distributed or KV-cache report (the caller reads peaks,
    FLOPs and latencies)."""
    return replace(request, plan=False, suggest=SuggestOptions(enabled=False), runtime=None,
                   distributed=None, kv_cache=None, serving=None, sweep=None,
                   **changes)


def check_request(request: Request) -> None:
    """Every option that needs no model, refused with one clear line before any work."""
    if request.module_depth < 1:
        raise GraphmemError(f"--depth {request.module_depth}: give 1 or more (1 = top-level"
                            " modules)")
    if request.training is not None:
        _check_training(request.training)
    if request.is_torch:
        _check_torch(request)
        _check_weights(request)
    else:
        _check_onnx(request)
    if request.gpu is not None:
        from graphmem.devices.gpus import find_gpu

        find_gpu(request.gpu)  # a typo fails before the model is read
    if request.runtime is not None:
        _check_runtime(request)
    _check_distributed(request)
    _check_kv_cache(request)
    _check_serving(request)
    _check_suggest(request.suggest, request.gpu)


def _check_training(training: TrainingOptions) -> None:
    _check_range("--grad-accum", training.grad_accum, 1, MAX_GRAD_ACCUM)
    closed(Optimizer, training.optimizer, "--optimizer")
    if training.amp is not None:
        closed(Amp, training.amp, "--amp")
    if training.amp_policy not in tuple(AmpPolicy):
        raise GraphmemError(f"amp_policy {training.amp_policy!r}: choose cuda or cpu")


def _check_torch(request: Request) -> None:
    """A PyTorch model's options, before its file is imported: shapes from the inputs."""
    from graphmem.frontends.torch.import_step import tensor_specs  # imports torch

    if request.is_hf_config:
        _check_config_dims(request)
    elif request.batch is not None or request.dims:
        raise GraphmemError("--batch/--dim bind ONNX dims; for a PyTorch model give the"
                            " shapes with --input, e.g. --input 32x3x224x224")
    if request.sweep is not None:
        raise GraphmemError("--sweep varies a dynamic dim of an ONNX model; a PyTorch model is"
                            " traced at fixed shapes: run it once per --input instead")
    if request.inputs and request.example_inputs:
        raise GraphmemError("give the inputs either with --input or with --example-inputs,"
                            " not both")
    if request.inputs:
        tensor_specs(request.inputs)
    if request.finetune is not None:
        _check_finetune(request.finetune, request.training is not None)


def _check_config_dims(request: Request) -> None:
    """A Hugging Face config's input_ids: --batch and --dim seq=, or --input, not both."""
    from graphmem.frontends.torch.hf_config import SEQ_DIMS  # imports torch

    unknown = [name for name in request.dims if name not in SEQ_DIMS]
    if unknown:
        raise GraphmemError(f"--dim {unknown[0]}: a Hugging Face config's input is input_ids"
                            " [batch, seq]: give --batch N and --dim seq=S")
    if (request.batch is not None or request.dims) and (request.inputs
                                                        or request.example_inputs):
        raise GraphmemError("--batch/--dim seq= give the shape of input_ids; --input gives it"
                            " too: use one or the other")
    if request.batch is not None:
        check_dim_value(f"--batch {request.batch}", request.batch)
    for name, value in request.dims.items():
        check_dim_value(f"--dim {name}={value}", value)


MAX_LORA_RANK = 1 << 16  # far above any published adapter (r of 8 to 256)


def _check_finetune(options: FinetuneOptions, training: bool) -> None:
    if options.gradient_checkpointing and not training:
        raise GraphmemError("--gradient-checkpointing recomputes activations in backward:"
                            " add --train")
    if options.qlora is not None and options.lora is None:
        raise GraphmemError("qlora trains LoRA adapters on the 4-bit base: give lora too"
                            " (--qlora implies it on the command line)")
    if options.lora is not None:
        _check_lora(options.lora)
    if options.qlora is not None:
        _check_qlora(options.qlora)


def _check_lora(lora: LoraOptions) -> None:
    _check_range("--lora r", lora.rank, 1, MAX_LORA_RANK)
    if not lora.alpha > 0:
        raise GraphmemError(f"--lora alpha={lora.alpha}: give a number above 0 (peft's"
                            " scaling is alpha / r)")
    if not 0 <= lora.dropout < 1:
        raise GraphmemError(f"--lora dropout={lora.dropout}: give a probability from 0 to"
                            " below 1")
    for name in lora.targets:
        if not all(part.isidentifier() or part.isdigit() for part in name.split(".")):
            raise GraphmemError(f"--lora targets={name!r}: give module names such as q_proj"
                                " (the last part of the module path)")


def _check_qlora(qlora: QloraOptions) -> None:
    from graphmem.frontends.torch.nf4 import BLOCKSIZES

    if qlora.compute_dtype not in ("bfloat16", "float16", "float32"):
        raise GraphmemError(f"--qlora compute={qlora.compute_dtype}: choose bf16, fp16 or"
                            " fp32")
    if qlora.blocksize not in BLOCKSIZES:
        raise GraphmemError(f"--qlora blocksize={qlora.blocksize}: bitsandbytes takes"
                            f" {', '.join(map(str, BLOCKSIZES))}")


def _check_weights(request: Request) -> None:
    if request.weights is None:
        return
    from graphmem.frontends.torch.weight_layout import INT4_GROUP_SIZES

    if request.finetune is not None and request.finetune.qlora is not None:
        raise GraphmemError("--weights and --qlora both quantize the Linear layers: give one")
    if request.finetune is not None and request.finetune.lora is not None:
        raise GraphmemError("--lora on --weights layers (LoRA over torchao-quantized Linear"
                            " layers) is not modelled: use --qlora for a quantized base")
    if request.weights.group_size not in INT4_GROUP_SIZES:
        raise GraphmemError(f"--weights group size {request.weights.group_size}: choose one of"
                            f" {', '.join(map(str, INT4_GROUP_SIZES))}")


def _check_onnx(request: Request) -> None:
    loss = request.training.loss if request.training is not None else None
    given = [flag for flag, value in (("--input", request.inputs), ("--loss", loss),
                                      ("--example-inputs", request.example_inputs),
                                      ("--weights", request.weights)) if value]
    if given:
        raise GraphmemError(
            f"{', '.join(given)} apply to PyTorch models (file.py:fn); ONNX models take"
            " --batch/--dim (and --train computes cross-entropy on the first output)")
    if request.pooled_heads:
        raise GraphmemError("pooled_heads rewrite a PyTorch model; an ONNX graph is analysed"
                            " as exported")
    if request.finetune is not None:
        raise GraphmemError("--lora/--qlora/--gradient-checkpointing change a PyTorch model"
                            " (file.py:fn or a Hugging Face config.json); an ONNX graph is"
                            " analysed as exported")
    if request.batch is not None:
        check_dim_value(f"--batch {request.batch}", request.batch)
    for name, value in request.dims.items():
        check_dim_value(f"--dim {name}={value}", value)


def _check_runtime(request: Request) -> None:
    options = request.runtime
    assert options is not None
    if options.name is not None:
        check_runtime(options.name, not request.is_torch, request.gpu is not None,
                      request.training is not None)
    check_ort_optimization(options.ort_optimization)
    _check_range("--threads", options.threads, 1, MAX_THREADS)


def _check_distributed(request: Request) -> None:
    config = request.distributed
    if config is None:
        return
    if request.training is None:
        raise GraphmemError("--gpus/--strategy/--tensor-parallel describe a training job:"
                            " add --train (optimizer state and gradients are what they"
                            " shard)")
    config.check()
    bucket = config.zero.reduce_bucket_size
    if not 1 <= bucket <= MAX_BUCKET_ELEMENTS:
        raise GraphmemError(f"--reduce-bucket-size {bucket}: give 1 to {MAX_BUCKET_ELEMENTS}"
                            " elements (a bucket holds one or more)")


def _check_kv_cache(request: Request) -> None:
    options = request.kv_cache
    if options is None:
        return
    if (options.auto or options.shape is not None) and request.training is not None:
        raise GraphmemError("--kv-cache is for inference (a decoder generating tokens):"
                            " drop --train")
    if options.shape is not None:
        text = ",".join(map(str, options.shape))
        if len(options.shape) != 3 or any(value < 1 for value in options.shape):
            raise GraphmemError(f"--kv-cache {text}: give LAYERS,KV_HEADS,HEAD_DIM as three"
                                " positive integers, e.g. --kv-cache 32,8,128")
        for value in options.shape:
            if value > MAX_DIM_VALUE:
                raise GraphmemError(f"--kv-cache {text}: {value} is implausibly large"
                                    f" (the limit is {MAX_DIM_VALUE}); check the numbers")
    if options.dtype is not None:
        from graphmem.distributed.attach import dtype_bytes

        dtype_bytes(options.dtype)
    _check_range("--max-context", options.max_context, 1, MAX_DIM_VALUE)


def _check_serving(request: Request) -> None:
    serving = request.serving
    if serving is None:
        return
    serving.check()
    if request.training is not None:
        raise GraphmemError("--serve models inference (a decoder generating tokens): drop"
                            " --train")
    if request.gpu is None:
        raise GraphmemError("--serve sizes the KV cache on a GPU: add --gpu NAME (see"
                            " 'graphmem gpus')")


def _check_suggest(options: SuggestOptions, gpu: str | None) -> None:
    text = options.budget_text or str(options.budget_bytes or options.budget_share)
    if options.budget_bytes is not None and options.budget_bytes <= 0:
        raise GraphmemError(f"--memory-budget {text}: give a size above 0")
    if options.budget_share is not None and gpu is None:
        raise GraphmemError(f"--memory-budget {text} is a share of the GPU's usable"
                            " memory: add --gpu NAME, or give a size such as 12GiB")


def _check_range(flag: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise GraphmemError(f"{flag} {value}: give a whole number from {low} to {high}")
