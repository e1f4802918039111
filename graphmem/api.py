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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphmem.core.conventions import (
    Amp,
    AmpPolicy,
    Optimizer,
    Strategy,
    TrainingOptions,
    closed,
)
from graphmem.core.peak_formula import Formula
from graphmem.core.routing import MoeRouting, parse_moe_routing
from graphmem.distributed.parallel import ParallelLayout
from graphmem.distributed.serving import ServingConfig
from graphmem.distributed.strategies import DistributedConfig
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.finetune import (
    LoraOptions,
    QloraOptions,
)
from graphmem.frontends.torch.spec import KeywordInput
from graphmem.frontends.torch.weight_layout import WeightQuantOptions, parse_weights
from graphmem.gate.budgets import SpecError, parse_memory_limit
from graphmem.passes.dims import check_dim_value
from graphmem.passes.sweep import parse_sweep
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis, size_of
from graphmem.pipeline.keywords import (
    distributed_keywords,
    finetune_keywords,
    kv_cache_keywords,
    runtime_keywords,
    serving_keywords,
)
from graphmem.pipeline.planning import GpuRow
from graphmem.pipeline.request import (
    Request,
    SuggestOptions,
    SweepRequest,
)

if TYPE_CHECKING:  # the runners import onnxruntime / torch: loaded when verify runs
    from graphmem.gate.check import CheckReport
    from graphmem.verify.onnx_run import Verification
    from graphmem.verify.torch_run import TorchVerification


@dataclass(frozen=True, repr=False)
class SizeFormula(Formula):
    """A size in free dims, for Python: `peak(seq=2048)` or `peak.at(seq=2048)` evaluates it
    (every free dim given), `print(peak)` reads it per range of the dim (core/peak_formula.py
    `display`); `int(peak)` is refused, naming the dims to bind."""

    def __call__(self, **dims: int) -> int:
        return self.at(**dims)

    def at(self, dims: Mapping[str, int] | None = None, /, **more: int) -> int:
        """The exact size at these dim values: the largest candidate there."""
        given = {**(dims or {}), **more}
        free = sorted(self.free_dims)
        missing = [name for name in free if name not in given]
        unknown = [name for name in given if name not in self.free_dims]
        if missing or unknown:
            wrong = (f"{', '.join(missing)} not given" if missing
                     else f"{', '.join(unknown)} is not one of them")
            raise GraphmemError(f"the size is a formula in {', '.join(free)} ({wrong}): give"
                                f" each, e.g. .at({', '.join(f'{n}=8' for n in free)})")
        for name, value in given.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise GraphmemError(f"{name}={value!r}: give a whole number")
            check_dim_value(f"{name}={value}", value)
        return self.evaluate(given)

    def __int__(self) -> int:
        free = ", ".join(sorted(self.free_dims))
        raise GraphmemError(f"the size is a formula in {free}, not a number: evaluate it at"
                            f" dims with .at({free.replace(', ', '=..., ')}=...), or bind them"
                            " in analyze (batch=, dims=)")

    __index__ = __int__

    def __str__(self) -> str:
        return self.display()

    def __repr__(self) -> str:
        return f"<graphmem size in {', '.join(sorted(self.free_dims))}: {self.display()}>"


def as_size(size: int | Formula) -> int | SizeFormula:
    return size if isinstance(size, int) else SizeFormula(size.terms)


@dataclass(frozen=True, repr=False)
class Result(Analysis):
    """An Analysis with its renderers: JSON (the README's schema), the HTML report."""

    @property
    def peak_bytes(self) -> int | SizeFormula:
        """The live-tensor peak: bytes when every dim is bound, else a SizeFormula to evaluate
        at dims: `result.peak_bytes(seq=2048)`."""
        return as_size(super().peak_bytes)

    @property
    def breakdown(self) -> dict[str, int | SizeFormula]:  # type: ignore[override]
        """Bytes live at the peak by role, each an int or a SizeFormula as `peak_bytes`."""
        return {role: as_size(size) for role, size in super().breakdown.items()}

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
    def device_total_bytes(self) -> int | SizeFormula | None:
        """With a GPU, the number the verdict reads: what the process would hold on it (the
        runtime model's device total, the demand: tensors at the runtime's peak, weights,
        allocator overhead, CUDA context and workspaces; with a dim free, the live-tensor
        peak plus the context, as a SizeFormula). `peak_bytes` is graphmem's live-tensor
        peak alone. None without a GPU."""
        if self.fit is None:
            return None
        return as_size(size_of(self.fit.required_bytes))

    @property
    def fits(self) -> bool | None:
        """Whether the device total fits the GPU's memory (`device_total_bytes` <= its
        capacity); None without a GPU or with free dims."""
        return None if self.fit is None else self.fit.fits

    def __repr__(self) -> str:
        """The first lines of the terminal summary: the model, the verdict, where the memory
        goes (graphmem/report/terminal/summary.py)."""
        from graphmem.report.terminal.summary import summary_text

        return summary_text(self)

    def _repr_html_(self) -> str:
        """The same summary, coloured as in the terminal, for Jupyter."""
        from graphmem.report.terminal.summary import summary_html

        return summary_html(self)


def as_result(analysis: Analysis) -> Result:
    return Result(**{f.name: getattr(analysis, f.name) for f in fields(analysis)})


# ----- the entry points -----------------------------------------------------------------------
def analyze(request_or_model: Request | object, inputs: Sequence[object] | None = None,
            **options: Any) -> Result:
    """Analyze a Request, an ONNX file (path) or a PyTorch model (nn.Module or `file.py:fn`).

    Options (keywords, as the command line's flags): train, optimizer, amp, grad_accum, loss,
    checkpoints, amp_policy; batch, dims (ONNX); gpu, cuda_reserve_bytes, module_depth, plan,
    sweep ("batch=1,2,4"); runtime (None, "auto" or a name), ort_optimization, threads,
    ort_arena_extend ("next-power-of-two" or "same-as-requested");
    distributed (a DistributedConfig) or gpus/strategy/tensor_parallel/state_layout/
    reduce_bucket_size/fsdp_depth; kv_cache (True: the ONNX past inputs, "auto", or (layers,
    kv_heads, head_dim)), kv_dtype, max_context (the model's position limit); serve (True,
    an engine's name "vllm", "sglang" or "trtllm", or a ServingConfig) with context,
    block_size, gpu_memory_utilization, max_batched_tokens, enforce_eager, and
    gpus/tensor_parallel as the serving engine's; suggest, memory_budget ("80%" or "12GiB",
    implies suggest) or memory_budget_bytes / memory_budget_share; example_inputs, label.
    `inputs`: a tensor, a shape tuple, a "4x1024:int64" string, a list of them, or a dict of
    keyword inputs (`model(**inputs)`). Fine-tuning (PyTorch
    models and Hugging Face configs, given as a config.json path, its folder or a dict):
    lora (True, "r=16,alpha=32,targets=q_proj,v_proj" or a LoraOptions), qlora (True, a
    "compute=bf16,..." string or a QloraOptions; implies lora), gradient_checkpointing;
    moe_routing ("balanced", "worst" or "capacity=F": how a mixture of experts' router is
    assumed to choose, docs/pytorch.md).
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
                  ort_arena_extend: str | None = None,
                  distributed: DistributedConfig | None = None, gpus: int | None = None,
                  strategy: str | None = None, tensor_parallel: int | None = None,
                  state_layout: str | None = None, reduce_bucket_size: int | None = None,
                  fsdp_depth: int | None = None,
                  kv_cache: bool | str | tuple[int, int, int] | None = None,
                  kv_dtype: str | None = None, max_context: int | None = None,
                  serve: bool | str | ServingConfig = False, context: int | None = None,
                  block_size: int | None = None,
                  gpu_memory_utilization: float | None = None,
                  max_batched_tokens: int | None = None, enforce_eager: bool = False,
                  suggest: bool | None = None,
                  memory_budget: str | None = None, memory_budget_bytes: int | None = None,
                  memory_budget_share: float | None = None,
                  example_inputs: str | None = None, label: str | None = None,
                  lora: bool | str | LoraOptions | None = None,
                  qlora: bool | str | QloraOptions | None = None,
                  gradient_checkpointing: bool = False,
                  weights: str | WeightQuantOptions | None = None,
                  moe_routing: str | MoeRouting = "balanced",
                  parallel: ParallelLayout | None = None) -> Request:
    """The Request the keyword options describe (see `analyze`); `weights`: "int8", "int4" or
    "int4:layers.*.mlp" (as --weights) or a WeightQuantOptions; `moe_routing`: "balanced",
    "worst" or "capacity=F" (as --moe-routing) or a MoeRouting; `parallel`: pipeline,
    context, expert and sequence parallel (as --pipeline-parallel ... --sequence-parallel)."""
    training = TrainingOptions(
        closed(Optimizer, optimizer, "--optimizer"), closed(Amp, amp, "--amp") if amp else None,
        grad_accum, loss, tuple(checkpoints), closed(AmpPolicy, amp_policy, "amp_policy")
    ) if train else None
    serving = serving_keywords(serve, context, block_size, gpu_memory_utilization,
                               max_batched_tokens, gpus, tensor_parallel)
    if serving is not None and enforce_eager:  # vLLM without CUDA graphs
        serving = replace(serving, enforce_eager=True)
    if serving is None and distributed is None:
        distributed = distributed_keywords(gpus, strategy, tensor_parallel, state_layout,
                                           reduce_bucket_size, fsdp_depth)
        if parallel is not None:
            distributed = replace(distributed or DistributedConfig(Strategy.DDP, 1),
                                  parallel=parallel)
    if memory_budget is not None:
        memory_budget_bytes, memory_budget_share = _budget(memory_budget)
        suggest = True if suggest is None else suggest  # as --memory-budget implies --suggest
    if isinstance(sweep, str):
        sweep = SweepRequest(*parse_sweep(sweep))
    return Request(
        model=model, inputs=example_tuple(inputs), example_inputs=example_inputs, label=label,
        batch=batch, dims=dict(dims or {}), gpu=gpu, cuda_reserve_bytes=cuda_reserve_bytes,
        training=training,
        runtime=runtime_keywords(runtime, ort_optimization, threads, ort_arena_extend,
                                 gpu is not None),
        distributed=distributed, kv_cache=kv_cache_keywords(kv_cache, kv_dtype, max_context),
        serving=serving,
        suggest=SuggestOptions(suggest, memory_budget_bytes, memory_budget_share,
                               memory_budget or ""),
        sweep=sweep, module_depth=module_depth, plan=plan,
        finetune=finetune_keywords(lora, qlora, gradient_checkpointing),
        weights=parse_weights(weights) if isinstance(weights, str) else weights,
        moe_routing=(parse_moe_routing(moe_routing) if isinstance(moe_routing, str)
                     else moe_routing))




def _budget(text: str) -> tuple[int | None, float | None]:
    """`memory_budget="80%"` (of the GPU's usable memory) or `"12GiB"`, as --memory-budget."""
    try:
        limit = parse_memory_limit(text)
    except SpecError as error:
        raise GraphmemError(f"memory_budget={text!r}: {error}") from None
    return limit.bytes, limit.fraction




def example_tuple(inputs: object) -> tuple[object, ...]:
    """The example inputs as one tuple, however they were given: None, one tensor (or a
    `"4x1024:int64"` string, or a shape tuple of ints), a list/tuple of them, or a dict of
    keyword inputs (`model(**inputs)`, as Hugging Face models take them). A bare tensor is
    one input, never split into its rows."""
    if inputs is None:
        return ()
    if isinstance(inputs, Mapping):
        return tuple(KeywordInput(_input_name(name), value) for name, value in inputs.items())
    if isinstance(inputs, str) or hasattr(inputs, "shape") or not isinstance(inputs, Iterable):
        return (inputs,)
    items: tuple[object, ...] = tuple(inputs)
    if items and all(isinstance(item, int) for item in items):
        return (items,)  # one shape: (8, 3, 224, 224)
    return items


def _input_name(name: object) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise GraphmemError(f"inputs: the key {name!r} is not a keyword of forward(): give"
                            " the dict's keys as parameter names, e.g. {'attention_mask': m}")
    return name









# ----- the other commands: `graphmem gpus --fits`, `graphmem verify` -----------------------------
def gpu_fits(model: str | Path, *, batch: int | None = None,
             dims: Mapping[str, int] | None = None, cuda_reserve_bytes: int | None = None,
             gpus: Sequence[str] | None = None) -> list[GpuRow]:
    """`graphmem gpus --fits MODEL`: an ONNX model against every GPU of the table (or the named
    `gpus`): each row's verdict (`row.fit`), roofline and largest batch (`row.max_batch`)."""
    from graphmem.devices.gpus import find_gpu, load_gpu_table
    from graphmem.frontends.torch.spec import is_model_spec

    path = Path(model) if isinstance(model, str) and not is_model_spec(model) else model
    request = Request(path, batch=batch, dims=dict(dims or {}), plan=False)
    if request.is_torch:
        raise GraphmemError(f"gpu_fits({model!r}): give an .onnx file; for a PyTorch model use"
                            " graphmem.analyze(model, inputs, gpu=NAME) per GPU")
    request.check()
    table = load_gpu_table() if gpus is None else tuple(find_gpu(name) for name in gpus)
    return run.fits_on_gpus(request, table, cuda_reserve_bytes)[1]


def verify_model(model: str | Path, inputs: object = None, *, batch: int | None = None,
           dims: Mapping[str, int] | None = None, provider: str = "cpu",
           threads: int | None = None, seed: int = 0, optimized_run: bool = True,
           train: bool = False, optimizer: str = "adam", amp: str | None = None,
           loss: Callable[..., object] | None = None, time_limit_s: int = 600,
           memory_limit_bytes: int | None = None) -> Verification | TorchVerification:
    """`graphmem verify`: run the model for real here next to graphmem's prediction. An .onnx
    file runs on onnxruntime (batch, dims, provider, threads, optimized_run), in a child
    process under time_limit_s and memory_limit_bytes (default: three quarters of the
    machine's memory: docs/verify.md); a PyTorch model
    is named `file.py:fn` (it is built again with real weights) and takes `inputs` as
    `analyze` does (shapes, tensors, a dict of keyword inputs), train, optimizer, amp, loss."""
    from graphmem.frontends.torch.spec import is_model_spec

    if not isinstance(model, str | Path):
        raise GraphmemError("verify_model(model): name the model as 'file.py:fn' (it is built"
                            " again with real weights to run) or give an .onnx path")
    if isinstance(model, str) and is_model_spec(model):
        return _verify_torch(model, inputs, provider, seed, train, optimizer, amp, loss)
    if inputs is not None or train:
        raise GraphmemError("inputs and train describe a PyTorch step ('file.py:fn'); an ONNX"
                            " model takes batch= and dims=")
    from graphmem.verify.onnx_run import RunLimits, verify_onnx

    return verify_onnx(model, batch=batch, dims=dims, provider=provider, threads=threads,
                       seed=seed, optimized_run=optimized_run,
                       limits=RunLimits(time_limit_s, memory_limit_bytes or 0))


def _verify_torch(spec: str, inputs: object, provider: str, seed: int, train: bool,
                  optimizer: str, amp: str | None,
                  loss: Callable[..., object] | None) -> TorchVerification:
    from graphmem.frontends.torch.import_step import tensor_specs
    from graphmem.frontends.torch.loader import spec_text
    from graphmem.verify.torch_run import verify_torch

    texts = [spec_text(spec) for spec in tensor_specs(example_tuple(inputs))]
    return verify_torch(spec, texts, train=train, optimizer=optimizer, amp=amp, loss=loss,
                        device=provider, seed=seed)


def check_model(model: str | Path | None = None, *, gpu: str | None = None,
                batch: int | None = None, dims: Mapping[str, int] | None = None,
                cuda_reserve_bytes: int | None = None, max_memory: str | None = None,
                margin: str | None = None, max_tensor_memory: str | None = None,
                max_latency: str | None = None, max_params: int | str | None = None,
                max_flops: int | str | None = None, fail_on_unsupported: bool = False,
                baseline: str | Path | None = None, max_growth: str | None = None,
                min_sequences: int | None = None, context: int | None = None,
                budgets: str | Path | None = None, engine: str | None = None,
                **options: Any) -> CheckReport:
    """`graphmem check`: a model against budgets, written as on the command line
    (max_memory="90%" or "12GiB", margin="10%", max_latency="20ms", max_params="25M",
    max_growth="5%"), or every model of a budgets file (`budgets="graphmem.toml"`).
    `model`: anything `analyze` takes by name (an .onnx file, `file.py:fn`, a Hugging Face
    config.json or its folder); `options`: how it runs, as `analyze`'s keywords (inputs,
    train, optimizer, gpus, tensor_parallel, parallel, serve, lora, ...): a training job's
    memory budget reads its most-loaded rank. `report.passed` is the exit code's answer;
    `report.models[0].results` each budget's verdict. `engine` ("vllm", "sglang", "trtllm")
    serves the model for min_sequences."""
    from graphmem.gate import budgets as parse
    from graphmem.gate import sequences
    from graphmem.gate.budgets_file import load_budgets_file
    from graphmem.gate.check import CheckSpec, model_label, run_check
    from graphmem.gate.margin import parse_margin
    from graphmem.gate.options import RequestBuilder

    builder = RequestBuilder(build_request)
    if budgets is not None:
        return run_check(load_budgets_file(Path(budgets), builder), builder)
    if model is None:
        raise GraphmemError("check_model: give a model (an .onnx path, file.py:fn or a"
                            " config.json) or budgets=FILE.toml")
    if engine is not None and options.get("serve") is True:
        options["serve"] = engine  # serve=True served by `engine`, as --serve --engine E
    context, options = sequences.serving_context(min_sequences, context, options)
    try:
        limits = parse.Budgets(
            max_memory=None if max_memory is None else parse.parse_memory_limit(max_memory),
            margin=None if margin is None else parse_margin(margin),
            max_tensor_bytes=(None if max_tensor_memory is None
                              else parse.parse_size(max_tensor_memory)),
            max_latency_s=None if max_latency is None else parse.parse_latency_s(max_latency),
            max_params=None if max_params is None else parse.parse_count(max_params),
            max_flops=None if max_flops is None else parse.parse_count(max_flops),
            fail_on_unsupported=fail_on_unsupported,
            max_growth=None if max_growth is None else parse.parse_percent(max_growth),
            min_sequences=sequences.min_sequences(min_sequences, context, "",
                                                  ("min_sequences=", "context="), engine))
    except parse.SpecError as error:
        raise GraphmemError(f"check_model: {error}") from None
    spec = CheckSpec(model_path=Path(model), label=model_label(str(model)), budgets=limits,
                     gpu=gpu, batch=batch, dims=dict(dims or {}),
                     cuda_reserve_bytes=cuda_reserve_bytes,
                     baseline_path=None if baseline is None else Path(baseline),
                     options=options)
    return run_check([spec], builder)
