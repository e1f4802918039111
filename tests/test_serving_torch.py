"""A Hugging Face decoder's own position limit caps the longest context (issue 18: a Llama
config with max_position_embeddings 2048 was said to fit 1.24M tokens on a GPU)."""

from __future__ import annotations

import pytest

from graphmem import analyze_torch

pytest.importorskip("transformers")

from tests.torch_models import hf

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def test_llama_context_stops_at_max_position_embeddings() -> None:
    model = hf.llama()  # LlamaConfig's default max_position_embeddings: 2048
    assert model.config.max_position_embeddings == 2048
    result = analyze_torch(model, ["1x64:int64"], gpu="a100-80gb", kv_cache="auto", plan=False)
    kv = result.kv_cache
    # 2 layers x 2 KV heads x 32 head dim (128 / 4 heads) x float32: 2 x 2 x 2 x 32 x 4 B
    # = 1,024 B per token; memory alone would hold tens of millions of tokens
    assert kv is not None and kv.shape.per_token_bytes == 1024
    assert kv.max_context == 2048 and kv.max_context_limited_by == "position limit"
    served = analyze_torch(hf.llama(), ["1x64:int64"], gpu="a100-80gb", serve=True, plan=False)
    plan = served.kv_cache.serving  # type: ignore[union-attr]
    # vLLM's max_model_len defaults to the position limit: 2048 tokens = 128 blocks of 16
    assert plan is not None and plan.context == 2048 and plan.blocks_per_sequence == 128
    assert plan.max_context == 2048 and plan.memory_context > 2048
    assert plan.max_sequences == plan.num_blocks // 128
