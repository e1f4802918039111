"""The HTML report in a real headless Chromium: no errors, no network, the timeline and tables
render, sorting, filtering and a click on the timeline work; at a desktop's and a phone's width
the answer is on the first screen, nothing spills out sideways, "show all" works without a
script, and the timeline's labels never collide."""

import shutil
from pathlib import Path

import onnx
import pytest

from graphmem import analyze_onnx
from graphmem.report.html.page import write_html
from tests.helpers.samples import SAMPLE_MODELS as SAMPLES
from tests.onnx_builders import mlp_model

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def open_report(browser, path: Path, width: int = 1280):
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    assert errors == []
    assert requests == [path.as_uri()], requests  # the page itself, nothing else
    assert page.locator("#timeline svg path, #timeline svg polyline").count() >= 1
    assert page.locator("#timeline-targets rect").count() >= 1
    assert page.locator("#node-table tbody tr").count() >= 1
    assert page.locator("#node-controls").is_visible()
    return page


@pytest.mark.parametrize("sample", SAMPLES or [None], ids=lambda p: p.name if p else "none")
def test_sample_report_opens_offline(browser, sample: Path | None, tmp_path: Path) -> None:
    if sample is None:
        pytest.skip("no samples/*.onnx in this checkout")
    report = tmp_path / f"{sample.stem}.html"
    write_html(analyze_onnx(sample, gpu="t4"), report)
    page = open_report(browser, report)
    page.close()


def test_sorting_filtering_and_timeline_clicks(browser, tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), model)
    report = tmp_path / "mlp.html"
    write_html(analyze_onnx(model, batch=8, gpu="t4"), report)
    page = open_report(browser, report)
    rows = page.locator("#node-table tbody tr")
    assert rows.count() == 4
    # FLOPs in model order at batch 8: fc1 2*8*32*64 = 32768, bias1 8*64 = 512, relu1 512,
    # fc2 2*8*64*10 = 10240: not sorted; a click on the header sorts the column
    flops = page.locator("#node-table tbody tr td:nth-child(8)")
    before = [float(flops.nth(i).get_attribute("data-sort")) for i in range(4)]
    page.locator("#node-table th", has_text="FLOPs").click()
    after = [float(flops.nth(i).get_attribute("data-sort")) for i in range(4)]
    assert before == [32768, 512, 512, 10240]
    assert after == sorted(before, reverse=True)  # numbers: largest first
    # a number and its unit stay on one line ("32.77 kFLOP" wrapped to "32.77 / kFLOP")
    for cell in (flops.nth(0), page.locator("#node-table tbody tr td:nth-child(9)").nth(0)):
        assert cell.evaluate("c => getComputedStyle(c).whiteSpace") == "nowrap"
    page.fill("#node-filter", "relu")
    assert rows.count() == 1 and "relu1" in rows.nth(0).inner_text()
    page.select_option("#node-filter-field", "op")
    page.fill("#node-filter", "matmul")
    assert rows.count() == 2
    # a click on step 3 of the timeline clears the filter and marks the node that runs there
    page.locator('#timeline-targets rect[data-step="3"]').click()
    hit = page.locator("#node-table tbody tr.hit")
    assert hit.count() == 1 and hit.get_attribute("id") == "node-3"
    assert hit.is_visible()
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    page.close()
    assert (tmp_path / "report.png").stat().st_size > 10_000


@pytest.mark.torch
def test_training_report_pages_and_jumps(browser, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from graphmem import analyze_torch
    from tests.models import TinyCNN

    analysis = analyze_torch(TinyCNN(), ["4x3x32x32"], train=True, optimizer="adam", gpu="t4")
    report = tmp_path / "train.html"
    write_html(analysis, report)
    page = open_report(browser, report)
    labels = page.locator("#timeline .band-label")
    assert [labels.nth(i).text_content() for i in range(labels.count())] == [
        "forward", "backward", "optimizer"]
    assert page.locator("#timeline .layer").count() >= 8
    last = len(analysis.graph.nodes) - 1  # an optimizer node
    page.locator(f'#timeline-targets rect[data-step="{last}"]').click()
    hit = page.locator("#node-table tbody tr.hit")
    assert hit.get_attribute("id") == f"node-{last}"
    assert "optimizer" in hit.inner_text()
    page.screenshot(path=str(tmp_path / "train.png"), full_page=True)
    page.close()


def test_a_long_table_pages_and_the_timeline_finds_later_pages(browser, tmp_path: Path) -> None:
    from tests.helpers.html_page import relu_chain

    model = tmp_path / "chain.onnx"
    onnx.save(relu_chain(250), model)
    report = tmp_path / "chain.html"
    write_html(analyze_onnx(model, batch=2), report)
    page = open_report(browser, report)
    rows = page.locator("#node-table tbody tr")
    assert rows.count() == 100 and page.locator("#node-page").inner_text() == "page 1 of 3"
    page.locator("#node-next").click()
    assert rows.nth(0).get_attribute("id") == "node-100"
    page.locator('#timeline-targets rect[data-step="230"]').click()
    assert page.locator("#node-page").inner_text() == "page 3 of 3"
    assert page.locator("#node-table tbody tr.hit").get_attribute("id") == "node-230"
    page.close()


# ----- layout at a desktop's and a phone's width ------------------------------------------------

# What spills out of the page or out of its card, outside any box that scrolls.
_SPILLS = """() => {
  const page = document.documentElement.clientWidth, out = [];
  for (const card of document.querySelectorAll('.card, .page-header')) {
    const box = card.getBoundingClientRect();
    for (const el of card.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || (r.right <= box.right + 1 && r.right <= page + 1)) continue;
      let scrolls = false;
      for (let a = el.parentElement; a && a !== card; a = a.parentElement) {
        const overflow = getComputedStyle(a).overflowX;
        if (['auto', 'scroll', 'hidden'].includes(overflow)) { scrolls = true; break; }
      }
      if (!scrolls) out.push(el.tagName + '.' + el.className + ' in #' + card.id);
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def layout_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CNN on a T4, a GPT-2 training step (1,380 nodes, 1,341 tensors live at the peak) and a
    model with its dims left free."""
    folder = tmp_path_factory.mktemp("layout")
    samples = {p.name: p for p in SAMPLES}
    if "gpt2.onnx" not in samples or "tiny_cnn.onnx" not in samples:
        pytest.skip("samples/gpt2.onnx or samples/tiny_cnn.onnx is missing")
    analyses = {
        "cnn": analyze_onnx(samples["tiny_cnn.onnx"], batch=32, gpu="t4"),
        "gpt2-train": analyze_onnx(samples["gpt2.onnx"], train=True, batch=2, dims={"seq": 128},
                                   gpu="t4"),
        "free": analyze_onnx(samples["tiny_gpt.onnx"] if "tiny_gpt.onnx" in samples
                             else samples["gpt2.onnx"]),
    }
    reports = {}
    for name, analysis in analyses.items():
        reports[name] = folder / f"{name}.html"
        write_html(analysis, reports[name])
    return reports


@pytest.mark.parametrize("width", [1400, 390])
@pytest.mark.parametrize("name", ["cnn", "gpt2-train", "free"])
def test_nothing_spills_sideways_and_the_answer_comes_first(
        browser, layout_reports: dict[str, Path], name: str, width: int) -> None:
    page = open_report(browser, layout_reports[name], width)
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # no sideways page
    assert page.evaluate(_SPILLS) == []  # wide tables scroll inside their own box
    # the answer (the peak, and the verdict with a GPU) is on the first screen
    for fact in page.locator("dl.answers .fact").all():
        assert fact.bounding_box()["y"] + fact.bounding_box()["height"] <= 900, name
    tops = [page.locator(f"#{s}").bounding_box()["y"] for s in ("summary", "roles", "live",
                                                                 "timeline", "nodes")]
    assert tops == sorted(tops)
    page.close()


def test_a_long_live_table_shows_the_largest_and_the_rest_on_demand(
        browser, layout_reports: dict[str, Path]) -> None:
    page = open_report(browser, layout_reports["gpt2-train"], 1400)
    rows = page.locator("#live-table tbody tr")
    visible = "rows => rows.filter(r => r.offsetParent !== null).length"
    assert rows.count() == 500 and rows.evaluate_all(visible) == 20
    # GPT-2 training keeps 1,341 tensors live: the page was 17,000 px tall with every one
    assert page.evaluate("document.documentElement.scrollHeight") < 8000
    toggle = page.locator("label.show-all")
    assert toggle.inner_text() == "Show the largest 500"
    toggle.click()
    assert rows.evaluate_all(visible) == 500 and toggle.inner_text() == "Show the largest 20 only"
    toggle.click()
    assert rows.evaluate_all(visible) == 20
    # sorted by another column, the first 20 of the new order are shown
    page.locator("#live-table th", has_text="tensor").click()
    names = rows.evaluate_all("rows => rows.filter(r => r.offsetParent !== null)"
                              ".map(r => r.cells[0].textContent)")
    assert len(names) == 20 and names == sorted(names, key=str.lower)
    page.close()


def _label_boxes(page) -> dict[str, list[dict[str, float]]]:
    return page.evaluate("""() => {
      const box = e => { const b = e.getBBox(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
      return {
        peak: Array.from(document.querySelectorAll('#timeline .peak-label'), box),
        lines: Array.from(document.querySelectorAll('#timeline .usable-label'), box),
        rules: Array.from(document.querySelectorAll('#timeline line:is(.usable, .capacity-line)'),
                          l => ({y: l.y1.baseVal.value})),
      };
    }""")


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


@pytest.mark.parametrize("peak_gib", [13.9, 14.2, 14.6, 14.9, 15.3])
def test_the_peak_label_is_never_struck_through_near_capacity(
        browser, tmp_path: Path, peak_gib: float) -> None:
    samples = {p.name: p for p in SAMPLES}
    if "tiny_cnn.onnx" not in samples:
        pytest.skip("samples/tiny_cnn.onnx is missing")
    # tiny_cnn peaks at 138,536 B of residents + 128 KiB a sample; a T4 has 14.3 GiB usable
    # of 15.0 GiB
    batch = int((peak_gib * (1 << 30) - 138_536) // 131_072)
    report = tmp_path / "near.html"
    write_html(analyze_onnx(samples["tiny_cnn.onnx"], batch=batch, gpu="t4"), report)
    page = open_report(browser, report, 1400)
    boxes = _label_boxes(page)
    (peak,) = boxes["peak"]
    assert len(boxes["rules"]) == 2  # capacity and usable lines, both drawn
    for rule in boxes["rules"]:
        assert not peak["y"] - 1 <= rule["y"] <= peak["y"] + peak["h"] + 1, (peak, rule)
    for label in boxes["lines"]:
        assert not _overlap(peak, label), (peak, label)
    page.close()


# ----- a PyTorch-path training step: module paths on the rows --------------------------------


@pytest.fixture(scope="module")
def torch_gpt2_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GPT-2 (2 layers) traced from PyTorch, one training step with its attention mask, on a
    T4: the report a Hugging Face user gets from `graphmem analyze hf.py:gpt2 --train`."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import graphmem
    from tests.torch_models.hf import gpt2

    result = graphmem.analyze(gpt2(), {"input_ids": "4x128:int64",
                                       "attention_mask": "4x128:int64"},
                              train=True, gpu="t4")
    report = tmp_path_factory.mktemp("torch") / "gpt2-train.html"
    write_html(result, report)
    return report


@pytest.mark.torch
@pytest.mark.parametrize("width", [1400, 390])
def test_a_pytorch_step_names_modules_and_keeps_to_its_boxes(
        browser, torch_gpt2_report: Path, width: int) -> None:
    page = open_report(browser, torch_gpt2_report, width)
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.evaluate(_SPILLS) == []
    tops = [page.locator(f"#{s}").bounding_box()["y"] for s in ("summary", "modules", "roles",
                                                                 "live", "timeline")]
    assert tops == sorted(tops)  # the answer, then by module and by role, then the tensors
    modules = page.locator("#live-table tbody tr td.module").evaluate_all(
        "cells => cells.filter(c => c.offsetParent !== null).map(c => c.textContent.trim())")
    assert len(modules) == 20  # the largest 20 shown
    assert sum(m.startswith("transformer.h.") for m in modules) >= 10, modules
    # a module path wraps between its parts (<wbr> after each dot), not inside a word as
    # `word-break: break-all` did ("transformer.h.0.at / tn")
    cell = page.locator("#live-table tbody tr td.module", has_text="transformer.h.").first
    assert cell.evaluate("c => getComputedStyle(c).wordBreak") == "normal"
    assert cell.locator("wbr").count() >= 1
    if width == 1400:
        page.screenshot(path=str(torch_gpt2_report.with_suffix(".png")), full_page=True)
    page.close()


def test_the_gpu_card_reads_on_a_phone(browser, layout_reports: dict[str, Path]) -> None:
    """At 390 px each line of the GPU card is its label and size on one line with the
    explanation under them (three columns squeezed the explanation to a word per line)."""
    page = open_report(browser, layout_reports["cnn"], 390)
    rows = page.locator("div.gpu table.gpu-lines tr")
    assert rows.count() >= 4
    for index in range(rows.count()):
        label, size = rows.nth(index).locator("th"), rows.nth(index).locator("td.r")
        assert abs(label.bounding_box()["y"] - size.bounding_box()["y"]) < 2  # one line
    note = page.locator("div.gpu td.small", has_text="the total the driver").first
    assert note.bounding_box()["width"] > 250  # the card's width, not a squeezed column
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.close()
