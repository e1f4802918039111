"""The state a layer keeps instead of tokens (graphmem/frontends/torch/kv_states.py), at
published models' sizes, worked by hand from vLLM's MambaStateShapeCalculator; and a model of
states only planned for serving: its sequences, its pool and its verdict from one number."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from graphmem.core.kv_layers import CHUNKED, FULL, NOTHING_GROWS, STATE, LayerGroup
from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import find_gpu
from graphmem.distributed import serving
from graphmem.distributed.kv_cache import ANY_LENGTH, KvCacheShape, kv_cache_report
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.kv_states import layer_state
from graphmem.passes.fit import GpuFit, fit_on_gpu

GIB, MIB = 2**30, 2**20
# Mamba-2.8B (state-spaces/mamba-2.8b-hf): 64 layers, hidden 2,560, expand 2 (5,120
# channels), d_state 16, conv kernel 4: a layer 5,120 x 3 + 5,120 x 16 = 97,280 values,
# 194,560 B in bfloat16; 64 layers 12,451,840 B a sequence
MAMBA_STATE = 97_280
MAMBA = serving.CacheShape(64, 0, 0, "bfloat16", 2,
                           (LayerGroup(STATE, 64, state_values=MAMBA_STATE),))


def test_mamba_2_8b_state() -> None:
    config = SimpleNamespace(hidden_size=2560, expand=2, conv_kernel=4, state_size=16,
                             intermediate_size=5120)
    assert layer_state(config, "linear_attention") == (MAMBA_STATE, 0)


def test_qwen3_next_gated_delta_net_state() -> None:
    # Qwen3-Next-80B-A3B (transformers' defaults): 16 key heads and 32 value heads of 128,
    # kernel 4: conv over 2 x 16 x 128 + 32 x 128 = 8,192 channels, 3 kept: 24,576 values
    # (48 KiB in bf16); the delta rule's state 32 x 128 x 128 = 524,288 values (1 MiB)
    transformers = pytest.importorskip("transformers")
    from graphmem.frontends.torch.kv import config_layer_groups

    config = transformers.Qwen3NextConfig()
    assert layer_state(config, "linear_attention") == (24_576 + 524_288, 0)
    # 36 of 48 layers (full attention every 4th), 12 full of 2 KV heads of 256
    assert config_layer_groups(config, 48, 2, 256) == (
        LayerGroup(STATE, 36, state_values=548_864), LayerGroup(FULL, 12, 2, 256))


def test_llama4_chunked_layers_from_the_config() -> None:
    # Llama-4 Scout (transformers' defaults): 3 of 4 layers chunked attention of 8,192
    transformers = pytest.importorskip("transformers")
    from graphmem.frontends.torch.kv import config_layer_groups

    config = transformers.Llama4TextConfig()
    assert config_layer_groups(config, 48, 8, 128) == (
        LayerGroup(CHUNKED, 36, 8, 128, span=8192), LayerGroup(FULL, 12, 8, 128))


def test_falcon_h1_hybrid_layer_is_a_state_and_attention() -> None:
    # Falcon-H1-7B style: mamba_d_ssm 4,096 channels, 1 group, d_state 256, kernel 4; every
    # layer a hybrid: conv (4,096 + 2 x 1 x 256) x 3 = 13,824 + 4,096 x 256 = 1,048,576
    # values of state, and full attention of 8 KV heads of 128 beside it
    from graphmem.frontends.torch.kv import config_layer_groups

    config = SimpleNamespace(layer_types=["hybrid"] * 2, mamba_expand=2, mamba_d_conv=4,
                             mamba_d_state=256, hidden_size=3072, mamba_d_ssm=4096,
                             mamba_n_groups=1)
    assert config_layer_groups(config, 2, 8, 128) == (
        LayerGroup(STATE, 2, state_values=1_062_400), LayerGroup(FULL, 2, 8, 128))


def test_lfm2_conv_layer_and_rwkv() -> None:
    # LFM2-1.2B: hidden 2,048, conv_L_cache 3: 2,048 x 2 = 4,096 values a conv layer.
    # RWKV-4 (hidden 2,560): 2 x 2,560 token shifts, 3 x 2,560 float32 sums
    assert layer_state(SimpleNamespace(hidden_size=2048, conv_L_cache=3), "conv") == (4096, 0)
    assert layer_state(SimpleNamespace(hidden_size=2560), "rwkv") == (5120, 7680)
    # the float32 part is 4 B whatever the state's dtype: 5,120 x 2 + 7,680 x 4 = 40,960 B
    rwkv = LayerGroup(STATE, 1, state_values=5120, state_fp32_values=7680)
    assert rwkv.state_bytes(2) == 40_960


def test_a_missing_field_is_one_line_naming_it() -> None:
    with pytest.raises(GraphmemError, match=r"^a 'conv' layer: its state needs conv_L_cache"
                                            r" in the model's config") as error:
        layer_state(SimpleNamespace(hidden_size=2048), "conv")
    assert "\n" not in str(error.value)
    with pytest.raises(GraphmemError, match="mamba_d_conv or conv_kernel"):
        layer_state(SimpleNamespace(mamba_d_state=16, mamba_expand=2, hidden_size=8),
                    "linear_attention")


def _inputs(context: int = 32768, limit: int | None = None) -> serving.ServingInputs:
    # 80 GiB, the weights of Mamba-2.8B (2,768,345,600 B of bf16), a 512 MiB step
    return serving.ServingInputs(
        config=serving.ServingConfig(context=context), cache=MAMBA, gpu_name="a100-80gb",
        capacity_bytes=80 * GIB, cuda_context_bytes=728_563_712, weights_bytes=2_768_345_600,
        steps=(serving.StepPeak("analyzed step", {}, 512 * MIB),), position_limit=limit,
        position_limit_source="model.config.max_position_embeddings" if limit else "")


def test_a_model_of_states_serves_one_block_per_sequence() -> None:
    plan = serving.plan_serving(_inputs())
    # no layer grows: a block is one sequence's states, 12,451,840 B (vLLM: a MambaSpec page
    # per layer, its block the whole sequence), one per sequence; the sequences are the KV
    # memory // that: 77,309,411,328 - 2,768,345,600 - 536,870,912 - 104,857,600 CUDA graphs
    # = 73,899,337,216 B // 12,451,840 = 5,934
    assert plan.per_token_bytes == 0 and plan.sequence_bytes == plan.block_bytes == 12_451_840
    assert plan.kv_cache_bytes == 73_899_337_216
    assert plan.num_blocks == plan.max_sequences == 5934 and plan.blocks_per_sequence == 1
    # the same at any context: a state does not grow
    assert serving.plan_serving(_inputs(context=1 << 20)).max_sequences == 5934
    # vLLM's log: concurrency = blocks / blocks per request, its cache in tokens
    assert plan.concurrency == 5934 and plan.kv_tokens == 5934 * 32768
    assert plan.context_limited_by == NOTHING_GROWS
    assert serving.plan_serving(_inputs(limit=4096)).context_limited_by == "position limit"


def test_the_verdict_the_pool_and_the_rows_agree_for_states() -> None:
    from graphmem.report.html.llm import serving_rows
    from graphmem.report.terminal.llm import serving_lines, serving_verdict

    plan = serving.plan_serving(_inputs())
    fit = serving.serving_fit(_placeholder_fit(), plan)
    pool = next(part for part in fit.parts if part.part.value == "kv_cache")
    # the device total holds the pool of 5,934 sequences' states, not 0 B (it was: a block
    # of 16 x 0 B per token)
    assert int(pool.size_bytes) == 5934 * 12_451_840 <= plan.kv_cache_bytes
    assert fit.fits and "5,934 sequences of 32,768 tokens" in serving_verdict(plan)
    rows = {row.label: row for row in serving_rows(plan)}
    assert rows["sequences of 32,768 tokens at once"].value == "5,934"
    assert rows["longest context"].value == "any length"
    assert "longest context: any length" in "\n".join(serving_lines(plan))
    # the gate's --min-sequences reads the same count, its blocks named as states
    from graphmem.gate.sequences import serving_numbers

    numbers = serving_numbers(SimpleNamespace(kv_cache=SimpleNamespace(serving=plan)))  # type: ignore[arg-type]
    assert numbers.serving_sequences == 5934
    assert "5,934 KV blocks of one sequence's states, 1 per sequence" in numbers.serving_text


def _placeholder_fit() -> GpuFit:
    """A step's fit, which serving_fit replaces by the plan's."""
    return fit_on_gpu(find_gpu("a100-80gb"), SymInt.const(0))


def test_a_model_of_states_kv_report() -> None:
    shape = KvCacheShape(64, 0, 0, "bfloat16", 2, "model.config", MAMBA.groups)
    # batch 3: 3 x 12,451,840 B, whatever the context (was 0 B: only tokens were counted)
    report = kv_cache_report(shape, 3, 1, SymInt.const(0), 80 * GIB)
    assert report.bytes == SymInt.const(3 * 12_451_840)
    assert report.max_context is None and report.max_context_reason == ANY_LENGTH
    # not even one batch of states fits 30 MiB: 0 tokens
    assert kv_cache_report(shape, 3, 1, SymInt.const(0), 30 * MIB).max_context == 0
    # the HTML report's "at batch" row says the states (was "0 B x context tokens")
    from graphmem.report.html.distributed import kv_cache_view

    view = kv_cache_view(report)
    assert view is not None and view.at_batch_text == "35.6 MiB of states, whatever the context"
    # a hybrid: 1 full layer of 2 KV heads of 16 (128 B a token) beside the 64 states
    hybrid = KvCacheShape(65, 2, 16, "bfloat16", 2, "model.config",
                          (*MAMBA.groups, LayerGroup(FULL, 1, 2, 16)))
    view = kv_cache_view(kv_cache_report(hybrid, 3, 1, SymInt.const(0), 80 * GIB))
    assert view is not None
    assert view.at_batch_text == "384 B \u00d7 context tokens + 35.6 MiB of states"
