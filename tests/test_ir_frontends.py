"""Every front end and every training expansion builds a graph that passes Graph.check(), with
each node's phase set; the phases agree with the four heuristics they replace.

The heuristics below are copied from the modules before Node.phase existed (git 43461f5):
suggest/candidates.py `forward_nodes`, passes/role_timeline.py `training_phases`,
runtime_models/torch_cuda.py `_is_backward`, suggest/onnx_candidates.py `model_forward`.
Where they disagree with the phases, the heuristic was wrong, and each case says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from graphmem.core.ir import Graph, Node, Phase, Role
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.passes.role_timeline import training_phases
from graphmem.suggest.candidates import forward_nodes
from graphmem.suggest.onnx_candidates import model_forward
from graphmem.training.expand import TrainingConfig, expand_training

# imports every sample (gpt2 and resnet50 included) and traces six PyTorch steps
pytestmark = pytest.mark.slow

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "samples").glob("*.onnx"))
TINY = [s for s in SAMPLES if s.name.startswith("tiny_")]
_GRADIENTS = frozenset({Role.GRADIENT, Role.ACTIVATION_GRADIENT})
# torch_cuda's cuBLAS ops before the op traits (the heuristic's only use is on these)
_CUBLAS_OPS = frozenset({
    "aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default",
    "aten.matmul.default", "aten.linear.default", "aten.addbmm.default",
    "MatMul", "Gemm", "FusedMatMul"})


# ----- the heuristics Node.phase replaces ----------------------------------------------------
def old_forward_nodes(graph: Graph) -> list[Node]:
    for step, node in enumerate(graph.nodes):
        if node.present_inputs and any(
                v.alias_of is None and v.role in _GRADIENTS for v in node.outputs):
            return graph.nodes[:step]
    return list(graph.nodes)


def old_training_phases(graph: Graph) -> list[tuple[str, int, int]]:
    def is_backward(node: Node) -> bool:
        if not node.present_inputs:
            return False
        makes = any(v.alias_of is None and v.role in _GRADIENTS for v in node.outputs)
        views = bool(node.outputs) and all(
            v.alias_of is not None and v.storage.role in _GRADIENTS for v in node.outputs)
        return makes or views

    marks = [is_backward(node) for node in graph.nodes]
    if not any(marks):
        return []
    first, last = marks.index(True), len(marks) - 1 - marks[::-1].index(True)
    spans = [("forward", 0, first - 1), ("backward", first, last),
             ("optimizer", last + 1, len(marks) - 1)]
    return [s for s in spans if s[1] <= s[2]]


def old_torch_cuda_backward(node: Node) -> bool:
    return any(value.role in _GRADIENTS for value in node.outputs)


def old_model_forward(graph: Graph) -> list[Node]:
    return [n for n in old_forward_nodes(graph)
            if not n.name.startswith("loss/") and n.domain != "graphmem.training"]


def phases_of(graph: Graph) -> list[tuple[str, int, int]]:
    return [(str(s.phase), s.first_step, s.last_step) for s in training_phases(graph)]


def cublas_backward(graph: Graph) -> dict[str, bool]:
    return {n.name: n.phase is Phase.BACKWARD for n in graph.nodes if n.op_type in _CUBLAS_OPS}


def old_cublas_backward(graph: Graph) -> dict[str, bool]:
    return {n.name: old_torch_cuda_backward(n) for n in graph.nodes if n.op_type in _CUBLAS_OPS}


# ----- ONNX: every sample, and training expansions of the small ones ---------------------------
@pytest.fixture(scope="module")
def imported() -> dict[str, Graph]:
    return {path.name: import_onnx(path).graph for path in SAMPLES}


def test_every_sample_imports_a_checked_inference_graph(imported: dict[str, Graph]) -> None:
    assert len(imported) >= 10
    for name, graph in imported.items():
        graph.check()
        assert all(node.phase is Phase.NONE for node in graph.nodes), name
        # inference: the heuristics found no gradient either
        assert training_phases(graph) == () and old_training_phases(graph) == [], name
        assert forward_nodes(graph) == old_forward_nodes(graph) == graph.nodes, name


EXPANSIONS = {
    "sgd": TrainingConfig(optimizer="sgd"),
    "adam": TrainingConfig(optimizer="adam"),
    "adamw-bf16": TrainingConfig(optimizer="adamw", amp="bf16"),
    "momentum-accum": TrainingConfig(optimizer="momentum", grad_accum=3),
}


@dataclass(frozen=True)
class Expanded:
    sample: str
    config: str
    graph: Graph


@pytest.fixture(scope="module")
def expanded(imported: dict[str, Graph]) -> list[Expanded]:
    found = []
    for path in TINY:
        for label, config in EXPANSIONS.items():
            graph = expand_training(import_onnx(path).graph, config).graph
            found.append(Expanded(path.name, label, graph))
    return found


@pytest.mark.slow
def test_every_expansion_is_checked_and_leaves_its_source_intact(
        imported: dict[str, Graph], expanded: list[Expanded]) -> None:
    for case in expanded:
        case.graph.check()
        assert all(node.phase is not Phase.NONE for node in case.graph.nodes), case
    for path in TINY:  # expanding links nothing into the inference graph it copies
        source = import_onnx(path).graph
        expand_training(source, EXPANSIONS["adam"])
        source.check()


def test_checkpointed_expansions_are_checked() -> None:
    source = import_onnx(next(s for s in TINY if s.name == "tiny_gpt.onnx")).graph
    modules = sorted({n.module_path for n in source.nodes if n.module_path.count(".") == 1})
    assert modules
    graph = expand_training(source, TrainingConfig(checkpoints=tuple(modules[:2]))).graph
    graph.check()
    recomputed = [n for n in graph.nodes if n.name.endswith("/recompute")]
    assert recomputed and all(n.phase is Phase.BACKWARD and n.origin is None
                              for n in recomputed)
    # The old torch_cuda heuristic put recomputed matmuls on the forward thread (they make no
    # gradient); they run during backward, on autograd's thread, as their phase says.
    matmuls = [n for n in recomputed if n.op_type in _CUBLAS_OPS]
    assert matmuls and not any(old_torch_cuda_backward(n) for n in matmuls)


def test_onnx_phases_match_the_old_heuristics(expanded: list[Expanded]) -> None:
    for case in expanded:
        graph, label = case.graph, f"{case.sample} {case.config}"
        assert phases_of(graph) == old_training_phases(graph), label
        # The old model_forward dropped the whole graphmem.training domain to leave out the
        # .grad buffers, and with them the fused activations (FusedPointwise, tanh-GELU...):
        # the dataflow graph the single-tensor cuts come from had holes there.
        unfused = [n for n in model_forward(graph) if n.op_type != "FusedPointwise"]
        assert unfused == old_model_forward(graph), label
        assert cublas_backward(graph) == old_cublas_backward(graph), label
        if case.config.endswith("accum"):
            # the .grad buffers node (step 0, BACKWARD like the tracer's `.grad` sums) was
            # counted as forward by the old heuristic: the forward pass itself is the same
            assert graph.nodes[0].op_type == "GradBuffers"
            assert forward_nodes(graph) == old_forward_nodes(graph)[1:], label
        else:
            assert forward_nodes(graph) == old_forward_nodes(graph), label


def test_the_model_forward_keeps_fused_activations(expanded: list[Expanded]) -> None:
    fused = [n for case in expanded for n in model_forward(case.graph)
             if n.op_type == "FusedPointwise"]
    assert fused and all(n.phase is Phase.FORWARD for n in fused)


def test_backward_nodes_know_their_forward_node(expanded: list[Expanded]) -> None:
    for case in expanded:
        nodes = set(case.graph.nodes)
        differentiating = [n for n in case.graph.nodes if n.origin is not None]
        assert differentiating, case
        for node in differentiating:
            assert node.phase is Phase.BACKWARD and node.name == f"{node.origin.name}/backward"
            assert node.origin in nodes and node.origin.phase is Phase.FORWARD
            assert node.needs_grad and max(node.needs_grad) < len(node.origin.inputs)


@pytest.mark.ort
def test_onnx_runtime_graph_is_checked() -> None:
    pytest.importorskip("onnxruntime")
    from graphmem.frontends.onnx.ort_optimized import optimized_graph

    for name in ("tiny_cnn.onnx", "tiny_gpt.onnx"):
        optimized = optimized_graph(next(s for s in SAMPLES if s.name == name), "all")
        optimized.graph.check()  # restore_nodes relinked the contrib nodes' inputs


# ----- torch: traced inference and training steps ----------------------------------------------
TRACES = {  # label -> (model factory name, input, training options or None)
    "cnn inference": ("TinyCNN", "2x3x16x16", None),
    "cnn sgd": ("TinyCNN", "2x3x16x16", {"optimizer": "sgd"}),
    "cnn adam": ("TinyCNN", "2x3x16x16", {"optimizer": "adam"}),
    "cnn adam bf16": ("TinyCNN", "2x3x16x16", {"optimizer": "adam", "amp": "bf16"}),
    "cnn adam accum": ("TinyCNN", "2x3x16x16", {"optimizer": "adam", "grad_accum": 2}),
    "gpt adamw": ("TinyGPT", "2x16:int64", {"optimizer": "adamw"}),
}


@pytest.fixture(scope="module")
def traced() -> dict[str, Graph]:
    torch = pytest.importorskip("torch")
    from graphmem.core.conventions import TrainingOptions
    from graphmem.frontends.torch.fx_convert import graph_from_trace
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.frontends.torch.trace import trace_model
    from tests.models import TinyCNN
    from tests.torch_models.small import TinyGPT

    factories = {"TinyCNN": TinyCNN, "TinyGPT": TinyGPT}
    graphs = {}
    for label, (model, spec, options) in TRACES.items():
        torch.manual_seed(0)
        train = TrainingOptions(**options) if options is not None else None  # type: ignore[arg-type]
        step = trace_model(factories[model](), [parse_tensor_spec(spec)], train)
        graphs[label] = graph_from_trace(step, label)
    return graphs


@pytest.mark.slow
@pytest.mark.torch
def test_every_trace_is_checked(traced: dict[str, Graph]) -> None:
    for label, graph in traced.items():
        graph.check()
        phases = {node.phase for node in graph.nodes}
        if label.endswith("inference"):
            assert phases == {Phase.NONE}, label
        else:
            assert phases == {Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER}, label


@pytest.mark.torch
def test_torch_phases_match_the_old_heuristics(traced: dict[str, Graph]) -> None:
    for label, graph in traced.items():
        assert cublas_backward(graph) == old_cublas_backward(graph), label
        if label.endswith("accum"):
            continue  # below
        assert phases_of(graph) == old_training_phases(graph), label
        assert forward_nodes(graph) == old_forward_nodes(graph), label


@pytest.mark.torch
def test_torch_gradient_accumulation_phases(traced: dict[str, Graph]) -> None:
    # The traced step starts with the `.grad` sums of the earlier micro-batches (zeros_like of
    # each parameter, BACKWARD in the tracer). They read a parameter and make a gradient, so
    # the old heuristics saw backward from step 0: no forward pass at all (no checkpoint
    # candidates) and no forward span. The phases keep the forward where it is.
    graph = traced["cnn adam accum"]
    assert old_forward_nodes(graph) == []
    assert [span[0] for span in old_training_phases(graph)] == ["backward", "optimizer"]
    prelude = graph.nodes[: graph.nodes.index(forward_nodes(graph)[0])]
    assert prelude and all(n.phase is Phase.BACKWARD and "zeros_like" in n.op_type
                           for n in prelude)
    same_model = [n.op_type for n in old_forward_nodes(traced["cnn adam"])]
    assert [n.op_type for n in forward_nodes(graph)] == same_model != []
    assert [s.phase for s in training_phases(graph)] == ["forward", "backward", "optimizer"]
