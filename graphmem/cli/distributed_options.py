"""`graphmem analyze` options for distributed training (--gpus, --strategy, --tensor-parallel)
and the decoder KV cache (--kv-cache), applied to the Analysis the front door returned."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from graphmem.core.ir import Role
from graphmem.distributed.kv_cache import parse_kv_option
from graphmem.distributed.strategies import LAYOUTS, STRATEGIES, DistributedConfig, ZeroSettings
from graphmem.errors import GraphmemError

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis

# ZeRO's reduce buffer holds this many elements of up to 8 bytes: its bytes stay below 2**62
MAX_BUCKET_ELEMENTS = 1 << 58


def add_distributed_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("distributed training (with --train) and KV cache")
    group.add_argument("--gpus", type=int, metavar="N",
                       help="data-parallel ranks: per-GPU memory under --strategy")
    group.add_argument("--strategy", choices=STRATEGIES,
                       help="ddp, zero1, zero2, zero3 (DeepSpeed) or fsdp (full shard);"
                       " default ddp")
    group.add_argument("--tensor-parallel", type=int, metavar="T",
                       help="Megatron-style tensor parallel degree (job size = N x T GPUs)")
    group.add_argument("--state-layout", choices=LAYOUTS,
                       help="bytes of parameters/gradients/optimizer state: traced (default,"
                       " what the graph holds), zero-paper (2+2+12 bytes for Adam) or"
                       " deepspeed (its estimators' 2+2+4+4+8)")
    group.add_argument("--reduce-bucket-size", type=int, metavar="ELEMENTS",
                       help="DeepSpeed reduce_bucket_size (default 500000000 elements)")
    group.add_argument("--fsdp-depth", type=int, default=2, metavar="N",
                       help="FSDP units are the modules at this depth (default 2: h.0, h.1...)")
    group.add_argument("--kv-cache", metavar="auto|LAYERS,KV_HEADS,HEAD_DIM",
                       help="decoder KV cache: its size in batch and context and the longest"
                       " context that fits (ONNX past_key_values inputs are found without it)")
    group.add_argument("--kv-dtype", metavar="DTYPE",
                       help="dtype of the KV cache (default: the model's or the past inputs')")


def check_distributed_options(args: argparse.Namespace) -> None:
    """These options, checked before the analysis runs (apply_distributed_options uses them)."""
    from graphmem.distributed.attach import dtype_bytes
    from graphmem.passes.dims import MAX_DIM_VALUE

    if _wants_distributed(args):
        if not args.train:
            raise GraphmemError("--gpus/--strategy/--tensor-parallel describe a training job:"
                                " add --train (optimizer state and gradients are what they"
                                " shard)")
        _config(args).check()
        if args.reduce_bucket_size is not None and not (
                1 <= args.reduce_bucket_size <= MAX_BUCKET_ELEMENTS):
            raise GraphmemError(f"--reduce-bucket-size {args.reduce_bucket_size}: give 1 to"
                                f" {MAX_BUCKET_ELEMENTS} elements (a bucket holds one or more)")
    elif args.fsdp_depth != 2:
        raise GraphmemError("--fsdp-depth goes with --strategy fsdp")
    if args.kv_cache is not None and args.train:
        raise GraphmemError("--kv-cache is for inference (a decoder generating tokens):"
                            " drop --train")
    if args.kv_cache not in (None, "auto"):
        for value in parse_kv_option(args.kv_cache):
            if value > MAX_DIM_VALUE:
                raise GraphmemError(f"--kv-cache {args.kv_cache}: {value} is implausibly large"
                                    f" (the limit is {MAX_DIM_VALUE}); check the numbers")
    if args.kv_dtype is not None:
        dtype_bytes(args.kv_dtype)


def apply_distributed_options(analysis: Analysis, args: argparse.Namespace) -> Analysis:
    from graphmem.distributed.attach import with_distributed

    if _wants_distributed(args):
        analysis = with_distributed(analysis, _config(args))
    elif args.fsdp_depth != 2:
        raise GraphmemError("--fsdp-depth goes with --strategy fsdp")
    return _apply_kv(analysis, args)


def _wants_distributed(args: argparse.Namespace) -> bool:
    return any(value is not None for value in (
        args.gpus, args.strategy, args.tensor_parallel, args.state_layout,
        args.reduce_bucket_size))


def _config(args: argparse.Namespace) -> DistributedConfig:
    zero = ZeroSettings()
    if args.reduce_bucket_size is not None:
        zero = ZeroSettings(reduce_bucket_size=args.reduce_bucket_size)
    return DistributedConfig(
        strategy=args.strategy or "ddp", gpus=1 if args.gpus is None else args.gpus,
        tensor_parallel=1 if args.tensor_parallel is None else args.tensor_parallel,
        layout=args.state_layout or "traced",
        zero=zero, fsdp_unit_depth=args.fsdp_depth)


def _apply_kv(analysis: Analysis, args: argparse.Namespace) -> Analysis:
    from graphmem.distributed.attach import kv_shape, with_kv_cache

    option = args.kv_cache
    if option is not None and analysis.mode == "training":
        raise GraphmemError("--kv-cache is for inference (a decoder generating tokens):"
                            " drop --train")
    is_torch = analysis.model.source_format == "torch.fx"
    if option is None or option == "auto":
        if is_torch and option == "auto":
            return _torch_kv(analysis, args)
        result = with_kv_cache(analysis, dtype=args.kv_dtype)
        if option == "auto" and result.kv_cache is None:
            raise GraphmemError(f"{analysis.model.name}: no past_key_values.N.key/value (or past.N)"
                                " inputs; give --kv-cache LAYERS,KV_HEADS,HEAD_DIM")
        return result
    layers, heads, head_dim = parse_kv_option(option)
    dtype = args.kv_dtype or (_torch_dtype(args.model) if is_torch else _graph_dtype(analysis))
    shape = kv_shape(layers, heads, head_dim, dtype, "--kv-cache")
    return with_kv_cache(analysis, shape, _torch_batch(args) if is_torch else None)


def _torch_kv(analysis: Analysis, args: argparse.Namespace) -> Analysis:
    from graphmem.distributed.attach import kv_shape, with_kv_cache
    from graphmem.frontends.torch.kv import detect_kv_shape
    from graphmem.frontends.torch.loader import load_model

    layers, heads, head_dim, source = detect_kv_shape(load_model(args.model))
    dtype = args.kv_dtype or _torch_dtype(args.model)
    shape = kv_shape(layers, heads, head_dim, dtype, source)
    return with_kv_cache(analysis, shape, _torch_batch(args))


def _torch_dtype(model_spec: str) -> str:
    from graphmem.frontends.torch.kv import model_float_dtype
    from graphmem.frontends.torch.loader import load_model

    return model_float_dtype(load_model(model_spec))[0]


def _graph_dtype(analysis: Analysis) -> str:
    """The dtype of the graph's first floating parameter (the cache's default)."""
    for value in analysis.graph.values_with_role(Role.PARAMETER):
        if value.dtype.is_float:
            return value.dtype.label
    return "float32"


def _torch_batch(args: argparse.Namespace) -> int | None:
    from graphmem.frontends.torch.loader import parse_tensor_spec

    shape = parse_tensor_spec(args.input[0]).shape if args.input else ()
    return int(shape[0]) if shape else None
