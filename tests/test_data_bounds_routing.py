"""A mixture of experts' router on the ONNX side (graphmem/runtime_models/data_bounds.py): the
per-expert NonZero outputs of an exported expert loop sized by --moe-routing, found by the
graph's structure (TopK's indices, one-hot over the experts, moved and selected per expert),
never by names. tests/test_zoo_onnx.py checks the policies against onnxruntime's measured
peak over several input seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.routing import MoeRouting, parse_moe_routing
from graphmem.core.symbolic import SymInt
from graphmem.runtime_models.data_bounds import data_bounds
from tests.helpers.moe_onnx import moe_model

TOKENS, EXPERTS, TOP_K = 6, 4, 2


def value(name: str, *dims: int | str, dtype: DType = DType.INT64) -> Value:
    shape = tuple(SymInt.symbol(d) if isinstance(d, str) else SymInt.const(d) for d in dims)
    return Value(name, dtype, shape, Role.ACTIVATION)


def add(graph: Graph, op: str, inputs: list[Value], *outputs: Value,
        **attributes: int | tuple[int, ...]) -> None:
    node = Node(f"n{len(graph.nodes)}", op, inputs, [], attributes=dict(attributes))
    for out in outputs:
        node.add_output(out)
        graph.values[out.name] = out
    graph.add_node(node)


def router_graph() -> Graph:
    """transformers' eager experts as exported: probabilities [tokens, experts] -> TopK(2)
    -> OneHot over the experts [tokens, 2, experts] -> Transpose [experts, 2, tokens]; the
    experts hit (ReduceSum, Greater, NonZero); per expert Gather(e) -> Cast -> NonZero."""
    probs = value("p", TOKENS, EXPERTS, dtype=DType.FLOAT32)
    graph = Graph("g", [], {}, [probs], [])
    add(graph, "TopK", [probs, value("k", 1)], value("w", TOKENS, TOP_K, dtype=DType.FLOAT32),
        value("i", TOKENS, TOP_K), axis=-1)
    add(graph, "OneHot", [graph.values["i"], value("depth", 1), value("on_off", 2)],
        value("oh", TOKENS, TOP_K, EXPERTS))
    add(graph, "Transpose", [graph.values["oh"]], value("mask", EXPERTS, TOP_K, TOKENS),
        perm=(2, 1, 0))
    add(graph, "ReduceSum", [graph.values["mask"]], value("per_expert", EXPERTS))
    add(graph, "Greater", [graph.values["per_expert"]], value("hit", EXPERTS, dtype=DType.BOOL))
    add(graph, "NonZero", [graph.values["hit"]], value("experts_hit", 1, "h"))
    for e in range(EXPERTS):
        add(graph, "Gather", [graph.values["mask"], value(f"e{e}")],
            value(f"m{e}", TOP_K, TOKENS), axis=0)
        add(graph, "Cast", [graph.values[f"m{e}"]], value(f"b{e}", TOP_K, TOKENS,
                                                          dtype=DType.BOOL))
        add(graph, "NonZero", [graph.values[f"b{e}"]], value(f"idx{e}", 2, f"n{e}"))
    return graph


def sizes(routing: MoeRouting) -> list[int]:
    bound = data_bounds(router_graph(), {}, routing).bound
    assert bound["h"] == EXPERTS  # the experts hit: not a token list, at its bound
    return [bound[f"n{e}"] for e in range(EXPERTS)]


def test_balanced_spreads_the_choices() -> None:
    # 6 tokens x 2 choices over 4 experts: 12 / 4 = 3 each (the bound was 2 x 6 = 12 each)
    assert sizes(parse_moe_routing("balanced")) == [3, 3, 3, 3]


def test_worst_is_every_token_for_every_expert() -> None:
    # a token picks an expert once: at most 6 per expert, whatever the routing; the experts'
    # lists may be live together, so each is taken at 6
    assert sizes(parse_moe_routing("worst")) == [6, 6, 6, 6]


def test_capacity_fills_experts_in_order() -> None:
    # capacity 1.5: each expert at most ceil(1.5 * 12 / 4) = 5 tokens: 5 + 5 + 2 + 0 = 12
    assert sizes(parse_moe_routing("capacity=1.5")) == [5, 5, 2, 0]


def test_the_note_names_the_policy() -> None:
    note = data_bounds(router_graph(), {}, parse_moe_routing("balanced")).note()
    assert "4 NonZero outputs sized by a mixture of experts' router" in note
    assert "--moe-routing balanced" in note
    assert "1 NonZero output sized by the data" in note and "h=4" in note


def test_a_nonzero_not_fed_by_a_router_stays_at_its_bound() -> None:
    # the same mask summed before the NonZero: not data movement, so no router's count
    graph = router_graph()
    add(graph, "ReduceSum", [graph.values["m0"]], value("s", TOKENS))
    add(graph, "NonZero", [graph.values["s"]], value("idx_s", 1, "q"))
    assert data_bounds(graph, {}).bound["q"] == TOKENS


def test_the_warning_states_the_router_and_the_policy() -> None:
    # what the outputs warn, as the torch front end's router note does
    warning = data_bounds(router_graph(), {}, parse_moe_routing("worst")).warning()
    assert warning.startswith("mixture-of-experts routing is data: 4 experts' token lists")
    assert "top-2 of 4 over 6 tokens" in warning and "worst" in warning
    assert data_bounds(Graph("g", [], {}, [], []), {}).warning() == ""


def test_onnx_runtime_models_size_the_experts_by_the_policy(tmp_path: Path) -> None:
    # 64 tokens x top-2 of 4 experts; per expert its tokens [n, 16] gathered, [n, 256] up and
    # Relu'd (fp32): balanced n = 32, worst n = 64. The ort-cpu and ort-cuda peaks grow with n
    # and the warning names the policy
    import graphmem

    path = moe_model(tmp_path / "moe.onnx")
    for runtime, extra in (("ort-cpu", {"threads": 1}), ("ort-cuda", {"gpu": "t4"})):
        peaks = {}
        for routing in ("balanced", "worst"):
            result = graphmem.analyze_onnx(path, runtime=runtime, moe_routing=routing,
                                           **extra)
            assert result.runtime is not None, result.runtime_note
            peaks[routing] = result.runtime.runtime_peak_bytes
            assert any(f"assumed {routing}" in w for w in result.model.warnings)
        # at least the [n, 256] up-projection's 32 more rows: 32 * 256 * 4 = 32,768 B
        assert peaks["worst"] >= peaks["balanced"] + 32_768, (runtime, peaks)


@pytest.mark.ort
@pytest.mark.slow
def test_balanced_and_worst_bracket_onnxruntime_over_seeds(tmp_path: Path) -> None:
    # the router follows the data: over five input seeds onnxruntime's peak lies between
    # graphmem's balanced and worst predictions (ORT_DISABLE_ALL, one thread)
    from graphmem.api import analyze_onnx
    from graphmem.pipeline.runtime import runtime_estimate
    from graphmem.verify.onnx_run import input_specs
    from graphmem.verify.runners.onnxruntime_runner import run_onnx

    path = moe_model(tmp_path / "moe.onnx")
    predicted = {}
    for routing in ("balanced", "worst"):
        analysis = analyze_onnx(path, plan=False, moe_routing=routing)
        predicted[routing] = runtime_estimate(analysis, "ort-cpu", None, threads=1,
                                              ort_optimization="disabled").runtime_peak_bytes
    runs = [run_onnx(path, input_specs(analysis), "cpu", "disabled", 1, seed=seed).peak_bytes
            for seed in range(5)]
    assert predicted["balanced"] <= min(runs) and max(runs) <= predicted["worst"], (
        predicted, runs)
