"""What a front end hands the pipeline: the graph, how the model is named, what was noticed.

Both front doors return an ImportedModel (graphmem/frontends/onnx/runtime_inputs.py
`import_onnx_model`, graphmem/frontends/torch/import_step.py `import_torch`); the pipeline
(graphmem/pipeline/run.py) binds dims and runs the passes on it. Nothing here imports onnx or
torch: a front end's own objects travel as opaque fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from graphmem.core.ir import Graph
from graphmem.core.ort_view import OrtGraphSource

if TYPE_CHECKING:  # a plain dataclass; the name only types the field
    from graphmem.frontends.torch.kernel_choice import KernelChoice


@dataclass(frozen=True)
class ImportedModel:
    graph: Graph
    path: str  # how reports name the model: the file, the `file.py:fn` spec or the class
    shape_inference: str  # which inference produced the shapes
    warnings: tuple[str, ...] = ()
    # the batch of a traced step (the first input's first dim); None for ONNX graphs, whose
    # batch is a dim the pipeline binds
    micro_batch: int | None = None
    # ONNX: what onnxruntime's planner sees (its plan shapes, its optimized graph), produced
    # on demand from the model file the importer read (graphmem/runtime_models/ uses it)
    runtime_inputs: OrtGraphSource | None = field(default=None, repr=False, compare=False)
    notes: tuple[str, ...] = ()  # what was built or applied, for information: not warnings
    # a PyTorch step traced for a CUDA GPU: the kernels the trace assumed (none for ONNX)
    kernels: tuple[KernelChoice, ...] = ()
