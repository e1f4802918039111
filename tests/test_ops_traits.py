"""Op traits: one answer for both vocabularies (ONNX `MatMul`, aten `aten.mm.default`).

The tables below are the op-name sets passes kept by hand before the traits existed
(graphmem/suggest/layer_hints.py, distributed/model_states.py, suggest/inplace.py,
runtime_models/torch_cuda.py, training/precision.py, suggest/candidates.py): the traits must
answer what those sets answered for every op they listed.
"""

from __future__ import annotations

import pytest

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops import Autocast, Contraction, find_rule, op_name, spec_of, traits_of
from graphmem.ops.registry import (
    ATEN_DOMAIN,
    BACKWARD_DOMAIN,
    Traits,
    backward_domain,
    registered_specs,
)
from graphmem.training.precision import op_precision

MS = "com.microsoft"


def node(op: str, domain: str | None = None) -> Node:
    """An aten packet name becomes `aten.<name>.default` in domain aten; CamelCase is ONNX."""
    x = Value("x", DType.FLOAT32, (SymInt.const(4),), Role.ACTIVATION)
    if op[0].islower() or op.startswith("_"):
        return Node(op, f"aten.{op}.default", [x], [x], domain=ATEN_DOMAIN)
    return Node(op, op, [x], [x], domain=domain or "")


# ----- the old hand-kept sets -----------------------------------------------------------------
LAYER_HINTS_MATMUL = {"addmm", "mm", "linear", "Gemm", "MatMul"}
LAYER_HINTS_FLATTEN = {"view", "reshape", "flatten", "_unsafe_view", "Flatten", "Reshape"}
LAYER_HINTS_CONV = {"convolution", "conv2d", "Conv"}
MODEL_STATES_MATMUL = {"mm", "addmm", "matmul", "linear", "bmm", "MatMul", "Gemm"}
MODEL_STATES_EMBEDDING = {"embedding", "Gather"}
INPLACE_OPS = {
    "relu", "relu6", "hardtanh", "leaky_relu", "elu", "silu", "hardswish", "hardsigmoid",
    "sigmoid", "tanh", "clamp", "clamp_min", "clamp_max", "add", "sub", "mul", "div", "neg",
    "exp", "Relu", "LeakyRelu", "Elu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Clip",
    "Add", "Sub", "Mul", "Div", "Neg", "Exp",
}
COMMUTATIVE_OPS = {"add", "mul", "Add", "Mul"}
CUBLAS_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "MatMul", "Gemm"}
CUBLASLT_OPS = {"addmm", "linear", "Gemm"}
LOWER_PRECISION_OPS = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"}
FLOAT32_OPS_CUDA = {"Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization",
                    "InstanceNormalization", "RMSNormalization", "LpNormalization",
                    "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "Pow", "Exp", "Log",
                    "ReduceL2", "ReduceLogSumExp", "Softplus"}
FLOAT32_OPS_CPU = {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}
# in-place aten forms (candidates.py: "its overload packet ends in `_`")
INPLACE_FORMS = {"add_", "mul_", "relu_", "copy_", "index_put_", "_foreach_add_", "__iand__"}


@pytest.mark.parametrize("op", sorted(LAYER_HINTS_MATMUL | MODEL_STATES_MATMUL))
def test_matmuls(op: str) -> None:
    assert traits_of(node(op)).contraction is Contraction.MATMUL


@pytest.mark.parametrize("op", sorted(LAYER_HINTS_FLATTEN))
def test_flattening_reshapes(op: str) -> None:
    assert traits_of(node(op)).reshape


@pytest.mark.parametrize("op", sorted(LAYER_HINTS_CONV))
def test_convolutions(op: str) -> None:
    assert traits_of(node(op)).contraction is Contraction.CONV


@pytest.mark.parametrize("op", sorted(MODEL_STATES_EMBEDDING))
def test_embeddings_gather_rows(op: str) -> None:
    assert traits_of(node(op)).row_gather


@pytest.mark.parametrize("op", sorted(INPLACE_OPS))
def test_ops_with_an_inplace_form(op: str) -> None:
    traits = traits_of(node(op))
    assert traits.inplace_variant
    assert traits.commutative == (op in COMMUTATIVE_OPS)
    assert not traits.is_inplace  # relu has an in-place form; relu_ is one


def test_inplace_variant_names() -> None:
    assert traits_of(node("Relu")).inplace_variant == "relu_"
    assert traits_of(node("Clip")).inplace_variant == "clamp_"
    assert traits_of(node("clamp_min")).inplace_variant == "clamp_min_"


@pytest.mark.parametrize("op", sorted(CUBLAS_OPS))
def test_cublas(op: str) -> None:
    traits = traits_of(node(op))
    assert traits.runs_on_cublas
    assert traits.runs_on_cublaslt == (op in CUBLASLT_OPS)


def test_fused_matmul_is_a_cublas_half_matmul() -> None:
    traits = traits_of(node("FusedMatMul", MS))
    assert traits.runs_on_cublas and traits.contraction is Contraction.MATMUL
    assert traits.autocast("cuda") is traits.autocast("cpu") is Autocast.HALF
    assert traits_of(node("FusedMatMul")) == Traits()  # not an op of the default domain


@pytest.mark.parametrize("op", sorted(LOWER_PRECISION_OPS | FLOAT32_OPS_CUDA | {"Relu", "Add"}))
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_autocast_policy(op: str, device: str) -> None:
    expected = Autocast.PROMOTE
    if op in LOWER_PRECISION_OPS:
        expected = Autocast.HALF
    elif op in (FLOAT32_OPS_CUDA if device == "cuda" else FLOAT32_OPS_CPU):
        expected = Autocast.FLOAT32
    assert op_precision(node(op), device) is expected


@pytest.mark.parametrize("op", sorted(INPLACE_FORMS))
def test_inplace_forms(op: str) -> None:
    assert traits_of(node(op)).is_inplace


@pytest.mark.parametrize("op", ["add", "relu", "__and__", "mm", "Add", "Relu"])
def test_not_inplace_forms(op: str) -> None:
    assert not traits_of(node(op)).is_inplace


def test_nothing_special_about_other_ops() -> None:
    assert traits_of(node("Relu")).contraction is None
    assert traits_of(node("ConvTranspose")).contraction is Contraction.CONV_TRANSPOSE
    assert not traits_of(node("Conv")).runs_on_cublas
    assert traits_of(node("NoSuchOp")) == Traits()
    assert traits_of(node("no_such_op")) == Traits()


# ----- both vocabularies, one answer ----------------------------------------------------------
def test_op_name_reads_both_vocabularies() -> None:
    assert op_name(node("addmm")) == "addmm"
    assert op_name(node("Gemm")) == "Gemm"
    assert op_name(Node("n", "aten.add_.Tensor", [], [], domain=ATEN_DOMAIN)) == "add_"
    # a builder that leaves the domain out still names an aten op by its packet
    assert op_name(Node("n", "aten.mm.default", [], [])) == "mm"


@pytest.mark.parametrize(("aten", "onnx"), [("addmm", "Gemm"), ("mm", "MatMul"),
                                            ("native_layer_norm", "LayerNormalization"),
                                            ("_softmax", "Softmax"), ("convolution", "Conv")])
def test_an_aten_op_shares_its_canonical_ops_traits(aten: str, onnx: str) -> None:
    spec = spec_of(node(aten))
    assert spec is not None and spec.canonical == onnx
    assert traits_of(node(aten)) == traits_of(node(onnx))


def test_a_backward_node_keeps_only_its_contraction_traits() -> None:
    backward_matmul = Node("fc/backward", "MatMul", [], [], domain=BACKWARD_DOMAIN)
    traits = traits_of(backward_matmul)
    assert traits.contraction is Contraction.MATMUL and traits.runs_on_cublas
    assert traits.autocast("cuda") is Autocast.PROMOTE
    backward_add = Node("add/backward", "Add", [], [], domain=backward_domain(""))
    assert traits_of(backward_add) == Traits()  # the gradient of add is no in-place add


# ----- every op a trait names has a cost rule -------------------------------------------------
def test_every_op_with_a_trait_has_a_cost_rule() -> None:
    missing = []
    for spec in registered_specs():
        if spec.traits == Traits():
            continue
        if spec.domain == ATEN_DOMAIN:  # priced by the torch path; its math is the canonical's
            has_rule = bool(spec.canonical) and find_rule(spec.canonical) is not None
        else:
            has_rule = spec.cost is not None
        if not has_rule:
            missing.append(f"{spec.domain}:{spec.op_type}")
    assert missing == []


def test_views_are_the_ops_pytorch_runs_as_views() -> None:
    # the view trait of an ONNX op comes from its backward rule (one declaration)
    for spec in registered_specs():
        if spec.domain != ATEN_DOMAIN:
            assert spec.traits.view == bool(spec.backward and spec.backward.view), spec.op_type
    assert {s.op_type for s in registered_specs() if s.traits.view and s.domain == ""} == {
        "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Split", "Slice", "Expand",
        "Identity"}
