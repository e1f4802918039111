"""`graphmem analyze MODEL`: the flags as one Request, the pipeline, the renderers.

No analysis here: the runtime model, suggestions, distributed memory and the KV cache are the
pipeline's (graphmem/pipeline/); this module turns flags into a Request, refuses what no model
is needed to refuse, and renders the Analysis (terminal, JSON, HTML).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from graphmem.cli.commands import summary
from graphmem.cli.common import (
    Output,
    argtype,
    dims_dict,
    emit,
    is_model_spec,
    parse_dim_binding,
    parse_size_bytes,
    word_choice,
)
from graphmem.cli.inputs import (
    OutputFile,
    check_dims,
    check_input_file,
    check_int_range,
    check_model_argument,
    onnx_inputs,
    output_file,
    refuse_overwrites,
    spec_files,
)
from graphmem.cli.parallel_flags import (
    PARALLEL_FLAGS,
    add_parallel_options,
    parallel_layout,
    wants_parallel,
)
from graphmem.core.conventions import (
    DEFAULT_OPTIMIZER,
    MAX_GRAD_ACCUM,
    Amp,
    Optimizer,
    Strategy,
    TrainingOptions,
)
from graphmem.core.routing import BALANCED, parse_moe_routing
from graphmem.distributed.engines import ENGINES, VLLM
from graphmem.distributed.kv_cache import KV_CACHE_DTYPES, parse_kv_option
from graphmem.distributed.serving import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    ServingConfig,
)
from graphmem.distributed.strategies import LAYOUTS, DistributedConfig, ZeroSettings
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.finetune import (
    FinetuneOptions,
    LoraOptions,
    parse_lora_spec,
    parse_qlora_spec,
)
from graphmem.frontends.torch.spec import HF_CONFIG_NAME, hf_config_file
from graphmem.frontends.torch.weight_layout import parse_weights
from graphmem.gate.budgets import parse_memory_limit
from graphmem.pipeline import run as pipeline
from graphmem.pipeline.request import (
    KvCacheOptions,
    Request,
    RuntimeOptions,
    SuggestOptions,
    SweepRequest,
)
from graphmem.runtime_models.base import ORT_OPTIMIZATION_LEVELS, Runtime
from graphmem.runtime_models.bfc_arena import ArenaExtend

NAME = "analyze"
EXIT_OK = 0
DEFAULT_FSDP_DEPTH = 2


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        NAME, help=summary(NAME))
    parser.add_argument("model", help="an .onnx file (external weight data is not read), a"
                        " PyTorch model as file.py:fn or package.module:fn, or a Hugging Face"
                        " config.json (or its folder): the model is built from it, no weights")
    parser.add_argument("--gpu", help="GPU name from 'graphmem gpus' (e.g. t4, a100-80gb)")
    parser.add_argument("--batch", type=int, help="bind the batch axis: a dim named like a"
                        " batch, else a dynamic axis 0 of the inputs")
    parser.add_argument("--dim", action="append", type=parse_dim_binding, default=[],
                        metavar="NAME=VALUE", help="bind a named dynamic dim (repeatable)")
    parser.add_argument("--json", metavar="PATH", help="write the JSON result ('-' for stdout)")
    parser.add_argument("--html", metavar="PATH",
                        help="write the HTML report here (default: ./<model>.graphmem.html)")
    parser.add_argument("--no-html", action="store_true", help="do not write the HTML report")
    parser.add_argument("--verbose", action="store_true",
                        help="print every section after the summary (tables, schedule, arena"
                        " plan, roofline, runtime model, suggestions, notes)")
    parser.add_argument("--cuda-reserve", type=parse_size_bytes, metavar="SIZE",
                        help="non-tensor CUDA memory to assume (default: measured per GPU"
                        " generation: docs/runtime-models.md)")
    parser.add_argument("--depth", type=int, default=2, metavar="N",
                        help="group FLOPs, parameters and peak memory by module path at depth N")
    parser.add_argument("--runtime", **word_choice(Runtime, "--runtime"),
                        help="model what this runtime holds (default: ort-cuda for ONNX with"
                        " --gpu, ort-cpu for ONNX without, torch-cuda for PyTorch with --gpu,"
                        " torch-cpu without: PyTorch on the CPU, kernels' scratch included)")
    parser.add_argument("--ort-optimization", choices=ORT_OPTIMIZATION_LEVELS,
                        help="ort-cpu: the session's graph optimization level; graphmem plans"
                        " the graph onnxruntime optimizes at that level (default: all,"
                        " onnxruntime's default, for models with up to 256 MiB of weights;"
                        " above, the graph as written unless a level is given)")
    parser.add_argument("--ort-arena-extend", choices=[str(e) for e in ArenaExtend],
                        default=str(ArenaExtend.NEXT_POWER_OF_TWO),
                        help="ort-cuda, ort-cpu: how onnxruntime's arena grows, its"
                        " arena_extend_strategy (default: next-power-of-two, onnxruntime's"
                        " kNextPowerOfTwo; same-as-requested: kSameAsRequested)")
    parser.add_argument("--sweep", metavar="DIM=VALUES",
                        help="peak, fit, latency and throughput at each value of a dim, e.g."
                        " batch=1,2,4,...,256 (ONNX models)")
    _add_distributed_options(parser)
    _add_serving_options(parser)
    _add_suggest_options(parser)
    _add_torch_options(parser)
    _add_finetune_options(parser)


def _add_distributed_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("distributed training (with --train) and KV cache")
    group.add_argument("--gpus", type=int, metavar="N",
                       help="data-parallel ranks: per-GPU memory under --strategy")
    group.add_argument("--strategy", **word_choice(Strategy, "--strategy"),
                       help="ddp, zero1, zero2, zero3 (DeepSpeed) or fsdp (full shard);"
                       " default ddp")
    group.add_argument("--tensor-parallel", type=int, metavar="T",
                       help="Megatron-style tensor parallel degree (job size = N x T x P x C"
                       " GPUs)")
    add_parallel_options(group)
    group.add_argument("--state-layout", choices=LAYOUTS,
                       help="bytes of parameters/gradients/optimizer state: traced (default,"
                       " what the graph holds), zero-paper (2+2+12 bytes for Adam) or"
                       " deepspeed (its estimators' 2+2+4+4+8)")
    group.add_argument("--reduce-bucket-size", type=int, metavar="ELEMENTS",
                       help="DeepSpeed reduce_bucket_size (default 500000000 elements)")
    group.add_argument("--fsdp-depth", type=int, default=DEFAULT_FSDP_DEPTH, metavar="N",
                       help="FSDP units are the modules at this depth (default 2: h.0, h.1...)")
    group.add_argument("--kv-cache", metavar="auto|LAYERS,KV_HEADS,HEAD_DIM",
                       help="decoder KV cache: its size in batch and context and the longest"
                       " context that fits (ONNX past_key_values inputs are found without it)")
    group.add_argument("--kv-dtype", metavar="DTYPE",
                       help="dtype of the KV cache: float32, float16, bfloat16, float8, fp8,"
                       " fp8_e4m3, fp8_e5m2 or int8 (default: the model's or the past inputs')")
    group.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, metavar="|".join(
                       KV_CACHE_DTYPES), help="vLLM's spelling of --kv-dtype (auto: the"
                       " model's dtype); fp8 holds a token in half of bf16's bytes")
    group.add_argument("--max-context", type=int, metavar="N",
                       help="the model's position limit (max_position_embeddings): the longest"
                       " context stops there (a PyTorch model's Hugging Face config gives it)")


def _add_serving_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "serving an LLM (--serve, with --gpu): paged KV cache as vLLM sizes it")
    group.add_argument("--serve", action="store_true",
                       help="how many sequences of --context tokens fit at once, and the"
                       " longest context; --tensor-parallel T splits weights and KV heads,"
                       " --gpus N serves N / T replicas")
    group.add_argument("--context", type=int, metavar="N",
                       help="tokens per sequence (prompt + output; default: the model's"
                       " position limit)")
    group.add_argument("--engine", choices=ENGINES, metavar="|".join(ENGINES),
                       help="the serving engine whose reservation sizes the cache (default"
                       " vllm; docs/serving.md names the versions)")
    group.add_argument("--enforce-eager", action="store_true", default=None,
                       help="vLLM without CUDA graphs (no graph memory reserved)")
    group.add_argument("--block-size", "--page-size", "--tokens-per-block", type=int,
                       metavar="N", help="tokens per KV-cache block (default: the engine's;"
                       f" vLLM {DEFAULT_BLOCK_SIZE}, SGLang 1, TensorRT-LLM 32)")
    group.add_argument("--gpu-memory-utilization", "--mem-fraction-static",
                       "--free-gpu-memory-fraction", type=float, metavar="SHARE",
                       help="the engine's share (default: the engine's; vLLM"
                       f" {DEFAULT_GPU_MEMORY_UTILIZATION}, SGLang by GPU size,"
                       " TensorRT-LLM 0.9)")
    group.add_argument("--max-batched-tokens", type=int, metavar="N",
                       help="tokens of the prefill step whose activations are reserved"
                       " (default: --context; vLLM's max_num_batched_tokens)")


def _add_suggest_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("suggestions (what to change so the model fits)")
    group.add_argument("--suggest", action="store_true",
                       help="suggest checkpointing (--train), AMP, batch, in-place ops,"
                       " FC heads and grouped convs, each saving re-analysed")
    group.add_argument("--memory-budget", type=argtype(parse_memory_limit), metavar="LIMIT",
                       help="the peak to aim at: a size (12GiB) or a share of the --gpu's"
                       " usable memory (80%%); default: the GPU's usable memory. Implies"
                       " --suggest")


def _add_torch_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("PyTorch models (MODEL is file.py:fn or pkg.mod:fn)")
    group.add_argument("--input", action="append", default=[], metavar="[NAME=]SHAPE[:DTYPE]",
                       help="an example input, e.g. 32x3x224x224 or 4x1024:int64 (repeat for"
                       " each positional input); NAME=SHAPE passes it as a keyword, e.g."
                       " attention_mask=4x1024:int64")
    group.add_argument("--example-inputs", metavar="FILE.py:FN",
                       help="a function returning the example inputs (a tensor or a tuple of"
                       " them), called on the meta device; instead of --input")
    group.add_argument("--train", action="store_true",
                       help="analyze one whole training step (forward, backward, update)")
    group.add_argument("--optimizer", **word_choice(Optimizer, "--optimizer"),
                       help=f"with --train (default {DEFAULT_OPTIMIZER})")
    group.add_argument("--amp", **word_choice(Amp, "--amp"), help="autocast precision")
    group.add_argument("--grad-accum", type=int, default=1, metavar="N",
                       help="micro-batches per optimizer step (memory is per micro-batch)")
    group.add_argument("--loss", metavar="FILE.py:FN",
                       help="loss(output) -> scalar (default: cross-entropy)")
    group.add_argument("--weights", metavar="int8|int4|int4-tiled[:MODULES]",
                       help="store the nn.Linear weights as torchao's int8 or int4 weight-only"
                       " quantization does (docs/quantized.md); MODULES: path patterns, e.g."
                       " int4:layers.*.mlp")
    group.add_argument("--moe-routing", default=BALANCED,
                       metavar="balanced|worst|capacity=F",
                       help="how a mixture of experts' router chooses (its choice is data):"
                       " balanced (default; tokens x top_k spread evenly over the experts),"
                       " worst (the same top_k experts take every token) or capacity=F (each"
                       " expert up to F x tokens x top_k / experts tokens)")


def _add_finetune_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "fine-tuning (PyTorch models and Hugging Face configs; see docs/llm-finetuning.md)")
    group.add_argument("--lora", nargs="?", const="", metavar="r=R,alpha=A,dropout=P,targets=N,..",
                       help="LoRA adapters, the base frozen (peft's defaults: r=8, alpha=8,"
                       " dropout=0, the model type's target modules), e.g. --lora"
                       " r=16,alpha=32,targets=q_proj,v_proj")
    group.add_argument("--qlora", nargs="?", const="", metavar="compute=bf16,..",
                       help="the base's Linear layers in 4-bit NF4 (bitsandbytes: blocksize"
                       " 64, double quantization, compute bf16), LoRA on top (implies --lora);"
                       " keys: compute, blocksize, double-quant, upcast (peft's"
                       " prepare_model_for_kbit_training: other weights to fp32)")
    group.add_argument("--gradient-checkpointing", action="store_true",
                       help="with --train: checkpoint every decoder layer as Hugging Face's"
                       " gradient_checkpointing_enable does (use_reentrant=False)")


def run(args: argparse.Namespace, console: Console) -> int:
    from graphmem.report.terminal.summary import print_summary

    check_model_argument(args.model)
    json_out, html_out = _outputs(args)
    files = [o for o in (json_out, html_out) if o]
    request = request_from_args(args)
    if request.is_torch:
        refuse_overwrites(files, [*spec_files((args.model, args.loss, args.example_inputs)),
                                  *_config_file(args.model)])
    else:
        check_input_file("model", Path(args.model))
        refuse_overwrites(files, onnx_inputs(Path(args.model), files))
    # the user's files are imported before the analysis starts (a file that fails to import
    # is an input error like any other)
    analysis = pipeline.analyze(pipeline.resolve(request))
    emit(console, lambda out: print_summary(analysis, out, args.verbose),
         [Output(json_out, "JSON", lambda path: _write_json(analysis, path)),
          Output(html_out, "HTML report", lambda path: _write_html(analysis, path))],
         (lambda: _json_text(analysis)) if args.json == "-" else None)
    return EXIT_OK


def _json_text(analysis: object) -> str:
    from graphmem.report.json.report import to_json_text  # without --json: not imported

    return to_json_text(analysis)  # type: ignore[arg-type]


def _write_json(analysis: object, path: Path) -> None:
    from graphmem.report.json.report import write_json  # looked up now: tests replace it

    write_json(analysis, path)  # type: ignore[arg-type]


def _write_html(analysis: object, path: Path) -> None:
    from graphmem.report.html.page import write_html

    write_html(analysis, path)  # type: ignore[arg-type]


def _outputs(args: argparse.Namespace) -> tuple[OutputFile | None, OutputFile | None]:
    """--json and --html (default ./<model>.graphmem.html), checked before any work."""
    if args.no_html and args.html is not None:
        raise GraphmemError(f"--html {args.html} and --no-html contradict: give one of them")
    json_out = output_file("--json", args.json, stdout_ok=True)
    default_html = f"{_report_stem(args.model)}.graphmem.html"
    html_text = None if args.no_html else default_html if args.html is None else args.html
    return json_out, output_file("--html", html_text)


def _report_stem(model: str) -> str:
    """What the default report is named after: a PyTorch spec by its file or module and its
    function (`nets/model.py:build` -> `model.build`: two models built by `build()` must not
    write one report), a config by its folder, a file by its stem."""
    if is_model_spec(model):
        location, _, function = model.rpartition(":")
        where = Path(location).stem if location.endswith(".py") else location.rpartition(".")[2]
        return f"{where}.{function}" if where else function
    config = hf_config_file(model)
    if config is not None and config.name == HF_CONFIG_NAME:  # name it by its folder
        return config.resolve().parent.name or "config"
    return Path(model).stem


def _config_file(model: str) -> list[tuple[str, Path]]:
    config = hf_config_file(model)
    return [] if config is None else [("the model's config", config)]


# ----- flags -> Request ------------------------------------------------------------------------
def request_from_args(args: argparse.Namespace) -> Request:
    """The Request the flags describe, checked: every refusal that needs no model is here."""
    _check_flags(args)
    torch = is_model_spec(args.model) or hf_config_file(args.model) is not None
    request = Request(
        model=args.model,
        inputs=tuple(args.input), example_inputs=args.example_inputs,
        batch=args.batch, dims=dims_dict(args.dim),
        gpu=args.gpu, cuda_reserve_bytes=args.cuda_reserve,
        training=_training(args), runtime=RuntimeOptions(
            args.runtime, args.ort_optimization, arena_extend=ArenaExtend(args.ort_arena_extend)),
        distributed=_distributed(args), kv_cache=_kv_cache(args), serving=_serving(args),
        suggest=_suggest(args),
        sweep=_sweep(args.sweep, torch), module_depth=args.depth, finetune=_finetune(args),
        weights=parse_weights(args.weights) if args.weights else None,
        moe_routing=parse_moe_routing(args.moe_routing))
    request.check()
    return request


def _check_flags(args: argparse.Namespace) -> None:
    """What only the command line can say wrong: flags given without the one they need."""
    check_int_range("--grad-accum", args.grad_accum, 1, MAX_GRAD_ACCUM)
    if args.optimizer is not None and not args.train:
        raise GraphmemError(f"--optimizer {args.optimizer} describes a training step: add"
                            " --train (or drop --optimizer)")
    if not is_model_spec(args.model):
        check_dims(args.batch, args.dim)
    if not args.train and (args.amp or args.grad_accum != 1):
        raise GraphmemError("--amp/--grad-accum describe a training step: add --train")
    if not _wants_distributed(args) and args.fsdp_depth != DEFAULT_FSDP_DEPTH:
        raise GraphmemError("--fsdp-depth goes with --strategy fsdp")
    _check_serving_flags(args)


_SERVING_FLAGS = ("context", "block_size", "gpu_memory_utilization", "max_batched_tokens",
                  "engine", "enforce_eager")
_TRAINING_JOB_FLAGS = ("strategy", "state_layout", "reduce_bucket_size", *PARALLEL_FLAGS)


def _check_serving_flags(args: argparse.Namespace) -> None:
    """Serving flags go with --serve; a training job's do not."""
    if not args.serve:
        flag = _first_given(args, _SERVING_FLAGS)
        if flag is not None:
            raise GraphmemError(f"{flag} goes with --serve (the serving plan of an LLM)")
        return
    flag = _first_given(args, _TRAINING_JOB_FLAGS)
    if flag is not None:
        raise GraphmemError(f"{flag} describes a training job; --serve takes --gpus and"
                            " --tensor-parallel only")


def _first_given(args: argparse.Namespace, names: tuple[str, ...]) -> str | None:
    given = [name for name in names if getattr(args, name) is not None]
    return f"--{given[0].replace('_', '-')}" if given else None


def _finetune(args: argparse.Namespace) -> FinetuneOptions | None:
    """--lora, --qlora (which implies --lora) and --gradient-checkpointing."""
    if args.lora is None and args.qlora is None and not args.gradient_checkpointing:
        return None
    lora = parse_lora_spec(args.lora) if args.lora is not None else None
    qlora = parse_qlora_spec(args.qlora) if args.qlora is not None else None
    if qlora is not None and lora is None:
        lora = LoraOptions()
    return FinetuneOptions(lora, qlora, args.gradient_checkpointing)


def _training(args: argparse.Namespace) -> TrainingOptions | None:
    if not args.train:
        return None
    return TrainingOptions(optimizer=args.optimizer or DEFAULT_OPTIMIZER, amp=args.amp,
                           grad_accum=args.grad_accum, loss=args.loss)


def _wants_distributed(args: argparse.Namespace) -> bool:
    if args.serve:  # --gpus and --tensor-parallel are the serving engine's
        return False
    return wants_parallel(args) or any(value is not None for value in (
        args.gpus, args.strategy, args.tensor_parallel, args.state_layout,
        args.reduce_bucket_size))


def _distributed(args: argparse.Namespace) -> DistributedConfig | None:
    if not _wants_distributed(args):
        return None
    zero = ZeroSettings()
    if args.reduce_bucket_size is not None:
        zero = ZeroSettings(reduce_bucket_size=args.reduce_bucket_size)
    return DistributedConfig(
        strategy=args.strategy or Strategy.DDP, gpus=1 if args.gpus is None else args.gpus,
        tensor_parallel=1 if args.tensor_parallel is None else args.tensor_parallel,
        layout=args.state_layout or "traced", zero=zero, fsdp_unit_depth=args.fsdp_depth,
        parallel=parallel_layout(args))


def _kv_cache(args: argparse.Namespace) -> KvCacheOptions:
    """Always: an ONNX graph's past inputs give the cache even without --kv-cache."""
    option, dtype = args.kv_cache, _kv_dtype(args)
    if option is None or option == "auto":
        return KvCacheOptions(auto=option == "auto", dtype=dtype, max_context=args.max_context)
    return KvCacheOptions(shape=parse_kv_option(option), dtype=dtype,
                          max_context=args.max_context)


def _kv_dtype(args: argparse.Namespace) -> str | None:
    """--kv-dtype, or vLLM's --kv-cache-dtype (auto: the model's); not two different ones."""
    vllm = None if args.kv_cache_dtype in (None, "auto") else args.kv_cache_dtype
    if args.kv_dtype is not None and vllm is not None and args.kv_dtype != vllm:
        raise GraphmemError(f"--kv-dtype {args.kv_dtype} --kv-cache-dtype {vllm}: give one")
    return args.kv_dtype if args.kv_dtype is not None else vllm  # '' is refused, not default


def _serving(args: argparse.Namespace) -> ServingConfig | None:
    if not args.serve:
        return None
    return ServingConfig(
        block_size=args.block_size, gpu_memory_utilization=args.gpu_memory_utilization,
        context=args.context, prefill_tokens=args.max_batched_tokens,
        tensor_parallel=1 if args.tensor_parallel is None else args.tensor_parallel,
        gpus=args.gpus, engine=args.engine or VLLM, enforce_eager=bool(args.enforce_eager))


def _suggest(args: argparse.Namespace) -> SuggestOptions:
    limit = args.memory_budget
    enabled = bool(args.suggest or limit is not None)
    if limit is None:
        return SuggestOptions(enabled)
    return SuggestOptions(enabled, limit.bytes, limit.fraction, limit.text)


def _sweep(text: str | None, torch: bool) -> SweepRequest | None:
    """--sweep DIM=VALUES; a PyTorch model's is kept unparsed for the check to refuse."""
    from graphmem.passes.sweep import parse_sweep

    if text is None:
        return None
    return SweepRequest(text, ()) if torch else SweepRequest(*parse_sweep(text))
