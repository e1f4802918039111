"""Every number the HTML report shows is the number the results hold.

The page and the JSON are rendered from the same Analysis and each number the page shows (the
peak, parameters, FLOPs and MACs, the memory by role, the tensors live at the peak and their
shares, the GPU's usable memory and the share the peak takes, the verdict, the largest batch,
the runtime's device total, the timeline's peak step and value, the modules) is read back from
the page's text and compared with what the JSON says, formatted the way a reader sees it. The
markup names what it shows with `data-n` attributes, so the test reads values, not layout.
A model worked by hand pins the numbers themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from graphmem import analyze_onnx
from graphmem.core.symbolic import SymInt, parse_dim
from graphmem.core.units import format_bytes, format_bytes_sym, format_si_sym
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.page import render_html
from graphmem.report.json.report import to_dict
from tests.helpers.html_page import relu_chain
from tests.helpers.samples import SAMPLES_DIR

PROBE = 64  # free dims are drawn and shared at this value (graphmem/core/conventions.py)


# ----- what the page shows ---------------------------------------------------------------------


@dataclass
class Shown:
    """One element the markup names with data-n: its text, its cells, the tooltips inside."""

    name: str
    text: str = ""
    cells: list[str] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)


VOID_TAGS = ("br", "wbr", "input", "meta", "img", "hr", "link")  # no end tag


class ShownNumbers(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[Shown] = []
        self.open: list[tuple[str, int, Shown]] = []  # (tag, depth, element)
        self.depth = 0
        self.cell_depth: int | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID_TAGS:
            return
        self.depth += 1
        values = dict(attrs)
        for _, _, shown in self.open:
            if values.get("title"):
                shown.titles.append(values["title"] or "")
        if self.open and tag in ("td", "th") and self.cell_depth is None:
            self.cell_depth = self.depth
            self.open[-1][2].cells.append("")
        if values.get("data-n"):
            shown = Shown(values["data-n"] or "")
            if values.get("title"):
                shown.titles.append(values["title"] or "")
            self.open.append((tag, self.depth, shown))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS:
            return
        if self.cell_depth == self.depth:
            self.cell_depth = None
        if self.open and self.open[-1][1] == self.depth:
            shown = self.open.pop()[2]
            shown.text = " ".join(shown.text.split())
            shown.cells = [" ".join(c.split()) for c in shown.cells]
            self.found.append(shown)
        self.depth -= 1

    def handle_data(self, data: str) -> None:
        for _, _, shown in self.open:
            shown.text += data
        if self.open and self.cell_depth is not None:
            self.open[-1][2].cells[-1] += data


def shown(page: str) -> dict[str, list[Shown]]:
    parser = ShownNumbers()
    parser.feed(page)
    by_name: dict[str, list[Shown]] = {}
    for element in parser.found:
        by_name.setdefault(element.name, []).append(element)
    return by_name


def one(page_numbers: dict[str, list[Shown]], name: str) -> Shown:
    (element,) = page_numbers[name]
    return element


# ----- the JSON's numbers, as a reader sees them ---------------------------------------------


def sym(value: int | str) -> SymInt:
    return SymInt.const(value) if isinstance(value, int) else SymInt.from_sympy(parse_dim(value))


def at_probe(value: int | str) -> int:
    size = sym(value)
    return size.evaluate(dict.fromkeys(size.free_symbols(), PROBE))


def exact(value: int | str) -> str:
    return f"{value:,}" if isinstance(value, int) else value


def pct(part: int, whole: int) -> str:
    """The page's percentages: one decimal, '<0.1%' for a sliver."""
    share = 100.0 * part / whole if whole > 0 else 0.0
    return "<0.1%" if 0 < share < 0.1 else f"{share:.1f}%"


def fact(numbers: dict[str, list[Shown]], key: str) -> Shown:
    return one(numbers, f"fact:{key}")


# ----- the four models -----------------------------------------------------------------------


def _cnn() -> Analysis:
    # inference on a T4 with onnxruntime's CUDA model (a device total): the peak is about
    # 140 KiB a sample, so batch 60,000 fills about half of the T4's usable memory
    return analyze_onnx(SAMPLES_DIR / "tiny_cnn.onnx", batch=60_000, gpu="t4",
                        runtime="ort-cuda")


def _transformer() -> Analysis:
    # a sliver of an A100: the share reads "<0.1%"
    return analyze_onnx(SAMPLES_DIR / "tiny_gpt.onnx", dims={"batch": 2, "seq": 64},
                        gpu="a100-40gb")


def _training() -> Analysis:
    # an Adam step at batch 16,000 needs about 1.3x a T4's usable memory: does not fit
    return analyze_onnx(SAMPLES_DIR / "tiny_gpt.onnx", train=True,
                        dims={"batch": 16_000, "seq": 64}, gpu="t4")


def _free_dims() -> Analysis:
    # batch and seq left free: every size a formula, 14 candidate peak steps
    return analyze_onnx(SAMPLES_DIR / "tiny_gpt.onnx", gpu="t4")


Rendered = tuple[dict[str, Any], dict[str, list[Shown]]]  # (the JSON, the page's numbers)
MODELS = {"cnn": _cnn, "transformer": _transformer, "training": _training, "free": _free_dims}


@pytest.fixture(scope="module", params=sorted(MODELS))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    """(the JSON, the page's named numbers), both from one Analysis."""
    analysis = MODELS[request.param]()
    report = json.loads(json.dumps(to_dict(analysis)))  # exactly what --json writes
    return report, shown(render_html(analysis))



def test_peak_params_flops_and_macs(rendered: Rendered) -> None:
    report, numbers = rendered
    memory = report["memory"]
    peak = fact(numbers, "peak memory")
    # the exact peak: with several candidate steps, their maximum as the JSON reads it
    shown = (memory["peak_formula"]["display"] if memory["peak_formula"]
             else format_bytes_sym(sym(memory["peak_bytes"])))
    assert peak.text.startswith(f"peak memory {shown} ")
    candidates = memory["peak_candidates"]
    tooltip = (f"max({', '.join(map(str, candidates))})" if len(candidates) > 1
               else exact(memory["peak_bytes"]))
    assert peak.titles == [f"{tooltip} bytes"]
    assert f"step {memory['peak_step']}: {memory['peak_node']}" in peak.text
    params = fact(numbers, "parameters")
    assert params.text == (f"parameters {report['params']['count']:,}"
                           f" {format_bytes(report['params']['bytes'])}")
    flops = fact(numbers, "FLOPs")
    assert flops.text.startswith(f"FLOPs {format_si_sym(sym(report['flops']['total']), 'FLOP')} ")
    assert flops.titles == [f"{exact(report['flops']['total'])} FLOPs"]
    macs = one(numbers, "stat:MACs")
    assert macs.titles == [f"{exact(report['flops']['macs'])} MACs"]
    assert macs.text.startswith(f"MACs {format_si_sym(sym(report['flops']['macs']))} ")
    residents = one(numbers, "stat:residents")
    assert residents.text.startswith(f"residents {format_bytes_sym(sym(memory['resident_bytes']))}")


def test_memory_by_role(rendered: Rendered) -> None:
    report, numbers = rendered
    memory = report["memory"]
    peak = at_probe(memory["peak_bytes"])
    breakdown = memory["breakdown"]
    assert {name.removeprefix("role:") for name in numbers if name.startswith("role:")} == set(
        breakdown)
    for role, size in breakdown.items():
        row = one(numbers, f"role:{role}")
        assert row.cells == [role, format_bytes_sym(sym(size)), pct(at_probe(size), peak)], role
        assert row.titles == [f"{exact(size)} bytes"]


def test_tensors_live_at_the_peak(rendered: Rendered) -> None:
    report, numbers = rendered
    memory = report["memory"]
    peak = at_probe(memory["peak_bytes"])
    tensors = sorted(memory["live_at_peak"], key=lambda t: -at_probe(t["bytes"]))
    rows = numbers["live"]
    assert len(rows) == min(len(tensors), 500)
    for row, tensor in zip(rows, tensors, strict=False):
        name, size, share, role, _shape, dtype = row.cells[:6]
        assert (name, dtype, role) == (tensor["name"], tensor["dtype"], tensor["role"])
        assert size == format_bytes_sym(sym(tensor["bytes"]))
        assert share == pct(at_probe(tensor["bytes"]), peak)  # of the peak, not of a subset


def test_gpu_fit_and_max_batch(rendered: Rendered) -> None:
    report, numbers = rendered
    gpu = report["gpu"]
    assert one(numbers, "gpu:usable").cells[1] == format_bytes(gpu["usable_bytes"])
    # the verdict's number (the device total, or live peak + context) against the capacity
    utilization = one(numbers, "gpu:peak").cells[2]
    if gpu["utilization"] is None:
        assert utilization == "depends on the free dims"
    elif gpu["utilization"] < 0.001:
        assert utilization == "<0.1% of the GPU's"  # a sliver, not "0.0%"
    else:
        assert utilization == f"{gpu['utilization']:.1%} of the GPU's"
    verdict = fact(numbers, "fits")
    assert verdict.text.startswith(f"on {gpu['full_name']}")
    required = sym(gpu["required_bytes"])
    if gpu["fits"]:
        spare = gpu["memory_bytes"] - int(required)
        assert f"fits {format_bytes(spare)} to spare" in verdict.text
    elif gpu["fits"] is False:
        over = int(required) - gpu["memory_bytes"]
        assert f"does not fit over by {format_bytes(over)}" in verdict.text
    else:
        assert "fit depends on the free dims" in verdict.text
    largest = fact(numbers, "max batch")
    if gpu["max_batch"] is not None:
        assert largest.text.startswith(f"max batch {gpu['max_batch']:,} ")
    else:
        assert gpu["max_batch_reason"] in largest.text


def test_runtime_total(rendered: Rendered) -> None:
    report, numbers = rendered
    total = report["memory"].get("device_total_bytes")
    if total is None:
        assert "runtime:total" not in numbers and "fact:on the device" not in numbers
        return
    assert one(numbers, "runtime:total").cells[1] == format_bytes(total)
    assert fact(numbers, "on the device").text.startswith(f"on the device {format_bytes(total)}")


def test_timeline_peak(rendered: Rendered) -> None:
    report, numbers = rendered
    memory = report["memory"]
    step = memory["peak_step"]
    value = at_probe(memory["timeline_bytes"][step])  # drawn at the probe value
    assert one(numbers, "timeline-peak").text == f"peak {format_bytes(value)} at step {step}"


def test_modules(rendered: Rendered) -> None:
    report, numbers = rendered
    rows = report["modules"]["rows"]
    assert [r.cells[0] for r in numbers["module"]] == [r["module"] for r in rows]
    for row, module in zip(numbers["module"], rows, strict=True):
        assert row.cells[1:] == [f"{module['params']:,}",
                                 format_si_sym(sym(module["flops"]), "FLOP"),
                                 format_bytes_sym(sym(module["bytes_at_peak"]))]


# ----- a model worked by hand ----------------------------------------------------------------


def test_a_chain_worked_by_hand(tmp_path: Path) -> None:
    import onnx

    # x[2, 8] float32 -> MatMul(w[8, 8]) -> t0 -> Relu -> t1 -> Relu -> t2 (the output):
    # residents x 2*8*4 = 64 B and w 8*8*4 = 256 B; each t is 64 B. Step 0 (MatMul): 320 + t0
    # = 384; step 1: t0, t1 = 448; step 2: t1, t2 = 448. The peak, 448 B, is at step 1.
    path = tmp_path / "chain.onnx"
    onnx.save(relu_chain(3), path)
    numbers = shown(render_html(analyze_onnx(path, batch=2, gpu="t4")))
    assert fact(numbers, "peak memory").titles == ["448 bytes"]
    assert one(numbers, "timeline-peak").text == "peak 448 B at step 1"
    shares = {row.cells[0]: (row.cells[1], row.cells[2]) for row in numbers["live"]}
    # 256 / 448 = 57.1% of the peak (of the 320 B of residents it would be 80.0%)
    assert shares == {"w": ("256 B", "57.1%"), "x": ("64 B", "14.3%"),
                      "t0": ("64 B", "14.3%"), "t1": ("64 B", "14.3%")}
    parameters = one(numbers, "role:parameters")
    assert parameters.cells == ["parameters", "256 B", "57.1%"]
