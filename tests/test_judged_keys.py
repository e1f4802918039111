"""The value infos' types serialized once and each type's sizes made once (read3,
docs/speed.md): `value_types.judged_infos` gives fully_known_names' verdicts and the type keys
build.py's `type_keys` made by its own walk over the same infos; the IR built from the keys
infer.py judged equals the IR built from that walk; every value the build makes holds the
sizes (`core/ir.py` value_sizes) a value computes for itself from its dims; `shape_known` read
from them is "a rank and every dim known"; and the third pass's initializers read through the
model's index are the copy's own. On random graphs, the samples, onnx.helper decoders of random
widths and (slow) the 22k-node decoders."""

from __future__ import annotations

import random
from pathlib import Path

import onnx
import pytest

from graphmem.core.ir import DType, Graph, Role, Value
from graphmem.core.symbolic import SymInt, product
from graphmem.frontends.onnx import build, importer, infer, third_pass
from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.scalar_reshapes import AXES
from graphmem.frontends.onnx.value_types import JudgedInfos, fully_known, judged_infos
from tests.helpers.onnx_random import ROOT, random_decoder, random_typed_model

SAMPLES = sorted((ROOT / "samples").glob("*.onnx"))
DECODERS = [ROOT / "benchmarks/.cache/llama_torchscript_134_torch2.13.0+cpu.onnx",
            ROOT / "benchmarks/.cache/llama_dynamo_unoptimized_150_torch2.13.0+cpu.onnx"]
HELPER = Path("/tmp/helper_22k.onnx")  # benchmarks/same_answers.py's onnx.helper decoder


def _unread(reader: build._ShapeReader) -> dict[bytes, bytes]:
    return {key: type_proto.SerializeToString() for key, type_proto in reader.unread.items()}


def test_judged_infos_as_the_walks() -> None:
    rng = random.Random(11)
    for _ in range(300):
        graph = random_typed_model(rng).graph
        infos = list(graph.value_info)
        judged = judged_infos(infos)
        assert judged.known == {i.name for i in infos if fully_known(i)}
        # the last info of a name wins, as in type_keys' walk
        assert judged.keys == {i.name: i.type.SerializeToString() for i in infos}
        # every distinct type, a name's earlier infos' too (as type_keys keeps them)
        assert {k: t.SerializeToString() for k, t in judged.types.items()} == {
            k: k for k in (i.type.SerializeToString() for i in infos)}
        walked, given = build._ShapeReader({}), build._ShapeReader({})
        assert given.type_keys(graph, judged) == walked.type_keys(graph)
        assert _unread(given) == _unread(walked)


def _built(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Graph, Graph, bool]:
    """The IR the importer builds (with the keys infer.py judged, where it did) and the IR
    built from the same inferred model by type_keys' own walk; whether keys were handed."""
    seen: list[tuple[onnx.ModelProto, dict[str, str], JudgedInfos | None]] = []
    make = importer.build_graph

    def spy(model: onnx.ModelProto, name: str, dim_names: dict[str, str],
            judged: JudgedInfos | None = None, node_metadata: bool = True) -> Graph:
        seen.append((model, dim_names, judged))
        return make(model, name, dim_names, judged, node_metadata)

    monkeypatch.setattr(importer, "build_graph", spy)
    importer.import_onnx(path)
    model, dim_names, judged = seen[0]  # built again: the importer fills the gaps after
    return make(model, path.stem, dim_names, judged), make(model, path.stem, dim_names), \
        judged is not None


def _text(graph: Graph) -> list[tuple[object, ...]]:
    return [(node.name, node.op_type, node.module_path,
             tuple((v.name, v.dtype, v.shape) if v else None for v in node.inputs),
             tuple((v.name, v.dtype, v.shape, v.role) for v in node.outputs))
            for node in graph.nodes] + [
        (v.name, v.dtype, v.shape, v.role) for v in graph.values.values()]


def _sizes_alone(value: Value) -> tuple[object, object]:
    """numel and nbytes from the dims: the product of the dims, times bits over 8."""
    shape = value.shape
    if shape is None or any(d is None for d in shape):
        return None, None
    numel = product(d for d in shape if d is not None)
    bits = value.dtype.bits
    return numel, numel.scaled(bits, 8) if bits > 0 else None


def _check(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bool, int]:
    """The checks above on one import of `path`: whether keys were handed to the build, and
    how many initializer names the third passes checked."""
    checked = _third_passes_checked(monkeypatch)
    given, walked, judged = _built(path, monkeypatch)
    assert _text(given) == _text(walked)
    for value in given.values.values():
        assert value._nbytes_cache is not None  # handed by the build, not computed later
        assert (value.numel, value.nbytes) == _sizes_alone(value)
    return judged, sum(checked)


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_samples_built_as_by_the_walk(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(path, monkeypatch)


@pytest.mark.parametrize("seed", range(4))
def test_random_decoders_built_as_by_the_walk(seed: int, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    judged, names = _check(random_decoder(seed + 200, tmp_path), monkeypatch)
    assert judged and names > 2  # typed by onnx: keys handed; a third pass ran


@pytest.mark.slow
@pytest.mark.parametrize("path", [*DECODERS, HELPER], ids=["torchscript", "dynamo", "helper"])
def test_22k_decoders_built_as_by_the_walk(path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if not path.exists():
        pytest.skip(f"{path} missing (benchmarks/same_answers.py says how it is made)")
    assert _check(path, monkeypatch)[0]


def test_shape_known_as_the_dims_say() -> None:
    # shape_known read from the cached numel: equal to "a rank, and every dim known" on
    # random shapes, and again after the shape or dtype is replaced (the cache follows)
    rng = random.Random(5)
    dims = [None, SymInt.const(0), SymInt.const(3), SymInt.symbol("b"),
            SymInt.symbol("s") * 2]
    for _ in range(2000):
        def shape() -> tuple[SymInt | None, ...] | None:
            return None if rng.random() < 0.1 else tuple(
                rng.choice(dims) for _ in range(rng.randint(0, 4)))

        value = Value("v", rng.choice(list(DType)), shape(), Role.ACTIVATION)
        for _ in range(3):
            s = value.shape
            assert value.shape_known == (s is not None and all(d is not None for d in s))
            value.nbytes  # noqa: B018 - the cache filled as the passes fill it
            value.shape = shape() if rng.random() < 0.5 else value.shape
            value.dtype = rng.choice(list(DType)) if rng.random() < 0.3 else value.dtype


def _third_passes_checked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make each third pass of the imports that follow check its initializers read through the
    index against the copy's own walk, for every initializer name, the scalar reshapes' AXES
    and a name no tensor has; returns how many names each checked."""
    checked: list[int] = []
    shortcut = third_pass.third_pass

    def both(copy: onnx.ModelProto, second: onnx.ModelProto,
             *args: object) -> onnx.ModelProto | None:
        index = args[-1]  # infer.py passes the model's index last
        assert isinstance(index, GraphIndex)
        names = [t.name for t in copy.graph.initializer] + [AXES, "no such tensor"]
        indexed, walked = third_pass._Context(copy, index), third_pass._Context(copy)
        for name in names:
            a, b = indexed.initializer(name), walked.initializer(name)
            assert (a is None) == (b is None)
            assert a is None or b is None or a.SerializeToString() == b.SerializeToString()
        checked.append(len(names))
        return shortcut(copy, second, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(infer, "third_pass", both)
    return checked

