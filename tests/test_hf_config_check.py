"""A Hugging Face config's numbers are checked before transformers sees them
(graphmem/frontends/torch/hf_config_check.py): each value transformers would reject with its
own exception (exit 3 before), or accept and fail on later (a ZeroDivisionError, a trace
blaming the inputs, hours of building), is one exit-2 line naming the field. And no config
transformers itself ships is refused: every model type's default config passes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from graphmem.errors import GraphmemError
from graphmem.frontends.torch.hf_config_check import check_config_values
from tests.helpers.cli import Run, assert_one_error_line
from tests.helpers.llm_configs import (
    LLAMA3_8B,
    LLAMA3_70B,
    MISTRAL_7B,
    MIXTRAL_8X7B,
    QWEN2_0_5B,
    TINY_LLAMA,
)

VISION = {"model_type": "clip_vision_model", "num_hidden_layers": 1, "hidden_size": 32,
          "intermediate_size": 64, "num_attention_heads": 2}

# (changes to TINY_LLAMA, or a whole config) -> what the one error line names
BAD_CONFIGS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "layers null": ({"num_hidden_layers": None}, ("num_hidden_layers", "expected int")),
    "layers text": ({"num_hidden_layers": "4"}, ("num_hidden_layers is '4'",
                                                 "not a whole number")),
    "layers fraction": ({"num_hidden_layers": 1.5}, ("num_hidden_layers is 1.5",)),
    "layers bool": ({"num_hidden_layers": True}, ("num_hidden_layers is True",)),
    "width NaN": ({"hidden_size": math.nan}, ("hidden_size is nan",)),
    "width negative": ({"hidden_size": -64}, ("hidden_size is -64", "from 1 to")),
    "heads zero": ({"num_attention_heads": 0}, ("num_attention_heads is 0",)),
    "vocabulary zero": ({"vocab_size": 0}, ("vocab_size is 0",)),
    "kv heads do not divide": ({"num_key_value_heads": 3}, (
        "num_attention_heads (4) is not a multiple of num_key_value_heads (3)",)),
    "width not split": ({"num_attention_heads": 5, "num_key_value_heads": 5},
                        ("hidden", "multiple")),  # transformers' own validator, one line
    "layer types": ({"layer_types": ["full_attention"]},
                    ("layer_types lists 1 layers and num_hidden_layers is 2",)),
    "top k above experts": ({"model_type": "mixtral", "num_local_experts": 4,
                             "num_experts_per_tok": 8, "architectures": ["MixtralForCausalLM"]},
                            ("num_experts_per_tok (8) is more than the 4 experts",)),
    "abstract architecture": ({"architectures": ["PreTrainedModel"]},
                              ("architectures names PreTrainedModel", "concrete class")),
    "nested layers": ({"model_type": "llava", "text_config": {**TINY_LLAMA,
                                                              "num_hidden_layers": 20_000},
                       "vision_config": VISION, "architectures": None},
                      ("text_config.num_hidden_layers is 20,000", "more than graphmem builds")),
    "nested layers per part": ({"model_type": "lxmert", "num_hidden_layers": {
        "vision": 5, "cross_encoder": 50_000, "language": 9}}, ("num_hidden_layers",
                                                                "more than graphmem builds")),
}


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_a_bad_config_value_is_one_line_naming_the_field(tmp_path: Path, run: Run,
                                                         case: str) -> None:
    changes, fragments = BAD_CONFIGS[case]
    config = {**TINY_LLAMA, **changes} if "text_config" not in changes else changes
    if config.get("architectures", ...) is None:
        del config["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, _, err = run("analyze", tmp_path, "--no-html", "--input", "1x8:int64")
    assert_one_error_line(code, err, *fragments)
    assert "internal error" not in err


@pytest.mark.parametrize("config", [LLAMA3_8B, LLAMA3_70B, MISTRAL_7B, MIXTRAL_8X7B,
                                    QWEN2_0_5B, TINY_LLAMA])
def test_published_configs_pass(config: dict[str, Any]) -> None:
    check_config_values(config, "config.json")


def test_numbers_per_stage_and_whole_floats_pass() -> None:
    # Swin's heads per stage, a context length written 1200.0, a dense model's 0 experts
    check_config_values({"num_heads": [3, 6, 12, 24], "max_position_embeddings": 1200.0,
                         "num_experts": 0}, "config.json")
    with pytest.raises(GraphmemError, match=r"num_heads is \[3, 0\]"):
        check_config_values({"num_heads": [3, 0]}, "config.json")


# transformers ships default configs this check refuses, each for a reason that held before
KNOWN_REFUSALS = {
    "doge": "num_experts is 16,384, more than graphmem builds",  # the 4,096-expert bound
}


@pytest.mark.slow
def test_no_default_config_of_transformers_is_refused() -> None:
    """Every model type transformers knows (about 800 in 5.x), its default config as
    to_dict() writes it: the check must not refuse a real architecture's numbers."""
    from transformers import CONFIG_MAPPING

    refused, checked = {}, 0
    for model_type in list(CONFIG_MAPPING.keys()):
        try:
            values = CONFIG_MAPPING[model_type]().to_dict()
        except Exception:  # noqa: BLE001 - a config that needs arguments: not a default
            continue
        checked += 1
        try:
            check_config_values(values, model_type)
        except GraphmemError as error:
            refused[model_type] = str(error)
    assert checked > 300
    assert set(refused) == set(KNOWN_REFUSALS), refused
    for model_type, fragment in KNOWN_REFUSALS.items():
        assert fragment in refused[model_type]
