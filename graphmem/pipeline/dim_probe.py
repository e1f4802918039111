"""What the bound analysis would say with one dim at any value, every other dim bound: the
peak (for the largest batch, graphmem/passes/max_batch.py) and the roofline (for sweeps).

Split from graphmem/pipeline/planning.py, which runs it. With the analysed graph's own sizes
(no `reanalyze`), the peak at a value is the model order's sweep at that value: the sizes of
its buffers are a few hundred distinct polynomials in the dim, evaluated once each per value
and swept as prefix sums (graphmem/passes/step_arrays.py); the candidates for the peak are
found once, on the same arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from operator import attrgetter
from typing import TYPE_CHECKING

from graphmem.core.evaluate import compile_count
from graphmem.core.ir import Graph, Value
from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import GpuSpec
from graphmem.errors import GraphmemError
from graphmem.passes.costs import CostReport, CostStatus
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.memory_model import (
    MemoryModel,
    MemorySweep,
    build_memory_model,
    order_peak,
    plan_dims,
    rebind,
    step_events,
    symbolic_order_peak,
)
from graphmem.passes.roofline import (
    NodeTime,
    RooflineResult,
    estimate_roofline,
    node_rate_dtype,
    node_time,
    summarize,
)
from graphmem.passes.step_arrays import OrderArrays, by_identity
from graphmem.passes.sweep import SweepResult, run_sweep

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis
    from graphmem.pipeline.device_total import Reanalyze


def costs_bound(costs: CostReport) -> bool:
    """True when every node's FLOPs and bytes are numbers (every dim bound): each distinct
    size object asked once (a decoder's nodes share a few hundred: passes/costs.py)."""
    for count in (attrgetter("flops"), attrgetter("bytes_read"), attrgetter("bytes_written")):
        sizes = list(map(count, costs.nodes))
        if not all(size.is_constant for size in by_identity(sizes).values()):
            return False
    return True


class UnresolvedPeak(GraphmemError):
    """The bound analysis's peak still has sizes no dim binding resolves."""


class DimProbe:
    """The model with one dim free (all others bound): its peak and latency at any value.

    `estimate_peak` evaluates the max of the liveness's symbolic peak candidates: it is the
    bound liveness's peak wherever every size is known (each step is dominated, coefficient by
    coefficient, by some candidate). `exact_peak` computes the bound peak again, independently:
    each buffer's size evaluated at the value and the model order swept as integers
    (`passes/step_arrays.py`; the rebound `MemoryModel` where int64 could overflow); where the
    two disagree, the bound liveness itself is run and decides. Where the symbolic graph had
    unknown shapes, `exact_peak` is the whole bound analysis (`reanalyze`).
    """

    def __init__(self, analysis: Analysis, dim: str, reanalyze: Reanalyze | None,
                 sizes: Mapping[str, SymInt | None] | None = None,
                 model: MemoryModel | None = None) -> None:
        """`sizes`: the analysis's value sizes (`value_bytes`), and `model` its MemoryModel,
        if at hand."""
        self.dim = dim
        self.graph = analysis.graph
        # the dims given: a mixture of experts' routed counts follow them (run.py `_routed`)
        self.others = {k: v for k, v in analysis.dims.given.items() if k != dim}
        self.batch_dim = analysis.dims.batch_dim
        self.reanalyze = reanalyze
        free = dim in analysis.dims.free
        self._given = sizes if sizes is not None and free else None  # every other dim bound
        self._swept = analysis.liveness.sweep
        self.model = None
        candidates: Sequence[SymInt] = ()
        if reanalyze is None:
            self.model = model or build_memory_model(self.graph, self.sizes,
                                                     plan_dims(self.graph, self.others))
            if not free:
                candidates = self._candidates()
        if free:
            candidates = analysis.liveness.peak_candidates
        self.costs = analysis.costs if free else None
        # the candidates estimate the peak only where they depend on this dim alone
        estimable = all(c.free_symbols() <= {dim} for c in candidates)
        self.candidates = [compile_count(c) for c in candidates] if estimable else []
        # per value, memoized in plain dicts: a `functools.cache` of a bound method kept on
        # the instance would make a reference cycle, left for the cyclic collector with
        # everything the probe holds (the memory model's 45,000 tuples at 22,000 nodes)
        self._exact_peaks: dict[int, int] = {}
        self._bound_analyses: dict[int, Analysis] = {}
        self._rooflines: dict[str, Callable[[dict[str, int]], RooflineResult]] = {}

    @cached_property
    def sizes(self) -> dict[str, SymInt | None]:
        """Every value's size with this dim free (made only where a fallback needs them all)."""
        if self._given is not None:
            return dict(self._given)
        return {name: (v.nbytes.bind(self.others) if v.nbytes is not None else None)
                for name, v in self.graph.values.items()}

    @cached_property
    def arrays(self) -> OrderArrays | None:
        """The model order's sweep with this dim free, made at its first use (a sweep reading
        the liveness's candidates may need none); None where each value is a new analysis.
        The liveness's events and storages serve where it swept these buffers."""
        model = self.model
        if model is None:
            return None
        swept = _swept_in_model_order(self._swept, model)
        if swept is not None:
            events, storages, residents = swept.events, swept.storages, swept.residents
        else:
            values = self.graph.values
            events = step_events(model, range(model.node_count))
            storages = tuple(values[name] for name in model.buffer_names)
            residents = tuple(values[name] for name in model.resident_names)
        return OrderArrays(model.allocates, events, self._sizes_of(storages),
                           self._sizes_of(residents))

    def _sizes_of(self, values: Sequence[Value]) -> list[SymInt | None]:
        """`sizes` of these values, without making the whole table: each distinct size
        object is bound once (grouped by identity: a graph's values share their sizes)."""
        if self._given is not None:
            return list(map(self._given.get, map(attrgetter("name"), values)))
        sizes = list(map(attrgetter("nbytes"), values))
        others = self.others
        bound = {key: (size.bind(others) if size is not None else None)
                 for key, size in by_identity(sizes).items()}
        return list(map(bound.__getitem__, map(id, sizes)))

    def _candidates(self) -> Sequence[SymInt]:
        """The model order's peak candidates in this dim."""
        assert self.arrays is not None and self.model is not None
        resident = self.arrays.resident_total()
        candidates = self.arrays.candidates(resident)
        if candidates is not None:
            return candidates
        # fractional or huge coefficients: swept as polynomials
        return symbolic_order_peak(self.model, range(self.model.node_count), self.sizes,
                                   resident, plan_dims(self.graph, self.others))[1]

    @property
    def estimate(self) -> Callable[[int], int] | None:
        return self.estimate_peak if self.candidates else None

    def estimate_peak(self, value: int) -> int:
        dims = {self.dim: value}
        return max(candidate(dims) for candidate in self.candidates)

    def exact_peak(self, value: int) -> int:
        """The bound analysis's peak at `value`, found once per value."""
        peak = self._exact_peaks.get(value)
        if peak is None:
            peak = self._exact_peaks[value] = self._exact_peak(value)
        return peak

    def _bound_analysis(self, value: int) -> Analysis:
        """The whole analysis at `value` (`reanalyze`), made once per value."""
        bound = self._bound_analyses.get(value)
        if bound is None:
            bound = self._bound_analyses[value] = self._reanalyzed(value)
        return bound

    def _exact_peak(self, value: int) -> int:
        if self.reanalyze is not None or self.model is None:
            bound_peak = self._bound_analysis(value).liveness.peak_bytes
            if not bound_peak.is_constant:
                raise UnresolvedPeak(f"at {self.dim}={value} the peak still depends on sizes"
                                     " shape inference could not resolve"
                                     f" ({', '.join(sorted(bound_peak.free_symbols()))})")
            return int(bound_peak)
        dims = {self.dim: value}
        model = self.model
        found = self.arrays.peak(dims) if self.arrays is not None else None
        if found is None:  # beyond int64's sums: the sweep in Python
            found = order_peak(rebind(model, self.sizes, dims), range(model.node_count))
        peak = found[0]
        if self.candidates and self.estimate_peak(value) == peak:
            return peak
        sizes = {name: (size.bind(dims) if size is not None else None)
                 for name, size in self.sizes.items()}
        return int(analyze_liveness(self.graph, sizes).peak_bytes)

    def _reanalyzed(self, value: int) -> Analysis:
        assert self.reanalyze is not None
        return self.reanalyze({**self.others, self.dim: value})

    def peak(self, value: int) -> int:
        """The bound analysis's peak: exact_peak where shapes needed re-inferring."""
        if self.reanalyze is not None or not self.candidates:
            return self.exact_peak(value)
        return self.estimate_peak(value)

    def roofline(self, value: int, gpu: GpuSpec) -> RooflineResult | None:
        """None where the bound analysis's costs still depend on dims it could not bind."""
        dims = {**self.others, self.dim: value}
        if self.reanalyze is not None:
            bound = self._bound_analysis(value)
            if not costs_bound(bound.costs):
                return None
            return estimate_roofline(bound.graph, bound.costs, gpu, dims, self.batch_dim)
        if gpu.name not in self._rooflines:
            if self.costs is None:
                raise GraphmemError(f"internal: no costs symbolic in '{self.dim}' to vary it")
            self._rooflines[gpu.name] = _compile_roofline(self.graph, self.costs, gpu,
                                                          self.batch_dim)
        return self._rooflines[gpu.name](dims)

    def sweep(self, values: tuple[int, ...], gpu: GpuSpec | None,
              usable_bytes: int | None) -> SweepResult:
        def latency(value: int) -> float | None:
            roofline = self.roofline(value, gpu) if gpu is not None else None
            return roofline.est_latency_s if roofline is not None else None

        batch_dim = self.batch_dim
        others = self.others

        def batch_at(value: int) -> int | None:
            if batch_dim == self.dim:
                return value
            return others.get(batch_dim) if batch_dim is not None else None

        return run_sweep(self.dim, values, self.peak, latency, usable_bytes, batch_at)


def _compile_roofline(graph: Graph, costs: CostReport, gpu: GpuSpec,
                      batch_dim: str | None) -> Callable[[dict[str, int]], RooflineResult]:
    """Roofline at any dims, with each node's FLOPs and bytes compiled once."""
    nodes = []
    for node, cost in zip(graph.nodes, costs.nodes, strict=True):
        rate_dtype = node_rate_dtype(node)
        nodes.append((cost.name, compile_count(cost.flops),
                      compile_count(cost.bytes_read + cost.bytes_written),
                      gpu.flops_per_s_for(rate_dtype), rate_dtype,
                      cost.status is CostStatus.OK))
    bandwidth = gpu.memory_bandwidth_bytes_per_s

    def at(dims: dict[str, int]) -> RooflineResult:
        times: list[NodeTime] = [
            node_time(name, flops(dims), moved(dims), rate, bandwidth, rate_dtype, known)
            for name, flops, moved, rate, rate_dtype, known in nodes
        ]
        return summarize(gpu, times, dims.get(batch_dim) if batch_dim else None)

    return at


def _swept_in_model_order(swept: MemorySweep | None, model: MemoryModel
                          ) -> MemorySweep | None:
    """The liveness's sweep where it swept `model`'s buffers in the model order (its events
    and storages then serve the probe as they are), else None."""
    if swept is not None and swept.buffers is not None and swept.buffers.uses is model.uses \
            and swept.buffers.pinned is model.pinned \
            and swept.events.order == tuple(range(model.node_count)):
        return swept
    return None
