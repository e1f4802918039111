"""The option table: every option of `graphmem analyze` and of the Python API, one entry each.

An entry names the option once: its API keyword (also the argparse dest), its command-line
spellings, how a text value is read, its closed vocabulary or choices, its default, its help
and argparse group, and the part of the Request it feeds. The command line's parser is
generated from it (graphmem/cli/option_flags.py), `graphmem.api.build_request` accepts exactly
its keywords (graphmem/options/values.py), and one function turns the values into a Request
with one set of refusals (graphmem/options/build.py, refusals.py). A new flag is one entry
here and the code that reads its value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from graphmem.core.conventions import DEFAULT_OPTIMIZER, Amp, Optimizer, Strategy
from graphmem.core.routing import BALANCED
from graphmem.distributed.vocabulary import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    ENGINES,
    KV_CACHE_DTYPES,
    LAYOUTS,
    SCHEDULES,
)
from graphmem.options.text import dim_binding, memory_limit, size_bytes
from graphmem.runtime_models.vocabulary import ORT_OPTIMIZATION_LEVELS, ArenaExtend, Runtime

DEFAULT_FSDP_DEPTH = 2


class Kind(Enum):
    """How the command line takes the option."""

    VALUE = "value"  # --flag VALUE
    SWITCH = "switch"  # --flag (True when given)
    REPEAT = "repeat"  # --flag VALUE, repeatable: a list
    OPTIONAL = "optional"  # --flag or --flag VALUE (given bare: "")


class Group(StrEnum):
    """The argparse group an option is listed under (GENERAL: the parser itself)."""

    GENERAL = ""
    DISTRIBUTED = "distributed training (with --train) and KV cache"
    SERVING = "serving an LLM (--serve, with --gpu): paged KV cache as vLLM sizes it"
    SUGGEST = "suggestions (what to change so the model fits)"
    TORCH = "PyTorch models (MODEL is file.py:fn or pkg.mod:fn)"
    FINETUNE = ("fine-tuning (PyTorch models and Hugging Face configs; see"
                " docs/llm-finetuning.md)")
    PYTHON = "the Python API only"  # no flag: a Python object, or a re-run's switch


OUTPUT = "output"  # what an output flag feeds: a file or the terminal, not the Request
_SAME = object()  # cli_default: the same as default


@dataclass(frozen=True)
class Option:
    keyword: str  # the API keyword and the argparse dest
    feeds: str  # the Request field it feeds (OUTPUT: the command line's outputs)
    help: str
    flags: tuple[str, ...] = ()  # command-line spellings, the first the name; () Python only
    group: Group = Group.GENERAL
    kind: Kind = Kind.VALUE
    parse: Callable[[str], object] | None = None  # text -> value (raises ValueError/SpecError)
    vocabulary: type[StrEnum] | None = None  # a closed vocabulary: the value is its member
    choices: tuple[str, ...] = ()  # a closed list of words (the value stays the text)
    python_words: tuple[str, ...] = ()  # words Python also takes (runtime="auto")
    default: object = None  # Python's default
    cli_default: object = _SAME  # the command line's, where it differs
    metavar: str | None = None

    @property
    def command_line_default(self) -> object:
        return self.default if self.cli_default is _SAME else self.cli_default

    @property
    def flag(self) -> str:
        """How messages name it on the command line."""
        return self.flags[0] if self.flags else self.keyword


def _option(keyword: str, feeds: str, help: str, *flags: str, **more: Any) -> Option:
    """An entry; its flag is the keyword spelled `--with-dashes` unless `flags` are given."""
    return Option(keyword, feeds, help, flags or (f"--{keyword.replace('_', '-')}",), **more)


def _python(keyword: str, feeds: str, help: str, default: object = None) -> Option:
    return Option(keyword, feeds, help, (), Group.PYTHON, default=default)


_D, _S, _T, _F = Group.DISTRIBUTED, Group.SERVING, Group.TORCH, Group.FINETUNE
_SWITCH, _REPEAT = Kind.SWITCH, Kind.REPEAT
_SERVING_SHARE = ("the engine's share (default: the engine's; vLLM"
                  f" {DEFAULT_GPU_MEMORY_UTILIZATION}, SGLang by GPU size, TensorRT-LLM 0.9)")

GENERAL: tuple[Option, ...] = (
    _option("gpu", "gpu", "GPU name from 'graphmem gpus' (e.g. t4, a100-80gb)"),
    _option("batch", "batch", "bind the batch axis: a dim named like a batch, else a dynamic"
            " axis 0 of the inputs", parse=int),
    _option("dims", "dims", "bind a named dynamic dim (repeatable)", "--dim", kind=_REPEAT,
            parse=dim_binding, metavar="NAME=VALUE"),
    _option("json", OUTPUT, "write the JSON result ('-' for stdout)", metavar="PATH"),
    _option("html", OUTPUT, "write the HTML report here (default: ./<model>.graphmem.html)",
            metavar="PATH"),
    _option("no_html", OUTPUT, "do not write the HTML report", kind=_SWITCH, default=False),
    _option("verbose", OUTPUT, "print every section after the summary (tables, schedule,"
            " arena plan, roofline, runtime model, suggestions, notes)", kind=_SWITCH,
            default=False),
    _option("cuda_reserve_bytes", "cuda_reserve_bytes", "non-tensor CUDA memory to assume"
            " (default: measured per GPU generation: docs/runtime-models.md)",
            "--cuda-reserve", parse=size_bytes, metavar="SIZE"),
    _option("module_depth", "module_depth", "group FLOPs, parameters and peak memory by"
            " module path at depth N", "--depth", parse=int, default=2, metavar="N"),
    _option("runtime", "runtime", "model what this runtime holds (default: ort-cuda for ONNX"
            " with --gpu, ort-cpu for ONNX without, torch-cuda for PyTorch with --gpu,"
            " torch-cpu without: PyTorch on the CPU, kernels' scratch included)",
            vocabulary=Runtime, python_words=("auto", "default")),
    _option("ort_optimization", "runtime", "ort-cpu: the session's graph optimization level;"
            " graphmem plans the graph onnxruntime optimizes at that level (default: all,"
            " onnxruntime's default, for models with up to 256 MiB of weights; above, the"
            " graph as written unless a level is given)", choices=ORT_OPTIMIZATION_LEVELS),
    _option("ort_arena_extend", "runtime", "ort-cuda, ort-cpu: how onnxruntime's arena grows,"
            " its arena_extend_strategy (default: next-power-of-two, onnxruntime's"
            " kNextPowerOfTwo; same-as-requested: kSameAsRequested)",
            choices=tuple(str(e) for e in ArenaExtend),
            cli_default=str(ArenaExtend.NEXT_POWER_OF_TWO)),
    _option("threads", "runtime", "ort-cpu: onnxruntime's intra-op threads; torch-cpu:"
            " PyTorch's (oneDNN keeps some scratch per thread); default: one per core",
            parse=int, metavar="N"),
    _option("sweep", "sweep", "peak, fit, latency and throughput at each value of a dim, e.g."
            " batch=1,2,4,...,256 (ONNX models)", metavar="DIM=VALUES"),
)

DISTRIBUTED: tuple[Option, ...] = (
    _option("gpus", "distributed", "data-parallel ranks: per-GPU memory under --strategy",
            group=_D, parse=int, metavar="N"),
    _option("strategy", "distributed", "ddp, zero1, zero2, zero3 (DeepSpeed) or fsdp (full"
            " shard); default ddp", group=_D, vocabulary=Strategy),
    _option("tensor_parallel", "distributed", "Megatron-style tensor parallel degree (job size"
            " = N x T x P x C GPUs)", group=_D, parse=int, metavar="T"),
    _option("pipeline_parallel", "distributed", "pipeline stages: the layers split into P"
            " consecutive stages; each rank's in-flight micro-batches per --pipeline-schedule",
            group=_D, parse=int, metavar="P"),
    _option("micro_batches", "distributed", "micro-batches per step through the pipeline"
            " (default P); the traced batch is one micro-batch", group=_D, parse=int,
            metavar="M"),
    _option("pipeline_schedule", "distributed", "1f1b (default), interleaved (Megatron-LM's,"
            " with --virtual-stages) or gpipe", group=_D, choices=SCHEDULES),
    _option("virtual_stages", "distributed", "model chunks per pipeline rank (interleaved"
            " schedule)", group=_D, parse=int, metavar="V"),
    _option("context_parallel", "distributed", "the sequence split over C ranks (ring"
            " attention)", group=_D, parse=int, metavar="C"),
    _option("expert_parallel", "distributed", "a mixture of experts' routed experts sharded"
            " over E ranks", group=_D, parse=int, metavar="E"),
    _option("sequence_parallel", "distributed", "with --tensor-parallel: norm, dropout and"
            " residual activations split by T too (Megatron-LM's sequence parallel)",
            group=_D, kind=_SWITCH, default=False),
    _option("state_layout", "distributed", "bytes of parameters/gradients/optimizer state:"
            " traced (default, what the graph holds), zero-paper (2+2+12 bytes for Adam) or"
            " deepspeed (its estimators' 2+2+4+4+8)", group=_D, choices=LAYOUTS),
    _option("reduce_bucket_size", "distributed", "DeepSpeed reduce_bucket_size (default"
            " 500000000 elements)", group=_D, parse=int, metavar="ELEMENTS"),
    _option("fsdp_depth", "distributed", "FSDP units are the modules at this depth (default"
            " 2: h.0, h.1...)", group=_D, parse=int, default=DEFAULT_FSDP_DEPTH, metavar="N"),
    _option("kv_cache", "kv_cache", "decoder KV cache: its size in batch and context and the"
            " longest context that fits (ONNX past_key_values inputs are found without it)",
            group=_D, metavar="auto|LAYERS,KV_HEADS,HEAD_DIM"),
    _option("kv_dtype", "kv_cache", "dtype of the KV cache: float32, float16, bfloat16,"
            " float8, fp8, fp8_e4m3, fp8_e5m2 or int8 (default: the model's or the past"
            " inputs')", group=_D, metavar="DTYPE"),
    _option("kv_cache_dtype", "kv_cache", "vLLM's spelling of --kv-dtype (auto: the model's"
            " dtype); fp8 holds a token in half of bf16's bytes", group=_D,
            choices=KV_CACHE_DTYPES, metavar="|".join(KV_CACHE_DTYPES)),
    _option("max_context", "kv_cache", "the model's position limit (max_position_embeddings):"
            " the longest context stops there (a PyTorch model's Hugging Face config gives"
            " it)", group=_D, parse=int, metavar="N"),
)

SERVING: tuple[Option, ...] = (
    _option("serve", "serving", "how many sequences of --context tokens fit at once, and the"
            " longest context; --tensor-parallel T splits weights and KV heads, --gpus N"
            " serves N / T replicas", group=_S, kind=_SWITCH, default=False,
            python_words=ENGINES),  # serve="sglang": served by that engine
    _option("context", "serving", "tokens per sequence (prompt + output; default: the model's"
            " position limit)", group=_S, parse=int, metavar="N"),
    _option("engine", "serving", "the serving engine whose reservation sizes the cache"
            " (default vllm; docs/serving.md names the versions)", group=_S, choices=ENGINES,
            metavar="|".join(ENGINES)),
    _option("enforce_eager", "serving", "vLLM without CUDA graphs (no graph memory reserved)",
            group=_S, kind=_SWITCH),
    _option("block_size", "serving", "tokens per KV-cache block (default: the engine's; vLLM"
            f" {DEFAULT_BLOCK_SIZE}, SGLang 1, TensorRT-LLM 32)", "--block-size",
            "--page-size", "--tokens-per-block", group=_S, parse=int, metavar="N"),
    _option("gpu_memory_utilization", "serving", _SERVING_SHARE, "--gpu-memory-utilization",
            "--mem-fraction-static", "--free-gpu-memory-fraction", group=_S, parse=float,
            metavar="SHARE"),
    _option("max_batched_tokens", "serving", "tokens of the prefill step whose activations are"
            " reserved (default: --context; vLLM's max_num_batched_tokens)", group=_S,
            parse=int, metavar="N"),
)

SUGGEST: tuple[Option, ...] = (
    _option("suggest", "suggest", "suggest checkpointing (--train), AMP, batch, in-place ops,"
            " FC heads and grouped convs, each saving re-analysed", group=Group.SUGGEST,
            kind=_SWITCH, cli_default=False),  # Python: None, only a step over its budget
    _option("memory_budget", "suggest", "the peak to aim at: a size (12GiB) or a share of the"
            " --gpu's usable memory (80%); default: the GPU's usable memory. Implies"
            " --suggest", group=Group.SUGGEST, parse=memory_limit, metavar="LIMIT"),
)

TORCH: tuple[Option, ...] = (
    _option("inputs", "inputs", "an example input, e.g. 32x3x224x224 or 4x1024:int64 (repeat"
            " for each positional input); NAME=SHAPE passes it as a keyword, e.g."
            " attention_mask=4x1024:int64", "--input", group=_T, kind=_REPEAT,
            metavar="[NAME=]SHAPE[:DTYPE]"),
    _option("example_inputs", "example_inputs", "a function returning the example inputs (a"
            " tensor or a tuple of them), called on the meta device; instead of --input",
            group=_T, metavar="FILE.py:FN"),
    _option("train", "training", "analyze one whole training step (forward, backward,"
            " update)", group=_T, kind=_SWITCH, default=False),
    _option("optimizer", "training", f"with --train (default {DEFAULT_OPTIMIZER})", group=_T,
            vocabulary=Optimizer, default=DEFAULT_OPTIMIZER, cli_default=None),
    _option("amp", "training", "autocast precision", group=_T, vocabulary=Amp),
    _option("grad_accum", "training", "micro-batches per optimizer step (memory is per"
            " micro-batch)", group=_T, parse=int, default=1, metavar="N"),
    _option("loss", "training", "the training loss: mse (mean squared error against a zero"
            " target of the output's shape: a diffusion model's noise prediction), or"
            " FILE.py:FN, loss(output) -> scalar (default: cross-entropy)", group=_T,
            metavar="mse|FILE.py:FN"),
    _option("weights", "weights", "store the nn.Linear weights as torchao's int8 or int4"
            " weight-only quantization does (docs/quantized.md); MODULES: path patterns, e.g."
            " int4:layers.*.mlp", group=_T, metavar="int8|int4|int4-tiled[:MODULES]"),
    _option("moe_routing", "moe_routing", "how a mixture of experts' router chooses (its"
            " choice is data): balanced (default; tokens x top_k spread evenly over the"
            " experts), worst (the same top_k experts take every token) or capacity=F (each"
            " expert up to F x tokens x top_k / experts tokens)", group=_T, default=BALANCED,
            metavar="balanced|worst|capacity=F"),
)

FINETUNE: tuple[Option, ...] = (
    _option("lora", "finetune", "LoRA adapters, the base frozen (peft's defaults: r=8,"
            " alpha=8, dropout=0, the model type's target modules), e.g. --lora"
            " r=16,alpha=32,targets=q_proj,v_proj", group=_F, kind=Kind.OPTIONAL,
            metavar="r=R,alpha=A,dropout=P,targets=N,.."),
    _option("qlora", "finetune", "the base's Linear layers in 4-bit NF4 (bitsandbytes:"
            " blocksize 64, double quantization, compute bf16), LoRA on top (implies --lora);"
            " keys: compute, blocksize, double-quant, upcast (peft's"
            " prepare_model_for_kbit_training: other weights to fp32)", group=_F,
            kind=Kind.OPTIONAL, metavar="compute=bf16,.."),
    _option("gradient_checkpointing", "finetune", "with --train: checkpoint every decoder"
            " layer as Hugging Face's gradient_checkpointing_enable does"
            " (use_reentrant=False)", group=_F, kind=_SWITCH, default=False),
)

PYTHON: tuple[Option, ...] = (
    _python("checkpoints", "training", "module paths run under activation checkpointing",
            ()),
    _python("amp_policy", "training", "whose autocast op lists: cuda or cpu", "cuda"),
    _python("label", "label", "how reports name the model"),
    _python("plan", "plan", "schedule, arena, roofline, max batch, sweep", True),
    _python("memory_budget_bytes", "suggest", "the peak to aim at, in bytes"),
    _python("memory_budget_share", "suggest", "... or this share of the GPU's usable memory"),
    _python("distributed", "distributed", "a DistributedConfig, instead of gpus=,"
            " strategy=, ..."),
    _python("parallel", "distributed", "a ParallelLayout, instead of pipeline_parallel=,"
            " context_parallel=, ..."),
)

OPTIONS: tuple[Option, ...] = (*GENERAL, *DISTRIBUTED, *SERVING, *SUGGEST, *TORCH, *FINETUNE,
                               *PYTHON)
BY_KEYWORD: dict[str, Option] = {option.keyword: option for option in OPTIONS}
# what another command describing a model takes from analyze (graphmem check): not the outputs,
# the suggestions or the sweep
NOT_MODEL_PARTS = (OUTPUT, "suggest", "sweep")


def model_options() -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if o.flags and o.feeds not in NOT_MODEL_PARTS)
