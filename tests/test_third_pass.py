"""onnx's third pass made from the second pass's result (graphmem/frontends/onnx/third_pass.py)
equals the whole pass: every value's type, byte for byte, on the samples, on onnx.helper
decoders of random widths, and (slow) on the 22k-node decoders; the graph built from it equals
the graph built from the whole pass; and the per-dim merge is onnx's own."""

from __future__ import annotations

import random
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx import infer, third_pass
from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.importer import import_onnx
from tests.helpers.onnx_random import random_decoder

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.onnx"))
DECODERS = [ROOT / "benchmarks/.cache/llama_torchscript_134_torch2.13.0+cpu.onnx",
            ROOT / "benchmarks/.cache/llama_dynamo_unoptimized_150_torch2.13.0+cpu.onnx"]


def _canonical(model: onnx.ModelProto) -> tuple[bytes, dict[str, bytes], int]:
    """The model's bytes without its value infos, and each value info's bytes by name: the
    shortcut keeps the second pass's order of them (nothing reads it, build.py keys by name)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    infos = {v.name: v.SerializeToString() for v in copy.graph.value_info}
    count = len(copy.graph.value_info)
    copy.graph.ClearField("value_info")
    return copy.SerializeToString(), infos, count


def _compared(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Make every third pass of the imports that follow compare the shortcut with the whole
    pass; returns the list of whether each call took the shortcut."""
    taken: list[bool] = []
    shortcut = third_pass.third_pass

    def both(copy: onnx.ModelProto, second: onnx.ModelProto,
             reshaped: list[onnx.ValueInfoProto], types: dict[str, onnx.ValueInfoProto],
             run: third_pass.Inference,
             index: GraphIndex | None = None) -> onnx.ModelProto | None:
        before = copy.SerializeToString()
        whole_input = onnx.ModelProto()
        whole_input.CopyFrom(copy)
        whole_input.graph.value_info.extend(reshaped)
        whole = run(whole_input)
        untouched = onnx.ModelProto()
        untouched.CopyFrom(second)
        made = shortcut(copy, second, reshaped, types, run, index)  # through the index
        assert copy.SerializeToString() == before
        taken.append(made is not None)
        if made is None:
            assert second == untouched  # unsure: left as the second pass made it
        else:
            assert whole is not None and _canonical(made) == _canonical(whole)
        return made

    monkeypatch.setattr(infer, "third_pass", both)
    return taken


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_samples_equal_the_whole_pass(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compared(monkeypatch)
    import_onnx(path)


@pytest.mark.parametrize("seed", range(8))
def test_random_decoders_take_the_shortcut_and_equal_the_whole_pass(
        seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _compared(monkeypatch)
    import_onnx(random_decoder(seed, tmp_path))
    assert taken == [True]  # the repeat's Reshape (Unsqueeze, Tile, Reshape) is typed late


def _graph_text(path: Path) -> list[tuple[object, ...]]:
    graph = import_onnx(path).graph
    return [(node.name, node.op_type, node.module_path,
             tuple((v.name, v.dtype, v.shape) if v else None for v in node.inputs),
             tuple((v.name, v.dtype, v.shape, v.role) for v in node.outputs))
            for node in graph.nodes]


@pytest.mark.parametrize("seed", range(3))
def test_the_built_graph_equals_the_one_from_the_whole_pass(
        seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = random_decoder(seed + 100, tmp_path)
    fast = _graph_text(path)
    monkeypatch.setattr(infer, "third_pass", lambda *args: None)
    assert fast == _graph_text(path)


@pytest.mark.slow
@pytest.mark.parametrize("path", DECODERS, ids=["torchscript", "dynamo"])
def test_exported_decoders_take_the_shortcut(path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} not in benchmarks/.cache"
                    " (benchmarks/speed_targets.py exports it there)")
    taken = _compared(monkeypatch)
    import_onnx(path)
    # every third pass takes it: since layer_types.py, one on the cut the layers' node kinds
    # suggest (its probe) and one on the cut the comparison proves, the same few layers
    assert taken and all(taken)


def _dim(rng: random.Random) -> int | str | None:
    return rng.choice([1, 4, 8, "a", "b", None])


def _set(dim: onnx.TensorShapeProto.Dimension, value: int | str | None) -> None:
    if isinstance(value, int):
        dim.dim_value = value
    elif value:
        dim.dim_param = value


@pytest.mark.parametrize("seed", range(200))
def test_merge_is_onnx_merge(seed: int) -> None:
    """An Identity's output given a type: onnx merges what it infers (the input's type)
    into the given one; _merged must say the same wherever it answers."""
    rng = random.Random(seed)
    rank = rng.randint(2, 4)
    source = [_dim(rng) for _ in range(rank)]
    target = [_dim(rng) for _ in range(rank)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None] * rank)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * rank)
    for dim, value in zip(x.type.tensor_type.shape.dim, source, strict=True):
        _set(dim, value)
    for dim, value in zip(y.type.tensor_type.shape.dim, target, strict=True):
        _set(dim, value)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              value_info=[y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    try:
        merged = third_pass._merged(y.type, x.type)
    except third_pass._Unsure:
        return
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    assert merged == next(v.type for v in inferred.graph.value_info if v.name == "y")


def test_unsure_leaves_the_second_pass_alone() -> None:
    """A reshaped value also given to the pass (an order the argument does not cover)."""
    info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    copy = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])],
                                               "g", [info], [], value_info=[info]))
    second = onnx.ModelProto()
    second.CopyFrom(copy)
    types = {v.name: v for v in second.graph.value_info}
    assert third_pass.third_pass(copy, second, [info], types, lambda m: m) is None
    assert second == copy
