"""Size and render time of the HTML report for a graph of about 10,000 nodes.

    python benchmarks/report_size.py [--layers 97] [--no-browser]

The graph is the Llama-2-7B-shaped decoder of benchmarks/llama_graph.py (about 103 graph
nodes per layer once Constant nodes are folded; 97 layers are about 10,000 nodes), analyzed at
batch 1, seq 2048 on an H100 so every node has a roofline time.

Prints: nodes, seconds to analyze, to build the view and to render the page, the page's size
and its largest parts (the node data for the script, the HTML rows, the timeline), and, where
Chromium and Playwright are installed, the seconds until the page has loaded and until its
script has drawn the node table.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataclasses import replace

import onnx
from llama_graph import PRESETS, build_llama

from graphmem import analyze_onnx
from graphmem.core.units import format_bytes
from graphmem.report.html.page import build_view, render_html

T = TypeVar("T")


def timed(work: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = work()
    return result, time.perf_counter() - start


def part_bytes(page: str, start: str, end: str) -> int:
    first = page.index(start)
    return len(page[first: page.index(end, first)].encode())


def browser_seconds(path: Path) -> tuple[float, float] | None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(chromium).exists():
        return None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        start = time.perf_counter()
        page.goto(path.as_uri(), wait_until="load")
        loaded = time.perf_counter() - start
        page.wait_for_selector("#node-page:not(:empty)")
        ready = time.perf_counter() - start
        browser.close()
    return loaded, ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=97)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "llama.onnx"
        config = replace(PRESETS["llama2-7b"], layers=args.layers)
        onnx.save(build_llama(config, "llama.onnx.data"), str(model))
        analysis, analyze_s = timed(lambda: analyze_onnx(
            model, batch=1, dims={"seq": 2048}, gpu="h100-sxm"))
        _, view_s = timed(lambda: build_view(analysis))
        page, render_s = timed(lambda: render_html(analysis))
        report = Path(folder) / "report.html"
        report.write_text(page, encoding="utf-8")
        rows = [
            ("nodes", f"{len(analysis.graph.nodes):,}"),
            ("analyze (s)", f"{analyze_s:.2f}"),
            ("build view (s)", f"{view_s:.2f}"),
            ("render page (s), view included", f"{render_s:.2f}"),
            ("page size", f"{format_bytes(len(page.encode()))} ({len(page.encode()):,} B)"),
            ("  node data for the script", format_bytes(
                part_bytes(page, 'id="node-data"', "</script>"))),
            ("  node table HTML rows", format_bytes(
                part_bytes(page, 'id="node-table"', "</table>"))),
            ("  memory timeline SVG", format_bytes(
                part_bytes(page, 'id="timeline"', "</section>"))),
        ]
        seconds = None if args.no_browser else browser_seconds(report)
        if seconds is not None:
            rows += [("chromium: load event (s)", f"{seconds[0]:.2f}"),
                     ("chromium: node table drawn (s)", f"{seconds[1]:.2f}")]
    width = max(len(label) for label, _ in rows)
    print(f"| {'measure'.ljust(width)} | value |\n|{'-' * (width + 2)}|------:|")
    for label, value in rows:
        print(f"| {label.ljust(width)} | {value} |")


if __name__ == "__main__":
    main()
