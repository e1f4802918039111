"""The pipeline: `analyze(request)`, the one path from a Request to an Analysis.

Stages, in order (DESIGN.md "The pipeline"):
1. import: the front end makes graphmem's IR (ONNX file, or a PyTorch model traced with fake
   tensors; a model given as a spec is loaded once per chain of re-runs);
2. bind dims (ONNX), re-importing with the bound dims fixed where that resolves shapes the
   symbolic inference left unknown;
3. the training step (ONNX inference graph expanded; a PyTorch step is traced as one);
4. the passes every front door shares, then planning (graphmem/pipeline/planning.py);
5. suggestions (graphmem/suggest/driver.py), the runtime model, distributed training and the
   KV cache (graphmem/pipeline/runtime.py, extras.py).
Every re-run is `analyze(replace(request, ...))`: planning's re-analysis at other dims and
each suggestion's change go through `rerun_request` below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from graphmem.core.collector import collector_paused
from graphmem.core.ir import Graph
from graphmem.core.progress import stage
from graphmem.core.routing import MoeRouting
from graphmem.core.scratch import PRIVATE_FOLDERS, TORCH_CACHE_VARIABLE
from graphmem.errors import GraphmemError
from graphmem.frontends.imported import ImportedModel
from graphmem.passes.costs import compute_costs
from graphmem.passes.dims import (
    DimBinding,
    SizeTable,
    bind_dims,
    shape_gaps,
    sizes_follow_dims,
    value_bytes,
)
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.modules import group_by_module
from graphmem.passes.params import PackedWeights, count_params, with_packed_weights
from graphmem.passes.routed_dims import bind_routed, routing_warning
from graphmem.pipeline.analysis import Analysis, ModelInfo, TrainingInfo
from graphmem.pipeline.extras import with_distributed_request, with_kv_request
from graphmem.pipeline.imports import ModelImports
from graphmem.pipeline.planning import GpuRow, fits_on_each_gpu, with_plans
from graphmem.pipeline.request import Request, SweepRequest, rerun_request
from graphmem.pipeline.runtime_levers import with_runtime_levers
from graphmem.pipeline.suggestions import with_suggestions

if TYPE_CHECKING:  # an ONNX model's file (a PyTorch command imports no onnx); the GPU's
    # table and fit, the runtime model and the verdict: imported where a GPU is named
    from graphmem.core.symbolic import SymInt
    from graphmem.devices.gpus import GpuSpec
    from graphmem.frontends.onnx.runtime_inputs import OnnxFile
    from graphmem.frontends.torch.finetune import FinetuneReport, Nf4Summary
    from graphmem.passes.fit import CudaReserve, GpuFit
    from graphmem.pipeline.device_total import Reanalyze


def analyze(request: Request) -> Analysis:
    """The whole analysis `request` asks for; a GraphmemError names what is wrong."""
    if request.is_torch:  # before torch or transformers loads (core/scratch.py)
        PRIVATE_FOLDERS.claim(TORCH_CACHE_VARIABLE)
    request.check()
    request = resolve(request)
    gpu = _gpu(request.gpu)
    # an ONNX file's graph lives to the command's end and its reading leaves no cyclic
    # garbage: frozen after the stage in a one-command process (the next young collection
    # walked the whole IR: 0.02 CPU s at 22,000 nodes); a trace's garbage is collected
    with stage("tracing the model" if request.is_torch else "reading the model"), \
            collector_paused(last=not request.is_torch):
        imported, binding, finetune = _imported(request)
    # the passes allocate in bulk: no cyclic collections meanwhile, and what they made (the
    # analysis, alive to the command's end) frozen after them in a one-command process: the
    # next young collection walked all of it (0.03 CPU s at 22,000 nodes; core/collector.py)
    with stage(f"analysing {len(imported.graph.nodes):,} nodes"), collector_paused(last=True):
        analysis = run_passes(imported.graph, model_info(request, imported), binding, gpu,
                              request.cuda_reserve_bytes, _training_info(request, imported),
                              request.module_depth, request.sweep, request.plan,
                              rerun=_dims_rerun(request))
    analysis = replace(analysis, runtime_inputs=imported.runtime_inputs,
                       moe_routing=request.moe_routing)
    analysis = _with_finetune(analysis, finetune)
    analysis = _with_weight_quant(analysis, request)
    with stage("suggestions"):
        analysis = with_suggestions(analysis, request, analyze)
    with stage("runtime model"), collector_paused(last=True):
        analysis = _with_runtime(analysis, request, gpu)
    with stage("runtime options"):
        analysis = with_runtime_levers(analysis, request, analyze)
    analysis = with_verdict_distributed(with_distributed_request(analysis, request),
                                        request.cuda_reserve_bytes)
    return _with_serving_verdict(with_kv_request(analysis, request))


def _gpu(name: str | None) -> GpuSpec | None:
    """The GPU named (its table imported only then)."""
    if name is None:
        return None
    from graphmem.devices.gpus import find_gpu

    return find_gpu(name)


def _with_runtime(analysis: Analysis, request: Request, gpu: GpuSpec | None) -> Analysis:
    """The runtime model and the verdict (pipeline/runtime.py), imported where asked for."""
    if gpu is None and request.runtime is None:
        return analysis  # with_runtime_request's answer without them: nothing to model
    from graphmem.pipeline.runtime import with_runtime_request

    return with_runtime_request(analysis, request, gpu)


def with_verdict_distributed(analysis: Analysis, cuda_reserve_bytes: int | None = None
                             ) -> Analysis:
    """pipeline/verdict.py `with_distributed_verdict` where a distributed job has a GPU's
    verdict (its answer otherwise: the analysis unchanged)."""
    if analysis.distributed is None or analysis.fit is None:
        return analysis
    from graphmem.pipeline.verdict import with_distributed_verdict

    return with_distributed_verdict(analysis, cuda_reserve_bytes)


def _with_serving_verdict(analysis: Analysis) -> Analysis:
    """Under --serve the verdict is the serving plan's: does one sequence at the context fit
    (graphmem/distributed/serving.py `serving_fit`)."""
    kv, fit = analysis.kv_cache, analysis.fit
    if kv is None or kv.serving is None or fit is None:
        return analysis
    from graphmem.distributed.kv_cache import with_serving_answer
    from graphmem.distributed.serving import serving_fit

    return replace(analysis, fit=serving_fit(fit, kv.serving), kv_cache=with_serving_answer(kv))


def resolve(request: Request) -> Request:
    """The request with the imports its chain of re-runs shares (graphmem/pipeline/imports.py);
    a PyTorch request with its files loaded: the loss and example inputs, then the model
    (built on the meta device); re-runs of the result reuse the loaded module."""
    if request.imports is None:  # the chain of re-runs starts here: it reads the model once
        request = replace(request, imports=ModelImports())
    if not request.is_torch:
        return request
    from graphmem.frontends.torch.loader import load_example_inputs, load_loss, load_model

    training = request.training
    if training is not None and isinstance(training.loss, str):
        request = replace(request, training=replace(training, loss=load_loss(training.loss)))
    if request.example_inputs is not None:
        request = replace(request, inputs=tuple(load_example_inputs(request.example_inputs)),
                          example_inputs=None)
    model = request.model
    if request.is_hf_config:
        request = _built_from_config(request)
    elif isinstance(model, str):
        request = replace(request, model=load_model(model), label=request.label or model)
    elif request.label is None:
        request = replace(request, label=type(model).__name__)
    return _with_checkpointed_layers(request)


def _built_from_config(request: Request) -> Request:
    """A Hugging Face config built on the meta device; input_ids from --batch/--dim seq=
    unless --input gave the inputs (then batch and dims are spent: re-runs bind nothing)."""
    from graphmem.frontends.torch.hf_config import SEQ_DIMS, build_hf_model, default_input

    source = request.model
    built = build_hf_model(source if isinstance(source, Mapping) else str(source),
                           training=request.training is not None)
    notes, assumptions = built.notes, request.assumptions
    inputs = request.inputs
    if not inputs:
        seq = next((request.dims[name] for name in SEQ_DIMS if name in request.dims), None)
        batch, seq, profiled = _serving_step(request, built.module, request.batch, seq)
        spec, note = default_input(built.module, batch, seq)
        inputs = (spec,)
        if profiled:  # not assumed: the step the engine itself profiles
            notes = (*notes, profiled)
        elif request.batch is None or seq is None:  # default_input assumed one of them
            assumptions = (*assumptions, note)
        else:
            notes = (*notes, note)
    return replace(request, model=built.module, label=request.label or built.label,
                   inputs=inputs, batch=None, dims={}, notes=(*request.notes, *notes),
                   assumptions=assumptions)


def _serving_step(request: Request, module: object, batch: int | None, seq: int | None
                  ) -> tuple[int | None, int | None, str]:
    """Under --serve with no shape given, the step vLLM profiles at start: one prompt of
    max_num_batched_tokens tokens (--max-batched-tokens, else its default on the GPU; at
    most the model's positions), and the note that says so; else the shape as given."""
    from graphmem.devices.gpus import find_gpu
    from graphmem.distributed.engines import default_step_tokens
    from graphmem.frontends.torch.hf_config import max_positions

    serving = request.serving
    if serving is None or batch is not None or seq is not None or request.gpu is None:
        return batch, seq, ""
    gpu = find_gpu(request.gpu)
    step = serving.prefill_tokens or default_step_tokens(serving.engine, gpu.name,
                                                         gpu.capacity_bytes)
    limit = max_positions(module)
    tokens = min(step, limit) if limit else step
    return 1, tokens, (f"input_ids 1x{tokens}:int64: the step the engine profiles at start"
                       f" (max_num_batched_tokens {step:,}"
                       + (f", capped by the model's {limit:,} positions" if tokens < step else "")
                       + "; --max-batched-tokens sets it)")


def _with_checkpointed_layers(request: Request) -> Request:
    """--gradient-checkpointing: the layers Hugging Face's gradient_checkpointing_enable
    wraps, added to the modules the step checkpoints (once: a re-run adds none)."""
    from graphmem.frontends.torch.hf_config import checkpointed_layers

    finetune, training = request.finetune, request.training
    if finetune is None or not finetune.gradient_checkpointing or training is None:
        return request
    layers = checkpointed_layers(request.model)
    if not layers:
        raise GraphmemError("--gradient-checkpointing wraps the layers of a transformers model"
                            " (its GradientCheckpointingLayer modules); this model has none:"
                            " checkpoint modules by path instead (checkpoints=...)")
    paths = tuple(dict.fromkeys((*training.checkpoints, *layers)))
    return replace(request, training=replace(training, checkpoints=paths))


def _imported(request: Request) -> tuple[ImportedModel, DimBinding, FinetuneReport | None]:
    if request.is_torch:
        imported, finetune = import_torch_model(request)
        return imported, DimBinding(bound={}, free=(), batch_dim=None), finetune
    return (*import_model(request), None)


def _with_finetune(analysis: Analysis, report: FinetuneReport | None) -> Analysis:
    """The fine-tuning report on the Analysis, and the parameter count it corrects: NF4
    weights are counted by their elements, listed by type in `params.quantized`."""
    if report is None:
        return analysis
    params = analysis.params
    if report.nf4 is not None:
        params = with_packed_weights(params, nf4_packed(report.nf4))
    return replace(analysis, finetune=report, params=params)


def _with_weight_quant(analysis: Analysis, request: Request) -> Analysis:
    """--weights int4 / int4-tiled: the packed uint8 parameters counted as the weights they
    hold (int8 weights are one element each: nothing to correct)."""
    if request.weights is None or not request.weights.scheme.startswith("int4"):
        return analysis
    from graphmem.frontends.torch.weight_quant import quantized_layout

    layout = quantized_layout(request.model, request.weights)
    packed = PackedWeights("int4", layout.weights, layout.stored_count, layout.stored_bytes,
                           layout.constant_count, layout.constant_bytes)
    return replace(analysis, params=with_packed_weights(analysis.params, packed))


def nf4_packed(nf4: Nf4Summary) -> PackedWeights:
    """The NF4 weights as the parameter count sees them: packed uint8 parameters (one byte,
    two weights) and their constants (buffers), graphmem/frontends/torch/nf4.py's layout."""
    layout = nf4.bytes
    return PackedWeights("nf4", layout.weights, layout.packed, layout.packed,
                         layout.constant_elements(nf4.double_quant), layout.constants)


def import_model(request: Request) -> tuple[ImportedModel, DimBinding]:
    """The front end's graph, its dims bound, a training step where asked for."""
    if request.is_torch:
        return import_torch_model(request)[0], DimBinding(bound={}, free=(), batch_dim=None)
    source = _imports(request).onnx_file(Path(str(request.model)))
    imported = source.imported()
    binding = bind_dims(imported.graph, request.batch, request.dims)
    if binding.bound and not sizes_follow_dims(imported.graph):
        imported = _with_dims_fixed(source, imported, binding)
        # the dims left free are the kept graph's (a re-inference names its own)
        binding = replace(binding, free=tuple(sorted(imported.graph.free_dims()
                                                     - binding.bound.keys())))
    if request.training is not None:
        from graphmem.training.onnx_step import onnx_training_step  # an inference: not imported

        step = onnx_training_step(imported.graph, binding, request.training)
        imported = replace(imported, graph=step.graph, micro_batch=step.micro_batch,
                           warnings=(*imported.warnings, *step.warnings))
    return _routed(imported, binding, request.moe_routing)


def _routed(imported: ImportedModel, binding: DimBinding, routing: MoeRouting
            ) -> tuple[ImportedModel, DimBinding]:
    """A mixture of experts' token counts bound by --moe-routing, for every pass and runtime
    model alike (graphmem/passes/routed_dims.py), and the warning that says so."""
    binding = bind_routed(imported.graph, binding, routing)
    warning = routing_warning(binding.routed, routing)
    if not warning:
        return imported, binding
    return replace(imported, warnings=(*imported.warnings, warning)), binding


def _with_dims_fixed(source: OnnxFile, imported: ImportedModel, binding: DimBinding
                     ) -> ImportedModel:
    """Concrete input dims can let shape inference finish what the symbolic one could not.
    First every bound dim but the batch is fixed: where that follows every size, the batch
    stays symbolic and every probe along it (largest batch, suggestions, distributed plans)
    binds it on this one graph. Else every bound dim is fixed too, and the import with the
    fewest shape gaps (`shape_gaps`) is kept, the earlier on a tie; with the batch fixed,
    each batch a probe tries is an import of its own (graphmem/pipeline/planning.py
    `reanalyzer`)."""
    fixed = {k: v for k, v in binding.bound.items() if k != binding.batch_dim}
    tries: list[tuple[ImportedModel, Mapping[str, int]]] = [(imported, {})]
    if fixed and fixed != binding.bound:
        tries.append((source.imported(fixed), fixed))
        if sizes_follow_dims(tries[-1][0].graph, _batch_dims(binding)):
            return _fixed_note(*tries[-1])
    tries.append((source.imported(binding.bound), binding.bound))
    best, dims = min(tries, key=lambda tried: shape_gaps(tried[0].graph))
    return _fixed_note(best, dims) if dims else best


def _fixed_note(imported: ImportedModel, dims: Mapping[str, int]) -> ImportedModel:
    text = ", ".join(f"{k}={v}" for k, v in dims.items())
    return replace(imported, warnings=(
        *imported.warnings, f"shapes were inferred with the bound dims fixed: {text}"))


def _batch_dims(binding: DimBinding) -> frozenset[str]:
    return frozenset({binding.batch_dim} if binding.batch_dim else ())


def _imports(request: Request) -> ModelImports:
    """The chain's imports (a request that did not go through `resolve`: its own)."""
    return request.imports if request.imports is not None else ModelImports()


def import_torch_model(request: Request) -> tuple[ImportedModel, FinetuneReport | None]:
    """The traced step, with LoRA / QLoRA applied for the trace (frontends/torch/peft.py);
    what `resolve` assumed and what fine-tuning applied are among its notes."""
    from graphmem.frontends.torch.import_step import import_torch
    from graphmem.frontends.torch.kernel_choice import cuda_target
    from graphmem.frontends.torch.peft import fine_tuned, finetune_notes
    from graphmem.frontends.torch.weight_quant import weight_quant_note, weight_quantized

    pooled = [(head.path, head.positions) for head in request.pooled_heads]
    training = request.training
    # a CUDA GPU named: the step as its CUDA kernels would run it (docs/cuda-trace.md)
    cuda = cuda_target(gpu) if (gpu := _gpu(request.gpu)) else None

    def trace() -> tuple[ImportedModel, FinetuneReport | None]:
        with weight_quantized(request.model, request.weights) as quantized, fine_tuned(
                request.model, request.finetune, training.optimizer if training else None,
                training.checkpoints if training else ()) as report:
            imported = import_torch(request.model, request.inputs,
                                    request.label or "", training, pooled, cuda=cuda,
                                    routing=request.moe_routing)
        notes = (*request.notes, *finetune_notes(report, request.finetune),
                 *weight_quant_note(quantized))
        return replace(imported, notes=(*imported.notes, *notes),
                       warnings=(*request.assumptions, *imported.warnings)), report

    return _imports(request).traced(_trace_key(request), trace,
                                    lambda made: len(made[0].graph.nodes))


def _trace_key(request: Request) -> tuple[object, ...]:
    """What a trace depends on: the module, the input shapes, everything traced with them."""
    from graphmem.frontends.torch.import_step import tensor_specs

    return (request.model, tuple(tensor_specs(request.inputs)),
            request.label, request.training, request.pooled_heads, request.gpu,
            request.moe_routing, request.finetune, request.weights, request.notes,
            request.assumptions)


def model_info(request: Request, imported: ImportedModel) -> ModelInfo:
    graph = imported.graph
    return ModelInfo(
        path=request.label or imported.path,
        name=graph.name,
        source_format=graph.source_format,
        opset=0 if request.is_torch else graph.opset,
        node_count=len(graph.nodes),
        shape_inference=imported.shape_inference,
        warnings=(*imported.warnings, *_gpu_choice(request.gpu)),
        notes=imported.notes,
        kernels=imported.kernels,  # a torch trace for a CUDA GPU
    )


def _gpu_choice(name: str | None) -> tuple[str, ...]:
    """One family policy: a family name resolves when every variant has the same memory (the
    verdict cannot change), and the output says which variant it was taken as (`--gpu h100`
    took the SXM part without a word; `--gpu a100`, 40 or 80 GB, is refused)."""
    if name is None:
        return ()
    from graphmem.devices.gpus import find_gpu, other_variants

    others = other_variants(name)
    if not others:
        return ()
    spec = find_gpu(name)
    names = ", ".join(other.name for other in others)
    return (f"--gpu {name} is taken as {spec.name} ({spec.full_name}); {names} has the same"
            " memory but other bandwidth and FLOP rates: name the variant for its latency",)


def run_passes(
    graph: Graph,
    info: ModelInfo,
    binding: DimBinding,
    gpu_spec: GpuSpec | None,
    cuda_reserve_bytes: int | None,
    training: TrainingInfo | None = None,
    module_depth: int = 2,
    sweep: SweepRequest | None = None,
    plan: bool = True,
    rerun: Reanalyze | None = None,
) -> Analysis:
    """The passes every front door shares, on an imported graph with its dims bound; `rerun`
    is the whole analysis at other dims (planning needs it where shapes were re-inferred)."""
    table = SizeTable(graph)  # kept: the runtime models' probes bind it again
    sizes = value_bytes(graph, binding, table)
    liveness = analyze_liveness(graph, sizes, dims=binding.bound)
    reserve = None
    if cuda_reserve_bytes is not None:
        from graphmem.passes.fit import CudaReserve

        reserve = CudaReserve(cuda_reserve_bytes, "given with --cuda-reserve")
    costs = compute_costs(graph, binding)
    analysis = Analysis(
        model=info,
        mode="training" if training else "inference",
        dims=binding,
        params=count_params(graph),
        costs=costs,
        liveness=liveness,
        fit=_fit(gpu_spec, liveness.peak_bytes, reserve),
        graph=graph,
        training=training,
        modules=group_by_module(graph, costs, liveness, module_depth),
        sizes=sizes,
        size_table=table,
    )
    return with_plans(analysis, gpu_spec, sweep, sizes, rerun) if plan else analysis


def _fit(gpu: GpuSpec | None, peak_bytes: SymInt, reserve: CudaReserve | None) -> GpuFit | None:
    """The live-peak verdict on `gpu` (the GPU fit imported only with a GPU)."""
    if gpu is None:
        return None
    from graphmem.passes.fit import fit_on_gpu

    return fit_on_gpu(gpu, peak_bytes, reserve)


def fits_on_gpus(request: Request, gpus: Sequence[GpuSpec], cuda_reserve_bytes: int | None
                 ) -> tuple[Analysis, list[GpuRow]]:
    """`graphmem gpus --fits`: the model analysed without a GPU, against each of `gpus`."""
    request = resolve(request)  # its re-runs share the one import
    analysis = analyze(replace(request, gpu=None, plan=False))
    from graphmem.passes.fit import CudaReserve

    reserve = None
    if cuda_reserve_bytes is not None:
        reserve = CudaReserve(cuda_reserve_bytes, "given with --cuda-reserve")
    return analysis, fits_on_each_gpu(analysis, gpus, reserve, _dims_rerun(request))


def _dims_rerun(request: Request) -> Reanalyze:
    def rerun(dims: dict[str, int]) -> Analysis:
        return analyze(rerun_request(request, batch=None, dims=dims))

    return rerun


def _training_info(request: Request, imported: ImportedModel) -> TrainingInfo | None:
    if request.training is None:
        return None
    return TrainingInfo(request.training, imported.micro_batch)

