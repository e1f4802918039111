"""JSON for a fine-tuned or Hugging Face model: `model.finetune`. Render only.

The section is the FinetuneReport (graphmem/frontends/torch/finetune.py) field for field:
parameters by what training does with them, the transformers model built, LoRA, the NF4
bytes of a 4-bit base, MoE routing, the checkpointed layers. Absent (null) for a model that is
neither a transformers model nor fine-tuned, and for ONNX models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # written where the analysis has them: their modules are loaded then
    from graphmem.frontends.torch.finetune import (
        FinetuneReport,
        HfSummary,
        LoraSummary,
        MoeSummary,
        Nf4Summary,
        ParamCounts,
    )
    from graphmem.frontends.torch.nf4 import Nf4Bytes
    from graphmem.pipeline.analysis import Analysis


def finetune_section(analysis: Analysis) -> dict[str, Any]:
    """`{"finetune": ...}` for the `model` section of report/json/report.py."""
    report = analysis.finetune
    return {"finetune": finetune_json(report) if report is not None else None}


def finetune_json(report: FinetuneReport) -> dict[str, Any]:
    return {
        "parameters": _params(report.params),
        "hf_model": _hf(report.hf) if report.hf else None,
        "lora": _lora(report.lora) if report.lora else None,
        "nf4": _nf4(report.nf4) if report.nf4 else None,
        "moe": _moe(report.moe) if report.moe else None,
        "checkpointed_layers": list(report.checkpointed_layers),
        "pageable_optimizer_bytes": report.pageable_optimizer_bytes,
    }


def _params(counts: ParamCounts) -> dict[str, int]:
    return {"total": counts.total, "trainable": counts.trainable, "frozen": counts.frozen,
            "quantized": counts.quantized, "trainable_bytes": counts.trainable_bytes,
            "frozen_bytes": counts.frozen_bytes}


def _hf(hf: HfSummary) -> dict[str, Any]:
    return {"model_type": hf.model_type, "architecture": hf.architecture, "dtype": hf.dtype,
            "max_position_embeddings": hf.max_positions, "attention": hf.attention}


def _lora(lora: LoraSummary) -> dict[str, Any]:
    return {"rank": lora.rank, "alpha": lora.alpha, "scaling": lora.scaling,
            "dropout": lora.dropout, "targets": list(lora.targets), "modules": lora.modules,
            "adapter_params": lora.adapter_params, "adapter_dtype": lora.adapter_dtype}


def _nf4(nf4: Nf4Summary) -> dict[str, Any]:
    return {"modules": nf4.modules, "compute_dtype": nf4.compute_dtype,
            "blocksize": nf4.blocksize, "double_quant": nf4.double_quant,
            "bytes": _nf4_bytes(nf4.bytes),
            "largest_dequantized_bytes": nf4.largest_dequantized_bytes,
            "kept_in_precision": list(nf4.skipped)}


def _nf4_bytes(layout: Nf4Bytes) -> dict[str, int]:
    return {"weights": layout.weights, "total": layout.total, "packed": layout.packed,
            "absmax": layout.absmax, "nested_absmax": layout.nested_absmax,
            "nested_code": layout.nested_code, "offset": layout.offset, "code": layout.code}


def _moe(moe: MoeSummary) -> dict[str, int]:
    return {"experts": moe.experts, "experts_per_token": moe.experts_per_token,
            "expert_params": moe.expert_params, "total_params": moe.total_params,
            "active_params_per_token": moe.active_params_per_token,
            "flops_per_token_total": moe.flops_per_token_total,
            "flops_per_token_active": moe.flops_per_token_active}
