"""The op registry: loaded explicitly and the same whatever was imported first; every rule is
registered inside graphmem/ops; duplicates are refused; backward nodes priced by their rule."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.ops import find_backward_rule, find_rule, registry
from graphmem.ops.registry import (
    BACKWARD_DOMAIN,
    BackwardRule,
    backward_domain,
    backward_node_cost,
    forward_domain,
    pointwise_backward_flops,
    register_backward,
    register_traits,
    registered_specs,
)
from graphmem.ops.training import FUSED_OP, TRAINING_DOMAIN
from graphmem.passes.costs import compute_costs
from graphmem.training.expand import TrainingConfig, expand_training

ROOT = Path(__file__).resolve().parent.parent
TRAINING_OPS = [("", "NegativeLogLikelihoodLoss"), ("", "SoftmaxCrossEntropyLoss"),
                (TRAINING_DOMAIN, "OptimizerStep"), (TRAINING_DOMAIN, "OptimizerTemporaries"),
                (TRAINING_DOMAIN, "GradSeed"), (TRAINING_DOMAIN, "GradBuffers"),
                (TRAINING_DOMAIN, "GradAccumulate"), (TRAINING_DOMAIN, FUSED_OP)]


def run_python(code: str) -> str:
    """`code` in a fresh interpreter (nothing imported before it); its stdout."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# ----- loaded explicitly ----------------------------------------------------------------------
@pytest.mark.slow
def test_training_rules_are_found_right_after_import_graphmem() -> None:
    found = run_python(
        "import graphmem\n"
        "from graphmem.ops import find_backward_rule, find_rule\n"
        f"ops = {TRAINING_OPS!r}\n"
        "print(all(find_rule(op, domain) is not None for domain, op in ops))\n"
        "print(find_backward_rule('NegativeLogLikelihoodLoss') is not None)\n"
        f"print(find_backward_rule({FUSED_OP!r}, {TRAINING_DOMAIN!r}) is not None)\n")
    assert found.split() == ["True", "True", "True"]


def nll_model(path: Path) -> Path:
    """logits [4, 10] -> LogSoftmax -> NegativeLogLikelihoodLoss(targets [4]) -> loss."""
    nodes = [helper.make_node("LogSoftmax", ["logits"], ["log_probs"], name="log_softmax",
                              axis=-1),
             helper.make_node("NegativeLogLikelihoodLoss", ["log_probs", "targets"], ["loss"],
                              name="nll", reduction="mean")]
    graph = helper.make_graph(
        nodes, "nll",
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 10]),
         helper.make_tensor_value_info("targets", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("first_import", ["graphmem", "graphmem.training.expand",
                                          "graphmem.ops.aten", "graphmem.ops.training"])
def test_an_inference_graph_with_a_loss_costs_the_same_whatever_was_imported(
        first_import: str, tmp_path: Path) -> None:
    path = nll_model(tmp_path / "nll.onnx")
    printed = run_python(
        f"import {first_import}\n"
        "from graphmem.frontends.onnx.importer import import_onnx\n"
        "from graphmem.passes.costs import compute_costs\n"
        f"costs = compute_costs(import_onnx({str(path)!r}).graph)\n"
        "print(int(costs.total_flops), costs.unsupported_ops)\n")
    # LogSoftmax [4, 10]: 40 elements x 5 = 200; NLL: one pick per target, 4 x 1 = 4
    assert printed == "204 {}"


def registry_fingerprint(first_import: str) -> str:
    return run_python(
        f"import {first_import}\n"
        "from graphmem.ops.registry import registered_specs\n"
        "for s in registered_specs():\n"
        "    print(s.domain, s.op_type, s.cost is not None, s.backward is not None,"
        " s.traits, s.canonical)\n")


@pytest.mark.slow
def test_the_registry_does_not_depend_on_import_order() -> None:
    fingerprints = {registry_fingerprint(module) for module in
                    ("graphmem.ops.aten", "graphmem.training.fusion",
                     "graphmem.suggest.inplace")}
    assert len(fingerprints) == 1
    assert len(next(iter(fingerprints)).splitlines()) == len(registered_specs())


def test_load_all_is_idempotent() -> None:
    before = registered_specs()
    registry.load_all()
    registry.load_all()
    assert registered_specs() == before


# ----- registered only inside graphmem/ops ----------------------------------------------------
REGISTRATIONS = frozenset({"register", "register_backward", "register_traits",
                           "register_canonical", "_RULES", "_update"})


def registrations_outside_ops() -> list[str]:
    """Every import or use of a registration function outside graphmem/ops."""
    found = []
    for path in sorted((ROOT / "graphmem").rglob("*.py")):
        if path.parent == ROOT / "graphmem" / "ops":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("graphmem.ops"):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in ("registry", "ops"):
                names = [node.attr]
            line = getattr(node, "lineno", 0)
            found += [f"{path.relative_to(ROOT)}:{line} {name}" for name in names
                      if name in REGISTRATIONS]
    return found


def test_no_rule_is_registered_outside_graphmem_ops() -> None:
    assert registrations_outside_ops() == []


# ----- duplicates are refused -----------------------------------------------------------------
def test_duplicate_backward_and_traits_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_RULES", dict(registry._RULES))  # leave the real one alone
    rule = BackwardRule((), pointwise_backward_flops(1))
    register_backward("GraphmemTestOp", domain="graphmem.test")(rule)
    with pytest.raises(ValueError, match="registered twice"):
        register_backward("GraphmemTestOp", domain="graphmem.test")(rule)
    with pytest.raises(ValueError, match="registered twice"):
        register_backward("Relu")(rule)  # a real family's op
    register_traits("GraphmemTestOp", domain="graphmem.test", commutative=True)
    register_traits("GraphmemTestOp", domain="graphmem.test", runs_on_cublas=True)  # another
    with pytest.raises(ValueError, match=r"trait commutative .* registered twice"):
        register_traits("GraphmemTestOp", domain="graphmem.test", commutative=True)
    with pytest.raises(ValueError, match="registered twice"):
        register_traits("MatMul", runs_on_cublas=True)  # linear.py declares it


# ----- backward nodes -------------------------------------------------------------------------
@pytest.mark.parametrize("domain", ["", "ai.onnx", "com.microsoft", TRAINING_DOMAIN])
def test_backward_domains_round_trip(domain: str) -> None:
    back = backward_domain(domain)
    assert back.startswith(BACKWARD_DOMAIN)
    assert forward_domain(back) == ("" if domain == "ai.onnx" else domain)
    assert forward_domain(domain) is None


def test_a_backward_node_is_priced_by_its_forward_ops_backward_rule() -> None:
    assert find_rule("MatMul", BACKWARD_DOMAIN) is backward_node_cost
    assert find_rule(FUSED_OP, backward_domain(TRAINING_DOMAIN)) is backward_node_cost
    assert find_rule("Shape", BACKWARD_DOMAIN) is None  # no backward rule: unsupported


def mlp_path(tmp_path: Path) -> Path:
    """x [4, 8] -> MatMul w1 [8, 16] -> Relu -> MatMul w2 [16, 10] -> y [4, 10]."""
    weights = [helper.make_tensor(name, TensorProto.FLOAT, dims, [0.0] * (dims[0] * dims[1]))
               for name, dims in (("w1", (8, 16)), ("w2", (16, 10)))]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], initializer=weights)
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_backward_node_flops_in_a_training_step(tmp_path: Path) -> None:
    source = import_onnx(mlp_path(tmp_path)).graph
    graph = expand_training(source, TrainingConfig(optimizer="sgd")).graph
    costs = {cost.name: cost for cost in compute_costs(graph).nodes}
    # fc2's backward: grad_r = grad_y @ w2^T and grad_w2 = r^T @ grad_y, each the forward's
    # 4 * 10 * 16 = 640 MACs: 1280 MACs, 2560 FLOPs
    assert int(costs["fc2/backward"].macs) == 1280
    assert int(costs["fc2/backward"].flops) == 2560
    # fc1's backward: only w1 needs a gradient (x is an input): 4 * 16 * 8 = 512 MACs
    assert int(costs["fc1/backward"].macs) == 512
    # relu's backward: threshold_backward(grad, result), 1 FLOP per element: 4 * 16 = 64
    assert int(costs["relu/backward"].flops) == 64
    assert compute_costs(graph).unsupported_ops == {}


def test_backward_node_cost_of_a_plain_node_is_zero() -> None:
    x = Value("x", DType.FLOAT32, (SymInt.const(4),), Role.ACTIVATION)
    plain = Node("n", "Relu", [x], [x], domain=BACKWARD_DOMAIN)  # no forward node to read
    assert int(backward_node_cost(plain).flops) == 0
    assert find_backward_rule("Relu") is not None


def test_softmax_cross_entropy_loss_is_log_softmax_then_nll() -> None:
    def tensor(*shape: int) -> Value:
        return Value("t", DType.FLOAT32, tuple(SymInt.const(d) for d in shape), Role.ACTIVATION)

    loss = Node("sce", "SoftmaxCrossEntropyLoss", [tensor(4, 10), tensor(4)], [tensor()])
    rule = find_rule("SoftmaxCrossEntropyLoss")
    assert rule is not None
    # LogSoftmax over the 10 classes of 4 rows: 40 x 5 = 200; one pick per label: 4
    assert int(rule(loss).flops) == 204
