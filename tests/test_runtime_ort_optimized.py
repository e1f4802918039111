"""graphmem's onnxruntime CPU model at ORT_ENABLE_ALL, the level sessions run by default.

The planner (graphmem/runtime_models/ort_cpu.py) runs on the graph onnxruntime saves after
optimizing the model (graphmem/frontends/onnx/ort_optimized.py); each test runs onnxruntime itself
at ORT_ENABLE_ALL (one fresh session, profiler on) and compares its `mem_in_use_peak`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem import analyze_onnx
from graphmem.cli.main import main
from graphmem.frontends.onnx import ort_optimized, ort_proxy
from graphmem.frontends.onnx.ort_optimized import OptimizationRefused, optimized_graph
from graphmem.pipeline.runtime import runtime_estimate
from tests.helpers.ort import measure_all
from tests.helpers.samples import RUNNABLE
from tests.helpers.samples import SAMPLES_DIR as SAMPLES
from tests.helpers.samples import sample_dims as _dims

F32 = TensorProto.FLOAT


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("sample", RUNNABLE)
@pytest.mark.ort
@pytest.mark.slow
def test_samples_at_enable_all_within_three_percent(sample: str, batch: int) -> None:
    # Measured 2026-11-23 (onnxruntime 1.31.1, 1 thread, seq 32): 0.00% on every sample but
    # tiny_llama.dynamo (+0.26% at batch 1, +0.14% at batch 4: a few rotary-embedding tensors
    # whose broadcast dims onnx's inference leaves unnamed, so graphmem's plan reuses fewer
    # buffers than onnxruntime's). Before planning the optimized graph these rows were off
    # by up to +60% (tiny_cnn); 3% leaves room for the arena's chunk placement.
    path = SAMPLES / f"{sample}.onnx"
    predicted, measured = measure_all(path, _dims(path, batch, 32))
    error = (predicted - measured) / measured * 100
    print(f"{sample} batch {batch}: graphmem {predicted:,} B, onnxruntime {measured:,} B"
          f" ({error:+.2f}%)")
    assert abs(error) <= 3.0, (f"{sample} batch {batch}: graphmem {predicted:,} B vs"
                                f" onnxruntime ENABLE_ALL {measured:,} B ({error:+.2f}%)")


@pytest.mark.parametrize("level", ["basic", "extended"])
@pytest.mark.parametrize("sample", RUNNABLE)
@pytest.mark.ort
@pytest.mark.slow
def test_samples_at_lower_levels_within_ten_percent(sample: str, level: str) -> None:
    # Measured 2026-11-23 (batch 4, seq 32): 0.00% but tiny_gpt.dynamo at basic (-0.05%),
    # tiny_llama.dynamo at basic (-5.5%: its rotary tensors again, more of them unfused at
    # basic) and at extended (+0.14%).
    path = SAMPLES / f"{sample}.onnx"
    predicted, measured = measure_all(path, _dims(path, 4, 32), level)
    error = (predicted - measured) / measured * 100
    print(f"{sample} {level}: graphmem {predicted:,} B, onnxruntime {measured:,} B"
          f" ({error:+.2f}%)")
    assert abs(error) <= 10.0, (f"{sample} at {level}: graphmem {predicted:,} B vs"
                                f" onnxruntime {measured:,} B ({error:+.2f}%)")


@pytest.mark.ort
def test_nchwc_graph_has_every_shape() -> None:
    # tiny_cnn at ENABLE_ALL: 4 com.microsoft.nchwc Convs, an nchwc MaxPool, ReorderOutput.
    # NCHWc pads a Conv's filters to the block (8 or 16 channels): each nchwc output's channel
    # count is its weight's first dim, a multiple of 8; ReorderOutput slices back to the
    # `channels` attribute, the channel count of the graph as written.
    optimized = optimized_graph(SAMPLES / "tiny_cnn.onnx", "all")
    graph = optimized.graph
    kinds = {(n.domain, n.op_type) for n in graph.nodes}
    assert ("com.microsoft.nchwc", "Conv") in kinds
    assert all(v.shape_known for n in graph.nodes for v in n.outputs)
    for node in graph.nodes:
        shape = node.outputs[0].shape
        if node.op_type == "Conv":
            weight = node.input(1)
            assert weight is not None and weight.shape is not None and shape is not None
            assert shape[1] == weight.shape[0] and int(weight.shape[0]) % 8 == 0
        if node.op_type == "ReorderOutput":
            assert shape is not None and int(shape[1]) == node.attr_int("channels", 0)


def _residual_block(tmp_path: Path) -> Path:
    # x [1, 16, 32, 32] -> a = Relu(Conv0(x)) -> c = Relu(Conv1(a)) -> y = Relu(Conv2(c) + a):
    # onnxruntime fuses Conv2, the Add and the Relu into one nchwc Conv whose "Sum" input is
    # a (an nchwc tensor); that Conv writes its output over a's buffer (MayInplace(3, 0)).
    weights = [numpy_helper.from_array(
        np.random.default_rng(i).standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1,
        f"w{i}") for i in range(3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["a"]),
             helper.make_node("Conv", ["a", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["c"]),
             helper.make_node("Conv", ["c", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "a"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    shape = [1, 16, 32, 32]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, shape)],
                              [helper.make_tensor_value_info("y", F32, shape)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "block.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.ort
@pytest.mark.slow
def test_nchwc_conv_writes_over_its_residual(tmp_path: Path) -> None:
    path = _residual_block(tmp_path)
    optimized = optimized_graph(path, "all")
    fused = [n for n in optimized.graph.nodes
             if n.domain == "com.microsoft.nchwc" and n.op_type == "Conv" and n.input(3)]
    assert len(fused) == 1  # the Sum input is restored on the real node
    predicted, measured = measure_all(path)
    assert predicted == measured, (predicted, measured)


def test_large_models_fall_back_to_the_graph_as_written(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    with pytest.raises(OptimizationRefused, match="above the"):
        optimized_graph(SAMPLES / "tiny_cnn.onnx", "all", max_initializer_bytes=1024)
    monkeypatch.setattr(ort_optimized, "MAX_INITIALIZER_BYTES", 1024)
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=1, plan=False)
    estimate = runtime_estimate(analysis, "ort-cpu", None, threads=1, ort_optimization="all")
    assert "planned the graph as written" in estimate.notes[0]
    disabled = runtime_estimate(analysis, "ort-cpu", None, threads=1,
                                ort_optimization="disabled")
    assert estimate.runtime_peak_bytes == disabled.runtime_peak_bytes


@pytest.mark.ort
def test_cli_level_choice(tmp_path: Path) -> None:
    # tiny_cnn batch 1: ORT_DISABLE_ALL holds 198,888 B, ORT_ENABLE_ALL 84,200 B (measured,
    # benchmarks/results/accuracy.md); the default is all, as in `graphmem verify`.
    peaks = {}
    for level in ("all", "disabled"):
        out = tmp_path / f"{level}.json"
        args = ["analyze", str(SAMPLES / "tiny_cnn.onnx"), "--batch", "1", "--no-html",
                "--json", str(out), "--runtime", "ort-cpu"]
        args += ["--ort-optimization", level] if level != "all" else []
        assert main(args) == 0
        runtime = json.loads(out.read_text())["memory"]["runtime"]
        peaks[level] = runtime["runtime_peak_bytes"]
        assert any(("optimized graph" in n) == (level == "all") for n in runtime["notes"])
    assert peaks["all"] < peaks["disabled"]


@pytest.mark.parametrize("channels", [20, 40])
@pytest.mark.ort
@pytest.mark.slow
def test_reorder_input_pads_channels_to_the_block(tmp_path: Path, channels: int) -> None:
    # t = x + x [2, C, 16, 16] feeds two 3x3 convs to 32 filters: onnxruntime reorders t into
    # NCHWc with C padded to the block (16 with AVX-512: 20 -> 32, 40 -> 48; 8 with AVX2:
    # 24, 40). The stand-in Pad must give that size, and the whole plan onnxruntime's peak.
    weights = [numpy_helper.from_array(np.random.default_rng(i).standard_normal(
        (32, channels if i == 0 else 32, 3, 3)).astype(np.float32) * 0.1, f"w{i}")
        for i in range(2)]
    nodes = [helper.make_node("Add", ["x", "x"], ["t"]),
             helper.make_node("Conv", ["t", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, [2, channels, 16, 16])],
        [helper.make_tensor_value_info("y", F32, [2, 32, 16, 16])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "reorder.onnx"
    onnx.save(model, path)
    reorder = next(n for n in optimized_graph(path, "all").graph.nodes
                   if n.op_type == "ReorderInput")
    shape = reorder.outputs[0].shape
    assert shape is not None
    padded = int(shape[1])
    assert padded % 8 == 0 and channels <= padded < channels + 16
    predicted, measured = measure_all(path)
    assert predicted == measured, (predicted, measured)


@pytest.mark.ort
def test_newer_ir_version_is_lowered_for_onnxruntime(tmp_path: Path) -> None:
    # onnx stamps IR version 14 by default where onnxruntime 1.31 reads up to 13: the model
    # is optimized all the same (version lowered for the session, graph unchanged).
    model = onnx.load(str(_residual_block(tmp_path)))
    model.ir_version = onnx.IR_VERSION
    path = tmp_path / "new_ir.onnx"
    onnx.save(model, path)
    optimized = optimized_graph(path, "all")
    assert any(n.domain == "com.microsoft.nchwc" for n in optimized.graph.nodes)


@pytest.mark.ort
def test_without_a_level_large_models_are_planned_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Optimizing builds a session holding the weights: by default only up to 256 MiB of them.
    # With the limit lowered below tiny_cnn's weights, no level given plans the file as
    # written and says how to ask; an explicit level still optimizes.
    import graphmem.pipeline.runtime as runtime_analysis

    monkeypatch.setattr(runtime_analysis, "AUTO_OPTIMIZE_INITIALIZER_BYTES", 16)
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=1)
    auto = runtime_analysis.runtime_estimate(analysis, "ort-cpu", None, threads=1)
    assert any("--ort-optimization all plans" in note for note in auto.notes)
    asked = runtime_analysis.runtime_estimate(analysis, "ort-cpu", None, threads=1,
                                              ort_optimization="all")
    assert any("planned onnxruntime's optimized graph" in note for note in asked.notes)


# ----- the CNN zoo's and BERT's patterns (issue 14, item 4) ---------------------------------------
# Before these, EfficientNet-B0 and ConvNeXt-T at batch 8 came out 65% and 61% below onnxruntime's
# ENABLE_ALL peak (their optimized graphs had tensors of unknown size, counted as 0 bytes), and a
# TorchScript BERT 10 to 16% below (BiasGelu's temporary). tests/test_ort_zoo.py runs the models.


def _save(path: Path, nodes: list[onnx.NodeProto], weights: list[onnx.TensorProto],
          x_shape: list[int | str], y_shape: list[int | str]) -> Path:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, x_shape)],
                              [helper.make_tensor_value_info("y", F32, y_shape)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _weight(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.1
    return numpy_helper.from_array(values, name)


def _silu(x: str, y: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Sigmoid", [x], [f"{y}_sigmoid"]),
            helper.make_node("Mul", [x, f"{y}_sigmoid"], [y])]


def _squeeze_excitation(tmp_path: Path) -> Path:
    # EfficientNet's MBConv tail: s = SiLU(Conv(x)); gate = Sigmoid(Conv(SiLU(Conv(
    # GlobalAveragePool(s))))); y = Conv(s * gate). onnxruntime runs the convs in NCHWc; s * gate
    # is a plain Mul of two ReorderOutputs, and its ReorderInput needs the Mul's channels, which
    # onnx's inference learns only once the stand-ins upstream are in place.
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), *_silu("a", "s"),
             helper.make_node("GlobalAveragePool", ["s"], ["p"]),
             helper.make_node("Conv", ["p", "w1"], ["r"]), *_silu("r", "r2"),
             helper.make_node("Conv", ["r2", "w2"], ["e"]),
             helper.make_node("Sigmoid", ["e"], ["gate"]),
             helper.make_node("Mul", ["s", "gate"], ["m"]),
             helper.make_node("Conv", ["m", "w3"], ["y"])]
    weights = [_weight("w0", (32, 16, 3, 3)), _weight("w1", (8, 32, 1, 1)),
               _weight("w2", (32, 8, 1, 1)), _weight("w3", (16, 32, 1, 1))]
    return _save(tmp_path / "se.onnx", nodes, weights, ["batch", 16, 28, 28],
                 ["batch", 16, 28, 28])


def _convnext_block(tmp_path: Path, channels: int) -> Path:
    # ConvNeXt's depthwise conv, then LayerNorm over channels last: onnxruntime folds each
    # Transpose into a channels_last ReorderOutput/ReorderInput ([N, C, H, W] blocked <-> NHWC)
    nodes = [helper.make_node("Conv", ["x", "dw"], ["d"], group=channels, pads=[3, 3, 3, 3],
                              kernel_shape=[7, 7]),
             helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "gamma", "beta"], ["n"], axis=-1),
             helper.make_node("Transpose", ["n"], ["t2"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t2", "pw"], ["y"])]
    weights = [_weight("dw", (channels, 1, 7, 7)), _weight("gamma", (channels,)),
               _weight("beta", (channels,)), _weight("pw", (32, channels, 1, 1))]
    return _save(tmp_path / f"convnext{channels}.onnx", nodes, weights,
                 ["batch", channels, 14, 14], ["batch", 32, 14, 14])


def _gelu_mlp(tmp_path: Path) -> Path:
    # BERT's feed-forward as the TorchScript exporter writes it: MatMul, Add bias, erf GELU;
    # onnxruntime fuses the bias and the GELU into one com.microsoft BiasGelu
    def constant(name: str, value: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, np.float32), name)

    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"]),
             helper.make_node("Add", ["h", "b0"], ["hb"]),
             helper.make_node("Div", ["hb", "sqrt2"], ["q"]), helper.make_node("Erf", ["q"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["hb", "e1"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"]),
             helper.make_node("MatMul", ["g", "w1"], ["y"])]
    weights = [_weight("w0", (128, 512)), _weight("b0", (512,)), _weight("w1", (512, 128)),
               constant("sqrt2", 2 ** 0.5), constant("one", 1.0), constant("half", 0.5)]
    return _save(tmp_path / "mlp.onnx", nodes, weights, ["batch", 64, 128], ["batch", 64, 128])


def _upsample(tmp_path: Path) -> Path:
    # a decoder's nearest x2 upsampling between convs: onnxruntime runs it as nchwc Upsample
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Resize", ["r", "", "scales"], ["u"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Conv", ["u", "w1"], ["y"], pads=[1, 1, 1, 1])]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    weights = [_weight("w0", (32, 16, 3, 3)), _weight("w1", (32, 32, 3, 3)), scales]
    return _save(tmp_path / "upsample.onnx", nodes, weights, ["batch", 16, 32, 32],
                 ["batch", 32, 64, 64])


def _grouped_conv(tmp_path: Path) -> Path:
    # RegNet's grouped 3x3 stride-2 conv (2 groups of 8 channels): outside NCHWc, onnxruntime
    # fuses it with its Relu into a com.microsoft FusedConv, Conv's kernel with Conv's
    # working buffer (65,536 B for one thread: 4 * 128 * 128 floats, batch x groups > 1)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["g"], group=2, pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Relu", ["g"], ["y"])]
    weights = [_weight("w0", (16, 16, 3, 3)), _weight("w1", (16, 8, 3, 3))]
    return _save(tmp_path / "grouped.onnx", nodes, weights, ["batch", 16, 16, 16],
                 ["batch", 16, 8, 8])


ZOO_PATTERNS = {
    # name: (builder, a node the optimized graph must have); measured 2026-11-23, batch 4:
    # exact with this model, and -19%, -50%, -29%, -25%, -50% before it
    "squeeze_excitation": (_squeeze_excitation, ("com.microsoft", "QuickGelu")),
    "convnext_32_channels": (lambda p: _convnext_block(p, 32), ("com.microsoft.nchwc",
                                                                 "ReorderOutput")),
    "convnext_40_channels": (lambda p: _convnext_block(p, 40), ("com.microsoft.nchwc",
                                                                 "ReorderOutput")),
    "bias_gelu": (_gelu_mlp, ("com.microsoft", "BiasGelu")),
    "upsample": (_upsample, ("com.microsoft.nchwc", "Upsample")),
    # measured 2026-11-28, batch 4: exact; -11.1% before FusedConv had Conv's scratch
    "grouped_conv": (_grouped_conv, ("com.microsoft", "FusedConv")),
}


@pytest.mark.ort
@pytest.mark.parametrize("pattern", list(ZOO_PATTERNS))
@pytest.mark.slow
def test_zoo_patterns_at_enable_all_are_exact(tmp_path: Path, pattern: str) -> None:
    build, expected = ZOO_PATTERNS[pattern]
    path = build(tmp_path)
    optimized = optimized_graph(path, "all", {"batch": 4})
    assert expected in {(n.domain, n.op_type) for n in optimized.graph.nodes}
    assert all(v.shape_known for n in optimized.graph.nodes for v in n.outputs)
    predicted, measured = measure_all(path, {"batch": 4})
    assert predicted == measured, (pattern, predicted, measured)


def test_channels_last_reorders_have_onnxruntimes_shapes() -> None:
    # ReorderOutput(channels_last=1, channels=40): [2, 48, 7, 7] blocked -> [2, 7, 7, 40];
    # ReorderInput(channels_last=1) back: [2, 7, 7, 40] -> [2, 48, 7, 7] (40 padded to 48 with
    # 16-channel blocks, the block read from the 48-filter nchwc Conv)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], domain=ort_proxy.NCHWC),
             helper.make_node("ReorderOutput", ["c"], ["nhwc"], domain=ort_proxy.NCHWC,
                              channels_last=1, channels=40),
             helper.make_node("ReorderInput", ["nhwc"], ["y"], domain=ort_proxy.NCHWC,
                              channels_last=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [2, 48, 7, 7])],
                              [helper.make_tensor_value_info("y", F32, None)],
                              [_weight("w", (48, 48, 1, 1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ort_proxy.NCHWC, 1)])
    proxy, originals = ort_proxy.shape_proxy(model)
    assert len(originals) == 3
    inferred = onnx.shape_inference.infer_shapes(proxy).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.value_info, *inferred.output]}
    assert shapes["nhwc"] == [2, 7, 7, 40]
    assert shapes["y"] == [2, 48, 7, 7]


@pytest.mark.ort
def test_tensors_of_unknown_size_are_named_in_the_notes(tmp_path: Path) -> None:
    # A tensor whose size is not known counts 0 bytes: the estimate says how many and which
    # ops made them, so a peak that low is not silent (it was how EfficientNet-B0 came out
    # 65% low). Here BiasGelu's output loses its size.
    from graphmem.passes.dims import bind_dims, value_bytes
    from graphmem.runtime_models.ort_cpu import ort_cpu_estimate

    optimized = optimized_graph(_gelu_mlp(tmp_path), "all", {"batch": 4})
    graph = optimized.graph
    binding = bind_dims(graph, None, {"batch": 4})
    sizes = value_bytes(graph, binding)
    known = ort_cpu_estimate(graph, sizes, 1, binding.bound, optimized.plan_shapes,
                             order=graph.nodes)
    assert not any("unknown size" in note for note in known.notes)
    gelu = next(n for n in graph.nodes if n.op_type == "BiasGelu")
    sizes[gelu.outputs[0].name] = None
    lost = ort_cpu_estimate(graph, sizes, 1, binding.bound, optimized.plan_shapes,
                            order=graph.nodes)
    assert any(note.startswith("1 tensor of unknown size (made by com.microsoft.BiasGelu)")
               for note in lost.notes), lost.notes
    assert lost.runtime_peak_bytes < known.runtime_peak_bytes
