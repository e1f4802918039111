"""The serving rules' KV cache (graphmem/core/kv_layers.py, read from the config by
graphmem/frontends/torch/kv.py and kv_states.py) against the tensors transformers' own cache
holds after one forward of 24 tokens (batch 1, fp32) and after 3 decode steps more, on zoo
architectures (tests/zoo_models.py, and tests/helpers/kv_models.py for Qwen3-Next, Llama-4
and MiniMax) of each kind of layer; `python benchmarks/zoo_kv.py` prints every decoder's row
(docs/zoo.md).

graphmem sizes vLLM's cache. Where transformers keeps another layout the difference is
stated, not hidden: a sliding (or chunked) layer keeps window - 1 tokens between steps there
(and an int64 scalar), where graphmem counts the window a step attends over; a layer with a
short convolution (Mamba, Mamba-2, LFM2's conv, a gated delta-net) keeps its kernel's K
inputs there, vLLM K - 1."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("transformers")

from tests.helpers.kv_models import kv_entry
from tests.helpers.zoo import built
from tests.helpers.zoo_kv import cache_bytes, graphmem_bytes

pytestmark = [pytest.mark.torch]

CONTEXT = 24  # longer than every zoo window (8)
DECODE = 3  # decode steps after the prefill


@functools.cache
def both(name: str, steps: int = 0) -> tuple[int, int]:
    """(graphmem's bytes, transformers') at CONTEXT tokens and `steps` decode steps more."""
    model = built(kv_entry(name)).eval()
    return graphmem_bytes(model, CONTEXT + steps)[1], cache_bytes(model, CONTEXT, steps)[1]


@pytest.mark.parametrize("name", ["llama", "gpt_bigcode", "falcon", "deepseek_v3",
                                  "deepseek_v2", "dbrx"])
def test_full_attention_caches_are_exact(name: str) -> None:
    # full layers: 2 (K, V) x kv_heads x head_dim x 4 B x 24 tokens x 2 layers. Llama 2 KV
    # heads of 8: 6,144 B. GPT-BigCode and Falcon (multi_query: one KV head of 8; Falcon's
    # config spells it `multi_query`, not num_key_value_heads, and was read as 4 heads,
    # 12,288 B): 3,072 B. DeepSeek's MLA: one latent of kv_lora_rank 16 + qk_rope_head_dim 4
    # a token, which transformers 5 caches as such too: 20 x 4 x 24 x 2 = 3,840 B
    predicted, measured = both(name)
    assert predicted == measured


@pytest.mark.parametrize(("name", "sliding_layers"), [("gemma3", 1), ("gpt_oss", 1),
                                                      ("cohere2", 2)])
def test_a_sliding_layer_is_one_token_above_transformers(name: str, sliding_layers: int
                                                         ) -> None:
    # window 8, 2 KV heads of 8: a token 2 x 2 x 8 x 4 = 128 B a layer. transformers'
    # DynamicSlidingWindowLayer keeps window - 1 = 7 tokens and an int64 scalar (8 B):
    # 896 + 8 = 904 B; graphmem 8 tokens, 1,024 B: 120 B above per sliding layer (Gemma-3
    # 4,096 against 3,976 B, Cohere-2 2,048 against 1,808 B)
    predicted, measured = both(name)
    assert predicted - measured == sliding_layers * (128 - 8)


@pytest.mark.parametrize(("name", "conv_columns"), [
    ("jamba", 64), ("bamba", 80), ("mamba", 2 * 64), ("falcon_mamba", 2 * 64),
    ("mamba2", 2 * 80), ("zamba2", 2 * 80), ("falcon_h1", 2 * 80), ("lfm2", 32),
    ("qwen3_next", 3 * 64)])
@pytest.mark.parametrize("steps", [0, DECODE])
def test_a_convolution_state_is_one_input_below_transformers(name: str, conv_columns: int,
                                                             steps: int) -> None:
    # vLLM's state (MambaStateShapeCalculator): (K - 1) x conv channels + the recurrent
    # state; transformers keeps K inputs: one column of the conv channels x 4 B more per
    # layer, after the prefill and after decode steps alike (a state does not grow).
    # Jamba (Mamba-1, expand 2 x 32 = 64 channels, d_state 8): 64 x 3 + 64 x 8 = 704 values,
    # 2,816 B. Bamba (Mamba-2, one group): the convolution also runs over B and C,
    # 64 + 2 x 1 x 8 = 80 channels: 80 x 3 + 8 heads x 8 x 8 = 752 values (was 704: the groups
    # were missed). Mamba, Falcon-Mamba: 2 layers of Jamba's; Mamba-2: 2 of Bamba's.
    # Zamba2's 2 layers (a Mamba-2 one and a hybrid: the same Mamba-2 beside attention) and
    # Falcon-H1's 2 hybrids (mamba_d_ssm 64): 80 channels each. LFM2's conv layer: hidden 32 x
    # (conv_L_cache 3 - 1) = 64 values, 256 B (transformers 32 x 3, 384 B). Qwen3-Next's 3
    # gated delta-net layers: conv over 2 x 2 key heads x 8 + 4 value heads x 8 = 64 channels:
    # 64 x 3 + 4 x 8 x 8 = 448 values, 1,792 B a layer (transformers 2,048 B)
    predicted, measured = both(name, steps)
    assert measured - predicted == conv_columns * 4


@pytest.mark.parametrize("steps", [0, DECODE])
def test_hybrid_layers_cache_their_attention_beside_the_state(steps: int) -> None:
    # Falcon-H1: every layer a hybrid; each caches attention's K and V (2 KV heads of 8) as
    # well as its Mamba-2 state: 2 x (752 x 4 + 2 x 2 x 8 x 4 x 27) = 2 x (3,008 + 3,456)
    # = 12,928 B after 24 + 3 tokens (and one column of 80 x 4 B a layer below transformers)
    assert both("falcon_h1", steps)[0] == 2 * (752 * 4 + 2 * 2 * 8 * 4 * (CONTEXT + steps))


@pytest.mark.parametrize("steps", [0, DECODE])
def test_rwkv_state_is_exact(steps: int) -> None:
    # RWKV (no vLLM state shape: transformers' state): per layer 2 token shifts of hidden 32
    # and the WKV numerator, denominator and max of 32, kept in float32:
    # 2 layers x (2 x 32 + 3 x 32) x 4 B = 1,280 B, whatever the length
    predicted, measured = both("rwkv", steps)
    assert predicted == measured == 1280


def test_rwkv_and_rg_lru_keep_float32_sums_in_bfloat16() -> None:
    # in bfloat16 transformers keeps RWKV's token shifts in the model's dtype and the WKV sums
    # in float32: 2 x (2 x 32 x 2 + 3 x 32 x 4) = 1,024 B (all bf16 would be 640 B).
    # RecurrentGemma's RG-LRU state (lru_width 32) is float32 too: conv 32 x 3 x 2 = 192 B +
    # 32 x 4 = 128 B, with its sliding layer 2 x 2 x 8 x 2 B x 8 tokens = 512 B: 832 B
    import torch

    for name, expected in (("rwkv", 1024), ("recurrent_gemma", 832)):
        model = built(kv_entry(name)).eval().to(torch.bfloat16)
        assert graphmem_bytes(model, CONTEXT, dtype_bytes=2)[1] == expected
    rwkv = built(kv_entry("rwkv")).eval().to(torch.bfloat16)
    assert cache_bytes(rwkv, CONTEXT)[1] == 1024


@pytest.mark.parametrize("steps", [0, DECODE])
def test_recurrent_gemma_state_is_exact_and_its_window_one_token_above(steps: int) -> None:
    # RecurrentGemma (no vLLM state shape: transformers' state): the recurrent layer's
    # convolution keeps conv1d_width - 1 = 3 inputs of lru_width 32 there too, and the RG-LRU
    # state 32 in float32: (96 + 32) x 4 = 512 B, exact. Its attention layer slides over 8
    # tokens: graphmem 8 x 128 B = 1,024 B, transformers 7 tokens and an int64 scalar, 904 B
    predicted, measured = both("recurrent_gemma", steps)
    assert predicted - measured == 128 - 8


@pytest.mark.parametrize("steps", [0, DECODE])
def test_llama4_chunked_layers_keep_a_chunk(steps: int) -> None:
    # 3 chunked layers (chunks of 8) and one full, 2 KV heads of 8: a token 128 B a layer.
    # graphmem keeps the chunk a step attends over (8 tokens, 1,024 B); transformers keeps
    # chunk - 1 = 7 tokens and an int64 scalar (904 B), as for a sliding window: 3 x 120 B
    # above, after the prefill and the decode steps (the full layer grows alike in both)
    predicted, measured = both("llama4", steps)
    assert predicted - measured == 3 * (128 - 8)


@pytest.mark.parametrize("steps", [0, DECODE])
def test_minimax_lightning_state_is_exact(steps: int) -> None:
    # the lightning (linear) attention layer keeps K^T V per head: 4 heads x 8 x 8 x 4 B =
    # 1,024 B (vLLM linear_attention_state_shape, MiniMaxCache's linear_cache alike); the
    # full layer 2 x 2 x 8 x 4 B x 24 tokens = 3,072 B: 4,096 B, 4,480 B 3 tokens later
    predicted, measured = both("minimax", steps)
    assert predicted == measured == 1024 + 128 * (CONTEXT + steps)


def test_a_model_of_states_only_has_no_kv_heads_and_its_states() -> None:
    # Mamba-2's layer_types are all `linear_attention`: its mixers carry head_dim 8 and
    # num_heads 8, which the module scan read as 2 full-attention layers (24,576 B at 24
    # tokens; transformers keeps a 6,656 B state), later refused with one line; now 2 layers
    # of state, no KV head, 752 values each
    from graphmem.core.kv_layers import STATE, LayerGroup
    from graphmem.frontends.torch.kv import detect_kv_shape, model_layer_groups

    model = built(kv_entry("mamba2"))
    assert detect_kv_shape(model)[:3] == (2, 0, 0)
    assert model_layer_groups(model) == (LayerGroup(STATE, 2, state_values=752),)
