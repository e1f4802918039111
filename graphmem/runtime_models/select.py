"""The runtime models, by name: `MODELS`, the default for an input, and the one `estimate`.

Each model has the same signature (graphmem/runtime_models/base.py `RuntimeModel`):
- ort-cpu: onnxruntime's CPU allocation plan and arena, on the graph the session runs
  (onnxruntime's optimized graph at the chosen level, from the ONNX front end);
- ort-cuda: the same plan on the CUDA arena, plus the CUDA context;
- torch-cuda: eager PyTorch through the CUDA caching allocator
  (graphmem/runtime_models/torch_cuda.py);
- torch-cpu: eager PyTorch on the CPU, each kernel's scratch added while it runs
  (graphmem/runtime_models/torch_cpu.py).
A new runtime is one class here and one entry in MODELS; each model's module is imported
when its estimate is first asked for (an ONNX command on the CPU imports no CUDA model).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from graphmem.core.conventions import closed
from graphmem.core.ir import Graph
from graphmem.core.ort_view import OptimizedOrtGraph
from graphmem.core.symbolic import SymInt
from graphmem.errors import GraphmemError
from graphmem.passes.dims import value_bytes
from graphmem.runtime_models.data_bounds import DataBounds, carried_counts, data_bounds
from graphmem.runtime_models.vocabulary import ORT_OPTIMIZATION_LEVELS, Runtime

if TYPE_CHECKING:  # onnxruntime's plan: imported by the estimates that make one; the models'
    # types and the GPU's: imported by the estimates (a check of the options needs neither)
    from graphmem.devices.gpus import GpuSpec
    from graphmem.runtime_models.base import RuntimeContext, RuntimeEstimate, RuntimeModel
    from graphmem.runtime_models.ort_cpu import PlanShape


class _Model:
    """What every model checks: ONNX only, inference only, a GPU to size the context."""

    name: Runtime
    onnx_only = False
    inference_only = False
    needs_gpu = False

    def check(self, is_onnx: bool, has_gpu: bool, training: bool) -> None:
        if self.onnx_only and not is_onnx:
            raise GraphmemError(f"--runtime {self.name} models onnxruntime running an ONNX"
                                " file; for a PyTorch model use --runtime torch-cuda (with"
                                " --gpu)")
        if self.inference_only and training:
            raise GraphmemError(f"--runtime {self.name} models inference; drop --train, or"
                                " use --runtime torch-cuda for a training step")
        if self.needs_gpu and not has_gpu:
            raise GraphmemError(f"--runtime {self.name} needs a GPU to size the CUDA context:"
                                " add --gpu NAME (see 'graphmem gpus')")

    def gpu(self, context: RuntimeContext) -> GpuSpec:
        if context.gpu is None:
            raise GraphmemError(f"--runtime {self.name} needs --gpu NAME (see 'graphmem gpus')")
        return context.gpu


class OrtCpu(_Model):
    name = Runtime.ORT_CPU
    onnx_only = inference_only = True

    def check(self, is_onnx: bool, has_gpu: bool, training: bool) -> None:
        super().check(is_onnx, has_gpu, training)
        if has_gpu:  # one verdict per GPU: it comes from that GPU's runtime model
            raise GraphmemError("--runtime ort-cpu models onnxruntime on the CPU, but --gpu"
                                " asks whether the model fits that GPU, which graphmem decides"
                                " with onnxruntime's CUDA model: drop --runtime ort-cpu (or"
                                " --gpu)")

    def estimate(self, context: RuntimeContext) -> RuntimeEstimate:
        """Above "disabled", onnxruntime's optimized graph is planned, else the graph as
        written; no level: "all" for models up to `context.auto_optimize_max_bytes` of
        weights, the graph as written above."""
        from graphmem.runtime_models.base import default_threads
        from graphmem.runtime_models.ort_cpu import ort_cpu_estimate
        from graphmem.runtime_models.ort_sizes import fill_unknown_sizes

        threads = context.threads or default_threads()
        optimized, note = _optimized(context)
        written = _data_bounds(context.graph, context)
        context = _bounded(context, written.bound)  # NonZero's sizes at their bound
        if optimized is not None:  # the graph onnxruntime runs, in the order it runs it
            graph = optimized.graph
            on_graph = _carried(graph, context)  # the same binding, by tensor
            bounds = _data_bounds(graph, on_graph)
            dims = _bounded(on_graph, bounds.bound).dims
            # a tensor whose shape the optimized graph's inference lost: the same tensor
            # of the graph as written, else an estimate (ort_sizes.py), never 0 B silently
            fill = fill_unknown_sizes(graph, value_bytes(graph, dims), lambda: _sizes(context))
            return ort_cpu_estimate(graph, fill.sizes, threads, dims.bound,
                                    optimized.plan_shapes, context.resident_bytes,
                                    order=graph.nodes, graph_note=_joined(
                                        note, fill.note(),
                                        (bounds if bounds.bound else written).note()),
                                    extend=context.ort_arena_extend)
        fill = fill_unknown_sizes(context.graph, _sizes(context))
        return ort_cpu_estimate(context.graph, fill.sizes, threads,
                                context.dims.bound, _plan_shapes(context),
                                context.resident_bytes,
                                graph_note=_joined(note, fill.note(), written.note()),
                                extend=context.ort_arena_extend)


class OrtCuda(_Model):
    name = Runtime.ORT_CUDA
    onnx_only = inference_only = needs_gpu = True

    def estimate(self, context: RuntimeContext) -> RuntimeEstimate:
        from graphmem.runtime_models.ort_cuda import ort_cuda_estimate
        from graphmem.runtime_models.ort_sizes import fill_unknown_sizes
        from graphmem.runtime_models.torch_cuda import cuda_overhead

        gpu = self.gpu(context)
        overhead = cuda_overhead(gpu.architecture, context.cuda_reserve_bytes)
        graph = context.graph
        bounds = _data_bounds(graph, context)
        context = _bounded(context, bounds.bound)  # NonZero's sizes: a router's, or the bound
        fill = fill_unknown_sizes(graph, _sizes(context))  # never 0 B silently (ort_sizes.py)
        estimate = ort_cuda_estimate(graph, fill.sizes, _plan_shapes(context),
                                     context.resident_bytes, overhead.context_bytes,
                                     overhead.context_source, context.capacity_bytes,
                                     with_notes=context.notes,
                                     extend=context.ort_arena_extend,
                                     bound=context.dims.bound)
        notes = tuple(n for n in (fill.note(), bounds.note()) if n) if context.notes else ()
        return replace(estimate, notes=(*notes, *estimate.notes)) if notes else estimate


class TorchCuda(_Model):
    name = Runtime.TORCH_CUDA
    needs_gpu = True

    def estimate(self, context: RuntimeContext) -> RuntimeEstimate:
        from graphmem.runtime_models.torch_cuda import torch_cuda_estimate

        return torch_cuda_estimate(context, self.gpu(context), context.cuda_reserve_bytes,
                                   context.capacity_bytes)


class TorchCpu(_Model):
    name = Runtime.TORCH_CPU

    def check(self, is_onnx: bool, has_gpu: bool, training: bool) -> None:
        if is_onnx:
            raise GraphmemError("--runtime torch-cpu models PyTorch running a traced model on"
                                " the CPU; for an ONNX file use --runtime ort-cpu")
        if has_gpu:
            raise GraphmemError("--runtime torch-cpu models the CPU, but --gpu asks whether"
                                " the model fits that GPU: drop --runtime torch-cpu (or --gpu)")

    def estimate(self, context: RuntimeContext) -> RuntimeEstimate:
        from graphmem.runtime_models.torch_cpu_estimate import torch_cpu_estimate

        return torch_cpu_estimate(context)


MODELS: dict[str, RuntimeModel] = {model.name: model for model in
                                   (OrtCpu(), OrtCuda(), TorchCuda(), TorchCpu())}


def default_runtime(is_onnx: bool, has_gpu: bool, training: bool) -> Runtime | None:
    """ort-cuda for ONNX inference with a GPU, ort-cpu without; torch-cuda with a GPU for
    PyTorch models and for ONNX training steps (graphmem builds those as PyTorch runs them);
    torch-cpu for PyTorch models without one (their kernels' scratch on the CPU)."""
    if is_onnx and not training:
        return Runtime.ORT_CUDA if has_gpu else Runtime.ORT_CPU
    if has_gpu:
        return Runtime.TORCH_CUDA
    return None if is_onnx else Runtime.TORCH_CPU


def check_runtime(runtime: str, is_onnx: bool, has_gpu: bool, training: bool) -> None:
    """One clear line for a runtime that cannot model this input."""
    model_of(runtime).check(is_onnx, has_gpu, training)


def check_ort_optimization(level: str | None) -> None:
    if level is not None and level not in ORT_OPTIMIZATION_LEVELS:
        raise GraphmemError(f"--ort-optimization {level}: choose one of"
                            f" {', '.join(ORT_OPTIMIZATION_LEVELS)}")


def model_of(runtime: str) -> RuntimeModel:
    return MODELS[closed(Runtime, runtime, "--runtime")]


def estimate(runtime: str, context: RuntimeContext) -> RuntimeEstimate:
    """`runtime`'s estimate for the analysed graph of `context` (every dim bound)."""
    return model_of(runtime).estimate(context)


def _sizes(context: RuntimeContext) -> Mapping[str, SymInt | None]:
    """The analysed graph's value sizes at the context's dims: the caller's, else bound here."""
    if context.sizes is not None:
        return context.sizes
    return value_bytes(context.graph, context.dims)


def _data_bounds(graph: Graph, context: RuntimeContext) -> DataBounds:
    """`graph`'s data-sized dims at the context's dims: a router's token counts as the dims
    binding sized them (passes/routed_dims.py), the rest at their bound."""
    dims = context.dims
    return data_bounds(graph, dims.bound, context.moe_routing, dims.routed)


def _carried(graph: Graph, context: RuntimeContext) -> RuntimeContext:
    """`context` on onnxruntime's optimized `graph`: each data-sized count that is a tensor
    of the graph as written takes that tensor's value (a router's or the user's)."""
    dims = context.dims
    carried = {ours: theirs for ours, theirs in carried_counts(graph, context.graph).items()
               if theirs in dims.bound}
    named = {theirs: ours for ours, theirs in carried.items()}
    routed = tuple(replace(r, dim=named.get(r.dim, r.dim)) for r in dims.routed)
    context = _bounded(context, {ours: dims.bound[theirs] for ours, theirs in carried.items()})
    return replace(context, dims=replace(context.dims, routed=routed))


def _joined(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def _plan_shapes(context: RuntimeContext) -> Mapping[str, PlanShape | None] | None:
    """The shapes onnxruntime plans with (None: use graphmem's); the source's own mapping,
    not a copy: the plan made from it is kept per graph and mapping (graph_cache.py)."""
    source = context.ort_source
    return None if source is None else source.plan_shapes()


def _bounded(context: RuntimeContext, bound: Mapping[str, int]) -> RuntimeContext:
    """`context` with `bound` dims bound too (its sizes found again where any is new)."""
    if not bound:
        return context
    dims = context.dims
    bound_dims = replace(dims, bound={**dims.bound, **bound},
                         free=tuple(d for d in dims.free if d not in bound))
    return replace(context, dims=bound_dims, sizes=None)


def _optimized(context: RuntimeContext) -> tuple[OptimizedOrtGraph | None, str]:
    """onnxruntime's optimized graph at the context's level and the note saying which graph
    was planned; (None, note) where the graph as written is planned."""
    level = context.ort_optimization
    asked = level is not None
    level = level or "all"
    check_ort_optimization(level)
    if level == "disabled":
        return None, "planned the graph as written (ORT_DISABLE_ALL)"
    if context.ort_source is None:
        return None, "planned the graph as written: no ONNX file to optimize"
    hint = "" if asked else (
        " (--ort-optimization all plans onnxruntime's optimized graph anyway: it builds a"
        " session holding synthetic weights of the model's size)")
    limit = context.optimize_max_bytes if asked else context.auto_optimize_max_bytes
    optimized = context.ort_source.optimized(level, context.dims.bound, limit, hint)
    if isinstance(optimized, str):
        return None, optimized
    note = (f"planned onnxruntime's optimized graph (--ort-optimization {level}):"
            f" {len(optimized.graph.nodes)} nodes, {optimized.nodes_before} as written")
    return optimized, "; ".join((note, *optimized.notes))
