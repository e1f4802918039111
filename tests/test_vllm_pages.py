"""vLLM's one page size for a hybrid (graphmem/distributed/vllm_pages.py), checked against the
block sizes vLLM logs ("Setting attention block size to N tokens to ensure that attention
page size is >= mamba page size") and the plan's numbers worked by hand."""

from __future__ import annotations

from graphmem.core.kv_layers import FULL, STATE, KvLayout, LayerGroup
from graphmem.distributed import serving
from graphmem.distributed.vllm_pages import uniform_pages

GIB, MIB = 2**30, 2**20
# Qwen3-Next-80B-A3B: 36 gated delta-net layers (conv 24,576 values, recurrent state 524,288)
# and 12 full-attention layers of 2 KV heads of 256 (tests/test_kv_states.py)
QWEN3_NEXT = (LayerGroup(STATE, 36, state_values=548_864), LayerGroup(FULL, 12, 2, 256))


def test_qwen3_next_block_as_vllm_sets_it() -> None:
    # one token of one attention layer 2 x 2 x 256 x 2 B = 2,048 B; a state in bf16
    # 1,097,728 B: 16 x ceil(1,097,728 / (16 x 2,048)) = 16 x 34 = 544 tokens; with the
    # recurrent state in float32 (mamba_ssm_cache_dtype float32) 49,152 + 2,097,152 =
    # 2,146,304 B: 16 x ceil(65.5) = 1,056 tokens, the block vLLM logged for that checkpoint
    pages = uniform_pages(KvLayout(QWEN3_NEXT, 2, 2))
    assert pages is not None and (pages.block_tokens, pages.page_bytes) == (544, 544 * 2048)
    fp32 = (LayerGroup(STATE, 36, state_values=24_576, state_fp32_values=524_288),
            QWEN3_NEXT[1])
    assert uniform_pages(KvLayout(fp32, 2, 2)).block_tokens == 1056  # type: ignore[union-attr]


def test_nemotron_h_block_by_tensor_parallel() -> None:
    # vLLM issue 41037 (Nemotron-3-Nano-30B, fp8 KV, --block-size 32): a token of one
    # attention layer 2 KV heads x 128 x 2 x 1 B = 512 B, the state 2,134,016 B at TP 1:
    # 32 x ceil(2,134,016 / (32 x 512)) = 32 x 131 = 4,192 tokens; at TP 4 one KV head
    # (256 B) and a quarter state (533,504 B): 32 x ceil(533,504 / 8,192) = 32 x 66 = 2,112
    groups = (LayerGroup(STATE, 23, state_values=1_067_008), LayerGroup(FULL, 6, 2, 128))
    for tp, block in ((1, 4192), (4, 2112)):
        pages = uniform_pages(KvLayout(groups, 1, 2, tensor_parallel=tp, block_size=32))
        assert pages is not None and pages.block_tokens == block


def _inputs() -> serving.ServingInputs:
    cache = serving.CacheShape(48, 2, 256, "bfloat16", 2, QWEN3_NEXT)
    return serving.ServingInputs(
        config=serving.ServingConfig(context=32768), cache=cache, gpu_name="h200",
        capacity_bytes=141 * GIB, cuda_context_bytes=728_563_712,
        weights_bytes=40 * GIB, steps=(serving.StepPeak("analyzed step", {}, GIB),),
        position_limit=262_144, position_limit_source="model.config.max_position_embeddings")


def test_a_hybrid_plan_takes_vllm_pages_and_agrees_with_itself() -> None:
    plan = serving.plan_serving(_inputs())
    # groups of 12 layers (36 is not under 1.25 x 12): 3 state groups, 1 attention group; a
    # block 544 x 2,048 x 12 = 13,369,344 B; a sequence of 32,768 tokens ceil(32,768 / 544)
    # = 61 attention blocks and 3 state blocks: 64 blocks, 855,638,016 B (16-token blocks
    # and unpadded states gave 844,824,576 B)
    assert plan.block_size == 544 and plan.block_bytes == 13_369_344
    assert plan.blocks_per_sequence == 64 and plan.sequence_bytes == 64 * 13_369_344
    # one number: the sequences are the blocks // the blocks a sequence takes, and the per
    # type lines add up to the sequence
    assert plan.max_sequences == plan.num_blocks // 64
    assert sum(use.bytes for use in plan.layer_groups) == plan.sequence_bytes
    assert [use.bytes for use in plan.layer_groups] == [3 * 13_369_344, 61 * 13_369_344]
