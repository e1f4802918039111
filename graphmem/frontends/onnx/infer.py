"""Shape inference for an imported ONNX model: onnxruntime's symbolic inference, with onnx's own
inference (data propagation on) filling in where its rules give up, and never rewriting the
dims the model declares."""

from __future__ import annotations

import importlib.util
import logging
import warnings as py_warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx

from graphmem.frontends.onnx.read import first_line


def infer_shapes(model: onnx.ModelProto, warnings: list[str],
                 dim_names: Mapping[str, str]) -> tuple[onnx.ModelProto, str]:
    """onnxruntime's symbolic inference; where its rules give up on some nodes, the shapes
    onnx's own inference (with data propagation) finds are merged in, value by value."""
    try:
        failed_ops: list[str] = []
        inferred = _ort_symbolic_inference(model, failed_ops)
    except Exception as error:  # noqa: BLE001 - any failure there falls back to onnx's inference
        warnings.append(
            f"onnxruntime symbolic shape inference failed ({first_line(error)});"
            " used onnx shape inference instead"
        )
        fallback = _onnx_inference(model, warnings)
        return (fallback, "onnx shape inference") if fallback else (model, "none")
    changed = _changed_input_dims(model.graph, inferred.graph, dim_names)
    if changed:
        warnings.append(
            f"onnxruntime symbolic shape inference changed the input dims ({changed});"
            " used onnx shape inference instead"
        )
        fallback = _onnx_inference(model, warnings)
        return (fallback, "onnx shape inference") if fallback else (model, "none")
    if not failed_ops:
        return inferred, "onnxruntime symbolic shape inference"
    warnings.append(
        f"onnxruntime's symbolic rules could not follow {len(failed_ops)} nodes (e.g."
        f" {failed_ops[0]}); onnx's own inference filled in what it could"
    )
    fallback = _onnx_inference(model, warnings)
    if fallback is not None:
        _merge_value_infos(inferred.graph, fallback.graph)
    return inferred, "onnxruntime symbolic shape inference + onnx shape inference"


def _dims_of(info: onnx.ValueInfoProto, dim_names: Mapping[str, str]) -> list[str | int]:
    return [dim_names.get(d.dim_param, d.dim_param) or d.dim_value
            for d in info.type.tensor_type.shape.dim]


def _changed_input_dims(before: onnx.GraphProto, after: onnx.GraphProto,
                        dim_names: Mapping[str, str]) -> str:
    """The first graph input whose declared dims inference rewrote, as text ("" if none).
    Inference must never change what the model declares: onnxruntime 1.30's symbolic rules
    turn a dynamo export's [batch, seq] input into [16, 16] and its logits into rank 5."""
    declared = {v.name: _dims_of(v, dim_names) for v in before.input}
    for info in after.input:
        old = declared.get(info.name)
        new = _dims_of(info, dim_names)
        if old is not None and old and old != new:
            return f"{info.name}: {old} became {new}"
    return ""


def _onnx_inference(model: onnx.ModelProto, warnings: list[str]) -> onnx.ModelProto | None:
    try:
        with _quiet_numpy():
            return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as error:  # noqa: BLE001
        warnings.append(f"onnx shape inference failed ({first_line(error)})")
        return None


def _merge_value_infos(target: onnx.GraphProto, source: onnx.GraphProto) -> None:
    """Replace a value's type in `target` where `source` knows more of its shape."""
    better = {v.name: v for v in source.value_info}
    for info in target.value_info:
        candidate = better.get(info.name)
        if candidate is not None and _known_dims(candidate) > _known_dims(info):
            info.CopyFrom(candidate)
    known = {v.name for v in target.value_info}
    target.value_info.extend(v for n, v in better.items() if n not in known)


def _known_dims(info: onnx.ValueInfoProto) -> int:
    """How much of a shape is known: -1 without a rank, else the count of known dims."""
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return -1
    return sum(
        1 for d in tensor_type.shape.dim
        if d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__"))
    )


def _tolerant(rule: Callable[[onnx.NodeProto], None],
              failed_ops: list[str]) -> Callable[[onnx.NodeProto], None]:
    """One op's symbolic rule failing keeps onnx's own inference for that node (which the
    engine ran just before) instead of aborting the whole model."""

    def run(node: onnx.NodeProto) -> None:
        try:
            rule(node)
        except Exception:  # noqa: BLE001 - onnxruntime's rules assert on shapes they can't follow
            failed_ops.append(f"{node.op_type} {node.name}")

    return run


def _ort_symbolic_inference(model: onnx.ModelProto, failed_ops: list[str]) -> onnx.ModelProto:
    """Run onnxruntime's symbolic shape inference to its fixed point.

    SymbolicShapeInference.infer_shapes writes `sym_shape_infer_temp.onnx` into the current
    directory when a shape stays unknown; graphmem must not write into the user's folders,
    so the same steps are driven here and incomplete shapes are kept as unknown.
    """
    symbolic_shape_infer = _symbolic_shape_infer_module()
    logging.getLogger(symbolic_shape_infer.__name__).setLevel(logging.ERROR)
    engine = symbolic_shape_infer.SymbolicShapeInference(
        int_max=2**31 - 1, auto_merge=True, guess_output_rank=False, verbose=0
    )
    engine.dispatcher_ = {
        op: _tolerant(rule, failed_ops) for op, rule in engine.dispatcher_.items()
    }
    with _quiet_numpy():  # its sympy/numpy arithmetic on a model's values warns on overflow
        engine._preprocess(model)
        while engine.run_:
            engine._infer_impl()
        engine._update_output_from_vi()
    return engine.out_mp_


@contextmanager
def _quiet_numpy() -> Iterator[None]:
    """numpy's RuntimeWarnings (overflow, divide by zero on a model's constants) are not the
    user's to read: what inference could not follow shows as unknown shapes."""
    with py_warnings.catch_warnings(), np.errstate(all="ignore"):
        py_warnings.simplefilter("ignore", RuntimeWarning)
        yield


@cache
def _symbolic_shape_infer_module() -> ModuleType:
    """onnxruntime.tools.symbolic_shape_infer, loaded from its file.

    Importing it as `onnxruntime.tools.symbolic_shape_infer` runs the package's __init__,
    which imports torch when it is installed: a second of start-up the ONNX path never needs.
    """
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        raise ImportError("onnxruntime is not installed")
    path = Path(spec.origin).parent / "tools" / "symbolic_shape_infer.py"
    module_spec = importlib.util.spec_from_file_location("graphmem_ort_symbolic_shape_infer", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module

