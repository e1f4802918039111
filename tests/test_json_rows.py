"""The JSON's node rows encoded per kind (report/json/report.py `_NodeRows.texts`: the op's
and the kind's fields encoded once, the name, module per node, the times once per distinct
time) and the live tensors' rows likewise (`_LiveRows`) are the text the encoder writes for
each whole dict: the same document, byte for byte, with dims bound and free, with a roofline's
times, and with names and numbers the encoder must tell apart; the arena's placements too."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.passes.arena import Placement
from graphmem.pipeline.analysis import Analysis
from graphmem.report.json.plan import _Placements
from graphmem.report.json.report import _line, json_chunks, to_dict
from graphmem.report.json.rows import item

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
    # the live tensors' rows too (report.py `_LiveRows`), one a line
    assert per_kind.count('"last_consumer": ') == len(analysis.liveness.live_at_peak)


def test_names_the_encoder_escapes() -> None:
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, plan=False)
    renamed = tuple(replace(cost, name=f'n"{i}\\\u00e9\u2028\x01', module_path=f"m\u00e9{i % 2}")
                    for i, cost in enumerate(analysis.costs.nodes))
    live = tuple(replace(t, name=f't"{i}\u00e9', producer=None if i % 3 else f"p\u2028{i}",
                         last_consumer=None if i % 2 else "c")
                 for i, t in enumerate(analysis.liveness.live_at_peak))
    analysis = replace(analysis, costs=replace(analysis.costs, nodes=renamed),
                       liveness=replace(analysis.liveness, live_at_peak=live))
    per_kind, whole_rows = _texts(analysis)
    assert per_kind == whole_rows and "\\u00e9" in per_kind and '\\"' in per_kind
    assert per_kind.count('"last_consumer": ') == len(live) > 3


def test_times_equal_but_written_apart() -> None:
    """0.0 and -0.0, 1 and 1.0 compare equal (a dict key would merge them): each row keeps
    its own text."""
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=8, gpu="t4")
    assert analysis.roofline is not None
    values = (0.0, -0.0, 1, 1.0, 2.5e-9, None)
    times = tuple(replace(t, est_time_s=values[i % 5], intensity_flops_per_byte=values[i % 6])
                  for i, t in enumerate(analysis.roofline.nodes))
    analysis = replace(analysis, roofline=replace(analysis.roofline, nodes=times))
    per_kind, whole_rows = _texts(analysis)
    assert per_kind == whole_rows
    assert '"est_time_s": -0.0' in per_kind and '"est_time_s": 1,' in per_kind


NAMES = ("", "a", 'q"uote', "back\\slash", "</script>", "tab\there", "\u2028\u2029",
         "\x00\x1f\x7f", "caf\u00e9", "\U0001f600", "\ud800", "x" * 300)


@pytest.mark.parametrize("seed", range(4))
def test_placements_as_text_are_the_dicts_encoded(seed: int) -> None:
    """The arena's placements (plan.py `_Placements`), alone and inside the one-line
    `arena` dict the writer puts them in (report.py `_line`)."""
    rng = random.Random(seed)
    numbers = (0, 1, -1, 255, 2**31, 2**63 + 1, 10**30)
    placements = tuple(Placement(rng.choice(NAMES), *(rng.choice(numbers) for _ in range(4)))
                       for _ in range(rng.randint(0, 50)))
    rows = _Placements(placements)
    assert list(rows.texts()) == [item(row) for row in rows]
    arena = {"alignment": 1, "placements": rows, "method": "x"}
    assert _line(arena) == item({**arena, "placements": list(rows)})
