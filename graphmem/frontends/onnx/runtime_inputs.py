"""The ONNX front door, and what it gives the onnxruntime runtime models.

`import_onnx_model(path)` imports the graph (graphmem/frontends/onnx/importer.py) and returns
it with an OnnxRuntimeInputs: the shapes onnxruntime's allocation planner sees
(ort_plan_shapes.py) and the graph onnxruntime optimizes (ort_optimized.py), each made on
demand from the model file, read as the importer reads it (external data cut off: never the
weights), at most once per import. graphmem/runtime_models/ never opens a file: it asks this
object (it satisfies core/ort_view.py `OrtGraphSource`).

`OnnxFile` is one file for a chain of analyses (a command, its probes and its suggestions):
read once, imported once per distinct set of input dims fixed before shape inference (most
models need only the symbolic import), and one OnnxRuntimeInputs for every import of it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from graphmem.errors import GraphmemError
from graphmem.frontends.imported import ImportedModel
from graphmem.frontends.onnx.importer import import_onnx, read_model
from graphmem.frontends.onnx.ort_plan_shapes import PlanShape, ort_plan_shapes

if TYPE_CHECKING:
    from graphmem.frontends.onnx.ort_optimized import OptimizedGraph


def import_onnx_model(path: str | Path, input_dims: Mapping[str, int] | None = None
                      ) -> ImportedModel:
    """The model's graph; `input_dims` fixes named input dims before shape inference."""
    return OnnxFile(path).imported(input_dims)


DimsKey = tuple[tuple[str, int], ...]
# nodes of the imports with fixed dims an OnnxFile keeps besides the symbolic one (the least
# recently used go first): a model whose sizes only concrete dims resolve is imported once
# per batch a probe tries, and the device-total search asks again for batches the live-peak
# search tried; a 22,000-node decoder's import holds about 25 MiB, so about ten of those
HELD_FIXED_NODES = 250_000


class OnnxFile:
    """One ONNX file for a chain of analyses: `imported(dims)` is the graph with `dims` fixed
    before shape inference (none: the symbolic import), made from the file as first read."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.source: onnx.ModelProto | None = None  # the file as read, once
        self.runtime_inputs: OnnxRuntimeInputs | None = None
        self._symbolic: ImportedModel | None = None
        self._fixed: OrderedDict[DimsKey, ImportedModel] = OrderedDict()
        self.imports = 0  # imports made: one per distinct dims while held

    def imported(self, input_dims: Mapping[str, int] | None = None) -> ImportedModel:
        key: DimsKey = tuple(sorted((input_dims or {}).items()))
        if not key:
            if self._symbolic is None:
                self._symbolic = self._import(None)
            return self._symbolic
        if key in self._fixed:
            self._fixed.move_to_end(key)
        else:
            imported = self._fixed[key] = self._import(dict(key))
            held = sum(len(other.graph.nodes) for other in self._fixed.values())
            while held > HELD_FIXED_NODES and len(self._fixed) > 1:
                held -= len(self._fixed.popitem(last=False)[1].graph.nodes)
            return imported
        return self._fixed[key]

    def _import(self, input_dims: Mapping[str, int] | None) -> ImportedModel:
        imported = import_onnx(self.path, input_dims=input_dims, source=self.source)
        self.imports += 1
        if self.source is None:
            self.source = imported.source
            self.runtime_inputs = OnnxRuntimeInputs(self.path, imported.source)
        return ImportedModel(imported.graph, str(self.path), imported.shape_inference,
                             tuple(imported.warnings), runtime_inputs=self.runtime_inputs)


class OnnxRuntimeInputs:
    """onnxruntime's view of one ONNX file, from its protobuf: the importer's copy of it as
    read, else the file (read once, when first asked)."""

    def __init__(self, path: Path, source: onnx.ModelProto | None = None) -> None:
        self.path = path
        self._source = source

    @cached_property
    def model(self) -> onnx.ModelProto:
        return self._source if self._source is not None else read_model(self.path)

    def plan_shapes(self) -> Mapping[str, PlanShape | None]:
        """Every tensor's shape as onnxruntime's planner sees it, by value name (read-only)."""
        return self._plan_shapes

    @cached_property
    def _plan_shapes(self) -> dict[str, PlanShape | None]:
        # the planner's shapes do not depend on the bound dims: one inference serves every
        # runtime estimate of the analysis (a max-batch search asks at each candidate batch)
        return ort_plan_shapes(self.model)

    def optimized(self, level: str, dims: Mapping[str, int], max_initializer_bytes: int | None,
                  refused_hint: str = "") -> OptimizedGraph | str:
        """onnxruntime's optimized graph at `level`, or why the graph as written is planned
        instead (`refused_hint` follows a refusal: a model above `max_initializer_bytes`)."""
        # onnxruntime is imported here, not at start-up: only an optimized-graph runtime
        # model needs a session (`graphmem --help` and most analyses never do)
        from graphmem.frontends.onnx.ort_optimized import OptimizationRefused, optimized_graph

        try:
            return optimized_graph(self.model, level, dims, max_initializer_bytes,
                                   self._plan_shapes)
        except OptimizationRefused as refused:
            return f"{refused}{refused_hint if refused.weights else ''}"
        except GraphmemError as error:  # the saved graph did not import: plan the file's
            return f"not optimized offline ({error}); planned the graph as written"
