"""Layer stamping's proof (tests/test_stamp.py, tests/test_stamp_periodic.py): one config
analysed with stamping on or off (GRAPHMEM_STAMP), its JSON result and the layer counts the
model was traced at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from graphmem import analyze
from graphmem.frontends.torch import import_step, stamp
from graphmem.frontends.torch.trace import trace_model

MODES: dict[str, dict[str, Any]] = {
    "inference": {},
    "adamw-bf16": {"train": True, "optimizer": "adamw", "amp": "bf16"},
    "sgd-fp32": {"train": True, "optimizer": "sgd"},
    "adamw-bf16-checkpointed": {"train": True, "optimizer": "adamw", "amp": "bf16",
                                "gradient_checkpointing": True},
}


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
    return path.read_bytes(), traced
