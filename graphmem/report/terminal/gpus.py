"""`graphmem gpus`: the GPU table as the terminal shows it."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from graphmem.core.units import format_bytes
from graphmem.devices.gpus import GpuSpec, load_gpu_table


def _tflops(rate: float | None) -> str:
    return "-" if rate is None else f"{rate / 1e12:.1f}"


def _row(gpu: GpuSpec) -> tuple[str, ...]:
    return (
        gpu.name,
        gpu.full_name,
        gpu.architecture,
        format_bytes(gpu.capacity_bytes),
        f"{gpu.memory_bandwidth_bytes_per_s / 1e9:.0f}",
        _tflops(gpu.fp32_flops_per_s),
        _tflops(gpu.fp16_flops_per_s),
        _tflops(gpu.bf16_flops_per_s),
    )


def print_gpu_table(console: Console) -> None:
    table = Table(title="GPUs graphmem knows: memory, bandwidth (GB/s), dense TFLOP/s")
    table.add_column("name", no_wrap=True)
    table.add_column("GPU", overflow="fold")
    for column in ("arch", "memory", "GB/s", "FP32", "FP16", "BF16"):
        table.add_column(column, no_wrap=True, justify="right" if column != "arch" else "left")
    for gpu in load_gpu_table():
        table.add_row(*_row(gpu))
    console.print(table)
    console.print("Use the name with --gpu (case-insensitive; spaces, '_' and '-' are ignored)."
                  " memory: what the driver reports, the capacity every verdict holds a model"
                  " against (less than the datasheet's GB: ECC and driver reservations);"
                  " FP16/BF16 are tensor-core rates; sources: graphmem/devices/data/gpus.toml.")
