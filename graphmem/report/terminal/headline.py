"""The summary's first line: which model (its file, not the ONNX graph's name), how it was read,
what was analysed (inference or a training step) and at which dims or input shapes."""

from __future__ import annotations

from pathlib import PurePath

from graphmem.core.ir import Role, Value
from graphmem.core.safe_text import markup, markup_dims
from graphmem.pipeline.analysis import Analysis

_FORMATS = {"onnx": "ONNX", "torch.fx": "PyTorch"}
_INPUTS_SHOWN = 3


def model_label(analysis: Analysis) -> str:
    """`resnet50.onnx`; `hf.py:gpt2 (GPT2LMHeadModel)`; the class for a model given as an object."""
    model = analysis.model
    path = model.path or model.name
    file, colon, function = path.rpartition(":")
    if colon and file and "/" not in function and "\\" not in function:  # file.py:fn, pkg.mod:fn
        label = f"{PurePath(file).name}:{function}"
    else:
        label = PurePath(path).name or path
    if model.source_format != "onnx" and model.name and model.name not in label:
        label += f" ({model.name})"
    return label


def headline(analysis: Analysis) -> str:
    """`resnet50.onnx · ONNX · inference · batch=32` (rich markup)."""
    model = analysis.model
    kind = _FORMATS.get(model.source_format, model.source_format)
    return " · ".join((f"[bold]{markup(model_label(analysis))}[/]", markup(kind),
                       _mode(analysis), _shapes(analysis)))


def _mode(analysis: Analysis) -> str:
    training = analysis.training
    if training is None:
        return analysis.mode
    text = f"training, {markup(training.optimizer)}"
    if training.amp:
        text += f", AMP {markup(training.amp)}"
    if training.grad_accum > 1:
        text += f", {training.grad_accum} micro-batches of {training.micro_batch}"
    return text


def _shapes(analysis: Analysis) -> str:
    """The bound dims and the free ones; a traced model's input shapes (it has no dims)."""
    dims = analysis.dims
    if analysis.model.source_format != "onnx" and not dims.bound and not dims.free:
        return _input_shapes(analysis) or "no inputs"
    parts = [markup_dims(dims.bound)] if dims.bound else []
    if dims.free:
        parts.append(f"{markup_dims(dims.free)} free")
    return "; ".join(parts) or "static shapes"


def _input_shapes(analysis: Analysis) -> str:
    """`input_ids 2x64:int64`, as --input spells it."""
    inputs = [v for v in analysis.graph.inputs if v.role == Role.INPUT]
    texts = [f"{markup(v.name)} {_spec(v)}" for v in inputs[:_INPUTS_SHOWN]]
    if len(inputs) > _INPUTS_SHOWN:
        texts.append(f"+{len(inputs) - _INPUTS_SHOWN} more")
    return ", ".join(texts)


def _spec(value: Value) -> str:
    dtype = value.dtype.value[0]
    if value.shape is None:
        return f"?:{dtype}"
    return "x".join(markup(dim) for dim in value.shape) + f":{dtype}"


def kernels_line(analysis: Analysis) -> str:
    """`CUDA kernels assumed: attention flash, dropout fused bool mask` for a PyTorch step traced
    for a GPU ("" otherwise); the details (why, what each saves) are in JSON `model.kernels`."""
    seen: dict[str, None] = {}
    for choice in analysis.model.kernels:
        seen.setdefault(f"{choice.op} {choice.kernel}", None)
    if not seen:
        return ""
    return f"[dim]CUDA kernels assumed: {markup(' · '.join(seen))}[/]"
