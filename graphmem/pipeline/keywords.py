"""The Python API's keywords as parts of a Request (graphmem/api.py `build_request`): each
group of keywords, as its command-line flags describe it, to one options object; None where
none of the group is given."""

from __future__ import annotations

from graphmem.core.conventions import Strategy, closed
from graphmem.distributed.serving import ServingConfig
from graphmem.distributed.strategies import DistributedConfig, ZeroSettings
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.finetune import (
    FinetuneOptions,
    LoraOptions,
    QloraOptions,
    parse_lora_spec,
    parse_qlora_spec,
)
from graphmem.pipeline.request import KvCacheOptions, RuntimeOptions
from graphmem.runtime_models.base import Runtime
from graphmem.runtime_models.bfc_arena import ArenaExtend


def distributed_keywords(gpus: int | None, strategy: str | None, tensor_parallel: int | None,
                         state_layout: str | None, reduce_bucket_size: int | None,
                         fsdp_depth: int | None) -> DistributedConfig | None:
    """The training job the keywords describe (the --gpus ... --fsdp-depth flags); None when
    none is given."""
    given = (gpus, strategy, tensor_parallel, state_layout, reduce_bucket_size, fsdp_depth)
    if all(value is None for value in given):
        return None
    zero = (ZeroSettings() if reduce_bucket_size is None
            else ZeroSettings(reduce_bucket_size=reduce_bucket_size))
    return DistributedConfig(closed(Strategy, strategy or "ddp", "--strategy"), gpus or 1,
                             tensor_parallel or 1,
                             layout=state_layout or "traced", zero=zero,
                             fsdp_unit_depth=2 if fsdp_depth is None else fsdp_depth)


def finetune_keywords(lora: bool | str | LoraOptions | None,
                      qlora: bool | str | QloraOptions | None,
                      gradient_checkpointing: bool) -> FinetuneOptions | None:
    """lora/qlora as options (a string as on the command line); qlora implies lora."""
    lora_options = parse_lora_spec(lora) if isinstance(lora, str) else (
        LoraOptions() if lora is True else lora or None)
    qlora_options = parse_qlora_spec(qlora) if isinstance(qlora, str) else (
        QloraOptions() if qlora is True else qlora or None)
    if qlora_options is not None and lora_options is None:
        lora_options = LoraOptions()
    if lora_options is None and not gradient_checkpointing:
        return None
    return FinetuneOptions(lora_options, qlora_options, gradient_checkpointing)


def runtime_keywords(name: str | None, ort_optimization: str | None, threads: int | None,
                     arena_extend: str | None = None,
                     gpu: bool = False) -> RuntimeOptions | None:
    """The runtime options; None where none is given and there is no GPU (no runtime model).
    With a GPU the verdict reads its runtime model's device total, as on the command line,
    `plan=False` included (a bare re-run of the pipeline has no runtime options)."""
    given = (name, ort_optimization, threads, arena_extend)
    if all(option is None for option in given) and not gpu:
        return None
    extend = closed(ArenaExtend, arena_extend or ArenaExtend.NEXT_POWER_OF_TWO,
                    "ort_arena_extend")
    chosen = None if name is None or name in ("auto", "default") else closed(Runtime, name,
                                                                               "--runtime")
    return RuntimeOptions(chosen, ort_optimization, threads, extend)


def kv_cache_keywords(option: bool | str | tuple[int, int, int] | None, dtype: str | None,
                      max_context: int | None = None) -> KvCacheOptions | None:
    if option is None or option is False:
        if dtype is None and max_context is None:
            return None
        return KvCacheOptions(dtype=dtype, max_context=max_context)
    if option == "auto":
        return KvCacheOptions(auto=True, dtype=dtype, max_context=max_context)
    if isinstance(option, tuple):
        return KvCacheOptions(shape=option, dtype=dtype, max_context=max_context)
    return KvCacheOptions(dtype=dtype, max_context=max_context)


def serving_keywords(serve: bool | str | ServingConfig, context: int | None,
                     block_size: int | None, utilization: float | None,
                     prefill_tokens: int | None, gpus: int | None,
                     tensor_parallel: int | None) -> ServingConfig | None:
    """`serve=True` (vLLM) or `serve="sglang"` (the engine's name: vllm, sglang, trtllm) and
    its keywords as one ServingConfig (a given one is taken as it is)."""
    if isinstance(serve, ServingConfig):
        return serve
    if not serve:
        if any(v is not None for v in (context, block_size, utilization, prefill_tokens)):
            raise GraphmemError("context, block_size, gpu_memory_utilization and"
                                " max_batched_tokens describe serving: add serve=True")
        return None
    given: dict[str, object] = {name: value for name, value in (
        ("block_size", block_size), ("gpu_memory_utilization", utilization),
        ("tensor_parallel", tensor_parallel)) if value is not None}
    if isinstance(serve, str):
        given["engine"] = serve
    return ServingConfig(context=context, prefill_tokens=prefill_tokens, gpus=gpus,
                         **given)  # type: ignore[arg-type]
