"""The command line: outputs, and one clear error line with exit 2 for every bad input."""

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests.helpers.cli import assert_one_error_line, run_cli
from tests.onnx_builders import custom_op_model, mlp_model


@pytest.fixture
def mlp_path(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path


def test_analyze_writes_json_with_the_documented_fields(
    mlp_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    code, stdout, _ = run_cli(["analyze", str(mlp_path), "--gpu", "t4", "--batch", "32",
                               "--json", str(out), "--no-html"], capsys)
    assert code == 0
    result = json.loads(out.read_text())
    assert result["params"]["count"] == 2752
    # MACs: fc1 32*32*64 = 65536, fc2 32*64*10 = 20480 -> 86016; FLOPs add 2 per MAC plus
    # 32*64 adds and 32*64 relus, so FLOPs >= 2 * MACs
    assert result["flops"]["macs"] == 86016
    assert result["flops"]["total"] >= 2 * 86016
    memory = result["memory"]
    assert memory["peak_bytes"] >= memory["lower_bound_bytes"] > 0
    assert set(memory["breakdown"]) >= {"parameters", "inputs", "activations"}
    assert memory["live_at_peak"][0]["producer"] is not None
    assert result["gpu"]["name"] == "t4" and result["gpu"]["fits"] is True
    assert result["dims"] == {"bound": {"batch": 32}, "free": [], "batch_dim": "batch"}
    assert {n["op"] for n in result["nodes"]} == {"MatMul", "Add", "Relu"}
    assert result["unsupported_ops"] == {}
    assert "live tensors at the peak" in stdout


def test_free_dims_give_formulas(mlp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run_cli(["analyze", str(mlp_path), "--json", "-", "--no-html"], capsys)
    assert code == 0
    result = json.loads(stdout)
    assert result["dims"]["free"] == ["batch"]
    # fc1 MACs are 32*64 = 2048 per sample, fc2 64*10 = 640: 2688*batch
    assert result["flops"]["macs"] == "2688*batch"
    assert "batch" in result["memory"]["peak_bytes"]


@pytest.mark.ort
def test_unsupported_ops_are_reported_not_zeroed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custom.onnx"
    onnx.save(custom_op_model(), path)
    code, stdout, _ = run_cli(["analyze", str(path), "--batch", "2", "--json", "-",
                               "--no-html"], capsys)
    assert code == 0
    result = json.loads(stdout)
    assert result["unsupported_ops"] == {"custom.domain.MyCustomOp": 1}
    custom = next(n for n in result["nodes"] if n["name"] == "custom")
    assert custom["status"] == "unsupported"


@pytest.mark.ort
def test_html_default_path_is_next_to_the_working_directory(
    mlp_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("graphmem.report.html.page")
    monkeypatch.chdir(tmp_path)
    code, _, _ = run_cli(["analyze", str(mlp_path), "--batch", "4"], capsys)
    assert code == 0
    assert (tmp_path / "mlp.graphmem.html").read_text().lstrip().lower().startswith("<!doctype")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--gpu", "a10o-40gb"], ["unknown GPU", "graphmem gpus"]),
        (["--batch", "0"], ["--batch 0", "positive"]),
        (["--batch", "-4"], ["--batch -4", "positive"]),
        (["--batch", "100000000000"], ["implausibly large"]),
        (["--dim", "seq=128"], ["no dynamic dim named 'seq'", "batch"]),
        (["--dim", "batch"], ["NAME=INTEGER"]),
        (["--batch", "two"], ["invalid int value"]),
    ],
)
def test_bad_options(
    mlp_path: Path, args: list[str], fragments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["analyze", str(mlp_path), "--no-html", *args], capsys)
    assert_one_error_line(code, err, *fragments)


def test_batch_on_a_static_model_says_how_to_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = mlp_model()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    path = tmp_path / "static.onnx"
    onnx.save(model, path)
    code, _, err = run_cli(["analyze", str(path), "--batch", "8", "--no-html"], capsys)
    assert_one_error_line(code, err, "the batch is fixed at 1 in the file", "re-export")


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (lambda d: d / "missing.onnx", ["no such file"]),
        (lambda d: d, ["is a directory"]),
        (lambda d: _write(d / "empty.onnx", b""), ["is empty"]),
        (lambda d: _write(d / "text.onnx", b"hello world, not a model\n" * 40),
         ["not a valid ONNX model"]),
        (lambda d: _write(d / "cut.onnx", mlp_model().SerializeToString()[:300]),
         ["ONNX"]),
    ],
)
@pytest.mark.parametrize("command", [["analyze", "--no-html"], ["verify"],
                                     ["check", "--max-params", "1G"]])
def test_bad_model_files(
    tmp_path: Path, make: object, fragments: list[str], command: list[str],
    capsys: pytest.CaptureFixture[str]
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    before = path.read_bytes() if path.is_file() else None
    code, _, err = run_cli([command[0], str(path), *command[1:]], capsys)
    assert_one_error_line(code, err, *fragments)  # verify on a folder was exit 3
    if before is not None:
        assert path.read_bytes() == before  # nothing the user gave is modified


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def test_output_over_the_model_is_refused(
    mlp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = mlp_path.read_bytes()
    code, _, err = run_cli(["analyze", str(mlp_path), "--html", str(mlp_path)], capsys)
    assert_one_error_line(code, err, "is the model itself")
    assert mlp_path.read_bytes() == before


def test_gpus_lists_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run_cli(["gpus"], capsys)
    assert code == 0
    for name in ("t4", "a100-80gb", "h100-sxm", "rtx-4090"):
        assert name in stdout


@pytest.mark.slow
def test_console_script_runs_as_a_module() -> None:
    done = subprocess.run([sys.executable, "-m", "graphmem", "analyze", "/nonexistent.onnx"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("graphmem: error: no such file")


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_the_run_quietly(tmp_path: Path) -> None:
    # `graphmem analyze ... | head -1`: rich silences the console and raises SystemExit(1) on
    # the broken pipe; that was reported as "the model's code raised SystemExit(1)", exit 2.
    # Now: no message, 141 (128 + SIGPIPE) as a shell reports it.
    root = Path(__file__).resolve().parent.parent
    process = subprocess.Popen(
        [sys.executable, "-m", "graphmem", "analyze", str(root / "samples/resnet50.onnx"),
         "--gpu", "t4", "--batch", "32", "--no-html", "--verbose"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert process.stdout is not None and process.stderr is not None
    # the reader goes away at once: the process is still importing (about a second), so its
    # first write to stdout is the one that finds the pipe closed
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and err == ""


@pytest.mark.parametrize(("model", "stem"), [
    ("nets/model.py:build", "model.build"),
    ("other/encoder.py:build", "encoder.build"),  # two build() functions, two reports
    ("pkg.models.vision:build_model", "vision.build_model"),
    ("samples/resnet50.onnx", "resnet50"),
])
def test_default_report_names_do_not_collide(model: str, stem: str) -> None:
    from graphmem.frontends.torch.spec import model_label

    assert model_label(model) == stem  # the report is ./<stem>.graphmem.html
