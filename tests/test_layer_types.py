"""The importer's inference of a graph of repeated layers run on a few layers only
(graphmem/frontends/onnx/layer_types.py) must type every value as the inference over the whole
graph does: each value's type, byte for byte (the cut's answer has no made-up `unk__` dim),
and the graph built from it, on random graphs of repeated layers, the samples and
benchmarks/helper_llama.py's decoder at test widths; the cached 22,000-node decoders (slow)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx import importer, infer, layer_types, plan_layers
from graphmem.frontends.onnx.importer import import_onnx, read_model
from graphmem.frontends.onnx.value_types import judged_infos
from tests.helpers.layered_graphs import random_layers

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.onnx"))
DECODERS = sorted((ROOT / "benchmarks" / ".cache").glob("llama_*.onnx"))

Answer = tuple[str, dict[str, bytes], list[tuple[object, ...]]]


def _imported(model: onnx.ModelProto, layered: bool, monkeypatch: pytest.MonkeyPatch
              ) -> tuple[Answer, bool]:
    """The engine, every value's type as serialized (the inferred model's value infos and
    outputs, by name: the keys judged are the same) and the IR's values and nodes of `model`
    imported with the layers cut or not, and whether they were."""
    typed: list[dict[str, bytes]] = []
    taken: list[bool] = []
    real_import, real_layered = infer.import_types, layer_types.layered_types

    def recording(*args: object, **kwargs: object) -> infer.Imported:
        imported = real_import(*args, **kwargs)  # type: ignore[arg-type]
        inferred = imported.inferred
        keys = judged_infos(inferred.model.graph.value_info).keys  # the model typed whole
        if inferred.judged is not None:
            assert inferred.judged.keys == keys  # ... and judged as its value infos are
        keys.update((v.name, v.type.SerializeToString()) for v in inferred.model.graph.output)
        typed.append(keys)
        return imported

    def watched(*args: object) -> object:
        cut = real_layered(*args) if layered else None  # type: ignore[arg-type]
        taken.append(cut is not None)
        return cut

    with monkeypatch.context() as patched:
        patched.setattr(plan_layers, "MIN_NODES", 0)
        patched.setattr(plan_layers, "MIN_LAYERS", 5)
        patched.setattr(importer, "import_types", recording)
        patched.setattr(infer, "layered_types", watched)
        imported = import_onnx("model.onnx", source=model)
    values = [(v.name, v.dtype, v.shape, v.role) for v in imported.graph.values.values()]
    nodes = [(n.name, n.op_type, [v and v.name for v in n.inputs], [v.name for v in n.outputs])
             for n in imported.graph.nodes]
    return (imported.shape_inference, typed[0], values + nodes), bool(taken and taken[0])


def _same(model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Assert the layered import equals the whole one; whether the layers were cut."""
    layered, taken = _imported(model, True, monkeypatch)
    whole, _ = _imported(model, False, monkeypatch)
    assert layered == whole
    return taken


def test_random_layers_typed_as_the_whole_inference(monkeypatch: pytest.MonkeyPatch) -> None:
    """40 random layered graphs, typed the same; both branches taken: cut, and refused
    (layers reading two back, nodes after the layers reading an earlier one, per-layer graph
    outputs, too few layers)."""
    taken = [_same(random_layers(seed), monkeypatch) for seed in range(40)]
    assert 8 <= sum(taken) <= 36


@pytest.mark.parametrize("path", [
    pytest.param(path, marks=pytest.mark.slow) if path.name == "gpt2.dynamo.onnx" else path
    for path in SAMPLES], ids=lambda p: p.stem)  # gpt2.dynamo: 0.9 s quiet, its ort part
def test_samples_typed_as_the_whole_inference(path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """At the lowered thresholds no sample is cut: gpt2.onnx's 11 blocks leave 41 nodes of the
    cut to onnxruntime's rules (its sympy names not shown to repeat), the others have too
    few layers; the whole inference's types."""
    assert not _same(read_model(path), monkeypatch)


def test_helper_decoder_typed_as_the_whole_inference(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/helper_llama.py's decoder (rotary slices to `seq`, grouped-query Tiles,
    the three onnx passes) at test widths, 12 layers: cut, the same types."""
    import sys
    from dataclasses import replace

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import helper_llama  # type: ignore[import-not-found]

    widths = replace(helper_llama.WIDTHS, layers=12, hidden=64, heads=4, kv_heads=2,
                     intermediate=96, vocab=128)
    path = helper_llama.write(tmp_path / "decoder.onnx", widths)
    sys.modules.pop("helper_llama", None)
    assert _same(read_model(path), monkeypatch)


def _int64(name: str, values: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=helper.make_tensor(name, TensorProto.INT64, [1], values))


def _counter_layers(start: int) -> onnx.ModelProto:
    """Layers handing a start on, one larger each layer (`Add(v, 1)`, v from x's shape:
    -(start + 40) - 1 + 1 at the first), each slicing x from it: a start below -40 is clamped
    to x's length (40), so the slice keeps 40 rows up to layer `start`, 39 at it: the first
    layers' types agree, later ones' do not."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 8])
    nodes = [_int64("one", [1]), _int64("zero", [0]), _int64("end", [40]),
             _int64("shift", [80 + start]), helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Slice", ["shape", "zero", "one"], ["rows"]),
             helper.make_node("Sub", ["rows", "shift"], ["v0"])]
    hidden, vector = "x", "v0"
    for layer in range(12):
        grown = f"v{layer + 1}"
        nodes += [helper.make_node("Add", [vector, "one"], [grown]),
                  helper.make_node("Slice", ["x", grown, "end", "zero"], [f"s{layer}"]),
                  helper.make_node("ReduceSum", [f"s{layer}"], [f"r{layer}"], keepdims=1),
                  helper.make_node("Add", [hidden, f"r{layer}"], [f"h{layer}"])]
        hidden, vector = f"h{layer}", grown
    graph = helper.make_graph(nodes, "counter", [x],
                              [helper.make_tensor_value_info(hidden, TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _starts_before(count: int = 12) -> onnx.ModelProto:
    """Layers each slicing x from its own start made before the layers (`rows - (84 - l)`:
    l - 44, of the same type in every layer): clamped to x's 40 rows up to layer 4, 39 at
    layer 5."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 8])
    nodes = [_int64("one", [1]), _int64("zero", [0]), _int64("end", [40]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Slice", ["shape", "zero", "one"], ["rows"])]
    for layer in range(count):
        nodes += [_int64(f"c{layer}", [84 - layer]),
                  helper.make_node("Sub", ["rows", f"c{layer}"], [f"start{layer}"])]
    hidden = "x"
    for layer in range(count):
        nodes += [helper.make_node("Slice", ["x", f"start{layer}", "end", "zero"], [f"s{layer}"]),
                  helper.make_node("ReduceSum", [f"s{layer}"], [f"r{layer}"], keepdims=1),
                  helper.make_node("Add", [hidden, f"r{layer}"], [f"h{layer}"])]
        hidden = f"h{layer}"
    graph = helper.make_graph(nodes, "starts", [x],
                              [helper.make_tensor_value_info(hidden, TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _growing(count: int = 12) -> onnx.ModelProto:
    """Layers each appending x's rows to what the layer before made (`Concat(h, x)`): a
    tensor of rank 2 handed on, its type another in every layer."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    nodes, hidden = [], "x"
    for layer in range(count):
        nodes += [helper.make_node("Relu", [hidden], [f"a{layer}"]),
                  helper.make_node("Concat", [f"a{layer}", "x"], [f"h{layer}"], axis=0)]
        hidden = f"h{layer}"
    graph = helper.make_graph(nodes, "growing", [x],
                              [helper.make_tensor_value_info(hidden, TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("make", [_counter_layers, _starts_before, _growing],
                         ids=["handed_on", "made_before", "growing"])
def test_layers_unlike_the_last_inferred_are_not_cut(make: Callable[..., onnx.ModelProto],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a later layer would type other than the last inferred one: a shape vector one
    layer hands the next (`v + 1`: a value data propagation reads, not shown by its type),
    each layer's own start made before the layers (the same type), a tensor growing layer by
    layer: not cut, the whole inference's types."""
    model = make(6) if make is _counter_layers else make()
    assert not _same(model, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("path", DECODERS, ids=lambda p: p.stem)
def test_cached_decoders_typed_as_the_whole_inference(path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The TorchScript export (its norm weights Identity copies made before the layers, its
    layers' `Gather(Shape(x))` handed on) and the dynamo one: cut, the same types."""
    assert _same(read_model(path), monkeypatch)
