"""What read_model's one walk hands on (read5, docs/speed.md): the main graph's op types, read
once for the importer's set and its index (`GraphIndex(op_types=)`), and whether a node keeps
a metadata entry, so that the build reads no node's metadata where none does
(`build_graph(node_metadata=False)`); the build's inputs looked up by `map` (an optional
input left out, a value named '', a name nothing makes, as before); `fully_known` with
`dim_known` inlined. Each against the reads it replaced: random models, the samples and
onnx.helper decoders of random widths."""

from __future__ import annotations

import random
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.core.ir import Graph
from graphmem.errors import GraphmemError
from graphmem.frontends.onnx import importer
from graphmem.frontends.onnx.build import build_graph
from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.read import NAME_SCOPES, read_model_bodies
from graphmem.frontends.onnx.value_types import dim_known, fully_known
from tests.helpers.onnx_random import ROOT, random_decoder

SAMPLES = sorted((ROOT / "samples").glob("*.onnx"))
# the gpt2 samples take 1-3 s an import: slow (tiny_gpt's exports cover the same exporters)
_SAMPLE_PARAMS = [pytest.param(p, id=p.name, marks=[pytest.mark.slow] * p.name.startswith("gpt2"))
                  for p in SAMPLES]
KEYS = (NAME_SCOPES, "namespace")  # the second is trimmed away by read_model


def _random_model(seed: int) -> onnx.ModelProto:
    """Relus, Constants and an If, some with metadata entries kept or trimmed."""
    rng = random.Random(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    nodes = []
    for index in range(rng.randint(1, 10)):
        name = f"n{index}"
        kind = rng.random()
        if kind < 0.3:
            node = helper.make_node("Constant", [], [name], value=helper.make_tensor(
                name, TensorProto.FLOAT, [2], [1.0, 2.0]))
        elif kind < 0.4:
            body = helper.make_graph([helper.make_node("Relu", ["x"], [name + "_b"])], "b", [],
                                     [helper.make_tensor_value_info(name + "_b",
                                                                    TensorProto.FLOAT, [2])])
            node = helper.make_node("If", ["c"], [name], then_branch=body, else_branch=body)
        else:
            node = helper.make_node(rng.choice(["Relu", "Neg"]), ["x"], [name])
        node.name = f"/layers.{index}/{node.op_type}"
        for j in range(rng.choice([0, 0, 1, 2])):
            node.metadata_props.add(key=rng.choice(KEYS), value=f"layers.{index}.{j}")
        nodes.append(node)
    condition = helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
        "c", TensorProto.BOOL, [], [True]))
    last = helper.make_node("Relu", ["x"], ["last"])
    graph = helper.make_graph([condition, *nodes, last], "g", [x], [
        helper.make_tensor_value_info("last", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _index_tables(index: GraphIndex) -> tuple[object, ...]:
    return (list(index.producer), [id(n) for n in index.producer.values()], index.position,
            {op: [id(n) for n in nodes] for op, nodes in index.by_op.items()},
            index.positions, list(index.by_op))


def _check_read(path: Path) -> bool:
    """The walk's op types and metadata flag against the model's own nodes; the index made
    with them against the one reading them. Whether a node keeps metadata."""
    model, _, op_types, metadata = read_model_bodies(path)
    assert op_types == [node.op_type for node in model.graph.node]
    assert metadata == any(node.metadata_props for node in model.graph.node)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # as the importer indexes it
    assert _index_tables(GraphIndex(copy.graph, op_types)) == _index_tables(
        GraphIndex(copy.graph))
    return metadata


@pytest.mark.parametrize("seed", range(25))
def test_random_models_op_types_and_metadata(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_random_model(seed), path)
    _check_read(path)


def test_random_models_hold_both_kinds(tmp_path: Path) -> None:
    # the 25 seeds above give files whose nodes keep metadata and files whose do not
    flags = set()
    for seed in range(25):
        path = tmp_path / f"m{seed}.onnx"
        onnx.save(_random_model(seed), path)
        *_, metadata = read_model_bodies(path)
        flags.add(metadata)
    assert flags == {False, True}


def _text(graph: Graph) -> list[tuple[object, ...]]:
    return [(node.name, node.op_type, node.domain, node.module_path, node.attributes,
             tuple((v.name, v.dtype, v.shape) if v else None for v in node.inputs),
             tuple((v.name, v.dtype, v.shape, v.role) for v in node.outputs),
             tuple((v.name, [r.name for r in v.consumers]) for v in node.outputs))
            for node in graph.nodes] + [
        (v.name, v.dtype, v.shape, v.role) for v in graph.values.values()]


def _check_build(path: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The IR the importer builds (metadata read or not, as read_model found) against the IR
    built from the same inferred model reading every node's metadata; whether it skipped."""
    seen: list[tuple[object, ...]] = []
    make = importer.build_graph

    def spy(*args: object) -> Graph:
        seen.append(args)
        return make(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(importer, "build_graph", spy)
    importer.import_onnx(path)
    model, name, dim_names, judged, metadata = seen[0]
    built = make(model, name, dim_names, judged, metadata)  # type: ignore[arg-type]
    assert _text(built) == _text(make(model, name, dim_names, judged, True))  # type: ignore[arg-type]
    return not metadata


@pytest.mark.parametrize("path", _SAMPLE_PARAMS)
def test_samples_read_and_built_as_before(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_read(path)
    _check_build(path, monkeypatch)


@pytest.mark.parametrize("seed", range(2))
def test_random_decoders_built_as_before(seed: int, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = random_decoder(seed + 300, tmp_path)
    _check_read(path)
    assert _check_build(path, monkeypatch)  # an onnx.helper decoder's nodes keep none


def test_scoped_nodes_keep_their_module_paths(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # a node keeping its name scopes: the build reads every node's metadata, as before
    model = _random_model(0)
    model.graph.node[-1].metadata_props.add(key=NAME_SCOPES, value="['', 'head', 'relu']")
    path = tmp_path / "scoped.onnx"
    onnx.save(model, path)
    assert _check_read(path) and not _check_build(path, monkeypatch)
    graph = importer.import_onnx(path).graph
    assert graph.nodes[-1].module_path == "head"


def _optional_inputs_model(empty_value: bool) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    clip = helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")
    hi = helper.make_tensor("hi", TensorProto.FLOAT, [], [1.0])
    initializers = [hi]
    if empty_value:  # a value named '': an optional input left out is still None
        initializers.append(helper.make_tensor("", TensorProto.FLOAT, [], [0.0]))
    graph = helper.make_graph([clip], "g", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("empty_value", [False, True])
def test_optional_inputs_are_none(empty_value: bool) -> None:
    graph = build_graph(_optional_inputs_model(empty_value), "g", {})
    (clip,) = graph.nodes
    assert [v.name if v else None for v in clip.inputs] == ["x", None, "hi"]


def test_an_input_nothing_makes_is_named() -> None:
    model = _optional_inputs_model(False)
    model.graph.node[0].input[2] = "missing"
    with pytest.raises(GraphmemError, match="node clip reads 'missing' before any node"):
        build_graph(model, "g", {})


def _dims_walked(info: onnx.ValueInfoProto) -> bool:
    """fully_known as it was: a tensor with a shape, `all(dim_known(d))` over its dims."""
    if info.type.WhichOneof("value") != "tensor_type":
        return False
    tensor_type = info.type.tensor_type
    return tensor_type.HasField("shape") and all(dim_known(d) for d in tensor_type.shape.dim)


def test_fully_known_as_the_dims_walked() -> None:
    # dim_known inlined into fully_known: the same verdict on random types of numbers,
    # names, onnx's unk__N, names holding unk__ later, empty dims, denotations, no shape,
    # sequences
    rng = random.Random(7)
    texts = ["batch", "unk__3", "unk__", "xunk__1", "", "gm__dim0"]
    for _ in range(2000):
        if rng.random() < 0.1:
            info = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
        else:
            info = helper.make_tensor_value_info("t", TensorProto.FLOAT, None)
            if rng.random() < 0.9:
                shape = info.type.tensor_type.shape
                shape.SetInParent()
                for _ in range(rng.randint(0, 4)):
                    dim = shape.dim.add()
                    kind = rng.random()
                    if kind < 0.4:
                        dim.dim_value = rng.choice([0, 1, 50])
                    elif kind < 0.9:
                        dim.dim_param = rng.choice(texts)
                    if rng.random() < 0.2:
                        dim.denotation = rng.choice(texts)
        assert fully_known(info) == _dims_walked(info), info
    assert fully_known(None) is False
