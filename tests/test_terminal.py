"""The terminal summary leads with the answer: the model's file, the verdict, where the memory
goes, what to change; the rest behind --verbose; 80 columns without a broken word."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

import graphmem
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from graphmem.passes.fit import DevicePart, FitPart
from graphmem.report.terminal.formulas import count_text, peak_text, size_text
from graphmem.report.terminal.summary import VERBOSE_HINT, print_summary, summary_text
from tests.helpers.cli import Run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
WIDTH = 80
DEFAULT_MAX_LINES = 20
_BOX = re.compile(r"[\u2500-\u257f]")  # rich's table borders


def render(result: object, verbose: bool = False, width: int = WIDTH) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False,
                      emoji=False)
    print_summary(result, console, verbose)  # type: ignore[arg-type]
    return buffer.getvalue()


def words(text: str) -> set[str]:
    return set(_BOX.sub(" ", text).split())


@pytest.fixture(scope="module")
def cnn() -> graphmem.Result:
    return graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, gpu="t4")


@pytest.fixture(scope="module")
def gpt_free() -> graphmem.Result:
    """Batch and seq left free: every size is a formula."""
    return graphmem.analyze_onnx(SAMPLES / "tiny_gpt.onnx", gpu="t4")


def test_first_line_names_the_file_not_the_graph(cnn: graphmem.Result) -> None:
    first = render(cnn).splitlines()[0]
    assert first.startswith("tiny_cnn.onnx · ONNX · inference · batch=2")
    assert cnn.model.name not in first.split(" · ")[0]  # the ONNX graph's own name


def test_verdict_line_agrees_with_the_json(cnn: graphmem.Result) -> None:
    gpu = cnn.to_dict()["gpu"]
    verdict = render(cnn).splitlines()[1]
    # fits: the device total against the GPU's memory, its share, the largest batch
    assert verdict.startswith("fits on NVIDIA Tesla T4: ") and gpu["fits"] is True
    needs = f"{format_bytes(gpu['required_bytes'])} of {format_bytes(gpu['memory_bytes'])}"
    assert needs in verdict
    assert f"({gpu['utilization']:.1%})" in verdict
    assert f"max batch {gpu['max_batch']:,}" in verdict


def test_does_not_fit_says_by_how_much_and_what_to_change(cnn: graphmem.Result) -> None:
    # a CUDA context larger than the GPU: nothing fits; "over" is required - capacity
    result = graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, gpu="t4",
                                   cuda_reserve_bytes=16 << 30)
    gpu = result.to_dict()["gpu"]
    lines = render(result).splitlines()
    assert gpu["fits"] is False
    over = format_bytes(gpu["required_bytes"] - gpu["memory_bytes"])
    assert lines[1] == (f"does NOT fit on NVIDIA Tesla T4: {format_bytes(gpu['required_bytes'])}"
                        f" of {format_bytes(gpu['memory_bytes'])} ({gpu['utilization']:.1%},"
                        f" {over} over)")
    # an inference graph's levers, not a training step's (checkpointing, AMP were offered)
    assert ("to save memory: run with --suggest (in-place ops, pooled FC heads, grouped convs)"
            in " ".join(" ".join(lines).split()))  # the line wraps at the console's width


def test_memory_block_lists_the_device_total_parts_and_roles(cnn: graphmem.Result) -> None:
    text = render(cnn)
    memory = cnn.to_dict()["memory"]
    parts = memory["device_total_parts"]
    for label, key in (("activations at its peak", "tensors_at_peak_bytes"),
                       ("allocator overhead", "allocator_overhead_bytes")):
        assert re.search(rf"{label} +{re.escape(format_bytes(parts[key]))}\n", text)
    for role, size in memory["breakdown"].items():
        assert re.search(rf"{role.replace('_', ' ')} +{re.escape(format_bytes(size))}\n", text)
    assert re.search(rf"live tensors at the peak +{re.escape(format_bytes(memory['peak_bytes']))}",
                     text)


def test_default_view_is_short_and_points_to_verbose(cnn: graphmem.Result,
                                                     gpt_free: graphmem.Result) -> None:
    for result in (cnn, gpt_free):
        lines = render(result).splitlines()
        assert len(lines) <= DEFAULT_MAX_LINES, "\n".join(lines)
        assert lines[-1] == VERBOSE_HINT
        assert "arena plan" not in "\n".join(lines)


@pytest.mark.parametrize("verbose", [False, True])
def test_eighty_columns_never_break_a_word(cnn: graphmem.Result, gpt_free: graphmem.Result,
                                           verbose: bool) -> None:
    for result in (cnn, gpt_free):
        narrow = render(result, verbose)
        wide = words(render(result, verbose, width=400))
        assert max(map(len, narrow.splitlines())) <= WIDTH
        broken = [w for w in words(narrow) if w not in wide and "\u2026" not in w]
        assert not broken, broken  # a word cut by a wrap is in no line of the wide render


def test_free_dims_never_print_the_whole_max(gpt_free: graphmem.Result) -> None:
    for verbose in (False, True):
        text = render(gpt_free, verbose)
        assert "max(" not in text and "*" not in text  # `·` between factors, never `*`
    assert "fit on NVIDIA Tesla T4 (15.0 GiB) depends on batch, seq" in render(gpt_free)


def test_verbose_glosses_each_term_once(cnn: graphmem.Result) -> None:
    text = render(cnn, verbose=True)
    for gloss in ("lower bound: no execution order can use less",
                  "arena plan: how the runtime packs tensors into reusable blocks",
                  "roofline: a time lower bound from the GPU's datasheet peaks"):
        assert text.count(gloss) == 1, gloss
    assert text.index("arena plan: how") < text.index("arena plan (model order")
    assert VERBOSE_HINT not in text


def test_long_names_are_shortened_in_the_middle(cnn: graphmem.Result) -> None:
    long = "/encoder/" + "block/" * 30 + "attention/MatMul"
    live = cnn.liveness
    tensor = replace(live.live_at_peak[0], name=long, producer="node")
    result = replace(cnn, liveness=replace(live, live_at_peak=(tensor,)))
    row = next(line for line in render(result, True).splitlines() if "/encoder/" in line)
    assert "\u2026" in row and len(row) <= WIDTH
    name = row.split("│")[1].strip()
    assert name.startswith("/encoder/block/") and name.endswith("Mul")


def test_formulas_put_the_coefficient_first() -> None:
    seq, batch = SymInt.symbol("seq"), SymInt.symbol("batch")
    # seq² / 12: a fraction is a decimal coefficient, never `/ 12`; 1 / 12 = 0.0833
    assert count_text((seq * seq).scaled(1, 12), "FLOP") == "0.0833 FLOP·seq²"
    assert count_text(seq * seq * 12, "FLOP") == "12 FLOP·seq²"
    # 2 * 4096 = 8,192 B per batch·seq; constant first
    assert size_text(batch * seq * 8192 + 1024) == "1.0 KiB + 8.0 KiB·batch·seq"
    # the larger of 100·seq + 1 KiB and seq², per range of seq: s² > 100·s + 1024 from
    # s = 110 (110² = 12,100 > 12,024; 109² = 11,881 < 11,924)
    text = peak_text((seq * 100 + 1024, seq * seq))
    assert text == "1.0 KiB + 100 B·seq up to seq=109; above that 1 B·seq² (from seq=110)"


def test_repr_shows_the_terminal_first_lines(cnn: graphmem.Result, run: Run,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    code, out, _ = run("analyze", SAMPLES / "tiny_cnn.onnx", "--batch", "2", "--gpu", "t4",
                       "--no-html")
    assert code == 0
    lines = repr(cnn).splitlines()
    assert lines == out.splitlines()[:len(lines)]
    assert lines[1].startswith("fits on NVIDIA Tesla T4")
    assert summary_text(cnn) == repr(cnn) == str(cnn)
    html = cnn._repr_html_()
    assert "tiny_cnn.onnx" in html and "<pre" in html and "fits" in html


def test_cli_verbose_flag(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    args = ("analyze", SAMPLES / "tiny_cnn.onnx", "--batch", "2", "--gpu", "t4", "--no-html")
    _, short, _ = run(*args)
    code, long, _ = run(*args, "--verbose")
    assert code == 0
    assert long.startswith(short.removesuffix(f"{VERBOSE_HINT}\n"))
    for section in ("by module", "schedule:", "arena plan (", "roofline on", "max batch on",
                    "runtime: onnxruntime CUDA"):
        assert section in long and section not in short


def test_the_gpu_block_names_the_verdicts_basis(cnn: graphmem.Result) -> None:
    # under --serve the verdict is the serving plan's (graphmem/distributed/serving.py)
    assert cnn.fit is not None
    parts = (FitPart(DevicePart.WEIGHTS, SymInt.const(3 << 30)),)
    fit = replace(cnn.fit, runtime=None, basis="serving plan: one 8,192-token sequence",
                  parts=parts)
    text = render(replace(cnn, fit=fit))
    assert "on the GPU (serving plan)" in text and re.search(r"weights \(per GPU\) +3\.0 GiB", text)
    assert "on the GPU (onnxruntime model)" in render(cnn)


def test_notes_are_behind_verbose_and_warnings_stay(cnn: graphmem.Result) -> None:
    model = replace(cnn.model, warnings=("shapes were guessed",),
                    notes=("built from a config, no weights read",))
    result = replace(cnn, model=model)
    short, long = render(result), render(result, verbose=True)
    assert "warning: shapes were guessed" in short
    assert "no weights read" not in short
    assert "note: built from a config, no weights read" in long


@pytest.mark.ort
def test_without_a_gpu_the_runtime_on_this_machine_is_the_block() -> None:
    result = graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=8, runtime="ort-cpu")
    memory = result.to_dict()["memory"]
    lines = render(result).splitlines()
    assert lines[1].startswith("no GPU given: add --gpu NAME")
    total = format_bytes(memory["device_total_bytes"])
    assert re.fullmatch(rf"in the process \(onnxruntime CPU model\) +{re.escape(total)}",
                        lines[2].rstrip())


def test_free_batch_verdict_reads_the_max_batch_search() -> None:
    relu = graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", gpu="t4")  # batch left free
    search = relu.to_dict()["gpu"]["max_batch_detail"]
    verdict = render(relu).splitlines()[1]
    assert verdict == (f"fits on NVIDIA Tesla T4 up to batch={relu.to_dict()['gpu']['max_batch']:,}"
                       f" ({format_bytes(search['at_max_bytes'])} of"
                       f" {format_bytes(search['limit_bytes'])} there)")
    # not even batch 1 fits: a context as large as the GPU
    none = graphmem.analyze_onnx(SAMPLES / "tiny_cnn.onnx", gpu="t4", cuda_reserve_bytes=16 << 30)
    assert render(none).splitlines()[1].startswith(
        "does NOT fit on NVIDIA Tesla T4 even at batch=1 (")


@pytest.mark.torch
@pytest.mark.slow
def test_a_step_traced_for_a_gpu_says_which_kernels_it_assumed() -> None:
    # the same KernelChoice tuple the JSON writes under model.kernels, one "op kernel" each
    from tests.torch_models.small import TinyGPT

    result = graphmem.analyze(TinyGPT(), ["2x16:int64"], train=True, gpu="h100-sxm")
    text = render(result)
    kinds = [f"{k.op} {k.kernel}" for k in result.model.kernels]
    assert kinds and f"CUDA kernels assumed: {' · '.join(dict.fromkeys(kinds))}" in text
    cpu = graphmem.analyze(TinyGPT(), ["2x16:int64"], train=True)
    assert cpu.model.kernels == () and "CUDA kernels" not in render(cpu)


def test_count_noun_agrees_in_number() -> None:
    from graphmem.core.units import count_noun

    assert count_noun(1, "view") == "1 view"
    assert count_noun(0, "view") == "0 views"
    assert count_noun(1024, "budget") == "1,024 budgets"
    assert count_noun(2, "child", "children") == "2 children"


@pytest.mark.slow
@pytest.mark.torch
def test_the_top_level_module_row_is_explained(tmp_path: Path, run: Run) -> None:
    """A `(top level)` row of 11.7 GiB stood in the module tables with no word on what it is:
    a training step's loss, gradients and optimizer update sit outside every module."""
    html = tmp_path / "r.html"
    models = Path(__file__).parent / "models.py"
    code, out, err = run("analyze", f"{models}:tiny_gpt", "--input", "2x16:int64", "--train",
                         "--verbose", "--html", html)
    text = " ".join(out.split())
    assert code == 0 and "(top level) " in text, err
    assert "(top level): ops outside every module" in text
    assert "holds the ops outside every module" in " ".join(html.read_text().split())
