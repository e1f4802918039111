"""Communication buffers beside the traced tensors (graphmem/distributed/comm_buffers.py):
ring attention's K/V blocks under context parallel and NCCL's buffers per communicator,
worked out by hand."""

from __future__ import annotations

import pytest

from graphmem import analyze
from graphmem.core.conventions import TrainingOptions
from graphmem.distributed.comm_buffers import (
    NCCL_BUFFSIZE,
    nccl_estimate,
    ring_attention_bytes,
)
from graphmem.distributed.parallel import ParallelLayout
from graphmem.distributed.strategies import DistributedConfig
from graphmem.pipeline.request import Request
from tests.helpers.llm_configs import TINY_LLAMA

MIB = 1 << 20


def test_nccl_default_buffer_is_4_mib() -> None:
    # NCCL's documented NCCL_BUFFSIZE default: 4,194,304 bytes
    assert NCCL_BUFFSIZE == 4_194_304


def test_one_communicator_per_group_larger_than_one() -> None:
    # N = 4, T = 2, P = 2, C = 2, E = 4, 2 channels of 4 MiB per peer:
    # data parallel ring of 4: 2 peers -> 16 MiB; tensor, pipeline, context groups of 2:
    # 1 peer each -> 8 MiB x 3; expert all-to-all over 4: 3 peers -> 24 MiB; 64 MiB in all
    layout = ParallelLayout(pipeline=2, context=2, expert=4)
    estimate = nccl_estimate(4, 2, layout)
    assert [(c.group, c.peers, c.nccl_bytes // MIB) for c in estimate.communicators] == [
        ("data parallel", 2, 16), ("tensor parallel", 1, 8), ("pipeline parallel", 1, 8),
        ("context parallel", 1, 8), ("expert parallel", 3, 24)]
    assert estimate.total_bytes == 64 * MIB


def test_one_gpu_has_no_communicator() -> None:
    estimate = nccl_estimate(1, 1, ParallelLayout())
    assert estimate.communicators == () and estimate.total_bytes == 0


@pytest.mark.parametrize(("kv", "context", "tp", "expected"), [
    (4096, 1, 1, 0),  # no context parallel: no ring
    # C = 2: the backward's 2 buffers of (K/V, gradients) = 4 blocks of 4,096 / 2 = 8,192
    (4096, 2, 1, 4 * 2048),
    # C = 8, T = 2: the forward keeps all 8 received blocks of 4,096 / 16 = 256 -> 2,048
    (4096, 8, 2, 8 * 256),
    (4097, 2, 1, 4 * 2049),  # a block rounds up to whole bytes
])
def test_ring_attention_blocks(kv: int, context: int, tp: int, expected: int) -> None:
    assert ring_attention_bytes(kv, context, tp) == expected


@pytest.mark.torch
def test_traced_llama_ring_blocks_are_its_kv_heads() -> None:
    # tiny Llama (bf16, 2 KV heads of 32 for 4 query heads, seq 16, batch 1): transformers
    # repeats K and V to 4 heads before the kernel; the ring sends the 2-head tensors:
    # K = V = 16 x 2 x 32 x 2 B = 2,048, K + V = 4,096 per layer. C = 2: 4 blocks of
    # 4,096 / 2 = 8,192 on the rank, in its total; the context group's NCCL: 8 MiB
    result = analyze(Request(TINY_LLAMA, batch=1, dims={"seq": 16}, plan=False,
                             training=TrainingOptions(optimizer="adamw", amp="bf16"),
                             distributed=DistributedConfig("ddp", 1, parallel=ParallelLayout(
                                 context=2))))
    report = result.distributed
    assert report.plan.attention_kv_bytes == 16 * 2 * 32 * 2 * 2 == 4096
    (row,) = report.plan.rows
    memory = row.memory
    assert memory.ring_attention_bytes == 8192
    assert memory.total_bytes == 8192 + (
        memory.parameters_bytes + memory.gradients_bytes + memory.optimizer_state_bytes
        + memory.temporaries_bytes + memory.activations_bytes + memory.gathered_bytes
        + memory.buckets_bytes)
    assert report.nccl_bytes == 8 * MIB  # the context-parallel pair: 4 MiB x 2 x 1 peer
