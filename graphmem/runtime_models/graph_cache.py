"""Results the bound dims do not change, kept per graph for the runtime models.

A largest-batch search (graphmem/passes/max_batch.py) runs a runtime model at every batch it
probes, on the same graph: onnxruntime's execution order and allocation plan follow its own
shapes (dim names, not values), so they are made once and only the sizes are redone. Entries
live as long as their graph (weak keys); the objects a result was made from are held with it,
so their ids cannot be taken by new objects, and a graph whose node or value count changed
since is planned again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from weakref import WeakKeyDictionary

from graphmem.core.ir import Graph

T = TypeVar("T")
# callers passing fresh objects each time: keep the newest few (a graph's plan layouts, and
# one flag of data_bounds.py)
_KEPT_PER_GRAPH = 5

# graph -> {ids of the inputs: (the inputs, the graph's size then, the result)}
_CACHE: WeakKeyDictionary[Graph, dict[tuple[int, ...], tuple[tuple[object, ...],
                                                             tuple[int, int], object]]]
_CACHE = WeakKeyDictionary()


def cached_per_graph(graph: Graph, inputs: tuple[object, ...], make: Callable[[], T]) -> T:
    """`make()`'s result for `graph` and `inputs` (compared by identity), made once."""
    key = tuple(id(item) for item in inputs)
    size = (len(graph.nodes), len(graph.values))
    entries = _CACHE.setdefault(graph, {})
    entry = entries.get(key)
    if entry is not None and entry[1] == size:
        return entry[2]  # type: ignore[return-value]  # stored by this function as T
    result = make()
    if len(entries) >= _KEPT_PER_GRAPH:
        entries.clear()
    entries[key] = (inputs, size, result)
    return result
