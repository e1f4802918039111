"""The JSON's node rows encoded per kind (report/json/report.py `_NodeRows.texts`: the op's
and the kind's fields encoded once, the name, module and times per node) are the text the
encoder writes for each node's whole dict: the same document, byte for byte, with dims bound
and free, with a roofline's times, and with names the encoder must escape."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.pipeline.analysis import Analysis
from graphmem.report.json.report import json_chunks, to_dict

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _texts(analysis: Analysis) -> tuple[str, str]:
    per_kind = "".join(json_chunks(to_dict(analysis, lazy_nodes=True)))
    whole_rows = "".join(json_chunks(to_dict(analysis, lazy_nodes=False)))
    return per_kind, whole_rows


@pytest.mark.parametrize(("name", "options"), [
    ("tiny_gpt.onnx", {}),  # dims free: sizes are formulas
    ("tiny_llama.onnx", {"batch": 3, "dims": {"seq": 17}}),
    ("tiny_cnn.onnx", {"batch": 8, "gpu": "t4"}),  # a roofline: times and bounds per node
    ("resnet50.onnx", {"batch": 2, "gpu": "a100-80gb"}),
])
def test_rows_per_kind_are_the_whole_rows(name: str, options: dict[str, object]) -> None:
    analysis = analyze_onnx(SAMPLES / name, **options)  # type: ignore[arg-type]
    per_kind, whole_rows = _texts(analysis)
    assert per_kind == whole_rows
    assert per_kind.count('"op": ') == len(analysis.costs.nodes)


def test_names_the_encoder_escapes() -> None:
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, plan=False)
    renamed = tuple(replace(cost, name=f'n"{i}\\\u00e9\u2028\x01', module_path=f"m\u00e9{i % 2}")
                    for i, cost in enumerate(analysis.costs.nodes))
    analysis = replace(analysis, costs=replace(analysis.costs, nodes=renamed))
    per_kind, whole_rows = _texts(analysis)
    assert per_kind == whole_rows and "\\u00e9" in per_kind and '\\"' in per_kind
