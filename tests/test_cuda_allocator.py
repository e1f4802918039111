"""PyTorch's CUDA caching allocator, simulated: rounding, pools, split, coalesce, peaks.

The rules are c10/cuda/CUDACachingAllocator.cpp's; the numbers were checked against a real
H100 with benchmarks/allocator_gpu.py (benchmarks/results/allocator_h100.md).
"""

from __future__ import annotations

import random

import pytest

from graphmem.core.ir import Phase, Role
from graphmem.devices.gpus import find_gpu
from graphmem.errors import GraphmemError
from graphmem.passes.dims import bind_dims
from graphmem.pipeline.analysis import Analysis, ModelInfo
from graphmem.pipeline.run import run_passes
from graphmem.runtime_models.cuda_allocator import (
    AllocatorEvent,
    round_size,
    segment_bytes,
    simulate_caching_allocator,
)
from graphmem.runtime_models.torch_cuda import (
    Workspace,
    allocation_events,
    cuda_overhead,
    library_workspaces,
    torch_cuda_estimate,
)
from tests.builders import GraphBuilder

KIB, MIB = 1 << 10, 1 << 20


def allocs(*sizes: int) -> list[AllocatorEvent]:
    return [("alloc", i, size) for i, size in enumerate(sizes)]


def test_rounding_to_512_bytes() -> None:
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(MIB + 1) == MIB + 512


def test_one_byte_takes_a_512_byte_block_of_a_2_mib_small_segment() -> None:
    result = simulate_caching_allocator(allocs(1))
    assert result.allocated_peak_bytes == 512
    assert result.requested_peak_bytes == 1
    assert result.reserved_peak_bytes == 2 * MIB
    assert (result.segment_count, result.small_segment_count) == (1, 1)


def test_zero_bytes_allocate_nothing() -> None:
    # CUDACachingAllocator::allocate returns a null pointer for size 0
    result = simulate_caching_allocator([*allocs(0), ("free", 0, 0)])
    assert (result.allocated_peak_bytes, result.reserved_peak_bytes) == (0, 0)


def test_one_mib_is_small_one_mib_and_one_byte_is_large() -> None:
    assert segment_bytes(round_size(MIB)) == 2 * MIB
    assert segment_bytes(round_size(MIB + 1)) == 20 * MIB
    result = simulate_caching_allocator(allocs(MIB, MIB + 1))
    # 1 MiB in a 2 MiB small segment; 1 MiB + 512 in a 20 MiB large one
    assert result.allocated_peak_bytes == MIB + MIB + 512
    assert result.reserved_peak_bytes == 2 * MIB + 20 * MIB
    assert (result.segment_count, result.small_segment_count) == (2, 1)


def test_two_5_mib_requests_share_one_20_mib_segment() -> None:
    # the first splits the 20 MiB segment: 5 MiB used, 15 MiB free (> 1 MiB: split);
    # the second is the best fit in that 15 MiB block
    result = simulate_caching_allocator(allocs(5 * MIB, 5 * MIB))
    assert result.allocated_peak_bytes == 10 * MIB
    assert result.reserved_peak_bytes == 20 * MIB
    assert result.segment_count == 1


def test_from_10_mib_a_request_gets_its_own_segment_rounded_to_2_mib() -> None:
    assert segment_bytes(10 * MIB - 512) == 20 * MIB
    assert segment_bytes(10 * MIB) == 10 * MIB
    assert segment_bytes(11 * MIB) == 12 * MIB
    # 11 MiB in a 12 MiB segment: the 1 MiB rest is not > 1 MiB, so no split and the whole
    # block counts as allocated (max_memory_allocated says 12 MiB, as on the H100)
    eleven = simulate_caching_allocator(allocs(11 * MIB))
    assert (eleven.allocated_peak_bytes, eleven.reserved_peak_bytes) == (12 * MIB, 12 * MIB)
    # 10 MiB + 1 B -> 10 MiB + 512 in a 12 MiB segment; the rest 2 MiB - 512 > 1 MiB: split
    just_over = simulate_caching_allocator(allocs(10 * MIB + 1))
    assert just_over.allocated_peak_bytes == 10 * MIB + 512
    assert just_over.reserved_peak_bytes == 12 * MIB


def test_small_blocks_split_down_to_512_bytes() -> None:
    # small segment 1 (2 MiB): 1 MiB leaves a 1 MiB rest (>= 512: split); 1 MiB - 512 leaves
    # exactly 512 B (>= 512: split); 512 takes that rest: the segment is full, so the 1-byte
    # request opens small segment 2
    packed = simulate_caching_allocator(allocs(MIB, MIB - 512, 512, 1))
    assert packed.reserved_peak_bytes == 4 * MIB
    assert (packed.segment_count, packed.small_segment_count) == (2, 2)
    assert packed.allocated_peak_bytes == 2 * MIB + 512  # 1 B -> 512 B


def test_freed_hole_is_reused_by_best_fit_and_unsplit_rest_counts_as_allocated() -> None:
    events = [*allocs(6 * MIB, 6 * MIB), ("free", 0, 6 * MIB),
              ("alloc", 2, 8 * MIB), ("alloc", 3, 7 * MIB), ("alloc", 4, 5 * MIB)]
    # segment 1 (20 MiB): a[0,6) b[6,12) free[12,20); free a -> hole [0,6)
    # 8 MiB: best fit is the 8 MiB block [12,20) exactly (the 6 MiB hole is too small)
    # 7 MiB: nothing fits -> segment 2 (20 MiB): [0,7) + 13 MiB free
    # 5 MiB: best fit is the 6 MiB hole; its 1 MiB rest is not > 1 MiB: no split, 6 MiB used
    # allocated: b 6 + 8 + 7 + 6 = 27 MiB; reserved 40 MiB; requested 6 + 8 + 7 + 5 = 26 MiB
    result = simulate_caching_allocator(events)
    assert result.allocated_peak_bytes == 27 * MIB
    assert result.requested_peak_bytes == 26 * MIB
    assert result.reserved_peak_bytes == 40 * MIB


def test_freed_neighbours_coalesce() -> None:
    events = [*allocs(4 * MIB, 4 * MIB, 4 * MIB), ("free", 0, 4 * MIB), ("free", 1, 4 * MIB),
              ("alloc", 3, 8 * MIB), ("alloc", 4, 9 * MIB)]
    # [a 4][b 4][c 4][free 8]; freeing a then b merges them into one 8 MiB block at 0
    # 8 MiB: best fit among {8 @0, 8 @12}: equal sizes, lowest address -> [0,8), no rest
    # 9 MiB: nothing fits (8 @12 is too small) -> a second 20 MiB segment
    # allocated peak: c 4 + 8 + 9 = 21 MiB; before that a+b+c = 12 MiB
    result = simulate_caching_allocator(events)
    assert result.allocated_peak_bytes == 21 * MIB
    assert result.reserved_peak_bytes == 40 * MIB
    # without coalescing the two 4 MiB holes could not hold 8 MiB: a third segment would open
    assert result.segment_count == 2


def test_whole_segment_free_again_serves_a_smaller_request() -> None:
    # the 5 MiB block freed merges with its 15 MiB rest back into one 20 MiB block; a 19 MiB
    # request (>= 10 MiB: its own segment if nothing fits) searches the pool first and fits
    events = [*allocs(5 * MIB), ("free", 0, 5 * MIB), ("alloc", 1, 19 * MIB)]
    result = simulate_caching_allocator(events)
    # the free 20 MiB block fits; rest 1 MiB is not > 1 MiB: the whole 20 MiB is allocated
    assert result.reserved_peak_bytes == 20 * MIB
    assert result.allocated_peak_bytes == 20 * MIB


def test_small_and_large_pools_do_not_share_blocks() -> None:
    # a 20 MiB large segment with 15 MiB free cannot serve a 1 KiB request
    result = simulate_caching_allocator(allocs(5 * MIB, KIB))
    assert result.reserved_peak_bytes == 22 * MIB
    assert result.allocated_peak_bytes == 5 * MIB + KIB


@pytest.mark.parametrize("seed", range(3))
def test_invariants_on_random_sequences(seed: int) -> None:
    rng = random.Random(seed)
    events: list[AllocatorEvent] = []
    live: dict[int, int] = {}
    for i in range(400):
        if live and rng.random() < 0.45:
            victim = rng.choice(list(live))
            events.append(("free", victim, live.pop(victim)))
        live[i] = int(2 ** rng.uniform(0, 26))
        events.append(("alloc", i, live[i]))
    result = simulate_caching_allocator(events)
    assert result.requested_peak_bytes <= result.allocated_peak_bytes
    assert result.allocated_peak_bytes <= result.reserved_peak_bytes
    # a held block is its request rounded up to 512 B, or a whole unsplit block whose rest
    # was at most 1 MiB (large pool) or under 512 B (small pool)
    held = result.allocated_final_bytes
    assert sum(map(round_size, live.values())) <= held <= sum(
        round_size(size) + MIB for size in live.values())
    freed_all = simulate_caching_allocator(
        [*events, *(("free", b, size) for b, size in live.items())])
    assert freed_all.allocated_final_bytes == 0
    assert freed_all.reserved_peak_bytes == result.reserved_peak_bytes  # never released


def test_bad_events_are_one_line_errors() -> None:
    with pytest.raises(GraphmemError, match="not allocated"):
        simulate_caching_allocator([("free", "x", 4)])
    with pytest.raises(GraphmemError, match="allocated twice"):
        simulate_caching_allocator([("alloc", "x", 4), ("alloc", "x", 4)])
    with pytest.raises(GraphmemError, match="use 'alloc' or 'free'"):
        simulate_caching_allocator([("malloc", "x", 4)])


# --- events from an analysis, and the torch-cuda estimate ------------------------------------


def chain_analysis(op_type: str = "Relu") -> Analysis:
    b = GraphBuilder("chain")
    b.tensor("w", 3 * MIB // 4, Role.PARAMETER)  # 3 MiB
    b.tensor("x", 256 * KIB // 4, Role.INPUT)  # 256 KiB
    b.node("A", ["x", "w"], {"a": 6 * MIB // 4}, op_type)  # 6 MiB
    b.node("B", ["a"], {"b": 5 * MIB // 4})  # 5 MiB
    b.node("C", ["b"], {"c": 100})  # 400 B
    graph = b.build(["c"])
    info = ModelInfo("", graph.name, "ir", 0, len(graph.nodes), "none", ())
    return run_passes(graph, info, bind_dims(graph, None, {}), None, None, plan=False)


def test_events_follow_liveness() -> None:
    events = allocation_events(chain_analysis())
    # residents first (parameter, then input), then per node: its outputs, then the frees
    assert [(kind, size) for kind, _, size in events] == [
        ("alloc", 3 * MIB), ("alloc", 256 * KIB),
        ("alloc", 6 * MIB),  # A
        ("alloc", 5 * MIB), ("free", 6 * MIB),  # B, then a (last read by B)
        ("alloc", 400), ("free", 5 * MIB),  # C, then b
        ("free", 400),  # the graph output, dropped at the end of the step
    ]


def test_simulated_chain_by_hand() -> None:
    result = simulate_caching_allocator(allocation_events(chain_analysis()))
    # w 3 MiB: large segment 1 (20 MiB) [0,3); x 256 KiB: small segment (2 MiB)
    # a 6 MiB: segment 1 [3,9); b 5 MiB: segment 1 [9,14) (best fit: the 11 MiB rest)
    # peak allocated at B: 3 + 0.25 + 6 + 5 = 14.25 MiB; requested the same (all 512-aligned)
    # c 400 B -> 512 B in the small segment
    assert result.allocated_peak_bytes == 14 * MIB + 256 * KIB
    assert result.requested_peak_bytes == int(chain_analysis().liveness.peak_bytes)
    assert result.reserved_peak_bytes == 22 * MIB


def test_two_steps_reuse_the_first_steps_segments() -> None:
    one = simulate_caching_allocator(allocation_events(chain_analysis(), steps=1))
    two = simulate_caching_allocator(allocation_events(chain_analysis(), steps=2))
    # step 2 finds a and b's blocks coalesced back into the free 17 MiB of segment 1
    assert two.reserved_peak_bytes == one.reserved_peak_bytes
    assert two.allocated_peak_bytes == one.allocated_peak_bytes


def test_workspaces_per_thread_and_library() -> None:
    overhead = cuda_overhead("hopper")
    assert overhead.cublas_workspace_bytes == 32 * MIB  # measured on the H100
    assert cuda_overhead("turing").cublas_workspace_bytes == 4 * MIB * 2 + 16 * KIB * 8
    assert library_workspaces(chain_analysis().graph, overhead) == ()  # no matmul
    b = GraphBuilder("mlp")
    b.tensor("x", 8, Role.INPUT)
    b.node("fc", ["x"], {"y": 8}, "aten.addmm.default", Phase.FORWARD)
    backward = b.node("dx", ["y"], {"gx": 8}, "aten.mm.default", Phase.BACKWARD)
    backward.outputs[0].role = Role.ACTIVATION_GRADIENT
    names = [w.name for w in library_workspaces(b.build(["gx"]), overhead)]
    # forward addmm: the main thread's cuBLAS handle and cuBLASLt; backward mm: autograd's
    assert names == ["cuBLAS workspace", "cuBLASLt workspace",
                     "cuBLAS workspace (autograd thread)"]


def test_estimate_parts_add_up_to_the_device_total() -> None:
    gpu = find_gpu("h100-sxm")
    analysis = chain_analysis("MatMul")  # a forward cuBLAS op: one workspace, allocated first
    estimate = torch_cuda_estimate(analysis, gpu)
    overhead = cuda_overhead(gpu.architecture)
    workspace = overhead.cublas_workspace_bytes
    events = allocation_events(analysis, 1, (Workspace("cuBLAS", workspace),))
    assert events[0] == ("alloc", ("workspace", "cuBLAS"), workspace)
    assert estimate.tensors_at_peak_bytes == int(analysis.liveness.peak_bytes)
    assert (estimate.tensors_at_peak_bytes + estimate.allocator_overhead_bytes
            + estimate.context_bytes) == estimate.device_total_bytes
    # 32 MiB workspace (its own segment) + the 22 MiB of the chain
    assert estimate.device_total_bytes == overhead.context_bytes + workspace + 22 * MIB
    assert estimate.runtime_peak_bytes == workspace + 14 * MIB + 256 * KIB
    no_blas = torch_cuda_estimate(chain_analysis(), gpu, context_override_bytes=10**9)
    assert no_blas.context_bytes == 10**9
    assert no_blas.device_total_bytes == 10**9 + 22 * MIB


@pytest.mark.torch
@pytest.mark.slow
def test_torch_step_events_replay_the_liveness_peak() -> None:
    # the events of a traced training step, replayed, hold exactly graphmem's live tensors:
    # the requested peak is the liveness peak, and every step buffer is freed by its end
    from graphmem import analyze_torch
    from tests.torch_models.small import TinyGPT

    analysis = analyze_torch(TinyGPT(), ["8x64:int64"], train=True, plan=False, suggest=False)
    events = allocation_events(analysis, steps=2)
    result = simulate_caching_allocator(events)
    assert result.requested_peak_bytes == int(analysis.liveness.peak_bytes)
    residents = sum(size for kind, buffer, size in events if buffer[0] == "resident")
    assert result.allocated_final_bytes == sum(map(round_size, [
        size for kind, buffer, size in events if buffer[0] == "resident" and size]))
    assert residents == int(analysis.liveness.resident_bytes)


@pytest.mark.parametrize(("name", "train", "allocated_bytes", "reserved_bytes"), [
    # measured on an NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, each case in a fresh process,
    # second step (benchmarks/results/allocator_h100.md): max_memory_allocated / _reserved
    ("TinyGPT", False, 36_771_840, 37_748_736),
    ("TinyGPT", True, 72_685_568, 73_400_320),
    ("MLP", False, 137_662_464, 138_412_032),
])
@pytest.mark.slow
@pytest.mark.torch
def test_prediction_matches_the_h100(name: str, train: bool, allocated_bytes: int,
                                     reserved_bytes: int) -> None:
    from torch import nn

    from graphmem import analyze_torch
    from tests.torch_models.small import TinyGPT

    if name == "TinyGPT":
        model, spec = TinyGPT(), "8x64:int64"
    else:  # benchmarks/allocator_gpu.py's MLP
        model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                              nn.ReLU(), nn.Linear(4096, 1000))
        spec = "64x1024"
    analysis = analyze_torch(model, [spec], train=train, plan=False, suggest=False)
    estimate = torch_cuda_estimate(analysis, find_gpu("h100-sxm"))
    context = cuda_overhead("hopper").context_bytes
    assert estimate.runtime_peak_bytes == pytest.approx(allocated_bytes, rel=1e-3)
    assert estimate.device_total_bytes - context == reserved_bytes
