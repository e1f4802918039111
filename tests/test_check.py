"""`graphmem check`: every exit code, each budget passing and failing, baselines, budgets
files, JSON and JUnit outputs.

The model is tests/onnx_builders.mlp_model at batch 32 (float32):
    residents: x 32*32*4 = 4096, w1 32*64*4 = 8192, b1 64*4 = 256, w2 64*10*4 = 2560 -> 15104
    activations: h, hb, r 32*64*4 = 8192 each, y 32*10*4 = 1280; at bias1 h and hb are live
    -> activation peak 16384, peak 15104 + 16384 = 31488 bytes
    params 32*64 + 64 + 64*10 = 2752
    FLOPs 2 * (32*32*64 + 32*64*10) + 32*64 (Add) + 32*64 (Relu) = 172032 + 4096 = 176128
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest

from graphmem.cli.main import main
from graphmem.errors import GraphmemError
from graphmem.gate.budgets import (
    Budgets,
    MemoryLimit,
    ModelNumbers,
    SpecError,
    evaluate,
    parse_count,
    parse_latency_s,
    parse_memory_limit,
    parse_percent,
)
from tests.onnx_builders import custom_op_model, mlp_model

PEAK = 31488
PARAMS = 2752
FLOPS = 176128


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def budget_lines(out: str) -> dict[str, str]:
    """`PASS  peak memory ...` -> {"peak memory": "PASS"}."""
    verdicts = {}
    for line in out.splitlines():
        words = line.split()
        if words and words[0] in ("PASS", "FAIL"):
            name = line.split(words[0], 1)[1].strip().split("  ")[0]
            verdicts[name] = words[0]
    return verdicts


# ----- each budget passes and fails -------------------------------------------------------


def test_every_budget_holds_exit_0(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["check", str(mlp), "--gpu", "t4", "--batch", "32", "--max-memory", "90%",
                        "--max-latency", "20ms", "--max-params", "2752", "--max-flops", "176128",
                        "--fail-on-unsupported"], capsys)
    assert code == 0
    assert budget_lines(out) == {"peak memory": "PASS", "latency": "PASS", "parameters": "PASS",
                                 "FLOPs": "PASS", "unsupported ops": "PASS"}
    assert "30.8 KiB" in out  # the headline: peak 31488 B
    assert "PASSED" in out


@pytest.mark.parametrize(("flags", "broken"), [
    (["--max-memory", "31487B"], "peak memory"),  # one byte below the peak
    (["--max-memory", "30KiB"], "peak memory"),
    (["--gpu", "t4", "--max-latency", "1ns"], "latency"),
    (["--max-params", "2751"], "parameters"),
    (["--max-params", "0.002M"], "parameters"),
    (["--max-flops", "176127"], "FLOPs"),
    (["--max-flops", "0.1M"], "FLOPs"),
])
def test_each_budget_fails_exit_1(mlp: Path, flags: list[str], broken: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["check", str(mlp), "--batch", "32", *flags], capsys)
    assert code == 1, err
    assert budget_lines(out)[broken] == "FAIL"
    assert f"resnet50: {broken}" not in out and f"mlp: {broken}" in out  # the verdict names it


def test_size_budget_at_the_peak_passes(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["check", str(mlp), "--batch", "32", "--max-memory", f"{PEAK}B"], capsys)
    assert code == 0 and budget_lines(out) == {"peak memory": "PASS"}
    assert "PASSED: 1 budget holds (1 model)" in out  # was "1 budgets hold"


@pytest.mark.parametrize(("limit", "verdict"), [(f"{PEAK}B", "PASS"), (f"{PEAK - 1}B", "FAIL")])
def test_the_live_tensor_budget_reads_the_peak_apart_from_the_gpu(
        mlp: Path, limit: str, verdict: str, capsys: pytest.CaptureFixture[str]) -> None:
    # with --gpu the device total (context included: hundreds of MiB) is --max-memory's; the
    # live-tensor budget still reads graphmem's 31488 B peak, to the byte
    code, out, err = run(["check", str(mlp), "--batch", "32", "--gpu", "t4",
                          "--max-tensor-memory", limit], capsys)
    assert code == (0 if verdict == "PASS" else 1), err
    assert budget_lines(out) == {"peak memory": "PASS", "live tensors": verdict}


@pytest.mark.slow
def test_the_shipped_budgets_file_passes(capsys: pytest.CaptureFixture[str]) -> None:
    # the README's gate on the samples: it failed its own budgets (a 64 MiB limit written for
    # the live tensors was held against the 726.5 MiB device total, context included)
    code, out, err = run(["check", "--budgets", str(Path(__file__).parent.parent /
                                                     "graphmem.toml")], capsys)
    assert code == 0, out + err
    verdicts = [line.split()[:3] for line in out.splitlines() if line.startswith("  ")]
    assert ["FAIL"] not in [v[:1] for v in verdicts]
    assert verdicts.count(["PASS", "live", "tensors"]) == 2  # tiny_gpt's and tiny_llama's


def test_percent_budget_is_a_share_of_usable_memory(mlp: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # with a GPU the budget holds the verdict's device total against a share of the GPU's
    # memory (not the live peak against usable memory: --max-memory 100% is then "fits")
    out_json = tmp_path / "check.json"
    code, _, _ = run(["check", str(mlp), "--gpu", "t4", "--batch", "32", "--max-memory", "50%",
                      "--json", str(out_json)], capsys)
    assert code == 0
    result = json.loads(out_json.read_text())
    budget = result["models"][0]["budgets"][0]
    gpu = result["models"][0]["analysis"]["gpu"]
    assert gpu["basis"] == "ort-cuda device total"
    assert budget["value"] == gpu["required_bytes"] == result["models"][0]["analysis"][
        "memory"]["device_total_bytes"]
    assert budget["limit"] == math.floor(gpu["memory_bytes"] * 0.5)
    assert "50%" in budget["message"] and "ort-cuda device total" in budget["message"]


def test_a_gpu_alone_means_the_model_must_fit(mlp: Path, capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    code, out, _ = run(["check", str(mlp), "--gpu", "t4", "--batch", "32"], capsys)
    assert code == 0 and "limit 100%" in out


def test_a_model_that_does_not_fit_fails(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "wide.onnx"
    onnx.save(mlp_model(hidden=1024), path)
    # batch 2**22: h alone is 2**22 * 1024 * 4 B = 16 GiB; a T4 has about 14.3 GiB usable
    code, out, _ = run(["check", str(path), "--gpu", "t4", "--batch", str(2**22)], capsys)
    assert code == 1 and budget_lines(out)["peak memory"] == "FAIL"


def test_unsupported_ops_fail_only_when_asked(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "custom.onnx"
    onnx.save(custom_op_model(), path)
    code, out, _ = run(["check", str(path), "--batch", "4", "--max-params", "0"], capsys)
    assert code == 0
    code, out, _ = run(["check", str(path), "--batch", "4", "--fail-on-unsupported"], capsys)
    assert code == 1
    assert budget_lines(out)["unsupported ops"] == "FAIL"
    assert "custom.domain.MyCustomOp x1" in out or "MyCustomOp x1" in out


# ----- usage and input errors: exit 2, one line -------------------------------------------


def test_percent_budget_without_gpu_is_a_usage_error(mlp: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check", str(mlp), "--batch", "32", "--max-memory", "90%"], capsys)
    one_error(code, err, "--max-memory 90%", "--gpu")


def test_free_dims_are_an_error(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check", str(mlp), "--max-params", "1M"], capsys)
    one_error(code, err, "batch", "bind the dims with --batch/--dim; a gate needs numbers")


def test_a_dim_the_data_sets_is_named_with_how_to_bind_it(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """x [96, 32] sliced by indices computed from x: the slice's length has no value (a dim
    onnxruntime's inference names), so the peak is a formula in it though x is static; the
    refusal names it and the --dim that binds it, and the bound check then passes."""
    from tests.helpers.data_slices import save
    model = save("top", tmp_path)
    code, _, err = run(["check", str(model), "--max-params", "1M"], capsys)
    one_error(code, err, "dims the data sets", "--dim Slice_5_o0__d0=N", "a gate needs numbers")
    code, out, _ = run(["check", str(model), "--max-params", "1M", "--dim",
                        "Slice_5_o0__d0=96"], capsys)
    assert code == 0, out


@pytest.mark.parametrize(("flags", "fragment"), [
    ([], "no budget to check"),
    (["--max-latency", "20"], "not a duration"),
    (["--max-latency", "20ms"], "--max-latency needs a latency estimate"),
    (["--max-growth", "5"], "not a percentage"),
    (["--max-growth", "5%"], "--max-growth needs --baseline"),
    (["--max-memory", "lots"], "neither a share"),
    (["--max-memory", "120%"], "between 0% and 100%"),
    (["--max-params", "many"], "not a count"),
    (["--gpu", "t5", "--max-params", "1M"], "t5"),
    (["--dim", "seq=4", "--max-params", "1M"], "no dynamic dim named 'seq'"),
])
def test_usage_errors_exit_2(mlp: Path, flags: list[str], fragment: str,
                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check", str(mlp), "--batch", "32", *flags], capsys)
    one_error(code, err, fragment)


def test_missing_model_and_no_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check", str(tmp_path / "nope.onnx"), "--max-params", "1"], capsys)
    one_error(code, err, "nope.onnx")
    code, _, err = run(["check", "--max-params", "1"], capsys)
    one_error(code, err, "give a model")


def test_latency_without_an_estimate_names_the_fix() -> None:
    numbers = ModelNumbers(dims={"batch": 1}, mode="inference", peak_bytes=1,
                           activation_peak_bytes=1, params=1, flops=1,
                           latency_missing_reason="give --gpu NAME")
    with pytest.raises(GraphmemError, match="--max-latency needs a latency estimate: give --gpu"):
        evaluate(numbers, Budgets(max_latency_s=0.02))


# ----- baselines --------------------------------------------------------------------------


def write_baseline(mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                   *flags: str) -> Path:
    path = tmp_path / "baseline.json"
    assert main(["analyze", str(mlp), "--no-html", "--json", str(path), *flags]) == 0
    capsys.readouterr()
    return path


@pytest.mark.ort
def test_baseline_growth_passes_and_fails(mlp: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(mlp, tmp_path, capsys, "--batch", "32")
    code, out, _ = run(["check", str(mlp), "--batch", "32", "--baseline", str(baseline),
                        "--max-growth", "0%"], capsys)
    assert code == 0
    assert budget_lines(out) == {"peak memory growth": "PASS", "parameters growth": "PASS",
                                 "FLOPs growth": "PASS"}
    # the baseline's peak was 10% smaller: +11.1% growth breaks 5%, holds 12%
    data = json.loads(baseline.read_text())
    data["memory"]["peak_bytes"] = int(PEAK * 0.9)
    baseline.write_text(json.dumps(data))
    code, out, _ = run(["check", str(mlp), "--batch", "32", "--baseline", str(baseline),
                        "--max-growth", "5%"], capsys)
    assert code == 1 and budget_lines(out)["peak memory growth"] == "FAIL"
    assert "+11.11%" in out
    code, _, _ = run(["check", str(mlp), "--batch", "32", "--baseline", str(baseline),
                      "--max-growth", "12%"], capsys)
    assert code == 0


def test_a_check_json_is_a_baseline(mlp: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "first.json"
    assert run(["check", str(mlp), "--batch", "32", "--max-params", "1M", "--json",
                str(first)], capsys)[0] == 0
    code, _, _ = run(["check", str(mlp), "--batch", "32", "--baseline", str(first),
                      "--max-growth", "0%"], capsys)
    assert code == 0


@pytest.mark.parametrize(("edit", "fragment"), [
    (lambda d: d.update(schema_version=2), "schema_version 2"),
    (lambda d: d["dims"].update(bound={"batch": 16}), "analyzed at batch=16"),
    (lambda d: d.pop("memory"), "lacks the field"),
])
@pytest.mark.ort
def test_bad_baselines_exit_2(mlp: Path, tmp_path: Path, edit: object, fragment: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(mlp, tmp_path, capsys, "--batch", "32")
    data = json.loads(baseline.read_text())
    edit(data)  # type: ignore[operator]
    baseline.write_text(json.dumps(data))
    code, _, err = run(["check", str(mlp), "--batch", "32", "--baseline", str(baseline),
                        "--max-growth", "5%"], capsys)
    one_error(code, err, fragment)


def test_baseline_with_unbound_dims_exit_2(mlp: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(mlp, tmp_path, capsys)  # batch left free: formulas
    code, _, err = run(["check", str(mlp), "--batch", "32", "--baseline", str(baseline),
                        "--max-growth", "5%"], capsys)
    one_error(code, err, "unbound dims (batch)", "--batch/--dim")


def test_baseline_not_json_or_missing(mlp: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run(["check", str(mlp), "--batch", "32", "--baseline", str(bad),
                        "--max-growth", "5%"], capsys)
    one_error(code, err, "not a graphmem JSON")
    code, _, err = run(["check", str(mlp), "--batch", "32", "--baseline",
                        str(tmp_path / "none.json"), "--max-growth", "5%"], capsys)
    one_error(code, err, "does not exist")
    code, _, err = run(["check", str(mlp), "--batch", "32", "--baseline", str(bad)], capsys)
    one_error(code, err, "needs --max-growth")


# ----- budgets file -----------------------------------------------------------------------


def write_budgets(folder: Path, text: str) -> Path:
    models = folder / "models"
    models.mkdir(exist_ok=True)
    onnx.save(mlp_model(), models / "small.onnx")
    onnx.save(mlp_model(hidden=512), models / "big.onnx")
    path = folder / "graphmem.toml"
    path.write_text(text)
    return path


TWO_MODELS = """
[defaults]
gpu = "t4"
batch = 32
max_memory = "90%"
fail_on_unsupported = true

[[model]]
path = "models/small.onnx"
max_params = "3k"

[[model]]
name = "big-mlp"
path = "models/big.onnx"
max_params = 3000          # 32*512 + 512 + 512*10 = 22016 parameters: fails
"""


def test_budgets_file_checks_every_model(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    toml = write_budgets(tmp_path, TWO_MODELS)
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    out_json = tmp_path / "out" / "check.json"
    code, out, _ = run(["check", "--budgets", str(toml), "--junit", str(junit), "--json",
                        str(out_json)], capsys)
    assert code == 1
    assert "small (" in out and "big-mlp (" in out
    assert "big-mlp: parameters" in out  # the verdict names the broken budget
    result = json.loads(out_json.read_text())
    assert [m["passed"] for m in result["models"]] == [True, False]
    assert result["failure_count"] == 1 and result["budget_count"] == 6
    assert result["models"][1]["analysis"]["params"]["count"] == 22016
    assert_junit(junit, tests=6, failures=1, failed=[("big-mlp", "parameters")])


def test_budgets_file_passes_when_all_hold(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    toml = write_budgets(tmp_path, TWO_MODELS.replace("max_params = 3000", "max_params = false"))
    code, out, _ = run(["check", "--budgets", str(toml)], capsys)
    assert code == 0 and "PASSED: 5 budgets hold (2 models)" in out


@pytest.mark.parametrize(("text", "fragment"), [
    ("[[model]]\npath = 'models/small.onnx'\nbatch = 32\nmax_paramz = 5\n",
     "unknown key 'max_paramz'; did you mean 'max_params'?"),
    ("[defaults]\nbatch = 32\n", "lists no model"),
    ("[[model]]\nbatch = 32\n", "needs path"),
    ("[[model]]\npath = 'models/small.onnx'\nbatch = '32'\nmax_params = 5\n",
     "batch = '32' should be a int"),
    ("[[model]]\npath = 'models/small.onnx'\nbatch = 32\nmax_latency = 'soon'\n",
     "max_latency: 'soon' is not a duration"),
    ("[[model]\n", "not valid TOML"),
    ("[[model]]\npath = 'models/missing.onnx'\nbatch = 32\nmax_params = 5\n", "missing.onnx"),
])
def test_budgets_file_errors_exit_2(tmp_path: Path, text: str, fragment: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    toml = write_budgets(tmp_path, text)
    code, _, err = run(["check", "--budgets", str(toml)], capsys)
    one_error(code, err, fragment)


def test_budgets_file_excludes_model_flags(mlp: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    toml = write_budgets(tmp_path, TWO_MODELS)
    code, _, err = run(["check", "--budgets", str(toml), "--batch", "8"], capsys)
    one_error(code, err, "put --batch in the file")
    code, _, err = run(["check", str(mlp), "--budgets", str(toml)], capsys)
    one_error(code, err, "checks the models the file lists")


# ----- outputs ----------------------------------------------------------------------------


def assert_junit(path: Path, tests: int, failures: int, failed: list[tuple[str, str]]) -> None:
    """The usual JUnit structure: testsuites > testsuite > testcase (> failure), counts agree."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    cases = suite.findall("testcase")
    for element in (root, suite):
        assert int(element.get("tests", "-1")) == tests == len(cases)
        assert int(element.get("failures", "-1")) == failures
        assert int(element.get("errors", "-1")) == 0
        assert float(element.get("time", "-1")) >= 0
    assert suite.get("name") and suite.get("timestamp")
    broken = []
    for case in cases:
        assert case.get("classname") and case.get("name") and float(case.get("time", "-1")) >= 0
        assert set(child.tag for child in case) <= {"failure"}
        for failure in case.findall("failure"):
            assert failure.get("message") and failure.text
            broken.append((case.get("classname"), case.get("name")))
    assert broken == failed


def test_junit_and_json_outputs(mlp: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    junit, out_json = tmp_path / "r.xml", tmp_path / "r.json"
    code, _, _ = run(["check", str(mlp), "--gpu", "t4", "--batch", "32", "--max-params", "100",
                      "--max-flops", "1G", "--junit", str(junit), "--json", str(out_json)],
                     capsys)
    assert code == 1
    assert_junit(junit, tests=3, failures=1, failed=[("mlp", "parameters")])
    result = json.loads(out_json.read_text())
    assert result["schema_version"] == 1 and result["passed"] is False
    assert result["exit_code"] == 1
    budgets = {b["name"]: b for b in result["models"][0]["budgets"]}
    assert budgets["parameters"] == {"name": "parameters", "value": PARAMS, "limit": 100,
                                     "unit": "params", "passed": False,
                                     "message": budgets["parameters"]["message"]}
    assert budgets["FLOPs"]["value"] == FLOPS and budgets["FLOPs"]["passed"] is True
    assert result["models"][0]["analysis"]["memory"]["peak_bytes"] == PEAK


def test_json_on_stdout(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["check", str(mlp), "--batch", "32", "--max-params", "1M", "--json",
                          "-"], capsys)
    assert code == 0
    assert json.loads(out)["passed"] is True
    assert "PASS" in err  # the summary moves to stderr


def test_outputs_never_overwrite_inputs(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check", str(mlp), "--batch", "32", "--max-params", "1M", "--junit",
                        str(mlp)], capsys)
    one_error(code, err, "is an input of the check")


# ----- parsing ----------------------------------------------------------------------------


def test_budget_parsers() -> None:
    assert parse_memory_limit("90%") == MemoryLimit("90%", fraction=0.9)
    assert parse_memory_limit("12GiB").bytes == 12 * 2**30
    assert parse_memory_limit("1.5 GB").bytes == 1_500_000_000
    assert parse_latency_s("20ms") == pytest.approx(0.02)
    assert parse_latency_s("800us") == pytest.approx(8e-4)
    assert parse_count("25M") == 25_000_000 and parse_count("1.5B") == 1_500_000_000
    assert parse_count("4.1e9") == 4_100_000_000 and parse_count("4.1GFLOPs") == 4_100_000_000
    assert parse_count("25_000_000") == 25_000_000
    assert parse_percent("5%") == pytest.approx(0.05)
    for parse, text in ((parse_percent, "5"), (parse_latency_s, "20"), (parse_count, "lots")):
        with pytest.raises(SpecError):
            parse(text)


def test_growth_from_zero_is_infinite_and_fails() -> None:
    from graphmem.gate.budgets import Baseline

    numbers = ModelNumbers(dims={}, mode="inference", peak_bytes=10, activation_peak_bytes=10,
                           params=5, flops=0)
    baseline = Baseline("b.json", {}, "inference", peak_bytes=10, params=0, flops=0)
    results = {r.name: r for r in evaluate(numbers, Budgets(max_growth=0.05, baseline=baseline))}
    assert results["parameters growth"].passed is False
    assert math.isinf(results["parameters growth"].value)
    assert results["FLOPs growth"].passed and results["peak memory growth"].passed
