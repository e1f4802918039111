"""The HTML report in a real headless Chromium: no errors, no network, sorting and filtering."""

import shutil
from pathlib import Path

import onnx
import pytest

from graphmem.analysis import analyze_onnx
from graphmem.reports.html import write_html
from tests.onnx_builders import mlp_model

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def report(tmp_path: Path) -> Path:
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), model)
    page = tmp_path / "mlp.html"
    write_html(analyze_onnx(model, batch=8, gpu="t4"), page)
    return page


def test_report_renders_sorts_and_filters_offline(report: Path, tmp_path: Path) -> None:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report.as_uri())
        assert errors == []
        assert all(url.startswith("file://") for url in requests), requests
        assert page.locator("#timeline svg").count() == 1
        rows = page.locator("#node-table tbody tr")
        assert rows.count() == 4
        # FLOPs in model order at batch 8: fc1 2*8*32*64 = 32768, bias1 8*64 = 512, relu1 512,
        # fc2 2*8*64*10 = 10240: not sorted; a click on the header must sort the column
        flops_cells = page.locator("#node-table tbody tr td:nth-child(7)")
        before = [float(flops_cells.nth(i).get_attribute("data-sort")) for i in range(4)]
        page.locator("#node-table th", has_text="FLOPs").click()
        after = [float(flops_cells.nth(i).get_attribute("data-sort")) for i in range(4)]
        assert before == [32768, 512, 512, 10240]
        assert after in (sorted(before), sorted(before, reverse=True))
        page.fill("#node-filter", "relu")
        visible = [r for r in range(4) if rows.nth(r).is_visible()]
        assert len(visible) == 1 and "relu1" in rows.nth(visible[0]).inner_text()
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert (tmp_path / "report.png").stat().st_size > 10_000
