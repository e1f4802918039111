"""The serving engines' reservations (graphmem/distributed/engines.py), worked by hand from the
engines' sources at the versions docs/serving.md names: vLLM 0.33.0, SGLang 0.5.2, TensorRT-LLM's
PyTorch backend (KvCacheCreator at NVIDIA/TensorRT-LLM commit d8ae02c).

The common example, as in docs/serving.md: a Llama-3-8B-shaped model (32 layers, 8 KV heads of
128, bfloat16: 131,072 B of KV per token; a vocabulary of 128,256) on an A100 80 GB
(85,899,345,920 B), 16,060,522,496 B of weights, a traced prefill of 2,048 tokens with a
1 GiB activation peak, a 512 MiB CUDA context, 8,192 tokens per sequence.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from graphmem import analyze_onnx
from graphmem.distributed.engines import (
    DEFAULT_BLOCK_SIZES,
    TRTLLM_FREE_GPU_MEMORY_FRACTION,
    VLLM_GPU_MEMORY_UTILIZATION,
    default_step_tokens,
    sglang_mem_fraction_static,
    vllm_batch_defaults,
    vllm_capture_sizes,
    vllm_sampler_bytes,
)
from graphmem.distributed.serving import (
    CacheShape,
    ServingConfig,
    ServingInputs,
    StepPeak,
    plan_serving,
)
from graphmem.errors import GraphmemError
from graphmem.report.engine_log import log_lines
from tests.helpers.decoders import decoder_with_past

GIB, MIB = 2**30, 2**20
A100_80GB = 85_899_345_920
LLAMA3_8B = CacheShape(layers=32, kv_heads=8, head_dim=128, dtype="bfloat16", dtype_bytes=2)


def llama(engine: str, **config: object) -> ServingInputs:
    return ServingInputs(
        config=ServingConfig(context=8192, engine=engine, **config),  # type: ignore[arg-type]
        cache=LLAMA3_8B, gpu_name="a100-80gb", capacity_bytes=A100_80GB,
        cuda_context_bytes=512 * MIB, weights_bytes=16_060_522_496,
        steps=(StepPeak("analyzed step", {}, GIB),), position_limit=8192,
        position_limit_source="model.config.max_position_embeddings", vocab_size=128_256,
        logits_dtype_bytes=2, traced_tokens=2048)


# ----- documented defaults -----------------------------------------------------------------------
def test_documented_defaults() -> None:
    # vLLM CacheConfig: gpu_memory_utilization 0.9, block_size 16; SGLang ServerArgs page_size 1;
    # TensorRT-LLM KvCacheConfig: free_gpu_memory_fraction 0.9 ("Default is 90%"),
    # tokens_per_block 32
    assert VLLM_GPU_MEMORY_UTILIZATION == 0.9 and TRTLLM_FREE_GPU_MEMORY_FRACTION == 0.9
    assert DEFAULT_BLOCK_SIZES == {"vllm": 16, "sglang": 1, "trtllm": 32}


@pytest.mark.parametrize(("mib", "share"), [
    (15_360, 0.807),  # T4: reserved (2.8 + 1/10) GiB = 2,969.6 MiB; 12,390.4 / 15,360 = 0.8067
    (23_034, 0.871),  # L4: 20,064.4 / 23,034 = 0.8711
    (81_920, 0.875),  # A100 80 GB: reserved (9.5 + 1/2) GiB = 10,240 MiB; 71,680 / 81,920
    (143_156, 0.911),  # H200: (12 + 1/2) GiB = 12,800 MiB; 130,356 / 143,156 = 0.9106
])
def test_sglang_mem_fraction_static_by_gpu_memory(mib: int, share: float) -> None:
    # SGLang 0.5.2 ServerArgs.__post_init__: round((gpu_mem - reserved_mem) / gpu_mem, 3),
    # gpu_mem in MiB, parallel_size = tp x pp = 1
    assert sglang_mem_fraction_static(mib * MIB) == share


def test_sglang_table_rows_by_hand() -> None:
    # TP 8 on an A100 80 GB: (81,920 - 13,824) / 81,920 = 0.83125 -> 0.831
    assert sglang_mem_fraction_static(81_920 * MIB, 8) == 0.831
    # 180 GiB: (184,320 - 32,768) / 184,320 = 0.82222 -> 0.822
    assert sglang_mem_fraction_static(184_320 * MIB) == 0.822


def test_vllm_batch_defaults_and_capture_sizes() -> None:
    # EngineArgs.get_batch_defaults (OpenAI server): an A100 2,048 tokens and 256 sequences,
    # an H100 8,192 and 1,024, 160 GiB and up 16,384 and 1,024
    assert vllm_batch_defaults("a100-80gb", A100_80GB) == (2048, 256)
    assert vllm_batch_defaults("h100-sxm", 85_017_493_504) == (8192, 1024)
    assert vllm_batch_defaults("b200", 180 * GIB) == (16384, 1024)
    # up to min(2 x 256, 512, 2,048) = 512: 1, 2, 4 (3), 8 .. 248 (31), 256 .. 512 (17) = 51
    sizes = vllm_capture_sizes(256, 2048)
    assert len(sizes) == 51 and sizes[:5] == (1, 2, 4, 8, 16) and sizes[-2:] == (496, 512)
    # max_num_seqs 8: up to 16: 1, 2, 4, 8, 16; at most 10 tokens a step: 10 added
    assert vllm_capture_sizes(8, 8192) == (1, 2, 4, 8, 16)
    assert vllm_capture_sizes(8, 10) == (1, 2, 4, 8, 10)
    # the step each engine profiles by default: vLLM 2,048 on an A100; SGLang's chunked
    # prefill 8,192 under 160 GiB; TensorRT-LLM's max_num_tokens 8,192
    assert [default_step_tokens(e, "a100-80gb", A100_80GB)
            for e in ("vllm", "sglang", "trtllm")] == [2048, 8192, 8192]


def test_vllm_sampler_peak() -> None:
    # 256 requests x 128,256 logits x (2 B bf16 logits + 4 fp32 + 4 sorted + 8 int64 indices
    # + 4 softmax + 1 mask) = 256 x 128,256 x 23 = 755,171,328 B
    assert vllm_sampler_bytes(256, 128_256, 2) == 755_171_328


# ----- Llama-3-8B on an A100 80 GB, each engine --------------------------------------------------
def test_vllm_worked_by_hand() -> None:
    plan = plan_serving(llama("vllm"))
    reserve = plan.reserve
    assert reserve is not None
    # requested = ceil(85,899,345,920 x 0.9) = 77,309,411,328
    assert plan.budget_bytes == 77_309_411_328
    # activation peak = max(1 GiB forward, 755,171,328 B sampler) = 1 GiB
    assert (reserve.sampler_bytes, plan.activation_bytes) == (755_171_328, GIB)
    # CUDA graphs: 1 GiB / 2,048 tokens = 524,288 B a token x 512 = 268,435,456 B first
    # capture + 2 modes x 50 more graphs x 1 MiB = 104,857,600: 373,293,056 B
    assert reserve.cuda_graph_bytes == 373_293_056
    # KV = 77,309,411,328 - 16,060,522,496 - 1,073,741,824 - 373,293,056 = 59,801,853,952
    # (the 512 MiB context is outside the requested memory)
    assert plan.kv_cache_bytes == 59_801_853_952
    # 59,801,853,952 // 2,097,152 = 28,515 blocks; 8,192 tokens = 512 blocks:
    # concurrency 28,515 / 512 = 55.69x; "GPU KV cache size" int(55.6934 x 8,192) = 456,240
    assert (plan.num_blocks, plan.blocks_per_sequence, plan.max_sequences) == (28_515, 512, 55)
    assert plan.kv_tokens == 456_240
    assert log_lines(plan)[-2:] == (
        "GPU KV cache size: 456,240 tokens",
        "Maximum concurrency for 8,192 tokens per request: 55.69x")


def test_vllm_enforce_eager_drops_the_graphs() -> None:
    plan = plan_serving(llama("vllm", enforce_eager=True))
    # 373,293,056 B more: 60,175,147,008 // 2,097,152 = 28,693 blocks
    assert plan.kv_cache_bytes == 59_801_853_952 + 373_293_056
    assert plan.num_blocks == 28_693


def test_sglang_worked_by_hand() -> None:
    plan = plan_serving(llama("sglang"))
    # mem_fraction_static on an A100 80 GB: 0.875; free at start 85,899,345,920 - 536,870,912
    # = 85,362,475,008; the static pool floor(x 0.875) = 74,692,165,632 B
    assert plan.memory_fraction == 0.875 and plan.budget_bytes == 74_692_165_632
    # KV = 74,692,165,632 - 16,060,522,496 = 58,631,643,136 B; cell 131,072 B:
    # max_total_num_tokens = 447,323 (page_size 1); 447,323 // 8,192 = 54 sequences
    assert plan.kv_cache_bytes == 58_631_643_136
    assert (plan.kv_tokens, plan.max_sequences) == (447_323, 54)
    # what is left outside the pool for activations and graphs: 85,362,475,008 -
    # 74,692,165,632 = 10,670,309,376 B
    assert plan.reserve is not None and plan.reserve.outside_bytes == 10_670_309_376
    assert log_lines(plan)[-1] == "max_total_num_tokens=447323"


def test_trtllm_worked_by_hand() -> None:
    plan = plan_serving(llama("trtllm"))
    # peak = 536,870,912 context + 16,060,522,496 weights + 1,073,741,824 step
    # = 17,671,135,232; KV = floor((85,899,345,920 - 17,671,135,232) x 0.9) = 61,405,389,619
    assert plan.reserve is not None and plan.reserve.reserved_bytes == 17_671_135_232
    assert plan.kv_cache_bytes == 61_405_389_619
    # max tokens 61,405,389,619 // 131,072 = 468,485; blocks of 32 tokens (4 MiB): 14,640;
    # 8,192 tokens = 256 blocks: 57 sequences
    assert (plan.kv_tokens, plan.num_blocks, plan.max_sequences) == (468_485, 14_640, 57)
    assert log_lines(plan)[-1] == "Estimated max tokens in KV cache : 468485"


def test_sliding_windows_are_vllms_alone() -> None:
    from graphmem.core.kv_layers import SLIDING, LayerGroup

    windowed = CacheShape(32, 8, 128, "bfloat16", 2, (LayerGroup(SLIDING, 32, 8, 128, 4096),))
    vllm = plan_serving(ServingInputs(**{**llama("vllm").__dict__, "cache": windowed}))
    sglang = plan_serving(ServingInputs(**{**llama("sglang").__dict__, "cache": windowed}))
    # vLLM: min(4,095 + 2,048, 8,192) = 6,143 tokens a layer: cdiv(6,143, 16) + 1 = 385
    # blocks; SGLang's one token pool keeps all 8,192 tokens of every layer
    assert vllm.blocks_per_sequence == 385
    assert sglang.sequence_bytes == 8192 * 131_072 and sglang.max_sequences == 54


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(GraphmemError, match="--engine tgi: choose one of vllm, sglang, trtllm"):
        ServingConfig(engine="tgi").check()


# ----- end to end: the API, the command line, the gate -------------------------------------------
@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("engines") / "decoder.onnx"
    onnx.save(decoder_with_past(), str(path))
    return path


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_every_engine_through_the_api(decoder: Path, engine: str) -> None:
    result = analyze_onnx(decoder, gpu="t4", serve=engine, context=1000, plan=False)
    plan = result.kv_cache.serving  # type: ignore[union-attr]
    assert plan is not None and plan.engine == engine
    assert plan.block_size == DEFAULT_BLOCK_SIZES[engine]
    assert plan.max_sequences >= 1 and result.fit is not None and result.fit.fits


def test_cli_engine_json_and_terminal(decoder: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from graphmem.cli.main import main

    out = tmp_path / "r.json"
    code = main(["analyze", str(decoder), "--serve", "--engine", "sglang", "--gpu", "t4",
                 "--context", "1000", "--no-html", "--json", str(out)])
    assert code == 0
    serving = json.loads(out.read_text())["memory"]["serving"]
    # T4: mem_fraction_static 0.807, page_size 1
    assert (serving["engine"], serving["gpu_memory_utilization"], serving["block_size"]) == (
        "sglang", 0.807, 1)
    assert serving["log"][-1] == f"max_total_num_tokens={serving['kv_tokens']}"
    assert f"max_total_num_tokens={serving['kv_tokens']}" in capsys.readouterr().out


def test_check_gates_on_the_engines_answer(decoder: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from graphmem.cli.main import main

    dims = {"batch": 1, "seq": 1, "past": 999}
    result = analyze_onnx(decoder, gpu="t4", dims=dims, serve="trtllm", context=1000,
                          plan=False)
    fitting = result.kv_cache.serving.total_sequences  # type: ignore[union-attr]
    argv = ["check", str(decoder), "--gpu", "t4", "--dim", "batch=1", "--dim", "seq=1",
            "--dim", "past=999", "--context", "1000", "--engine", "trtllm"]
    # what TensorRT-LLM's cache holds passes (exit 0), one sequence more fails (exit 1)
    assert main([*argv, "--min-sequences", str(fitting)]) == 0
    assert "on t4 (TensorRT-LLM" in capsys.readouterr().out
    assert main([*argv, "--min-sequences", str(fitting + 1)]) == 1
