"""The GPU card says what its verdict is on: the runtime model's device total, its parts (they
add up to it), the capacity, and the live-tensor peak only as a reference, never as the
number the verdict reads (it read "live-tensor peak 768.8 MiB" for a device total)."""

from __future__ import annotations

import re

import pytest

from graphmem import analyze_onnx
from graphmem.core.units import format_bytes
from graphmem.report.html.page import render_html
from tests.helpers.samples import TINY_CNN

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")


def card_rows(page: str) -> dict[str, str]:
    """The GPU card's table: row label -> the size shown."""
    card = page[page.index('<div class="gpu '):]
    card = card[: card.index("</table>")]
    rows = re.findall(r"<tr[^>]*><th[^>]*>(.*?)</th><td[^>]*>(.*?)</td>", card, re.S)
    return {re.sub(r"<[^>]+>|\s+", " ", label).strip(): re.sub(r"<[^>]+>", "", size).strip()
            for label, size in rows}


def test_the_verdict_reads_the_device_total_and_its_parts() -> None:
    analysis = analyze_onnx(TINY_CNN, batch=8, gpu="t4")
    runtime = analysis.runtime
    assert runtime is not None
    rows = card_rows(render_html(analysis))
    total = format_bytes(runtime.device_total_bytes)
    assert rows["= ort-cuda device total"] == total
    # activations at its peak, weights + inputs, allocator overhead, CUDA context + workspaces
    # add up to it
    assert rows["CUDA context + workspaces"] == format_bytes(runtime.context_bytes)
    assert rows["allocator overhead"] == format_bytes(runtime.allocator_overhead_bytes)
    assert rows["live-tensor peak"] == format_bytes(int(analysis.peak_bytes))  # a reference
    assert rows["capacity"] == format_bytes(analysis.fit.capacity_bytes)


def test_the_sentence_names_what_it_compares() -> None:
    page = render_html(analyze_onnx(TINY_CNN, batch=8, gpu="t4"))
    verdict = " ".join(page.split('<p class="verdict">')[1].split("</p>")[0].split())
    assert verdict.startswith("&#10003; <strong>Fits.</strong> The ort-cuda device total,")
    assert "live-tensor peak" not in verdict


def test_without_a_runtime_model_the_live_peak_and_context_are_the_parts() -> None:
    # free dims: no runtime model; the verdict waits for the dims and says on what
    page = render_html(analyze_onnx(TINY_CNN, gpu="t4"))
    rows = card_rows(page)
    assert "= live-tensor peak + CUDA context" in rows
    assert "CUDA context + workspaces" in rows
