"""The imports of one chain of analyses: the model read once, each distinct shape imported once.

A command analyses its model and then probes it: the largest-batch search, `--sweep`,
`--suggest`'s re-analysed changes, distributed plans, error bands, `graphmem gpus --fits`.
Every probe is the pipeline on a replaced Request (graphmem/pipeline/run.py), and every
replaced Request carries the ModelImports its chain began with (`Request.imports`, set by
`run.resolve`), so:
- an ONNX file is read once and imported once with its dims symbolic; probes bind dims on that
  graph. Only where shape inference leaves a size it could not follow does the pipeline
  import again with dims fixed (`run.import_model` says which), from the file as read and
  once per distinct set of fixed dims (graphmem/frontends/onnx/runtime_inputs.py `OnnxFile`);
- a PyTorch step is traced once per distinct input shape and options (`traced`): a trace has
  concrete shapes, so a probe at a batch not traced before is a new trace (the suggestions'
  batch search scales two traces to one graph where the step scales with the batch:
  graphmem/passes/batch_scaling.py), never a probe at a shape traced before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from graphmem.frontends.onnx.runtime_inputs import OnnxFile

T = TypeVar("T")
# nodes of the traces held for reuse, the least recently used dropped first: the probes that
# ask for one shape again (the AMP card and the AMP batch search's first probe, a confirmation
# at a batch the search tried) ask soon after; each trace holds a whole graph (BERT-base's
# training step about 4 MiB, a 70B decoder's far more), as OnnxFile's imports do
HELD_TRACE_NODES = 250_000


class ModelImports:
    """The ONNX files read and the PyTorch steps traced for one chain of analyses."""

    def __init__(self) -> None:
        self._files: dict[Path, OnnxFile] = {}
        self._traces: OrderedDict[Hashable, Any] = OrderedDict()
        self.traces = 0  # PyTorch traces made

    def onnx_file(self, path: str | Path) -> OnnxFile:
        from graphmem.frontends.onnx.runtime_inputs import OnnxFile

        key = Path(path)
        if key not in self._files:
            self._files[key] = OnnxFile(key)
        return self._files[key]

    def traced(self, key: Hashable | None, trace: Callable[[], T],
               nodes: Callable[[T], int] = lambda _: 1) -> T:
        """`trace()`'s result, made once per `key` while held (None: not kept); `nodes`: how
        many graph nodes a result holds."""
        if key is None or not _hashable(key):
            self.traces += 1
            return trace()
        if key in self._traces:
            self._traces.move_to_end(key)
            return self._traces[key]  # type: ignore[no-any-return]
        self.traces += 1
        made = self._traces[key] = trace()
        held = sum(nodes(result) for result in self._traces.values())
        while held > HELD_TRACE_NODES and len(self._traces) > 1:
            held -= nodes(self._traces.popitem(last=False)[1])
        return made


def _hashable(key: Hashable) -> bool:
    """A key holding an unhashable part (a loss function's closure over a dict, say) is not
    kept: the trace is made each time, as before."""
    try:
        hash(key)
    except TypeError:
        return False
    return True
