"""`--train` on an inference export says what the export removed (graphmem/training/exports.py):
BatchNorm folded into convs (given back, also where the exporter dropped a zero bias), dropout
absent from an attention model, parameters made by constant folding (a tied weight twice)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from graphmem import Result, analyze_onnx
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.training.exports import CodedWarning, bias_dropped_folds
from tests.models import TinyCNN, tiny_gpt

ROOT = Path(__file__).resolve().parent.parent


def _codes(result: Result) -> dict[str, str]:
    return {w.code: str(w) for w in result.model.warnings if isinstance(w, CodedWarning)}


def _export(model: nn.Module, example: torch.Tensor, path: Path, *, dynamo: bool = False,
            fold: bool = True, training: bool = False) -> Path:
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(model.eval(), (example,), str(path), dynamo=True)
        else:
            torch.onnx.export(model, (example,), str(path), dynamo=False,
                              do_constant_folding=fold, training=mode)
    return path


def test_a_coded_warning_is_its_text_with_a_code() -> None:
    warning = CodedWarning("dropout-absent", "dropout masks not counted")
    assert warning == "dropout masks not counted" and "masks" in warning
    copy = pickle.loads(pickle.dumps(warning))
    assert (copy, copy.code) == ("dropout masks not counted", "dropout-absent")


# ----- BatchNorm folded ---------------------------------------------------------------------
def _bias_free_conv(norm: str | None) -> onnx.ModelProto:
    """x[1, 3, 8, 8] -> Conv(3 -> 4, 3x3, no bias) [-> norm] -> y."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(torch.zeros(4, 3, 3, 3).numpy(), "w")]
    last = "c"
    if norm is not None:
        nodes.append(helper.make_node(norm, ["c", "s", "b", "m", "v"], ["y"], name="bn"))
        inits += [numpy_helper.from_array(torch.ones(4).numpy(), n) for n in "sbmv"]
        last = "y"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("norm,flagged", [(None, True), ("BatchNormalization", False)])
def test_bias_free_conv_is_a_fold_only_without_any_norm(tmp_path: Path, norm: str | None,
                                                        flagged: bool) -> None:
    path = tmp_path / "conv.onnx"
    onnx.save(_bias_free_conv(norm), path)
    graph = import_onnx(path).graph
    assert {n.name for n in bias_dropped_folds(graph)} == ({"conv"} if flagged else set())


@pytest.mark.torch
@pytest.mark.slow
def test_eval_exports_of_a_cnn_warn_and_training_exports_do_not(tmp_path: Path) -> None:
    # each export from a fresh model (BatchNorm gamma 1, beta 0, mean 0, var 1): a
    # training-mode export runs forward in training mode, which moves the running statistics
    x = torch.randn(2, 3, 32, 32)
    kept = analyze_onnx(_export(TinyCNN(), x, tmp_path / "train.onnx", training=True),
                        train=True)
    assert "batchnorm-folded" not in _codes(kept)
    folded = analyze_onnx(_export(TinyCNN(), x, tmp_path / "fold.onnx"), train=True)
    assert "4 Conv nodes carry a BatchNorm" in _codes(folded)["batchnorm-folded"]
    unfolded = analyze_onnx(_export(TinyCNN(), x, tmp_path / "nofold.onnx", fold=False),
                            train=True)
    assert "batchnorm-folded" not in _codes(unfolded)  # the eval BatchNorm nodes are there
    # dynamo folds a fresh BatchNorm into a zero bias and drops it, keeping the weight's
    # name: given back with a new beta, the step is the training export's to the byte
    dynamo = analyze_onnx(_export(TinyCNN(), x, tmp_path / "dynamo.onnx", dynamo=True),
                          train=True)
    assert "4 of them with the zero bias" in _codes(dynamo)["batchnorm-folded"]
    assert dynamo.params.count == kept.params.count
    assert dynamo.peak_bytes == kept.peak_bytes
    # no attention in a CNN: nothing said about dropout
    assert "dropout-absent" not in _codes(folded)


# ----- dropout absent -----------------------------------------------------------------------
class Attention(nn.Module):
    """x[b, s, 16] -> softmax(q k^T) -> dropout -> @ v -> Linear(16 -> 10) logits."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(16, 48), nn.Linear(16, 10)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(16, dim=-1)
        return self.out(self.drop(torch.softmax(q @ k.transpose(1, 2), dim=-1)) @ v)


@pytest.mark.torch
@pytest.mark.slow
def test_eval_export_of_attention_says_dropout_is_not_counted(tmp_path: Path) -> None:
    x = torch.randn(2, 8, 16)
    eval_export = analyze_onnx(_export(Attention().eval(), x, tmp_path / "e.onnx"), train=True)
    text = _codes(eval_export)["dropout-absent"]
    assert "dropout masks not counted" in text and "1 attention softmaxes" in text
    # the attention probabilities [2, 8, 8] float32: 128 elements; a bool mask 128 B and the
    # dropped copy 512 B = 640 B not counted
    assert "about 640 B more" in text
    trained = analyze_onnx(_export(Attention().train(), x, tmp_path / "t.onnx", training=True),
                           train=True)
    assert "dropout-absent" not in _codes(trained)  # the Dropout node saves its mask


# ----- constant-folded weights --------------------------------------------------------------
@pytest.mark.torch
@pytest.mark.slow
def test_folded_transpose_of_a_tied_weight_is_said_to_count_twice(tmp_path: Path) -> None:
    model, ids = tiny_gpt().eval(), torch.randint(0, 100, (2, 16))
    result = analyze_onnx(_export(model, ids, tmp_path / "gpt.onnx"), train=True)
    text = _codes(result)["constant-folded-weights"]
    # TorchScript folds lm_head's use of the tied wte [512, 64] into onnx::MatMul_* [64, 512]:
    # 32,768 float32 = 128 KiB, with its gradient and Adam's two state slots: 4 x 128 KiB
    assert "has the transposed shape of wte.weight" in text
    assert "high by about 512.0 KiB" in text
    assert "dropout-absent" in _codes(result)
    unfolded = analyze_onnx(_export(model, ids, tmp_path / "nofold.onnx", fold=False),
                            train=True)
    assert "constant-folded-weights" not in _codes(unfolded)


# ----- the CLI, JSON and HTML ---------------------------------------------------------------
@pytest.mark.slow
def test_resnet50_sample_with_train_warns_in_terminal_json_and_html(tmp_path: Path) -> None:
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    done = subprocess.run(
        [sys.executable, "-m", "graphmem", "analyze", str(ROOT / "samples/resnet50.onnx"),
         "--train", "--batch", "2", "--json", str(out), "--html", str(page)],
        capture_output=True, text=True, check=False, env={"COLUMNS": "400", "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert "53 Conv nodes carry a BatchNorm folded in at export" in done.stdout
    details = json.loads(out.read_text())["model"]["warning_details"]
    assert [d["code"] for d in details if d["code"]] == ["batchnorm-folded"]
    assert "53 Conv nodes carry a BatchNorm folded" in page.read_text()


@pytest.mark.slow
def test_dynamo_folded_values_are_named_and_square_ones_name_no_twin() -> None:
    # the dynamo exporter folds each Linear's transposed weight into an initializer `val_<n>`:
    # TinyLlama's square [64, 64] attention weights name no twin (every square matrix has its
    # transpose's shape); the output projection [64, 512] has tok_embeddings' [512, 64] one
    result = analyze_onnx(ROOT / "samples/tiny_llama.dynamo.onnx", train=True, batch=1,
                          dims={"seq": 16}, plan=False)
    text = _codes(result)["constant-folded-weights"]
    assert "val_27[64, 64]" in text and "tied" in text
    assert "has the transposed shape of tok_embeddings.weight" in text
    assert text.count("has the transposed shape") == 1
