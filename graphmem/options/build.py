"""Option values -> one Request: the one mapping of the command line and the Python API.

The refusals between options come first (graphmem/options/refusals.py); each part of the
Request is then built from its options. The two callers differ only in their defaults
(graphmem/options/table.py `cli_default`) and in one documented way: the command line always
models a runtime, Python only when one is asked for or a GPU is given (`runtime_options`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, cast

from graphmem.core.conventions import (
    DEFAULT_OPTIMIZER,
    Amp,
    AmpPolicy,
    Optimizer,
    Strategy,
    TrainingOptions,
    closed,
)
from graphmem.core.routing import MoeRouting, parse_moe_routing
from graphmem.options.inputs import example_tuple
from graphmem.options.refusals import kv_dtype, refuse_contradictions, wants_distributed
from graphmem.options.text import dims_dict
from graphmem.options.values import OptionValues
from graphmem.pipeline.request import (
    KvCacheOptions,
    Request,
    RuntimeOptions,
    SuggestOptions,
    SweepRequest,
)
from graphmem.runtime_models.vocabulary import ArenaExtend, Runtime

# Each part's modules are imported where its options are given (the distributed, serving,
# fine-tuning and budget models are not needed by an analysis given none of them)
if TYPE_CHECKING:
    from graphmem.distributed.parallel import ParallelLayout
    from graphmem.distributed.serving import ServingConfig
    from graphmem.distributed.strategies import DistributedConfig
    from graphmem.frontends.torch.finetune import FinetuneOptions
    from graphmem.frontends.torch.weight_layout import WeightQuantOptions
    from graphmem.gate.budgets import MemoryLimit


def request_from_values(model: object, values: OptionValues) -> Request:
    """The Request the options describe, after the refusals between them."""
    refuse_contradictions(values)
    v = values.values
    return Request(
        model=model, inputs=example_tuple(v["inputs"]),
        example_inputs=cast("str | None", v["example_inputs"]),
        label=cast("str | None", v["label"]), batch=cast("int | None", v["batch"]),
        dims=_dims(v["dims"]), gpu=cast("str | None", v["gpu"]),
        cuda_reserve_bytes=cast("int | None", v["cuda_reserve_bytes"]),
        training=training_options(values), runtime=runtime_options(values),
        distributed=distributed_config(values), kv_cache=kv_cache_options(values),
        serving=serving_config(values), suggest=suggest_options(values),
        sweep=_sweep(v["sweep"], Request(model).is_torch),
        module_depth=cast(int, v["module_depth"]), plan=bool(v["plan"]),
        finetune=finetune_options(v["lora"], v["qlora"], bool(v["gradient_checkpointing"])),
        weights=_weights(v["weights"]), moe_routing=_routing(v["moe_routing"]))


def _dims(dims: object) -> dict[str, int]:
    """A mapping (Python), one "seq=64" read as the flag's, or the --dim list of pairs."""
    if isinstance(dims, Mapping):
        return dict(dims)
    if isinstance(dims, tuple) and dims and isinstance(dims[0], str):
        dims = [dims]  # dims="seq=64": one binding
    return dims_dict(cast("Iterable[tuple[str, int]]", dims or ()))


def training_options(values: OptionValues) -> TrainingOptions | None:
    v = values.values
    if not v["train"]:
        return None
    amp = v["amp"]
    return TrainingOptions(
        closed(Optimizer, str(v["optimizer"] or DEFAULT_OPTIMIZER), values.name("optimizer")),
        closed(Amp, str(amp), values.name("amp")) if amp else None,
        cast(int, v["grad_accum"]), cast("str | None", v["loss"]),
        tuple(cast("Iterable[str]", v["checkpoints"])),
        closed(AmpPolicy, str(v["amp_policy"]), "amp_policy"))


def runtime_options(values: OptionValues) -> RuntimeOptions | None:
    """The runtime to model. The command line always models one; Python only where an option
    of it is given or a GPU is (the verdict reads the runtime's device total)."""
    v = values.values
    keywords = ("runtime", "ort_optimization", "threads", "ort_arena_extend")
    if not values.command_line and values.first_given(keywords) is None and v["gpu"] is None:
        return None
    name = v["runtime"]
    chosen = None if name in (None, "auto", "default") else closed(
        Runtime, str(name), values.name("runtime"))
    extend = closed(ArenaExtend, str(v["ort_arena_extend"] or ArenaExtend.NEXT_POWER_OF_TWO),
                    values.name("ort_arena_extend"))
    return RuntimeOptions(chosen, cast("str | None", v["ort_optimization"]),
                          cast("int | None", v["threads"]), extend)


def parallel_layout(values: OptionValues) -> ParallelLayout:
    from graphmem.distributed.parallel import ParallelLayout

    v = values.values
    if v["parallel"] is not None:
        return cast(ParallelLayout, v["parallel"])
    virtual = cast("int | None", v["virtual_stages"])
    return ParallelLayout(
        pipeline=cast(int, v["pipeline_parallel"] or 1),
        context=cast(int, v["context_parallel"] or 1),
        expert=cast(int, v["expert_parallel"] or 1),
        sequence_parallel=bool(v["sequence_parallel"]),
        micro_batches=cast("int | None", v["micro_batches"]),
        schedule=str(v["pipeline_schedule"] or ("interleaved" if virtual else "1f1b")),
        virtual_stages=virtual or 1)


def distributed_config(values: OptionValues) -> DistributedConfig | None:
    v = values.values
    if not wants_distributed(values):
        return None
    from graphmem.distributed.strategies import DistributedConfig, ZeroSettings

    if v["distributed"] is not None:
        return cast(DistributedConfig, v["distributed"])
    bucket = v["reduce_bucket_size"]
    zero = ZeroSettings() if bucket is None else ZeroSettings(reduce_bucket_size=cast(int, bucket))
    return DistributedConfig(
        strategy=closed(Strategy, str(v["strategy"] or Strategy.DDP), values.name("strategy")),
        gpus=_one_if_none(v["gpus"]), tensor_parallel=_one_if_none(v["tensor_parallel"]),
        layout=str(v["state_layout"] or "traced"), zero=zero,
        fsdp_unit_depth=cast(int, v["fsdp_depth"]), parallel=parallel_layout(values))


def _one_if_none(value: object) -> int:
    return 1 if value is None else cast(int, value)


def kv_cache_options(values: OptionValues) -> KvCacheOptions:
    """Always: an ONNX graph's past inputs give the cache even when none is asked for. The
    option: "auto", LAYERS,KV_HEADS,HEAD_DIM (text or a tuple), True or None (past inputs)."""
    option, dtype = values["kv_cache"], kv_dtype(values)
    limit = cast("int | None", values["max_context"])
    if option == "auto":
        return KvCacheOptions(auto=True, dtype=dtype, max_context=limit)
    if isinstance(option, str):
        from graphmem.distributed.kv_cache import parse_kv_option

        option = parse_kv_option(option)
    if isinstance(option, tuple):
        return KvCacheOptions(shape=option, dtype=dtype, max_context=limit)
    return KvCacheOptions(dtype=dtype, max_context=limit)


def serving_config(values: OptionValues) -> ServingConfig | None:
    """serve=True (or --serve), or serve="sglang" naming the engine; a ServingConfig given in
    Python is taken as it is."""
    v = values.values
    serve = v["serve"]
    if not serve:  # a ServingConfig is true
        return None
    from graphmem.distributed.serving import ServingConfig
    from graphmem.distributed.vocabulary import VLLM

    if isinstance(serve, ServingConfig):
        return serve
    engine = serve if isinstance(serve, str) else v["engine"]
    return ServingConfig(
        block_size=cast("int | None", v["block_size"]),
        gpu_memory_utilization=cast("float | None", v["gpu_memory_utilization"]),
        context=cast("int | None", v["context"]),
        prefill_tokens=cast("int | None", v["max_batched_tokens"]),
        tensor_parallel=_one_if_none(v["tensor_parallel"]),
        gpus=cast("int | None", v["gpus"]), engine=str(engine or VLLM),
        enforce_eager=bool(v["enforce_eager"]))


def suggest_options(values: OptionValues) -> SuggestOptions:
    """A memory budget implies suggestions; else suggest (Python's None: only for a training
    step over its budget)."""
    v = values.values
    limit = cast("MemoryLimit | None", v["memory_budget"])
    if limit is None:
        return SuggestOptions(cast("bool | None", v["suggest"]),
                              cast("int | None", v["memory_budget_bytes"]),
                              cast("float | None", v["memory_budget_share"]))
    return SuggestOptions(True, limit.bytes, limit.fraction, limit.text)


def _sweep(sweep: object, torch: bool) -> SweepRequest | None:
    """DIM=VALUES; a PyTorch model's is kept unparsed for the Request's check to refuse."""
    if sweep is None or isinstance(sweep, SweepRequest):
        return sweep
    text = str(sweep)
    if torch:
        return SweepRequest(text, ())
    from graphmem.passes.sweep import parse_sweep

    return SweepRequest(*parse_sweep(text))


def finetune_options(lora: object, qlora: object,
                     gradient_checkpointing: bool) -> FinetuneOptions | None:
    """lora/qlora as options: text as on the command line ("" their defaults), True, or the
    options object; qlora implies lora."""
    if not (isinstance(lora, str) or lora or isinstance(qlora, str) or qlora
            or gradient_checkpointing):
        return None
    from graphmem.frontends.torch.finetune import (
        FinetuneOptions,
        LoraOptions,
        QloraOptions,
        parse_lora_spec,
        parse_qlora_spec,
    )

    lora_options = parse_lora_spec(lora) if isinstance(lora, str) else (
        LoraOptions() if lora is True else cast("LoraOptions | None", lora or None))
    qlora_options = parse_qlora_spec(qlora) if isinstance(qlora, str) else (
        QloraOptions() if qlora is True else cast("QloraOptions | None", qlora or None))
    if qlora_options is not None and lora_options is None:
        lora_options = LoraOptions()
    if lora_options is None and not gradient_checkpointing:
        return None
    return FinetuneOptions(lora_options, qlora_options, gradient_checkpointing)


def _weights(weights: object) -> WeightQuantOptions | None:
    if not isinstance(weights, str):
        return cast("WeightQuantOptions | None", weights)
    from graphmem.frontends.torch.weight_layout import parse_weights

    return parse_weights(weights)


def _routing(routing: object) -> MoeRouting:
    return parse_moe_routing(routing) if isinstance(routing, str) else cast(MoeRouting, routing)
