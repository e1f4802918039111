"""The planner's shapes of a graph of repeated layers inferred for a few layers only
(graphmem/frontends/onnx/plan_layers.py) must be onnx's inference over the whole graph: on
random graphs of repeated layers (shape arithmetic on Shape outputs, Reshapes to constant and
computed targets, Tiles, weights as initializers or TorchScript's Identity copies of them, a
mask made before the layers, reads from two layers back, layers that differ, declared value
infos and per-layer graph outputs, nodes after the layers reading the last or an earlier
layer, a Dropout's mask output named in one layer or skipped in all), on the samples
(thresholds lowered) and on the 22,000-node decoders."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx import ort_plan_shapes as plan_shapes_module
from graphmem.frontends.onnx import plan_layers
from graphmem.frontends.onnx.importer import read_model
from graphmem.frontends.onnx.ort_plan_shapes import ort_plan_shapes
from tests.helpers.layered_graphs import random_layers

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.onnx"))
CACHE = ROOT / "benchmarks" / ".cache"


def _whole_pass(model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch) -> dict:
    with monkeypatch.context() as patched:
        patched.setattr(plan_shapes_module, "layered_shapes", lambda *args: None)
        return ort_plan_shapes(model)


def _layered(model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, bool]:
    """The shapes with the thresholds lowered, and whether the layers were cut."""
    taken = []

    def watched(*args: object) -> object:
        shapes = real(*args)
        taken.append(shapes is not None)
        return shapes

    real = plan_layers.layered_shapes
    with monkeypatch.context() as patched:
        patched.setattr(plan_layers, "MIN_NODES", 0)
        patched.setattr(plan_layers, "MIN_LAYERS", 5)
        patched.setattr(plan_layers, "DECLARED_SHARE", 1)  # declared value infos cut too
        patched.setattr(plan_shapes_module, "layered_shapes", watched)
        return ort_plan_shapes(model), bool(taken and taken[0])


@pytest.mark.parametrize("seed", range(60))
def test_layers_inferred_once_equal_the_whole_pass(seed: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    model = random_layers(seed)
    shapes, _ = _layered(model, monkeypatch)
    assert shapes == _whole_pass(model, monkeypatch)


def test_random_layers_are_cut_and_refused_both() -> None:
    """The random graphs exercise both branches: cut (most) and refused (layers that read
    two back, the nodes after reading an earlier layer, too few repeats)."""
    patch = pytest.MonkeyPatch()
    try:
        taken = [_layered(random_layers(seed), patch)[1] for seed in range(60)]
    finally:
        patch.undo()
    assert 20 <= sum(taken) <= 55


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_samples_cut_equal_the_whole_pass(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = read_model(path)
    shapes, _ = _layered(model, monkeypatch)
    assert shapes == _whole_pass(model, monkeypatch)


def test_a_layered_sample_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpt2.onnx (12 blocks) is cut with the thresholds lowered, to the same shapes."""
    model = read_model(ROOT / "samples" / "gpt2.onnx")
    shapes, taken = _layered(model, monkeypatch)
    assert taken
    assert shapes == _whole_pass(model, monkeypatch)


DECODERS = sorted(CACHE.glob("llama_*.onnx"))


@pytest.mark.slow
@pytest.mark.parametrize("path", DECODERS, ids=lambda p: p.stem)
def test_cached_decoders_cut_equal_the_whole_pass(path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model = read_model(path)
    taken = []
    real = plan_layers.layered_shapes

    def watched(*args: object) -> object:
        shapes = real(*args)
        taken.append(shapes is not None)
        return shapes

    monkeypatch.setattr(plan_shapes_module, "layered_shapes", watched)
    monkeypatch.setattr(plan_layers, "DECLARED_SHARE", 1)  # the dynamo export's declared types
    shapes = ort_plan_shapes(model)
    monkeypatch.undo()
    assert taken == [True]
    assert shapes == _whole_pass(model, monkeypatch)


def test_many_declared_types_infer_the_whole_graph() -> None:
    """Where the file declares a type for more than one value in `DECLARED_SHARE` (the dynamo
    export: 11,718 of 22,103 values), reading them costs what cutting saves: not cut."""
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(plan_layers, "MIN_NODES", 0)
        patch.setattr(plan_layers, "MIN_LAYERS", 5)
        model = random_layers(0)
        model.graph.value_info.extend(
            helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)
            for node in model.graph.node[:len(model.graph.node) // 2])
        assert plan_layers.layered_shapes(model, frozenset(), lambda cut: ({}, {})) is None
    finally:
        patch.undo()


def test_helper_decoder_cut_equals_the_whole_pass(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/helper_llama.py's decoder (onnx.helper: a ConstantOfShape mask, grouped
    query Tiles) at test widths, 40 layers: cut at the default thresholds, the same shapes."""
    import sys
    from dataclasses import replace

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import helper_llama  # type: ignore[import-not-found]

    widths = replace(helper_llama.WIDTHS, layers=40, hidden=64, heads=4, kv_heads=2,
                     intermediate=96, vocab=128)
    path = helper_llama.write(tmp_path / "decoder.onnx", widths)
    sys.modules.pop("helper_llama", None)
    model = read_model(path)
    shapes, taken = _layered(model, monkeypatch)
    assert taken
    assert shapes == _whole_pass(model, monkeypatch)


def test_layers_holding_graphs_infer_the_whole_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer with an If (its branches read the layer's values by name) is not cut: the
    whole pass, the same shapes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    nodes, t = [], "x"
    for layer in range(10):
        then = helper.make_graph([helper.make_node("Identity", [t], [f"a{layer}"])], "then", [],
                                 [helper.make_tensor_value_info(f"a{layer}", TensorProto.FLOAT,
                                                                None)])
        other = helper.make_graph([helper.make_node("Relu", [t], [f"b{layer}"])], "else", [],
                                  [helper.make_tensor_value_info(f"b{layer}", TensorProto.FLOAT,
                                                                 None)])
        nodes.append(helper.make_node("If", ["c"], [f"i{layer}"], then_branch=then,
                                      else_branch=other))
        nodes.append(helper.make_node("Relu", [f"i{layer}"], [f"r{layer}"]))
        t = f"r{layer}"
    graph = helper.make_graph(nodes, "ifs", [x, cond],
                              [helper.make_tensor_value_info(t, TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    shapes, taken = _layered(model, monkeypatch)
    assert not taken
    assert shapes == _whole_pass(model, monkeypatch)


def test_onnx_failing_on_the_cut_infers_the_whole_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where onnx's inference fails on the cut model, the whole model's answer is the file's
    own value_info (ort_plan_shapes), which the cut cannot show: not cut. gpt2.onnx is cut
    with the thresholds lowered (test_a_layered_sample_is_cut); with every inference failing
    the layered answer is refused, not taken from nothing."""
    model = read_model(ROOT / "samples" / "gpt2.onnx")
    monkeypatch.setattr(plan_layers, "MIN_NODES", 0)
    monkeypatch.setattr(plan_layers, "MIN_LAYERS", 5)
    monkeypatch.setattr(plan_shapes_module, "_inference", lambda *args: None)
    assert plan_layers.layered_shapes(
        model, frozenset(), lambda cut: plan_shapes_module._shapes_and_types(cut, frozenset())
    ) is None
