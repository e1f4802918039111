"""Budgets a model must hold, and their verdicts against its numbers. Pure: no I/O.

A budget spec (`--max-memory 90%`, `max_latency = "20ms"` in a budgets file) is parsed into
the `Budgets` dataclass; `numbers_of` takes the few numbers a gate needs from an Analysis (every
dim bound, else an error: a gate needs numbers); `evaluate` turns both into one `BudgetResult`
per budget: name, value, limit, passed, and a sentence saying how the value was obtained.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from graphmem.core.kv_layers import GroupUse
from graphmem.core.units import MAX_BYTES, MAX_COUNT, format_bytes, format_si
from graphmem.errors import GraphmemError, SpecError
from graphmem.gate.margin import Margin, with_margin_bytes
from graphmem.gate.ranks import RankNumbers, rank_numbers
from graphmem.gate.sequences import MinSequences, serving_numbers

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis


# ----- parsing -----------------------------------------------------------------------------

_SIZE_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
               "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12,
                   "p": 10**15}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUMBER = r"(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)"


@dataclass(frozen=True)
class MemoryLimit:
    """`--max-memory`: a share of the GPU's memory, or an absolute size. With a GPU both are
    held against the GPU's one verdict number (the runtime model's device total); without
    one a size is held against the live-tensor peak."""

    text: str  # as given: "90%", "12GiB"
    fraction: float | None = None  # 0.9 for "90%" (needs a GPU)
    bytes: int | None = None  # for a size

    @property
    def is_share(self) -> bool:
        return self.fraction is not None


def parse_percent(text: str) -> float:
    """`5%` -> 0.05; the % sign is required (a bare 5 or 0.05 would be ambiguous)."""
    match = re.fullmatch(r"\s*" + _NUMBER + r"\s*%\s*", str(text))
    if not match:
        raise SpecError(f"'{text}' is not a percentage such as 5%")
    percent = float(match.group(1))
    if not math.isfinite(percent):
        raise SpecError(f"'{text}' is not a finite percentage: give one such as 5%")
    return percent / 100


def parse_size(text: str | int) -> int:
    """`12GiB`, `1.5 GB`, `800000000` (bytes) -> bytes, at most MAX_BYTES (4 EiB)."""
    match = re.fullmatch(r"\s*" + _NUMBER + r"\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise SpecError(f"'{text}' is not a size such as 12GiB, 512MiB or 800000000 (bytes)")
    size = float(match.group(1)) * _SIZE_UNITS[unit]
    if not size <= MAX_BYTES:  # also inf: '1e999GiB' must not reach int()
        raise SpecError(f"'{text}' is more than 4 EiB (2**62 bytes): check the number and unit")
    return int(size)


def parse_memory_limit(text: str | int) -> MemoryLimit:
    """`90%` (of the GPU's memory) or a size with its unit (`12GiB`, `512B`).

    A bare number is refused: `90` meant as 90% or 90 GiB would silently be 90 bytes."""
    given = str(text).strip()
    if given.endswith("%"):
        fraction = parse_percent(given)
        if not 0 < fraction <= 1:
            raise SpecError(f"'{text}': a share of the GPU's memory is between 0% and 100%")
        return MemoryLimit(given, fraction=fraction)
    match = re.fullmatch(_NUMBER + r"\s*([A-Za-z]*)", given)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise SpecError(f"'{text}' is neither a share of the GPU's memory (90%) nor a"
                        " size (12GiB, 512MiB, or 512B)")
    if not match.group(2):
        if float(given) <= 100:  # most likely a percentage or GiB, never meant as bytes
            raise SpecError(f"'{text}' has no unit: say {given}% (of the GPU's memory),"
                            f" {given}GiB or {given}B (bytes)")
        raise SpecError(f"'{text}' has no unit: say {given}B (bytes) or a size such as 12GiB")
    size = parse_size(given)
    if size <= 0:
        raise SpecError(f"'{text}': a memory limit of 0 bytes never holds: give a size above 0")
    return MemoryLimit(given, bytes=size)


def parse_latency_s(text: str) -> float:
    """`20ms`, `0.5s`, `800us` -> seconds; the unit is required."""
    match = re.fullmatch(r"\s*" + _NUMBER + r"\s*(s|ms|us|µs|ns)\s*", str(text))
    if not match:
        raise SpecError(f"'{text}' is not a duration such as 20ms, 0.5s or 800us (give the unit)")
    seconds = float(match.group(1)) * _TIME_UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise SpecError(f"'{text}' is not a finite duration: give one such as 20ms")
    return seconds


def parse_count(text: str | int) -> int:
    """`25M`, `1.5B`, `4.1G`, `4.1e9`, `25_000_000`, `4.1GFLOPs` -> an integer count that fits
    a signed 64-bit integer."""
    if isinstance(text, int) and not isinstance(text, bool):
        count: float = text
    else:
        cleaned = str(text).replace("_", "").replace(",", "").strip()
        cleaned = re.sub(r"(?i)\s*flops?$", "", cleaned)
        match = re.fullmatch(_NUMBER + r"\s*([A-Za-z]?)", cleaned)
        suffix = match.group(2).lower() if match else ""
        if not match or suffix not in _COUNT_SUFFIXES:
            raise SpecError(f"'{text}' is not a count such as 25000000, 25M, 1.5B or 4.1e9")
        count = float(match.group(1)) * _COUNT_SUFFIXES[suffix]
    if not 0 <= count <= MAX_COUNT:  # also inf: '1e308G' must not reach round()
        raise SpecError(f"'{text}' is not a count from 0 to 2**63-1: check the number")
    return round(count)


# ----- budgets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """The numbers of an earlier graphmem JSON that growth is measured against."""

    source: str  # the file, for messages
    dims: dict[str, int]
    mode: str
    peak_bytes: int
    params: int
    flops: int




@dataclass(frozen=True)
class Budgets:
    """Every budget of one model; None / False: not checked."""

    max_memory: MemoryLimit | None = None
    max_tensor_bytes: int | None = None  # graphmem's live-tensor peak, apart from the GPU's
    max_latency_s: float | None = None
    max_params: int | None = None
    max_flops: int | None = None
    fail_on_unsupported: bool = False
    max_growth: float | None = None  # fraction: 0.05 for 5%
    baseline: Baseline | None = None
    min_sequences: MinSequences | None = None
    margin: Margin | None = None  # headroom: device total x (1 + margin) <= the GPU's memory

    @property
    def is_empty(self) -> bool:
        return (self.max_memory is None and self.max_tensor_bytes is None
                and self.margin is None
                and self.max_latency_s is None
                and self.max_params is None and self.max_flops is None
                and not self.fail_on_unsupported and self.max_growth is None
                and self.min_sequences is None)


def complete_budgets(budgets: Budgets, gpu: str | None, baseline_source: str | None = None
                     ) -> Budgets:
    """Check that the budgets can be evaluated with what was given; fill the default.

    `baseline_source`: the baseline file when it is not loaded yet. With a GPU and no memory
    budget the model must at least fit: `--max-memory 100%`.
    """
    memory = budgets.max_memory
    if baseline_source is None and budgets.baseline is not None:
        baseline_source = budgets.baseline.source
    if memory is not None and memory.is_share and gpu is None:
        raise GraphmemError(
            f"--max-memory {memory.text} is a share of a GPU's memory: give --gpu NAME"
            " (see 'graphmem gpus'), or a size of the peak such as --max-memory 12GiB")
    if budgets.margin is not None and gpu is None:
        raise GraphmemError(f"--margin {budgets.margin.text} is headroom on a GPU: give --gpu"
                            " NAME (see 'graphmem gpus')")
    if budgets.min_sequences is not None and gpu is None:
        raise GraphmemError("--min-sequences counts the sequences whose KV cache fits on a GPU:"
                            " give --gpu NAME (see 'graphmem gpus')")
    if budgets.max_latency_s is not None and gpu is None:
        raise GraphmemError("--max-latency needs a latency estimate: graphmem's roofline"
                            " estimate needs --gpu NAME (see 'graphmem gpus')")
    if budgets.max_growth is not None and baseline_source is None:
        raise GraphmemError("--max-growth needs --baseline PREVIOUS.json (a graphmem JSON of"
                            " the same model at the same dims) to measure growth against")
    if baseline_source is not None and budgets.max_growth is None:
        raise GraphmemError(f"--baseline {baseline_source} needs --max-growth, e.g."
                            " --max-growth 5% (0% allows no growth at all)")
    if budgets.is_empty:
        if gpu is None:
            raise GraphmemError(
                "no budget to check: give --gpu NAME (the model must fit), --max-memory,"
                " --max-tensor-memory, --max-latency, --max-params, --max-flops,"
                " --fail-on-unsupported or --baseline with --max-growth, or --budgets"
                " graphmem.toml")
        return Budgets(max_memory=MemoryLimit("100%", fraction=1.0))
    if memory is None and gpu is not None:
        return replace(budgets, max_memory=MemoryLimit("100%", fraction=1.0))
    return budgets


# ----- the numbers a gate reads --------------------------------------------------------------


@dataclass(frozen=True)
class ModelNumbers:
    """The numbers budgets are checked against, every dim bound."""

    dims: dict[str, int]
    mode: str
    peak_bytes: int  # live-tensor peak in the model's order (residents + activations)
    activation_peak_bytes: int
    params: int
    flops: int
    gpu_name: str | None = None
    usable_bytes: int | None = None  # the GPU's memory less the CUDA reserve
    # with a GPU: its one verdict's number (the runtime model's device total), its basis and
    # the GPU's memory it is held against (graphmem/passes/fit.py GpuFit)
    device_total_bytes: int | None = None
    capacity_bytes: int | None = None
    memory_basis: str = ""
    latency_s: float | None = None  # roofline lower bound; None: not estimated
    latency_missing_reason: str = ""
    unsupported_ops: Mapping[str, int] = field(default_factory=dict)
    shape_unknown_nodes: tuple[str, ...] = ()
    # --serve: concurrent sequences of `serving_context` tokens (all replicas) and how
    serving_sequences: int | None = None
    serving_context: int | None = None
    serving_text: str = ""
    serving_per_token_bytes: int | None = None
    serving_sequence_bytes: int | None = None
    serving_groups: tuple[GroupUse, ...] = ()  # the KV cache per layer type
    # a training job: its most-loaded rank (device_total_bytes is its) and every stage
    rank: RankNumbers | None = None


def numbers_of(analysis: Analysis) -> ModelNumbers:
    """The gate's numbers; an error naming the dims when any is left free."""
    _require_bound(analysis)
    liveness, costs, fit = analysis.liveness, analysis.costs, analysis.fit
    roofline = getattr(analysis, "roofline", None)  # graphmem/passes/roofline.py, with --gpu
    latency = getattr(roofline, "est_latency_s", None)
    return ModelNumbers(
        dims=dict(analysis.dims.bound),
        mode=analysis.mode,
        peak_bytes=int(liveness.peak_bytes),
        activation_peak_bytes=int(liveness.activation_peak_bytes),
        params=analysis.params.count,
        flops=int(costs.total_flops),
        gpu_name=fit.gpu.name if fit else None,
        usable_bytes=fit.usable_bytes if fit else None,
        device_total_bytes=(int(fit.required_bytes)
                            if fit is not None and fit.required_bytes.is_constant else None),
        capacity_bytes=fit.capacity_bytes if fit else None,
        memory_basis=fit.basis if fit else "",
        latency_s=float(latency) if latency is not None else None,
        latency_missing_reason=_latency_missing_reason(analysis, roofline),
        unsupported_ops=dict(costs.unsupported_ops),
        shape_unknown_nodes=tuple(costs.shape_unknown_nodes),
        **serving_numbers(analysis)._asdict(),
        rank=rank_numbers(analysis),
    )


def _require_bound(analysis: Analysis) -> None:
    free = list(analysis.dims.free)
    inputs = set(analysis.graph.input_dims_in_order())
    unbound_inputs = [d for d in free if d in inputs]
    if unbound_inputs:
        binds = " ".join(f"--dim {d}=N" for d in unbound_inputs)
        raise GraphmemError(
            f"{analysis.model.path}: dims left free ({', '.join(unbound_inputs)}): bind the dims"
            f" with --batch/--dim; a gate needs numbers ({binds}, or batch/dims in a budgets"
            " file)")
    quantities = (analysis.liveness.peak_bytes, analysis.liveness.activation_peak_bytes,
                  analysis.costs.total_flops)
    left = sorted(set().union(*(q.free_symbols() for q in quantities)))
    if left:  # a data-sized dim (a Slice by computed indices, NonZero) or one inference lost
        binds = " ".join(f"--dim {d}=N" for d in left)
        raise GraphmemError(
            f"{analysis.model.path}: the peak still depends on dims the data sets or shape"
            f" inference could not resolve ({', '.join(left)}) although every input dim is"
            f" bound; a gate needs numbers: bind them at the largest size your data gives"
            f" ({binds}), or re-export the model with static shapes")


def _latency_missing_reason(analysis: Analysis, roofline: object) -> str:
    if roofline is not None:
        return ""
    if analysis.fit is None:
        return "give --gpu NAME (the roofline estimate is per GPU)"
    return "graphmem's roofline pass gave no estimate for this model (are all dims bound?)"


# ----- verdicts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetResult:
    """One budget's verdict. `unit`: bytes, s, params, FLOP, ops or % (growth)."""

    name: str
    value: float
    limit: float
    unit: str
    passed: bool
    message: str
    comparison: str = "<="  # how value and limit compare when it passes (">=": at least)


def evaluate(numbers: ModelNumbers, budgets: Budgets) -> tuple[BudgetResult, ...]:
    """One result per budget set, in a fixed order."""
    results: list[BudgetResult] = []
    if budgets.max_memory is not None:
        results.append(_memory(numbers, budgets.max_memory))
    if budgets.margin is not None:
        results.append(_headroom(numbers, budgets.margin))
    if budgets.max_tensor_bytes is not None:
        peak = numbers.peak_bytes
        results.append(_at_most(
            "live tensors", peak, budgets.max_tensor_bytes, "bytes",
            f"live tensors at the peak {format_bytes(peak)} (graphmem's count, model order;"
            f" no runtime or GPU overhead{'; the whole step, not a rank' if numbers.rank else ''})"
            f" vs limit {format_bytes(budgets.max_tensor_bytes)}"))
    if budgets.max_latency_s is not None:
        results.append(_latency(numbers, budgets.max_latency_s))
    if budgets.max_params is not None:
        results.append(_at_most("parameters", numbers.params, budgets.max_params, "params",
                                _params_text(numbers, budgets.max_params)))
    if budgets.max_flops is not None:
        results.append(_at_most(
            "FLOPs", numbers.flops, budgets.max_flops, "FLOP",
            f"{format_si(numbers.flops, 'FLOP')} per run at {_dims_text(numbers.dims)}"
            f" (1 MAC = 2 FLOPs; limit {format_si(budgets.max_flops, 'FLOP')})"))
    if budgets.fail_on_unsupported:
        results.append(_supported(numbers))
    if budgets.baseline is not None and budgets.max_growth is not None:
        results.extend(_growth(numbers, budgets.baseline, budgets.max_growth))
    if budgets.min_sequences is not None:
        results.append(_sequences(numbers, budgets.min_sequences))
    return tuple(results)


def _sequences(numbers: ModelNumbers, budget: MinSequences) -> BudgetResult:
    found = numbers.serving_sequences
    if found is None:
        raise GraphmemError(f"--min-sequences {budget.count} needs the serving plan: run the"
                            " check with the serving options (--gpu, --context, a KV cache)")
    return BudgetResult("concurrent sequences", found, budget.count, "sequences",
                        found >= budget.count,
                        f"{numbers.serving_text} (at least {budget.count:,})", ">=")


def _at_most(name: str, value: float, limit: float, unit: str, message: str) -> BudgetResult:
    return BudgetResult(name, value, limit, unit, value <= limit, message)


def _memory(numbers: ModelNumbers, limit: MemoryLimit) -> BudgetResult:
    """With a GPU: the verdict's device total against a share of the GPU's memory or a size
    (so `--max-memory 100%` passes exactly when the model fits); without one: the live-tensor
    peak against a size."""
    total, capacity = numbers.device_total_bytes, numbers.capacity_bytes
    if total is None or capacity is None:
        if limit.fraction is not None:
            raise GraphmemError(f"--max-memory {limit.text} needs --gpu NAME")
        assert limit.bytes is not None
        peak = numbers.peak_bytes
        return _at_most("peak memory", peak, limit.bytes, "bytes",
                        f"peak {format_bytes(peak)} (live tensors, model order; no --gpu, so"
                        f" no device total) vs limit {format_bytes(limit.bytes)}")
    basis = _basis(numbers)
    if limit.fraction is None:
        assert limit.bytes is not None
        return _at_most("peak memory", total, limit.bytes, "bytes",
                        f"{basis} {format_bytes(total)} on {numbers.gpu_name} vs limit"
                        f" {format_bytes(limit.bytes)}")
    allowed = math.floor(capacity * limit.fraction)
    share = total / capacity if capacity else math.inf
    return _at_most("peak memory", total, allowed, "bytes",
                    f"{basis} {format_bytes(total)} = {share:.1%} of {numbers.gpu_name}'s"
                    f" {format_bytes(capacity)}; limit {limit.text} = {format_bytes(allowed)}")


def _headroom(numbers: ModelNumbers, margin: Margin) -> BudgetResult:
    """`--margin`: the device total with the margin added (graphmem/gate/margin.py)."""
    total, capacity = numbers.device_total_bytes, numbers.capacity_bytes
    if total is None or capacity is None:
        raise GraphmemError(f"--margin {margin.text} is headroom on a GPU: give --gpu NAME")
    needed = with_margin_bytes(total, margin)
    return BudgetResult("headroom", math.ceil(needed), capacity, "bytes", needed <= capacity,
                        f"{_basis(numbers)} {format_bytes(total)} + {margin.text} ="
                        f" {format_bytes(math.ceil(needed))} vs {numbers.gpu_name}'s"
                        f" {format_bytes(capacity)}")


def _basis(numbers: ModelNumbers) -> str:
    """What the device total is: the verdict's basis, naming a training job's rank."""
    if numbers.rank is None:
        return numbers.memory_basis
    return f"per-GPU device total of {numbers.rank.text}"


def _params_text(numbers: ModelNumbers, limit: int) -> str:
    """The whole model's count: a training job's ranks each hold a part of it."""
    text = f"{numbers.params:,} parameters (limit {limit:,})"
    rank = numbers.rank
    if rank is None:
        return text
    held = f"; its most-loaded rank holds {rank.parameters:,}" if rank.parameters else ""
    return f"{text}: the whole model's, not a rank's{held}"


def _latency(numbers: ModelNumbers, limit_s: float) -> BudgetResult:
    if numbers.latency_s is None:
        raise GraphmemError("--max-latency needs a latency estimate: "
                            + numbers.latency_missing_reason)
    return _at_most("latency", numbers.latency_s, limit_s, "s",
                    f"roofline estimate {format_seconds(numbers.latency_s)} on"
                    f" {numbers.gpu_name} (a lower bound from datasheet peaks) vs limit"
                    f" {format_seconds(limit_s)}")


def _supported(numbers: ModelNumbers) -> BudgetResult:
    unsupported = sum(numbers.unsupported_ops.values())
    unknown = len(numbers.shape_unknown_nodes)
    parts = []
    if unsupported:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(numbers.unsupported_ops.items()))
        parts.append(f"{unsupported} nodes of ops without a cost rule ({ops})")
    if unknown:
        parts.append(f"{unknown} nodes with unknown shapes (e.g. {numbers.shape_unknown_nodes[0]})")
    message = "; ".join(parts) if parts else "every op has a cost rule and every shape is known"
    return _at_most("unsupported ops", unsupported + unknown, 0, "ops", message)


def _growth(numbers: ModelNumbers, baseline: Baseline, limit: float) -> list[BudgetResult]:
    if baseline.dims != numbers.dims:
        raise GraphmemError(
            f"baseline {baseline.source} was analyzed at {_dims_text(baseline.dims)}, this check"
            f" at {_dims_text(numbers.dims)}: growth compares like with like; regenerate the"
            " baseline with the same --batch/--dim")
    if baseline.mode != numbers.mode:
        raise GraphmemError(f"baseline {baseline.source} is a {baseline.mode} analysis, this"
                            f" check is {numbers.mode}: regenerate the baseline")
    rows = (("peak memory growth", numbers.peak_bytes, baseline.peak_bytes, format_bytes),
            ("parameters growth", numbers.params, baseline.params, lambda v: f"{v:,}"),
            ("FLOPs growth", numbers.flops, baseline.flops, lambda v: format_si(v, "FLOP")))
    results = []
    for name, now, before, fmt in rows:
        growth = _growth_percent(now, before)
        results.append(_at_most(
            name, growth, limit * 100, "%",
            f"{fmt(now)} vs {fmt(before)} in {baseline.source}: {_signed(growth)}"
            f" (limit +{limit * 100:g}%)"))
    return results


def _growth_percent(now: int, before: int) -> float:
    if before == 0:
        return 0.0 if now == 0 else math.inf
    return (now - before) / before * 100


def _signed(percent: float) -> str:
    return "+inf%" if math.isinf(percent) else f"{percent:+.2f}%"


def _dims_text(dims: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(dims.items())) or "fixed shapes"


def format_seconds(seconds: float) -> str:
    """0.0123 -> '12.3 ms'; 8e-4 -> '800 µs'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
