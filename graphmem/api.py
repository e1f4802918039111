"""graphmem's Python API: everything the command line does, from Python.

    import graphmem
    result = graphmem.analyze(model, [x], train=True, optimizer="adam", gpu="a100-80gb")
    result = graphmem.analyze_onnx("model.onnx", batch=8, gpu="t4", runtime="auto")
    result = graphmem.analyze(graphmem.Request("model.onnx", batch=8, ...))
    result.peak_bytes, result.breakdown, result.fits, result.to_html("report.html")

Every call builds one Request (graphmem/pipeline/request.py) and runs the pipeline
(graphmem/pipeline/run.py); the Result is the pipeline's Analysis with the renderers added.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from graphmem.core.conventions import AmpPolicy, TrainingOptions
from graphmem.core.safe_text import printable
from graphmem.core.units import format_bytes
from graphmem.distributed.serving import ServingConfig
from graphmem.distributed.strategies import DistributedConfig
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.finetune import (
    FinetuneOptions,
    LoraOptions,
    QloraOptions,
    parse_lora_spec,
    parse_qlora_spec,
)
from graphmem.passes.sweep import parse_sweep
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import (
    KvCacheOptions,
    Request,
    RuntimeOptions,
    SuggestOptions,
    SweepRequest,
)


@dataclass(frozen=True, repr=False)
class Result(Analysis):
    """An Analysis with its renderers: JSON (the README's schema), the HTML report."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON result (schema in the README)."""
        from graphmem.report.json.report import to_dict

        return to_dict(self)

    def to_json(self, path: str | Path) -> None:
        from graphmem.report.json.report import write_json

        write_json(self, Path(path))

    def to_html(self, path: str | Path) -> None:
        from graphmem.report.html.page import write_html

        write_html(self, Path(path))

    @property
    def fits(self) -> bool | None:
        """Whether the peak fits the GPU's usable memory; None without a GPU or with free
        dims."""
        return None if self.fit is None else self.fit.fits

    def __repr__(self) -> str:
        return "\n".join((f"<graphmem.Result {self.model.name} ({self.model.source_format},"
                          f" {self.mode})", f"  peak: {_peak_text(self)}",
                          f"  {_verdict(self)}>"))

    def _repr_html_(self) -> str:
        rows = (("model", f"{self.model.name} ({self.model.source_format}, {self.mode})"),
                ("peak", _peak_text(self)), ("verdict", _verdict(self)))
        cells = "".join(f"<tr><th style='text-align:left'>{name}</th>"
                        f"<td>{html.escape(printable(value, None))}</td></tr>"
                        for name, value in rows)
        return f"<table class='graphmem-summary'>{cells}</table>"


def as_result(analysis: Analysis) -> Result:
    return Result(**{f.name: getattr(analysis, f.name) for f in fields(analysis)})


def _peak_text(result: Analysis) -> str:
    peak = result.peak_bytes
    if isinstance(peak, int):
        return f"{format_bytes(peak)} ({peak:,} B)"
    return f"{peak} B (free dims: {', '.join(sorted(peak.free_dims))})"


def _verdict(result: Analysis) -> str:
    fit = result.fit
    if fit is None:
        return "no GPU given (gpu=NAME)"
    if fit.fits is None:
        return f"{fit.gpu.name}: bind the free dims to decide whether it fits"
    verdict = "fits" if fit.fits else "does NOT fit"
    batch = result.max_batch
    largest = (f"; largest batch {batch.max_batch}"
               if batch is not None and batch.max_batch is not None else "")
    return f"{fit.gpu.name}: {verdict} in {format_bytes(fit.usable_bytes)} usable{largest}"


# ----- the entry points -----------------------------------------------------------------------
def analyze(request_or_model: Request | object, inputs: Sequence[object] | None = None,
            **options: Any) -> Result:
    """Analyze a Request, an ONNX file (path) or a PyTorch model (nn.Module or `file.py:fn`).

    Options (keywords, as the command line's flags): train, optimizer, amp, grad_accum, loss,
    checkpoints, amp_policy; batch, dims (ONNX); gpu, cuda_reserve_bytes, module_depth, plan,
    sweep ("batch=1,2,4"); runtime (None, "auto" or a name), ort_optimization, threads;
    distributed (a DistributedConfig) or gpus/strategy/tensor_parallel; kv_cache (True: the
    ONNX past inputs, "auto", or (layers, kv_heads, head_dim)), kv_dtype, max_context (the
    model's position limit); serve (True, or a ServingConfig) with context, block_size,
    gpu_memory_utilization, max_batched_tokens, and gpus/tensor_parallel as the serving
    engine's; suggest,
    memory_budget_bytes, memory_budget_share; example_inputs, label. Fine-tuning (PyTorch
    models and Hugging Face configs, given as a config.json path, its folder or a dict):
    lora (True, "r=16,alpha=32,targets=q_proj,v_proj" or a LoraOptions), qlora (True, a
    "compute=bf16,..." string or a QloraOptions; implies lora), gradient_checkpointing.
    """
    if isinstance(request_or_model, Request):
        if inputs is not None or options:
            raise TypeError("analyze(request): give the options in the Request")
        return as_result(run.analyze(request_or_model))
    return as_result(run.analyze(build_request(request_or_model, inputs, **options)))


def analyze_onnx(path: str | Path, **options: Any) -> Result:
    """Analyze an ONNX file: `graphmem.analyze_onnx("model.onnx", batch=8, gpu="t4")`.
    `autocast_device` ("cuda" or "cpu") is amp_policy's name here; no suggestions unless
    `suggest=True`."""
    if "autocast_device" in options:
        options["amp_policy"] = options.pop("autocast_device")
    options.setdefault("suggest", False)
    return analyze(Path(path) if isinstance(path, str) else path, **options)


def analyze_torch(model: object, inputs: Sequence[object] | None = None,
                  **options: Any) -> Result:
    """Analyze a PyTorch model (nn.Module, or `file.py:fn` built on the meta device) at
    example inputs; with `suggest` None (the default) suggestions come only for a training
    step over its budget."""
    return analyze(model, inputs, **options)


def build_request(model: object, inputs: Sequence[object] | None = None, *,
                  train: bool = False, optimizer: str = "adam", amp: str | None = None,
                  grad_accum: int = 1, loss: Callable[..., object] | str | None = None,
                  checkpoints: Sequence[str] = (), amp_policy: str = AmpPolicy.CUDA,
                  batch: int | None = None, dims: Mapping[str, int] | None = None,
                  gpu: str | None = None, cuda_reserve_bytes: int | None = None,
                  module_depth: int = 2, plan: bool = True,
                  sweep: SweepRequest | str | None = None, runtime: str | None = None,
                  ort_optimization: str | None = None, threads: int | None = None,
                  distributed: DistributedConfig | None = None, gpus: int | None = None,
                  strategy: str | None = None, tensor_parallel: int | None = None,
                  kv_cache: bool | str | tuple[int, int, int] | None = None,
                  kv_dtype: str | None = None, max_context: int | None = None,
                  serve: bool | ServingConfig = False, context: int | None = None,
                  block_size: int | None = None,
                  gpu_memory_utilization: float | None = None,
                  max_batched_tokens: int | None = None, suggest: bool | None = None,
                  memory_budget_bytes: int | None = None,
                  memory_budget_share: float | None = None,
                  example_inputs: str | None = None, label: str | None = None,
                  lora: bool | str | LoraOptions | None = None,
                  qlora: bool | str | QloraOptions | None = None,
                  gradient_checkpointing: bool = False) -> Request:
    """The Request the keyword options describe (see `analyze`)."""
    training = TrainingOptions(optimizer, amp, grad_accum, loss, tuple(checkpoints),
                               amp_policy) if train else None  # type: ignore[arg-type]
    serving = _serving(serve, context, block_size, gpu_memory_utilization, max_batched_tokens,
                       gpus, tensor_parallel)
    if serving is None and distributed is None and (gpus, strategy, tensor_parallel) != (
            None, None, None):
        distributed = DistributedConfig(strategy or "ddp", gpus or 1, tensor_parallel or 1)
    if isinstance(sweep, str):
        sweep = SweepRequest(*parse_sweep(sweep))
    return Request(
        model=model, inputs=example_tuple(inputs), example_inputs=example_inputs, label=label,
        batch=batch, dims=dict(dims or {}), gpu=gpu, cuda_reserve_bytes=cuda_reserve_bytes,
        training=training, runtime=_runtime(runtime, ort_optimization, threads),
        distributed=distributed, kv_cache=_kv_cache(kv_cache, kv_dtype, max_context),
        serving=serving,
        suggest=SuggestOptions(suggest, memory_budget_bytes, memory_budget_share),
        sweep=sweep, module_depth=module_depth, plan=plan,
        finetune=_finetune(lora, qlora, gradient_checkpointing))


def _finetune(lora: bool | str | LoraOptions | None, qlora: bool | str | QloraOptions | None,
              gradient_checkpointing: bool) -> FinetuneOptions | None:
    """lora/qlora as options (a string as on the command line); qlora implies lora."""
    lora_options = parse_lora_spec(lora) if isinstance(lora, str) else (
        LoraOptions() if lora is True else lora or None)
    qlora_options = parse_qlora_spec(qlora) if isinstance(qlora, str) else (
        QloraOptions() if qlora is True else qlora or None)
    if qlora_options is not None and lora_options is None:
        lora_options = LoraOptions()
    if lora_options is None and not gradient_checkpointing:
        return None
    return FinetuneOptions(lora_options, qlora_options, gradient_checkpointing)


def example_tuple(inputs: object) -> tuple[object, ...]:
    """The example inputs as one tuple, however they were given: None, one tensor (or a
    `"4x1024:int64"` string, or a shape tuple of ints), or a list/tuple of them. A bare tensor
    is one input, never split into its rows; a dict of named inputs is refused with the
    Python spelling of the fix."""
    if inputs is None:
        return ()
    if isinstance(inputs, Mapping):
        raise GraphmemError(
            f"inputs given as a dict ({', '.join(map(str, inputs))}): pass them positionally in"
            " the order of the model's forward(), e.g. graphmem.analyze(model,"
            " [input_ids, attention_mask])")
    if isinstance(inputs, str) or hasattr(inputs, "shape"):
        return (inputs,)
    items = tuple(inputs)  # type: ignore[call-overload]
    if items and all(isinstance(item, int) for item in items):
        return (items,)  # one shape: (8, 3, 224, 224)
    return items


def _runtime(name: str | None, ort_optimization: str | None,
             threads: int | None) -> RuntimeOptions | None:
    if name is None:
        return None
    return RuntimeOptions(None if name in ("auto", "default") else name,  # type: ignore[arg-type]
                          ort_optimization, threads)


def _kv_cache(option: bool | str | tuple[int, int, int] | None,
              dtype: str | None, max_context: int | None = None) -> KvCacheOptions | None:
    if option is None or option is False:
        if dtype is None and max_context is None:
            return None
        return KvCacheOptions(dtype=dtype, max_context=max_context)
    if option == "auto":
        return KvCacheOptions(auto=True, dtype=dtype, max_context=max_context)
    if isinstance(option, tuple):
        return KvCacheOptions(shape=option, dtype=dtype, max_context=max_context)
    return KvCacheOptions(dtype=dtype, max_context=max_context)


def _serving(serve: bool | ServingConfig, context: int | None, block_size: int | None,
             utilization: float | None, prefill_tokens: int | None, gpus: int | None,
             tensor_parallel: int | None) -> ServingConfig | None:
    """`serve=True` and its keywords as one ServingConfig (a given one is taken as it is)."""
    if isinstance(serve, ServingConfig):
        return serve
    if not serve:
        if any(v is not None for v in (context, block_size, utilization, prefill_tokens)):
            raise GraphmemError("context, block_size, gpu_memory_utilization and"
                                " max_batched_tokens describe serving: add serve=True")
        return None
    given = {name: value for name, value in (
        ("block_size", block_size), ("gpu_memory_utilization", utilization),
        ("tensor_parallel", tensor_parallel)) if value is not None}
    return ServingConfig(context=context, prefill_tokens=prefill_tokens, gpus=gpus,
                         **given)  # type: ignore[arg-type]

