"""One graph for every batch (graphmem/passes/batch_scaling.py): two graphs of a step at two
batches made one whose batch-proportional dims are `k * batch`, refused where they differ in
anything else; and --suggest's batch search on it (graphmem/suggest/driver.py): the batches
between the two traces read off the scaled graph, the answer confirmed by a trace, and the
whole search re-traced as before where the confirmation disagrees."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from graphmem.core.ir import DType, Graph, Node, Phase, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.passes.batch_scaling import (
    BATCH_SYMBOL,
    _Mismatch,
    peak_at_batch,
    scale_by_batch,
    scaled_dim,
)
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.passes.liveness import LivenessResult, analyze_liveness

BATCH = SymInt.symbol(BATCH_SYMBOL)

# a dim of the step at a batch: ("b", k) is k * batch, ("+", c) is batch + c (an offset),
# ("r", m) is the batch rounded up to a multiple of m, an int is that number at any batch
DimRule = tuple[str, int] | int


def _dim(rule: DimRule, batch: int) -> SymInt:
    if isinstance(rule, int):
        return SymInt.const(rule)
    kind, number = rule
    if kind == "b":
        return SymInt.const(number * batch)
    if kind == "+":
        return SymInt.const(batch + number)
    return SymInt.const(-(-batch // number) * number)


def step_at(batch: int, hidden: DimRule = ("b", 16), op: str = "Gelu",
            held: bool = False) -> Graph:
    """x [batch, 4] -> Linear(w [4, 8]) -> h [hidden, 8] -> op -> y (a view of h when held)
    -> Sum -> loss; h is held to the end when `held`. At batch 8: x 128 B, h 16*8*8*4 =
    4,096 B with hidden = 16 * batch."""
    x = Value("x", DType.FLOAT32, (_dim(("b", 1), batch), SymInt.const(4)), Role.INPUT)
    w = Value("w", DType.FLOAT32, (SymInt.const(4), SymInt.const(8)), Role.PARAMETER)
    h = Value("h", DType.FLOAT32, (_dim(hidden, batch), SymInt.const(8)), Role.ACTIVATION)
    y = Value("y", DType.FLOAT32, h.shape, Role.ACTIVATION)
    loss = Value("loss", DType.FLOAT32, (), Role.OUTPUT)
    graph = Graph("step", [], {v.name: v for v in (x, w, h, y, loss)}, [x], [loss])
    graph.add_node(Node("linear", "MatMul", [x, w], [h], module_path="fc",
                        phase=Phase.FORWARD))
    graph.add_node(Node("act", op, [h], [y], phase=Phase.FORWARD))
    last = graph.add_node(Node("sum", "ReduceSum", [y], [loss], phase=Phase.FORWARD))
    if held:
        h.held_until = last
    graph.check()
    return graph


def _peak(graph: Graph) -> int:
    return int(analyze_liveness(graph, value_bytes(graph, DimBinding({}, (), None))).peak_bytes)


def test_proportional_dims_become_k_times_batch() -> None:
    scaled = scale_by_batch(step_at(8, held=True), 8, step_at(1024, held=True), 1024).graph
    assert scaled is not None
    scaled.check()
    assert scaled.values["x"].shape == (BATCH, SymInt.const(4))
    assert scaled.values["h"].shape == (BATCH * 16, SymInt.const(8))
    assert scaled.values["w"].shape == (SymInt.const(4), SymInt.const(8))  # equal: kept
    assert scaled.values["h"].held_until is scaled.nodes[2]
    # the scaled graph's peak at any batch is the step built at that batch
    for batch in (1, 8, 77, 1024, 5000):
        assert peak_at_batch(scaled, batch) == _peak(step_at(batch, held=True))


@pytest.mark.parametrize(("at_8", "at_1024", "scaled"), [
    (128, 128, SymInt.const(128)),  # the same at both: a constant
    (24, 3072, BATCH * 3),  # 3 * 8 and 3 * 1,024
    (None, None, None),  # unknown at both
])
def test_a_dim_is_equal_or_k_times_batch(at_8: int | None, at_1024: int | None,
                                         scaled: SymInt | None) -> None:
    def dim(number: int | None) -> SymInt | None:
        return None if number is None else SymInt.const(number)

    assert scaled_dim(dim(at_8), 8, dim(at_1024), 1024) == scaled


@pytest.mark.parametrize(("at_8", "at_1024"), [
    (11, 1027),  # batch + 3
    (4, 512),  # batch / 2: k is not an integer
    (24, 2048),  # 3 at one batch, 2 at the other
    (8, None),  # unknown at one batch only
])
def test_any_other_dim_is_refused(at_8: int, at_1024: int | None) -> None:
    with pytest.raises(_Mismatch, match="batch"):
        scaled_dim(SymInt.const(at_8), 8, None if at_1024 is None else SymInt.const(at_1024),
                   1024)


def test_a_dim_already_named_batch_is_refused() -> None:
    with pytest.raises(_Mismatch, match="already"):
        scaled_dim(BATCH, 8, BATCH, 1024)


def test_equal_graphs_scale_to_themselves() -> None:
    fixed = scale_by_batch(step_at(8, hidden=64), 8, step_at(64, hidden=64), 64).graph
    assert fixed is not None and fixed.values["h"].shape == (SymInt.const(64),
                                                             SymInt.const(8))


@pytest.mark.parametrize(("hidden", "why"), [
    (("+", 3), "not proportional"),  # batch + 3: 11 at 8 and 1,027 at 1,024
    (("r", 6), "not proportional"),  # rounded up to a multiple of 6: 12 at 8, 1,026 at 1,024
])
def test_a_dim_that_is_not_k_times_batch_is_refused(hidden: DimRule, why: str) -> None:
    refused = scale_by_batch(step_at(8, hidden), 8, step_at(1024, hidden), 1024)
    assert refused.graph is None and why in refused.reason and "h:" in refused.reason


def test_a_different_structure_is_refused() -> None:
    other_op = scale_by_batch(step_at(8), 8, step_at(1024, op="Relu"), 1024)
    assert other_op.graph is None and "act" in other_op.reason
    held = scale_by_batch(step_at(8), 8, step_at(1024, held=True), 1024)
    assert held.graph is None and "held until" in held.reason
    longer = step_at(1024)
    z = Value("z", DType.FLOAT32, (SymInt.const(1),), Role.ACTIVATION)
    longer.values["z"] = z
    longer.add_node(Node("extra", "Relu", [longer.values["loss"]], [z]))
    assert "nodes" in scale_by_batch(step_at(8), 8, longer, 1024).reason
    assert scale_by_batch(step_at(8), 8, step_at(8), 8).graph is None  # one batch: no k


# ----- the batch search on the scaled graph ----------------------------------------------------
@dataclass(frozen=True)
class _Step:
    """The two results of an analysis the batch search reads."""

    graph: Graph
    liveness: LivenessResult


def _search(hidden: DimRule, budget_bytes: int, scaling: bool = True
            ) -> tuple[tuple[int, int | None], list[int]]:
    """The fp32 search's (answer, peak there) on `step_at(hidden)` from batch 8, and the
    batches it traced."""
    from graphmem.suggest import driver

    traced: list[int] = []

    def reanalyze(change: driver.Change) -> _Step:
        assert change.batch is not None
        traced.append(change.batch)
        graph = step_at(change.batch, hidden)
        return _Step(graph, analyze_liveness(graph, value_bytes(graph, DimBinding({}, (), None))))

    inputs = driver.SuggestInputs(traced=scaling, training=True, amp=None, batch=8,
                                  budget_bytes=budget_bytes)
    search = driver._BatchSearch(inputs, reanalyze, budget_bytes)  # type: ignore[arg-type]
    base = step_at(8, hidden)
    fit = search.largest(None, 8, _Step(base, analyze_liveness(base, value_bytes(
        base, DimBinding({}, (), None)))))  # type: ignore[arg-type]
    assert fit is not None
    return (fit.max_batch, fit.peak_bytes), traced


# at a batch b with hidden = 16 * b the peak is at the Gelu: the residents w (4 * 8 * 4 = 128
# B) and x (16 * b), h and y (16 * b * 8 * 4 = 512 * b each): 128 + 1,040 * b bytes
BUDGET = 128 + 1040 * 3000 + 500  # the largest batch that fits: 3,000


def test_the_search_traces_the_far_end_and_the_answer_only() -> None:
    scaled, traced = _search(("b", 16), BUDGET)
    assert scaled == (3000, 128 + 1040 * 3000)
    assert traced == [16384, 3000]
    retraced, every = _search(("b", 16), BUDGET, scaling=False)  # an ONNX graph: no scaling
    assert retraced == scaled and len(every) > len(traced)


def test_a_confirmation_that_disagrees_falls_back_to_tracing() -> None:
    """Rounded up to a multiple of 8, the hidden dim is 1 * batch at 8 and 16,384 and not in
    between: the scaled graph's answer is refuted by its trace, and the search then traces
    every batch it tries, giving the answer a search without scaling gives."""
    rounded: DimRule = ("r", 8)

    def hidden_bytes(batch: int) -> int:
        return -(-batch // 8) * 8 * 8 * 4

    # residents 128 + 16 * b, h and y at the Gelu: 3,001 fits, 3,002 (h rounded up to 3,008
    # rows either way) does not; the scaled graph (h 32 * b) says 3,006
    budget = 128 + 16 * 3001 + 2 * hidden_bytes(3001)
    scaled, traced = _search(rounded, budget)
    plain, every = _search(rounded, budget, scaling=False)
    assert scaled == plain and scaled[0] == 3001
    assert traced[:2] == [16384, 3006] and len(traced) > 2  # refuted at 3,006: traced on
    assert set(traced) - {3006} <= set(every)


def test_refused_scaling_traces_like_before() -> None:
    offset: DimRule = ("+", 3)
    answer, traced = _search(offset, BUDGET)
    plain, every = _search(offset, BUDGET, scaling=False)
    assert answer == plain and traced == every


@pytest.mark.torch
@pytest.mark.slow
def test_a_traced_step_gives_the_same_cards_with_fewer_traces(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An MLP's step at batch 1,024 under a budget 5 MiB below its peak: the fp32 and bf16
    searches trace only the far end and the answer each, and every card is the one a search
    tracing every batch gives (the batch cards' notes say how the probes were analysed)."""
    import graphmem.frontends.torch.import_step as import_step
    from graphmem import analyze_torch
    from graphmem.passes.batch_scaling import BatchScaling
    from graphmem.suggest import driver
    from tests.helpers.torch_nets import MLP

    traces = 0
    trace = import_step.import_torch

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal traces
        traces += 1
        return trace(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(import_step, "import_torch", counted)
    model = MLP(width=64, depth=4)
    base = analyze_torch(model, [(1024, 64)], train=True, suggest=False)
    budget = int(base.liveness.peak_bytes) - 5 * (1 << 20)

    def suggested() -> tuple[list[driver.Suggestion], int]:
        nonlocal traces
        traces = 0
        result = analyze_torch(model, [(1024, 64)], train=True, suggest=True,
                               memory_budget_bytes=budget)
        assert result.suggestions is not None
        return list(result.suggestions.suggestions), traces

    cards, scaled_traces = suggested()
    monkeypatch.setattr(driver, "scale_by_batch", lambda *_: BatchScaling(None, "off"))
    every, retraces = suggested()
    batch_cards = [c for c in cards if c.kind == "batch"]
    assert len(batch_cards) == 2 and all("batch_scaling.py" in c.note for c in batch_cards)
    assert [replace(c, note="") if c.kind == "batch" else c for c in cards] == [
        replace(c, note="") if c.kind == "batch" else c for c in every]
    assert {c.kind for c in cards} >= {"checkpoint", "amp", "batch", "grad_accum"}
    # each search traced the far end, the answer and the next batch (526 and 527 in fp32: the
    # secant line lands on the answer here); the next batch is now read off the scaled graph
    assert scaled_traces == retraces - 2


def test_the_scaled_graph_keeps_the_dims_only_data_sets() -> None:
    """A Loop's trip count the data sets is a dim of no shape (Graph.data_dims): the scaled
    graph keeps it, so `--dim M_trips=...` still binds it on the graph the probes share."""
    small, large = step_at(2), step_at(4)
    small.data_dims = large.data_dims = frozenset({"M_trips"})
    scaled = scale_by_batch(small, 2, large, 4).graph
    assert scaled is not None and scaled.data_dims == frozenset({"M_trips"})
