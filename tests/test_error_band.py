"""The measured error band on every verdict (graphmem/devices/data/error_bands.toml), "tight",
and `graphmem check --margin`."""

from __future__ import annotations

import html
import io
import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from rich.console import Console

import graphmem
from graphmem.core.symbolic import SymInt
from graphmem.devices.error_bands import (
    PATHS,
    ErrorBandTableError,
    error_band,
    load_error_bands,
    parse_error_bands,
)
from graphmem.devices.gpus import find_gpu
from graphmem.gate.budgets import Budgets, ModelNumbers, SpecError, evaluate
from graphmem.gate.margin import parse_margin
from graphmem.passes.fit import GpuFit, default_cuda_reserve, fit_on_device_total, with_error_band
from graphmem.report.error_band import range_text, tight_text
from graphmem.report.terminal.summary import print_summary
from tests.helpers.cli import Run

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
TINY_GPT = "tests/torch_models/small.py:build_tiny_gpt"
DATA = ROOT / "graphmem" / "devices" / "data" / "error_bands.toml"


# ----- the data file ----------------------------------------------------------------------
def test_every_band_names_a_results_file_that_prints_its_rows() -> None:
    bands = load_error_bands()
    assert set(bands) == set(PATHS)
    for band in bands.values():
        if not band.measured:
            assert band.reason and band.low is None and band.gpu is None
            continue
        source = ROOT / band.source
        assert source.is_file(), band.source
        lines = source.read_text(encoding="utf-8").splitlines()
        assert band.gpu is not None and band.date is not None
        assert any("H100" in line and band.date.isoformat() in line for line in lines)
        for row in (band.low, band.high):
            assert row is not None
            # the row's prediction, measurement and error, as the file prints them, on one line
            cells = (f"{row.predicted_bytes:,}", f"{row.measured_bytes:,}",
                     f"{float(row.error) * 100:+.2f}%")
            assert any(all(cell in line for cell in cells) for line in lines), (band.path, cells)
        assert band.low_fraction is not None and band.high_fraction is not None
        assert band.low_fraction <= 0 <= band.high_fraction


def test_the_docs_state_the_bands_of_the_data_file() -> None:
    accounting = (ROOT / "docs" / "accounting.md").read_text(encoding="utf-8")
    for band in load_error_bands().values():
        assert f"| {range_text(band)} |" in accounting, band.path
    assert range_text(error_band("torch-cuda-inference")).endswith(" to 0%")


def test_ort_cuda_and_serving_were_never_measured() -> None:
    assert not error_band("ort-cuda").measured
    assert not error_band("serving").measured
    assert all(error_band(path).measured
               for path in ("torch-cuda-training", "torch-cuda-inference", "per-rank"))


@pytest.mark.parametrize(("old", "new", "says"), [
    ('path = "serving"', 'path = "servng"', "is not one of"),
    ("predicted = 1_589_760", "predicted = 0", "bytes > 0"),
    ('source = "benchmarks/results/distributed_h100.md"', 'source = "../x.md"', "should be a file"),
    ('gpu = "h100-sxm"', 'gpu = "h100-sxm"\nextra = 1', "unknown keys ['extra']"),
    # a band whose low row was predicted high does not contain 0
    ("measured = 30_162_944", "measured = 3_016_294", "low's error should be <= 0"),
])
def test_a_malformed_file_is_refused_naming_the_band(old: str, new: str, says: str) -> None:
    text = DATA.read_text(encoding="utf-8")
    assert old in text
    with pytest.raises(ErrorBandTableError, match=r"error_bands\.toml") as error:
        parse_error_bands(text.replace(old, new, 1), "error_bands.toml")
    assert says in str(error.value)


# ----- tight, from the band ---------------------------------------------------------------
def _fit(device_total: int) -> GpuFit:
    gpu = find_gpu("t4")
    fit = fit_on_device_total(gpu, default_cuda_reserve(gpu.architecture), device_total,
                              SymInt.const(0), "torch-cuda", ())
    return with_error_band(fit, error_band("torch-cuda-training"))


def test_tight_is_where_the_band_spans_the_capacity() -> None:
    band = error_band("torch-cuda-training")
    assert band.low is not None and band.high is not None
    capacity = find_gpu("t4").capacity_bytes
    # low row: ConvNet bf16, 13,372,000 predicted for 30,162,944 measured: the demand can be
    # the device total x 30,162,944 / 13,372,000 (2.2557x). At or below
    # capacity x 13,372,000 / 30,162,944 (44.3% of it) even that fits: plainly "fits".
    fits_plainly = capacity * band.low.predicted_bytes // band.low.measured_bytes
    assert fits_plainly * band.low.measured_bytes <= capacity * band.low.predicted_bytes
    assert _fit(fits_plainly).verdict == "fits" and _fit(fits_plainly).tight is False
    assert _fit(fits_plainly + 1).verdict == "tight" and _fit(fits_plainly + 1).fits is True
    assert _fit(capacity).verdict == "tight"  # fits stays device total <= capacity
    # over the capacity: high row, Llama bf16, 8,195,112 predicted for 7,688,704 measured: the
    # demand can be as low as the total x 7,688,704 / 8,195,112. Above
    # capacity x 8,195,112 / 7,688,704 (+6.6%) even that does not fit.
    no_fit = capacity * band.high.predicted_bytes // band.high.measured_bytes
    assert _fit(capacity + 1).fits is False and _fit(capacity + 1).verdict == "tight"
    assert _fit(no_fit).verdict == "tight"
    assert _fit(no_fit + 1).verdict == "does not fit" and _fit(no_fit + 1).tight is False


def test_an_unmeasured_band_is_never_tight() -> None:
    gpu = find_gpu("t4")
    fit = fit_on_device_total(gpu, default_cuda_reserve(gpu.architecture), gpu.capacity_bytes,
                              SymInt.const(0), "ort-cuda", ())
    fit = with_error_band(fit, error_band("ort-cuda"))
    assert fit.tight is None and fit.verdict == "fits" and tight_text(fit) == ""
    assert range_text(error_band("ort-cuda")) == "unmeasured"


# ----- the reports --------------------------------------------------------------------------
def _terminal(result: graphmem.Result, verbose: bool = False) -> str:
    buffer = io.StringIO()
    print_summary(result, Console(file=buffer, width=400, color_system=None, highlight=False,
                                  emoji=False), verbose)
    return buffer.getvalue()


def _html(result: graphmem.Result, tmp_path: Path) -> str:
    page = tmp_path / "report.html"
    result.to_html(page)
    return html.unescape(page.read_text(encoding="utf-8"))


def test_ort_cuda_says_unmeasured_everywhere(tmp_path: Path) -> None:
    result = graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, gpu="t4")
    gpu = result.to_dict()["gpu"]
    band = gpu["error_band"]
    assert band["path"] == "ort-cuda" and band["measured"] is False
    assert band["low"] is None and band["high"] is None and band["gpu"] is None
    assert gpu["verdict"] == "fits" and gpu["tight"] is None
    terminal = _terminal(result, verbose=True)
    # --verbose states the band always (the answer's row only where it can change the
    # reading: tight, or close to the capacity on an unmeasured path)
    assert "error band" in terminal.lower() and "unmeasured" in terminal
    assert band["text"] in terminal
    assert band["text"] in _html(result, tmp_path)


@pytest.fixture(scope="module")
def near_capacity() -> graphmem.Result:
    """TinyGPT's Adam step on a T4, the CUDA reserve set so that the device total is 1 MiB
    below the T4's memory: fits, within the band."""
    plain = graphmem.analyze_torch(TINY_GPT, ["8x64:int64"], train=True, gpu="t4")
    assert plain.fit is not None
    rest = int(plain.fit.required_bytes) - plain.fit.reserve.bytes  # all but the context
    reserve = plain.fit.capacity_bytes - rest - (1 << 20)
    return graphmem.analyze_torch(TINY_GPT, ["8x64:int64"], train=True, gpu="t4",
                                  cuda_reserve_bytes=reserve)


@pytest.mark.torch
def test_far_below_the_capacity_a_training_step_fits_plainly() -> None:
    result = graphmem.analyze_torch(TINY_GPT, ["8x64:int64"], train=True, gpu="t4")
    assert result.fit is not None and result.fit.error_band is not None
    assert result.fit.error_band.path == "torch-cuda-training"
    # 0.7 GiB of device total x 2.2557 (the band's low edge) is far below the T4's 15 GiB
    assert result.fit.tight is False and result.fit.verdict == "fits"
    assert "tight" not in _terminal(result).splitlines()[1]


@pytest.mark.torch
def test_terminal_json_and_html_agree_on_a_tight_verdict(near_capacity: graphmem.Result,
                                                        tmp_path: Path) -> None:
    fit = near_capacity.fit
    assert fit is not None and fit.error_band is not None
    assert fit.capacity_bytes - int(fit.required_bytes) == 1 << 20
    assert fit.fits is True and fit.tight is True and fit.verdict == "tight"
    gpu = json.loads(json.dumps(near_capacity.to_dict()))["gpu"]
    band = gpu["error_band"]
    assert gpu["verdict"] == "tight" and gpu["tight"] is True and gpu["fits"] is True
    assert band["measured"] is True and band["gpu"] == "h100-sxm"
    assert band["source"] == "benchmarks/results/torch_accuracy.md"
    assert band["low"] == float(fit.error_band.low_fraction or 0) < 0 < band["high"]
    verdict = _terminal(near_capacity).splitlines()[1]
    words = tight_text(fit)
    assert verdict.startswith("fits on NVIDIA Tesla T4: ") and words in verdict
    assert "-55.7% to +6.6%" in words and "torch-cuda training" in words
    page = _html(near_capacity, tmp_path)
    assert words in page and band["text"] in page


def test_serving_says_unmeasured(tmp_path: Path) -> None:
    import onnx

    from tests.helpers.decoders import decoder_with_past

    path = tmp_path / "decoder.onnx"
    onnx.save(decoder_with_past(), str(path))
    result = graphmem.analyze_onnx(path, gpu="t4", serve=True, context=1000, plan=False)
    band = result.to_dict()["gpu"]["error_band"]
    assert band["path"] == "serving" and band["measured"] is False
    assert result.fit is not None and result.fit.tight is None


@pytest.mark.torch
def test_a_distributed_verdict_carries_the_per_rank_band(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "ddp.json"
    code, _, err = run("analyze", "tests/models.py:tiny_gpt", "--input", "2x16:int64", "--train",
                       "--gpus", "4", "--strategy", "ddp", "--gpu", "t4", "--no-html",
                       "--json", out)
    assert code == 0, err
    gpu = json.loads(out.read_text(encoding="utf-8"))["gpu"]
    band = gpu["error_band"]
    assert gpu["basis"] == "ddp per-GPU device total"
    assert band["path"] == "per-rank" and band["measured"] is True
    assert band["source"] == "benchmarks/results/distributed_h100.md"
    assert gpu["verdict"] == "fits" and gpu["tight"] is False


# ----- --margin -----------------------------------------------------------------------------
def _numbers(device_total: int, capacity: int) -> ModelNumbers:
    return ModelNumbers(dims={}, mode="inference", peak_bytes=0, activation_peak_bytes=0,
                        params=0, flops=0, gpu_name="t4", device_total_bytes=device_total,
                        capacity_bytes=capacity, memory_basis="ort-cuda device total")


def test_a_margin_holds_at_its_exact_boundary_and_not_a_byte_over() -> None:
    margin = parse_margin("10%")
    assert margin.percent == 10
    # 10% over 1,000,000,000 B is 1,100,000,000 B: a GPU of exactly that passes
    (result,) = evaluate(_numbers(1_000_000_000, 1_100_000_000), Budgets(margin=margin))
    assert result.passed and result.value == result.limit == 1_100_000_000
    (result,) = evaluate(_numbers(1_000_000_001, 1_100_000_000), Budgets(margin=margin))
    assert not result.passed  # 1,100,000,001.1 B needed
    # 12.5% is exact (25/2), never a float rounded: 8 x 1.125 = 9
    (result,) = evaluate(_numbers(8, 9), Budgets(margin=parse_margin("12.5%")))
    assert result.passed
    (result,) = evaluate(_numbers(9, 10), Budgets(margin=parse_margin("12.5%")))
    assert not result.passed  # 10.125 B needed


@pytest.mark.parametrize("text", ["10", "0.1", "-5%", "ten%", "2000%"])
def test_a_margin_needs_a_percentage(text: str) -> None:
    with pytest.raises(SpecError):
        parse_margin(text)


def _sample_check(margin: str, capacity_slack: int) -> bool:
    """tiny_cnn on a T4 with the reserve set so that the device total x (1 + margin) is the
    T4's memory plus `capacity_slack` bytes short (negative: over)."""
    plain = graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, gpu="t4")
    assert plain.fit is not None
    rest = int(plain.fit.required_bytes) - plain.fit.reserve.bytes
    share = 1 + Fraction(parse_margin(margin).percent, 100)
    total = int(plain.fit.capacity_bytes / share) - capacity_slack
    report = graphmem.check_model(SAMPLES / "tiny_cnn.onnx", gpu="t4", batch=2, margin=margin,
                                  cuda_reserve_bytes=total - rest)
    (model,) = report.models
    headroom = next(r for r in model.results if r.name == "headroom")
    assert model.analysis.fit is not None and int(model.analysis.fit.required_bytes) == total
    return headroom.passed


def test_check_model_margin_at_the_boundary() -> None:
    # 25%: the device total x 5/4; a total of capacity x 4/5 (an integer: T4's capacity is
    # a multiple of 5) passes, one byte more fails
    assert find_gpu("t4").capacity_bytes % 5 == 0
    assert _sample_check("25%", 0)
    assert not _sample_check("25%", -1)


def test_the_command_line_and_the_budgets_file_take_a_margin(tmp_path: Path, run: Run) -> None:
    code, out, _ = run("check", SAMPLES / "tiny_cnn.onnx", "--gpu", "t4", "--batch", "2",
                       "--margin", "10%")
    assert code == 0 and "headroom" in out
    code, _, err = run("check", SAMPLES / "tiny_cnn.onnx", "--batch", "2", "--margin", "10%")
    assert code == 2 and "--margin 10% is headroom on a GPU: give --gpu NAME" in err
    budgets = tmp_path / "graphmem.toml"
    budgets.write_text(f"[defaults]\ngpu = 't4'\nbatch = 2\nmargin = '1000%'\n[[model]]\n"
                       f"path = '{SAMPLES / 'tiny_cnn.onnx'}'\n", encoding="utf-8")
    code, out, _ = run("check", "--budgets", budgets)
    # 696 MiB x 11 is 7.5 GiB: within the T4's 15 GiB
    assert code == 0 and "+ 1000% =" in out
    spec = replace(Budgets(), margin=parse_margin("1000%"))
    assert not spec.is_empty


def test_the_answers_band_row_shows_only_where_it_can_change_the_reading() -> None:
    # tiny_cnn on a T4 at batch 2: 4.5% of the GPU on the unmeasured ort-cuda path: no row
    far = graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, gpu="t4")
    assert "error band" not in _terminal(far, verbose=False)
    # the same path within 90% of the GPU: the unmeasured error could change the answer
    close = graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, gpu="t4",
                                  cuda_reserve_bytes=int(0.95 * find_gpu("t4").capacity_bytes))
    assert close.fit.utilization >= 0.9
    assert "error band" in _terminal(close, verbose=False)
