"""The passes after liveness: best schedule, arena plan, roofline, max batch and sweeps.

`with_plans` runs them on an Analysis and returns it with its `schedule`, `arena`,
`roofline`, `max_batch` and `sweep` filled in. `DimProbe` answers "what would the bound
analysis say at dim = value" for max batch, sweeps and `graphmem gpus --fits`; where only a
new analysis can say, it asks the pipeline's `rerun` (this module does not run the pipeline).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphmem.core.progress import steps
from graphmem.core.symbolic import SymInt
from graphmem.errors import GraphmemError
from graphmem.passes.arena import plan_arena
from graphmem.passes.dims import data_sized_dims, invented_dims, value_bytes
from graphmem.passes.memory_model import (
    MemoryModel,
    build_memory_model,
    plan_dims,
)
from graphmem.passes.schedule import find_schedule
from graphmem.pipeline.request import SweepRequest

if TYPE_CHECKING:  # the GPU's table, fit, roofline, largest batch and runtime model, and the
    # dim probes: imported where a GPU is named or a sweep asked for
    from graphmem.devices.gpus import GpuSpec
    from graphmem.passes.fit import CudaReserve, GpuFit
    from graphmem.passes.max_batch import MaxBatchResult
    from graphmem.passes.roofline import RooflineResult
    from graphmem.pipeline.analysis import Analysis
    from graphmem.pipeline.device_total import DeviceModel, DeviceTotalProbe, Reanalyze
    from graphmem.pipeline.dim_probe import DimProbe

# Reanalyze: the whole bound analysis at given dims, as `graphmem analyze` with them bound
# runs it (graphmem/pipeline/run.py supplies it: the same request with these dims, unplanned).


def reanalyzer(analysis: Analysis, probed: frozenset[str],
               rerun: Reanalyze | None = None,
               free: frozenset[str] | None = None) -> Reanalyze | None:
    """How to re-run the bound analysis for probes that vary `probed` (the batch dim, a
    sweep's dim): `rerun`, or None where they are dims of the analysed graph, whatever made
    it: binding them there is what a new analysis would do.

    Where the symbolic shape inference left sizes it could not follow, the pipeline infers
    shapes again with the bound dims fixed (graphmem/pipeline/run.py `_with_dims_fixed`):
    with every bound dim but the batch fixed the batch stays a dim of the graph; where the
    batch had to be fixed too, another batch is another inference, which only a whole new
    analysis (as `--batch N` would run it) can give. Where fixing dims resolved nothing, the
    symbolic graph was kept, and a new analysis would keep it again. A graph with dims shape
    inference invented is re-run too: only a new analysis says whether they resolve. So is a
    graph with data-sized counts (NonZero's): a router's follow the batch through the dims
    binding (passes/routed_dims.py), which a new analysis binds again; the import is the one
    graph's, as no inference follows such a count (run.py imports it once). `free`: the
    graph's `free_dims()`, where already found.
    """
    graph = analysis.graph
    if analysis.model.source_format != "onnx":
        return None
    free = graph.free_dims() if free is None else free
    if probed <= free and not (sized := data_sized_dims(graph)) and not invented_dims(
            graph, free, sized):
        return None
    return rerun


def unbound_input_dims(analysis: Analysis, varied: str) -> list[str]:
    """Free dims of the model's inputs other than `varied` (dims shape inference invented for
    sizes it could not follow are not the user's to bind: binding the inputs resolves them)."""
    inputs = set(analysis.graph.input_dims_in_order())
    return [d for d in analysis.dims.free if d != varied and d in inputs]


def with_plans(analysis: Analysis, gpu: GpuSpec | None, sweep: SweepRequest | None = None,
               sizes: Mapping[str, SymInt | None] | None = None,
               rerun: Reanalyze | None = None) -> Analysis:
    """`analysis` with the planning results; `gpu` enables roofline and max batch.

    `sizes` are the value sizes the liveness used (`value_bytes`), if at hand; `rerun` the
    whole analysis at other dims (see `reanalyzer`).
    """
    graph, binding = analysis.graph, analysis.dims
    free = graph.free_dims()
    sweep_dim = resolve_sweep_dim(analysis, sweep.dim, free) if sweep else None
    reanalyze = reanalyzer(analysis, probed_dims(binding.batch_dim, sweep_dim), rerun, free)
    sizes = sizes if sizes is not None else value_bytes(graph, binding)
    # the liveness's buffers are the model's (not found twice), its events and totals the
    # model order's
    model = build_memory_model(graph, sizes, plan_dims(graph, binding.bound, free),
                               analysis.liveness.sweep)
    schedule = find_schedule(graph, sizes, analysis.liveness, binding.bound, model)
    arena = plan_arena(model)
    roofline = None
    if gpu is not None:
        roofline = _roofline(analysis, gpu)
    max_batch = None
    if gpu is not None and analysis.fit is not None:
        max_batch = solve_max_batch(analysis, analysis.fit.usable_bytes, reanalyze,
                                    sizes=sizes, model=model)
    sweep_result = None
    if sweep is not None and sweep_dim is not None:
        from graphmem.pipeline.dim_probe import DimProbe

        usable = analysis.fit.usable_bytes if analysis.fit else None
        probe = DimProbe(analysis, sweep_dim, reanalyze, sizes, model)
        sweep_result = probe.sweep(sweep.values, gpu, usable)
    return dataclasses.replace(analysis, schedule=schedule, arena=arena, roofline=roofline,
                               max_batch=max_batch, sweep=sweep_result, reanalyze=reanalyze)


def _roofline(analysis: Analysis, gpu: GpuSpec) -> RooflineResult | None:
    """The roofline on `gpu` where every count is a number."""
    from graphmem.passes.roofline import estimate_roofline
    from graphmem.pipeline.dim_probe import costs_bound

    if not costs_bound(analysis.costs):
        return None
    binding = analysis.dims
    return estimate_roofline(analysis.graph, analysis.costs, gpu, binding.bound,
                             binding.batch_dim)


def probed_dims(*dims: str | None) -> frozenset[str]:
    """The dims probes vary (those named)."""
    return frozenset(dim for dim in dims if dim is not None)


def resolve_sweep_dim(analysis: Analysis, name: str,
                      free: frozenset[str] | None = None) -> str:
    """The dim a sweep varies; every other dim must be bound. Errors name the fix."""
    binding = analysis.dims
    known = set(analysis.graph.free_dims() if free is None else free) | set(binding.bound)
    dim = name
    if name not in known and name == "batch" and binding.batch_dim is not None:
        dim = binding.batch_dim
    if dim in binding.bound:
        raise GraphmemError(f"--sweep {name}=... and a bound value for '{dim}' (--batch/--dim)"
                            " disagree: give only the sweep")
    if dim not in known:
        names = ", ".join(sorted(known)) or "none (all its shapes are fixed)"
        raise GraphmemError(f"--sweep {name}=...: the model has no dynamic dim named '{name}';"
                            f" its dynamic dims: {names}")
    others = unbound_input_dims(analysis, dim)
    if others:
        raise GraphmemError(f"--sweep {name}=...: bind the other dynamic dims first"
                            f" ({', '.join(f'--dim {d}=N' for d in others)})")
    return dim


def solve_max_batch(analysis: Analysis, usable_bytes: int, reanalyze: Reanalyze | None = None,
                    probe: DimProbe | None = None,
                    sizes: Mapping[str, SymInt | None] | None = None,
                    model: MemoryModel | None = None) -> MaxBatchResult:
    """The largest batch whose live-tensor peak fits `usable_bytes` (with a GPU, the guess
    `solve_on_device` starts from); `probe` may be shared between GPUs."""
    from graphmem.passes.max_batch import find_max_batch, not_solved
    from graphmem.pipeline.dim_probe import DimProbe, UnresolvedPeak

    batch_dim = analysis.dims.batch_dim
    if batch_dim is None:
        reason = analysis.dims.batch_note or "the model's inputs have no batch axis"
        if analysis.model.source_format == "torch.fx":
            reason = ("a PyTorch model is traced at its --input shapes: give another batch in"
                      " --input to try it (--suggest searches the largest that fits)")
        return not_solved(None, usable_bytes, reason)
    others = unbound_input_dims(analysis, batch_dim)
    if others:
        binds = ", ".join(f"--dim {d}=N" for d in others)
        return not_solved(batch_dim, usable_bytes,
                          f"bind the other dynamic dims ({binds}) to solve for the batch")
    probe = probe or DimProbe(analysis, batch_dim, reanalyze, sizes, model)
    try:
        return find_max_batch(batch_dim, usable_bytes, probe.estimate, probe.exact_peak)
    except UnresolvedPeak as unresolved:
        return not_solved(batch_dim, usable_bytes, f"{unresolved}: re-export the model with"
                          " static shapes for those tensors")


def solve_on_device(analysis: Analysis, guess: MaxBatchResult, device: DeviceModel,
                    reanalyze: Reanalyze | None = None,
                    probe: DeviceTotalProbe | None = None,
                    seen: tuple[int, int] | None = None) -> MaxBatchResult:
    """The largest batch whose device total (`device`'s runtime model, re-run at each batch
    probed) fits the GPU's capacity, starting from `guess`, the live-peak answer. `probe`:
    the caller's, to read the estimates it made afterwards; `seen`: (batch, device total)
    of a run of the same model the caller already made (the analysed batch's verdict).

    The device total is the live peak plus what the runtime adds (weights in its pool,
    allocator rounding), which changes little from one batch to the next: from the device
    total at the guess, a line says where the answer is, and the search checks it there
    (each check a run of the runtime model; find_max_batch gallops on from a wrong guess).
    The line runs through the device totals at the guess and at `seen` where both are known:
    onnxruntime's arena grows in doubling regions, so the total climbs in steps whose average
    slope the live peak's own slope at the guess (the line otherwise) can miss by far."""
    from graphmem.passes.max_batch import find_max_batch
    from graphmem.pipeline.device_total import DeviceTotalProbe

    if guess.max_batch is None or guess.batch_dim is None:
        return dataclasses.replace(guess, limit_bytes=device.capacity_bytes, basis=device.basis)
    probe = probe or DeviceTotalProbe(analysis, guess.batch_dim, device, reanalyze)
    line = _device_line(guess, probe, seen)
    # the line's own run at the guess bounds the search too (graphmem/passes/max_batch.py)
    known = {guess.max_batch: probe.total(guess.max_batch)} if line is not None else None
    return find_max_batch(guess.batch_dim, device.capacity_bytes, line, probe.total,
                          start=guess.max_batch, basis=device.basis, known=known)


def _device_line(guess: MaxBatchResult, probe: DeviceTotalProbe,
                 seen: tuple[int, int] | None = None) -> Callable[[int], int] | None:
    """The device total at the guess, continued through `seen` where it is another batch
    with a smaller total, else with the live peak's slope there (None where the live peak
    does not grow with the batch there)."""
    start, at, after = guess.max_batch, guess.peak_at_max_bytes, guess.peak_at_next_bytes
    if not start or at is None or after is None or after <= at:
        return None
    total = probe.total(start)
    rise, run = after - at, 1
    if seen is not None and seen[0] != start and (total - seen[1]) * (start - seen[0]) > 0:
        rise, run = total - seen[1], start - seen[0]  # the secant: both totals real runs
    return lambda batch: total + (batch - start) * rise // run


@dataclass(frozen=True)
class GpuRow:
    """One GPU of `graphmem gpus --fits`: the fit, the roofline, the largest batch."""

    fit: GpuFit
    roofline: RooflineResult | None  # every dim bound
    max_batch: MaxBatchResult | None  # the model has a batch dim


def fits_on_each_gpu(analysis: Analysis, gpus: Sequence[GpuSpec],
                     reserve: CudaReserve | None = None,
                     rerun: Reanalyze | None = None) -> list[GpuRow]:
    """`analysis` (planned without a GPU) against every GPU of `gpus`: each GPU's verdict
    on its runtime model's device total, and the largest batch on it."""
    from graphmem.pipeline.dim_probe import DimProbe

    binding = analysis.dims
    reanalyze = reanalyzer(analysis, probed_dims(binding.batch_dim), rerun)
    probe = None
    solvable = binding.batch_dim is not None and not unbound_input_dims(analysis,
                                                                       binding.batch_dim)
    if solvable:
        probe = DimProbe(analysis, binding.batch_dim or "", reanalyze)
    override = reserve.bytes if reserve is not None else None
    rows = []
    with steps("fitting each GPU", len(gpus)) as done:  # a max-batch search per GPU
        for gpu in gpus:
            rows.append(_gpu_row(analysis, gpu, override, reanalyze, probe))
            done(len(rows))
    return rows


def _gpu_row(analysis: Analysis, gpu: GpuSpec, override: int | None,
             reanalyze: Reanalyze | None, probe: DimProbe | None) -> GpuRow:
    """One GPU's verdict, roofline and largest batch."""
    from graphmem.pipeline.device_total import DeviceModel, gpu_runtime

    binding = analysis.dims
    device = DeviceModel(gpu_runtime(analysis), gpu, override)
    fit = _gpu_fit(analysis, device)
    roofline = _roofline(analysis, gpu)
    max_batch = None
    if binding.batch_dim is not None:
        guess = solve_max_batch(analysis, fit.usable_bytes, reanalyze, probe)
        max_batch = solve_on_device(analysis, guess, device, reanalyze)
    return GpuRow(fit, roofline, max_batch)


def _gpu_fit(analysis: Analysis, device: DeviceModel) -> GpuFit:
    from graphmem.passes.fit import fit_on_gpu
    from graphmem.pipeline.device_total import device_estimate, device_fit

    if analysis.dims.free:
        return fit_on_gpu(device.gpu, analysis.liveness.peak_bytes, device.reserve)
    return device_fit(analysis, device_estimate(analysis, device), device)
