"""Layer stamping: a decoder of L identical layers traced at 2 and 3 layers, the rest built.

Tracing is most of a config analysis's time (make_fx on fake tensors: about 7 CPU s for the 32
layers of a Llama-3-8B training step), and the layers of a decoder are one block repeated. When
every layer is provably the same (`plan`: a transformers model whose layers are one ModuleList
of identical modules, graphmem's LoRA and NF4 layers included, and no config field that differs
per layer: layer_types, sliding windows on some layers, MoE every k layers, per-layer sizes,
any list of one entry per layer that is not uniform), the step is traced with the first 2 and
the first 3 layers (the list cut and `num_hidden_layers` replaced while tracing), the 3-layer
trace is the template (stamp_graph.py), and the template built at 2 and 3 layers must give
exactly the two traces (`same_steps`: every node's name, op, arguments, phase, module, shape,
dtype and stride, every eager release point, the leaves' roles, the kernels chosen): the
3-layer graph is then the 2-layer one with one layer's blocks inserted, and the L-layer step is
built from them (past 3 layers after the template's reads between layers are shown relative:
stamp_graph.py `check_relative`). Any doubt (a refusal, a difference) traces every layer, as
before. A difference between layers with a period over 3 that neither the config's lists nor
the layer modules' attributes show cannot be seen at 2 and 3 layers: `plan`'s rules refuse what
they can.

GRAPHMEM_STAMP=0 turns stamping off (the tests compare both ways; docs/speed.md).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from graphmem.core.conventions import TrainingOptions
from graphmem.frontends.torch.nf4_linear import Nf4Linear
from graphmem.frontends.torch.peft import LoraLinear
from graphmem.frontends.torch.stamp_graph import Template, stamp, val_spec
from graphmem.frontends.torch.stamp_labels import NotStampable, labels_of
from graphmem.frontends.torch.trace import TracedStep

ENV = "GRAPHMEM_STAMP"
MIN_LAYERS = 4  # below this a whole trace is as quick
# config fields that make layers differ when set (transformers' names), with the value that
# keeps every layer the same
_PER_LAYER_KEYS: dict[str, object] = {
    "decoder_sparse_step": 1, "first_k_dense_replace": 0, "mlp_only_layers": [],
    "moe_layer_freq": 1, "interleave_moe_layer_step": 1, "no_rope_layers": [],
    "sliding_window_pattern": None, "scale_attn_by_inverse_layer_idx": False,
    "num_experts": 0, "num_local_experts": 0, "n_routed_experts": None,
}
_PER_LAYER_FALSY = {"num_experts", "num_local_experts", "n_routed_experts",
                    "sliding_window_pattern", "scale_attn_by_inverse_layer_idx"}


@dataclass(frozen=True)
class Plan:
    owner: nn.Module  # holds the ModuleList
    attribute: str  # its name on owner
    prefix: str  # its path in the model: `model.layers`
    config: Any
    layers: int
    lists: tuple[str, ...]  # config fields of one (equal) entry per layer, cut with the layers


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def plan(model: nn.Module, training: TrainingOptions | None) -> Plan | None:
    """Where the layers are, when stamping them is provably exact; else None."""
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None)
    if not enabled() or not isinstance(layers, int) or layers < MIN_LAYERS:
        return None
    if training is not None and (training.grad_accum != 1 or not _uniform_checkpoints(
            training.checkpoints, model, layers)):
        return None
    found = [(path, module) for path, module in model.named_modules()
             if isinstance(module, nn.ModuleList) and len(module) == layers]
    if len(found) != 1 or not _library_modules(model) or not _uniform_config(config, layers):
        return None
    prefix, module_list = found[0]
    if not _identical_layers(list(module_list)):
        return None
    owner_path, _, attribute = prefix.rpartition(".")
    owner = model.get_submodule(owner_path)
    lists = tuple(key for key, value in vars(config).items()
                  if isinstance(value, list | tuple) and len(value) == layers)
    return Plan(owner, attribute, prefix, config, layers, lists)


def _uniform_checkpoints(paths: tuple[str, ...], model: nn.Module, layers: int) -> bool:
    if not paths:
        return True
    lists = [p for p, m in model.named_modules() if isinstance(m, nn.ModuleList)
             and len(m) == layers]
    return len(lists) == 1 and set(paths) == {f"{lists[0]}.{i}" for i in range(layers)}


def _library_modules(model: nn.Module) -> bool:
    """Only transformers' and torch's own modules and graphmem's LoRA and NF4 layers (peft.py,
    nf4_linear.py: the same in every layer they replace): no other rewritten layer."""
    return all(type(m).__module__.startswith(("transformers.", "torch.nn."))
               or type(m) in (LoraLinear, Nf4Linear) for m in model.modules())


def _uniform_config(config: Any, layers: int) -> bool:
    values = vars(config)
    for key, neutral in _PER_LAYER_KEYS.items():
        value = values.get(key)
        if key in _PER_LAYER_FALSY:
            if value:
                return False
        elif value is not None and value != neutral:
            return False
    if values.get("use_sliding_window") and values.get("max_window_layers", layers) < layers:
        return False
    for value in values.values():
        if isinstance(value, list | tuple) and len(value) == layers and len(
                {repr(v) for v in value}) != 1:
            return False
    return True


def _identical_layers(layers: list[nn.Module]) -> bool:
    first = _signature(layers[0])
    return all(_signature(layer) == first for layer in layers[1:])


def _signature(layer: nn.Module) -> tuple[object, ...]:
    modules = tuple((path, type(m)) for path, m in layer.named_modules())
    tensors = tuple((name, tuple(t.shape), t.dtype, t.requires_grad)
                    for name, t in (*layer.named_parameters(), *layer.named_buffers()))
    settings = tuple(sorted((k, repr(v)) for m in layer.modules() for k, v in vars(m).items()
                            if isinstance(v, int | float | bool | str) and k != "layer_idx"
                            and not k.startswith("_")))
    return modules, tensors, settings


@contextlib.contextmanager
def _cut(found: Plan, count: int) -> Iterator[None]:
    """The model with its first `count` layers only, and its config saying so."""
    full = found.owner._modules[found.attribute]
    assert isinstance(full, nn.ModuleList)
    saved = {key: getattr(found.config, key) for key in ("num_hidden_layers", *found.lists)}
    try:
        found.owner._modules[found.attribute] = nn.ModuleList(list(full)[:count])
        found.config.num_hidden_layers = count
        for key in found.lists:
            setattr(found.config, key, saved[key][:count])
        yield
    finally:
        found.owner._modules[found.attribute] = full
        for key, value in saved.items():
            setattr(found.config, key, value)


def stamped(model: nn.Module, training: TrainingOptions | None,
            trace: Callable[[], TracedStep]) -> TracedStep | None:
    """The whole step built from traces at 2 and 3 layers, or None (not provably exact)."""
    found = plan(model, training)
    if found is None or training in _REFUSED.get(model, ()):
        return None
    made = _stamped(found, trace)
    if made is None:  # the probes of this model (other batches) trace it whole at once
        _REFUSED.setdefault(model, []).append(training)
    return made


# the models (and training options) whose check failed once: a shape does not change it
_REFUSED: weakref.WeakKeyDictionary[nn.Module, list[TrainingOptions | None]] = (
    weakref.WeakKeyDictionary())


def _stamped(found: Plan, trace: Callable[[], TracedStep]) -> TracedStep | None:
    with _cut(found, 2):
        two = trace()
    with _cut(found, 3):
        three = trace()
    if two.warnings or two.notes or three.warnings or three.notes:
        return None
    try:
        template = Template(three, labels_of(three, found.prefix), found.prefix, two.kernels)
        if same_steps(stamp(template, 2), two) and same_steps(stamp(template, 3), three):
            return stamp(template, found.layers)
    except NotStampable:
        return None
    return None


def same_steps(a: TracedStep, b: TracedStep) -> bool:
    """Node for node the same step (what graphmem reads of a trace)."""
    if (a.leaf_roles != b.leaf_roles or a.released_after != b.released_after
            or a.kernels != b.kernels or a.mode != b.mode):
        return False
    nodes_a, nodes_b = list(a.graph_module.graph.nodes), list(b.graph_module.graph.nodes)
    return len(nodes_a) == len(nodes_b) and all(
        _same_node(x, y) and (x.op != "get_attr" or _same_constant(
            getattr(a.graph_module, str(x.target)), getattr(b.graph_module, str(y.target))))
        for x, y in zip(nodes_a, nodes_b, strict=True))


def _same_constant(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return type(a) is type(b)
    if val_spec(a) != val_spec(b):
        return False
    return a.device.type == "meta" or bool(torch.equal(a, b))


def _same_node(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    return (a.name == b.name and a.op == b.op and a.target == b.target
            and _tree(a.args) == _tree(b.args) and _tree(a.kwargs) == _tree(b.kwargs)
            and a.meta.get("custom") == b.meta.get("custom")
            and val_spec(a.meta.get("val")) == val_spec(b.meta.get("val")))


def _tree(item: Any) -> Any:
    if isinstance(item, torch.fx.Node):
        return ("node", item.name)
    if isinstance(item, list | tuple):
        return type(item).__name__, tuple(_tree(x) for x in item)
    if isinstance(item, dict):
        return tuple((k, _tree(v)) for k, v in item.items())
    return type(item).__name__, repr(item)
