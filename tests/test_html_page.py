"""The HTML report as a page: well formed, offline, the analysis's facts on it, names escaped,
a large graph truncated and its timeline downsampled."""

from __future__ import annotations

import html
import json
import warnings
from pathlib import Path

import onnx
import pytest

from graphmem import analyze_onnx
from graphmem.core.symbolic import SymInt, parse_dim
from graphmem.core.units import format_bytes, format_bytes_sym
from graphmem.errors import GraphmemError
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.charts import MAX_HOVER_TARGETS, timeline_chart
from graphmem.report.html.nodes import MAX_NODE_ROWS
from graphmem.report.html.page import render_html, templates_dir, write_html
from graphmem.report.html.quantity import PROBE_DIM_VALUE, bytes_quantity
from tests.helpers.html_page import check_page, relu_chain
from tests.helpers.samples import SAMPLE_MODELS as SAMPLES
from tests.onnx_builders import custom_op_model

# ----- models ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Conv(3->16, 3x3) -> ReLU -> global pool -> Linear(16->10), batch dynamic."""
    torch = pytest.importorskip("torch")
    from torch import nn

    class SmallCnn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, padding=1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))

    path = tmp_path_factory.mktemp("cnn") / "small_cnn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(
            SmallCnn().eval(), (torch.randn(2, 3, 32, 32),), str(path), dynamo=False,
            opset_version=17, input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        )
    return path


def _save(model: onnx.ModelProto, folder: Path, name: str) -> Path:
    path = folder / name
    onnx.save(model, str(path))
    return path


def _node_table_rows(page: str) -> int:
    table = page[page.index('id="node-table"'):]
    table = table[: table.index("</table>")]
    return table.count("<tr") - 1  # less the header row


# ----- reports for real models ----------------------------------------------------------------


def test_templates_are_at_the_top_of_a_checkout() -> None:
    # the design's layout: pyproject.toml, README.md, graphmem/, tests/, templates/, samples/
    root = Path(__file__).resolve().parent.parent
    assert templates_dir() == root / "templates"
    assert (templates_dir() / "report.html.j2").is_file()


def test_an_installed_wheel_finds_them_inside_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wheel carries templates/ as graphmem/templates (pyproject's force-include); an
    installed graphmem, with no checkout around it, finds them there first."""
    import shutil
    import tomllib

    from graphmem.report.html import page

    root = Path(__file__).resolve().parent.parent
    wheel = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"]["wheel"]
    assert wheel["force-include"] == {"templates": "graphmem/templates"}
    installed = tmp_path / "site-packages" / "graphmem"
    shutil.copytree(root / "templates", installed / "templates")
    monkeypatch.setattr(page, "__file__", str(installed / "report" / "html" / "page.py"))
    assert templates_dir() == installed / "templates"


def test_missing_templates_are_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphmem.report.html import page

    monkeypatch.setattr(page, "__file__", str(tmp_path / "a" / "graphmem" / "report" / "html"
                                               / "page.py"))
    with pytest.raises(GraphmemError, match="HTML report templates not found"):
        templates_dir()


@pytest.mark.torch
def test_free_batch_shows_formulas_and_draws_at_batch_64(cnn_path: Path) -> None:
    analysis = analyze_onnx(cnn_path)
    page = render_html(analysis)
    check_page(page)
    # conv 16*3*3*3 + 16, fc 16*10 + 10 = 448 + 170 = 618
    assert analysis.params.count == 618
    assert "618" in page
    assert format_bytes_sym(analysis.liveness.peak_bytes) in page  # "2.4 KiB + 140.0 KiB*batch"
    assert "*batch" in page
    # drawn where the liveness pass picks the peak step (passes/liveness.py), not at 1
    assert "Drawn at batch=64" in page
    for node in analysis.costs.nodes:
        assert f"<code>{html.escape(node.name)}</code>" in page
    assert "<svg" in page and "<polyline" in page
    assert "On NVIDIA" not in page  # no GPU given


@pytest.mark.torch
def test_bound_batch_on_a_t4_fits(cnn_path: Path) -> None:
    analysis = analyze_onnx(cnn_path, batch=8, gpu="t4")
    page = render_html(analysis)
    check_page(page)
    peak = int(analysis.liveness.peak_bytes)
    assert format_bytes(peak) in page
    assert f"{peak:,} bytes" in page  # the exact number, as a tooltip
    assert analysis.fit is not None and analysis.fit.fits
    assert "Fits." in page and "fits on NVIDIA Tesla T4" in page
    assert format_bytes(analysis.fit.usable_bytes) in page
    assert "CUDA reserve" in page
    assert "Drawn at" not in page  # every dim is bound: no probe value


@pytest.mark.torch
def test_a_batch_too_large_for_a_t4_does_not_fit(cnn_path: Path) -> None:
    # the peak is about 143 KiB per sample: 200,000 samples are about 27 GiB
    analysis = analyze_onnx(cnn_path, batch=200_000, gpu="t4")
    page = render_html(analysis)
    check_page(page)
    assert analysis.fit is not None and analysis.fit.fits is False
    assert "Does not fit." in page and "does not fit on NVIDIA Tesla T4" in page


@pytest.mark.torch
def test_free_batch_on_a_gpu_says_the_largest_batch_that_fits(cnn_path: Path) -> None:
    # the batch free: the verdict is the largest batch whose device total fits, with that
    # device total; the live-tensor formula is named as such beside it
    analysis = analyze_onnx(cnn_path, gpu="t4")
    page = render_html(analysis)
    check_page(page)
    assert analysis.max_batch is not None and analysis.max_batch.max_batch
    assert f"Fits up to batch={analysis.max_batch.max_batch:,}." in page
    assert "the live-tensor peak + CUDA context is" in " ".join(page.split())


def test_unplanned_free_dims_say_the_fit_depends_on_them(cnn_path: Path) -> None:
    # unplanned (plan=False): no largest batch is searched, so the verdict waits on the dims
    analysis = analyze_onnx(cnn_path, gpu="t4", plan=False)
    page = render_html(analysis)
    check_page(page)
    assert "Fit depends on batch." in page


def test_an_unsupported_op_is_a_visible_warning(tmp_path: Path) -> None:
    analysis = analyze_onnx(_save(custom_op_model(), tmp_path, "custom.onnx"), batch=2)
    assert analysis.costs.unsupported_ops == {"custom.domain.MyCustomOp": 1}
    page = render_html(analysis)
    check_page(page)
    alert = page[page.index('role="alert"'):]
    alert = " ".join(alert[: alert.index("</div>")].split())
    assert "custom.domain.MyCustomOp" in alert and "1 node with unsupported ops" in alert
    row = page[page.index(' class="status-unsupported">'):]
    row = row[: row.index("</tr>")]
    assert "<code>custom</code>" in row and "not counted" in row  # not a silent 0


@pytest.mark.torch
def test_a_supported_model_has_no_warning(cnn_path: Path) -> None:
    assert 'role="alert"' not in render_html(analyze_onnx(cnn_path, batch=1))


def test_names_are_escaped(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>"
    model = relu_chain(3, name_of=lambda i: f"{hostile}{i}")
    page = render_html(analyze_onnx(_save(model, tmp_path, "hostile.onnx"), batch=1))
    check_page(page)
    assert hostile not in page
    assert html.escape(hostile) in page


@pytest.mark.slow
def test_large_graph_is_truncated_and_downsampled(tmp_path: Path) -> None:
    node_count = 2 * MAX_HOVER_TARGETS + 500
    page = render_html(analyze_onnx(_save(relu_chain(node_count), tmp_path, "big.onnx")))
    check_page(page)
    assert f"The first {MAX_NODE_ROWS:,} of" in page and f"{node_count:,} nodes are shown" in page
    assert _node_table_rows(page) == MAX_NODE_ROWS  # as HTML; the script pages through all
    data = json.loads(page[page.index('id="node-data">') + 15: page.index("</script>")])
    assert [row[0] for row in data] == list(range(node_count))
    assert [row[1] for row in data[:3]] == ["relu0", "relu1", "relu2"]
    svg = page[page.index("<svg"): page.index("</svg>")]
    assert svg.count("data-step=") <= MAX_HOVER_TARGETS
    assert "each tooltip covers 3 steps" in page  # ceil(4500 / 2000)


@pytest.mark.torch
def test_write_html(tmp_path: Path, cnn_path: Path) -> None:
    target = tmp_path / "report.html"
    write_html(analyze_onnx(cnn_path, batch=2), target)
    check_page(target.read_text(encoding="utf-8"))


@pytest.mark.parametrize("sample", SAMPLES or [None], ids=lambda p: p.name if p else "none")
@pytest.mark.parametrize("options", [{}, {"batch": 4, "gpu": "t4"}], ids=["free", "t4"])
@pytest.mark.slow
def test_samples(sample: Path | None, options: dict[str, object]) -> None:
    if sample is None:
        pytest.skip("no samples/*.onnx in this checkout")
    try:
        analysis = analyze_onnx(sample, **options)  # type: ignore[arg-type]
    except Exception as error:  # noqa: BLE001 - a sample with a fixed batch refuses --batch
        pytest.skip(f"{sample.name}: {error}")
    page = render_html(analysis)
    check_page(page)
    _assert_key_numbers(analysis, page)


def _assert_key_numbers(analysis: Analysis, page: str) -> None:
    assert f"{analysis.params.count:,}" in page
    assert format_bytes_sym(analysis.liveness.peak_bytes) in page
    for node in analysis.costs.nodes[:50]:
        assert html.escape(node.name) in page


# ----- the pieces ------------------------------------------------------------------------------


@pytest.mark.parametrize("formula", [
    "143360*batch + 2472", "2472 + 143360*batch", "batch", "-batch + 4", "2*batch**2*seq - 3",
    "12*batch*seq + 5*seq", "3*batch/2 + 1", "floor(seq/2)*batch + 1",
])
def test_a_formula_is_shown_term_by_term_and_drawn_at_the_probe(formula: str) -> None:
    # the view formats the results' SymInts (it used to parse the JSON's formula strings back)
    size = SymInt.from_sympy(parse_dim(formula))
    shown = bytes_quantity(size)
    assert shown.text == format_bytes_sym(size)
    assert shown.probe == size.evaluate(dict.fromkeys(size.free_symbols(), PROBE_DIM_VALUE))
    assert shown.exact == size.formula()  # the tooltip: the formula as the JSON writes it


def test_timeline_of_many_steps_stays_small() -> None:
    steps = 100_000
    live = [1000 + (i % 97) for i in range(steps)]
    live[70_000] = 5000  # one spike: it must survive the downsampling
    chart = timeline_chart(live, resident_bytes=1000, peak_step=70_000, usable_bytes=None,
                           describe_step=lambda step: f"step {step}")
    points = chart.line_points.split()
    assert len(points) <= 2 * (chart.box.right - chart.box.left)
    top = min(float(p.split(",")[1]) for p in points)
    assert top == pytest.approx(chart.peak_y, abs=0.1)
    assert len(chart.targets) == MAX_HOVER_TARGETS
    assert chart.steps_per_target == 50  # 100,000 / 2,000
    assert any("step 70000" in t.title for t in chart.targets)
    # the peak marker sits over step 70,000 of 100,000
    box = chart.box
    assert chart.peak_x == pytest.approx(box.left + 0.700005 * (box.right - box.left))


def test_timeline_draws_the_gpu_line_only_near_the_peak() -> None:
    def chart(usable: int) -> object:
        return timeline_chart([10, 30, 20], resident_bytes=5, peak_step=1, usable_bytes=usable,
                              describe_step=str)

    near, far = chart(60), chart(10**9)
    usable = near.rule("usable")
    assert usable is not None and usable.y < near.peak_y  # above the peak
    assert far.rule("usable") is None and "far above" in far.usable_note
