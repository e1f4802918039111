"""The planner's shapes read once per type pattern (graphmem/frontends/onnx/ort_plan_shapes.py):
onnx's inference names every dim it cannot size anew (`unk__N`), so a decoder's 22,000 value
types were 10,450 distinct byte strings; types equal but for those names (None to the
planner) are read once. The shapes must be those read type by type: on random graphs of
Reshapes to targets inference cannot read (each makes up names), mixed with named and
numeric dims, and with the file itself spelling a dim `unk__3` (then nothing is cut)."""

from __future__ import annotations

import random
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx import ort_plan_shapes as plan_shapes_module
from graphmem.frontends.onnx.ort_plan_shapes import _generated_names_cut, ort_plan_shapes

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _random_model(seed: int, file_names: tuple[str, ...] = ("batch",)) -> onnx.ModelProto:
    """Reshapes of x to targets given as inputs (inference knows their length, not their
    values: a new `unk__N` per dim), Relus, Adds and Concats of them."""
    rng = random.Random(seed)
    dims = [rng.choice((*file_names, 1, 8, 300)) for _ in range(rng.randint(1, 3))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    nodes, made = [], ["x"]
    for index in range(rng.randint(1, 40)):
        kind = rng.random()
        if kind < 0.4:
            target = f"t{index}"
            inputs.append(helper.make_tensor_value_info(target, TensorProto.INT64,
                                                        [rng.randint(1, 12)]))
            nodes.append(helper.make_node("Reshape", [rng.choice(made), target], [f"v{index}"]))
        elif kind < 0.7:
            nodes.append(helper.make_node("Relu", [rng.choice(made)], [f"v{index}"]))
        elif kind < 0.85:
            nodes.append(helper.make_node("Add", [rng.choice(made), rng.choice(made)],
                                          [f"v{index}"]))
        else:
            nodes.append(helper.make_node("Concat", [rng.choice(made), rng.choice(made)],
                                          [f"v{index}"], axis=0))
        made.append(f"v{index}")
    outputs = [helper.make_tensor_value_info(made[-1], TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _read_type_by_type(monkeypatch: pytest.MonkeyPatch, model: onnx.ModelProto) -> dict:
    with monkeypatch.context() as patched:
        patched.setattr(plan_shapes_module, "_read_type",
                        lambda type_proto, key, named, by_pattern:
                        plan_shapes_module._plan_shape(type_proto, named))
        return ort_plan_shapes(model)


@pytest.mark.parametrize("seed", range(80))
def test_types_read_once_per_pattern_equal_every_type_read(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for names in (("batch",), ("batch", "unk__3")):  # the second: the file names unk__3
        model = _random_model(seed, names)
        assert ort_plan_shapes(model) == _read_type_by_type(monkeypatch, model)


def test_the_random_models_make_up_names_and_share_patterns() -> None:
    """The cases above have made-up names, and types that differ only in them."""
    shared = 0
    for seed in range(80):
        inferred = onnx.shape_inference.infer_shapes(_random_model(seed), data_prop=False)
        keys = [info.type.SerializeToString() for info in inferred.graph.value_info]
        shared += len({_generated_names_cut(key) for key in keys}) < len(set(keys))
    assert shared > 20


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.onnx"))[:12])
def test_the_samples_plan_shapes_equal_every_type_read(sample: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model = onnx.load(SAMPLES / sample, load_external_data=False)
    assert ort_plan_shapes(model) == _read_type_by_type(monkeypatch, model)


def test_only_whole_name_fields_are_cut() -> None:
    """A name of another length than its field's, or one a digit follows, is kept."""
    assert _generated_names_cut(b"\x12\x07unk__12\x0a") == b"\x12\x05unk__\x0a"
    assert _generated_names_cut(b"\x12\x06unk__12") == b"\x12\x06unk__12"
    assert _generated_names_cut(b"\x12\x06unk__12") != _generated_names_cut(b"\x12\x06unk__13")
    assert _generated_names_cut(b"\x12\x06unk__1" + b"2") == b"\x12\x06unk__12"
    assert _generated_names_cut(b"\x12\x08myunk__1") == b"\x12\x08myunk__1"


@pytest.mark.parametrize("sample", ["tiny_gpt.onnx", "tiny_gpt.dynamo.onnx",
                                    "tiny_llama.onnx", "resnet50.onnx"])
def test_the_plan_reads_no_initializers_shape(sample: str) -> None:
    """ort_plan_shapes no longer sets each initializer's entry to its dims (one the file
    declares as a graph input or value_info keeps that type's shape): onnxruntime's plan
    (its order, its buffers and their steps, its counts) is the one planned with them set."""
    from graphmem.frontends.onnx.importer import read_model
    from graphmem.frontends.onnx.runtime_inputs import import_onnx_model
    from graphmem.runtime_models.ort_plan import make_layout

    path = SAMPLES / sample
    shapes = ort_plan_shapes(path)
    initializers = read_model(path).graph.initializer
    assert initializers
    with_initializers = {**shapes, **{t.name: tuple(t.dims) for t in initializers}}
    graph = import_onnx_model(path).graph
    plain, added = (make_layout(graph, table, None) for table in (shapes, with_initializers))
    assert (plain.order, plain.buffers, plain.counts, plain.owner) == (
        added.order, added.buffers, added.counts, added.owner)
