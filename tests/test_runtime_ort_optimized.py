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

from graphmem.cli.main import main
from graphmem.frontends.onnx import ort_optimized
from graphmem.frontends.onnx.ort_optimized import OptimizationRefused, optimized_graph
from graphmem.pipeline.analysis import analyze_onnx
from graphmem.runtime_models.select import runtime_estimate
from graphmem.verify.onnx_run import input_specs
from graphmem.verify.runners.onnxruntime_runner import run_onnx
from tests.test_runtime_ort import RUNNABLE, SAMPLES, _dims

F32 = TensorProto.FLOAT


def measure_all(path: Path, dims: dict[str, int] | None = None,
                level: str = "all") -> tuple[int, int]:
    """(graphmem's predicted mem_in_use_peak at `level`, onnxruntime's measured one)."""
    analysis = analyze_onnx(path, dims=dims, plan=False)
    estimate = runtime_estimate(analysis, "ort-cpu", None, threads=1, ort_optimization=level)
    run = run_onnx(path, input_specs(analysis), "cpu", level, 1)
    return estimate.runtime_peak_bytes, run.peak_bytes


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("sample", RUNNABLE)
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


def test_fused_matmul_stand_in_has_onnxruntimes_shape() -> None:
    # FusedMatMul(A [2, 3, 4], B [2, 5, 4], transB=1) = A @ B^T: [2, 3, 5]. The proxy's Einsum
    # "...ij,...kj->...ik" must infer that shape, and onnxruntime's kernel must produce it.
    import onnxruntime as ort

    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft",
                            transB=1, alpha=0.5)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", F32, [2, 3, 4]),
                                            helper.make_tensor_value_info("b", F32, [2, 5, 4])],
                              [helper.make_tensor_value_info("y", F32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    proxy, originals = ort_optimized.shape_proxy(model)
    stand_in = proxy.graph.node[0]
    assert (stand_in.op_type, stand_in.attribute[0].s) == ("Einsum", b"...ij,...kj->...ik")
    assert originals[stand_in.name].attributes["transB"] == 1
    inferred = onnx.shape_inference.infer_shapes(proxy).graph.output[0]
    shape = [d.dim_value for d in inferred.type.tensor_type.shape.dim]
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = {"a": np.ones((2, 3, 4), np.float32), "b": np.ones((2, 5, 4), np.float32)}
    assert shape == list(session.run(None, feeds)[0].shape) == [2, 3, 5]


@pytest.mark.parametrize("channels", [20, 40])
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


def test_newer_ir_version_is_lowered_for_onnxruntime(tmp_path: Path) -> None:
    # onnx stamps IR version 14 by default where onnxruntime 1.31 reads up to 13: the model
    # is optimized all the same (version lowered for the session, graph unchanged).
    model = onnx.load(str(_residual_block(tmp_path)))
    model.ir_version = onnx.IR_VERSION
    path = tmp_path / "new_ir.onnx"
    onnx.save(model, path)
    optimized = optimized_graph(path, "all")
    assert any(n.domain == "com.microsoft.nchwc" for n in optimized.graph.nodes)


def test_without_a_level_large_models_are_planned_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Optimizing builds a session holding the weights: by default only up to 256 MiB of them.
    # With the limit lowered below tiny_cnn's weights, no level given plans the file as
    # written and says how to ask; an explicit level still optimizes.
    import graphmem.runtime_models.select as runtime_analysis

    monkeypatch.setattr(runtime_analysis, "AUTO_OPTIMIZE_INITIALIZER_BYTES", 16)
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=1)
    auto = runtime_analysis.runtime_estimate(analysis, "ort-cpu", None, threads=1)
    assert any("--ort-optimization all plans" in note for note in auto.notes)
    asked = runtime_analysis.runtime_estimate(analysis, "ort-cpu", None, threads=1,
                                              ort_optimization="all")
    assert any("planned onnxruntime's optimized graph" in note for note in asked.notes)
