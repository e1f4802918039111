"""`graphmem analyze model.onnx --train`: an ONNX inference graph expanded to a training step."""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.conventions import TrainingOptions
from graphmem.core.ir import Graph
from graphmem.passes.dims import DimBinding
from graphmem.training.expand import TrainingConfig, expand_training
from graphmem.training.exports import inference_export_notes


@dataclass(frozen=True)
class OnnxTrainingStep:
    graph: Graph
    micro_batch: int | None
    warnings: tuple[str, ...]


def onnx_training_step(graph: Graph, binding: DimBinding,
                       options: TrainingOptions) -> OnnxTrainingStep:
    """The training step `options` describe, built from the inference graph; the options
    were checked (graphmem/pipeline/request.py); AMP follows `amp_policy`'s autocast lists."""
    config = TrainingConfig(options.optimizer, options.amp, options.amp_policy,
                            grad_accum=options.grad_accum, checkpoints=options.checkpoints)
    expanded = expand_training(graph, config)
    warnings = [
        "training step built from the inference graph: cross-entropy on the first output,"
        " every float initializer trained, views as PyTorch makes them"
        " (docs/onnx-training.md)"]
    warnings.extend(inference_export_notes(graph, expanded.unfolded_batchnorms,
                                           expanded.restored_biases, options.optimizer))
    if expanded.no_backward_rule:
        ops = ", ".join(f"{op} ({count})" for op, count in expanded.no_backward_rule.items())
        warnings.append(f"no backward rule for {ops}: counted as saving every input they read;"
                        " their backward FLOPs are unknown")
    return OnnxTrainingStep(expanded.graph, _micro_batch(graph, binding), tuple(warnings))


def _micro_batch(graph: Graph, binding: DimBinding) -> int | None:
    if binding.batch_dim is not None:
        return binding.bound.get(binding.batch_dim)
    first = graph.inputs[0].shape if graph.inputs else None
    if first and first[0] is not None and first[0].is_constant:
        return int(first[0])
    return None
