"""graphmem's model of onnxruntime's CPU memory against onnxruntime itself.

Each test runs onnxruntime (CPU, ORT_DISABLE_ALL, one fresh session, profiler on) and compares
its measured `mem_in_use_peak` with graphmem's prediction (graphmem/runtime_models/ort_cpu.py):
mostly the run's own part (less the bytes in use before the first kernel, the weights, on both
sides), and the whole peak, the weights and `mem_arena_held` on the samples. Small
onnx.helper graphs pin one planner behaviour each; the shipped samples check the whole model.
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
from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.ort_plan_shapes import ort_plan_shapes
from graphmem.passes.dims import value_bytes
from graphmem.pipeline.runtime import runtime_estimate
from graphmem.runtime_models.bfc_arena import ArenaEvent, BfcArena, rounded_bytes
from graphmem.runtime_models.bfc_replay import replay
from graphmem.runtime_models.ort_cpu import ort_execution_order, plan_ort_buffers
from graphmem.runtime_models.ort_kernels import INPLACE_OPS, conv_scratch_bytes
from graphmem.verify.onnx_run import _match_nodes, input_specs
from graphmem.verify.runners.onnxruntime_runner import MeasuredRun, run_onnx
from tests.helpers.samples import RUNNABLE
from tests.helpers.samples import SAMPLES_DIR as SAMPLES
from tests.helpers.samples import sample_dims as _dims

N = 4096  # floats: 16 KiB tensors in the helper graphs
F32 = TensorProto.FLOAT


def measure(path: Path, dims: dict[str, int] | None = None, threads: int = 1
            ) -> tuple[int, int, MeasuredRun]:
    """(graphmem's prediction, onnxruntime's measurement, the run), both less the weights
    onnxruntime holds in its arena before the first kernel: the run's own peak."""
    analysis = analyze_onnx(path, dims=dims, plan=False)
    estimate = runtime_estimate(analysis, "ort-cpu", None, threads=threads,
                                ort_optimization="disabled")
    run = run_onnx(path, input_specs(analysis), "cpu", "disabled", threads)
    predicted = estimate.runtime_peak_bytes - estimate.runtime_weights_bytes
    return predicted, run.activation_peak_bytes, run


def save(tmp_path: Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
         outputs: list[onnx.ValueInfoProto], initializers: tuple = ()) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "g.onnx"
    onnx.save(model, path)
    return path


def vector(name: str, size: int = N) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F32, [size])


# ----- one planner behaviour per graph ---------------------------------------------------------


@pytest.mark.ort
@pytest.mark.slow
def test_chain_of_relus_runs_in_place(tmp_path: Path) -> None:
    # t = x + x (16 KiB, x is the caller's and never reused); three Relus write over t in turn
    # (MayInplace, t's last use each time); z = r3 + r3 is a graph output (16 KiB).
    # Peak: t's buffer + z = 2 * 16384 = 32768 bytes; graphmem's live-tensor peak is 32768 too
    # (r2 and r3 never coexist with t), so the check is that the Relus add nothing.
    nodes = [helper.make_node("Add", ["x", "x"], ["t"]),
             helper.make_node("Relu", ["t"], ["r1"]), helper.make_node("Relu", ["r1"], ["r2"]),
             helper.make_node("Relu", ["r2"], ["r3"]), helper.make_node("Add", ["r3", "r3"], ["z"])]
    path = save(tmp_path, nodes, [vector("x")], [vector("z")])
    predicted, measured, _ = measure(path)
    assert predicted == measured == 32768, (predicted, measured)
    analysis = analyze_onnx(path, plan=False)
    plan = plan_ort_buffers(analysis.graph, value_bytes(analysis.graph, analysis.dims))
    assert plan.inplace_count == 3
    assert {plan.storage[v] for v in ("t", "r1", "r2", "r3")} == {"t"}


NOT_IN_PLACE = ["Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Erf",
                "Sign", "Round", "Dropout", "Hardmax", "Transpose"]


@pytest.mark.parametrize("op", sorted(INPLACE_OPS) + NOT_IN_PLACE)
@pytest.mark.ort
@pytest.mark.slow
def test_in_place_table(tmp_path: Path, op: str) -> None:
    # t = x + x (16 KiB) dies at y = op(t); z = y + y is the output (16 KiB). In place: t's
    # buffer and z, 32768 bytes; not in place: t, y, then y and z, also 32768 at the peak but
    # 16 KiB more at op's step: the measured in-use after op tells the two apart.
    attributes = {"to": TensorProto.FLOAT} if op == "Cast" else {}
    nodes = [helper.make_node("Add", ["x", "x"], ["t"]),
             helper.make_node(op, ["t"], ["y"], name="op", **attributes),
             helper.make_node("Add", ["y", "y"], ["z"])]
    path = save(tmp_path, nodes, [vector("x")], [vector("z")])
    analysis = analyze_onnx(path, plan=False)
    plan = plan_ort_buffers(analysis.graph, value_bytes(analysis.graph, analysis.dims))
    _, _, run = measure(path)
    measured_in_place = next(n for n in run.nodes if n.name == "op").in_use_delta_bytes == 0
    assert (plan.storage["y"] == "t") == measured_in_place == (op in INPLACE_OPS), op


@pytest.mark.ort
@pytest.mark.slow
def test_reshape_is_a_view(tmp_path: Path) -> None:
    # t = x + x (16 KiB); v = Reshape(t, [64, 64]) shares t's buffer (Alias); z = v + v (16 KiB
    # graph output). Peak 32768 bytes; with Reshape copying it would be 49152.
    shape = numpy_helper.from_array(np.array([64, 64], dtype=np.int64), "shape")
    nodes = [helper.make_node("Add", ["x", "x"], ["t"]),
             helper.make_node("Reshape", ["t", "shape"], ["v"]),
             helper.make_node("Add", ["v", "v"], ["z"])]
    out = helper.make_tensor_value_info("z", F32, [64, 64])
    path = save(tmp_path, nodes, [vector("x")], [out], (shape,))
    predicted, measured, _ = measure(path)
    assert predicted == measured == 32768, (predicted, measured)


@pytest.mark.ort
@pytest.mark.slow
def test_add_is_not_in_place(tmp_path: Path) -> None:
    # onnxruntime 1.31's CPU Add declares no MayInplace: u = t + x takes a new 16 KiB buffer
    # while t is still held: t + u + z(output) = 3 * 16384 = 49152 at u's step.
    nodes = [helper.make_node("Add", ["x", "x"], ["t"]), helper.make_node("Add", ["t", "x"], ["u"]),
             helper.make_node("Add", ["u", "u"], ["z"])]
    path = save(tmp_path, nodes, [vector("x")], [vector("z")])
    predicted, measured, _ = measure(path)
    assert predicted == measured, (predicted, measured)
    assert measured == 2 * 16384  # t dies at u, then z: t+u = 32768 = u+z


@pytest.mark.ort
@pytest.mark.slow
def test_freed_buffer_is_held_until_a_same_shape_tensor_reuses_it(tmp_path: Path) -> None:
    # a = x + x [N] dies at b = a * a [N]; c = concat(b, b) and d = c * c are [2N]; e = d[:N]
    # takes a's buffer from the free list (same shape), so onnxruntime holds a's 16 KiB from
    # step 0 to z, across the [2N] peak: a (16384, held) + b (16384, read by z) + c + d
    # (2 * 32768) at d's step = 98304, where freeing at last use needs 81920.
    two = numpy_helper.from_array(np.array([2 * N], dtype=np.int64), "two")
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]),
             helper.make_node("Mul", ["a", "a"], ["b"]),
             helper.make_node("Concat", ["b", "b"], ["c"], axis=0),
             helper.make_node("Mul", ["c", "c"], ["d"]),
             helper.make_node("Slice", ["d", "zero", "n"], ["e"]),
             helper.make_node("Add", ["e", "b"], ["z"])]
    inits = (two, numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([N], dtype=np.int64), "n"))
    path = save(tmp_path, nodes, [vector("x")], [vector("z")], inits)
    predicted, measured, _ = measure(path)
    assert predicted == measured == 98304, (predicted, measured)
    assert int(analyze_onnx(path, plan=False).liveness.activation_peak_bytes) == 81920


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("channels", "filters", "size"), [(3, 16, 32), (16, 512, 4)])
@pytest.mark.ort
@pytest.mark.slow
def test_conv_scratch(tmp_path: Path, threads: int, channels: int, filters: int,
                      size: int) -> None:
    # MlasConvPrepare, 3x3 pad 1 on [1, C, S, S]: K = 9C multiply-adds per output pixel.
    # (3, 16, 32): 16 filters <= 1024 pixels: 16*1024*27 = 442,368 multiply-adds -> 442368 //
    #   65536 + 1 = 7 threads wanted, capped at the pool: threads * 16384 floats * 4 bytes.
    # (16, 512, 4): 512 filters > 16 pixels: the whole im2col matrix, 16 * 144 * 4 = 9216 B.
    weight = numpy_helper.from_array(
        np.ones((filters, channels, 3, 3), dtype=np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "x"], ["t"]),
             helper.make_node("Conv", ["t", "w"], ["z"], pads=[1, 1, 1, 1])]
    x = helper.make_tensor_value_info("x", F32, [1, channels, size, size])
    z = helper.make_tensor_value_info("z", F32, [1, filters, size, size])
    path = save(tmp_path, nodes, [x], [z], (weight,))
    predicted, measured, _ = measure(path, threads=threads)
    assert predicted == measured, (predicted, measured)
    analysis = analyze_onnx(path, plan=False)
    conv = analysis.graph.nodes[1]
    expected = threads * 65536 if filters == 16 else 16 * 144 * 4
    assert conv_scratch_bytes(conv, threads, {}) == expected


@pytest.mark.ort
@pytest.mark.slow
def test_where_broadcasts_two_selections(tmp_path: Path) -> None:
    # Where(cond [64, 64], -inf scalar, y [4, 64, 64]) allocates X_selection [64, 64] (16 KiB)
    # and Y_selection [4, 64, 64] (64 KiB) before its 64 KiB output (where_op.cc).
    nodes = [helper.make_node("Add", ["y", "y"], ["t"]),
             helper.make_node("Where", ["cond", "inf", "t"], ["z"])]
    inputs = [helper.make_tensor_value_info("cond", TensorProto.BOOL, [64, 64]),
              helper.make_tensor_value_info("y", F32, [4, 64, 64])]
    out = helper.make_tensor_value_info("z", F32, [4, 64, 64])
    inf = numpy_helper.from_array(np.array(-np.inf, dtype=np.float32), "inf")
    path = save(tmp_path, nodes, inputs, [out], (inf,))
    predicted, measured, _ = measure(path)
    assert predicted == measured == 65536 + 16384 + 65536 + 65536, (predicted, measured)


# ----- the shipped samples ---------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("sample", RUNNABLE)
@pytest.mark.ort
@pytest.mark.slow
def test_samples_within_two_percent(sample: str, batch: int) -> None:
    # Measured 2026-11-23 (onnxruntime 1.31.1, 1 thread): 0.0% on every sample but
    # tiny_gpt.dynamo (+0.1%: the arena's chunk placement differs by one 256-byte chunk).
    path = SAMPLES / f"{sample}.onnx"
    predicted, measured, _ = measure(path, _dims(path, batch, 32))
    error = (predicted - measured) / measured * 100
    assert abs(error) <= 2.0, (f"{sample} batch {batch}: graphmem {predicted:,} B vs"
                               f" onnxruntime {measured:,} B ({error:+.2f}%)")


@pytest.mark.parametrize("sample", RUNNABLE)
@pytest.mark.ort
@pytest.mark.slow
def test_whole_mem_in_use_peak(sample: str) -> None:
    # mem_in_use_peak itself: the weights in the arena before the run (MatMul/Gemm weights
    # prepacked for MLAS: N rounded up to 16 columns, x K x 4 bytes; initializers of <= 127
    # bytes, copied) are exact on every sample (tiny_gpt: 9 Gemm weights, 524,288 bytes, plus
    # 864 bytes of small constants = 525,152); the arena regions held add up to mem_arena_held.
    path = SAMPLES / f"{sample}.onnx"
    analysis = analyze_onnx(path, dims=_dims(path, 2, 16), plan=False)
    estimate = runtime_estimate(analysis, "ort-cpu", None, threads=1,
                                ort_optimization="disabled")
    run = run_onnx(path, input_specs(analysis), "cpu", "disabled", 1)
    assert estimate.runtime_weights_bytes == run.weights_in_arena_bytes
    error = (estimate.runtime_peak_bytes - run.peak_bytes) / run.peak_bytes * 100
    assert abs(error) <= 2.0, (f"{sample}: graphmem {estimate.runtime_peak_bytes:,} B vs"
                               f" onnxruntime mem_in_use_peak {run.peak_bytes:,} B")
    assert estimate.arena_held_bytes == run.arena_held_bytes, (estimate.arena_held_bytes,
                                                               run.arena_held_bytes)


@pytest.mark.parametrize("sample", ["tiny_gpt", "tiny_llama.dynamo", "tiny_cnn"])
@pytest.mark.ort
@pytest.mark.slow
def test_execution_order_is_onnxruntimes(sample: str) -> None:
    path = SAMPLES / f"{sample}.onnx"
    analysis = analyze_onnx(path, dims=_dims(path, 1, 16), plan=False)
    run = run_onnx(path, input_specs(analysis), "cpu", "disabled", 1)
    ran = [node.name if node else None for node in _match_nodes(analysis.graph, run)]
    assert [n.name for n in ort_execution_order(analysis.graph)] == ran


def test_plan_shapes_are_onnxruntimes() -> None:
    # TorchScript export: the attention scores' dims come from runtime Reshapes, onnx names them
    # unk__N, onnxruntime leaves them unnamed: never equal, so never reused. The dynamo export
    # names every dim in its value_info.
    script = ort_plan_shapes(SAMPLES / "tiny_gpt.onnx")
    assert script["/h.0/attn/Softmax_output_0"] == (None, None, None, None)
    assert script["input_ids"] == ("batch", "seq")
    dynamo = ort_plan_shapes(SAMPLES / "tiny_gpt.dynamo.onnx")
    assert all(shape is not None and None not in shape
               for name, shape in dynamo.items() if name.startswith("softmax"))


@pytest.mark.ort
@pytest.mark.slow
def test_verify_prints_the_runtime_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", str(SAMPLES / "tiny_cnn.onnx"), "--batch", "1", "--threads", "1",
                 "--no-optimized-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "graphmem's model of onnxruntime" in out and "+0.0%" in out


# ----- the arena -------------------------------------------------------------------------------


def test_arena_rounds_to_256_bytes() -> None:
    assert [rounded_bytes(n) for n in (1, 256, 257, 1000)] == [256, 256, 512, 1024]


def test_arena_hands_out_a_small_enough_chunk_whole() -> None:
    # Free a 96 KiB chunk between two live ones; a 64 KiB request takes it whole (96 < 2 * 64),
    # so in use grows by 96 KiB, not 64 KiB.
    arena = BfcArena()
    arena.allocate("a", 96 << 10)
    arena.allocate("b", 16 << 10)
    arena.free("a")
    arena.allocate("c", 64 << 10)
    assert arena.in_use_bytes == (96 + 16) << 10


def test_arena_splits_a_chunk_twice_the_request_and_coalesces() -> None:
    arena = BfcArena()
    arena.allocate("a", 128 << 10)
    arena.allocate("b", 16 << 10)
    arena.free("a")
    arena.allocate("c", 64 << 10)  # 128 >= 2 * 64: split, 64 KiB in use
    assert arena.in_use_bytes == (64 + 16) << 10
    arena.free("c")
    arena.free("b")  # everything free again: one chunk for the whole 1 MiB region
    assert len(arena.chunks) == 1 and arena.chunks[0].size == 1 << 20


def test_arena_regions_double() -> None:
    # 1 MiB, then 2 MiB (the next region doubles), then 4 MiB for a 3 MiB request.
    result = replay([[ArenaEvent("a", 900 << 10)], [ArenaEvent("b", 900 << 10)],
                     [ArenaEvent("c", 3 << 20)]])
    assert result.held_bytes == (1 + 2 + 4) << 20


# ----- the command line and JSON ---------------------------------------------------------------


@pytest.mark.ort
def test_analyze_reports_the_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a.json"
    code = main(["analyze", str(SAMPLES / "tiny_cnn.onnx"), "--batch", "8", "--no-html",
                 "--json", str(out)])
    assert code == 0
    memory = json.loads(out.read_text())["memory"]
    parts = memory["device_total_parts"]
    assert memory["runtime"]["name"] == "ort-cpu"
    assert memory["runtime_peak_bytes"] == memory["runtime"]["runtime_peak_bytes"] > 0
    assert memory["device_total_bytes"] == sum(parts.values())
    text = capsys.readouterr().out
    assert "activations at its peak" in text and "allocator overhead" in text


def test_ort_cuda_adds_context_and_regions(tmp_path: Path) -> None:
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=8, gpu="t4", runtime="ort-cuda",
                            plan=False)
    estimate = analysis.runtime
    assert estimate is not None and estimate.runtime == "ort-cuda"
    # device total = arena regions + weights and inputs + context, the parts add up
    assert estimate.device_total_bytes == (estimate.tensors_at_peak_bytes
                                           + estimate.allocator_overhead_bytes
                                           + estimate.resident_bytes + estimate.context_bytes)
    assert estimate.arena_held_bytes >= estimate.runtime_peak_bytes


def test_runtime_errors_are_one_line() -> None:
    with pytest.raises(GraphmemError, match="needs a GPU"):
        analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=1, runtime="ort-cuda", plan=False)
    with pytest.raises(GraphmemError, match="choose one of"):
        analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=1, runtime="tvm", plan=False)


def test_free_dims_leave_a_note() -> None:
    analysis = analyze_onnx(SAMPLES / "tiny_gpt.onnx", batch=1, runtime="ort-cpu", plan=False)
    assert analysis.runtime is None and "needs every dim bound" in analysis.runtime_note
