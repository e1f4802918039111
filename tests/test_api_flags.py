"""One option table (graphmem/options/table.py) makes `graphmem analyze`'s flags and the Python
API's keywords: the parser is generated from it, build_request takes exactly its keywords, and
the two build the same Request with the same refusals."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from dataclasses import fields, replace

import pytest

from graphmem.api import build_request, check_model, gpu_fits, verify_model
from graphmem.cli.main import build_parser, main
from graphmem.cli.option_flags import add_model_options, namespace_keywords
from graphmem.distributed.parallel import ParallelLayout
from graphmem.errors import GraphmemError
from graphmem.options import table
from graphmem.options.table import OUTPUT, Group, Option
from graphmem.options.values import python_keywords
from graphmem.pipeline.request import KvCacheOptions, Request

MODEL = "samples/tiny_gpt.onnx"
TORCH = "m.py:fn"  # a spec: no file is read to build or check the Request
# the command line's outputs: a file or the terminal, not part of the Request or the API
OUTPUT_FLAGS = {"json", "html", "no_html", "verbose"}
# Python's objects and a re-run's switches: no flag
PYTHON_ONLY = {"checkpoints", "amp_policy", "label", "plan", "memory_budget_bytes",
               "memory_budget_share", "distributed", "parallel"}
# where the command line's default differs from Python's: it never suggests unless asked, and
# always models the runtime ("auto"); Python suggests for a training step over its budget and
# models a runtime when asked or given a GPU
COMMAND_LINE_DEFAULTS = {"suggest": False, "runtime": "auto"}


def command_dests(command: str) -> list[str]:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [action.dest for action in commands.choices[command]._actions
            if action.dest != "help"]


# ----- the table is the surface -----------------------------------------------------------------
def test_the_parser_takes_the_tables_options() -> None:
    flagged = [o.keyword for o in table.OPTIONS if o.flags]
    assert command_dests("analyze") == ["model", *flagged]
    assert {o.keyword for o in table.OPTIONS if o.feeds == OUTPUT} == OUTPUT_FLAGS
    assert {o.keyword for o in table.OPTIONS if not o.flags} == PYTHON_ONLY


def test_build_request_takes_exactly_the_tables_keywords() -> None:
    keywords = {o.keyword for o in table.OPTIONS} - OUTPUT_FLAGS
    for keyword in keywords - {"inputs"}:
        option = table.BY_KEYWORD[keyword]
        build_request(MODEL, **{keyword: option.default})  # accepted at its default
    for output in OUTPUT_FLAGS:
        with pytest.raises(TypeError, match=output):
            build_request(MODEL, **{output: True})


def test_a_wrong_keyword_names_the_nearest() -> None:
    with pytest.raises(TypeError, match=r"'pipline_parallel'.*did you mean 'pipeline_parallel'"):
        build_request(MODEL, pipline_parallel=2)
    with pytest.raises(TypeError, match=r"'frobnicate'$"):
        build_request(MODEL, frobnicate=2)


def test_every_option_feeds_a_part_of_the_request() -> None:
    parts = {f.name for f in fields(Request)} | {OUTPUT}
    assert {o.feeds for o in table.OPTIONS} <= parts
    assert len(table.BY_KEYWORD) == len(table.OPTIONS)  # one entry per keyword


def test_a_new_entry_is_a_flag_and_a_keyword(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    extra = Option("warmup_steps", "training", "optimizer steps at a reduced rate",
                   ("--warmup-steps",), Group.TORCH, parse=int, metavar="N")
    options = (*table.OPTIONS, extra)
    monkeypatch.setattr(table, "OPTIONS", options)
    monkeypatch.setattr(table, "BY_KEYWORD", {o.keyword: o for o in options})
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    assert "--warmup-steps N" in capsys.readouterr().out
    args = build_parser().parse_args(["analyze", MODEL, "--warmup-steps", "3"])
    assert namespace_keywords(args)["warmup_steps"] == 3
    build_request(MODEL, warmup_steps=3)  # accepted
    with pytest.raises(TypeError, match="did you mean 'warmup_steps'"):
        build_request(MODEL, warmup_step=3)


def test_another_command_takes_the_model_options() -> None:
    """What `graphmem check` will take from analyze: the model-describing options only."""
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    add_model_options(parser)
    dests = {a.dest for a in parser._actions} - {"help", "model"}
    assert dests == {o.keyword for o in table.model_options()}
    assert not dests & {"json", "html", "suggest", "memory_budget", "sweep"}
    assert {"inputs", "train", "pipeline_parallel", "serve", "lora"} <= dests
    args = parser.parse_args([MODEL, "--train", "--gpus", "2", "--strategy", "zero2"])
    keywords = namespace_keywords(args)
    assert keywords["gpus"] == 2 and keywords["train"] is True and "json" not in keywords
    request = build_request(MODEL, **keywords)  # the API builds it from the same dict
    assert request.distributed is not None and request.distributed.strategy == "zero2"



def test_another_commands_own_flags_stay_its_own() -> None:
    """`graphmem check` has its own --gpu and --dim: the table's are not added twice."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--dim", action="append", default=[])
    add_model_options(parser)
    args = parser.parse_args(["--gpu", "t4", "--dim", "seq=8", "--train"])
    keywords = namespace_keywords(args)
    assert keywords["gpu"] == "t4" and "dims" not in keywords and keywords["train"] is True
    assert "gpu" not in namespace_keywords(args, leave=("gpu",))


# ----- the command line and Python build the same Request -------------------------------------
PARITY = [
    (MODEL, [], {}),
    (MODEL, ["--gpu", "t4", "--batch", "8"], {"gpu": "t4", "batch": 8}),
    (MODEL, ["--dim", "batch=2", "--dim", "seq=64"], {"dims": {"batch": 2, "seq": 64}}),
    (MODEL, ["--cuda-reserve", "1GiB", "--gpu", "a100-80gb"],
     {"cuda_reserve_bytes": 1 << 30, "gpu": "a100-80gb"}),
    (MODEL, ["--depth", "3"], {"module_depth": 3}),
    (MODEL, ["--runtime", "ort-cpu", "--ort-optimization", "basic", "--threads", "2"],
     {"runtime": "ort-cpu", "ort_optimization": "basic", "threads": 2}),
    (MODEL, ["--gpu", "t4", "--ort-arena-extend", "same-as-requested"],
     {"gpu": "t4", "ort_arena_extend": "same-as-requested"}),
    (MODEL, ["--sweep", "batch=1,2,4"], {"sweep": "batch=1,2,4"}),
    (MODEL, ["--train"], {"train": True}),
    (MODEL, ["--train", "--optimizer", "sgd", "--amp", "bf16", "--grad-accum", "4"],
     {"train": True, "optimizer": "sgd", "amp": "bf16", "grad_accum": 4}),
    (MODEL, ["--train", "--gpus", "4", "--strategy", "fsdp", "--fsdp-depth", "1",
             "--state-layout", "zero-paper"],
     {"train": True, "gpus": 4, "strategy": "fsdp", "fsdp_depth": 1,
      "state_layout": "zero-paper"}),
    (MODEL, ["--train", "--gpus", "2", "--strategy", "zero2", "--reduce-bucket-size", "1000"],
     {"train": True, "gpus": 2, "strategy": "zero2", "reduce_bucket_size": 1000}),
    (MODEL, ["--train", "--tensor-parallel", "2", "--pipeline-parallel", "2",
             "--virtual-stages", "2", "--micro-batches", "4", "--sequence-parallel",
             "--context-parallel", "2"],
     {"train": True, "tensor_parallel": 2, "pipeline_parallel": 2, "virtual_stages": 2,
      "micro_batches": 4, "sequence_parallel": True, "context_parallel": 2}),
    (MODEL, ["--train", "--pipeline-parallel", "4", "--pipeline-schedule", "gpipe"],
     {"train": True, "pipeline_parallel": 4, "pipeline_schedule": "gpipe"}),
    (MODEL, ["--train", "--expert-parallel", "2"], {"train": True, "expert_parallel": 2}),
    (MODEL, ["--kv-cache", "auto", "--kv-dtype", "float16"],
     {"kv_cache": "auto", "kv_dtype": "float16"}),
    (MODEL, ["--kv-cache", "4,2,16", "--max-context", "1024"],
     {"kv_cache": (4, 2, 16), "max_context": 1024}),
    (MODEL, ["--kv-cache-dtype", "fp8"], {"kv_cache_dtype": "fp8"}),
    (MODEL, ["--kv-dtype", "fp8", "--kv-cache-dtype", "fp8"],
     {"kv_dtype": "fp8", "kv_cache_dtype": "fp8"}),
    (MODEL, ["--gpu", "t4", "--serve", "--context", "512"],
     {"gpu": "t4", "serve": True, "context": 512}),
    (MODEL, ["--gpu", "a100-80gb", "--serve", "--engine", "sglang", "--page-size", "8",
             "--mem-fraction-static", "0.8", "--max-batched-tokens", "256"],
     {"gpu": "a100-80gb", "serve": True, "engine": "sglang", "block_size": 8,
      "gpu_memory_utilization": 0.8, "max_batched_tokens": 256}),
    (MODEL, ["--gpu", "a100-80gb", "--serve", "--enforce-eager", "--gpus", "4",
             "--tensor-parallel", "2"],
     {"gpu": "a100-80gb", "serve": True, "enforce_eager": True, "gpus": 4,
      "tensor_parallel": 2}),
    (MODEL, ["--suggest"], {"suggest": True}),
    (MODEL, ["--gpu", "t4", "--memory-budget", "80%"], {"gpu": "t4", "memory_budget": "80%"}),
    (MODEL, ["--memory-budget", "12GiB"], {"memory_budget": "12GiB"}),
    (TORCH, ["--input", "2x64:int64", "--input", "mask=2x64:int64"],
     {"inputs": ["2x64:int64", "mask=2x64:int64"]}),
    (TORCH, ["--example-inputs", "inputs.py:make"], {"example_inputs": "inputs.py:make"}),
    (TORCH, ["--input", "2x8", "--train", "--loss", "loss.py:fn"],
     {"inputs": "2x8", "train": True, "loss": "loss.py:fn"}),
    (TORCH, ["--input", "2x8", "--weights", "int4:layers.*.mlp", "--moe-routing", "worst"],
     {"inputs": "2x8", "weights": "int4:layers.*.mlp", "moe_routing": "worst"}),
    (TORCH, ["--input", "2x8", "--moe-routing", "capacity=1.25"],
     {"inputs": "2x8", "moe_routing": "capacity=1.25"}),
    (TORCH, ["--input", "2x8", "--train", "--lora", "r=16,alpha=32,targets=q_proj,v_proj",
             "--gradient-checkpointing"],
     {"inputs": "2x8", "train": True, "lora": "r=16,alpha=32,targets=q_proj,v_proj",
      "gradient_checkpointing": True}),
    (TORCH, ["--input", "2x8", "--train", "--qlora"],
     {"inputs": "2x8", "train": True, "qlora": True}),
    (TORCH, ["--input", "2x8", "--train", "--lora"], {"inputs": "2x8", "train": True,
                                                      "lora": ""}),
]


@pytest.mark.parametrize(("model", "flags", "keywords"), PARITY,
                         ids=[" ".join(flags) or "defaults" for _, flags, _ in PARITY])
def test_the_command_line_and_python_build_one_request(model: str, flags: list[str],
                                                       keywords: dict[str, object]) -> None:
    from graphmem.cli.analyze import request_from_args

    from_cli = request_from_args(build_parser().parse_args(["analyze", model, *flags]))
    from_api = build_request(model, **{**COMMAND_LINE_DEFAULTS, **keywords})
    assert from_api == from_cli


def test_the_parity_lines_cover_every_flag() -> None:
    given = {key for _, _, keywords in PARITY for key in keywords}
    flagged = {o.keyword for o in table.OPTIONS if o.flags} - OUTPUT_FLAGS
    assert flagged <= given, sorted(flagged - given)


def test_python_keeps_its_objects() -> None:
    """parallel= (a ParallelLayout) is the one-to-one keywords' whole; both build one job."""
    layout = ParallelLayout(pipeline=2, virtual_stages=2, schedule="interleaved",
                            micro_batches=4, sequence_parallel=True, context=2)
    whole = build_request(MODEL, train=True, tensor_parallel=2, parallel=layout)
    parts = build_request(MODEL, train=True, tensor_parallel=2, pipeline_parallel=2,
                          virtual_stages=2, micro_batches=4, sequence_parallel=True,
                          context_parallel=2)
    assert whole == parts and whole.distributed is not None
    with pytest.raises(GraphmemError, match=r"^parallel= and pipeline_parallel= describe"):
        build_request(MODEL, train=True, parallel=layout, pipeline_parallel=2)
    sglang = build_request(MODEL, gpu="t4", serve="sglang")
    assert sglang == build_request(MODEL, gpu="t4", serve=True, engine="sglang")
    with pytest.raises(GraphmemError, match="serve='sglang' and engine='vllm'"):
        build_request(MODEL, gpu="t4", serve="sglang", engine="vllm")


# ----- where the two differed, Python now does what the command line does ---------------------
@pytest.mark.parametrize(("keywords", "message"), [
    # the API ignored an optimizer, amp or grad_accum without train
    ({"optimizer": "sgd"}, r"^optimizer='sgd' describes a training step: add train=True \(or"
                           r" drop optimizer\)$"),
    ({"amp": "bf16"}, r"^amp/grad_accum describe a training step: add train=True$"),
    ({"grad_accum": 4}, r"^amp/grad_accum describe a training step"),
    ({"train": True, "grad_accum": 0}, r"^grad_accum=0: give a whole number from 1 to"),
    # the API built a DDP job from fsdp_depth alone
    ({"train": True, "fsdp_depth": 1}, r"^fsdp_depth goes with strategy='fsdp'$"),
    # the API ignored engine and enforce_eager without serve
    ({"engine": "sglang"},
     r"^engine goes with serve \(the serving plan of an LLM\): add serve=True$"),
    ({"enforce_eager": True}, r"^enforce_eager goes with serve"),
    ({"context": 512}, r"^context goes with serve .*add serve=True$"),
    # the API dropped a training job's keywords under serve
    ({"gpu": "t4", "serve": True, "strategy": "zero2"},
     r"^strategy describes a training job; serve takes gpus and tensor_parallel only$"),
    ({"gpu": "t4", "serve": True, "pipeline_parallel": 2}, r"^pipeline_parallel describes"),
    # the API had no kv_cache_dtype
    ({"kv_dtype": "float16", "kv_cache_dtype": "fp8"},
     r"^kv_dtype='float16' kv_cache_dtype='fp8': give one$"),
    # strings are read as the command line reads the flag's text, naming the keyword
    ({"memory_budget": "90"}, r"^memory_budget='90': '90' has no unit: say 90%"),
    ({"cuda_reserve_bytes": "lots"}, r"^cuda_reserve_bytes='lots': 'lots' is not a size"),
    ({"strategy": "zero4"}, r"^strategy zero4: choose"),
    ({"engine": "tgi", "serve": True}, r"^engine='tgi': choose one of vllm, sglang, trtllm$"),
])
def test_python_refuses_what_the_command_line_refuses(keywords: dict[str, object],
                                                      message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        build_request(MODEL, **keywords)


def test_python_takes_what_the_command_line_takes() -> None:
    # the CLI's optimizer default is unset; Python's is adam, so adam alone is no refusal
    assert build_request(MODEL, optimizer="adam").training is None
    # the API's KV cache was None unless asked: an ONNX graph's past inputs give it anyway
    assert build_request(MODEL).kv_cache == KvCacheOptions()
    # a memory budget implies suggestions, even over suggest=False (as --memory-budget)
    assert build_request(MODEL, gpu="t4", suggest=False, memory_budget="80%").suggest.enabled
    # gpus=0 reached the Request as 1; now as given, for its check to refuse
    request = build_request(MODEL, train=True, gpus=0)
    assert request.distributed is not None and request.distributed.gpus == 0
    with pytest.raises(GraphmemError, match="--gpus 0"):
        request.check()
    # a PyTorch model's sweep is kept for the check's one line, not parsed first
    with pytest.raises(GraphmemError, match=r"^--sweep varies a dynamic dim of an ONNX model"):
        build_request(TORCH, inputs="2x8", sweep="batch=1,2,x").check()
    # text in Python as on the command line
    assert build_request(MODEL, cuda_reserve_bytes="1GiB").cuda_reserve_bytes == 1 << 30
    assert build_request(MODEL, dims="seq=64").dims == {"seq": 64}
    assert build_request(MODEL, batch="8").batch == 8


def test_python_models_a_runtime_when_asked_or_on_a_gpu() -> None:
    """The one documented difference (test_api.py pins it): no runtime model unless asked."""
    assert build_request(MODEL).runtime is None
    assert build_request(MODEL, gpu="t4").runtime is not None
    assert build_request(MODEL, threads=2).runtime is not None
    cli = build_parser().parse_args(["analyze", MODEL])
    from graphmem.cli.analyze import request_from_args

    assert request_from_args(cli) == replace(build_request(MODEL, suggest=False),
                                             runtime=build_request(MODEL,
                                                                   runtime="auto").runtime)


# ----- the other commands: `graphmem gpus --fits`, `verify`, `check` ---------------------------
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
    for dest in command_dests(command):
        if command == "check" and dest not in mapping:  # analyze's model options: **options
            assert dest in python_keywords(), dest
            continue
        assert dest in mapping, f"graphmem {command} --{dest} has no Python API spelling"
        assert mapping[dest].startswith("(") or mapping[dest] in parameters, dest
