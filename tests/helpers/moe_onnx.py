"""A mixture-of-experts layer as an exporter writes transformers' eager experts: the router's
TopK, OneHot over the experts, per expert a Gather of its mask, NonZero, the tokens gathered
and one up-projection (tests/test_data_bounds_routing.py, tests/test_routed_dims.py); and how
those tests compare an analysis under a routing policy with one whose counts were given by
hand (`by_hand`, `numbers`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphmem.api import Result, analyze_onnx

TOKENS, HIDDEN, EXPERTS, TOP_K, WIDTH = 64, 16, 4, 2, 256


def moe_model(path: Path, tokens: int | str = TOKENS, chooser: str = "topk",
              capacity: int | None = None) -> Path:
    """The layer over `tokens` rows (a name: a dynamic dim, the batch axis), its router's
    choice by `chooser`: "topk" (TopK, top-2), "argmax" (one ArgMax: top-1, Switch's) or
    "two_argmax" (Phi-MoE's sparse mixer: ArgMax, the chosen expert masked out with
    ScatterElements, a second ArgMax, the two concatenated along the choice axis: top-2).
    `capacity`: Switch's capacity mask on the one-hot, each expert's first `capacity` tokens
    kept (the one-hot times CumSum over the tokens <= capacity, cast from bool)."""
    rng = np.random.default_rng(0)

    def const(name: str, array: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(array, name)

    inits = [const("router", rng.standard_normal((HIDDEN, EXPERTS)).astype(np.float32)),
             const("k", np.array([TOP_K], np.int64)), const("depth", np.array(EXPERTS)),
             const("on_off", np.array([0, 1], np.int64)), const("one", np.array(1)),
             const("masked", np.full((1, 1), -1e9, np.float32))]
    nodes = [helper.make_node("MatMul", ["h", "router"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["p"], axis=-1),
             *CHOOSERS[chooser],
             helper.make_node("OneHot", ["chosen", "depth", "on_off"], ["onehot"])]
    kept = "onehot"
    if capacity is not None:
        kept = "kept"
        inits += [const("cap", np.array(capacity, np.int64)), const("axis0", np.array(0))]
        nodes += [helper.make_node("CumSum", ["onehot", "axis0"], ["priority"]),
                  helper.make_node("LessOrEqual", ["priority", "cap"], ["fits"]),
                  helper.make_node("Cast", ["fits"], ["fits01"], to=TensorProto.INT64),
                  helper.make_node("Mul", ["onehot", "fits01"], ["kept"])]
    nodes.append(helper.make_node("Transpose", [kept], ["mask"], perm=[2, 1, 0]))
    sums = []
    for e in range(EXPERTS):
        inits += [const(f"e{e}", np.array(e)),
                  const(f"up{e}", rng.standard_normal((HIDDEN, WIDTH)).astype(np.float32))]
        nodes += [helper.make_node("Gather", ["mask", f"e{e}"], [f"m{e}"], axis=0),
                  helper.make_node("NonZero", [f"m{e}"], [f"nz{e}"]),
                  helper.make_node("Gather", [f"nz{e}", "one"], [f"tok{e}"], axis=0),
                  helper.make_node("Gather", ["h", f"tok{e}"], [f"x{e}"], axis=0),
                  helper.make_node("MatMul", [f"x{e}", f"up{e}"], [f"a{e}"]),
                  helper.make_node("Relu", [f"a{e}"], [f"r{e}"]),
                  helper.make_node("ReduceSum", [f"r{e}"], [f"s{e}"], keepdims=0)]
        sums.append(f"s{e}")
    nodes.append(helper.make_node("Sum", sums, ["y"]))
    graph = helper.make_graph(nodes, "moe", [helper.make_tensor_value_info(
        "h", TensorProto.FLOAT, [tokens, HIDDEN])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return path


def _argmax(scores: str, out: str) -> onnx.NodeProto:
    return helper.make_node("ArgMax", [scores], [out], axis=-1, keepdims=1)


CHOOSERS = {
    "topk": [helper.make_node("TopK", ["p", "k"], ["w", "chosen"], axis=-1)],
    "argmax": [_argmax("p", "chosen")],
    "two_argmax": [
        _argmax("p", "first"), helper.make_node("Shape", ["first"], ["first_shape"]),
        helper.make_node("Expand", ["masked", "first_shape"], ["fill"]),
        helper.make_node("ScatterElements", ["p", "first", "fill"], ["rest"], axis=-1),
        _argmax("rest", "second"),
        helper.make_node("Concat", ["first", "second"], ["chosen"], axis=-1)],
}


# the JSON sections that hold numbers (the warnings, notes and dims differ: one was assumed,
# the other given)
NUMBERS = ("params", "flops", "memory", "gpu", "nodes")


def numbers(result: Result, sections: Sequence[str] = NUMBERS) -> dict[str, Any]:
    data = result.to_dict()
    return {key: _without_notes(data[key]) for key in sections}


def _without_notes(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _without_notes(v) for k, v in data.items() if k != "notes"}
    if isinstance(data, list):
        return [_without_notes(item) for item in data]
    return data


def by_hand(path: Path, result: Result, loads: Sequence[int], **options: Any) -> Result:
    """The same model with the i-th routed count given as loads[i] (--dim NAME=load)."""
    routed = result.dims.routed
    dims = {**result.dims.given, **{r.dim: load for r, load in zip(routed, loads, strict=True)}}
    return analyze_onnx(path, dims=dims, gpu="t4", **options)
