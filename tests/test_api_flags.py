"""Every `graphmem analyze` flag has its Python API spelling: a new flag without one fails here."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable

import pytest

from graphmem.api import Result, build_request, check_model, gpu_fits, verify_model
from graphmem.cli.main import build_parser
from graphmem.distributed.parallel import ParallelLayout

# each flag's argparse dest -> the build_request keyword (or the Result method) that does it
FLAG_TO_API = {
    "model": "model", "input": "inputs", "example_inputs": "example_inputs",
    "gpu": "gpu", "batch": "batch", "dim": "dims", "cuda_reserve": "cuda_reserve_bytes",
    "depth": "module_depth", "runtime": "runtime", "ort_optimization": "ort_optimization",
    "ort_arena_extend": "ort_arena_extend",
    "sweep": "sweep",
    "gpus": "gpus", "strategy": "strategy", "tensor_parallel": "tensor_parallel",
    "state_layout": "state_layout", "reduce_bucket_size": "reduce_bucket_size",
    "fsdp_depth": "fsdp_depth",
    # model parallelism beyond T: one ParallelLayout
    "pipeline_parallel": "parallel", "micro_batches": "parallel",
    "pipeline_schedule": "parallel", "virtual_stages": "parallel",
    "context_parallel": "parallel", "expert_parallel": "parallel",
    "sequence_parallel": "parallel",
    "kv_cache": "kv_cache", "kv_dtype": "kv_dtype", "kv_cache_dtype": "kv_dtype",
    "max_context": "max_context",
    "serve": "serve", "context": "context", "block_size": "block_size",
    "engine": "serve",  # serve="sglang"
    "enforce_eager": "enforce_eager",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_batched_tokens": "max_batched_tokens",
    "suggest": "suggest", "memory_budget": "memory_budget",
    "train": "train", "optimizer": "optimizer", "amp": "amp", "grad_accum": "grad_accum",
    "loss": "loss",
    "lora": "lora", "qlora": "qlora", "gradient_checkpointing": "gradient_checkpointing",
    "weights": "weights", "moe_routing": "moe_routing",
    # outputs: the API writes no file unless asked; the whole result is on the object
    "json": "Result.to_json", "html": "Result.to_html", "no_html": "Result.to_html",
    "verbose": "Result.to_dict",
}


# `graphmem gpus --fits` is graphmem.gpu_fits, `graphmem verify` graphmem.verify_model
GPUS_TO_API = {"fits": "model", "batch": "batch", "dim": "dims",
               "cuda_reserve": "cuda_reserve_bytes"}
VERIFY_TO_API = {
    "model": "model", "input": "inputs", "batch": "batch", "dim": "dims",
    "provider": "provider", "threads": "threads", "seed": "seed",
    "no_optimized_run": "optimized_run", "train": "train", "optimizer": "optimizer",
    "amp": "amp", "loss": "loss", "time_limit": "time_limit_s",
    "memory_limit": "memory_limit_bytes",
    # outputs: the result object has every node and the JSON's numbers
    "all_nodes": "(result.nodes)", "json": "(result)",
}


def command_flags(command: str) -> list[str]:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [action.dest for action in commands.choices[command]._actions
            if action.dest != "help"]


def analyze_flags() -> list[str]:
    return command_flags("analyze")


# `graphmem check` is graphmem.check_model
CHECK_TO_API = {
    "model": "model", "gpu": "gpu", "batch": "batch", "dim": "dims",
    "cuda_reserve": "cuda_reserve_bytes", "max_memory": "max_memory", "margin": "margin",
    "max_tensor_memory": "max_tensor_memory",
    "max_latency": "max_latency", "max_params": "max_params", "max_flops": "max_flops",
    "fail_on_unsupported": "fail_on_unsupported", "baseline": "baseline",
    "max_growth": "max_growth", "min_sequences": "min_sequences", "context": "context",
    "engine": "engine", "budgets": "budgets",
    "json": "(report)", "junit": "(report)",  # the CheckReport object has every verdict
}


@pytest.mark.parametrize(("command", "mapping", "function"), [
    ("gpus", GPUS_TO_API, gpu_fits), ("verify", VERIFY_TO_API, verify_model),
    ("check", CHECK_TO_API, check_model)])
def test_other_commands_flags_have_api_keywords(command: str, mapping: dict[str, str],
                                                 function: Callable[..., object]) -> None:
    parameters = inspect.signature(function).parameters
    for dest in command_flags(command):
        if command == "check" and dest not in mapping:  # analyze's model options: **options
            assert FLAG_TO_API[dest] in inspect.signature(build_request).parameters, dest
            continue
        assert dest in mapping, f"graphmem {command} --{dest} has no Python API spelling"
        assert mapping[dest].startswith("(") or mapping[dest] in parameters, dest


def test_every_analyze_flag_has_an_api_keyword() -> None:
    missing = [dest for dest in analyze_flags() if dest not in FLAG_TO_API]
    assert not missing, (f"--{missing[0].replace('_', '-')} has no Python API spelling: add a"
                         " build_request keyword (graphmem/api.py) and map it here")


@pytest.mark.parametrize("dest", analyze_flags())
def test_the_keyword_exists(dest: str) -> None:
    target = FLAG_TO_API.get(dest)
    if target is None:
        pytest.fail(f"--{dest}: no API spelling mapped")
    if target.startswith("Result."):
        assert callable(getattr(Result, target.removeprefix("Result.")))
    else:
        assert target in inspect.signature(build_request).parameters


MODEL = "samples/tiny_gpt.onnx"


@pytest.mark.parametrize(("flags", "keywords"), [
    (["--train", "--gpus", "4", "--strategy", "fsdp", "--fsdp-depth", "1",
      "--state-layout", "zero-paper"],
     {"train": True, "gpus": 4, "strategy": "fsdp", "fsdp_depth": 1,
      "state_layout": "zero-paper"}),
    (["--train", "--gpus", "2", "--strategy", "zero2", "--reduce-bucket-size", "1000"],
     {"train": True, "gpus": 2, "strategy": "zero2", "reduce_bucket_size": 1000}),
    (["--train", "--tensor-parallel", "2", "--pipeline-parallel", "2", "--virtual-stages", "2",
      "--micro-batches", "4", "--sequence-parallel", "--context-parallel", "2"],
     {"train": True, "tensor_parallel": 2, "parallel": ParallelLayout(
         pipeline=2, virtual_stages=2, schedule="interleaved", micro_batches=4,
         sequence_parallel=True, context=2)}),
    (["--gpu", "t4", "--memory-budget", "80%"], {"gpu": "t4", "memory_budget": "80%"}),
    (["--gpu", "t4", "--memory-budget", "12GiB"], {"gpu": "t4", "memory_budget": "12GiB"}),
])
def test_the_api_builds_the_request_the_flags_do(flags: list[str],
                                                 keywords: dict[str, object]) -> None:
    from graphmem.cli.analyze import request_from_args

    args = build_parser().parse_args(["analyze", MODEL, *flags])
    from_cli = request_from_args(args)
    from_api = build_request(MODEL, **keywords)  # type: ignore[arg-type]
    assert from_api.distributed == from_cli.distributed
    if "memory_budget" in keywords:  # else the API's default differs: None, not False
        assert from_api.suggest == from_cli.suggest


def test_a_budget_without_a_unit_is_refused() -> None:
    from graphmem.errors import GraphmemError

    with pytest.raises(GraphmemError, match=r"memory_budget='90'.*say 90%"):
        build_request(MODEL, gpu="t4", memory_budget="90")
