"""The HTML report in a real headless Chromium: no errors, no network, the timeline and tables
render, sorting, filtering and a click on the timeline work."""

import shutil
from pathlib import Path

import onnx
import pytest

from graphmem.pipeline.analysis import analyze_onnx
from graphmem.report.html.page import write_html
from tests.onnx_builders import mlp_model
from tests.test_html_report import SAMPLES

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def open_report(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
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


def test_training_report_pages_and_jumps(browser, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from graphmem.frontends.torch.analyze import analyze_torch
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
    from tests.test_html_report import relu_chain

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
