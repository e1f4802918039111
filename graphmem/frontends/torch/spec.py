"""Is a model argument a PyTorch model (`file.py:fn`, `pkg.mod:fn`, a Hugging Face config)?
Answered without torch."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

HF_CONFIG_NAME = "config.json"  # what a Hugging Face model folder names its config


@dataclass(frozen=True)
class KeywordInput:
    """An example input passed as a keyword, `model(..., name=value)`: `value` is a tensor, a
    `"4x1024:int64"` string or a shape tuple, as a positional input is."""

    name: str
    value: object


def is_model_spec(text: str) -> bool:
    """`file.py:fn` or `pkg.mod:fn`, not a file such as `model.onnx`."""
    return ":" in text and not _exists(text) and not text.endswith(".onnx")


def is_hf_config(text: str) -> bool:
    """A Hugging Face config: a `.json` file, or a folder holding `config.json`."""
    return hf_config_file(text) is not None


def hf_config_file(text: str) -> Path | None:
    """The config file `text` names: itself (a .json file) or its folder's config.json."""
    if text.lower().endswith(".json") and _is_file(text):
        return Path(text)
    inside = os.path.join(text, HF_CONFIG_NAME)
    if _is_dir(text) and _is_file(inside):
        return Path(inside)
    return None


def _exists(text: str) -> bool:
    """Path.exists that says False, never raises, for a NUL byte or a name too long."""
    return _mode(text) is not None


def _is_file(text: str) -> bool:
    mode = _mode(text)
    return mode is not None and stat.S_ISREG(mode)


def _is_dir(text: str) -> bool:
    mode = _mode(text)
    return mode is not None and stat.S_ISDIR(mode)


def _mode(text: str) -> int | None:
    try:
        return os.stat(text).st_mode
    except (OSError, ValueError):
        return None


def model_label(model: str) -> str:
    """How reports name a model by default (and analyze its default report): a spec by its
    file or module and function (`nets/model.py:build` -> `model.build`: two models built by
    `build()` must not write one report), a Hugging Face config.json by its folder, a file by
    its stem."""
    if is_model_spec(model):
        location, _, function = model.rpartition(":")
        where = Path(location).stem if location.endswith(".py") else location.rpartition(".")[2]
        return f"{where}.{function}" if where else function
    config = hf_config_file(model)
    if config is not None and config.name == HF_CONFIG_NAME:
        return config.resolve().parent.name or "config"
    return Path(model).stem
