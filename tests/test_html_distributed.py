"""The HTML report's per-GPU (distributed training) and KV-cache sections: laid out like the rest
(a table of the parts, the KV cache's formula in words), never a dump of fields with [] or None.

The distributed and KV-cache results are built with graphmem/distributed's own functions and
put on a real analysis, as the pipeline does.
"""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest

from graphmem.core.units import format_bytes
from graphmem.distributed.kv_cache import KvCacheShape, kv_cache_report
from graphmem.distributed.model_states import profile_training
from graphmem.distributed.ranks import DistributedReport
from graphmem.distributed.strategies import (
    DistributedConfig,
    fit_by_strategy,
    per_rank_memory,
)
from graphmem.passes.dims import value_bytes
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.page import render_html
from tests.helpers.html_page import check_page
from tests.helpers.samples import TINY_CNN

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")
DASH = "\u2013"


def _section(page: str) -> str:
    start = page.index('<section id="more-memory"')
    return page[start: page.index("</section>", start)]


def _text(fragment: str) -> str:
    """What a reader sees: no tags, tooltips or runs of spaces."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]*>", " ", fragment)))


def with_distributed(analysis: Analysis, config: DistributedConfig,
                     usable_bytes: int | None) -> Analysis:
    """The per-rank memory of `config`; with a GPU's usable bytes the fewest GPUs per strategy."""
    profile = profile_training(analysis.graph, value_bytes(analysis.graph, analysis.dims))
    fits = fit_by_strategy(profile, config, usable_bytes) if usable_bytes is not None else ()
    report = DistributedReport(per_rank_memory(profile, config), usable_bytes, fits)
    return replace(analysis, distributed=report)


# ----- per GPU -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zero3(training: Analysis) -> Analysis:
    assert training.fit is not None
    return with_distributed(training, DistributedConfig(strategy="zero3", gpus=8),
                            training.fit.usable_bytes)


@pytest.mark.torch
def test_per_gpu_section_is_a_table_of_the_parts(zero3: Analysis) -> None:
    page = render_html(zero3)
    check_page(page)
    section = _section(page)
    text = _text(section)
    rank = zero3.distributed.per_rank
    for label, size in (("parameters", rank.parameters_bytes),
                        ("gradients", rank.gradients_bytes),
                        ("optimizer state", rank.optimizer_state_bytes),
                        ("optimizer temporaries", rank.temporaries_bytes),
                        ("activations", rank.activations_bytes),
                        ("gathered parameters", rank.gathered_bytes),
                        ("communication buckets", rank.buckets_bytes),
                        ("total per GPU", rank.total_bytes)):
        # each part formatted, its exact byte count as the tooltip
        assert re.search(rf"{label}</th><td class=\"r\"><span class=\"num\" "
                         rf"title=\"{size:,} bytes\">{re.escape(format_bytes(size))}</span>",
                         section), label
    assert "zero3 on N = 8 data-parallel ranks \u00d7 T = 1 tensor parallel (8 GPUs)" in text
    assert f"peaks at step {rank.peak_step}, {rank.peak_node}" in text
    # the "fewest GPUs" table: one row per strategy, tiny_cnn fits on one T4 with each
    fits = section[section.index('id="fit-by-strategy"'):]
    for row in zero3.distributed.fit_by_strategy:
        assert f"<td>{row.strategy}</td>" in fits
        assert format_bytes(row.per_rank_total_bytes) in fits
    assert "14.3 GiB usable on each" in _text(fits)  # the T4's usable memory
    # not a field/value dump: no list or None printed, no raw keys
    assert "[]" not in section and "None" not in text and "replicated matmul" not in text
    assert "field" not in text.lower().split()


@pytest.mark.torch
def test_per_gpu_without_a_gpu_has_no_fit_table(training: Analysis) -> None:
    analysis = with_distributed(training, DistributedConfig(strategy="zero3", gpus=8), None)
    rank = replace(analysis.distributed.per_rank, replicated_matmul_weights=("fc.weight",))
    page = render_html(replace(analysis, distributed=replace(analysis.distributed,
                                                               per_rank=rank)))
    check_page(page)
    section = _section(page)
    assert 'id="per-gpu"' in section and 'id="fit-by-strategy"' not in section
    assert "None" not in _text(section)
    assert "Replicated (no dim divisible by T): fc.weight" in _text(section)


# ----- KV cache ------------------------------------------------------------------------------


def with_kv_cache(analysis: Analysis, usable_bytes: int | None) -> Analysis:
    # tiny llama of tests/torch_models/hf.py: 2 layers, 2 KV heads, head dim 32, float32
    shape = KvCacheShape(2, 2, 32, "float32", 4, "model.config")
    report = kv_cache_report(shape, 1, 1, analysis.liveness.peak_bytes, usable_bytes)
    return replace(analysis, kv_cache=report)


@pytest.fixture(scope="module")
def kv(inference: Analysis) -> Analysis:
    assert inference.fit is not None
    return with_kv_cache(inference, inference.fit.usable_bytes)


def test_kv_cache_reads_as_the_formula_in_words(kv: Analysis) -> None:
    page = render_html(kv)
    check_page(page)
    section = _section(page)
    text = _text(section[section.index('id="kv-cache"'):])
    # 2 (K and V) x 2 layers x 2 KV heads x 32 head dim x 4 B = 1,024 B = 1.0 KiB a token
    words = " x ".join(("2 (K and V)", "2 layers", "batch", "2 KV heads", "32 head dim",
                        "context", "4 B (float32) = 1.0 KiB per token per sequence"))
    assert words.replace(" x ", " \u00d7 ") in text
    assert "at batch 1 1.0 KiB \u00d7 context tokens" in text
    assert "1024*context" not in text and "1024*batch*context" not in text
    report = kv.kv_cache
    assert report.max_context is not None
    # (usable - base) // 1,024 tokens: 15 M on a T4 for a model of a few MiB
    assert f"longest context that fits {report.max_context:,} tokens" in text
    assert report.max_context == (report.usable_bytes - report.base_bytes) // 1024
    assert "None" not in text and "[]" not in text and DASH not in text


def test_kv_cache_without_a_gpu_says_why_there_is_no_longest_context(
        inference: Analysis) -> None:
    page = render_html(with_kv_cache(inference, None))
    check_page(page)
    section = _section(page)
    text = _text(section[section.index('id="kv-cache"'):])
    assert "Longest context that fits: give --gpu to get the longest context that fits." in text
    assert "usable on the GPU" not in text and "None" not in text
