"""`--batch` binds the batch axis and nothing else (graphmem/passes/dims.py `batch_axis`): a
dynamic input dim named like a batch, else axis 0 where it is dynamic; an export whose batch is
fixed (axis 0 a number in every input) refuses `--batch` with how to re-export."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem import analyze_onnx
from graphmem.passes.dims import batch_axis, is_batch_name
from tests.helpers.cli import assert_one_error_line, run_cli
from tests.helpers.samples import SAMPLES_DIR

SAMPLES = sorted(path.name for path in SAMPLES_DIR.glob("*.onnx"))


def _identity(path: Path, *inputs: tuple[str, list[int | str]]) -> Path:
    """A graph adding its inputs' first elements' shapes: Identity per input."""
    nodes = [helper.make_node("Identity", [name], [f"{name}_out"], name=f"id_{name}")
             for name, _ in inputs]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, s) for n, s in inputs])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(("name", "is_batch"), [
    ("batch", True), ("Batch", True), ("batch_size", True), ("BATCH-SIZE", True), ("bs", True),
    ("N", True), ("b", True), ("batch0", True),
    ("seq", False), ("s0", False), ("sequence_length", False), ("input_ids_d0", False),
    ("num_heads", False), ("nb", False),
])
def test_batch_names(name: str, is_batch: bool) -> None:
    assert is_batch_name(name) is is_batch


def test_a_batch_name_wins_over_axis_0(tmp_path: Path) -> None:
    # sequence-first [seq, N, features]: N is the batch, not the first dim
    path = _identity(tmp_path / "rnn.onnx", ("x", ["seq", "N", 16]))
    analysis = analyze_onnx(path, batch=4, dims={"seq": 10}, plan=False)
    assert analysis.dims.batch_dim == "N" and analysis.dims.bound == {"seq": 10, "N": 4}


def test_axis_0_when_no_dim_is_named_like_a_batch(tmp_path: Path) -> None:
    # dynamo names dims s0, s1: axis 0 of the first input with a dynamic axis 0
    path = _identity(tmp_path / "s.onnx", ("mask", [1, "s1"]), ("ids", ["s0", "s1"]))
    from graphmem.frontends.onnx.runtime_inputs import import_onnx_model

    axis = batch_axis(import_onnx_model(path).graph)
    assert axis.dim == "s0" and axis.fixed_at is None


def test_a_fixed_batch_is_refused_with_how_to_reexport(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # [1, seq], as torch.onnx.export writes it from a batch-1 example: --batch must not bind seq
    path = _identity(tmp_path / "fixed.onnx", ("input_ids", [1, "seq"]))
    code, _, err = run_cli(["analyze", str(path), "--batch", "8", "--no-html"], capsys)
    assert_one_error_line(code, err, "the batch is fixed at 1 in the file", "input_ids",
                          "dynamic_shapes", "dynamic_axes", "--dim (seq)")
    code, out, _ = run_cli(["analyze", str(path), "--dim", "seq=1024", "--gpu", "t4",
                            "--json", "-", "--no-html"], capsys)
    report = json.loads(out)
    assert code == 0 and report["dims"]["batch_dim"] is None
    assert report["dims"]["bound"] == {"seq": 1024}
    assert report["gpu"]["max_batch"] is None
    assert "fixed at 1 in the file" in report["gpu"]["max_batch_reason"]


def test_the_files_own_fixed_batch_is_accepted(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # `--batch 1` on a [1, seq] export asks for what the file is: nothing to bind, no error
    path = _identity(tmp_path / "fixed.onnx", ("input_ids", [1, "seq"]))
    code, out, _ = run_cli(["analyze", str(path), "--batch", "1", "--dim", "seq=64",
                            "--json", "-", "--no-html"], capsys)
    report = json.loads(out)
    assert code == 0 and report["dims"]["bound"] == {"seq": 64}
    assert report["dims"]["batch_dim"] is None


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_has_a_batch_named_batch(name: str) -> None:
    from graphmem.frontends.onnx.runtime_inputs import import_onnx_model

    assert batch_axis(import_onnx_model(SAMPLES_DIR / name).graph).dim == "batch"


def test_batch_and_seq_together_on_a_dynamic_batch_export() -> None:
    # gpt2.dynamo.onnx: input_ids[batch, seq]; --batch 4 --dim seq=1024 binds both
    analysis = analyze_onnx(SAMPLES_DIR / "gpt2.dynamo.onnx", batch=4, dims={"seq": 1024},
                            plan=False)
    assert analysis.dims.bound == {"seq": 1024, "batch": 4} and not analysis.dims.free


@pytest.mark.slow
@pytest.mark.torch
def test_a_dynamo_export_from_a_batch_1_example(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # a small GPT-2 from transformers, exported by dynamo from input_ids of shape [1, 16] with
    # only seq dynamic: PyTorch specializes the size-1 batch, the file says [1, seq]
    import warnings

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=256, n_positions=256, n_embd=32, n_layer=1, n_head=2,
                        use_cache=False, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    path = tmp_path / "gpt2_b1.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 16, dtype=torch.int64),), str(path),
                          dynamo=True, input_names=["input_ids"], output_names=["logits"],
                          dynamic_shapes={"input_ids": {1: torch.export.Dim("seq", max=256)}},
                          opset_version=18)
    dims = [d.dim_param or d.dim_value
            for d in onnx.load(path, load_external_data=False).graph.input[0].type
            .tensor_type.shape.dim]
    assert dims[0] == 1 and isinstance(dims[1], str)
    capsys.readouterr()  # the exporter's own log lines
    code, _, err = run_cli(["analyze", str(path), "--batch", "8", "--no-html"], capsys)
    assert_one_error_line(code, err, "the batch is fixed at 1 in the file")
    code, _, err = run_cli(["analyze", str(path), "--batch", "4", "--dim", f"{dims[1]}=128",
                            "--no-html"], capsys)
    assert_one_error_line(code, err, "the batch is fixed at 1 in the file")
    seq = str(dims[1])
    analysis = analyze_onnx(path, dims={seq: 128}, plan=False)
    assert analysis.dims.batch_dim is None and analysis.dims.bound == {seq: 128}
