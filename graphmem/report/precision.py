"""A precision the GPU runs no faster than float32: one wording for the terminal, the HTML and
the JSON (graphmem/passes/roofline.py `RooflineResult.unaccelerated_flops`).

bfloat16 on a T4 or V100 (no bf16 tensor cores) passes every memory check and buys no speed:
the roofline times it at the FP32 rate, and the user should hear it before choosing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a GPU's roofline: imported where the analysis has one
    from graphmem.passes.roofline import RooflineResult

_FAST = ("float16", "bfloat16")


def precision_warnings(roofline: RooflineResult | None) -> tuple[str, ...]:
    """One line per reduced precision the GPU does not accelerate, with its share of FLOPs."""
    if roofline is None or not roofline.unaccelerated_flops:
        return ()
    from graphmem.devices.gpus import find_gpu

    gpu = find_gpu(roofline.gpu_name)
    total = sum(t.flops for t in roofline.nodes)
    lines = []
    for dtype, flops in roofline.unaccelerated_flops:
        share = flops / total if total else 1.0
        faster = [d for d in _FAST if d != dtype
                  and gpu.flops_per_s_for(d) > gpu.fp32_flops_per_s]
        hint = f"; {faster[0]} is its fast precision" if faster else ""
        lines.append(f"{share:.0%} of the FLOPs run in {dtype}, which {gpu.full_name} runs no"
                     f" faster than float32 (no {dtype} tensor cores): timed at its FP32 rate,"
                     f" {gpu.fp32_flops_per_s / 1e12:.1f} TFLOP/s{hint}")
    return tuple(lines)


def unaccelerated_json(roofline: RooflineResult) -> dict[str, Any]:
    """`roofline.unaccelerated_flops`: FLOPs by dtype the GPU runs at its FP32 rate."""
    return {dtype: flops for dtype, flops in roofline.unaccelerated_flops}
