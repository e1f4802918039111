"""The JSON result: a stable, versioned schema for CI and other tools (see README).

Sizes are integers when every dim is bound; with free dims they are formula strings in
those dims (sympy syntax, e.g. "4096 + 150528*batch").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphmem.core.conventions import ROLE_KEYS
from graphmem.core.json_schema import ANALYSIS_KEYS, DIMS_KEYS, SCHEMA_VERSION
from graphmem.core.symbolic import SymInt
from graphmem.core.version import __version__
from graphmem.passes.costs import CostStatus, NodeCost
from graphmem.passes.fit import GpuFit
from graphmem.passes.liveness import LivenessResult, LiveTensor
from graphmem.passes.modules import ModuleReport
from graphmem.pipeline.analysis import Analysis
from graphmem.report.json.distributed import distributed_config, distributed_memory
from graphmem.report.json.plan import plan_gpu, plan_memory, sweep_json, with_node_times
from graphmem.report.json.runtime import runtime_memory
from graphmem.report.json.suggestions import suggestions_json

__all__ = ["ANALYSIS_KEYS", "DIMS_KEYS", "ROLE_KEYS", "SCHEMA_VERSION", "quantity", "to_dict",
           "to_json_text", "write_json"]


def quantity(value: SymInt) -> int | str:
    """An exact integer, or the formula in the free dims."""
    if value.is_constant:
        return int(value)
    return value.formula()


def to_dict(analysis: Analysis) -> dict[str, Any]:
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
        },
        "flops": {
            "total": quantity(costs.total_flops),
            "macs": quantity(costs.total_macs),
            "bytes_read": quantity(costs.total_bytes_read),
            "bytes_written": quantity(costs.total_bytes_written),
        },
        "memory": {**_memory(analysis.liveness), **plan_memory(analysis),
                   **distributed_memory(analysis), **runtime_memory(analysis)},
        "nodes": with_node_times([_node(n) for n in costs.nodes], analysis.roofline),
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


def _memory(liveness: LivenessResult) -> dict[str, Any]:
    peak_node = liveness.order[liveness.peak_step]
    return {
        "peak_bytes": quantity(liveness.peak_bytes),
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
        "live_at_peak": [_live(t) for t in liveness.live_at_peak],
        "timeline_bytes": [quantity(s) for s in liveness.live_bytes_per_step],
        "order": list(liveness.order),
    }


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
    return {
        "name": tensor.name,
        "bytes": quantity(tensor.nbytes),
        "role": tensor.role.value,
        "dtype": tensor.dtype,
        "shape": tensor.shape,
        "producer": tensor.producer,
        "last_consumer": tensor.last_consumer,
    }


def _node(cost: NodeCost) -> dict[str, Any]:
    return {
        "name": cost.name,
        "op": cost.op_type,
        "domain": cost.domain,
        "module": cost.module_path,
        "output_shapes": list(cost.output_shapes),
        "macs": quantity(cost.macs) if cost.status is CostStatus.OK else None,
        "flops": quantity(cost.flops) if cost.status is CostStatus.OK else None,
        "bytes_read": quantity(cost.bytes_read),
        "output_bytes": quantity(cost.bytes_written),
        "params": cost.param_count,
        "status": cost.status.value,
        "note": cost.note,
    }


def _gpu(fit: GpuFit) -> dict[str, Any]:
    return {
        "name": fit.gpu.name,
        "full_name": fit.gpu.full_name,
        "memory_bytes": fit.capacity_bytes,
        "datasheet_memory_bytes": fit.gpu.memory_bytes,
        "cuda_reserve_bytes": fit.reserve.bytes,
        "cuda_reserve_source": fit.reserve.source,
        "usable_bytes": fit.usable_bytes,
        "required_bytes": quantity(fit.required_bytes),
        "utilization": fit.utilization,
        "fits": fit.fits,
        "source": fit.gpu.source,
    }


def to_json_text(analysis: Analysis) -> str:
    return json.dumps(to_dict(analysis), indent=2) + "\n"


def write_json(analysis: Analysis, path: Path) -> None:
    path.write_text(to_json_text(analysis))
