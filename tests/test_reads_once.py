"""Every probe of a command re-sizes the one imported graph: the model is read once per command
(largest batch, --sweep, --suggest), whatever made the graph, and a PyTorch step is traced
once per distinct shape and options (graphmem/pipeline/imports.py)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem import analyze_onnx
from graphmem.frontends.imported import ImportedModel
from graphmem.frontends.onnx import importer, runtime_inputs
from graphmem.frontends.onnx.read import ReadModel
from graphmem.frontends.onnx.runtime_inputs import OnnxFile
from graphmem.pipeline.imports import HELD_TRACE_NODES, ModelImports
from tests.helpers.cli import Run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import helper_llama  # benchmarks/ is not a package: found through sys.path

SEQ = "32"
GPU = ("--gpu", "a100-80gb", "--no-html")
# each command probes the model many times: largest batch, a sweep, suggestions
COMMANDS = {
    "largest batch": ("--batch", "1", "--dim", f"seq={SEQ}", *GPU),
    "sweep": ("--dim", f"seq={SEQ}", "--sweep", "batch=1,2,4,8", *GPU),
    "suggest": ("--batch", "2", "--dim", f"seq={SEQ}", "--train", "--suggest", *GPU),
}


@dataclass
class Counts:
    """What the front ends did during one command."""

    reads: Counter[str] = field(default_factory=Counter)  # ONNX files parsed, by path
    imports: list[dict[str, int]] = field(default_factory=list)  # fixed dims of each import
    traces: list[tuple[object, ...]] = field(default_factory=list)  # shapes and options


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    counted = Counts()
    read, imported = importer.read_model, runtime_inputs.import_onnx
    read_bodies = importer.read_model_bodies  # the importer's own read (with its bodies)

    def counting_read(path: Path) -> onnx.ModelProto:
        counted.reads[str(path)] += 1
        return read(path)

    def counting_read_bodies(path: Path) -> ReadModel:
        counted.reads[str(path)] += 1
        return read_bodies(path)

    def counting_import(path: Path, input_dims: Mapping[str, int] | None = None,
                        source: onnx.ModelProto | None = None) -> importer.OnnxImport:
        counted.imports.append(dict(input_dims or {}))
        return imported(path, input_dims, source)

    monkeypatch.setattr(importer, "read_model", counting_read)
    monkeypatch.setattr(importer, "read_model_bodies", counting_read_bodies)
    monkeypatch.setattr(runtime_inputs, "import_onnx", counting_import)
    return counted


def _count_traces(monkeypatch: pytest.MonkeyPatch, counted: Counts) -> None:
    from graphmem.frontends.torch import import_step

    trace = import_step.import_torch

    def counting(module: object, inputs: object, label: str, training: object = None,
                 pooled_heads: object = (), **options: object) -> ImportedModel:
        specs = tuple(import_step.tensor_specs(inputs))  # type: ignore[arg-type]
        counted.traces.append((specs, training, tuple(pooled_heads)))  # type: ignore[arg-type]
        return trace(module, inputs, label, training, pooled_heads,  # type: ignore[arg-type]
                     **options)  # type: ignore[arg-type]

    monkeypatch.setattr(import_step, "import_torch", counting)


def _small_decoder(path: Path) -> Path:
    """benchmarks/helper_llama.py's decoder (onnx.helper, no exporter) at test widths."""
    return helper_llama.write(path, replace(helper_llama.WIDTHS, layers=2, hidden=64, heads=4,
                                            kv_heads=2, intermediate=128, vocab=100,
                                            max_positions=64))


def _assert_read_once(counted: Counts, path: Path) -> None:
    assert counted.reads == Counter({str(path): 1}), counted.reads
    assert counted.imports == [{}], counted.imports  # symbolic: every probe binds it


@pytest.mark.parametrize("command", COMMANDS)
def test_a_helper_built_decoder_is_read_and_imported_once(
        command: str, tmp_path: Path, run: Run, counts: Counts) -> None:
    path = _small_decoder(tmp_path / "decoder.onnx")
    code, out, err = run("analyze", path, *COMMANDS[command])
    assert code == 0, err
    _assert_read_once(counts, path)
    if command == "largest batch":
        assert "max batch" in out


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("command", COMMANDS)
def test_an_exported_decoder_is_read_and_imported_once(
        exporter: str, command: str, exported: dict[str, Path], run: Run,
        counts: Counts) -> None:
    path = exported[exporter]
    code, _, err = run("analyze", path, *COMMANDS[command])
    assert code == 0, err
    _assert_read_once(counts, path)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """benchmarks/exported_llama.py's decoder, 2 layers, by both exporters (once a module:
    the dynamo exporter takes about 20 s)."""
    from exported_llama import export

    folder = tmp_path_factory.mktemp("exported")
    return {name: export(name, folder / f"{name}.onnx", 2) for name in ("torchscript", "dynamo")}


def seq_rounded_model() -> onnx.ModelProto:
    """x[batch, seq, 1024] -> x[:, :seq - seq % 8] -> Relu -> Relu: onnxruntime's symbolic
    rules have no Mod, so with seq symbolic the slice's length is a dim shape inference
    invents; with seq a number (fold.py folds Gather(Shape(x), 1) -> Mod) it is known and
    the batch stays symbolic."""
    def ints(name: str, value: object) -> TensorProto:
        return numpy_helper.from_array(np.array(value, np.int64), name)

    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Unsqueeze", ["seq", "axis0"], ["seq1"]),
             helper.make_node("Mod", ["seq1", "eight"], ["rest"]),
             helper.make_node("Sub", ["seq1", "rest"], ["kept"]),
             helper.make_node("Slice", ["x", "zero", "kept", "axis1"], ["cut"]),
             helper.make_node("Relu", ["cut"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(
        nodes, "seq_rounded",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [ints("one", 1), ints("axis0", [0]), ints("eight", [8]), ints("zero", [0]),
         ints("axis1", [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_sizes_only_a_fixed_seq_resolves_keep_the_batch_symbolic(
        tmp_path: Path, counts: Counts) -> None:
    path = tmp_path / "seq_rounded.onnx"
    onnx.save(seq_rounded_model(), path)
    capacity = analyze_onnx(path, gpu="t4", plan=False).fit.capacity_bytes  # type: ignore[union-attr]
    reserve = capacity - 64 * 2**20  # 64 MiB usable keeps the answer small
    counts.imports.clear()
    result = analyze_onnx(path, batch=1, dims={"seq": 250}, gpu="t4",
                          cuda_reserve_bytes=reserve)
    # the symbolic import, then seq fixed: every batch probed binds the one graph
    assert counts.imports == [{}, {"seq": 250}]
    assert result.max_batch is not None and result.max_batch.max_batch
    best = result.max_batch.max_batch
    # each tensor after the slice: 248 rows of 1024 floats a sample (250 - 250 % 8 = 248)
    assert result.graph.values["y"].shape[1:] == (248, 1024)  # type: ignore[index]
    # the answer is what the model with both dims written into the file says (no dim bound,
    # nothing fixed by graphmem), at it and one past it
    for batch, fits in ((best, True), (best + 1, False)):
        static = tmp_path / f"static_{batch}.onnx"
        onnx.save(_with_input_dims(seq_rounded_model(), batch, 250), static)
        fixed = analyze_onnx(static, gpu="t4", cuda_reserve_bytes=reserve, plan=False,
                             runtime="auto")  # the device total, as max batch reads it
        assert fixed.fit is not None and fixed.fit.fits is fits


def _with_input_dims(model: onnx.ModelProto, *dims: int) -> onnx.ModelProto:
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, dims, strict=False):
        dim.Clear()
        dim.dim_value = value
    return model


def reduce_prod_model() -> onnx.ModelProto:
    """x[batch, seq, 64] reshaped to [batch * seq, 64] through ReduceProd(Shape(x)[:2]), which
    neither engine follows while dims are symbolic: only the batch fixed sizes it."""
    def ints(name: str, value: object) -> TensorProto:
        return numpy_helper.from_array(np.array(value, np.int64), name)

    nodes = [helper.make_node("Shape", ["x"], ["shape"], end=2),
             helper.make_node("ReduceProd", ["shape"], ["tokens"], keepdims=1),
             helper.make_node("Concat", ["tokens", "width"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["y"])]
    graph = helper.make_graph(
        nodes, "reduce_prod",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [ints("width", [64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_import_per_distinct_shape_at_most(tmp_path: Path, counts: Counts) -> None:
    # whatever the probes need, the file is read once and no dims are imported twice
    path = tmp_path / "reduce_prod.onnx"
    onnx.save(reduce_prod_model(), path)
    analyze_onnx(path, batch=1, dims={"seq": 16}, gpu="t4")
    assert counts.reads == Counter({str(path): 1})
    keys = [tuple(sorted(dims.items())) for dims in counts.imports]
    assert len(keys) == len(set(keys)), keys


def test_an_onnx_file_is_imported_once_per_distinct_fixed_dims(
        tmp_path: Path, counts: Counts) -> None:
    source = OnnxFile(_small_decoder(tmp_path / "decoder.onnx"))
    symbolic = source.imported()
    assert source.imported({}) is symbolic
    fixed = source.imported({"seq": 8})
    assert source.imported({"seq": 8}) is fixed
    assert fixed.runtime_inputs is symbolic.runtime_inputs  # onnxruntime's view: the file's
    assert source.imports == 2 and counts.imports == [{}, {"seq": 8}]
    assert sum(counts.reads.values()) == 1


def test_traces_are_kept_by_shape_and_options() -> None:
    imports = ModelImports()
    made: list[str] = []

    def trace(name: str) -> str:
        made.append(name)
        return name

    assert imports.traced(("a", 1), lambda: trace("a1")) == "a1"
    assert imports.traced(("a", 1), lambda: trace("again")) == "a1"
    assert imports.traced(("a", 2), lambda: trace("a2")) == "a2"
    assert imports.traced(("a", {}), lambda: trace("unhashable")) == "unhashable"  # type: ignore[arg-type]
    assert made == ["a1", "a2", "unhashable"] and imports.traces == 3
    # traces are held up to a budget of graph nodes, the least recently used dropped first
    big = ModelImports()
    big.traced("b1", lambda: trace("b1"), nodes=lambda _: HELD_TRACE_NODES)
    big.traced("b2", lambda: trace("b2"), nodes=lambda _: HELD_TRACE_NODES)
    big.traced("b2", lambda: trace("b2 again"), nodes=lambda _: HELD_TRACE_NODES)
    big.traced("b1", lambda: trace("b1 again"), nodes=lambda _: HELD_TRACE_NODES)
    assert made[3:] == ["b1", "b2", "b1 again"]


ENCODER = """
from torch import nn

def build():
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                       batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2)
"""
# a two-layer Llama at small widths, as a Hugging Face config.json gives it
TINY_LLAMA = """{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
 "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
 "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 100,
 "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "tie_word_embeddings": false}"""


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("origin", ["module", "hf config"])
def test_a_pytorch_step_is_traced_once_per_shape_and_options(
        origin: str, tmp_path: Path, run: Run, counts: Counts,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _count_traces(monkeypatch, counts)
    if origin == "module":
        (tmp_path / "encoder.py").write_text(ENCODER)
        model, shape = f"{tmp_path / 'encoder.py'}:build", ("--input", "4x16x32")
    else:
        (tmp_path / "config.json").write_text(TINY_LLAMA)
        model, shape = str(tmp_path / "config.json"), ("--batch", "4", "--dim", "seq=16")
    code, _, err = run("analyze", model, *shape, "--train", "--suggest",
                       "--memory-budget", "2MiB", *GPU)
    assert code == 0, err
    # the base step, checkpoint plans, AMP and the batch searches: each shape traced once
    assert len(counts.traces) > 3
    assert len(set(map(repr, counts.traces))) == len(counts.traces), counts.traces
    assert not counts.reads  # no ONNX file anywhere
