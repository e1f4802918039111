"""Max batch, sweeps and `gpus --fits`, end to end on ONNX models, checked against re-analysis."""

import json
import warnings
from pathlib import Path

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from graphmem import analyze_onnx
from graphmem.devices.gpus import load_gpu_table
from graphmem.passes.max_batch import _largest_fitting, find_max_batch
from graphmem.passes.sweep import parse_sweep
from graphmem.pipeline.planning import SweepRequest
from tests.helpers.cli import assert_one_error_line, run_cli
from tests.torch_models.small import ConvNet

WIDTH = 1 << 18  # floats per sample: 1 MiB per tensor per sample


def relu_chain_model() -> onnx.ModelProto:
    """x[batch, 2^18] -> Relu -> Relu -> Relu -> y: 3 MiB live per sample at the peak."""
    nodes = [helper.make_node("Relu", [a], [b], name=f"relu{i}")
             for i, (a, b) in enumerate([("x", "r1"), ("r1", "r2"), ("r2", "y")])]
    graph = helper.make_graph(
        nodes, "relu_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def relu_path(tmp_path: Path) -> Path:
    path = tmp_path / "relu_chain.onnx"
    onnx.save(relu_chain_model(), path)
    return path


def fits(path: Path, batch: int, gpu: str = "t4", **options: object) -> bool | None:
    """The GPU's verdict at `batch`, as `--batch` gives it (the runtime model's device total;
    unplanned, so no max batch search)."""
    return analyze_onnx(path, batch=batch, gpu=gpu, plan=False, runtime="auto",  # type: ignore[union-attr, arg-type]
                        **options).fit.fits


def test_max_batch_fits_and_one_more_does_not(relu_path: Path) -> None:
    analysis = analyze_onnx(relu_path, gpu="t4")
    result = analysis.max_batch
    assert result is not None and result.max_batch is not None
    # The verdict is onnxruntime CUDA's device total against the T4's 15,360 MiB: x is
    # resident (batch MiB); r1's region is the first 1 MiB doubled to a power of two >= batch
    # MiB (8,192 MiB at batch 4,096); r2 runs in place in r1; y, a graph output, needs batch
    # MiB more: at 4,096 the rest of that region holds it (8,192 - 4,096); at 4,097 the rest
    # is 2 MiB short, and the next region, backed off in 90% steps down to 4,097 MiB, does
    # not fit the 15,360 - 694.8 (context) - 4,097 - 8,192 = 2,376 MiB left: out of memory.
    assert analysis.fit is not None and analysis.fit.capacity_bytes == 15_360 * 2**20
    assert result.max_batch == 4096 and result.basis == "ort-cuda device total"
    assert fits(relu_path, result.max_batch) is True
    assert fits(relu_path, result.max_batch + 1) is False
    # by the same number: the totals the search saw are those `--batch N` reports
    at_max = analyze_onnx(relu_path, gpu="t4", batch=4096, plan=False, runtime="auto").fit
    at_next = analyze_onnx(relu_path, gpu="t4", batch=4097, plan=False, runtime="auto").fit
    assert at_max is not None and at_next is not None
    assert result.peak_at_max_bytes == int(at_max.required_bytes) <= result.limit_bytes
    assert result.limit_bytes < result.peak_at_next_bytes == int(at_next.required_bytes)  # type: ignore[operator]


def test_the_device_search_is_the_same_answer_from_its_line(
        relu_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the device-total search starts where the line through its first probe (and the
    # analysed batch's run, or with the live peak's slope) crosses the capacity; without the
    # line it gallops from the live-peak
    # answer: the same answer, checked by the same exact probes (how many depends on how
    # straight the device total is: here onnxruntime's arena doubles its regions, 22 with the
    # line and 20 without; on a 22,337-node decoder, 5 and 8)
    from graphmem.pipeline import planning

    lined = analyze_onnx(relu_path, gpu="t4", batch=8).max_batch
    monkeypatch.setattr(planning, "_device_line", lambda *line_from: None)
    walked = analyze_onnx(relu_path, gpu="t4", batch=8).max_batch
    assert lined is not None and walked is not None
    assert (lined.max_batch, lined.peak_at_max_bytes, lined.peak_at_next_bytes) == (
        walked.max_batch, walked.peak_at_max_bytes, walked.peak_at_next_bytes)


def test_max_batch_is_also_solved_when_the_batch_is_bound(relu_path: Path) -> None:
    free = analyze_onnx(relu_path, gpu="t4").max_batch
    bound = analyze_onnx(relu_path, gpu="t4", batch=8).max_batch
    assert free is not None and bound is not None and bound.max_batch == free.max_batch


@pytest.mark.filterwarnings("ignore")
@pytest.mark.torch
def test_max_batch_of_an_exported_convnet(tmp_path: Path) -> None:
    path = tmp_path / "convnet.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ConvNet(channels=32).eval(), (torch.randn(2, 3, 96, 96),), str(path),
                          dynamo=False, opset_version=17, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    result = analyze_onnx(path, gpu="l4").max_batch
    assert result is not None and result.max_batch is not None and result.max_batch > 1
    assert fits(path, result.max_batch, gpu="l4") is True
    assert fits(path, result.max_batch + 1, gpu="l4") is False


def test_even_batch_one_not_fitting_gives_zero(relu_path: Path) -> None:
    # usable = the T4's total less a reserve that leaves 2 MiB: below batch 1's 3 MiB
    capacity = analyze_onnx(relu_path, gpu="t4", plan=False).fit.capacity_bytes  # type: ignore[union-attr]
    reserve = capacity - 2 * 2**20
    result = analyze_onnx(relu_path, gpu="t4", cuda_reserve_bytes=reserve).max_batch
    assert result is not None and result.max_batch == 0 and "does not fit" in (result.reason or "")


def test_search_gallops_from_a_wrong_estimate() -> None:
    # the bound analysis says 1000 bytes per sample, the estimate 10: it is corrected
    result = find_max_batch("batch", 100_000, lambda b: 10 * b, lambda b: 1000 * b)
    assert result.max_batch == 100 and result.peak_at_next_bytes == 101_000
    assert _largest_fitting(lambda b: b <= 37, 5, 1000) == 37
    assert _largest_fitting(lambda b: b <= 37, 900, 1000) == 37
    assert _largest_fitting(lambda b: b <= 0, 3, 1000) == 0
    assert _largest_fitting(lambda b: True, 1, 1000) == 1000


def test_no_batch_dim_is_a_reason_not_a_number(tmp_path: Path) -> None:
    model = relu_chain_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 4
    path = tmp_path / "fixed.onnx"
    onnx.save(model, path)
    result = analyze_onnx(path, gpu="t4").max_batch
    assert result is not None and result.max_batch is None and "fixed" in (result.reason or "")


def test_sweep_peaks_match_the_bound_analysis(relu_path: Path) -> None:
    analysis = analyze_onnx(relu_path, gpu="a100-40gb",
                            sweep=SweepRequest(*parse_sweep("batch=1,2,4,...,64")))
    sweep = analysis.sweep
    assert sweep is not None and [p.value for p in sweep.points] == [1, 2, 4, 8, 16, 32, 64]
    for point in sweep.points:
        bound = analyze_onnx(relu_path, batch=point.value, gpu="a100-40gb")
        assert point.peak_bytes == int(bound.liveness.peak_bytes)
        assert point.est_latency_s == pytest.approx(bound.roofline.est_latency_s)  # type: ignore[union-attr]
        assert point.fits is True
    # memory-bound Relus: latency grows linearly with batch, so throughput is flat from 1
    assert sweep.saturates_at == 1


def test_parse_sweep_expands_progressions() -> None:
    assert parse_sweep("batch=1,2,4,...,256")[1] == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert parse_sweep("seq=128,256,384,...,768")[1] == (128, 256, 384, 512, 640, 768)
    assert parse_sweep("b=1,2,...,5")[1] == (1, 2, 3, 4, 5)  # doubling misses 5: even step
    assert parse_sweep("b=3,7")[1] == (3, 7)


def test_cli_reports_max_batch_and_the_plan_fields(
        relu_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    code, stdout, _ = run_cli(["analyze", str(relu_path), "--gpu", "t4", "--json", str(out),
                               "--no-html", "--verbose"], capsys)
    assert code == 0
    result = json.loads(out.read_text())
    max_batch = result["gpu"]["max_batch"]
    assert f"fits on NVIDIA Tesla T4 up to batch={max_batch:,} " in stdout.splitlines()[1]
    assert f"max batch on NVIDIA Tesla T4: batch={max_batch}" in " ".join(stdout.split())
    memory = result["memory"]
    assert {"best_order_peak_bytes", "arena_bytes", "no_reuse_bytes"} <= set(memory)
    assert memory["planned_at_dims"] == {"batch": 64}
    assert result["gpu"]["est_latency_s"] is None  # batch free: no latency
    assert all(node["est_time_s"] is None for node in result["nodes"])


def test_cli_bound_batch_gives_latency_per_node(
        relu_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    code, stdout, _ = run_cli(["analyze", str(relu_path), "--gpu", "t4", "--batch", "16",
                               "--json", str(out), "--no-html", "--verbose"], capsys)
    assert code == 0
    result = json.loads(out.read_text())
    gpu = result["gpu"]
    assert gpu["est_latency_s"] == pytest.approx(sum(n["est_time_s"] for n in result["nodes"]))
    assert gpu["est_throughput_per_s"] == pytest.approx(16 / gpu["est_latency_s"])
    assert {n["bound"] for n in result["nodes"]} == {"memory"}
    memory = result["memory"]
    # a chain: the model order is the only order; its peak meets the lower bound
    assert memory["best_order_peak_bytes"] == memory["peak_bytes"] == memory["lower_bound_bytes"]
    assert memory["schedule"]["proof"] == "lower bound"
    # no reuse: r1, r2, y at 16 MiB each; the arena reuses r1's space for y
    assert memory["no_reuse_bytes"] == 3 * 16 * 4 * WIDTH
    assert memory["arena_bytes"] == 2 * 16 * 4 * WIDTH == memory["activation_peak_bytes"]
    assert "not a benchmark" in " ".join(stdout.split())


def test_cli_sweep_prints_a_table_and_writes_json(
        relu_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    code, stdout, _ = run_cli(["analyze", str(relu_path), "--gpu", "t4", "--sweep",
                               "batch=1,2,4,...,8192", "--json", str(out), "--no-html"], capsys)
    assert code == 0
    assert "sweep over batch" in stdout and "throughput saturates at batch=" in stdout
    points = json.loads(out.read_text())["sweep"]["points"]
    assert [p["value"] for p in points] == [2**k for k in range(14)]
    # 3 MiB per sample: 4096 fits the T4's 14.3 GiB, 8192 (24 GiB) does not
    assert [p["fits"] for p in points][-2:] == [True, False]


def test_cli_gpus_fits(relu_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # batch 8192: 24 GiB; too much for the 16 GB cards, fine on the 40 GB and larger ones
    code, stdout, _ = run_cli(["gpus", "--fits", str(relu_path), "--batch", "8192"], capsys)
    assert code == 0
    rows = {line.split()[1]: line for line in stdout.splitlines() if line.startswith("│")}
    assert "no" in rows["t4"] and "yes" in rows["a100-80gb"]
    assert len([name for name in rows if name in {g.name for g in load_gpu_table()}]) >= 10


@pytest.mark.parametrize(("args", "fragment"), [
    (["--sweep", "seq=1,2"], "no dynamic dim named 'seq'"),
    (["--sweep", "batch=1,2", "--batch", "4"], "give only the sweep"),
    (["--sweep", "batch=4,2,...,1"], "neither a doubling"),
    (["--sweep", "batch"], "NAME=VALUES"),
])
def test_sweep_errors_are_one_line(relu_path: Path, capsys: pytest.CaptureFixture[str],
                                   args: list[str], fragment: str) -> None:
    code, _, err = run_cli(["analyze", str(relu_path), "--no-html", *args], capsys)
    assert_one_error_line(code, err, fragment)


def test_gpus_options_need_fits(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["gpus", "--batch", "4"], capsys)
    assert_one_error_line(code, err, "--fits")


@pytest.mark.filterwarnings("ignore")
@pytest.mark.torch
def test_max_batch_with_unknown_shapes_checks_each_batch_by_reanalysis(tmp_path: Path) -> None:
    # onnxruntime's symbolic inference cannot follow MultiheadAttention's dynamic Reshape;
    # with the batch bound, shapes are re-inferred: max batch must agree with that analysis.
    from tests.helpers.torch_nets import AttentionBlock

    path = tmp_path / "mha.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(AttentionBlock().eval(), (torch.randn(2, 7, 32),), str(path),
                          dynamo=False, opset_version=17, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    capacity = analyze_onnx(path, gpu="t4", plan=False).fit.capacity_bytes  # type: ignore[union-attr]
    reserve = capacity - 8 * 2**20  # 8 MiB usable keeps the search short
    result = analyze_onnx(path, gpu="t4", cuda_reserve_bytes=reserve).max_batch
    assert result is not None and result.max_batch is not None and result.max_batch > 1
    assert fits(path, result.max_batch, cuda_reserve_bytes=reserve) is True
    assert fits(path, result.max_batch + 1, cuda_reserve_bytes=reserve) is False


@pytest.mark.parametrize("seed", range(5))
def test_the_three_ways_to_the_bound_peak_agree(seed: int) -> None:
    # the liveness's symbolic peak evaluated at a batch, the integer model's peak, and the
    # bound liveness run at that batch are the same number
    from graphmem.passes.dims import bind_dims
    from graphmem.passes.liveness import analyze_liveness
    from graphmem.pipeline.analysis import ModelInfo
    from graphmem.pipeline.dim_probe import DimProbe
    from graphmem.pipeline.run import run_passes
    from tests.helpers.graphs import symbolic_random_dag

    graph = symbolic_random_dag(seed, node_count=40)
    info = ModelInfo("", graph.name, "ir", 0, len(graph.nodes), "none", ())
    analysis = run_passes(graph, info, bind_dims(graph, None, {"seq": 9}), None, None)
    probe = DimProbe(analysis, "batch", None)
    for batch in (1, 7, 64, 1000):
        dims = {"batch": batch, "seq": 9}
        sizes = {n: (v.nbytes.bind(dims) if v.nbytes is not None else None)
                 for n, v in graph.values.items()}
        expected = int(analyze_liveness(graph, sizes).peak_bytes)
        assert probe.estimate_peak(batch) == probe.exact_peak(batch) == expected
