"""What onnxruntime sees of an ONNX model, as a contract between the ONNX front end, which
makes it (graphmem/frontends/onnx/runtime_inputs.py), and the runtime models, which read it
(graphmem/runtime_models/select.py) without knowing any front end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from graphmem.core.ir import Graph

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
    """What onnxruntime's planner sees of the model: its plan shapes, its optimized graph."""

    def plan_shapes(self) -> Mapping[str, PlanShape | None]: ...

    def optimized(self, level: str, dims: Mapping[str, int], max_initializer_bytes: int | None,
                  refused_hint: str = "") -> OptimizedOrtGraph | str: ...
