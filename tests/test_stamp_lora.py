"""Layer stamping (graphmem/frontends/torch/stamp.py) of LoRA and QLoRA fine-tuning: exact.

With adapters on some Linear layers and everything else frozen, a layer's backward holds only
what the adapters' gradients need, and layer 0's differs from the others': its input (the
frozen embedding's output) needs no gradient, so its first norm saves no `detach` and its
backward stops short of the input gradient. The labels follow autograd's structure (each
backward op belongs to the layer of the forward op whose autograd node it runs for:
grad_fns.py, stamp_labels.py), so the middle and top layers' blocks are alike node for node;
layer 0's block is stamped as traced, and a layer above a middle one reads it as the top
layer reads the middle (stamp_graph.py `_read_as`). The proof is tests/test_stamp.py's: the
JSON result (with the largest-batch search on an H100) byte-for-byte the same with stamping
on and off, at 4 and 5 layers, for LoRA on q/v and on every Linear, QLoRA (NF4 base layers,
a custom autograd.Function), with and without gradient checkpointing, on Llama and Qwen2
(GPT-2's and Mistral's blocks too);
and the traces made: 2 and 3 layers only, so a stamp that silently fell back fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from graphmem.core.conventions import Amp, TrainingOptions
from graphmem.frontends.torch import stamp
from graphmem.frontends.torch.finetune import FinetuneOptions, LoraOptions
from graphmem.frontends.torch.hf_config import build_hf_model, default_input
from graphmem.frontends.torch.peft import fine_tuned
from graphmem.frontends.torch.stamp_labels import labels_of
from graphmem.frontends.torch.trace import PHASE_KEY, trace_model
from tests.helpers.stamp_json import (
    GPT2,
    LLAMA,
    MISTRAL,
    QWEN2,
    analysed,
    template,
    with_layers,
)

pytestmark = pytest.mark.torch

ADAMW = {"train": True, "optimizer": "adamw", "amp": "bf16"}
ALL_LINEAR = "r=8,alpha=16,targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
ADAPTERS: dict[str, dict[str, Any]] = {
    "lora-qv": {**ADAMW, "lora": True},  # peft's default targets for both: q_proj, v_proj
    "lora-all-linear": {**ADAMW, "lora": ALL_LINEAR},
    "qlora": {**ADAMW, "qlora": True},
    "qlora-sgd-fp32": {"train": True, "optimizer": "sgd", "qlora": True},
}
# a covering set, not the whole cross (24 cells, 85 s): every adapter with and without
# checkpointing, each on Llama and Qwen2, 5 layers twice; the quick run keeps one cell per
# adapter kind, the rest are marked slow
QUICK = {("llama", "lora-qv", False, 5), ("qwen2", "qlora", True, 4)}
COVER = [("llama", "lora-qv", False, 5), ("llama", "lora-all-linear", True, 4),
         ("llama", "qlora", True, 5), ("llama", "qlora-sgd-fp32", False, 4),
         ("qwen2", "lora-qv", True, 4), ("qwen2", "lora-all-linear", False, 4),
         ("qwen2", "qlora", True, 4), ("qwen2", "qlora", False, 4),
         ("qwen2", "qlora-sgd-fp32", True, 4)]
CONFIGS = {"llama": LLAMA, "qwen2": QWEN2}
MATRIX = [pytest.param(name, CONFIGS[name], adapter, checkpointed, layers,
                       marks=() if (name, adapter, checkpointed, layers) in QUICK
                       else pytest.mark.slow)
          for name, adapter, checkpointed, layers in COVER]
# other blocks: GPT-2 (LoRA on its Conv1D c_attn, peft's default; NF4 Conv1D), Mistral
MATRIX += [pytest.param(name, config, adapter, checkpointed, 4, marks=pytest.mark.slow)
           for name, config in (("gpt2", GPT2), ("mistral", MISTRAL))
           for adapter, checkpointed in (("lora-qv", False), ("qlora", True))]


@pytest.mark.parametrize("name,config,adapter,checkpointed,layers", MATRIX)
def test_stamped_fine_tuning_is_byte_identical(name: str, config: dict[str, Any], adapter: str,
                                               checkpointed: bool, layers: int, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    model = with_layers(config, layers)
    options = {**ADAPTERS[adapter], "gradient_checkpointing": checkpointed}
    whole, traced_whole = analysed(model, options, False, tmp_path, monkeypatch)
    stamped, traced_stamped = analysed(model, options, True, tmp_path, monkeypatch)
    assert set(traced_whole) == {layers}
    assert traced_stamped and set(traced_stamped) == {2, 3}  # stamped, every batch probed
    assert stamped == whole


def _three_layer_labels(finetune: FinetuneOptions | None
                        ) -> tuple[dict[tuple[str | None, int | None], int], Any]:
    """(phase, layer) -> node count of the 3-layer AdamW step, and the step."""
    module = build_hf_model({**LLAMA, "num_hidden_layers": 3}, training=True).module
    spec, _ = default_input(module, 1, 16)
    training = TrainingOptions(optimizer="adamw", amp=Amp.BF16)
    with fine_tuned(module, finetune, "adamw"):
        step = trace_model(module, [spec], training)
    labels = labels_of(step, "model.layers")
    counts: dict[tuple[str | None, int | None], int] = {}
    for node in step.graph_module.graph.nodes:
        key = (node.meta.get("custom", {}).get(PHASE_KEY), labels.layer[node])
        counts[key] = counts.get(key, 0) + 1
    return counts, step


def test_backward_blocks_are_alike_whatever_is_trainable() -> None:
    """LoRA on q_proj/v_proj only: the adapters' gradients come after the MLP's backward, so
    labelling a block from its first parameter gradient gave layers 0, 1, 2 blocks of 26,
    141 and 153 ops (2026-11-28). By autograd's structure the middle and top layers' blocks
    are the same size, forward and backward; layer 0's forward lacks one `detach` (its
    frozen input norm saves rsqrt for no gradient) and its backward the input gradient."""
    counts, _ = _three_layer_labels(FinetuneOptions(lora=LoraOptions()))
    for phase in ("forward", "backward", "optimizer"):
        assert counts[(phase, 1)] == counts[(phase, 2)]
    assert counts[("forward", 0)] == counts[("forward", 1)] - 1
    assert counts[("backward", 0)] < counts[("backward", 1)]
    full, _ = _three_layer_labels(None)  # full fine-tuning: every layer's block alike
    for phase in ("forward", "backward", "optimizer"):
        assert full[(phase, 0)] == full[(phase, 1)] == full[(phase, 2)]


def test_each_backward_op_is_numbered_with_its_autograd_node() -> None:
    """grad_fns.py: every backward op traced inside a backward node's hooks carries that
    node's number, which a forward op made; the engine's own adds and the loss's seed carry
    OUTSIDE. The gradient of every trainable parameter is labelled with its layer."""
    from graphmem.frontends.torch.grad_fns import OUTSIDE

    _, step = _three_layer_labels(FinetuneOptions(lora=LoraOptions()))
    nodes = list(step.graph_module.graph.nodes)
    made = {n.meta["seq_nr"] for n in nodes if n.meta.get("custom", {}).get(PHASE_KEY)
            == "forward" and "seq_nr" in n.meta}
    backward = [n for n in nodes if n.meta.get("custom", {}).get(PHASE_KEY) == "backward"]
    numbers = [n.meta.get("seq_nr") for n in backward]
    assert OUTSIDE in numbers  # the seed and the engine's sums
    assert all(number == OUTSIDE or number in made for number in numbers)
    outside = [n for n in backward if n.meta.get("seq_nr") == OUTSIDE]
    assert outside[0].target.__name__.startswith("ones_like")  # the loss's seed comes first
    assert all(n.op == "call_function" for n in outside)


def test_adapters_pass_the_plan_and_other_modules_do_not() -> None:
    module = build_hf_model({**LLAMA, "num_hidden_layers": 4}, training=True).module
    with fine_tuned(module, FinetuneOptions(lora=LoraOptions()), "adamw"):
        assert stamp.plan(module, TrainingOptions(optimizer="adamw")) is not None
    for layer in module.model.layers:  # the same in every layer, but no module stamping knows
        layer.mlp.act_fn = _OwnActivation()
    assert stamp.plan(module, TrainingOptions(optimizer="adamw")) is None


class _OwnActivation(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_a_read_of_the_top_layer_that_layer_0_does_not_show_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past 3 layers a middle copy reads the next copy's node where the middle reads the top
    layer's: shown by a like node of layer 0 reading the middle's node at that place (a read
    of the top layer's node as such would be layer 0 reading layer 2: refused as 2 layers
    away). Where layer 0's like nodes read something else, nothing shows it: refused."""
    from graphmem.frontends.torch.stamp_graph import FIRST, MIDDLE, TOP, _Builder
    from graphmem.frontends.torch.stamp_graph import stamp as build
    from graphmem.frontends.torch.stamp_labels import NotStampable

    module = build_hf_model({**LLAMA, "num_hidden_layers": 4}, training=True).module
    spec, _ = default_input(module, 1, 16)
    with fine_tuned(module, FinetuneOptions(lora=LoraOptions()), "adamw"):
        made = template(module, spec, TrainingOptions(optimizer="adamw", amp=Amp.BF16))
    build(made, 5)  # as traced: stamped
    layer = made.labels.layer
    builder = _Builder(made, 5)
    top = next(a for n in made.step.graph_module.graph.nodes if layer[n] == MIDDLE  # a gradient
               for a in n.args if isinstance(a, torch.fx.Node) and layer[a] == TOP)
    below = builder._counterpart(top, MIDDLE)
    readers = [n for n in below.users if layer[n] == FIRST]
    assert readers
    for reader in readers:
        reader.args = tuple(reader.prev if a is below else a for a in reader.args)
    with pytest.raises(NotStampable, match="of a fixed layer"):
        build(made, 5)
    monkeypatch.setattr(_Builder, "check_relative", lambda self: None)
    build(made, 5)  # nothing else sees it: the check is what refuses
