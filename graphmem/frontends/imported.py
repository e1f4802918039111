"""What a front end hands the pipeline: the graph, how the model is named, what was noticed.

Both front doors return an ImportedModel (graphmem/frontends/onnx/runtime_inputs.py
`import_onnx_model`, graphmem/frontends/torch/import_step.py `import_torch`); the pipeline
(graphmem/pipeline/run.py) binds dims and runs the passes on it. Nothing here imports onnx or
torch: a front end's own objects travel as opaque fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from graphmem.core.ir import Graph

if TYPE_CHECKING:  # a plain dataclass; the name only types the field
    from graphmem.frontends.torch.kernel_choice import KernelChoice


# a tensor's shape as onnxruntime's allocation planner sees it: a dim is a number, a symbol
# or unknown
PlanShape = tuple[int | str | None, ...]


class OptimizedOrtGraph(Protocol):
    """onnxruntime's optimized graph (graphmem/frontends/onnx/ort_optimized.py)."""

    @property
    def graph(self) -> Graph: ...
    @property
    def plan_shapes(self) -> Mapping[str, PlanShape | None]: ...
    @property
    def nodes_before(self) -> int: ...
    @property
    def notes(self) -> tuple[str, ...]: ...


class OrtGraphSource(Protocol):
    """What onnxruntime sees of an ONNX model (graphmem/frontends/onnx/runtime_inputs.py),
    read by the runtime models (graphmem/runtime_models/select.py)."""

    def plan_shapes(self) -> Mapping[str, PlanShape | None]: ...

    def optimized(self, level: str, dims: Mapping[str, int], max_initializer_bytes: int | None,
                  refused_hint: str = "") -> OptimizedOrtGraph | str: ...


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
