"""onnxruntime's optimized graph as onnxruntime builds it (issue 22, item 4).

Three rules read from onnxruntime's source and checked against its CPU `mem_in_use_peak`:

- FusedMatMul (MatMul + Transpose + scale, contrib_defs.cc FusedMatMulShapeInference) of any
  ranks: its operands transposed as transA/transB/transBatchA/transBatchB say, then MatMul's
  broadcasting. The stand-in was an Einsum `...ij,...jk->...ik`, whose inference went wrong
  for a 3-D times a 2-D operand: a Gemma2 export's logit soft-capping FusedMatMul came out
  [hidden, seq, vocab] and not [batch, seq, vocab] (2,052 MiB predicted, 20 MiB measured).
- A weight read by several MatMul kernels is prepacked once and shared (ALBERT's layers share
  one layer's weights: +59.8% when counted per use); each later use packs a temporary copy at
  session creation before it finds the shared one.
- No tensor of unknown size counts 0 B silently: dims the optimized graph's inference invents
  (a Swin export's Pad of computed pads) are bound from the same tensors of the graph as
  written, and what is still unknown is estimated and said (a Swin export: -11.4%).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import ort_proxy
from graphmem.frontends.onnx.ort_proxy import fused_matmul_perm

F32 = TensorProto.FLOAT
MS = "com.microsoft"


# ----- FusedMatMul's shape rule ---------------------------------------------------------------


def test_fused_matmul_perm_reads_the_operand_as_onnxruntime_does() -> None:
    # neither flag: read as it is
    assert fused_matmul_perm(3, trans=0, trans_batch=0) is None
    # a vector is never transposed
    assert fused_matmul_perm(1, trans=1, trans_batch=1) is None
    # trans: [b, k, m] -> [b, m, k], the last two dims swapped
    assert fused_matmul_perm(3, trans=1, trans_batch=0) == (0, 2, 1)
    assert fused_matmul_perm(2, trans=1, trans_batch=0) == (1, 0)
    # transBatch: [m, b1, b2, k] -> [b1, b2, m, k], dim 0 moved behind the batch dims
    assert fused_matmul_perm(4, trans=0, trans_batch=1) == (1, 2, 0, 3)
    # both: [k, b1, b2, m] -> [b1, b2, m, k]
    assert fused_matmul_perm(4, trans=1, trans_batch=1) == (1, 2, 3, 0)
    # a matrix has no batch dims: transBatch alone leaves it as it is, with trans it swaps
    assert fused_matmul_perm(2, trans=0, trans_batch=1) == (0, 1)
    assert fused_matmul_perm(2, trans=1, trans_batch=1) == (1, 0)


# (A's shape, B's shape, attributes, FusedMatMul's output shape)
FUSED_CASES = [
    # Gemma2's soft-capped logits: [batch, seq, hidden] @ [hidden, vocab] -> [batch, seq, vocab]
    ((8, 6, 16), (16, 40), {}, (8, 6, 40)),
    # the same with the weight stored [vocab, hidden]: B^T is [16, 40]
    ((8, 6, 16), (40, 16), {"transB": 1}, (8, 6, 40)),
    # attention scores: Q [b, h, s, d] @ K^T, K [b, h, s, d] -> [b, h, s, s]
    ((2, 4, 6, 8), (2, 4, 6, 8), {"transB": 1}, (2, 4, 6, 6)),
    # A^T: [2, 4, 3] read as [2, 3, 4]; @ [4, 5] -> [2, 3, 5]
    ((2, 4, 3), (4, 5), {"transA": 1}, (2, 3, 5)),
    # a 2-D A against a batched B broadcasts: [3, 4] @ [2, 4, 5] -> [2, 3, 5]
    ((3, 4), (2, 4, 5), {}, (2, 3, 5)),
    # batch dims broadcast: [2, 1, 3, 4] @ [5, 4, 6] -> [2, 5, 3, 6]
    ((2, 1, 3, 4), (5, 4, 6), {}, (2, 5, 3, 6)),
    # transBatchA: A [m=3, b=2, k=4] read as [2, 3, 4]; @ [2, 4, 5] -> [2, 3, 5]
    ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}, (2, 3, 5)),
    # transBatchB: B [k=4, b=2, n=5] read as [2, 4, 5]
    ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}, (2, 3, 5)),
    # transA and transBatchA: A [k=4, b=2, m=3] read as [2, 3, 4]
    ((4, 2, 3), (2, 4, 5), {"transA": 1, "transBatchA": 1}, (2, 3, 5)),
    # a vector A: [4] @ [2, 4, 5] -> [2, 5] (its dim dropped, as numpy.matmul does)
    ((4,), (2, 4, 5), {"transA": 1}, (2, 5)),
]


def _fused_model(a: tuple[int, ...], b: tuple[int, ...], attrs: dict[str, int]
                 ) -> onnx.ModelProto:
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, alpha=0.5, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", F32, a),
                                            helper.make_tensor_value_info("b", F32, b)],
                              [helper.make_tensor_value_info("y", F32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


@pytest.mark.ort
@pytest.mark.parametrize(("a", "b", "attrs", "expected"), FUSED_CASES)
def test_fused_matmul_stand_in_has_onnxruntimes_shape(
        a: tuple[int, ...], b: tuple[int, ...], attrs: dict[str, int],
        expected: tuple[int, ...]) -> None:
    # the proxy's MatMul of transposed operands infers the shape onnxruntime's kernel makes
    import onnxruntime as ort

    model = _fused_model(a, b, attrs)
    proxy, originals = ort_proxy.shape_proxy(model)
    stand_in = next(n for n in proxy.graph.node if n.name in originals)
    assert (stand_in.domain, stand_in.op_type) == ("", "MatMul")
    assert originals[stand_in.name].attributes == {"alpha": 0.5, **attrs}
    inferred = onnx.shape_inference.infer_shapes(proxy, strict_mode=True).graph.output[0]
    shape = tuple(d.dim_value for d in inferred.type.tensor_type.shape.dim)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"a": np.ones(a, np.float32), "b": np.ones(b, np.float32)}
    assert shape == session.run(None, feeds)[0].shape == expected


def _soft_capped_logits(folder: Path) -> Path:
    """x [batch, seq, 32] @ W -> * 0.5 -> Tanh: onnxruntime fuses the MatMul and its scale
    into one FusedMatMul (MatMulScaleFusion) of a 3-D and a 2-D operand, as a Gemma2 export's
    final logit soft-capping. (A Transpose of W would be folded into W, not into transB.)"""
    weight = np.random.default_rng(0).random((32, 500), dtype=np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["logits"]),
             helper.make_node("Mul", ["logits", "half"], ["scaled"]),
             helper.make_node("Tanh", ["scaled"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, ["batch", "seq", 32])],
        [helper.make_tensor_value_info("y", F32, ["batch", "seq", 500])],
        [numpy_helper.from_array(weight, "w"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "soft_capped.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.ort
@pytest.mark.slow
def test_soft_capped_logits_grow_with_the_batch(tmp_path: Path) -> None:
    # The FusedMatMul's output is [batch, seq, 500] and onnxruntime prepacks its weight:
    # (500 rounded up to 512) * 32 * 4 = 65,536 B. Planned exactly at every batch.
    from graphmem.frontends.onnx.ort_optimized import optimized_graph
    from tests.helpers.ort import measure_all

    path = _soft_capped_logits(tmp_path)
    graph = optimized_graph(path, "all", {"batch": 4, "seq": 8}).graph
    fused = [n for n in graph.nodes if n.op_type == "FusedMatMul"]
    assert len(fused) == 1
    assert [str(d) for d in fused[0].outputs[0].shape] == ["batch", "seq", "500"]
    assert not any("_graphmem_" in n.name for n in graph.nodes)  # the proxy's Transposes
    for batch in (1, 8):
        predicted, measured = measure_all(path, {"batch": batch, "seq": 8}, "all")
        assert predicted == measured, (batch, predicted, measured)


# ----- shared weights are prepacked once ------------------------------------------------------


def _mlp(folder: Path, weights: list[str]) -> Path:
    """x [batch, 64, 256] through MatMul(w) + Relu per entry of `weights`, the same name
    meaning the same 256x256 initializer (ALBERT's layers read one layer's weights so)."""
    rng = np.random.default_rng(0)
    initializers = [numpy_helper.from_array(rng.random((256, 256), dtype=np.float32), name)
                    for name in sorted(set(weights))]
    nodes, last = [], "x"
    for index, name in enumerate(weights):
        nodes += [helper.make_node("MatMul", [last, name], [f"h{index}"]),
                  helper.make_node("Relu", [f"h{index}"], [f"r{index}"])]
        last = f"r{index}"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, ["batch", 64, 256])],
        [helper.make_tensor_value_info(last, F32, ["batch", 64, 256])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / f"mlp_{''.join(weights)}.onnx"
    onnx.save(model, str(path))
    return path


def test_a_shared_weight_is_packed_once(tmp_path: Path) -> None:
    from graphmem.frontends.onnx.importer import import_onnx
    from graphmem.runtime_models.ort_kernels import prepack_peak_bytes, prepacked_weights

    # one pack: 256 columns (a multiple of 16) * 256 rows * 4 B = 262,144 B
    pack = 256 * 256 * 4
    graph = import_onnx(_mlp(tmp_path, ["W", "W", "V", "W"])).graph
    # W read three times, V once: two buffers kept
    assert prepacked_weights(graph.nodes) == [("W", pack), ("V", pack)]
    # W's second use packs a temporary copy beside W's pack (2 packs); V's pack is kept
    # (2 packs), W's third use packs another temporary beside both (3 packs)
    assert prepack_peak_bytes(graph.nodes) == 3 * pack


@pytest.mark.ort
@pytest.mark.slow
@pytest.mark.parametrize("weights", [["W", "W"], ["W", "W", "W"], ["W", "V"], ["W", "W", "V", "V"]])
@pytest.mark.parametrize("level", ["disabled", "all"])
def test_shared_weights_match_onnxruntime(tmp_path: Path, weights: list[str],
                                          level: str) -> None:
    # measured (onnxruntime 1.31.1, batch 1): W,W and W,W,W 524,288 B (the peak at session
    # creation: W's pack and its temporary copy); W,V 655,360 B (2 packs + the run's 131,072);
    # W,W,V,V 786,432 B (V's temporary beside both packs). Per use it was 655,360 to 1,179,648.
    from graphmem import analyze_onnx
    from graphmem.pipeline.runtime import runtime_estimate
    from tests.helpers.ort import measure_all

    path = _mlp(tmp_path, weights)
    predicted, measured = measure_all(path, {"batch": 1}, level)
    assert predicted == measured
    # the labelled parts add up to the peak, at session creation too (no tensor then; the
    # temporary packs are the overhead)
    estimate = runtime_estimate(analyze_onnx(path, dims={"batch": 1}, plan=False), "ort-cpu",
                                None, threads=1, ort_optimization=level)
    parts = (estimate.tensors_at_peak_bytes + estimate.runtime_weights_bytes
             + estimate.allocator_overhead_bytes + estimate.workspace_bytes)
    assert parts == estimate.runtime_peak_bytes == predicted
    at_creation = any("at session creation" in note for note in estimate.notes)
    assert at_creation == (weights.count("W") > 1)  # W's temporary copy outweighs the run


# ----- no tensor of unknown size counts 0 B silently ------------------------------------------


def _padded_by_computed_pads(folder: Path) -> Path:
    """torch.nn.functional.pad as the TorchScript exporter writes it: the pads computed from
    the input's shape, as [begin, end] pairs in torch's order (last axis first), reordered to
    ONNX's [begins..., ends...] by Reshape -> Transpose -> Reshape; here the last axis padded
    up to a multiple of 8 (6 -> 8, as Swin pads to its window)."""
    def const(name: str, values: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "three"], ["width"], axis=0),  # 6
        helper.make_node("Sub", ["eight", "width"], ["pad"]),  # 8 - 6 = 2
        helper.make_node("Concat", ["zeros6", "pad", "zero1"], ["pairs"], axis=0),
        helper.make_node("Reshape", ["pairs", "four_two"], ["matrix"]),  # [[0,0]x3, [2,0]]
        helper.make_node("Transpose", ["matrix"], ["by_end"], perm=[1, 0]),  # [[0,0,0,2],[0]*4]
        helper.make_node("Reshape", ["by_end", "eight_long"], ["pads"]),  # [0,0,0,2, 0,0,0,0]
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        helper.make_node("Relu", ["padded"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, ["batch", 5, 6, 6])],
        [helper.make_tensor_value_info("y", F32, None)],
        [const("three", [3]), const("eight", [8]), const("zeros6", [0] * 6),
         const("zero1", [0]), const("four_two", [4, 2]), const("eight_long", [8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "computed_pads.onnx"
    onnx.save(model, str(path))
    return path


def test_computed_pads_fold_through_their_transpose(tmp_path: Path) -> None:
    # The pads' Transpose of 8 integers folds like the rest of the shape arithmetic, so the
    # Pad's output is [batch, 5, 6, 8] (before: dims the inference invented, sized 0 B).
    from graphmem.frontends.onnx.importer import import_onnx

    graph = import_onnx(_padded_by_computed_pads(tmp_path)).graph
    assert [str(d) for d in graph.values["padded"].shape] == ["batch", "5", "6", "8"]


def test_unknown_sizes_are_borrowed_or_estimated(tmp_path: Path) -> None:
    from graphmem.core.symbolic import SymInt
    from graphmem.frontends.onnx.importer import import_onnx
    from graphmem.passes.dims import bind_dims, value_bytes
    from graphmem.runtime_models.ort_sizes import fill_unknown_sizes

    graph = import_onnx(_padded_by_computed_pads(tmp_path)).graph
    sizes = value_bytes(graph, bind_dims(graph, 4, {}))
    # padded: 4 * 5 * 6 * 8 * 4 B = 3,840 B; x: 4 * 5 * 6 * 6 * 4 B = 2,880 B
    assert int(sizes["padded"]) == 3840
    lost = {**sizes, "padded": None, "y": None}
    # the graph as written knows `padded`; Relu's `y` is then its input's size, 3,840 B
    fill = fill_unknown_sizes(graph, lost, {"padded": SymInt.const(3840)})
    assert (int(fill.sizes["padded"]), int(fill.sizes["y"])) == (3840, 3840)
    assert (fill.from_written, fill.estimated, fill.estimated_bytes) == (1, 1, 3840)
    # without it, Pad's output is estimated at its largest input, x: 2,880 B (low by 960 B
    # each: a Pad outgrows its input, as the note says)
    fill = fill_unknown_sizes(graph, lost)
    assert (int(fill.sizes["padded"]), int(fill.sizes["y"])) == (2880, 2880)
    assert fill.note() == (
        "2 tensors of unknown size in the graph onnxruntime runs: 2 estimated at their"
        " node's largest input (5.6 KiB in all, made by Pad, Relu: the runtime peak may be"
        " off by about that, low where an output outgrows its inputs: Pad, Concat, Expand,"
        " Tile, MatMul)")
    assert fill_unknown_sizes(graph, sizes).note() == ""  # every size known: nothing to say


# ----- the models of issue 22, at both levels -------------------------------------------------


def _export(model: object, args: tuple[object, ...], names: list[str],
            axes: dict[str, dict[int, str]], path: Path, dynamo: bool) -> Path:
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters' deprecation and fallback notices
        options = {} if dynamo else {"opset_version": 17}
        torch.onnx.export(model, args, str(path), dynamo=dynamo, input_names=names,
                          output_names=["out"], dynamic_axes=axes, **options)
    return path


def _language_model(make: object, path: Path, dynamo: bool, decoder: bool) -> Path:
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            options = {"use_cache": False} if decoder else {}
            return self.model(input_ids=ids, attention_mask=mask, return_dict=False,
                              **options)[0]

    torch.manual_seed(0)
    model = Logits(make()).eval()
    ids = torch.randint(0, 100, (2, 16))
    names = ["input_ids", "attention_mask"]
    axes = {name: {0: "batch", 1: "seq"} for name in [*names, "out"]}
    return _export(model, (ids, torch.ones_like(ids)), names, axes, path, dynamo)


def _gemma2(path: Path) -> Path:
    # final_logit_softcapping: logits / 30 -> tanh -> * 30; onnxruntime fuses the lm_head
    # MatMul [batch, seq, 128] x [128, 1000] with its scale into a FusedMatMul
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                          vocab_size=1000, final_logit_softcapping=30.0,
                          attn_implementation="eager")
    return _language_model(lambda: Gemma2ForCausalLM(config), path, dynamo=True, decoder=True)


def _albert(path: Path) -> Path:
    # three layers, one layer's weights: each MatMul weight read three times
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(num_hidden_layers=3, hidden_size=256, embedding_size=128,
                          num_attention_heads=4, intermediate_size=1024, vocab_size=1000)
    return _language_model(lambda: AlbertModel(config), path, dynamo=True, decoder=False)


def _swin(path: Path) -> Path:
    # the TorchScript exporter: window padding computed from the input's shape
    import torch
    from transformers import SwinConfig, SwinModel

    class Features(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            config = SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                                num_heads=[2, 4], window_size=4)
            self.model = SwinModel(config)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values=x, return_dict=False)[0]

    torch.manual_seed(0)
    axes = {"x": {0: "batch"}, "out": {0: "batch"}}
    return _export(Features().eval(), (torch.randn(1, 3, 64, 64),), ["x"], axes, path,
                   dynamo=False)


MODELS = {"gemma2": (_gemma2, {"seq": 64}), "albert": (_albert, {"seq": 64}),
          "swin": (_swin, {})}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> object:
    import functools

    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("ort_fused")

    @functools.cache
    def export(name: str) -> Path:
        return MODELS[name][0](folder / f"{name}.onnx")

    return export


# measured (onnxruntime 1.31.1, 1 thread, 2026-11-28), graphmem before -> after, ENABLE_ALL:
# gemma2 batch 8: 68,288,789 (+737.9%, the soft-capping FusedMatMul [128, seq, 1000]) ->
#   8,150,293 B exact; albert batch 1: 10,846,945 (+138.1%, per-use prepacks) -> 4,555,489 B
#   exact; swin batch 8: 4,194,272 (-11.2%, 216 tensors at 0 B) -> 4,723,168 B exact.
# ORT_DISABLE_ALL was exact or within 0.03% for all three before and after.
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.ort
@pytest.mark.parametrize("level", ["disabled", "all"])
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("name", list(MODELS))
def test_issue_models_match_onnxruntime(exported: object, name: str, batch: int,
                                        level: str) -> None:
    from tests.helpers.ort import measure_all

    dims = {"batch": batch, **MODELS[name][1]}
    predicted, measured = measure_all(exported(name), dims, level)  # type: ignore[operator]
    error = (predicted - measured) / measured * 100
    print(f"{name} {dims} {level}: graphmem {predicted:,} B, onnxruntime {measured:,} B"
          f" ({error:+.2f}%)")
    # 3%, as tests/test_ort_zoo.py: the arena breaks ties between free chunks of one size by
    # address, which varies with the heap (measured: every case within 0.03%)
    assert abs(error) <= 3.0, f"{name} {dims} {level}: {error:+.2f}%"


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.ort
def test_lost_shapes_are_sized_from_the_graph_as_written(
        exported: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without folding the pads' Transpose, the optimized Swin graph's inference loses 216
    # tensors' sizes (11.2% low at batch 8); each is sized as the same tensor of the graph
    # as written, which knows them: exact again (4,723,168 B), and the notes say so.
    from graphmem import analyze_onnx
    from graphmem.frontends.onnx import fold
    from graphmem.pipeline.runtime import runtime_estimate
    from tests.helpers.ort import measure_all

    path = exported("swin")  # type: ignore[operator]
    monkeypatch.setattr(fold, "FOLDABLE_OPS", fold.FOLDABLE_OPS - {"Transpose"})
    predicted, measured = measure_all(path, {"batch": 8}, "all")
    assert abs(predicted - measured) / measured <= 0.01
    analysis = analyze_onnx(path, dims={"batch": 8}, plan=False)
    estimate = runtime_estimate(analysis, "ort-cpu", None, threads=1, ort_optimization="all")
    assert any("sized as the same tensor of the graph as written" in n for n in estimate.notes)


@pytest.mark.parametrize("runtime", ["ort-cpu", "ort-cuda"])
def test_both_onnxruntime_models_say_what_they_estimated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: str) -> None:
    # Without folding the pads' Transpose, the Pad's output and the Relu's after it have no
    # size: both runtime models estimate them (never 0 B) and say so.
    from graphmem import analyze_onnx
    from graphmem.devices.gpus import find_gpu
    from graphmem.frontends.onnx import fold
    from graphmem.pipeline.runtime import runtime_estimate

    monkeypatch.setattr(fold, "FOLDABLE_OPS", fold.FOLDABLE_OPS - {"Transpose"})
    analysis = analyze_onnx(_padded_by_computed_pads(tmp_path), dims={"batch": 4}, plan=False)
    gpu = find_gpu("t4") if runtime == "ort-cuda" else None
    options = {"ort_optimization": "disabled"} if runtime == "ort-cpu" else {}
    estimate = runtime_estimate(analysis, runtime, gpu, **options)
    assert any("2 estimated at their node's largest input" in n for n in estimate.notes)
    # none counted as 0 bytes (an op whose kernel's scratch is not known is another note)
    assert not any("counted as 0 bytes: the runtime peak may be low by their size" in n
                   for n in estimate.notes)


@pytest.mark.ort
def test_fused_matmul_of_unknown_rank_falls_back_to_an_einsum() -> None:
    # B's shape unknown: its Transpose cannot be written, so the stand-in is the Einsum of
    # equal ranks ("...ij,...kj->...ik" for transB), which onnxruntime's symbolic inference
    # shapes (A needs no Transpose: its rank does not matter)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transB=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", F32, [2, 3, 4]),
                                            helper.make_tensor_value_info("b", F32, None)],
                              [helper.make_tensor_value_info("y", F32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    proxy, originals = ort_proxy.shape_proxy(model)
    stand_in = proxy.graph.node[0]
    assert stand_in.name in originals
    assert (stand_in.op_type, stand_in.attribute[0].s) == ("Einsum", b"...ij,...kj->...ik")
