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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphmem.core.peak_formula import Formula
from graphmem.errors import GraphmemError
from graphmem.options import request_from_keywords
from graphmem.options.inputs import example_tuple
from graphmem.passes.dims import check_dim_value
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis, size_of
from graphmem.pipeline.planning import GpuRow
from graphmem.pipeline.request import Request

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

    Options (keywords): every flag of `graphmem analyze` by its own name, `--dim` as dims (a
    dict), `--cuda-reserve` as cuda_reserve_bytes, `--depth` as module_depth (the option
    table, graphmem/options/table.py, lists them all; a wrong keyword is a TypeError naming
    the nearest): train, optimizer, amp, grad_accum, loss, and Python's checkpoints,
    amp_policy; batch, dims (ONNX); gpu, cuda_reserve_bytes, module_depth, plan, sweep
    ("batch=1,2,4"); runtime (None, "auto" or a name), ort_optimization, threads,
    ort_arena_extend ("next-power-of-two" or "same-as-requested");
    gpus/strategy/tensor_parallel/pipeline_parallel/micro_batches/pipeline_schedule/
    virtual_stages/context_parallel/expert_parallel/sequence_parallel/state_layout/
    reduce_bucket_size/fsdp_depth, or distributed (a DistributedConfig) and parallel (a
    ParallelLayout); kv_cache ("auto", or (layers, kv_heads, head_dim); the ONNX past inputs
    are found without it), kv_dtype or kv_cache_dtype, max_context (the model's position
    limit); serve (True, an engine's name "vllm", "sglang" or "trtllm", or a ServingConfig)
    with engine, context, block_size, gpu_memory_utilization, max_batched_tokens,
    enforce_eager, and gpus/tensor_parallel as the serving engine's; suggest, memory_budget
    ("80%" or "12GiB", implies suggest) or memory_budget_bytes / memory_budget_share;
    example_inputs, label. Text is read as on the command line, and what the command line
    refuses between options is refused here too, naming the keywords.
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


def build_request(model: object, inputs: Sequence[object] | None = None,
                  **keywords: Any) -> Request:
    """The Request the keyword options describe (see `analyze`): exactly the option table's
    keywords (graphmem/options/table.py; a wrong one is a TypeError naming the nearest), each
    flag of `graphmem analyze` by its own name (`--pipeline-parallel` is pipeline_parallel=),
    text read as on the command line, and the command line's refusals between options.
    `weights`: "int8", "int4" or "int4:layers.*.mlp" (as --weights) or a WeightQuantOptions;
    `moe_routing`: "balanced", "worst" or "capacity=F" (as --moe-routing) or a MoeRouting;
    `parallel`: a ParallelLayout, instead of pipeline_parallel= ... sequence_parallel=."""
    return request_from_keywords(model, {**keywords, "inputs": inputs})


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
    from graphmem.frontends.torch.spec import model_label
    from graphmem.gate import budgets as parse
    from graphmem.gate import sequences
    from graphmem.gate.budgets_file import load_budgets_file
    from graphmem.gate.check import CheckSpec, run_check
    from graphmem.gate.margin import parse_margin
    from graphmem.options.check_entry import request_builder

    builder = request_builder()
    if budgets is not None:
        return run_check(load_budgets_file(Path(budgets), builder), builder)
    if model is None:
        raise GraphmemError("check_model: give a model (an .onnx path, file.py:fn or a"
                            " config.json) or budgets=FILE.toml")
    if engine is not None and options.get("serve") is True:
        options["engine"] = engine  # serve=True served by `engine`, as --serve --engine E
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
