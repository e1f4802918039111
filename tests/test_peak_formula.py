"""The peak with free dims is the exact maximum of its candidate steps
(graphmem/core/peak_formula.py): evaluable from Python and from the JSON, readable per range of
one free dim with the crossovers exact, and equal to the bound analysis at small and large
values of every free dim."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.peak_formula import Formula, envelope
from graphmem.core.symbolic import SymInt
from graphmem.pipeline.analysis import Analysis
from graphmem.report.json.report import to_dict
from tests.helpers.samples import SAMPLES_DIR

SEQ = SymInt.symbol("seq")
BATCH = SymInt.symbol("batch")


def evaluate_json(formula: dict, dims: dict[str, int]) -> int:
    """What a program does with `memory.peak_formula`: no parser, the largest candidate."""
    def value(terms: list[dict]) -> Fraction:
        total = Fraction(0)
        for term in terms:
            product = Fraction(term["coefficient"], term.get("divisor", 1))
            for name, power in term["dims"].items():
                product *= dims[name] ** power
            total += product
        return total

    best = max(value(candidate["terms"]) for candidate in formula["max"])
    return -(-best.numerator // best.denominator)  # sizes round up to whole bytes


# ----- crossovers, worked by hand ----------------------------------------------------------


def test_a_quadratic_term_takes_over_at_the_exact_crossover() -> None:
    # 1000 + 100*seq against 10 + 2*seq**2: 2s^2 - 100s - 990 > 0 from s = (100 +
    # sqrt(100^2 + 8*990)) / 4 = (100 + 133.7...) / 4 = 58.4...: the quadratic leads from 59
    linear, quadratic = SEQ * 100 + 1000, SEQ * SEQ * 2 + 10
    pieces = envelope((linear, quadratic))
    assert [(p.first, p.last, p.leader) for p in pieces] == [
        (1, 58, linear), (59, 1 << 24, quadratic)]
    # 58: 6800 vs 6738; 59: 6900 vs 6972
    assert linear.evaluate({"seq": 58}) > quadratic.evaluate({"seq": 58})
    assert quadratic.evaluate({"seq": 59}) > linear.evaluate({"seq": 59})


def test_three_candidates_each_lead_on_their_range() -> None:
    # a = 500; b = 10*seq + 100 is above a from seq 41 (510); c = seq**2 is above a from 23
    # (529 > 500) and above b from 17 (seq > 5 + sqrt(125) = 16.2): c takes over from a at
    # 23, and b, above a only where c is already above it, never leads
    a, b, c = SymInt.const(500), SEQ * 10 + 100, SEQ * SEQ
    pieces = envelope((a, b, c))
    assert [(p.first, p.last, p.leader) for p in pieces] == [(1, 22, a), (23, 1 << 24, c)]


def test_a_leader_holds_through_a_tie() -> None:
    # 2*seq + 10 and 3*seq meet at seq = 10 (30 = 30): the steeper one takes over where it is
    # strictly larger, from 11 (33 > 32); at the tie either gives the same maximum
    slow, steep = SEQ * 2 + 10, SEQ * 3
    pieces = envelope((slow, steep))
    assert [(p.first, p.last) for p in pieces] == [(1, 10), (11, 1 << 24)]
    assert pieces[1].leader == steep


def test_fractions_of_a_byte_compare_exactly() -> None:
    # int4 tensors hold 1/2 byte per element: seq/2 + 7 against seq - 3; the second is
    # larger from seq > 20: at 21, 18 > 17.5 (at 20 they tie: 17 = 17)
    half = SEQ.scaled(1, 2)
    assert half.terms()[next(iter(half.terms()))] == Fraction(1, 2)
    pieces = envelope((half + 7, SEQ - 3))
    assert [(p.first, p.last) for p in pieces] == [(1, 20), (21, 1 << 24)]


def test_several_free_dims_read_as_the_leader_at_the_probe() -> None:
    formula = Formula((BATCH * SEQ * 4 + 10, BATCH * 1000 + SEQ * 1000))
    assert formula.pieces is None  # two dims: no ranges
    text = formula.display()
    # at batch = seq = 64: 4*64*64 + 10 = 16,394 against 128,000: the second leads
    assert text.startswith("max of 2 step totals; at batch=64, seq=64 the largest is")
    assert "1000 B·batch + 1000 B·seq" in text or "1000 B·seq + 1000 B·batch" in text


# ----- the samples: the formula against the bound analysis ----------------------------------


@pytest.fixture(scope="module")
def llama_seq_free() -> Analysis:
    """samples/tiny_llama.onnx at batch 1, seq free: 12 candidate steps, quadratic ones."""
    return analyze_onnx(SAMPLES_DIR / "tiny_llama.onnx", batch=1, plan=False)


@pytest.mark.slow
def test_formula_equals_the_bound_analysis_at_every_seq(llama_seq_free: Analysis) -> None:
    peak = llama_seq_free.peak_bytes
    assert isinstance(peak, Formula) and peak.free_dims == {"seq"}
    pieces = peak.pieces
    assert pieces is not None and len(pieces) >= 2  # a quadratic term takes over
    crossover = pieces[1].first
    # small and large values, and both sides of the crossover
    for seq in sorted({16, crossover - 1, crossover, crossover + 1, 512, 2048, 8192}):
        bound = analyze_onnx(SAMPLES_DIR / "tiny_llama.onnx", batch=1, dims={"seq": seq},
                             plan=False)
        assert peak.evaluate({"seq": seq}) == int(bound.liveness.peak_bytes), seq
    # the old single candidate ("the largest at large values", the probe's step) was wrong
    # below the crossover: the leading range says which candidate holds where
    assert pieces[0].leader != pieces[-1].leader


def test_json_formula_evaluates_as_the_python_one(llama_seq_free: Analysis) -> None:
    memory = json.loads(json.dumps(to_dict(llama_seq_free)))["memory"]
    formula = memory["peak_formula"]
    peak = llama_seq_free.peak_bytes
    assert isinstance(peak, Formula)
    for seq in (1, 16, 69, 70, 4096, 1 << 24):
        assert evaluate_json(formula, {"seq": seq}) == peak.evaluate({"seq": seq})
    assert memory["peak_bytes"].startswith("Max(") and formula["sympy"] == memory["peak_bytes"]
    # the ranges: contiguous from 1 to the largest dim value, each naming its candidate
    ranges = formula["pieces"]
    assert ranges[0]["from"] == 1 and ranges[-1]["to"] == 1 << 24
    assert all(a["to"] + 1 == b["from"] for a, b in itertools.pairwise(ranges))
    assert formula["display"] == peak.display() and "above that" in formula["display"]
    # the live total at the peak step (the probe's candidate) keeps its own field
    assert memory["peak_step_bytes"] == llama_seq_free.liveness.peak_bytes.formula()


@pytest.mark.slow
def test_two_free_dims_match_the_bound_analysis_at_small_and_large_values() -> None:
    # tiny_gpt with batch and seq free (14 candidates): the max is right at every corner
    free = analyze_onnx(SAMPLES_DIR / "tiny_gpt.onnx", plan=False)
    peak = free.peak_bytes
    assert isinstance(peak, Formula) and peak.free_dims == {"batch", "seq"}
    for batch, seq in ((1, 8), (1, 2048), (32, 8), (32, 1024)):
        bound = analyze_onnx(SAMPLES_DIR / "tiny_gpt.onnx", dims={"batch": batch, "seq": seq},
                             plan=False)
        assert peak.evaluate({"batch": batch, "seq": seq}) == int(bound.liveness.peak_bytes)


# ----- a small Llama and a small GPT, exported here -------------------------------------------


def _export(model: object, path: Path) -> None:
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(2, 16, dtype=torch.int64),), str(path),
                          dynamo=False, opset_version=17, input_names=["input_ids"],
                          output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "logits": {0: "batch", 1: "seq"}})


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("name", ["llama", "gpt"])
def test_exported_decoders_formula_from_seq_16_to_8192(tmp_path: Path, name: str) -> None:
    from tests.models import GPT2, TinyLlama

    model = (TinyLlama(vocab=256, dim=32, n_layers=1, n_heads=2, max_seq=8192) if name == "llama"
             else GPT2(vocab=256, n_ctx=8192, n_embd=32, n_layer=1, n_head=2)).eval()
    path = tmp_path / f"{name}.onnx"
    _export(model, path)
    free = analyze_onnx(path, batch=2, plan=False)
    peak = free.peak_bytes
    assert isinstance(peak, Formula) and peak.pieces is not None
    # the attention scores [batch, heads, seq, seq] make a quadratic candidate lead at large seq
    last = peak.pieces[-1].leader
    assert any(sum(p for _, p in monomial) == 2 for monomial in last.terms())
    checked = {16, 8192, *(p.first for p in peak.pieces), *(p.last for p in peak.pieces[:-1])}
    for seq in sorted(checked):
        bound = analyze_onnx(path, batch=2, dims={"seq": seq}, plan=False)
        assert peak.evaluate({"seq": seq}) == int(bound.liveness.peak_bytes), seq


@pytest.mark.slow
def test_training_step_formula_equals_the_bound_analysis_at_every_seq() -> None:
    # the tiny GPT's training step (forward, backward and Adam in one schedule) with seq free:
    # many candidate steps, quadratic ones from the attention scores and their gradients
    path = SAMPLES_DIR / "tiny_gpt.onnx"
    peak = analyze_onnx(path, batch=2, train=True, plan=False).peak_bytes
    assert isinstance(peak, Formula) and peak.free_dims == {"seq"}
    pieces = peak.pieces
    assert pieces is not None
    edges = {p.first for p in pieces[1:]} | {p.first - 1 for p in pieces[1:]}
    for seq in sorted({8, 64, 1024, 4096, *edges} - {0}):
        bound = analyze_onnx(path, batch=2, train=True, dims={"seq": seq}, plan=False)
        assert peak.evaluate({"seq": seq}) == int(bound.liveness.peak_bytes), seq
