"""The one set of refusals between options, for the command line and Python alike: an option
given without the one it needs, or with one it contradicts. Each is one GraphmemError line
naming the flags on the command line and the keywords in Python (graphmem/options/values.py);
what a single value must be is the Request's check (graphmem/pipeline/request.py)."""

from __future__ import annotations

from graphmem.core.conventions import MAX_GRAD_ACCUM
from graphmem.errors import GraphmemError
from graphmem.options.values import OptionValues

PARALLEL = ("pipeline_parallel", "context_parallel", "expert_parallel", "micro_batches",
            "pipeline_schedule", "virtual_stages")
# a training job's shape; with serve only gpus and tensor_parallel (the engine's) are taken
JOB = ("gpus", "strategy", "tensor_parallel", "state_layout", "reduce_bucket_size")
SERVING = ("context", "block_size", "gpu_memory_utilization", "max_batched_tokens", "engine",
           "enforce_eager")
TRAINING_JOB = ("strategy", "state_layout", "reduce_bucket_size", *PARALLEL, "distributed",
                "parallel")


def refuse_contradictions(values: OptionValues) -> None:
    _refuse_training(values)
    if not wants_distributed(values) and values.given("fsdp_depth"):
        raise GraphmemError(f"{values.name('fsdp_depth')} goes with"
                            f" {values.said('strategy', 'fsdp')}")
    _refuse_serving(values)
    _refuse_python_pairs(values)
    kv_dtype(values)


def _refuse_training(values: OptionValues) -> None:
    accum = values["grad_accum"]
    if isinstance(accum, int) and not 1 <= accum <= MAX_GRAD_ACCUM:
        raise GraphmemError(f"{values.said('grad_accum', accum)}: give a whole number from 1"
                            f" to {MAX_GRAD_ACCUM}")
    if values["train"]:
        return
    if values.given("optimizer"):
        raise GraphmemError(f"{values.said('optimizer', values['optimizer'])} describes a"
                            f" training step: add {values.switch('train')} (or drop"
                            f" {values.name('optimizer')})")
    if values.given("amp") or values.given("grad_accum"):
        raise GraphmemError(f"{values.name('amp')}/{values.name('grad_accum')} describe a"
                            f" training step: add {values.switch('train')}")


def wants_parallel(values: OptionValues) -> bool:
    return values.given("sequence_parallel") or values.first_given(
        (*PARALLEL, "parallel")) is not None


def wants_distributed(values: OptionValues) -> bool:
    """A training job is described; with serve, gpus and tensor_parallel are the engine's."""
    if values["serve"]:
        return False
    return (wants_parallel(values)
            or values.first_given((*JOB, "distributed")) is not None)


def _refuse_serving(values: OptionValues) -> None:
    """Serving options go with serve; a training job's do not."""
    if not values["serve"]:
        given = values.first_given(SERVING)
        if given is not None:
            add = "" if values.command_line else f": add {values.switch('serve')}"
            raise GraphmemError(f"{values.name(given)} goes with {values.name('serve')}"
                                f" (the serving plan of an LLM){add}")
        return
    given = values.first_given(TRAINING_JOB)
    if given is not None:
        raise GraphmemError(f"{values.name(given)} describes a training job;"
                            f" {values.name('serve')} takes {values.name('gpus')} and"
                            f" {values.name('tensor_parallel')} only")


def _refuse_python_pairs(values: OptionValues) -> None:
    """Python's objects and their one-to-one keywords: one or the other."""
    parallel = (*PARALLEL, "sequence_parallel")
    pairs = (("parallel", parallel),
             ("distributed", (*JOB, *parallel, "parallel", "fsdp_depth")))
    for whole, parts in pairs:
        part = values.first_given(parts)
        if values.given(whole) and part is not None:
            raise GraphmemError(f"{whole}= and {part}= describe the same: give one of them")
    serve, engine = values["serve"], values["engine"]
    if isinstance(serve, str) and engine is not None and serve != engine:
        raise GraphmemError(f"serve={serve!r} and engine={engine!r} name two engines: give"
                            " one")


def kv_dtype(values: OptionValues) -> str | None:
    """kv_dtype, or vLLM's kv_cache_dtype (auto: the model's); not two different ones."""
    given, vllm_dtype = values["kv_dtype"], values["kv_cache_dtype"]
    vllm = None if vllm_dtype in (None, "auto") else str(vllm_dtype)
    if given is not None and vllm is not None and given != vllm:
        raise GraphmemError(f"{values.said('kv_dtype', given)}"
                            f" {values.said('kv_cache_dtype', vllm)}: give one")
    return str(given) if given is not None else vllm  # '' is refused, not the default
