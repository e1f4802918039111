"""`graphmem gpus --fits MODEL`: which GPUs of the table run this model."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console

from graphmem.cli.inputs import is_model_spec
from graphmem.devices.gpus import load_gpu_table
from graphmem.errors import GraphmemError
from graphmem.passes.fit import CudaReserve
from graphmem.pipeline.analysis import analyze_onnx
from graphmem.pipeline.planning import fits_on_each_gpu
from graphmem.report.terminal.plan import gpu_fits_table


def print_fits(model: str, batch: int | None, dims: Mapping[str, int],
               cuda_reserve_bytes: int | None, console: Console) -> None:
    if is_model_spec(model):
        raise GraphmemError(f"--fits {model}: give an .onnx file (for a PyTorch model use"
                            " 'graphmem analyze file.py:fn --input SHAPE --gpu NAME')")
    analysis = analyze_onnx(model, batch=batch, dims=dims, plan=False)
    reserve = None
    if cuda_reserve_bytes is not None:
        reserve = CudaReserve(cuda_reserve_bytes, "given with --cuda-reserve")
    rows = fits_on_each_gpu(analysis, load_gpu_table(), reserve)
    console.print(gpu_fits_table(analysis, rows))
