"""The words and defaults of the distributed and serving options, without the models behind
them: the option table (graphmem/options/table.py) builds the command line from these, so an
analysis that asks for none of them imports none of the distributed modules."""

from __future__ import annotations

VLLM, SGLANG, TRTLLM = "vllm", "sglang", "trtllm"
ENGINES = (VLLM, SGLANG, TRTLLM)
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")  # vLLM's --kv-cache-dtype
SCHEDULES = ("1f1b", "interleaved", "gpipe")  # pipeline schedules (parallel.py)
# traced: bytes as the graph holds them (torch autocast keeps fp32 parameters and gradients).
# zero-paper: 2-byte parameters and gradients, an fp32 master copy in the optimizer (ZeRO paper).
# deepspeed: zero-paper plus DeepSpeed's fp32 gradient partition (its estimators' 18 bytes).
# megatron: 2-byte parameters, fp32 gradients (Megatron-LM's main_grad buffer), fp32 master +
# Adam's two moments: 18 bytes, 6 + 12 / N with its distributed optimizer
# (megatron/training/theoretical_memory_usage.py).
LAYOUTS = ("traced", "zero-paper", "deepspeed", "megatron")
DEFAULT_BLOCK_SIZE = 16  # vLLM's default on CUDA (CacheConfig.block_size)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization
