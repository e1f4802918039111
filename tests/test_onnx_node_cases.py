"""onnx's own operator tests through graphmem's ONNX analysis.

onnx ships a node test case for every operator feature up to its newest opset
(`onnx.backend.test.case.node.collect_testcases`: 1,884 single-op models with onnx 1.23) and
model test data (149 models under onnx/backend/test/data). Every one analyses without a crash
(one clean refusal, named below) and with no unsupported op: every op of the standard has a
cost rule (docs/onnx-ops.md). The quick run analyses the first case of each op that came with
this coverage; the whole set is slow (about a minute).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import onnx
import pytest
from onnx.backend.test.case.node import collect_testcases

import graphmem
from graphmem.api import Result
from graphmem.errors import GraphmemError
from graphmem.ops import find_rule
from graphmem.passes.costs import CostStatus

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
# cases graphmem refuses with one clear error line, and why
REFUSED = {"test_constant": "holds only Constant nodes: nothing runs"}
# ops priced by the control-flow pass from their bodies, not by a rule of their own
BODY_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
# nodes with a body the costs pass flags instead of pricing (graphmem/passes/costs.py):
# FlexAttention with a score_mod or prob_mod graph
FLAGGED_WITH_BODY = frozenset({"SequenceMap", "FlexAttention"})
# ops whose output sizes only the data knows: their tensors are listed as unknown-size
# (string tensors; ImageDecoder's image, StringSplit's pieces)
SIZE_FROM_DATA = frozenset({"StringConcat", "StringSplit", "StringNormalizer", "RegexFullMatch",
                            "LabelEncoder", "ImageDecoder"})
# the ops that had no rule before this coverage (issue 22): the quick run's subset
NEWLY_COVERED = frozenset({
    "AffineGrid", "Bernoulli", "BitCast", "BlackmanWindow", "CausalConvWithState", "Col2Im",
    "CumProd", "DFT", "DeformConv", "Det", "GRU", "HammingWindow", "HannWindow", "ImageDecoder",
    "LSTM", "LinearAttention", "MeanVarianceNormalization", "MelWeightMatrix", "RNN",
    "RandomUniformLike", "RegexFullMatch", "STFT", "StringConcat", "StringNormalizer",
    "StringSplit", "SwiGLU", "TensorScatter", "TfIdfVectorizer", "ArrayFeatureExtractor",
    "Binarizer", "LabelEncoder", "TreeEnsemble", "FlexAttention", "Adagrad", "Adam", "Momentum",
})
# the only cases with nodes no inference engine shapes (their FLOPs are then listed as not
# counted), and why: docs/onnx-ops.md
SHAPES_UNKNOWN = {
    "test_affine_grid_2d_expanded": "AffineGrid's function body: a Range over data",
    "test_affine_grid_2d_align_corners_expanded": "the same",
    "test_affine_grid_3d_expanded": "the same",
    "test_affine_grid_3d_align_corners_expanded": "the same",
    "test_reduce_l2_do_not_keepdims_example_expanded": "a reduction's function, keepdims=0",
    "test_reduce_l2_do_not_keepdims_random_expanded": "the same",
    "test_reduce_log_sum_exp_do_not_keepdims_example_expanded": "the same",
    "test_reduce_log_sum_exp_do_not_keepdims_random_expanded": "the same",
    "test_identity_sequence": "Identity of a sequence: no tensor shape",
    "test_identity_opt": "Identity of an optional: no tensor shape",
}
MAX_SECONDS_PER_MODEL = 5.0  # a single-op model is milliseconds; this catches a runaway rule


@cache
def node_cases() -> dict[str, onnx.ModelProto]:
    with warnings.catch_warnings():  # onnx computes the expected outputs: inf, nan, overflow
        warnings.simplefilter("ignore", RuntimeWarning)
        cases = collect_testcases(None)
    return {case.name: case.model for case in cases if case.model is not None}


def model_data_paths() -> list[Path]:
    return sorted([*ONNX_DATA.glob("*/*.onnx"), *ONNX_DATA.glob("*/*/model.onnx")])


def first_case_per_new_op() -> list[str]:
    chosen: dict[str, str] = {}
    for name, model in node_cases().items():
        for node in model.graph.node:
            if node.op_type in NEWLY_COVERED and "expanded" not in name:
                chosen.setdefault(node.op_type, name)
    return sorted(set(chosen.values()))


def analyse(model: onnx.ModelProto, folder: Path, name: str) -> Result:
    path = folder / f"{name}.onnx"
    onnx.save(model, path)
    return graphmem.analyze_onnx(path)


def problems(result: Result) -> Iterator[str]:
    """What an analysis of one of onnx's models should not show."""
    yield from (f"unsupported {op}" for op in result.costs.unsupported_ops)
    unknown_size = set(result.liveness.unknown_size_values)
    for cost, node in zip(result.costs.nodes, result.graph.nodes, strict=True):
        if cost.status is CostStatus.SUBGRAPH and cost.op_type not in FLAGGED_WITH_BODY | BODY_OPS:
            yield f"{cost.op_type} flagged as a subgraph: {cost.note}"
        if cost.op_type not in NEWLY_COVERED or cost.op_type in FLAGGED_WITH_BODY:
            continue
        if cost.status is not CostStatus.OK:
            yield f"{cost.op_type}: {cost.status.value} ({cost.note})"
        for value in node.outputs:  # memory: every output's size known, or said unknown
            if value.nbytes is None and value.name not in unknown_size:
                yield f"{cost.op_type}: {value.name} has no size and is not listed as unknown"
            if value.nbytes is None and cost.op_type not in SIZE_FROM_DATA:
                yield f"{cost.op_type}: the size of output {value.name} is unknown"


def test_every_op_of_the_standard_has_a_rule() -> None:
    # every op of every opset onnx defines, in every domain (ai.onnx, ai.onnx.ml,
    # ai.onnx.preview, ai.onnx.preview.training), deprecated ones included
    ops = {(schema.domain, schema.name) for schema in onnx.defs.get_all_schemas_with_history()}
    missing = sorted(f"{domain}:{name}" for domain, name in ops
                     if name not in BODY_OPS and find_rule(name, domain) is None)
    assert missing == []


@pytest.mark.parametrize("name", first_case_per_new_op())
def test_first_case_of_each_newly_covered_op(name: str, tmp_path: Path) -> None:
    assert list(problems(analyse(node_cases()[name], tmp_path, name))) == []


@pytest.mark.slow
def test_every_node_case_analyses(tmp_path: Path) -> None:
    failures: dict[str, str] = {}
    for name, model in node_cases().items():
        start = time.perf_counter()
        try:
            result = analyse(model, tmp_path, name)
            found = list(problems(result))
            if result.costs.shape_unknown_nodes and name not in SHAPES_UNKNOWN:
                found.append(f"shapes unknown: {result.costs.shape_unknown_nodes}")
        except GraphmemError as error:
            found = [] if name in REFUSED and REFUSED[name] in str(error) else [str(error)]
        if time.perf_counter() - start > MAX_SECONDS_PER_MODEL:
            found.append(f"took {time.perf_counter() - start:.1f} s")
        if found:
            failures[name] = "; ".join(found)
    assert len(node_cases()) >= 1800
    assert failures == {}


@pytest.mark.slow
def test_every_model_of_the_test_data_analyses() -> None:
    paths = model_data_paths()
    assert len(paths) >= 140
    failures = {}
    for path in paths:
        result = graphmem.analyze_onnx(path)
        found = list(problems(result))
        found += [f"shape unknown: {name}" for name in result.costs.shape_unknown_nodes]
        if found:
            failures[str(path.relative_to(ONNX_DATA))] = "; ".join(found)
    assert failures == {}


# ----- the shapes the new ops get from inference ---------------------------------------------
def one_node_model(node: onnx.NodeProto, inputs: list[onnx.ValueInfoProto],
                   initializers: list[onnx.TensorProto]) -> onnx.ModelProto:
    output = onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, None)
    graph = onnx.helper.make_graph([node], "one", inputs, [output], initializers)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 28)])


def int64(name: str, *values: int) -> onnx.TensorProto:
    return onnx.helper.make_tensor(name, onnx.TensorProto.INT64, [len(values)] if len(values) > 1
                                   else [], list(values))


def float_input(name: str, *shape: int) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape))


def output_shape(model: onnx.ModelProto, folder: Path) -> str:
    result = analyse(model, folder, "one")
    return result.graph.nodes[-1].outputs[0].shape_text()


@pytest.mark.parametrize(("node", "inputs", "initializers", "shape"), [
    # onnx's inference reads the constant size; onnxruntime's rules, which have none for
    # AffineGrid, Col2Im and DFT, name placeholder dims (`AffineGrid_0_o0__d0`) that must not
    # replace the numbers
    (onnx.helper.make_node("AffineGrid", ["theta", "size"], ["y"]), [float_input("theta", 2, 2, 3)],
     [int64("size", 2, 3, 5, 6)], "[2, 5, 6, 2]"),
    (onnx.helper.make_node("Col2Im", ["x", "image", "block"], ["y"]), [float_input("x", 1, 5, 5)],
     [int64("image", 5, 5), int64("block", 1, 5)], "[1, 1, 5, 5]"),
    (onnx.helper.make_node("DFT", ["x", "n"], ["y"], onesided=1), [float_input("x", 1, 10, 1)],
     [int64("n", 16)], "[1, 9, 2]"),
    # STFT's onesided is 1 by default (spec, reference runtime): 16 points -> 9 bins, where
    # onnx 1.23's inference takes 0 and makes 16
    (onnx.helper.make_node("STFT", ["x", "step", "", "length"], ["y"]),
     [float_input("x", 1, 128, 1)], [int64("step", 8), int64("length", 16)], "[1, 15, 9, 2]"),
], ids=["AffineGrid", "Col2Im", "DFT", "STFT"])
def test_inferred_output_shapes(node: onnx.NodeProto, inputs: list[onnx.ValueInfoProto],
                                initializers: list[onnx.TensorProto], shape: str,
                                tmp_path: Path) -> None:
    assert output_shape(one_node_model(node, inputs, initializers), tmp_path) == shape
