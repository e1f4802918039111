"""The HTML report names where each live tensor comes from (its module), shows the CUDA
kernels a traced step assumed, links every section from the header, and wraps long names at
their dots and underscores, never inside a word."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from graphmem import analyze_onnx
from graphmem.core.units import format_bytes
from graphmem.frontends.torch.kernel_choice import KernelChoice
from graphmem.report.html.page import breakable, render_html
from tests.helpers.samples import TINY_CNN

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")


def live_rows(page: str) -> list[list[str]]:
    """Each row of the live table as its cells' text (tensor, size, share, role, shape, dtype,
    module, made by, kept alive by)."""
    rows = re.findall(r'<tr data-n="live".*?</tr>', page, re.S)
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td.*?</td>", row,
                                                                          re.S)]
            for row in rows]


def test_onnx_rows_name_their_module() -> None:
    analysis = analyze_onnx(TINY_CNN, batch=2)
    modules = {node.name: node.module_path for node in analysis.graph.nodes}
    rows = live_rows(render_html(analysis))
    made = [row for row in rows if row[7] != "(resident)"]
    assert made and all(row[6] == (modules[row[7]] or "(top level)") for row in made)
    # an initializer (no module in its name) is named by the module of the node reading it
    weights = [row for row in rows if row[3] == "parameter"]
    readers = {value.name: next(n.module_path for n in value.consumers if n.module_path)
               for value in analysis.graph.values.values()
               if value.producer is None and any(n.module_path for n in value.consumers)}
    assert weights and all(row[6] == readers.get(row[0], "") for row in weights)


@pytest.mark.torch
@pytest.mark.slow
def test_pytorch_rows_name_the_module_that_made_them() -> None:
    import graphmem

    result = graphmem.analyze_torch("tests/torch_models/small.py:build_convnet",
                                    ["4x3x32x32"], train=True)
    modules = {node.name: node.module_path for node in result.graph.nodes}
    rows = live_rows(render_html(result))
    made = [row for row in rows if row[7] != "(resident)"]
    assert all(row[6] == (modules[row[7]] or "(top level)") for row in made)
    # the convolutions' saved outputs say stem and conv; the ReLUs run in the root's own
    # forward (torch.relu in ConvNet.forward): the top level, as the module table names it
    saved = {row[0]: row[6] for row in rows if row[3] == "saved_activation"}
    assert saved["convolution"] == "stem" and saved["convolution_1"] == "conv"
    assert saved["relu"] == "(top level)"
    assert [row[6] for row in rows if row[3] == "input"] == [""]
    state = [row for row in rows if row[3] == "optimizer_state"]
    # exp_avg[conv1.weight] belongs to conv1
    assert state and all(row[0].split("[")[1].startswith(row[6] + ".") for row in state)


def test_the_kernels_a_cuda_trace_assumed_are_listed() -> None:
    analysis = analyze_onnx(TINY_CNN, batch=2)
    assert "CUDA kernels assumed" not in render_html(analysis)
    kernels = (KernelChoice("attention", "flash", "sm80, bf16, head dim 64", 12),
               KernelChoice("optimizer", "foreach", "adam"))
    page = render_html(replace(analysis, model=replace(analysis.model, kernels=kernels)))
    about = page[page.index('<section id="about"'):]
    assert "CUDA kernels assumed" in about
    assert "<li>attention: flash (sm80, bf16, head dim 64, 12 calls)</li>" in about
    assert "<li>optimizer: foreach (adam)</li>" in about


def test_every_section_is_linked_from_the_header_and_every_link_lands() -> None:
    page = render_html(analyze_onnx(TINY_CNN, batch=2, gpu="t4", runtime="auto"))
    nav = page[page.index('<nav class="toc"'): page.index("</nav>")]
    links = set(re.findall(r'href="#([\w-]+)"', nav))
    sections = set(re.findall(r'<section id="([\w-]+)"', page))
    assert links == sections


def test_long_names_break_at_their_parts_and_stay_escaped() -> None:
    assert str(breakable("transformer.h.0.attn")) == "transformer.<wbr>h.<wbr>0.<wbr>attn"
    assert str(breakable("/layer1/Add_output_0")) == (
        "/<wbr>layer1/<wbr>Add_<wbr>output_<wbr>0")
    assert str(breakable("<script>.x")) == "&lt;script&gt;.<wbr>x"


def test_the_timeline_says_its_gpu_lines_are_for_live_tensors_only() -> None:
    # an ONNX model on a T4 gets the ort-cuda runtime model: its device total, not the live
    # peak drawn, is what the verdict reads, and the timeline says so with the number
    analysis = analyze_onnx(TINY_CNN, batch=8, gpu="t4")
    assert analysis.runtime is not None
    lead = render_html(analysis).split('<section id="timeline"')[1].split("</p>")[0]
    lead = " ".join(lead.split())
    assert "The GPU lines are drawn against live tensors only" in lead
    assert 'href="#runtime"' in lead
    assert f"ort-cuda holds {format_bytes(analysis.runtime.device_total_bytes)}" in lead
    without_gpu = render_html(analyze_onnx(TINY_CNN, batch=8))
    assert "The GPU lines are drawn" not in without_gpu
