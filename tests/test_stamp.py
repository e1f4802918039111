"""Layer stamping (graphmem/frontends/torch/stamp.py) is exact or not done at all.

A decoder of identical layers is traced at 2 and 3 layers and the L-layer step built from them.
The proof is the analysis itself: the JSON result (costs, peak, timeline, largest batch,
suggestions, kernels) is byte-for-byte the same with stamping on and off, for several
architectures (Llama, Qwen2 with its tied head, GPT-2's other block, Mistral's sliding window
on every layer), inference and training, AdamW and SGD, bf16 and fp32, with and without
gradient checkpointing, at 4 layers (Llama's training at 5 too); and the stamped FX graph is
node for node the whole trace. Configs whose layers differ (Gemma-2's alternating windows, a
Qwen2 with sliding windows on some layers, a mixture of experts) are traced whole: same answer,
no stamping.
Every case also checks which traces were made, so a stamping that silently fell back (or a
refusal that silently stamped) fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from graphmem.frontends.torch import stamp
from graphmem.frontends.torch.hf_config import build_hf_model, default_input
from graphmem.frontends.torch.trace import trace_model
from tests.helpers.stamp_json import GEMMA2, GPT2, LLAMA, MISTRAL, MODES, QWEN2, analysed
from tests.helpers.stamp_json import template as stamp_template
from tests.helpers.stamp_json import with_layers as _with_layers

pytestmark = pytest.mark.torch

# refused by the check, not by the plan: Mistral's sliding-window KV cache makes model-level
# nodes (outside every layer) once per layer, so the 3-layer trace is not the 2-layer one with
# one layer's blocks inserted; the whole model is traced
REFUSED = {("mistral", "inference")}


# the quick run (-m "not slow") keeps one case per model; the rest are marked slow
QUICK = {("llama", "adamw-bf16", 4), ("qwen2", "inference", 4), ("gpt2", "sgd-fp32", 4),
         ("mistral", "inference", 4)}
# every model in every mode at 4 layers (two stamped past the three traced). 5 layers (three
# stamped, an odd count) on Llama, for the two training modes that hold the most per layer:
# how many copies are stamped is the builder's (stamp_graph.stamp), the same for every
# architecture; what differs by architecture (GPT-2's block, Qwen2's tied head, Mistral's
# window) the 4-layer cells check, and the node-for-node test checks the graph at 5 layers
FIVE_LAYERS = {("llama", "adamw-bf16"), ("llama", "adamw-bf16-checkpointed")}
MATRIX = [pytest.param(name, config, mode, layers,
                       marks=() if (name, mode, layers) in QUICK else pytest.mark.slow)
          for name, config in (("llama", LLAMA), ("qwen2", QWEN2), ("gpt2", GPT2),
                               ("mistral", MISTRAL))
          for mode in MODES for layers in (4, 5)
          if layers == 4 or (name, mode) in FIVE_LAYERS]


@pytest.mark.parametrize("name,config,mode,layers", MATRIX)
def test_stamped_analysis_is_byte_identical(name: str, config: dict[str, Any], mode: str,
                                            layers: int, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    model = _with_layers(config, layers)
    whole, traced_whole = analysed(model, MODES[mode], False, tmp_path, monkeypatch)
    stamped, traced_stamped = analysed(model, MODES[mode], True, tmp_path, monkeypatch)
    assert set(traced_whole) == {layers}
    if (name, mode) in REFUSED:  # traced at 2 and 3 layers, found different, traced whole
        assert set(traced_stamped) == {2, 3, layers}
    else:  # the probes (largest batch, suggestions) trace again: at 2 and 3 layers only
        assert traced_stamped and set(traced_stamped) == {2, 3}
    assert stamped == whole


@pytest.mark.parametrize("options", [
    # over its budget (peak 1.50 MiB): checkpoint plans and the batch search, each re-traced
    pytest.param({"train": True, "optimizer": "adamw", "amp": "bf16", "suggest": True,
                  "memory_budget": "1500KiB"}, marks=pytest.mark.slow),
    {"train": True, "optimizer": "momentum", "amp": "fp16"},  # GradScaler's state and lists
])
def test_suggestions_and_loss_scaling_are_byte_identical(options: dict[str, Any],
                                                         tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    model = _with_layers(LLAMA, 4)
    whole, _ = analysed(model, options, False, tmp_path, monkeypatch)
    stamped, traced = analysed(model, options, True, tmp_path, monkeypatch)
    assert 2 in traced and 3 in traced
    assert stamped == whole


@pytest.mark.parametrize("name,config", [("gemma2", GEMMA2),
                                         ("qwen2-some-windows", {**QWEN2,
                                                                 "use_sliding_window": True})])
def test_layers_that_differ_are_traced_whole(name: str, config: dict[str, Any], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    model = _with_layers(config, 4)
    options = MODES["adamw-bf16"]
    whole, _ = analysed(model, options, False, tmp_path, monkeypatch)
    answer, traced = analysed(model, options, True, tmp_path, monkeypatch)
    assert set(traced) == {4}  # refused: the whole model traced
    assert answer == whole


def test_the_check_refuses_what_the_plan_let_through(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma-2's layers alternate sliding and global attention: with the plan's config and
    module rules switched off, the 2-layer trace ends in a global layer and the 3-layer one
    in a sliding layer, so the template does not give the 2-layer trace back: traced whole."""
    monkeypatch.setattr(stamp, "_uniform_config", lambda config, layers: True)
    monkeypatch.setattr(stamp, "_identical_layers", lambda layers: True)
    model = _with_layers(GEMMA2, 4)
    options = MODES["adamw-bf16"]
    whole, _ = analysed(model, options, False, tmp_path, monkeypatch)
    answer, traced = analysed(model, options, True, tmp_path, monkeypatch)
    assert set(traced) == {2, 3, 4}  # tried, refused by the check, traced whole
    assert answer == whole


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("layers", [4, 5])
def test_the_stamped_graph_is_the_whole_trace_node_for_node(train: bool, layers: int) -> None:
    """Every node's name (torch.fx's namespace: `mm_29`, `getitem_412`), op, arguments, phase,
    module, shape, dtype and stride, every eager release point, every leaf's role."""
    from graphmem.core.conventions import Amp, TrainingOptions

    module = build_hf_model(_with_layers(LLAMA, layers), training=train).module
    spec, _ = default_input(module, 1, 16)
    training = TrainingOptions(optimizer="adamw", amp=Amp.BF16) if train else None

    def trace() -> Any:
        return trace_model(module, [spec], training)

    made = stamp.stamped(module, training, trace)
    assert made is not None
    assert stamp.same_steps(made, trace())
    names = [n.name for n in made.graph_module.graph.nodes]
    assert len(names) == len(set(names))


def test_same_steps_sees_one_changed_node() -> None:
    """The check that guards stamping can fail: one argument changed is a different step."""
    module = build_hf_model(_with_layers(LLAMA, 4)).module
    spec, _ = default_input(module, 1, 16)
    first, second = trace_model(module, [spec], None), trace_model(module, [spec], None)
    assert stamp.same_steps(first, second)
    node = next(n for n in second.graph_module.graph.nodes if n.op == "call_function"
                and any(isinstance(a, int) for a in n.args))
    node.args = tuple(a + 1 if isinstance(a, int) else a for a in node.args)
    assert not stamp.same_steps(first, second)


@pytest.mark.parametrize("change", [
    {"num_hidden_layers": 3},  # too few layers to gain anything
    {"layer_types": ["sliding_attention", "full_attention"] * 2},
    {"num_local_experts": 4, "num_experts_per_tok": 2},
])
def test_no_plan_where_layers_may_differ(change: dict[str, Any]) -> None:
    config = {**_with_layers(QWEN2, 4), **change}
    if "num_local_experts" in change:
        config = {**_with_layers(LLAMA, 4), **change, "model_type": "mixtral",
                  "architectures": ["MixtralForCausalLM"]}
    module = build_hf_model(config).module
    assert stamp.plan(module, None) is None


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    module = build_hf_model(_with_layers(LLAMA, 4)).module
    assert stamp.plan(module, None) is not None
    monkeypatch.setenv(stamp.ENV, "0")
    assert stamp.plan(module, None) is None


def test_a_read_of_layer_0_itself_is_not_stamped_as_the_previous_layers() -> None:
    """T5-like: every layer reading a tensor layer 0 made (not the previous layer's) looks the
    same at 3 layers; the top layer tells them apart. Make the top layer read layer 0's node
    where the middle reads layer 0's: past 3 layers that is refused."""
    from graphmem.frontends.torch.stamp_graph import FIRST, MIDDLE, TOP, _Builder
    from graphmem.frontends.torch.stamp_graph import stamp as build
    from graphmem.frontends.torch.stamp_labels import NotStampable

    module = build_hf_model(_with_layers(LLAMA, 4)).module
    spec, _ = default_input(module, 1, 16)
    template = stamp_template(module, spec, None)
    three = template.step
    build(template, 5)  # as traced: relative reads, stamped
    layer = template.labels.layer
    builder = _Builder(template, 5)
    middle = next(n for n in three.graph_module.graph.nodes if layer[n] == MIDDLE
                  and any(isinstance(a, torch.fx.Node) and layer[a] == FIRST for a in n.args))
    read = next(a for a in middle.args if isinstance(a, torch.fx.Node) and layer[a] == FIRST)
    top = builder._counterpart(middle, TOP)
    top.args = tuple(read if a is builder._counterpart(read, MIDDLE) else a for a in top.args)
    with pytest.raises(NotStampable, match="of a fixed layer"):
        build(template, 5)
