"""Live bytes by role at each step, and the phases of a training step read from roles."""

from __future__ import annotations

import itertools

import pytest

from graphmem import analyze_onnx
from graphmem.core.ir import Role
from graphmem.passes.dims import value_bytes
from graphmem.passes.role_timeline import role_timeline, training_phases
from tests.builders import GraphBuilder, sizes_of
from tests.helpers.samples import SAMPLE_MODELS as SAMPLES


def test_roles_by_hand() -> None:
    b = GraphBuilder("train-like")
    b.tensor("x", 4, Role.INPUT)  # 16 B
    b.tensor("w", 10, Role.PARAMETER)  # 40 B
    b.node("fwd", ["x", "w"], {"a": 25})  # 100 B, read by bwd: a saved activation
    b.node("loss", ["a"], {"l": 1})  # 4 B
    b.node("bwd", ["l", "a"], {"g": 10})  # 40 B gradient of w
    graph = b.build(["g"])
    graph.values["a"].role = Role.SAVED_ACTIVATION
    graph.values["g"].role = Role.GRADIENT
    timeline = role_timeline(graph, sizes_of(graph))
    assert timeline.roles == (Role.PARAMETER, Role.INPUT, Role.GRADIENT,
                              Role.SAVED_ACTIVATION, Role.ACTIVATION)
    rows = [[int(b) for b in step] for step in timeline.bytes_per_step]
    # step 0: w 40, x 16, a 100; step 1: + l 4; step 2: l and a still read, g 40 made
    assert rows == [[40, 16, 0, 100, 0], [40, 16, 0, 100, 4], [40, 16, 40, 100, 4]]


@pytest.mark.slow
def test_roles_add_up_to_the_live_total_on_the_tiny_samples() -> None:
    for sample in [s for s in SAMPLES if s.name.startswith("tiny")]:
        analysis = analyze_onnx(sample, plan=False)
        timeline = role_timeline(analysis.graph, value_bytes(analysis.graph, analysis.dims))
        assert timeline.totals() == analysis.liveness.live_bytes_per_step, sample.name


@pytest.fixture(scope="module")
def traced_steps() -> dict[str, object]:
    torch = pytest.importorskip("torch")
    from graphmem.core.conventions import TrainingOptions as TrainConfig
    from graphmem.frontends.torch.fx_convert import graph_from_trace
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.frontends.torch.trace import trace_model
    from tests.models import TinyCNN

    torch.manual_seed(0)
    steps = {}
    for optimizer in ("sgd", "adam"):
        traced = trace_model(TinyCNN(), [parse_tensor_spec("2x3x16x16")],
                             TrainConfig(optimizer=optimizer, amp=None, loss=None))
        steps[optimizer] = (traced, graph_from_trace(traced, "TinyCNN"))
    return steps


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.torch
def test_phases_match_the_tracer_labels(traced_steps: dict[str, object], optimizer: str) -> None:
    from graphmem.frontends.torch.trace import PHASE_KEY

    traced, graph = traced_steps[optimizer]  # type: ignore[misc]
    labels = {n.name: n.meta["custom"][PHASE_KEY] for n in traced.graph_module.graph.nodes
              if PHASE_KEY in n.meta.get("custom", {})}
    spans = training_phases(graph)
    assert [s.phase for s in spans] == ["forward", "backward", "optimizer"]
    assert spans[0].first_step == 0 and spans[-1].last_step == len(graph.nodes) - 1
    assert all(a.last_step + 1 == b.first_step for a, b in itertools.pairwise(spans))
    for span in spans:
        for node in graph.nodes[span.first_step: span.last_step + 1]:
            if node.name in labels:  # nodes traced outside every phase carry no label
                assert labels[node.name] == span.phase, node.name


def test_inference_has_no_phases() -> None:
    analysis = analyze_onnx(SAMPLES[0], plan=False)
    assert training_phases(analysis.graph) == ()
