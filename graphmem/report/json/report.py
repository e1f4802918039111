"""The JSON result: a stable, versioned schema for CI and other tools (see README).

Sizes are integers when every dim is bound; with free dims they are formula strings in
those dims (sympy syntax, e.g. "4096 + 150528*batch"). The peak with free dims is the exact
maximum of its candidates: `memory.peak_bytes` as sympy text ("Max(a, b)"), and
`memory.peak_formula` in a form a program evaluates without a parser (docs/verdict.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from itertools import islice
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphmem.core.conventions import ROLE_KEYS
from graphmem.core.json_schema import ANALYSIS_KEYS, DIMS_KEYS, SCHEMA_VERSION
from graphmem.core.output_files import write_output_text
from graphmem.core.peak_formula import Formula
from graphmem.core.symbolic import SymInt
from graphmem.core.version import __version__
from graphmem.passes.costs import CostStatus, NodeCost
from graphmem.passes.liveness import LivenessResult, LiveTensor
from graphmem.passes.modules import ModuleReport
from graphmem.pipeline.analysis import Analysis
from graphmem.report.error_band import band_json
from graphmem.report.json.distributed import distributed_config, distributed_memory
from graphmem.report.json.finetune import finetune_section
from graphmem.report.json.plan import plan_gpu, plan_memory, sweep_json
from graphmem.report.json.rows import TextRows, fields_text, item, text
from graphmem.report.json.runtime import runtime_memory
from graphmem.report.json.serving import serving_memory
from graphmem.report.json.suggestions import suggestions_json
from graphmem.report.node_kinds import shared_node_kinds
from graphmem.report.out_of_memory import out_of_memory_json
from graphmem.report.words import caveat_text

if TYPE_CHECKING:  # a GPU's verdict and roofline: imported where the analysis has them
    from graphmem.passes.fit import GpuFit
    from graphmem.passes.roofline import NodeTime

__all__ = ["ANALYSIS_KEYS", "DIMS_KEYS", "ROLE_KEYS", "SCHEMA_VERSION", "quantity", "to_dict",
           "to_json_text", "write_json"]


def quantity(value: SymInt) -> int | str:
    """An exact integer, or the formula in the free dims."""
    if value.is_constant:
        return int(value)
    return value.formula()


def to_dict(analysis: Analysis, lazy_nodes: bool = False) -> dict[str, Any]:
    """The JSON document; `lazy_nodes`: the `nodes` rows as an iterable made row by row as
    the writer encodes them (a 40,000-node graph's rows are never all held as dicts)."""
    costs = analysis.costs
    return {
        "schema_version": SCHEMA_VERSION,
        "graphmem_version": __version__,
        "model": {
            "path": analysis.model.path,
            "name": analysis.model.name,
            "format": analysis.model.source_format,
            "opset": analysis.model.opset,
            "node_count": analysis.model.node_count,
            "shape_inference": analysis.model.shape_inference,
            "warnings": list(analysis.model.warnings),
            # the same warnings with a stable code where one was given (training/exports.py)
            "warning_details": [{"code": getattr(warning, "code", None), "text": str(warning)}
                                for warning in analysis.model.warnings],
            "notes": list(analysis.model.notes),
            "kernels": [{"op": k.op, "kernel": k.kernel, "detail": k.detail, "count": k.count,
                         "text": str(k)} for k in analysis.model.kernels],
            **finetune_section(analysis),
        },
        "config": {**_config(analysis), **distributed_config(analysis)},
        "dims": {
            "bound": analysis.dims.bound,
            "free": list(analysis.dims.free),
            "batch_dim": analysis.dims.batch_dim,
        },
        "params": {
            "count": analysis.params.count,
            "bytes": analysis.params.bytes,
            "buffer_count": analysis.params.buffer_count,
            "buffer_bytes": analysis.params.buffer_bytes,
            "constant_bytes": analysis.params.constant_bytes,
            "bytes_by_dtype": analysis.params.bytes_by_dtype,
            "quantized": [{"dtype": group.dtype, "count": group.count, "bytes": group.bytes}
                          for group in analysis.params.quantized],
            "quantization_bytes": analysis.params.quantization_bytes,
        },
        "flops": {
            "total": quantity(costs.total_flops),
            "macs": quantity(costs.total_macs),
            "bytes_read": quantity(costs.total_bytes_read),
            "bytes_written": quantity(costs.total_bytes_written),
        },
        "memory": {**_memory(analysis.liveness, lazy_nodes), **plan_memory(analysis, lazy_nodes),
                   **distributed_memory(analysis), **runtime_memory(analysis),
                   **serving_memory(analysis)},
        "nodes": _NodeRows(analysis) if lazy_nodes else list(_NodeRows(analysis)),
        "unsupported_ops": costs.unsupported_ops,
        "unknown_shapes": {
            "nodes": list(costs.shape_unknown_nodes),
            "values": list(analysis.liveness.unknown_size_values),
        },
        "control_flow_nodes": list(costs.subgraph_nodes),
        "modules": _modules(analysis.modules) if analysis.modules else None,
        "gpu": {**_gpu(analysis.fit), **plan_gpu(analysis)} if analysis.fit else None,
        "sweep": sweep_json(analysis.sweep),
        **suggestions_json(analysis),
    }


def _config(analysis: Analysis) -> dict[str, Any]:
    config: dict[str, Any] = {"mode": analysis.mode, "schedule": "model order"}
    training = analysis.training
    if training is not None:
        config.update(optimizer=training.optimizer, amp=training.amp,
                      grad_accum=training.grad_accum, micro_batch=training.micro_batch,
                      effective_batch=training.effective_batch)
    return config


def _memory(liveness: LivenessResult, lazy_rows: bool = False) -> dict[str, Any]:
    peak_node = liveness.order[liveness.peak_step]
    peak = liveness.peak_bytes
    formula = None if peak.is_constant else Formula(liveness.peak_candidates or (peak,))
    return {
        # the exact peak: a number, or the largest of the candidates at any dim values
        "peak_bytes": int(peak) if formula is None else formula.sympy_text(),
        "peak_formula": None if formula is None else formula.to_json(),
        # the live total at peak_step (with free dims: the candidate largest at the probe)
        "peak_step_bytes": quantity(peak),
        "peak_candidates": [quantity(c) for c in liveness.peak_candidates],
        "peak_step": liveness.peak_step,
        "peak_node": peak_node,
        "activation_peak_bytes": quantity(liveness.activation_peak_bytes),
        "resident_bytes": quantity(liveness.resident_bytes),
        "lower_bound_bytes": quantity(liveness.lower_bound_bytes),
        "lower_bound_node": liveness.order[liveness.lower_bound_step],
        "breakdown": {
            ROLE_KEYS[role]: quantity(size) for role, size in liveness.breakdown_at_peak.items()
        },
        "live_at_peak": (_LiveRows(liveness.live_at_peak) if lazy_rows
                         else [_live(t) for t in liveness.live_at_peak]),
        "timeline_bytes": _timeline(liveness),
        "order": list(liveness.order),
    }


def _timeline(liveness: LivenessResult) -> list[int] | list[int | str]:
    """Each step's live bytes as `quantity` writes them: a bound graph's numbers as the
    liveness has them (`step_numbers`), else each size's quantity."""
    numbers = liveness.step_numbers
    return list(numbers) if numbers is not None else _quantities(liveness.live_bytes_per_step)


def _quantities(sizes: Sequence[SymInt]) -> list[int | str]:
    """`quantity` of each size: `int` of each where all are numbers (a bound graph's 10^5
    steps), which is what `quantity` writes for a number."""
    try:
        return list(map(int, sizes))
    except ValueError:  # a size in free dims (SymInt.__int__): formulas where they are
        return [quantity(size) for size in sizes]


def _modules(report: ModuleReport) -> dict[str, Any]:
    return {
        "depth": report.depth,
        "rows": [
            {"module": row.module, "params": row.params, "macs": quantity(row.macs),
             "flops": quantity(row.flops), "bytes_at_peak": quantity(row.bytes_at_peak)}
            for row in report.rows
        ],
    }


def _live(tensor: LiveTensor) -> dict[str, Any]:
    return {"name": tensor.name, **_live_kind(tensor), "producer": tensor.producer,
            "last_consumer": tensor.last_consumer}


def _live_kind(tensor: LiveTensor) -> dict[str, Any]:
    return {"bytes": quantity(tensor.nbytes), "role": tensor.role.value, "dtype": tensor.dtype,
            "shape": tensor.shape}


def _node(cost: NodeCost, time: NodeTime | None) -> dict[str, Any]:
    """A node's row; the roofline's time and bound are null without a roofline."""
    return {"name": cost.name, **_op_fields(cost), "module": cost.module_path,
            **_kind_fields(cost), **_time_fields(time)}


def _op_fields(cost: NodeCost) -> dict[str, Any]:
    return {"op": cost.op_type, "domain": cost.domain}


def _kind_fields(cost: NodeCost) -> dict[str, Any]:
    """The fields nodes of one kind share (a decoder's layers repeat a few hundred kinds)."""
    return {
        "output_shapes": list(cost.output_shapes),
        "macs": quantity(cost.macs) if cost.status is CostStatus.OK else None,
        "flops": quantity(cost.flops) if cost.status is CostStatus.OK else None,
        "bytes_read": quantity(cost.bytes_read),
        "output_bytes": quantity(cost.bytes_written),
        "params": cost.param_count,
        "status": cost.status.value,
        "note": cost.note,
    }


def _time_fields(time: NodeTime | None) -> dict[str, Any]:
    return {
        "est_time_s": time.est_time_s if time else None,
        "bound": time.bound if time else None,
        "intensity_flops_per_byte": time.intensity_flops_per_byte if time else None,
    }


def _gpu(fit: GpuFit) -> dict[str, Any]:
    """The one verdict: `required_bytes` (the device total, see `basis`) against
    `memory_bytes`; `parts` add up to it."""
    return {
        "name": fit.gpu.name,
        "full_name": fit.gpu.full_name,
        "memory_bytes": fit.capacity_bytes,
        "datasheet_memory_bytes": fit.gpu.memory_bytes,
        "cuda_reserve_bytes": fit.reserve.bytes,
        "cuda_reserve_source": fit.reserve.source,
        "usable_bytes": fit.usable_bytes,
        "required_bytes": quantity(fit.required_bytes),
        "basis": fit.basis,
        "runtime": fit.runtime,
        "parts": {part.key: quantity(part.size_bytes) for part in fit.parts},
        "live_peak_bytes": quantity(fit.live_peak_bytes),
        "utilization": fit.utilization,
        "fits": fit.fits,
        "failure": fit.failure or None,
        # where the allocator bounded by the GPU first fails; required_bytes is the demand
        "out_of_memory": out_of_memory_json(fit.out_of_memory),
        "over_bytes": fit.over_bytes,
        # "fits", "tight" (the capacity within the measured error band) or "does not fit"
        "verdict": fit.verdict,
        "tight": fit.tight,
        "error_band": band_json(fit),
        "caveat": caveat_text(fit.caveat),  # the words of caveat_code
        "caveat_code": fit.caveat,
        "source": fit.gpu.source,
    }


class _NodeRows(TextRows):
    """The `nodes` rows, one dict per node, each made when the writer reaches it."""

    def __init__(self, analysis: Analysis) -> None:
        self.costs = analysis.costs
        self.roofline = analysis.roofline

    def __iter__(self) -> Iterator[dict[str, Any]]:
        times = self.roofline.nodes if self.roofline is not None else None
        for index, cost in enumerate(self.costs.nodes):
            yield _node(cost, None if times is None else times[index])

    def texts(self) -> Iterator[str]:
        """Each row as the C encoder writes `_node`'s dict, from its pieces: the fields of a
        kind of node (report/node_kinds.py: op, counts, time) encoded once per kind, each
        module path once, and the name per node (strings, escaped by the encoder's own
        function)."""
        nodes = self.costs.nodes
        times = self.roofline.nodes if self.roofline is not None else None
        kinds = shared_node_kinds(self.costs, self.roofline)
        heads, tails = [], []  # per kind: the op's fields; the rest of the row after the module
        for index in kinds.first:
            cost = nodes[index]
            heads.append(fields_text(_op_fields(cost)))
            tails.append(", " + fields_text(_kind_fields(cost)) + ", " + fields_text(
                _time_fields(None if times is None else times[index])) + "}")
        modules = {path: text(path) for path in set(map(_MODULE_PATH, nodes))}
        return map('{{"name": {}, {}, "module": {}{}'.format, map(text, map(_NAME, nodes)),
                   map(heads.__getitem__, kinds.of_node),
                   map(modules.__getitem__, map(_MODULE_PATH, nodes)),
                   map(tails.__getitem__, kinds.of_node))


_NAME = attrgetter("name")
_MODULE_PATH = attrgetter("module_path")


class _LiveRows(TextRows):
    """The `live_at_peak` rows, as _NodeRows: each made when the writer reaches it, and as
    text from the fields tensors of one size, role, dtype and shape share, encoded once."""

    def __init__(self, tensors: tuple[LiveTensor, ...]) -> None:
        self.tensors = tensors

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(_live, self.tensors)

    def texts(self) -> Iterator[str]:
        kinds: dict[tuple[Any, ...], str] = {}
        for tensor in self.tensors:
            key = (tensor.nbytes, tensor.role, tensor.dtype, tensor.shape)
            kind = kinds.get(key)
            if kind is None:
                kind = kinds[key] = fields_text(_live_kind(tensor))
            producer, last = tensor.producer, tensor.last_consumer
            yield ('{"name": ' + text(tensor.name) + ", " + kind + ', "producer": '
                   + ("null" if producer is None else text(producer)) + ', "last_consumer": '
                   + ("null" if last is None else text(last)) + "}")


def to_json_text(analysis: Analysis) -> str:
    return "".join(json_chunks(to_dict(analysis, lazy_nodes=True)))


def write_json(analysis: Analysis, path: Path) -> None:
    write_output_text(path, json_chunks(to_dict(analysis, lazy_nodes=True)))


# ----- the writer ------------------------------------------------------------------------------
# Indented as json.dumps(indent=2) down to PRETTY_DEPTH; below, each list item and each deeper
# value is one line from the C encoder (rows.py `item`): json.dumps with `indent` runs the
# pure-Python encoder (a 40,000-node graph took 4 s), and a node per line still reads and
# diffs well.
PRETTY_DEPTH = 2
_ROWS_PER_CHUNK = 4096  # rows joined into one piece of the text


def json_chunks(value: Any, depth: int = 0) -> Iterator[str]:
    """`value` (dicts, lists, TextRows, JSON scalars) as JSON text, in pieces."""
    yield from _chunks(value, depth)
    if depth == 0:
        yield "\n"


def _chunks(value: Any, depth: int) -> Iterator[str]:
    pad = "\n" + "  " * (depth + 1)
    if isinstance(value, dict) and value and depth < PRETTY_DEPTH:
        yield "{"
        for index, (key, entry) in enumerate(value.items()):
            yield ("," if index else "") + pad + json.dumps(str(key)) + ": "
            yield from _chunks(entry, depth + 1)
        yield "\n" + "  " * depth + "}"
    elif isinstance(value, TextRows) and depth < PRETTY_DEPTH + 1:
        rows = value.texts()
        head = next(rows, None)
        if head is None:
            yield "[]"
            return
        yield "[" + pad + head
        between = "," + pad
        for chunk in iter(lambda: list(islice(rows, _ROWS_PER_CHUNK)), []):
            yield between + between.join(chunk)
        yield "\n" + "  " * depth + "]"
    elif isinstance(value, list | tuple) and depth < PRETTY_DEPTH + 1:
        items = iter(value)
        first = next(items, _EMPTY)
        if first is _EMPTY:
            yield "[]"
            return
        if not isinstance(first, dict | list) and isinstance(value, list | tuple):
            yield item(value)  # numbers and names: one line
            return
        yield "[" + pad + item(first)
        for entry in items:
            yield "," + pad + item(entry)
        yield "\n" + "  " * depth + "]"
    else:
        yield _line(value)


def _line(value: Any) -> str:
    """`value` on one line as `item` writes it, TextRows inside a dict (str keys) too."""
    if isinstance(value, TextRows):
        return "[" + ", ".join(value.texts()) + "]"
    if isinstance(value, dict) and any(isinstance(entry, TextRows) for entry in value.values()):
        return "{" + ", ".join(text(key) + ": " + _line(entry)
                               for key, entry in value.items()) + "}"
    return item(value)


_EMPTY = object()
