"""A Hugging Face `config.json` is a model: the architecture it names, built on the meta device.

`build_hf_model(source)` reads the config (a `config.json`, a folder holding one, or the same
values as a dict), makes the transformers config object with `AutoConfig.for_model` (no hub,
no download, no remote code: graphmem reads the one file itself), and builds the model class
the config names under `torch.device("meta")`: parameters have shapes and dtypes and no
storage, so a 70B model builds in seconds and in little memory. The model runs as transformers
runs it: its attention implementation, rotary embeddings, grouped-query attention, MoE routing.

Also here, each from the built module: the example input a causal LM takes when none is given
(`input_ids`), the layers Hugging Face's `gradient_checkpointing_enable` wraps, and what a
mixture of experts runs per token.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from graphmem.errors import GraphmemError, first_line, quiet_logger
from graphmem.frontends.torch.finetune import HfSummary, MoeSummary
from graphmem.frontends.torch.hf_config_check import (
    EXPERT_KEYS,
    LAYER_KEYS,
    MAX_EXPERTS,
    MAX_LAYERS,
    TOP_K_KEYS,
    check_config_values,
)
from graphmem.frontends.torch.loader import TensorSpec
from graphmem.frontends.torch.spec import HF_CONFIG_NAME, hf_config_file

MAX_CONFIG_BYTES = 4 << 20  # published configs are a few KiB; a bigger file is not a config
DEFAULT_BATCH = 1
DEFAULT_SEQ = 2048  # tokens per sequence when neither --dim seq= nor --input says
SEQ_DIMS = ("seq", "seq_len", "sequence")  # names --dim accepts for the sequence length


@dataclass(frozen=True)
class HfModel:
    module: nn.Module
    label: str  # how reports name it: the config's path, or the model type
    notes: tuple[str, ...]  # what was assumed


# ----- the config ------------------------------------------------------------------------------
def read_config(source: str | Path) -> dict[str, Any]:
    """The JSON object of a `config.json` (or of the one in a folder)."""
    path = hf_config_file(str(source))
    if path is None:
        raise GraphmemError(f"{source}: not a Hugging Face config: give a config.json or the"
                            f" folder holding {HF_CONFIG_NAME}")
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise GraphmemError(f"{path}: cannot be read ({error.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise GraphmemError(f"{path}: more than {MAX_CONFIG_BYTES >> 20} MiB, not a model"
                            " config: give the model's config.json")
    try:
        values = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise GraphmemError(f"{path}: not valid JSON ({str(error)[:120]}): give the model's"
                            " config.json") from None
    if not isinstance(values, dict):
        raise GraphmemError(f"{path}: a JSON {type(values).__name__}, not an object: give the"
                            " model's config.json")
    return values


def build_config(values: Mapping[str, Any], where: str = "the config") -> Any:
    """transformers' config object of these values (`AutoConfig.for_model`)."""
    from transformers import AutoConfig

    model_type = values.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise GraphmemError(f"{where}: no \"model_type\": a Hugging Face config names its"
                            " architecture (e.g. \"llama\")")
    settings = {key: value for key, value in values.items()
                if key not in ("model_type", "auto_map", "transformers_version")}
    if "torch_dtype" in settings and "dtype" not in settings:
        settings["dtype"] = settings.pop("torch_dtype")  # transformers 5 renamed it
    try:
        with _quiet_transformers():
            return AutoConfig.for_model(model_type, **settings)
    except Exception as error:  # noqa: BLE001 - transformers' validators raise their own types
        reason = " ".join(str(error).split())[:300]  # its messages span lines
        raise GraphmemError(f"{where}: transformers cannot make a {model_type!r} config"
                            f" ({type(error).__name__}: {reason}): fix the field it names,"
                            " check model_type, or upgrade transformers for a newer"
                            " architecture") from None


def _check_module_counts(config: Any, where: str) -> None:
    """Refuse, before building, a config whose layer or expert count no model has."""
    for keys, limit in ((LAYER_KEYS, MAX_LAYERS), (EXPERT_KEYS, MAX_EXPERTS)):
        for key in keys:
            count = getattr(config, key, None)
            if isinstance(count, int) and count > limit:
                raise GraphmemError(f"{where}: {key} is {count:,}, more than graphmem builds"
                                    f" ({limit:,}): check the config (the largest published"
                                    " models have about 130 layers)")


# ----- the model -------------------------------------------------------------------------------
def build_hf_model(source: str | Path | Mapping[str, Any], training: bool = False) -> HfModel:
    """The model a config describes, on the meta device. Training: `use_cache` off (a
    training step keeps no KV cache; gradient checkpointing would update it twice)."""
    if isinstance(source, Mapping):
        values, label = dict(source), str(source.get("model_type", "config"))
    else:
        values, label = read_config(source), str(source)
    check_config_values(values, label)
    with _unused_integrations_hidden():
        config = build_config(values, label)
        _check_module_counts(config, label)
        if training:
            config.use_cache = False
        module = _build(config, _named_class(config, values.get("architectures"), label), label)
    dtype = str(next(iter(module.parameters()), torch.empty(0)).dtype).removeprefix("torch.")
    notes = (f"built {type(module).__name__} from {label} with transformers on the meta device"
             f" (parameters {dtype}, attention {_attention(module)}): no weights read",)
    return HfModel(module, label, notes)


def _build(config: Any, named: Any, where: str) -> nn.Module:
    """`named`: the class the config's "architectures" names (_named_class), or None."""
    from transformers import AutoModel, AutoModelForCausalLM

    builders = [named] if named is not None else [AutoModelForCausalLM, AutoModel]
    errors = []
    for builder in builders:
        try:
            with _quiet_transformers(), torch.device("meta"):
                if builder is named:
                    return builder._from_config(config)
                return builder.from_config(config)
        except (ValueError, KeyError) as error:  # not a causal LM: the next builder
            errors.append(first_line(error))
        except Exception as error:  # the architecture's code: any failure is reported
            raise GraphmemError(f"{where}: building {config.model_type} failed:"
                                f" {type(error).__name__}: {first_line(error)}") from error
    raise GraphmemError(f"{where}: transformers has no model class for it ({errors[-1]}):"
                        " name one in \"architectures\"")


def _named_class(config: Any, architectures: object, where: str) -> Any:
    """The class `architectures[0]` names, when transformers has it for this config."""
    import transformers

    if not isinstance(architectures, list) or not architectures:
        return None
    name = architectures[0]
    if not isinstance(name, str) or not name.isidentifier():
        return None
    try:
        cls = getattr(transformers, name, None)
    except Exception:  # noqa: BLE001 - the lazy module imports the model's file
        return None
    if not isinstance(cls, type) or not issubclass(cls, transformers.PreTrainedModel):
        return None
    config_class = getattr(cls, "config_class", None)
    if not isinstance(config_class, type) or config_class is transformers.PretrainedConfig:
        raise GraphmemError(f"{where}: architectures names {name}, not a model of one"
                            " architecture:"
                            " name a concrete class such as LlamaForCausalLM (or drop the"
                            " field)")
    return cls if isinstance(config, config_class) else None


def _attention(module: nn.Module) -> str:
    config = getattr(module, "config", None)
    return str(getattr(config, "_attn_implementation", None) or "eager")


# What transformers (5.x) imports as it loads, when installed, that a model built from its config
# on the meta device never runs: accelerate (big-model loading; boto3 with it) and scipy (the
# object-detection losses' matching). About 0.4 s of its 3 s of imports.
UNUSED_INTEGRATIONS = ("accelerate", "scipy")


@contextlib.contextmanager
def _unused_integrations_hidden() -> Iterator[None]:
    """transformers loaded without UNUSED_INTEGRATIONS: while it loads they are None in
    sys.modules, which its availability checks (importlib's find_spec) read as not installed
    and remember; afterwards they import as usual (a user's code may). A transformers loaded
    before (a model file imported it) keeps what it found."""
    hidden = [] if "transformers" in sys.modules else [
        name for name in UNUSED_INTEGRATIONS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers logs deprecations and defaults while building: not the user's business."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here downloads; say it to the hub
    with quiet_logger("transformers", logging.ERROR):
        yield


# ----- the example input -----------------------------------------------------------------------
def default_input(module: nn.Module, batch: int | None, seq: int | None
                  ) -> tuple[TensorSpec, str]:
    """input_ids [batch, seq] int64, and the note that says what was assumed."""
    name = getattr(module, "main_input_name", "input_ids")
    if name != "input_ids":
        raise GraphmemError(f"{type(module).__name__} takes {name}, not token ids: give its"
                            " shape with --input (e.g. --input 1x3x224x224)")
    limit = max_positions(module)
    if seq is not None and limit is not None and seq > limit:
        raise GraphmemError(f"--dim seq={seq}: the model's max_position_embeddings is {limit}:"
                            f" give {limit} or less")
    assumed = []
    if batch is None:
        batch = DEFAULT_BATCH
        assumed.append(f"batch {batch}")
    if seq is None:
        seq = min(DEFAULT_SEQ, limit) if limit else DEFAULT_SEQ
        assumed.append(f"seq {seq}")
    note = f"input_ids {batch}x{seq}:int64"
    if assumed:
        note += (f" assumed ({', '.join(assumed)}): give --batch N and --dim seq=S, or"
                 " --input BxS:int64")
    return TensorSpec((batch, seq), torch.int64), note


def max_positions(module: object) -> int | None:
    value = getattr(getattr(module, "config", None), "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


# ----- what the module is ----------------------------------------------------------------------
def hf_summary(module: nn.Module) -> HfSummary | None:
    """A transformers model's facts; None for any other module."""
    config = getattr(module, "config", None)
    model_type = getattr(config, "model_type", None)
    if not isinstance(model_type, str):
        return None
    dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), None)
    return HfSummary(model_type, type(module).__name__,
                     str(dtype).removeprefix("torch.") if dtype else "none",
                     max_positions(module), _attention(module))


def checkpointed_layers(module: object) -> tuple[str, ...]:
    """The module paths `gradient_checkpointing_enable` wraps: every GradientCheckpointingLayer
    (each decoder layer), as `_set_gradient_checkpointing` walks them."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # older transformers: no checkpointed layers to find
        return ()
    if not isinstance(module, nn.Module):
        return ()
    return tuple(path for path, sub in module.named_modules()
                 if path and isinstance(sub, GradientCheckpointingLayer))


def moe_summary(module: nn.Module) -> MoeSummary | None:
    """Experts per layer and per token from the config; expert weights from the module: 3-D
    parameters with one slice per expert (transformers' fused experts), or the children of an
    `experts` ModuleList with one module per expert."""
    config = getattr(module, "config", None)
    experts = _config_int(config, EXPERT_KEYS)
    top_k = _config_int(config, TOP_K_KEYS)
    if experts is None or top_k is None or experts < 2 or not 0 < top_k <= experts:
        return None
    expert_params = _expert_params(module, experts)
    if expert_params == 0:
        return None
    total = sum(p.numel() for p in module.parameters())
    idle = expert_params // experts * (experts - top_k)  # the experts a token does not run
    matmul = _matmul_params(module)
    return MoeSummary(experts, top_k, expert_params, total, total - idle,
                      flops_per_token_total=2 * matmul, flops_per_token_active=2 * (matmul - idle))


def _config_int(config: object, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _expert_params(module: nn.Module, experts: int) -> int:
    total = 0
    for path, sub in module.named_modules():
        if isinstance(sub, nn.ModuleList) and path.rpartition(".")[2] == "experts" and len(
                sub) == experts:
            total += sum(p.numel() for p in sub.parameters())
            continue
        total += sum(p.numel() for p in sub.parameters(recurse=False)
                     if p.dim() == 3 and p.shape[0] == experts)
    return total


def _matmul_params(module: nn.Module) -> int:
    """Weights a token multiplies by: every parameter of 2 or more dims but the rows of an
    embedding table, which are looked up; an output head tied to the embedding is a matmul."""
    embeddings = {id(sub.weight) for sub in module.modules() if isinstance(sub, nn.Embedding)}
    total = sum(p.numel() for p in module.parameters()
                if p.dim() >= 2 and id(p) not in embeddings)
    head = _output_weight(module)
    if head is not None and id(head) in embeddings:
        total += head.numel()
    return total


def _output_weight(module: nn.Module) -> torch.Tensor | None:
    getter = getattr(module, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    weight = getattr(head, "weight", None)
    return weight if isinstance(weight, torch.Tensor) else None
