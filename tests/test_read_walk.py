"""read_model's steps on validation's one walk over the nodes: the name scopes kept node by
node on it (read.py keep_only_name_scope), the single-producer check's outputs gathered on it,
and densify given the graphs and the nodes of a compact form's name it found. The model read
is byte for byte the one the separate walks made: on the samples and on random models of
Constant lists, sparse tensors, bodies, doc strings and metadata."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import dense_forms, read
from graphmem.frontends.onnx.limits import check_nesting
from graphmem.frontends.onnx.model_text import parse_model
from graphmem.frontends.onnx.untrusted import read_model_bytes
from graphmem.frontends.onnx.validation import Walked, strip_and_validate

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "samples").glob("*.onnx"))
KEYS = (read.NAME_SCOPES, "namespace", "pkg.torch.onnx.stack_trace")


def _separate_walks(path: Path) -> bytes:
    """read_model as it was: validation's walk, densify's own, then the name scopes'."""
    model = parse_model(read_model_bytes(path))
    model.DiscardUnknownFields()
    walked = strip_and_validate(model)
    check_nesting(model, walked.bodies)
    read._drop_large_payloads(model, walked._replace(compact=None))
    read.keep_only_name_scopes(model.graph)
    return model.SerializeToString()


def _random_model(seed: int) -> onnx.ModelProto:
    rng = random.Random(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])

    def nodes(prefix: str, depth: int) -> list[onnx.NodeProto]:
        made = []
        for i in range(rng.randint(1, 8)):
            name = f"{prefix}{i}"
            kind = rng.random()
            if kind < 0.3:
                count = rng.choice([2, 20000])  # above KEEP_BYTES when written as 20,000
                attribute = rng.choice(["value_ints", "value_floats"])
                values = [1] * count if attribute == "value_ints" else [1.0] * count
                node = helper.make_node("Constant", [], [name], **{attribute: values})
            elif kind < 0.4:
                sparse = helper.make_sparse_tensor(
                    numpy_helper.from_array(np.ones(1, np.float32), name + "v"),
                    numpy_helper.from_array(np.zeros(1, np.int64), name + "i"), [3])
                node = helper.make_node("Constant", [], [name], sparse_value=sparse)
            elif kind < 0.5 and depth < 2:
                body = helper.make_graph(nodes(name + "_", depth + 1), "body", [], [
                    helper.make_tensor_value_info(name + "_0", TensorProto.FLOAT, None)])
                node = helper.make_node("If", ["c"], [name], then_branch=body,
                                        else_branch=body)
            else:
                node = helper.make_node("Relu", ["x"], [name])
            node.name = rng.choice(["", name])
            node.doc_string = rng.choice(["", "a trace"])
            for j in range(rng.randrange(4)):
                node.metadata_props.add(key=rng.choice(KEYS), value=f"{name}.{j}")
            made.append(node)
        return made

    condition = helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
        "c", TensorProto.BOOL, [], [True]))
    graph_nodes = [condition, *nodes("n", 0), helper.make_node("Relu", ["x"], ["last"])]
    sparse_initializers = []
    if rng.random() < 0.3:
        sparse_initializers.append(helper.make_sparse_tensor(
            numpy_helper.from_array(np.ones(2, np.float32), "sv"),
            numpy_helper.from_array(np.zeros(2, np.int64), "si"), [4]))
    y = helper.make_tensor_value_info(graph_nodes[-1].output[0], TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph(graph_nodes, "g", [x], [y],
                                               sparse_initializer=sparse_initializers))


@pytest.mark.parametrize("seed", range(60))
def test_random_models_read_as_by_separate_walks(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_random_model(seed), path)
    assert read.read_model(path).SerializeToString() == _separate_walks(path)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_read_as_by_separate_walks(sample: Path) -> None:
    assert read.read_model(sample).SerializeToString() == _separate_walks(sample)


@pytest.mark.parametrize("seed", range(60))
def test_densify_on_the_walks_finds_changes_as_its_own_walk(seed: int) -> None:
    own, walked_model = _random_model(seed), _random_model(seed)
    walked = strip_and_validate(walked_model)
    assert isinstance(walked, Walked) and walked.compact is not None
    changed = dense_forms.densify(own, 64 * 1024)
    assert dense_forms.densify(walked_model, 64 * 1024, walked.compact) == changed
    assert walked_model.SerializeToString() == own.SerializeToString()
    assert changed or seed not in _changing_seeds()


def _changing_seeds() -> set[int]:
    """Seeds whose model densify changes (the property above is not vacuous: some do)."""
    seeds = {seed for seed in range(60) if dense_forms.densify(_random_model(seed), 64 * 1024)}
    assert 5 < len(seeds) < 55
    return seeds


def _old_named_dims(graph: onnx.GraphProto) -> None:
    """name_dynamic_input_dims as it was: the initializers' names gathered first."""
    initializer_names = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name in initializer_names or not value.type.HasField("tensor_type"):
            continue
        if not value.type.tensor_type.HasField("shape"):
            continue
        for index, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value") and not dim.dim_param:
                dim.dim_param = f"{read._identifier(value.name)}_d{index}"


@pytest.mark.parametrize("seed", range(60))
def test_input_dims_named_as_before(seed: int) -> None:
    rng = random.Random(seed)
    inputs, initializers = [], []
    for i in range(rng.randint(1, 12)):
        shape = [rng.choice([None, 3, "batch", None]) for _ in range(rng.randint(0, 3))]
        name = rng.choice([f"x{i}", f"x{i % 3}", "1st input"])
        if rng.random() < 0.1:
            inputs.append(helper.make_value_info(name, onnx.TypeProto()))  # no tensor type
        else:
            inputs.append(helper.make_tensor_value_info(
                name, TensorProto.FLOAT, None if rng.random() < 0.1 else shape))
        if rng.random() < 0.3:  # listed among the inputs too (IR < 4)
            initializers.append(TensorProto(name=name, data_type=TensorProto.FLOAT))
    graph = helper.make_graph([], "g", inputs, [], initializers)
    old = onnx.GraphProto()
    old.CopyFrom(graph)
    read.name_dynamic_input_dims(graph)
    _old_named_dims(old)
    assert graph.SerializeToString() == old.SerializeToString()
