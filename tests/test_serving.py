"""Serving an LLM (graphmem/distributed/serving.py, wired through pipeline/extras.py, the CLI,
the API, JSON and the gate): the paged KV cache as vLLM sizes it, worked by hand.

vLLM 0.33.0's formulas, as the numbers below use them (docs/serving.md cites each):
- available KV memory = ceil(total * gpu_memory_utilization) - weights - the profiled peak
  activations - the CUDA-graph estimate (determine_available_memory); the CUDA context,
  NCCL and cuBLAS handles are the baseline before the snapshot, outside the requested memory;
- the CUDA-graph estimate: the first capture plus (graphs - 1) x the next one's growth per
  mode (profile_cudagraph_memory); with the 51 default sizes up to 512 (1, 2, 4, every 8 to
  248, every 16 from 256), two modes and no traced tokens to scale: 2 x 50 x 1 MiB =
  104,857,600 B;
- a block (page) holds block_size tokens of every layer: 2 * block_size * kv_heads * head_size *
  dtype_size per layer (AttentionSpec.page_size_bytes), num_blocks = available // page //
  layers (get_num_blocks);
- a request of L tokens takes cdiv(L, block_size) blocks (max_memory_usage_bytes); maximum
  concurrency = num_blocks / blocks per request (get_max_concurrency_for_kv_cache_config);
- KV heads per GPU = max(1, kv_heads // tensor_parallel) (ModelConfig.get_num_kv_heads).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest

from graphmem import analyze_onnx, analyze_torch
from graphmem.api import build_request
from graphmem.cli.main import main
from graphmem.distributed.serving import (
    CacheShape,
    ServingConfig,
    ServingInputs,
    StepPeak,
    kv_heads_per_rank,
    plan_serving,
)
from graphmem.errors import GraphmemError
from graphmem.gate.budgets import Budgets, complete_budgets, evaluate, numbers_of
from graphmem.gate.sequences import MinSequences
from tests.helpers.decoders import PER_TOKEN, decoder_with_past
from tests.models import tiny_llama

# ----- the plan, worked by hand ---------------------------------------------------------------
# Llama-3-8B: 32 layers, 8 KV heads of 128, bfloat16:
#   per token 2 x 32 x 8 x 128 x 2 B = 131,072 B (128 KiB); a 16-token block 2,097,152 B (2 MiB)
LLAMA3_8B = CacheShape(layers=32, kv_heads=8, head_dim=128, dtype="bfloat16", dtype_bytes=2)
GIB = 2**30


def llama_inputs(context: int, **config: object) -> ServingInputs:
    """An 80 GiB GPU, 0.9 of it for the engine; 8,030,261,248 bf16 weights (16,060,522,496 B),
    a 2 GiB step, a 512 MiB CUDA context."""
    return ServingInputs(
        config=ServingConfig(context=context, **config),  # type: ignore[arg-type]
        cache=LLAMA3_8B, gpu_name="h100", capacity_bytes=80 * GIB,
        cuda_context_bytes=512 * 2**20, weights_bytes=8_030_261_248 * 2,
        steps=(StepPeak("prefill", {}, 2 * GIB), StepPeak("decode", {}, 1000)),
        position_limit=8192, position_limit_source="model.config.max_position_embeddings")


def test_llama3_8b_on_80_gib_worked_by_hand() -> None:
    plan = plan_serving(llama_inputs(4096))
    # requested ceil(85,899,345,920 x 0.9) = 77,309,411,328
    assert plan.budget_bytes == 77_309_411_328
    # the larger step is reserved: the 2 GiB prefill
    assert plan.activation_bytes == 2 * GIB
    assert plan.reserve is not None and plan.reserve.cuda_graph_bytes == 104_857_600
    # 77,309,411,328 - 16,060,522,496 - 2,147,483,648 - 104,857,600 = 58,996,547,584 (the
    # 512 MiB CUDA context is outside the requested memory)
    assert plan.kv_cache_bytes == 58_996_547_584
    assert plan.per_token_bytes == 131_072 and plan.block_bytes == 2_097_152
    # 58,996,547,584 // 2,097,152 = 28,131 blocks (28,131.7)
    assert plan.num_blocks == 28_131
    # 4096 tokens = 256 blocks: 28,131 // 256 = 109 sequences; vLLM's concurrency 109.89x
    assert (plan.blocks_per_sequence, plan.max_sequences) == (256, 109)
    assert f"{plan.concurrency:.2f}" == "109.89"
    # "GPU KV cache size": int(109.886... x 4096) = 450,096 tokens (28,131 x 16)
    assert plan.kv_tokens == 450_096
    # alone, one sequence could hold 28,131 x 16 = 450,096 tokens: the model stops at 8192
    assert plan.memory_context == 450_096
    assert plan.max_context == 8192 and plan.context_limited_by == "position limit"


def test_a_part_full_block_is_a_whole_block() -> None:
    # 4097 tokens: cdiv(4097, 16) = 257 blocks; 28,131 // 257 = 109 sequences (109.46)
    plan = plan_serving(llama_inputs(4097))
    assert (plan.blocks_per_sequence, plan.max_sequences) == (257, 109)
    # 4192 tokens = 262 blocks: 28,131 // 262 = 107 (107.4); one token more, 263 blocks:
    # 28,131 // 263 = 106 (106.96)
    assert plan_serving(llama_inputs(4192)).max_sequences == 107
    assert plan_serving(llama_inputs(4193)).max_sequences == 106


def test_block_size_changes_the_rounding() -> None:
    # block 32: 4,194,304 B; 58,996,547,584 // 4,194,304 = 14,065 blocks; 4097 tokens take
    # cdiv(4097, 32) = 129 blocks: 14,065 // 129 = 109
    plan = plan_serving(llama_inputs(4097, block_size=32))
    assert (plan.num_blocks, plan.blocks_per_sequence, plan.max_sequences) == (14_065, 129, 109)


def test_tensor_parallel_splits_the_kv_heads() -> None:
    # 8 KV heads: 4 per GPU with T=2; with T=16, fewer heads than GPUs: one each (replicated)
    assert kv_heads_per_rank(8, 2) == 4 and kv_heads_per_rank(8, 16) == 1
    inputs = llama_inputs(4096, tensor_parallel=2)
    plan = plan_serving(replace(inputs, weights_bytes=inputs.weights_bytes // 2))
    # per token 2 x 32 x 4 x 128 x 2 = 65,536 B; block 1,048,576 B
    assert plan.per_token_bytes == 65_536 and plan.block_bytes == 1_048_576
    # 77,309,411,328 - 8,030,261,248 - 2,147,483,648 - 104,857,600 = 67,026,808,832 B:
    # 63,921 blocks (63,921.7), 63,921 // 256 = 249 sequences
    assert (plan.kv_cache_bytes, plan.num_blocks, plan.max_sequences) == (
        67_026_808_832, 63_921, 249)


def test_replicas_multiply_the_sequences() -> None:
    # 4 GPUs as 2 replicas of T=2: each replica has its own cache
    inputs = llama_inputs(4096, tensor_parallel=2, gpus=4)
    plan = plan_serving(replace(inputs, weights_bytes=inputs.weights_bytes // 2))
    assert plan.replicas == 2 and plan.total_sequences == 2 * plan.max_sequences == 498


def test_no_room_left_is_zero_sequences() -> None:
    # a 16 GiB GPU: 0.9 x 16 GiB = 14.4 GiB < 15 GiB of weights
    plan = plan_serving(replace(llama_inputs(4096), capacity_bytes=16 * GIB))
    assert (plan.kv_cache_bytes, plan.num_blocks, plan.max_sequences) == (0, 0, 0)
    assert plan.max_context == 0


@pytest.mark.parametrize(("config", "message"), [
    (ServingConfig(block_size=0), "--block-size 0"),
    (ServingConfig(gpu_memory_utilization=1.5), "--gpu-memory-utilization 1.5"),
    (ServingConfig(tensor_parallel=2, gpus=3), "a multiple of T"),
    (ServingConfig(context=0), "--context 0"),
])
def test_config_refusals(config: ServingConfig, message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        config.check()


# ----- an ONNX decoder-with-past --------------------------------------------------------------
@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("serving") / "decoder.onnx"
    onnx.save(decoder_with_past(), str(path))
    return path


def test_decoder_prefill_and_decode_steps(decoder: Path) -> None:
    result = analyze_onnx(decoder, gpu="t4", serve=True, context=1000, plan=False)
    assert result.kv_cache is not None and result.kv_cache.serving is not None
    plan = result.kv_cache.serving
    prefill, decode = plan.steps
    assert prefill.dims == {"batch": 1, "seq": 1000, "past": 0}
    assert decode.dims == {"batch": 1, "seq": 1, "past": 999}
    # prefill: a projection [1, 1000, 32] float32 (128,000 B) and its transpose (128,000 B)
    # live together; the presents are in the paged cache, not counted: 256,000 B
    assert prefill.activation_bytes == 256_000
    # decode: the same for one token: 256 B
    assert decode.activation_bytes == 256
    assert plan.activation_bytes == 256_000
    # weights: 4 x 32 x 32 x 4 B = 16,384 + the int64 [4] shape constant 32 B
    assert plan.weights_bytes == 16_416
    assert plan.per_token_bytes == PER_TOKEN == 512 and plan.block_bytes == 8192
    fit = result.fit
    assert fit is not None and plan.capacity_bytes == fit.capacity_bytes
    assert plan.cuda_context_bytes == fit.reserve.bytes
    # vLLM 0.33: the context is outside the requested memory; the CUDA graphs inside it
    assert plan.kv_cache_bytes == (plan.budget_bytes - 16_416 - plan.activation_bytes
                                   - plan.reserve.cuda_graph_bytes)  # type: ignore[union-attr]
    assert plan.num_blocks == plan.kv_cache_bytes // 8192
    # 1000 tokens: cdiv(1000, 16) = 63 blocks
    assert plan.blocks_per_sequence == 63 and plan.max_sequences == plan.num_blocks // 63


def test_prefill_tokens_set_the_profiled_step(decoder: Path) -> None:
    result = analyze_onnx(decoder, gpu="t4", serve=True, context=1000, max_batched_tokens=256,
                          plan=False)
    plan = result.kv_cache.serving  # type: ignore[union-attr]
    assert plan is not None and plan.steps[0].activation_bytes == 256 * 256  # 256 B a token


def test_tensor_parallel_splits_the_matmul_weights(decoder: Path) -> None:
    result = analyze_onnx(decoder, gpu="t4", serve=True, context=1000, tensor_parallel=2,
                          plan=False)
    plan = result.kv_cache.serving  # type: ignore[union-attr]
    # the projections split in 2 (8,192 B), the shape constant replicated (32 B); one KV
    # head per GPU: 2 x 2 x 1 x 16 x 4 = 256 B per token
    assert plan is not None and plan.weights_bytes == 8192 + 32
    assert plan.kv_heads_per_rank == 1 and plan.per_token_bytes == 256


def test_position_limit_caps_the_longest_context(decoder: Path) -> None:
    # without --serve too: at batch 2 the t4 could hold millions of tokens; the model 2048
    result = analyze_onnx(decoder, gpu="t4", batch=2, dims={"past": 4, "seq": 1},
                          max_context=2048, plan=False)
    kv = result.kv_cache
    assert kv is not None and kv.max_context == 2048 and kv.position_limit == 2048
    assert kv.max_context_limited_by == "position limit"


def test_context_defaults_to_the_position_limit(decoder: Path) -> None:
    result = analyze_onnx(decoder, gpu="t4", serve=True, max_context=2048, plan=False)
    plan = result.kv_cache.serving  # type: ignore[union-attr]
    assert plan is not None and plan.context == 2048 and plan.blocks_per_sequence == 128
    assert plan.max_context == 2048 and plan.position_limit_source == "--max-context"


@pytest.mark.parametrize(("options", "message"), [
    ({"serve": True}, "give --context N"),
    ({"serve": True, "context": 4096, "max_context": 2048}, "beyond the model's position"),
    ({"context": 4096}, "add serve=True"),
])
def test_api_refusals(decoder: Path, options: dict[str, object], message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        analyze_onnx(decoder, gpu="t4", plan=False, **options)


def test_a_model_without_a_cache_needs_its_shape(mlp: Path) -> None:
    with pytest.raises(GraphmemError, match="--kv-cache LAYERS,KV_HEADS,HEAD_DIM"):
        analyze_onnx(mlp, batch=1, gpu="t4", serve=True, context=512, plan=False)
    # given, the analysed step (the whole model at batch 1) is the step reserved
    result = analyze_onnx(mlp, batch=1, gpu="t4", serve=True, context=512, kv_cache=(2, 2, 16),
                          plan=False)
    plan = result.kv_cache.serving  # type: ignore[union-attr]
    assert plan is not None and [s.name for s in plan.steps] == ["analyzed step"]
    assert plan.reserve is not None
    assert plan.reserve.forward_bytes == int(result.liveness.activation_peak_bytes)
    # vLLM's dummy sampler run on its output's 10 logits: t4 -> max_num_seqs 256,
    # max_num_batched_tokens 2048: 256 rows x 10 x (4 B float32 logits + 21) = 64,000 B
    assert plan.reserve.sampler_rows == 256 and plan.reserve.sampler_bytes == 64_000
    assert plan.activation_bytes == max(64_000, plan.reserve.forward_bytes)


# ----- command line, JSON, gate ---------------------------------------------------------------
def test_cli_json(decoder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", str(decoder), "--gpu", "t4", "--serve", "--context", "1000",
                 "--block-size", "32", "--gpu-memory-utilization", "0.8", "--no-html",
                 "--json", "-"])
    assert code == 0
    serving = json.loads(capsys.readouterr().out)["memory"]["serving"]
    assert serving["block_size"] == 32 and serving["gpu_memory_utilization"] == 0.8
    # a 32-token block: 32 x 512 B = 16,384 B; 1000 tokens take cdiv(1000, 32) = 32 blocks
    assert serving["block_bytes"] == 16_384 and serving["blocks_per_sequence"] == 32
    assert serving["max_sequences"] == serving["num_blocks"] // 32
    assert [s["name"] for s in serving["steps"]] == ["prefill", "decode"]
    assert serving["budget_bytes"] == int(serving["capacity_bytes"] * 0.8)


@pytest.mark.parametrize(("argv", "message"), [
    (["--block-size", "32"], "--block-size goes with --serve"),
    (["--serve", "--context", "64"], "add --gpu NAME"),
    (["--serve", "--gpu", "t4", "--strategy", "ddp"], "--strategy describes a training job"),
    (["--serve", "--gpu", "t4", "--context", "64", "--tensor-parallel", "2", "--gpus", "3"],
     "a multiple of T"),
    (["--serve", "--gpu", "t4", "--context", "4096", "--max-context", "2048"],
     "beyond the model's position limit 2048"),
])
def test_cli_refusals(decoder: Path, argv: list[str], message: str,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(decoder), "--no-html", *argv]) == 2
    assert message in capsys.readouterr().err


def test_gate_min_sequences(decoder: Path) -> None:
    # a gate needs every dim bound: the decode step of one sequence at 1000 tokens
    dims = {"batch": 1, "seq": 1, "past": 999}
    result = analyze_onnx(decoder, gpu="t4", dims=dims, serve=True, context=1000, plan=False)
    plan = result.kv_cache.serving  # type: ignore[union-attr]
    assert plan is not None
    numbers = numbers_of(result)
    assert numbers.serving_sequences == plan.total_sequences
    enough, too_many = (MinSequences(plan.total_sequences), MinSequences(plan.total_sequences + 1))
    passed, = evaluate(numbers, Budgets(min_sequences=enough))
    failed, = evaluate(numbers, Budgets(min_sequences=too_many))
    assert passed.passed and not failed.passed and passed.comparison == ">="
    assert "sequences of 1,000 tokens fit at once on t4" in passed.message


def test_gate_min_sequences_needs_a_gpu_and_a_plan(mlp: Path) -> None:
    with pytest.raises(GraphmemError, match="--min-sequences"):
        complete_budgets(Budgets(min_sequences=MinSequences(8)), gpu=None)
    numbers = numbers_of(analyze_onnx(mlp, batch=1, gpu="t4", plan=False))
    with pytest.raises(GraphmemError, match="needs the serving plan"):
        evaluate(numbers, Budgets(min_sequences=MinSequences(8)))


def test_check_cli_min_sequences(decoder: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    # `graphmem check --min-sequences N --context C` plans the model as served and gates the
    # plan's sequences: N = what fits passes (exit 0), one more fails (exit 1)
    dims = ["--dim", "batch=1", "--dim", "seq=1", "--dim", "past=999"]
    result = analyze_onnx(decoder, gpu="t4", dims={"batch": 1, "seq": 1, "past": 999},
                          serve=True, context=1000, plan=False)
    fitting = result.kv_cache.serving.total_sequences  # type: ignore[union-attr]
    argv = ["check", str(decoder), "--gpu", "t4", *dims, "--context", "1000"]
    assert main([*argv, "--min-sequences", str(fitting)]) == 0
    assert "sequences of 1,000 tokens fit at once on t4" in capsys.readouterr().out
    assert main([*argv, "--min-sequences", str(fitting + 1)]) == 1
    # the budgets file: min_sequences with its context
    budgets = tmp_path / "graphmem.toml"
    budgets.write_text(f'[[model]]\npath = "{decoder}"\ngpu = "t4"\ncontext = 1000\n'
                       f"min_sequences = {fitting + 1}\n"
                       "dims = { batch = 1, seq = 1, past = 999 }\n", encoding="utf-8")
    assert main(["check", "--budgets", str(budgets)]) == 1


@pytest.mark.parametrize(("argv", "message"), [
    (["--min-sequences", "4"], "--min-sequences 4 needs --context TOKENS"),
    (["--context", "512"], "--context 512 is the tokens per sequence of --min-sequences"),
    (["--min-sequences", "4", "--context", "512"], "--min-sequences counts the sequences"),
])
def test_check_cli_min_sequences_refusals(decoder: Path, argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(decoder), *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("entry", "message"), [
    ("context = 512\n", "context = 512 is the tokens per sequence of min_sequences: add"),
    ("min_sequences = 3\n", "min_sequences = 3 needs context = TOKENS"),
])
def test_budgets_file_min_sequences_refusals(decoder: Path, tmp_path: Path, entry: str,
                                             message: str) -> None:
    from graphmem.gate.budgets_file import load_budgets_file

    budgets = tmp_path / "graphmem.toml"
    budgets.write_text(f'[[model]]\npath = "{decoder}"\n{entry}', encoding="utf-8")
    with pytest.raises(GraphmemError, match=message):
        load_budgets_file(budgets)


def test_budgets_file_false_removes_the_default_with_its_context(decoder: Path,
                                                                  tmp_path: Path) -> None:
    from graphmem.gate.budgets_file import load_budgets_file

    budgets = tmp_path / "graphmem.toml"
    budgets.write_text(f'[defaults]\ngpu = "t4"\nmin_sequences = 4\ncontext = 512\n'
                       f'[[model]]\npath = "{decoder}"\nmin_sequences = false\n'
                       f'[[model]]\npath = "{decoder}"\nname = "served"\n', encoding="utf-8")
    removed, kept = load_budgets_file(budgets)
    assert removed.budgets.min_sequences is None
    assert kept.budgets.min_sequences == MinSequences(4, ServingConfig(context=512))


def test_api_request_routes_tensor_parallel_to_serving() -> None:
    request = build_request("m.onnx", serve=True, context=128, tensor_parallel=2, gpus=4)
    assert request.distributed is None and request.serving == ServingConfig(
        context=128, tensor_parallel=2, gpus=4)


# ----- PyTorch models --------------------------------------------------------------------------
@pytest.mark.torch
@pytest.mark.slow
def test_torch_model_cache_from_its_modules_and_limit_from_its_config() -> None:
    model = tiny_llama()
    # a Hugging Face style config: the position limit; the shape comes from the modules
    model.config = SimpleNamespace(max_position_embeddings=512)  # type: ignore[assignment]
    result = analyze_torch(model, ["1x64:int64"], gpu="t4", serve=True, plan=False)
    kv = result.kv_cache
    assert kv is not None and kv.serving is not None
    # tiny_llama: 2 layers, 4 heads of 16, float32: 2 x 2 x 4 x 16 x 4 = 1024 B per token
    assert kv.serving.per_token_bytes == 1024
    assert kv.serving.context == 512  # the position limit, as vLLM's max_model_len default
    assert kv.serving.position_limit_source == "model.config.max_position_embeddings"
    assert kv.max_context == 512  # the plain longest context is capped too
    assert [s.name for s in kv.serving.steps] == ["analyzed step"]
