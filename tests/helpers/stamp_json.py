"""Layer stamping's proof (tests/test_stamp.py, test_stamp_periodic.py, test_stamp_lora.py):
the configs at test widths, and one config analysed with stamping on or off (GRAPHMEM_STAMP):
its JSON result and the layer counts the model was traced at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from graphmem import analyze
from graphmem.frontends.torch import import_step, stamp
from graphmem.frontends.torch.trace import trace_model
from tests.helpers.llm_configs import GEMMA2_9B, MISTRAL_7B, QWEN2_0_5B, TINY_LLAMA

# the architectures' published configs at test widths (the layer count each test sets)
SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 256}
LLAMA = {**TINY_LLAMA, **SMALL}
QWEN2 = {**QWEN2_0_5B, **SMALL, "max_window_layers": 2}
MISTRAL = {**MISTRAL_7B, **SMALL, "sliding_window": 8}
GEMMA2 = {**GEMMA2_9B, **SMALL, "head_dim": 16, "query_pre_attn_scalar": 16,
          "sliding_window": 8}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_head": 4,
        "n_positions": 256, "vocab_size": 256, "n_layer": 2}

MODES: dict[str, dict[str, Any]] = {
    "inference": {},
    "adamw-bf16": {"train": True, "optimizer": "adamw", "amp": "bf16"},
    "sgd-fp32": {"train": True, "optimizer": "sgd"},
    "adamw-bf16-checkpointed": {"train": True, "optimizer": "adamw", "amp": "bf16",
                                "gradient_checkpointing": True},
}


def with_layers(config: dict[str, Any], count: int) -> dict[str, Any]:
    key = "n_layer" if config["model_type"] == "gpt2" else "num_hidden_layers"
    return {**config, key: count}


def analysed(config: dict[str, Any], options: dict[str, Any], on: bool, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, list[int]]:
    """The JSON result and the layer counts traced."""
    traced: list[int] = []

    def counting(model: Any, *args: Any, **kwargs: Any) -> Any:
        traced.append(model.config.num_hidden_layers)
        return trace_model(model, *args, **kwargs)

    monkeypatch.setattr(import_step, "trace_model", counting)
    monkeypatch.setenv(stamp.ENV, "1" if on else "0")
    path = tmp_path / f"{'on' if on else 'off'}.json"
    analyze(config, batch=1, dims={"seq": 16}, gpu="h100-sxm", **options).to_json(path)
    return _without_cache_notes(path.read_bytes()), traced


def _without_cache_notes(raw: bytes) -> bytes:
    """The JSON without memo_caches.py's note that the trace emptied a cache holding entries
    from before the analysis: it says what this process did before (an earlier test file on
    the same pytest-xdist worker filled the cache), not what the model needs, so only the
    first of two analyses in a process may carry it; everything else compared byte for byte."""
    data = json.loads(raw)
    _drop_cache_notes(data)
    return json.dumps(data, indent=2).encode()


def _drop_cache_notes(node: Any) -> None:
    if isinstance(node, dict):
        notes = node.get("notes")
        if isinstance(notes, list):
            node["notes"] = [n for n in notes
                             if not (isinstance(n, str) and "memoized function cache" in n)]
        for value in node.values():
            _drop_cache_notes(value)
    elif isinstance(node, list):
        for value in node:
            _drop_cache_notes(value)


def template(module: Any, spec: Any, training: Any) -> Any:
    """stamp.py's template of `module` (traced at 3 layers, kernels counted at 2)."""
    from graphmem.frontends.torch.stamp_graph import Template
    from graphmem.frontends.torch.stamp_labels import labels_of

    found = stamp.plan(module, training)
    assert found is not None
    with stamp._cut(found, 2):
        two = trace_model(module, [spec], training)
    with stamp._cut(found, 3):
        three = trace_model(module, [spec], training)
    return Template(three, labels_of(three, found.prefix), found.prefix, two.kernels)
