"""The value infos' types serialized once and each type's sizes made once (read3,
docs/speed.md): `value_types.judged_infos` gives fully_known_names' verdicts and the type keys
build.py's `type_keys` made by its own walk over the same infos; the IR built from the keys
infer.py judged equals the IR built from that walk; and every value the build makes holds the
sizes (`core/ir.py` value_sizes) a value computes for itself from its dims. On random graphs,
the samples, onnx.helper decoders of random widths and (slow) the 22k-node decoders."""

from __future__ import annotations

import random
from pathlib import Path

import onnx
import pytest

from graphmem.core.ir import Graph, Value
from graphmem.core.symbolic import product
from graphmem.frontends.onnx import build, importer
from graphmem.frontends.onnx.value_types import JudgedInfos, fully_known, judged_infos
from tests.test_third_pass import DECODERS, SAMPLES, _decoder
from tests.test_unknown_part_known import _random_model

HELPER = Path("/tmp/helper_22k.onnx")  # benchmarks/same_answers.py's onnx.helper decoder


def _unread(reader: build._ShapeReader) -> dict[bytes, bytes]:
    return {key: type_proto.SerializeToString() for key, type_proto in reader.unread.items()}


def test_judged_infos_as_the_walks() -> None:
    rng = random.Random(11)
    for _ in range(300):
        graph = _random_model(rng).graph
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
            judged: JudgedInfos | None = None) -> Graph:
        seen.append((model, dim_names, judged))
        return make(model, name, dim_names, judged)

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


def _check(path: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    given, walked, judged = _built(path, monkeypatch)
    assert _text(given) == _text(walked)
    for value in given.values.values():
        assert value._nbytes_cache is not None  # handed by the build, not computed later
        assert (value.numel, value.nbytes) == _sizes_alone(value)
    return judged


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_samples_built_as_by_the_walk(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(path, monkeypatch)


@pytest.mark.parametrize("seed", range(4))
def test_random_decoders_built_as_by_the_walk(seed: int, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert _check(_decoder(seed + 200, tmp_path), monkeypatch)  # typed by onnx: keys handed


@pytest.mark.slow
@pytest.mark.parametrize("path", [*DECODERS, HELPER], ids=["torchscript", "dynamo", "helper"])
def test_22k_decoders_built_as_by_the_walk(path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if not path.exists():
        pytest.skip(f"{path} missing (benchmarks/same_answers.py says how it is made)")
    assert _check(path, monkeypatch)
