"""One label per number: the device total's parts carry the same words in the terminal, the JSON
and the HTML, all read from graphmem/report/words.py.

The failing case the design review found (2026-11-28, section 4.5): tiny_gpt at batch 2, seq 64
on a T4 showed its 416.1 KiB of onnxruntime tensors as "activations at its peak" in the answer
and the GPU card and as "tensors at peak" in the runtime table and card; its 680.8 KiB of weights
and inputs as "weights + inputs" and "+ weights and inputs". Here every size of a part, found
next to a label in each report, must have one label, and it is the label of the part's code.
"""

from __future__ import annotations

import html
import io
import re

import pytest
from rich.console import Console

import graphmem
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from graphmem.passes.fit import Caveat, DevicePart, FitPart, KvPool, Split, WeightsApart
from graphmem.pipeline.device_total import runtime_parts
from graphmem.report.html.page import render_html
from graphmem.report.terminal.summary import print_summary
from graphmem.report.words import (
    ACTIVATIONS_AT_PEAK,
    CAVEAT_TEXT,
    PART_LABELS,
    RUNTIME_NAMES,
    RUNTIME_TITLES,
    counts_text,
    part_label,
)
from graphmem.runtime_models.base import Runtime
from tests.helpers.samples import SAMPLES_DIR

_SIZE = r"\d[\d.,]* (?:B|KiB|MiB|GiB|TiB)"
_TERMINAL_ROW = re.compile(rf"^\s*(?:\+ )?(\S.*?)\s{{2,}}({_SIZE})(?:\s|$)")
_HTML_ROW = re.compile(rf"<th scope=\"row\">(.*?)</th>\s*<td[^>]*>\s*(?:<[^>]+>\s*)*({_SIZE})",
                       re.S)
_HTML_TITLE = re.compile(rf"title=\"([^\"]+?): ({_SIZE})\"")


def test_every_code_has_its_words() -> None:
    assert set(PART_LABELS) == set(DevicePart)
    assert set(RUNTIME_NAMES) == set(RUNTIME_TITLES) == set(Runtime)
    assert set(CAVEAT_TEXT) == set(Caveat)


def test_a_parts_detail_completes_its_label() -> None:
    # the numbers a label needs are typed fields of the part, worded here only
    size = SymInt.const(1)
    assert part_label(FitPart(DevicePart.TENSORS, size)) == "tensors at peak"
    assert part_label(FitPart(DevicePart.TENSORS, size, WeightsApart())) == ACTIVATIONS_AT_PEAK
    assert (part_label(FitPart(DevicePart.PARAMETERS, size, Split(1, 2)))
            == "parameters (whole, tensor parallel / 2)")
    assert (part_label(FitPart(DevicePart.GRADIENTS, size, Split(4, 1)))
            == "gradients (sharded / 4)")
    assert part_label(FitPart(DevicePart.KV_CACHE, size, KvPool(1234, 4096))) == (
        "KV cache, 1,234 blocks")
    assert part_label(FitPart(DevicePart.KV_CACHE, size, KvPool(None, 4096))) == (
        "KV cache, one sequence of 4,096 tokens")


def _terminal(result: graphmem.Result) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None, highlight=False, emoji=False)
    print_summary(result, console, True)
    return buffer.getvalue()


def _terminal_pairs(text: str) -> list[tuple[str, str]]:
    """(label, size) of the answer's device-total block and of the runtime table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("on the GPU", "in the")))
    end = next(i for i, line in enumerate(lines) if line.startswith("live tensors at the"))
    table = next(i for i, line in enumerate(lines) if line.strip().startswith("runtime: "))
    table_end = next(i for i in range(table, len(lines)) if lines[i].startswith("= "))
    rows = [*lines[start + 1:end], *lines[table + 2:table_end]]  # past the "runtime peak" row
    return [(m[1], m[2]) for m in map(_TERMINAL_ROW.match, rows) if m]


def _html_pairs(page: str) -> list[tuple[str, str]]:
    """(label, size) of the GPU card's tables and the runtime card's table and bar."""
    pieces = []
    if '<div class="gpu ' in page:
        start = page.index('<div class="gpu ')
        pieces.append(page[start: page.index("</section>", start)])
    start = page.index('<section id="runtime"')
    pieces.append(page[start: page.index("</section>", start)])
    pairs = []
    for piece in pieces:
        for label, size in [*_HTML_ROW.findall(piece), *_HTML_TITLE.findall(piece)]:
            text = html.unescape(re.sub(r"<[^>]+>", "", label)).strip()
            pairs.append((text.removeprefix("+ "), size))
    return pairs


def _labels_by_size(pairs: list[tuple[str, str]], sizes: set[str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {size: set() for size in sizes}
    for label, size in pairs:
        if size in found:
            found[size].add(label)
    return found


@pytest.mark.parametrize("options", [{"gpu": "t4"}, {"runtime": "ort-cpu"}],
                         ids=["ort-cuda-t4", "ort-cpu"])
def test_each_part_carries_one_label_in_every_report(options: dict[str, str]) -> None:
    result = graphmem.analyze_onnx(SAMPLES_DIR / "tiny_gpt.onnx", batch=2, dims={"seq": 64},
                                   **options)
    estimate = result.runtime
    assert estimate is not None
    parts = result.fit.parts if result.fit is not None else runtime_parts(estimate)
    expected = {format_bytes(int(part.size_bytes)): part_label(part) for part in parts}
    assert len(expected) == len(parts)  # each part's size tells it apart
    assert any(isinstance(part.detail, WeightsApart) for part in parts)  # the review's case
    if result.fit is not None:
        # the JSON names each part by its code; the reports' label is that code's
        by_code = {part.key: part for part in parts}
        json_parts = result.to_dict()["gpu"]["parts"]
        assert set(json_parts) == set(by_code)
        for code, size in json_parts.items():
            assert expected[format_bytes(size)] == part_label(by_code[code])
    terminal = _labels_by_size(_terminal_pairs(_terminal(result)), set(expected))
    page = _labels_by_size(_html_pairs(render_html(result)), set(expected))
    for size, label in expected.items():
        assert terminal[size] == {label}, (size, terminal[size])
        assert page[size] == {label}, (size, page[size])


def test_what_the_runtime_peak_counts_is_worded_from_typed_fields() -> None:
    # torch-cuda's sentences name the cuBLAS workspaces inside its allocator and its segments:
    # the estimate carries them as numbers, words.py formats them; the context line is the
    # context outside the allocator + the workspaces inside it
    result = graphmem.analyze_onnx(SAMPLES_DIR / "tiny_cnn.onnx", batch=4, gpu="t4", train=True)
    estimate = result.runtime
    assert estimate is not None and estimate.runtime == Runtime.TORCH_CUDA
    facts = estimate.caching_allocator
    assert facts is not None and facts.workspace_bytes > 0
    assert estimate.context_bytes == facts.context_bytes + facts.workspace_bytes
    # the device total: the reserved segments + the context outside them
    assert estimate.device_total_bytes == facts.reserved_peak_bytes + facts.context_bytes
    text = counts_text(estimate)
    assert f"cuBLAS workspaces ({facts.workspace_bytes:,} B) included" in text
    runtime = result.to_dict()["memory"]["runtime"]
    assert runtime["counts"] == text
    assert f"reserved peak {facts.reserved_peak_bytes:,} B" in runtime["notes"][0]


@pytest.mark.torch
def test_torch_cpu_scratch_is_worded_from_its_nodes() -> None:
    # the peak's node and its scratch, and the largest scratch of any kernel (at least the
    # peak node's), are numbers on the estimate; the note is made from them here
    result = graphmem.analyze_torch("tests/torch_models/convnets.py:build_resnet_small",
                                    ["2x3x32x32"], train=True, optimizer="adamw",
                                    runtime="torch-cpu")
    estimate = result.runtime
    assert estimate is not None and estimate.runtime == Runtime.TORCH_CPU
    largest = estimate.largest_scratch
    assert largest is not None and largest.bytes >= estimate.workspace_bytes
    note = result.to_dict()["memory"]["runtime"]["notes"][0]
    assert note == (f"peak while {estimate.workspace_node} runs: its scratch"
                    f" {format_bytes(estimate.workspace_bytes)}; the largest kernel scratch is"
                    f" {format_bytes(largest.bytes)} ({largest.node})")
