"""The KV cache per layer type (graphmem/core/kv_layers.py), as vLLM's KV cache specs size it
(vllm/v1/kv_cache_interface.py), worked by hand:

- full attention:  cdiv(context, block) blocks per layer (FullAttentionSpec);
- sliding window W: cdiv(min(W - 1 + step, context), block) + 1 blocks (SlidingWindowSpec;
  step = max_num_batched_tokens, 2048 by default on an A100, 8192 on a larger non-A100 GPU);
- MLA: one latent of kv_lora_rank + qk_rope_head_dim values per token per layer, no V;
- a Mamba layer: a constant state per sequence (MambaSpec);
- maximum concurrency = the KV memory // one sequence's bytes (all groups summed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphmem.core.kv_layers import (
    CHUNKED,
    CROSS,
    FULL,
    MLA,
    SLIDING,
    STATE,
    KvLayout,
    LayerGroup,
)
from graphmem.distributed.attach import dtype_bytes
from graphmem.distributed.serving import (
    CacheShape,
    ServingConfig,
    ServingInputs,
    StepPeak,
    plan_serving,
)
from graphmem.errors import GraphmemError
from tests.helpers.cli import Run, assert_one_error_line
from tests.helpers.llm_configs import (
    DEEPSEEK_V2_LITE_DENSE,
    GEMMA2_9B,
    MISTRAL_7B,
    TINY_JAMBA,
    TINY_LLAMA,
)

GIB, MIB = 2**30, 2**20

# ----- Mistral-7B-v0.1 on an A100 80 GB at 32,768 tokens: the example ----------------
# 32 layers, 8 KV heads of 128, bfloat16, sliding_window 4096; the numbers of
# `graphmem analyze config.json --serve --gpu a100-80gb --context 32768`:
# weights 14,483,464,960 B, the traced step 512,770,304 B, the CUDA context 728,563,712 B.
MISTRAL_FULL = CacheShape(layers=32, kv_heads=8, head_dim=128, dtype="bfloat16", dtype_bytes=2)
MISTRAL = CacheShape(layers=32, kv_heads=8, head_dim=128, dtype="bfloat16", dtype_bytes=2,
                     groups=(LayerGroup(SLIDING, 32, 8, 128, span=4096),))


def mistral_inputs(cache: CacheShape, gpu: str = "a100-80gb", **config: object) -> ServingInputs:
    return ServingInputs(
        config=ServingConfig(context=32768, **config),  # type: ignore[arg-type]
        cache=cache, gpu_name=gpu, capacity_bytes=80 * GIB, cuda_context_bytes=728_563_712,
        weights_bytes=14_483_464_960, steps=(StepPeak("analyzed step", {}, 512_770_304),),
        position_limit=32768, position_limit_source="model.config.max_position_embeddings")


def test_mistral_7b_sliding_window_worked_by_hand() -> None:
    before = plan_serving(mistral_inputs(MISTRAL_FULL))
    after = plan_serving(mistral_inputs(MISTRAL))
    # vLLM 0.33: requested ceil(85,899,345,920 x 0.9) = 77,309,411,328; less the weights,
    # the step and the CUDA graphs (51 sizes, two modes: 2 x 50 x 1 MiB = 104,857,600; the
    # CUDA context is outside the requested memory):
    # 77,309,411,328 - 14,483,464,960 - 512,770,304 - 104,857,600 = 62,208,318,464 B of KV
    assert after.kv_cache_bytes == before.kv_cache_bytes == 62_208_318_464
    # per token 2 x 32 x 8 x 128 x 2 B = 131,072 B; a block of 16 tokens 2 MiB;
    # 62,208,318,464 // 2,097,152 = 29,663 blocks (29,663.2)
    assert after.per_token_bytes == 131_072 and after.num_blocks == before.num_blocks == 29_663
    # every layer full (before): 32,768 / 16 = 2,048 blocks = 4 GiB a sequence, 29,663 // 2,048
    # = 14 sequences
    assert (before.blocks_per_sequence, before.sequence_bytes) == (2048, 4 * GIB)
    assert before.max_sequences == 14
    # sliding (vLLM): min(4096 - 1 + 2048, 32,768) = 6,143 tokens per layer,
    # cdiv(6,143, 16) + 1 = 385 blocks = 770 MiB a sequence; 29,663 // 385 = 77 sequences
    assert after.step_tokens == 2048  # vLLM's default max_num_batched_tokens on an A100
    assert [(u.label, u.layers, u.tokens) for u in after.layer_groups] == [
        ("sliding 4096", 32, 6143)]
    assert (after.blocks_per_sequence, after.sequence_bytes) == (385, 770 * MIB)
    assert after.max_sequences == 77
    # one sequence alone never outgrows its window: the position limit stops it
    assert after.max_context == 32768 and after.context_limited_by == "position limit"


@pytest.mark.torch
def test_mistral_config_says_every_layer_slides() -> None:
    from graphmem.frontends.torch.hf_config import build_config
    from graphmem.frontends.torch.kv import config_layer_groups

    # no layer_types: `sliding_window` 4096 holds for all 32 layers
    assert config_layer_groups(build_config(MISTRAL_7B), 32, 8, 128) == MISTRAL.groups


def test_the_scheduler_step_widens_the_window() -> None:
    # an 80 GiB GPU that is not an A100: vLLM schedules 8,192 tokens a step;
    # min(4,095 + 8,192, 32,768) = 12,287 tokens: cdiv(12,287, 16) + 1 = 769 blocks
    h100 = plan_serving(mistral_inputs(MISTRAL, gpu="h100-sxm"))
    assert (h100.step_tokens, h100.blocks_per_sequence) == (8192, 769)
    # --max-batched-tokens 512: min(4,095 + 512, 32,768) = 4,607: 288 + 1 = 289 blocks
    small = plan_serving(mistral_inputs(MISTRAL, prefill_tokens=512))
    assert (small.step_tokens, small.blocks_per_sequence) == (512, 289)
    assert small.max_sequences == 29_663 // 289


def test_a_short_context_still_takes_the_window_s_extra_block() -> None:
    # 1,000 tokens < the window: min(6,143, 1,000) = 1,000 tokens, cdiv(1,000, 16) + 1 = 64
    # blocks (the window may start mid-block); full attention takes 63
    layout = KvLayout(MISTRAL.layer_groups, 2, 2)
    full = KvLayout(MISTRAL_FULL.layer_groups, 2, 2)
    assert layout.sequence_bytes(1000) == 64 * 32 * 16 * 4096  # 32 layers x 4,096 B per token
    assert full.sequence_bytes(1000) == 63 * 32 * 16 * 4096


# ----- Gemma-2: local and global layers counted apart ----------------------------------------
@pytest.mark.torch
def test_gemma2_alternating_layers_are_counted_apart() -> None:
    from graphmem.frontends.torch.hf_config import build_config
    from graphmem.frontends.torch.kv import config_layer_groups

    config = build_config(GEMMA2_9B)
    groups = config_layer_groups(config, 42, 8, 256)
    # layer_types alternate sliding and full from layer 0: 21 of each
    assert groups == (LayerGroup(SLIDING, 21, 8, 256, span=4096), LayerGroup(FULL, 21, 8, 256))
    layout = KvLayout(groups, dtype_bytes=2, state_dtype_bytes=2)
    # a page of one layer: 16 x 2 x 8 x 256 x 2 B = 131,072 B; at 8,192 tokens
    # full: 8,192 / 16 = 512 blocks; sliding: cdiv(min(4,095 + 2,048, 8,192), 16) + 1 = 385
    # 21 x 131,072 x (512 + 385) = 2,469,003,264 B; every layer full: 42 x 512 x 131,072
    # = 2,818,572,288 B
    uses = layout.uses(8192)
    assert [(u.label, u.tokens, u.bytes) for u in uses] == [
        ("sliding 4096", 6143, 21 * 385 * 131_072), ("full", 8192, 21 * 512 * 131_072)]
    assert layout.sequence_bytes(8192) == 2_469_003_264
    assert KvLayout((LayerGroup(FULL, 42, 8, 256),), 2, 2).sequence_bytes(8192) == 2_818_572_288


# ----- MLA: the compressed latent ------------------------------------------------------------
@pytest.mark.torch
def test_deepseek_v2_lite_mla_latent_per_token() -> None:
    from graphmem.frontends.torch.hf_config import build_config
    from graphmem.frontends.torch.kv import config_layer_groups

    groups = config_layer_groups(build_config(DEEPSEEK_V2_LITE_DENSE), 27, 16, 64)
    # kv_lora_rank 512 + qk_rope_head_dim 64 = one 576-value latent per token per layer
    assert groups == (LayerGroup(MLA, 27, 1, 576),)
    # 27 x 576 x 2 B = 31,104 B (30.4 KiB) per token; the one-formula answer was
    # 2 x 27 x 16 KV heads x 64 x 2 B = 110,592 B (108 KiB)
    mla = KvLayout(groups, dtype_bytes=2, state_dtype_bytes=2)
    assert mla.per_token_bytes == 31_104
    assert KvLayout((LayerGroup(FULL, 27, 16, 64),), 2, 2).per_token_bytes == 110_592
    # the latent is one head: tensor parallelism keeps it whole on every GPU
    assert KvLayout(groups, 2, 2, tensor_parallel=4).per_token_bytes == 31_104


def test_deepseek_v3_mla_per_token() -> None:
    # 61 layers x (512 + 64) x 2 B = 70,272 B per token (bfloat16)
    assert KvLayout((LayerGroup(MLA, 61, 1, 576),), 2, 2).per_token_bytes == 70_272


# ----- fp8 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2", "int8", "float8"])
def test_fp8_kv_is_half_of_bf16(dtype: str) -> None:
    assert dtype_bytes(dtype) * 2 == dtype_bytes("bfloat16") == 2
    fp8 = CacheShape(32, 8, 128, dtype, dtype_bytes(dtype), MISTRAL.groups)
    plan, bf16 = plan_serving(mistral_inputs(fp8)), plan_serving(mistral_inputs(MISTRAL))
    # 65,536 B per token; 62,208,318,464 // 1,048,576 = 59,326 blocks; 385 blocks a sequence
    assert plan.per_token_bytes * 2 == bf16.per_token_bytes == 131_072
    assert plan.sequence_bytes * 2 == bf16.sequence_bytes
    assert (plan.num_blocks, plan.max_sequences) == (59_326, 59_326 // 385)


def test_complex_is_no_kv_dtype() -> None:
    with pytest.raises(GraphmemError, match="--kv-dtype complex64: choose one of"):
        dtype_bytes("complex64")


# ----- a hybrid: the state is per sequence ------------------------------------------------------
@pytest.mark.torch
def test_jamba_state_is_per_sequence_not_per_token() -> None:
    from graphmem.frontends.torch.hf_config import build_config
    from graphmem.frontends.torch.kv import config_layer_groups

    groups = config_layer_groups(build_config(TINY_JAMBA), 8, 2, 16)
    # a Mamba layer's state: expand 2 x hidden 64 = 128 channels x (conv 4 - 1 + state 16)
    # = 2,432 values; 7 Mamba layers and the attention layer at index 4
    assert groups == (LayerGroup(STATE, 7, state_values=2432), LayerGroup(FULL, 1, 2, 16))
    layout = KvLayout(groups, dtype_bytes=4, state_dtype_bytes=4)
    state = 7 * 2432 * 4  # 68,096 B per sequence
    # the attention layer: 2 x 2 x 16 x 4 = 256 B per token, the states add none
    assert layout.per_token_bytes == 256
    assert layout.sequence_bytes(1024) == state + 64 * 16 * 256
    assert layout.sequence_bytes(4096) == state + 256 * 16 * 256
    # fp8 KV leaves the state in the model's dtype
    assert KvLayout(groups, 1, 4).sequence_bytes(1024) == state + 64 * 16 * 64


# ----- the other rules and the inverse --------------------------------------------------------
def test_chunked_and_cross_attention_rules() -> None:
    # chunked local attention of 8,192: cdiv(min(8,192 + 2,048, 131,072), 16) = 640 blocks
    assert LayerGroup(CHUNKED, 1, 8, 128, span=8192).blocks(131_072, 2048, 16) == 640
    # cross-attention caches the encoder's 1,500 tokens whatever the context: 94 blocks
    cross = LayerGroup(CROSS, 1, 8, 64, span=1500)
    assert cross.blocks(10, 2048, 16) == cross.blocks(100_000, 2048, 16) == 94


def test_longest_context_is_searched_where_growth_is_not_linear() -> None:
    layout = KvLayout((LayerGroup(SLIDING, 21, 8, 256, span=4096), LayerGroup(FULL, 21, 8, 256)),
                      2, 2)
    budget = 10 * GIB
    longest = layout.longest_context(budget, cap=10**9)
    assert layout.sequence_bytes(longest) <= budget < layout.sequence_bytes(longest + 1)
    # the sliding half stops growing at 6,143 tokens: 385 blocks of 21 layers; the full half
    # takes the rest: (10 GiB // (21 x 131,072)) - 385 = 3,900 - 385 = 3,515 blocks
    assert longest == 3515 * 16
    # every layer windowed: memory never stops one sequence; the search stops at its cap
    assert KvLayout(MISTRAL.layer_groups, 2, 2).longest_context(GIB, cap=10**6) == 10**6


def test_an_unknown_layer_type_is_refused() -> None:
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from graphmem.frontends.torch.kv import config_layer_groups

    config = SimpleNamespace(layer_types=["full_attention", "conv"])
    with pytest.raises(GraphmemError, match="a 'conv' layer"):
        config_layer_groups(config, 2, 2, 16)


# ----- the command line, end to end -----------------------------------------------------------
TINY_MISTRAL = {**TINY_LLAMA, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                "sliding_window": 64}


@pytest.mark.torch
@pytest.mark.slow
def test_serve_a_sliding_window_config_end_to_end(run: Run, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_MISTRAL))
    out = tmp_path / "out.json"
    code, stdout, _ = run("analyze", tmp_path / "config.json", "--input", "1x32:int64",
                          "--serve", "--gpu", "l4", "--context", "512",
                          "--max-batched-tokens", "32", "--kv-cache-dtype", "fp8",
                          "--no-html", "--json", out)
    assert code == 0
    serving = json.loads(out.read_text())["memory"]["serving"]
    # 2 layers x 2 KV heads x 32 head dim, fp8: 2 x 2 x 2 x 32 x 1 B = 256 B per token;
    # sliding 64: min(63 + 32, 512) = 95 tokens, cdiv(95, 16) + 1 = 7 blocks of 4 KiB
    assert serving["per_token_bytes"] == 256 and serving["step_tokens"] == 32
    assert serving["layer_groups"] == [
        {"type": "sliding 64", "layers": 2, "tokens": 95, "bytes": 7 * 16 * 256}]
    assert serving["blocks_per_sequence"] == 7
    assert serving["max_sequences"] == serving["kv_cache_bytes"] // (7 * 16 * 256)
    assert "KV per sequence 28.0 KiB: sliding 64: 2 layers x 95 tokens" in stdout


def test_two_kv_dtypes_are_refused(run: Run, mlp: Path) -> None:
    code, _, err = run("analyze", mlp, "--kv-dtype", "fp8", "--kv-cache-dtype", "int8")
    assert_one_error_line(code, err, "--kv-dtype fp8 --kv-cache-dtype int8")


def test_onnx_past_inputs_of_unequal_heads_are_counted_per_layer(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from graphmem import analyze_onnx

    heads = {0: 8, 1: 2}  # layer 0 keeps 8 KV heads of 64, layer 1 two
    names = [f"past_key_values.{layer}.{kind}" for layer in heads for kind in ("key", "value")]
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                            ["batch", heads[int(name.split(".")[1])], "past", 64])
              for name in names]
    outputs = [helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, None)
               for i in range(len(names))]
    nodes = [helper.make_node("Identity", [name], [f"out{i}"]) for i, name in enumerate(names)]
    path = tmp_path / "past.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", inputs, outputs)), path)
    kv = analyze_onnx(path, dims={"batch": 1, "past": 8}, kv_cache="auto").kv_cache
    # 2 x (8 + 2) x 64 x 4 B = 5,120 B per token, not 2 x 2 layers x 8 x 64 x 4 B = 8,192 B
    assert kv is not None and kv.shape.per_token_bytes == 5120
    assert kv.shape.groups == (LayerGroup(FULL, 1, 8, 64), LayerGroup(FULL, 1, 2, 64))


def test_plain_kv_report_keeps_windows_and_states() -> None:
    from graphmem.core.symbolic import SymInt
    from graphmem.distributed.kv_cache import KvCacheShape, kv_cache_report

    # a contiguous cache (transformers' DynamicCache), batch 2, 1 MiB usable:
    # the Jamba above: 68,096 B of state + 256 B per token per sequence;
    # 2 x (68,096 + 256 x C) <= 1,048,576: C = (524,288 - 68,096) // 256 = 1,782
    jamba = KvCacheShape(8, 2, 16, "float32", 4, "model.config",
                         (LayerGroup(STATE, 7, state_values=2432), LayerGroup(FULL, 1, 2, 16)), 4)
    report = kv_cache_report(jamba, 2, 1, SymInt.const(0), MIB)
    assert report.max_context == 1782
    # every layer sliding 64 of 256 B per token: a sequence never passes 64 x 256 B, so memory
    # does not stop it (the search's ceiling: what the budget holds were the layers full)
    sliding = KvCacheShape(1, 2, 16, "float32", 4, "model.config",
                           (LayerGroup(SLIDING, 1, 2, 16, span=64),))
    assert kv_cache_report(sliding, 1, 1, SymInt.const(0), MIB).max_context == MIB // 256


@pytest.mark.torch
def test_a_multimodal_model_s_text_decoder_gives_the_groups() -> None:
    from types import SimpleNamespace

    import transformers

    from graphmem.frontends.torch.kv import detect_kv_shape, model_layer_groups

    # Gemma-3's top-level config holds the text decoder in text_config: of 7 layers every
    # sixth is global (layer 5), the others local (sliding 4096)
    config = transformers.Gemma3Config(text_config={"num_hidden_layers": 7})
    model = SimpleNamespace(config=config)
    assert detect_kv_shape(model)[0] == 7  # type: ignore[arg-type]
    assert [(g.kind, g.layers) for g in model_layer_groups(model)] == [  # type: ignore[arg-type]
        (SLIDING, 6), (FULL, 1)]
