"""Layer stamping (graphmem/frontends/torch/stamp.py) where layers differ with a period that
2- and 3-layer traces cannot show: SmolLM3 skips rotary every 4th layer (`no_rope_layers`),
Llama-4 too and puts a mixture of experts on every 2nd (`interleave_moe_layer_step`) beside
chunked attention. Traced at 2 and 3 layers, layer 3 (the first without rotary) never appears,
so a stamp would give every layer rotary: stamping must refuse and trace the whole model. The
proof is the JSON, byte-identical with GRAPHMEM_STAMP=0 at 6 layers (tests/test_stamp.py's
method), and each of the three refusal mechanisms is shown to refuse on its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from graphmem.frontends.torch import stamp
from graphmem.frontends.torch.hf_config import build_hf_model
from tests.helpers.stamp_json import MODES, analysed

pytestmark = pytest.mark.torch

SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 256,
         "num_hidden_layers": 6, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
# rotary on layers 0-2 and 4-5, none on layer 3 (transformers' default interval of 4)
SMOLLM3 = {"model_type": "smollm3", "architectures": ["SmolLM3ForCausalLM"], **SMALL}
# layers 1, 3, 5 a mixture of experts; layer 3 full attention without rotary, the rest chunked
LLAMA4 = {"model_type": "llama4_text", "architectures": ["Llama4ForCausalLM"], **SMALL,
          "head_dim": 16, "intermediate_size_mlp": 96, "num_local_experts": 4,
          "interleave_moe_layer_step": 2, "attention_chunk_size": 8}
CONFIGS = {"smollm3": SMOLLM3, "llama4": LLAMA4}


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_periodic_layers_are_traced_whole_and_byte_identical(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = MODES["adamw-bf16"]
    whole, _ = analysed(CONFIGS[name], options, False, tmp_path, monkeypatch)
    answer, traced = analysed(CONFIGS[name], options, True, tmp_path, monkeypatch)
    assert set(traced) == {6}  # refused by the plan: never traced at 2 and 3 layers
    assert answer == whole


def _layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    return next(list(m) for m in module.modules()
                if isinstance(m, torch.nn.ModuleList) and len(m) == 6)


@pytest.mark.parametrize("name", CONFIGS)
def test_each_refusal_mechanism_sees_the_period(name: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # the fields named as per-layer switches (no_rope_layers, interleave_moe_layer_step)
    # aside, the config's per-layer lists still differ, and with those made uniform the layer
    # modules still do: layer 3's attention keeps use_rope = 0 (Llama-4's odd layers hold
    # experts: other modules)
    module = build_hf_model(CONFIGS[name]).module
    config = module.config
    assert stamp.plan(module, None) is None
    monkeypatch.setattr(stamp, "_PER_LAYER_KEYS", {})
    monkeypatch.setattr(stamp, "_PER_LAYER_FALSY", set())
    assert not stamp._uniform_config(config, 6)
    for key, value in vars(config).items():
        if isinstance(value, list) and len(value) == 6:
            monkeypatch.setattr(config, key, [value[0]] * 6)
    assert stamp._uniform_config(config, 6)
    assert not stamp._identical_layers(_layers(module))
    assert stamp.plan(module, None) is None


@pytest.mark.parametrize("config", [
    # linear attention on 3 layers of 4, full on the 4th; experts everywhere
    {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], "num_experts": 4},
    {"model_type": "minimax", "architectures": ["MiniMaxForCausalLM"], "num_local_experts": 4},
    # sliding layers with rotary, every 4th full without
    {"model_type": "exaone4", "architectures": ["Exaone4ForCausalLM"], "sliding_window": 8},
    # the first layer dense, experts after it
    {"model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "n_routed_experts": 4,
     "first_k_dense_replace": 1, "moe_intermediate_size": 32},
], ids=lambda config: config["model_type"])
def test_the_rounds_other_patterns_are_not_planned(config: dict[str, object]) -> None:
    module = build_hf_model({**SMALL, **config}).module
    assert stamp.plan(module, None) is None
