"""The serving rules' KV cache (graphmem/core/kv_layers.py, read from the config by
graphmem/frontends/torch/kv.py) against the tensors transformers' own cache holds after one
forward of 24 tokens (batch 1, fp32), on zoo architectures (tests/zoo_models.py) of each kind
of layer; `python benchmarks/zoo_kv.py` prints every decoder's row (docs/zoo.md).

graphmem sizes vLLM's cache. Where transformers keeps another layout the difference is
stated, not hidden: a sliding layer keeps window - 1 tokens between steps there (and an int64
scalar), where graphmem counts the window a step attends over; a Mamba layer keeps d_conv
convolution inputs there, vLLM d_conv - 1."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("transformers")

from tests.helpers.zoo import built
from tests.helpers.zoo_kv import cache_bytes, graphmem_bytes
from tests.zoo_models import MEASURED_ONCE, ZOO

pytestmark = [pytest.mark.torch]

CONTEXT = 24  # longer than every zoo window (8)


@functools.cache
def both(name: str) -> tuple[int, int]:
    model = built(next(entry for entry in ZOO + MEASURED_ONCE if entry.name == name)).eval()
    return graphmem_bytes(model, CONTEXT)[1], cache_bytes(model, CONTEXT)[1]


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


@pytest.mark.parametrize(("name", "conv_channels"), [("jamba", 64), ("bamba", 80)])
def test_a_mamba_layer_is_one_convolution_input_below_transformers(name: str,
                                                                   conv_channels: int) -> None:
    # vLLM's state (MambaStateShapeCalculator): (d_conv - 1) x conv channels + the SSM state;
    # transformers keeps d_conv inputs: one column of conv channels x 4 B more. Jamba (Mamba-1,
    # expand 2 x 32 = 64 channels, d_state 8): 64 x 3 + 64 x 8 = 704 values, 2,816 B.
    # Bamba (Mamba-2, one group): the convolution also runs over B and C, 64 + 2 x 1 x 8 = 80
    # channels: 80 x 3 + 64 x 8 = 752 values, 3,008 B (was 704: the groups were missed)
    predicted, measured = both(name)
    assert measured - predicted == conv_channels * 4


def test_a_model_of_states_only_is_refused_not_read_as_attention() -> None:
    # Mamba-2's layer_types are all `linear_attention`: its mixers carry head_dim 8 and
    # num_heads 8, which the module scan read as 2 full-attention layers (24,576 B at 24
    # tokens; transformers keeps a 6,656 B state): now one line naming the layers and the fix
    from graphmem.errors import GraphmemError
    from graphmem.frontends.torch.kv import detect_kv_shape

    model = built(next(entry for entry in ZOO if entry.name == "mamba2"))
    with pytest.raises(GraphmemError, match=r"Mamba2ForCausalLM: its layers "
                                            r"\(linear_attention\) keep a state"):
        detect_kv_shape(model)
